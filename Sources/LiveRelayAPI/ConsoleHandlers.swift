import HTTPServer
import LiveRelayConsole

/// The tenant console (docs/console.md): static files built into the binary, served without a
/// credential (they hold no tenant data; the page calls the public API with the master key the
/// person pastes).
///
/// | method & path | answers |
/// | --- | --- |
/// | `GET /console` | `308` to `/console/` |
/// | `GET /console/` | `index.html` |
/// | `GET /console/{file}` | that file (`console.js`, `console.css`, `favicon.svg`, `index.html`), else `404 NOT_FOUND` |
///
/// Every file answer carries `Content-Security-Policy: default-src 'self'` (no inline script or
/// style, no other origin), `X-Content-Type-Options: nosniff`, `X-Frame-Options: DENY`,
/// `Referrer-Policy: no-referrer` and `Cache-Control: no-cache`. `HEAD` works through the router's
/// GET fallback.
enum ConsoleHandlers {
    /// The Content-Security-Policy of every console file.
    static let contentSecurityPolicy = "default-src 'self'"

    /// `GET /console`: `308` to `/console/`.
    static func redirect(_ ctx: APIContext, _ req: HTTPRequest) -> HTTPResponse {
        HTTPResponse(status: 308, headers: [("Location", "/console/"), ("Cache-Control", "no-cache")])
    }

    /// `GET /console/`: `index.html`.
    static func index(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        try file("index.html")
    }

    /// `GET /console/{file}`: that file.
    /// - Throws: `404 NOT_FOUND` (`HTTPError`) for a name that is not a console file.
    static func namedFile(_ ctx: APIContext, _ req: HTTPRequest) throws -> HTTPResponse {
        try file(req.pathParameters["file"] ?? "")
    }

    /// The response for console file `name` (no directory part).
    static func file(_ name: String) throws -> HTTPResponse {
        guard let asset = ConsoleAssets.asset(named: name) else {
            throw HTTPError(status: 404, code: "NOT_FOUND", message: "no console file \(name.debugDescription)")
        }
        return HTTPResponse(
            status: 200,
            headers: [
                ("Content-Type", asset.contentType),
                ("Content-Security-Policy", contentSecurityPolicy),
                ("X-Content-Type-Options", "nosniff"),
                ("X-Frame-Options", "DENY"),
                ("Referrer-Policy", "no-referrer"),
                ("Cache-Control", "no-cache")
            ], body: asset.bytes)
    }
}
