import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import JSON
import LiveRelayConsole

/// The tenant console's static files (docs/console.md): served from the binary at `/console/`
/// without a credential, each with `Content-Security-Policy: default-src 'self'`, and written so
/// that policy holds (no inline script or style, nothing from another origin).
final class ConsoleTests: APITestCase {

    static var assetsDirectory: String { ContractRoutesTests.repoRoot + "/Sources/LiveRelayConsole/Assets" }

    func testIndexIsServedWithTheContentSecurityPolicyAndNoCredential() throws {
        let r = env.call("GET", "/console/")
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(r.headers["content-type"], "text/html; charset=utf-8")
        XCTAssertEqual(r.headers["content-security-policy"], "default-src 'self'")
        XCTAssertEqual(r.headers["x-content-type-options"], "nosniff")
        XCTAssertEqual(r.headers["x-frame-options"], "DENY")
        XCTAssertNotNil(r.headers["x-request-id"])
        let html = String(decoding: r.raw, as: UTF8.self)
        XCTAssertTrue(html.contains("<script src=\"/console/console.js\""), html)
        XCTAssertTrue(html.contains("href=\"/console/console.css\""), html)
    }

    func testEveryAssetIsServedWithItsTypeAndHeadWorks() throws {
        let expected = [
            "console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8",
            "favicon.svg": "image/svg+xml", "index.html": "text/html; charset=utf-8"
        ]
        XCTAssertEqual(Set(ConsoleAssets.all.keys), Set(expected.keys))
        for (name, type) in expected {
            let r = env.call("GET", "/console/\(name)")
            XCTAssertEqual(r.status, 200, name)
            XCTAssertEqual(r.headers["content-type"], type, name)
            XCTAssertEqual(r.headers["content-security-policy"], "default-src 'self'", name)
            XCTAssertEqual(r.raw, ConsoleAssets.asset(named: name)?.bytes, name)
            let head = env.call("HEAD", "/console/\(name)")
            XCTAssertEqual(head.status, 200, name)
            XCTAssertEqual(head.raw, [], name)
        }
    }

    func testConsoleWithoutSlashRedirectsAndUnknownFilesAre404Envelopes() throws {
        let redirect = try Self.withoutFollowingRedirects(env.baseURL + "/console")
        XCTAssertEqual(redirect.status, 308)
        XCTAssertEqual(redirect.location, "/console/")
        for path in ["/console/nope.js", "/console/..%2FPackage.swift", "/console/%2e%2e", "/console/a/b"] {
            let r = env.call("GET", path)
            XCTAssertEqual(r.status, 404, path)
            XCTAssertEqual(r.errorCode, "NOT_FOUND", path)
            XCTAssertNotNil(r["error"]?["request_id"]?.stringValue, path)
        }
    }

    /// Status and `Location` of a GET whose redirect is not followed.
    static func withoutFollowingRedirects(_ url: String) throws -> (status: Int, location: String?) {
        final class NoRedirect: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
            func urlSession(
                _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void
            ) { completionHandler(nil) }
        }
        let session = URLSession(configuration: .ephemeral, delegate: NoRedirect(), delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var out: (Int, String?) = (-1, nil)
        session.dataTask(with: URL(string: url)!) { _, resp, _ in
            let http = resp as? HTTPURLResponse
            out = (http?.statusCode ?? -1, http?.value(forHTTPHeaderField: "Location"))
            done.signal()
        }.resume()
        done.wait()
        return out
    }

    /// The embedded bytes are the files in the repository: the build-tool plugin re-embeds on change.
    func testEmbeddedFilesMatchTheSourceTree() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.assetsDirectory).filter { !$0.hasPrefix(".") }
        XCTAssertEqual(Set(names), Set(ConsoleAssets.all.keys))
        for name in names {
            let disk = try Data(contentsOf: URL(fileURLWithPath: Self.assetsDirectory + "/" + name))
            XCTAssertEqual(ConsoleAssets.asset(named: name)?.bytes, Array(disk), "\(name) differs from the embedded copy")
        }
    }

    /// What `default-src 'self'` would block must not be in the files: inline scripts, inline
    /// styles, event-handler attributes, other origins, `eval`.
    func testFilesNeedNothingTheContentSecurityPolicyBlocks() throws {
        let html = String(decoding: ConsoleAssets.asset(named: "index.html")!.bytes, as: UTF8.self)
        let js = String(decoding: ConsoleAssets.asset(named: "console.js")!.bytes, as: UTF8.self)
        let css = String(decoding: ConsoleAssets.asset(named: "console.css")!.bytes, as: UTF8.self)
        XCTAssertNil(html.range(of: #"<script(?![^>]*\bsrc=)"#, options: .regularExpression), "inline <script>")
        XCTAssertNil(html.range(of: "<style", options: .caseInsensitive), "inline <style>")
        XCTAssertNil(html.range(of: #"\sstyle="#, options: .regularExpression), "style attribute")
        XCTAssertNil(html.range(of: #"\son[a-z]+="#, options: .regularExpression), "event-handler attribute")
        for (name, text) in [("index.html", html), ("console.js", js), ("console.css", css)] {
            // The only absolute URL allowed is the SVG namespace name (an identifier, never fetched).
            let urls = text.matches(of: /https?:\/\/[^\s"'`)]+/).map { String($0.output) }.filter { $0 != "http://www.w3.org/2000/svg" }
            XCTAssertEqual(urls, [], "\(name) refers to another origin")
            XCTAssertNil(text.range(of: "@import"), name)
        }
        XCTAssertNil(
            js.range(of: #"\beval\(|new Function\(|innerHTML|setAttribute\('style'"#, options: .regularExpression),
            "CSP-blocked construct in console.js")
        XCTAssertNil(js.range(of: "localStorage"), "the key must never go to localStorage")
        XCTAssertNil(js.range(of: "document.cookie"), "the key must never go to a cookie")
        XCTAssertTrue(js.contains("sessionStorage"))
    }
}
