/// A test fixture that could not set up. Thrown so that the test FAILS with this message:
/// a broken fixture must never turn into a skipped (and so silently green) test
/// (CONTRIBUTING.md "Test").
public struct FixtureFailure: Error, CustomStringConvertible {
    /// What could not be set up, for the test's failure message.
    public let description: String
    public init(_ description: String) { self.description = description }
}
