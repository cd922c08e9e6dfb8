import Foundation

/// Where an uploaded FCM service account may send its OAuth2 assertion (docs/security.md
/// "Provider credentials"): the dispatcher POSTs to `token_uri`, so a tenant-chosen URL would
/// be a server-side request forgery. Allowed: exactly Google's token endpoint (Google "Using
/// OAuth 2.0 for Server to Server Applications": `https://oauth2.googleapis.com/token`), or any
/// path on the origin (scheme, host, port) of `LIVERELAY_FCM_URL` — which the operator chose,
/// e.g. the local sandbox.
public enum TokenURIPolicy {
    /// Google's OAuth2 token endpoint, the `token_uri` of every Google service-account key file.
    public static let googleTokenURI = "https://oauth2.googleapis.com/token"

    /// True when `tokenURI` is Google's endpoint or lies on `fcmURL`'s origin; no user info,
    /// no fragment.
    public static func allows(_ tokenURI: String, fcmURL: String) -> Bool {
        if tokenURI == googleTokenURI { return true }
        guard let u = URLComponents(string: tokenURI), let f = URLComponents(string: fcmURL),
            u.user == nil, u.password == nil, u.fragment == nil,
            let scheme = u.scheme?.lowercased(), let host = u.host?.lowercased(), !host.isEmpty,
            scheme == f.scheme?.lowercased(), host == f.host?.lowercased()
        else { return false }
        func port(_ c: URLComponents, _ scheme: String) -> Int { c.port ?? (scheme == "https" ? 443 : 80) }
        return port(u, scheme) == port(f, scheme)
    }
}
