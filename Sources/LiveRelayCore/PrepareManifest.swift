import JSON

/// The validated body of `POST /v1/installations/{id}/start-targets` ("prepare", docs/endpoints.md),
/// checked against the limits of docs/limits.md (`PrepareLimits`, `StateLimits`).
///
/// Body shape:
/// ```
/// {"binding_id": "…", "activity_type": "…", "attributes_type": "…", "renderer_digest": "…",
///  "schema": {…}?, "resources": [{"path": "img/a.png", "sha256": "<64 hex>", "bytes": 1234}]?,
///  "bundle": {"bytes": 0, "modules": 0, "files": 0}, "sample_state": {…}?, "idempotency_key": "…"?}
/// ```
/// Optional members given as `null` count as absent. Whether the installation and binding
/// exist, and idempotency replay, are checked by the caller.
public struct PrepareManifest: Sendable {
    /// One declared resource of the bundle.
    public struct Resource: Sendable, Hashable {
        /// Normalised relative path (see `PrepareManifest.parse(_:)`), ≤ 255 UTF-8 bytes.
        public let path: String
        /// SHA-256 of the resource's content: 64 lowercase hexadecimal digits.
        public let sha256: String
        /// Size of the resource in bytes (≥ 0).
        public let bytes: Int
    }

    /// `binding_id`: 1–255 UTF-8 bytes (existence checked by the caller).
    public let bindingId: String
    /// `activity_type`: 1–128 code points.
    public let activityType: String
    /// `attributes_type`: 1–128 code points (the ActivityKit attributes type sent on start).
    public let attributesType: String
    /// `renderer_digest`: 1–128 code points.
    public let rendererDigest: String
    /// The compiled `schema`, nil when the request had none.
    public let schema: StateSchema?
    /// The `schema` member as sent, nil when absent (feed to `TemplateVersion.derive`).
    public let schemaJSON: JSONValue?
    /// Declared resources in request order (paths unique).
    public let resources: [Resource]
    /// `bundle.bytes` (0…16,777,216).
    public let bundleBytes: Int
    /// `bundle.modules` (0…256).
    public let bundleModules: Int
    /// `bundle.files` (0…512).
    public let bundleFiles: Int
    /// `sample_state`, already validated; nil when absent.
    public let sampleState: JSONValue?
    /// `idempotency_key` when the client sent one (docs/http-conventions.md; optional on this endpoint).
    public let idempotencyKey: String?
    /// The start manifest: `{activity_type, attributes_type, binding_id, bundle: {bytes, files,
    /// modules}, renderer_digest, schema?}` (docs/limits.md: the request minus `sample_state`,
    /// `resources` and `idempotency_key`).
    public let startManifest: JSONValue
    /// Size of `startManifest.serialized()` in bytes (≤ 8,192).
    public let startManifestBytes: Int

    static let fields: Set<String> = [
        "binding_id", "activity_type", "attributes_type", "renderer_digest", "schema",
        "resources", "bundle", "sample_state", "idempotency_key"
    ]
    static let bundleFields: Set<String> = ["bytes", "modules", "files"]
    static let resourceFields: Set<String> = ["path", "sha256", "bytes"]

