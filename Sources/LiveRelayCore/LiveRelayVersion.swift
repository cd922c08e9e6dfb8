/// The product version, kept in this one place (CONTRIBUTING.md "Releasing"): `liverelay version`
/// prints it, `CHANGELOG.md`'s newest released section and `openapi.yaml`'s `info.version` carry
/// the same string (`Tests/CLITests/VersionTests.swift` checks both).
public enum LiveRelayVersion {
    /// Semantic version of this build, e.g. `"0.1.0"` (semver.org 2.0.0).
    public static let current = "0.1.0"
}
