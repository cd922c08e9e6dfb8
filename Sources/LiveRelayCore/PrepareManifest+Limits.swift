/// docs/limits.md limits on the prepare request (`POST /v1/installations/{id}/start-targets`), also
/// reported by `GET /v1/remote-updates/capabilities`. Each violation is `400 INVALID_REQUEST`
/// with `details.field`, `details.limit` and `details.actual`.
public enum PrepareLimits {
    /// `bundle.bytes` ≤ 16 MiB (16,777,216 bytes).
    public static let maxBundleBytes = 16 * 1024 * 1024
    /// `bundle.modules` ≤ 256.
    public static let maxBundleModules = 256
    /// `bundle.files` ≤ 512.
    public static let maxBundleFiles = 512
    /// At most 254 declared `resources`.
    public static let maxResources = 254
    /// A resource `path` is at most 255 bytes of UTF-8.
    public static let maxResourcePathBytes = 255
    /// The start manifest (binding_id, activity_type, attributes_type, renderer_digest, schema,
    /// bundle; serialized as canonical compact JSON) is at most 8 KiB (8,192 bytes).
    public static let maxStartManifestBytes = 8 * 1024
    /// `activity_type`, `attributes_type`, `renderer_digest`: 1–128 Unicode code points.
    public static let maxNameLength = 128
    /// `binding_id`: 1–255 bytes of UTF-8.
    public static let maxBindingIdBytes = 255
    /// `idempotency_key` (optional here, docs/http-conventions.md): 1–255 printable characters.
    public static let maxIdempotencyKeyLength = 255
}
