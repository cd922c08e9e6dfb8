import Foundation
import LiveRelayCore

/// Who is calling, after the credential was verified (docs/credentials.md).
public enum Principal: Sendable, Equatable {
    /// The deployment's operator.
    case operatorKey(id: String)
    /// A tenant admin.
    case master(tenantId: String, keyId: String)
    /// An app server or script with a scoped sender key.
    case sender(tenantId: String, scope: SenderScope)
    /// A device before registration; `appId`/`platform` nil = any app of the tenant.
    case publishable(tenantId: String, keyId: String, appId: String?, platform: String?)
    /// A registered installation; `retired` installations still authenticate so their late
    /// writes get `410 INSTALLATION_RETIRED` (docs/write-semantics.md).
    case installation(tenantId: String, installationId: String, credentialId: String, retired: Bool)

    /// The tenant the principal belongs to (nil for the operator).
    public var tenantId: String? {
        switch self {
        case .operatorKey: return nil
        case .master(let t, _), .sender(let t, _), .publishable(let t, _, _, _), .installation(let t, _, _, _): return t
        }
    }

    /// The credential row id, as recorded in audit events and logs (never the secret).
    public var keyId: String {
        switch self {
        case .operatorKey(let id): return id
        case .master(_, let id): return id
        case .sender(_, let s): return s.keyId
        case .publishable(_, let id, _, _): return id
        case .installation(_, _, let id, _): return id
        }
    }

    /// The credential kind's name for messages (`master key`, `sender key`, …).
    public var kindName: String {
        switch self {
        case .operatorKey: return "operator key"
        case .master: return "master key"
        case .sender: return "sender key"
        case .publishable: return "publishable key"
        case .installation: return "installation credential"
        }
    }
}
