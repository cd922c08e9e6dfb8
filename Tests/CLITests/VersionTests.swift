import Foundation
import XCTest
import LiveRelayApp
import LiveRelayCore
import LiveRelayTestSupport

/// The version is kept in one place (`LiveRelayVersion.current`, CONTRIBUTING.md "Releasing"):
/// the executable, the changelog's newest released section and `openapi.yaml` agree with it.
final class VersionTests: XCTestCase {
    private func read(_ relative: String) throws -> String {
        let path = CLIEnvironment.repoRoot + "/" + relative
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw FixtureFailure("cannot read \(path)") }
        return text
    }

    func testExecutableReportsTheOneVersion() {
        XCTAssertEqual(LiveRelayMain.version, LiveRelayVersion.current)
    }

    func testChangelogNewestReleaseIsTheVersion() throws {
        let releases = try read("CHANGELOG.md").split(separator: "\n").filter { $0.hasPrefix("## [") && !$0.hasPrefix("## [Unreleased]") }
        let newest = try XCTUnwrap(releases.first, "CHANGELOG.md has no released section")
        XCTAssertTrue(newest.hasPrefix("## [\(LiveRelayVersion.current)] - "), String(newest))
    }

    func testOpenAPIInfoVersionIsTheVersion() throws {
        let lines = try read("openapi.yaml").split(separator: "\n")
        let info = try XCTUnwrap(lines.firstIndex(of: "info:"), "openapi.yaml has no info:")
        let version = lines[info...].first { $0.hasPrefix("  version:") }
        XCTAssertEqual(version.map(String.init), "  version: \(LiveRelayVersion.current)")
    }
}
