import JSON

/// What `GET /v1/remote-updates/capabilities` reports (docs/endpoints.md senders, §7, §8): the protocol
/// version, operations, permissions and every limit. It says nothing about authorisation.
public enum Capabilities {
    /// Version of the remote-update protocol this server speaks.
    public static let protocolVersion = "2026-10-01"

    /// The whole capabilities document. `limits` and `retentionDays` are the deployment's
    /// per-tenant caps and retention (docs/security.md "Per-tenant caps", "Retention");
    /// `priorityBudgets` the deployment's default priority-10 budgets (docs/priority-budget.md:
    /// a tenant's own values are on its tenant object, and every iOS target shows the budget
    /// that applies to it as `priority10_budget`).
    public static func document(
        defaultExpirationSeconds: Int, limits: TenantLimits = TenantLimits(),
        retentionDays: Int = TenantLimits.defaultRetentionDays,
        priorityBudgets: PriorityBudget.Defaults = .standard
    ) -> JSONValue {
        func i(_ v: Int) -> JSONValue { .int(Int64(v)) }
        return .object([
            "protocol_version": .string(protocolVersion),
            "operations": ["start", "update", "end"],
            "permissions": .array(Permission.allCases.map { .string($0.rawValue) }),
            "platforms": ["ios", "android"],
            "limits": .object([
                "prepared_bundle_bytes": i(16 * 1024 * 1024),
                "prepared_bundle_modules": 256,
                "prepared_bundle_resources": 254,
                "prepared_bundle_files": 512,
                "resource_path_bytes": 255,
                "start_manifest_bytes": 8192,
                "state_schema_depth": 12,
                "state_schema_nodes": 256,
                "state_schema_properties_per_node": 128,
                "state_schema_enum_values_per_node": 128,
                "state_depth": 12,
                "apns_payload_bytes": 4096,
                "fcm_data_bytes": 4096,
                "dismissal_max_seconds": i(4 * 3600),
                "wait_until_ready_ms_max": 60000,
                "wait_ms_max": 10000,
                "local_start_bytes": 4096,
                "request_body_bytes": 65536,
                "idempotency_key_length": 255,
                "list_limit_max": 200,
                "list_limit_default": 50,
                "template_versions_per_binding": 64,
                "template_bytes_per_binding": i(256 * 1024 * 1024),
                "template_collectable_after_seconds": i(7 * 86400),
                "activity_lifetime_seconds": i(8 * 3600),
                "activity_removal_seconds": i(12 * 3600),
                "installations_per_tenant": i(limits.maxInstallationsPerTenant),
                "live_targets_per_tenant": i(limits.maxLiveTargetsPerTenant),
                "retention_days": i(retentionDays)
            ]),
            "delivery": .object([
                "apns_push_type": "liveactivity",
                "apns_priorities": [5, 10],
                "default_priority": 10,
                "default_expiration_seconds": i(defaultExpirationSeconds),
                "fcm_android_priority": "HIGH",
                "priority_budget": .object([
                    "platforms": ["ios"],
                    "window_seconds": i(Int(PriorityBudget.windowMilliseconds / 1000)),
                    "priority10_hourly_budget": i(priorityBudgets.priority10HourlyBudget),
                    "frequent_updates_hourly_budget": i(priorityBudgets.frequentUpdatesHourlyBudget),
                    "max_hourly_budget": i(PriorityBudget.maxBudget),
                    "downgraded_priority": i(PriorityBudget.downgradedPriority)
                ])
            ])
        ])
    }
}
