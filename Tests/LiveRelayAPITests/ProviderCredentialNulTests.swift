import Foundation
import XCTest
import Crypto
import JSON

/// A service account sent as JSON text is a second document: U+0000 inside it is a 400 naming
/// `service_account`, never a 500 from PostgreSQL.
final class ProviderCredentialNulTests: APITestCase {
    func testNulInsideServiceAccountTextIsRejected() throws {
        let t = try env.tenant()
        let account: JSONValue = [
            "type": "service_account", "project_id": "demo-project", "private_key_id": "ab\u{0}cd",
            "private_key": .string(RSAPrivateKey.generate().pkcs8PEM),
            "client_email": "push@demo-project.iam.gserviceaccount.com", "token_uri": "https://oauth2.googleapis.com/token"
        ]
        let r = env.call("PUT", "/v1/provider-credentials/fcm", ["service_account": .string(account.jsonString)], as: t.master)
        XCTAssertEqual(r.status, 400, String(decoding: r.raw, as: UTF8.self))
        XCTAssertEqual(r["error"]?["details"]?["field"], "service_account")
    }
}
