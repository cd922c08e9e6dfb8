/// The shape of an APNs device token as the device hands it over (Apple "Registering your app
/// with APNs": the token is opaque bytes, sent to APNs as hexadecimal in the request path
/// `/3/device/<token>`; docs/security.md "Input bounds").
public enum APNsToken {
    /// Longest token accepted, in hex digits (256 bytes; today's tokens are 32 or 100 bytes).
    public static let maxHexDigits = 512

    /// True when `token` is a non-empty, even number (≤ `maxHexDigits`) of hex digits
    /// (`0-9 a-f A-F`): what APNs can take in its path, so nothing else reaches the send.
    public static func isValid(_ token: String) -> Bool {
        let b = token.utf8
        guard !b.isEmpty, b.count % 2 == 0, b.count <= maxHexDigits else { return false }
        return b.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x46) || ($0 >= 0x61 && $0 <= 0x66) }
    }

    /// `400 INVALID_REQUEST` naming `token` unless `isValid(token)`.
    public static func check(_ token: String, field: String = "token") throws {
        guard isValid(token) else {
            throw DomainError.invalid(field, "\(field) must be an APNs device token: an even number (at most \(maxHexDigits)) of hexadecimal digits")
        }
    }
}
