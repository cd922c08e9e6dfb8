import JSON

/// Template version ids (docs/templates.md): `tv_` + lowercase RFC 4648 base32 (no padding, 52
/// characters) of SHA-256 over a canonical encoding of the template's content.
///
/// The hashed bytes are the canonical compact JSON (`JSONValue.serialized()`: keys sorted by
/// UTF-8 bytes, minimal escaping, `1.0` written as `1`) of
/// ```
/// {"activity_type": …, "attributes_type": …, "binding_id": …, "renderer_digest": …,
///  "resources": [{"bytes": …, "path": …, "sha256": …}, …],   // sorted by path (UTF-8 bytes)
///  "schema": <schema or null>, "tv": 1}
/// ```
/// so equal content gives the same id whatever the key order of the schema or the order of
/// the resources, and any change of schema, resources, renderer or names gives a new id.
public enum TemplateVersion {
    /// The id prefix.
    public static let prefix = "tv_"
    /// Length of an id: `tv_` + 52 base32 characters.
    public static let length = 55

    /// Derives the template version id of a prepared template.
    ///
    /// - Parameters:
    ///   - bindingId, activityType, attributesType, rendererDigest: as in the prepare request.
    ///   - schema: the `schema` document as sent (nil and `.null` are the same: no schema).
    ///   - resources: declared resources, any order.
    ///   - sha256: SHA-256 (must return 32 bytes), injected from the crypto module.
    /// - Returns: `"tv_"` + 52 lowercase base32 characters.
    public static func derive(
        bindingId: String, activityType: String, attributesType: String, rendererDigest: String,
        schema: JSONValue?, resources: [PrepareManifest.Resource],
        sha256: ([UInt8]) -> [UInt8]
    ) -> String {
        prefix
            + base32(
                sha256(
                    canonicalBytes(
                        bindingId: bindingId, activityType: activityType, attributesType: attributesType,
                        rendererDigest: rendererDigest, schema: schema, resources: resources)))
    }

    /// The exact bytes `derive` hashes (see the type's documentation).
    public static func canonicalBytes(
        bindingId: String, activityType: String, attributesType: String,
        rendererDigest: String, schema: JSONValue?,
        resources: [PrepareManifest.Resource]
    ) -> [UInt8] {
        let sorted = resources.sorted { a, b in
            if !a.path.utf8.elementsEqual(b.path.utf8) { return a.path.utf8.lexicographicallyPrecedes(b.path.utf8) }
            if a.sha256 != b.sha256 { return a.sha256.utf8.lexicographicallyPrecedes(b.sha256.utf8) }
            return a.bytes < b.bytes
        }
        let doc = JSONValue.object([
            "tv": .int(1),
            "binding_id": .string(bindingId),
            "activity_type": .string(activityType),
            "attributes_type": .string(attributesType),
            "renderer_digest": .string(rendererDigest),
            "schema": schema ?? .null,
            "resources": .array(
                sorted.map {
                    .object(["path": .string($0.path), "sha256": .string($0.sha256), "bytes": .int(Int64($0.bytes))])
                })
        ])
        return doc.serialized()
    }

    /// Lowercase RFC 4648 base32 without padding (32 bytes → 52 characters).
    public static func base32(_ bytes: [UInt8]) -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 8 + 4) / 5)
        var buffer: UInt32 = 0
        var bits = 0
        for b in bytes {
            buffer = (buffer << 8) | UInt32(b)
            bits += 8
            while bits >= 5 {
                bits -= 5
                out.append(alphabet[Int((buffer >> UInt32(bits)) & 31)])
            }
            buffer &= (1 << UInt32(bits)) - 1
        }
        if bits > 0 { out.append(alphabet[Int((buffer << UInt32(5 - bits)) & 31)]) }
        return String(decoding: out, as: UTF8.self)
    }
}
