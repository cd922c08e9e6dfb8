import Foundation
import XCTest
import HTTPServer
import JSON
import LiveRelayAPI
import LiveRelayCore
import LiveRelayStore
import Logging
import Postgres
import Locking

/// Base of the tenancy tests: one `TestEnvironment` per test, and a record of every
/// credential the test was handed (by the API or by a fixture). At tear-down it asserts that
/// none of them, nor their 43-character secret part, appears in the captured logs (docs/credentials.md:
/// a secret is shown exactly once, in the response that creates it).
class TenancyTestCase: XCTestCase {
    var env: TestEnvironment!
    let received = Locked<Set<String>>([])

    override func setUpWithError() throws {
        try super.setUpWithError()
        env = try TestEnvironment.make()
    }

    override func tearDown() {
        if let env {
            Thread.sleep(forTimeInterval: 0.2)  // the last access-log lines are written after the response
            assertNoSecretLogged(env)
            env.tearDown()
        }
        env = nil
        super.tearDown()
    }

    /// `env.call`, remembering every credential found anywhere in the response body.
    @discardableResult
    func call(
        _ method: String, _ path: String, _ body: JSONValue? = nil, as credential: String? = nil,
        rawBody: [UInt8]? = nil
    ) -> TestEnvironment.Reply {
        if let credential { remember(credential) }
        let r = env.call(method, path, body, as: credential, rawBody: rawBody)
        collect(r.json)
        return r
    }

    func remember(_ credential: String) { received.withLock { _ = $0.insert(credential) } }

    private func collect(_ v: JSONValue) {
        switch v {
        case .string(let s) where CredentialToken.parse(s) != nil: remember(s)
        case .array(let a): a.forEach(collect)
        case .object(let o): o.values.forEach(collect)
        default: break
        }
    }

    func operatorKey() throws -> String {
        let k = try env.operatorKey()
        remember(k)
        return k
    }

    func tenant(name: String = "Acme") throws -> TestEnvironment.Tenant {
        let t = try env.tenant(name: name)
        remember(t.master)
        remember(t.publishable)
        return t
    }

    func senderKey(
        _ t: TestEnvironment.Tenant, targets: [String], createdFrom: [String] = [],
        permissions: [String] = Permission.allCases.map(\.rawValue)
    ) throws -> Fixtures.Key {
        let k = try Fixtures.senderKey(env, master: t.master, targets: targets, createdFrom: createdFrom, permissions: permissions)
        remember(k.credential)
        return k
    }

    func installation(_ t: TestEnvironment.Tenant) throws -> Fixtures.Installation {
        let i = try Fixtures.installation(env, publishable: t.publishable)
        remember(i.credential)
        return i
    }

    /// A request carrying `credential`, for driving an `Authenticator` directly.
    func request(_ credential: String, path: String = "/v1/remote-updates/capabilities") -> HTTPRequest {
        HTTPRequest(method: "GET", path: path, headers: ["Authorization": "Bearer \(credential)"])
    }

    /// Checks the captured logs for every credential received so far and its secret part.
    func assertNoSecretLogged(_ env: TestEnvironment, file: StaticString = #filePath, line: UInt = #line) {
        let logs = env.logText
        let creds = received.withLock { $0 }
        for c in creds {
            XCTAssertFalse(logs.contains(c), "a credential appears in the logs", file: file, line: line)
            if let secret = CredentialToken.parse(c)?.secret {
                XCTAssertEqual(secret.count, CredentialToken.secretLength)
                XCTAssertFalse(logs.contains(secret), "a credential's secret appears in the logs", file: file, line: line)
            }
        }
    }

    /// A fresh idempotency key.
    func ikey() -> JSONValue { .string(UUID().uuidString) }
}

extension TestEnvironment.Reply {
    /// The body as text, for failure messages.
    var text: String { String(decoding: raw, as: UTF8.self) }
    var field: String? { json["error"]?["details"]?["field"]?.stringValue }
}
