import Foundation
import Crypto

/// The `LiveRelay-Signature` header (docs/webhooks.md "Verifying signatures"):
/// `t=<unix seconds>,v1=<hex>[,v1=<hex>…]`, one `v1` per active secret, each the lowercase hex
/// HMAC-SHA-256 (OpenSSL) with key = the whole `whsec_…` secret as UTF-8 and message =
/// `"<t>.<raw body>"`. Source: RFC 2104; the scheme follows Stripe's "Check the webhook
/// signatures" page.
public enum WebhookSignature {
    /// One `v1` value: lowercase hex of HMAC-SHA-256(secret, "<t>.<body>").
    public static func v1(secret: String, timestamp: Int64, body: [UInt8]) -> String {
        Digest.hmacSHA256Hex(key: Array(secret.utf8), data: Array("\(timestamp).".utf8) + body)
    }

    /// The whole header value for `secrets` (newest first) at `timestamp` (unix seconds).
    public static func header(timestamp: Int64, secrets: [String], body: [UInt8]) -> String {
        (["t=\(timestamp)"] + secrets.map { "v1=" + v1(secret: $0, timestamp: timestamp, body: body) }).joined(separator: ",")
    }

    /// True when `header` carries `t` within `toleranceSeconds` of `now` and a `v1` equal
    /// (constant-time) to the one `secret` gives for `body`.
    public static func verify(header: String, secret: String, body: [UInt8], now: Date, toleranceSeconds: Double = 300) -> Bool {
        var t: Int64?
        var sigs: [String] = []
        for part in header.split(separator: ",") {
            let kv = part.split(separator: "=", maxSplits: 1).map(String.init)
            guard kv.count == 2 else { continue }
            if kv[0] == "t" { t = Int64(kv[1]) } else if kv[0] == "v1" { sigs.append(kv[1]) }
        }
        guard let t, abs(now.timeIntervalSince1970 - Double(t)) <= toleranceSeconds else { return false }
        let expected = Array(v1(secret: secret, timestamp: t, body: body).utf8)
        return sigs.contains { ConstantTime.equals(Array($0.utf8), expected) }
    }
}