    /// Parses and validates a prepare body. Checks run in this order; the first failure throws:
    /// 1. the body is an object; unknown members (sorted) → `400 INVALID_REQUEST`,
    ///    `details.field` the dotted name (`"extra"`, `"bundle.extra"`, `"resources.3.extra"`);
    /// 2. `binding_id`, `activity_type`, `attributes_type`, `renderer_digest`,
    ///    `idempotency_key?`, then `bundle.{bytes, modules, files}` (integers ≥ 0, limits
    ///    16 MiB / 256 / 512 with `details.limit`/`details.actual`);
    /// 3. the start manifest ≤ 8,192 bytes → else `400 INVALID_REQUEST`, `details.field`
    ///    `"schema"` (the only member that can grow that large), `limit`, `actual`;
    /// 4. `schema` → `StateSchema.compile`: `400 INVALID_STATE_SCHEMA` with `details.pointer`;
    /// 5. `resources`: array of ≤ 254 (`details.field` `"resources"`); each
    ///    `{path, sha256, bytes}`: `path` non-empty, ≤ 255 UTF-8 bytes, relative, no
    ///    backslash, no control characters, no `..`, and normalised (no empty or `.` segment:
    ///    `./a`, `a//b`, `a/` are refused), unique; `sha256` 64 lowercase hex; `bytes` ≥ 0;
    ///    errors name `resources.N.path` etc.;
    /// 6. `sample_state`: a JSON object of depth ≤ 12 (`400 INVALID_REQUEST`, field
    ///    `sample_state`), then, with a schema, `422 STATE_SCHEMA_MISMATCH` with `details.pointer`.
    /// - Throws: `DomainError` as above.
    public static func parse(_ body: JSONValue) throws -> PrepareManifest {
        guard case .object(let o) = body else { throw DomainError.invalid("body", "the request body must be a JSON object") }
        try PrepareFields.rejectUnknown(o, allowed: fields, prefix: "")

        let bindingId = try PrepareFields.bindingId(o)
        let activityType = try PrepareFields.name(o, "activity_type", max: PrepareLimits.maxNameLength)
        let attributesType = try PrepareFields.name(o, "attributes_type", max: PrepareLimits.maxNameLength)
        let rendererDigest = try PrepareFields.name(o, "renderer_digest", max: PrepareLimits.maxNameLength)
        let idempotencyKey = try PrepareFields.idempotencyKey(o)

        guard case .object(let bundle) = try PrepareFields.required(o, "bundle", field: "bundle") else {
            throw DomainError.invalid("bundle", "bundle must be an object {bytes, modules, files}")
        }
        try PrepareFields.rejectUnknown(bundle, allowed: bundleFields, prefix: "bundle")
        let bundleBytes = try PrepareFields.count(bundle, "bytes", field: "bundle.bytes", limit: PrepareLimits.maxBundleBytes)
        let bundleModules = try PrepareFields.count(bundle, "modules", field: "bundle.modules", limit: PrepareLimits.maxBundleModules)
        let bundleFiles = try PrepareFields.count(bundle, "files", field: "bundle.files", limit: PrepareLimits.maxBundleFiles)

        let schemaJSON = PrepareFields.optional(o, "schema")
        var manifest: [String: JSONValue] = [
            "binding_id": .string(bindingId), "activity_type": .string(activityType),
            "attributes_type": .string(attributesType), "renderer_digest": .string(rendererDigest),
            "bundle": .object([
                "bytes": .int(Int64(bundleBytes)), "modules": .int(Int64(bundleModules)),
                "files": .int(Int64(bundleFiles))
            ])
        ]
        if let schemaJSON { manifest["schema"] = schemaJSON }
        let startManifest = JSONValue.object(manifest)
        let manifestBytes = startManifest.serialized().count
        if manifestBytes > PrepareLimits.maxStartManifestBytes {
            throw DomainError.limit(
                "schema",
                "the start manifest (request without sample_state and resources) is \(manifestBytes) bytes; the limit is \(PrepareLimits.maxStartManifestBytes)",
                limit: PrepareLimits.maxStartManifestBytes, actual: manifestBytes)
        }
        let schema = try schemaJSON.map { try StateSchema.compile($0) }

        let resources = try parseResources(PrepareFields.optional(o, "resources"))

        let sampleState = PrepareFields.optional(o, "sample_state")
        if let sampleState {
            try StateSchema.checkStateShape(sampleState, field: "sample_state")
            try schema?.check(sampleState)
        }

        return PrepareManifest(
            bindingId: bindingId, activityType: activityType, attributesType: attributesType,
            rendererDigest: rendererDigest, schema: schema, schemaJSON: schemaJSON,
            resources: resources, bundleBytes: bundleBytes, bundleModules: bundleModules,
            bundleFiles: bundleFiles, sampleState: sampleState, idempotencyKey: idempotencyKey,
            startManifest: startManifest, startManifestBytes: manifestBytes)
    }

    static func parseResources(_ value: JSONValue?) throws -> [Resource] {
        guard let value else { return [] }
        guard case .array(let items) = value else { throw DomainError.invalid("resources", "resources must be an array") }
        if items.count > PrepareLimits.maxResources {
            throw DomainError.limit(
                "resources", "resources declares \(items.count) entries; the limit is \(PrepareLimits.maxResources)",
                limit: PrepareLimits.maxResources, actual: items.count)
        }
        var out: [Resource] = []
        out.reserveCapacity(items.count)
        var seen = Set<String>()
        for (i, item) in items.enumerated() {
            let prefix = "resources.\(i)"
            guard case .object(let r) = item else { throw DomainError.invalid(prefix, "\(prefix) must be an object {path, sha256, bytes}") }
            try PrepareFields.rejectUnknown(r, allowed: resourceFields, prefix: prefix)
            guard case .string(let path) = try PrepareFields.required(r, "path", field: "\(prefix).path") else {
                throw DomainError.invalid("\(prefix).path", "\(prefix).path must be a string")
            }
            try PrepareFields.resourcePath(path, field: "\(prefix).path")
            guard seen.insert(path).inserted else {
                throw DomainError.invalid("\(prefix).path", "\(prefix).path repeats an earlier resource path")
            }
            guard case .string(let digest) = try PrepareFields.required(r, "sha256", field: "\(prefix).sha256"),
                PrepareFields.isSHA256Hex(digest)
            else {
                throw DomainError.invalid("\(prefix).sha256", "\(prefix).sha256 must be 64 lowercase hexadecimal digits")
            }
            let bytes = try PrepareFields.count(r, "bytes", field: "\(prefix).bytes", limit: nil)
            out.append(Resource(path: path, sha256: digest, bytes: bytes))
        }
        return out
    }

    /// The template version of this manifest (docs/templates.md); see `TemplateVersion.derive`.
    /// - Parameter sha256: SHA-256 of the given bytes (32 bytes), from the crypto module.
    public func templateVersion(sha256: ([UInt8]) -> [UInt8]) -> String {
        TemplateVersion.derive(
            bindingId: bindingId, activityType: activityType, attributesType: attributesType,
            rendererDigest: rendererDigest, schema: schemaJSON, resources: resources, sha256: sha256)
    }
}
