/// A test fixture that could not set up. Thrown so that the test FAILS with this message:
/// a broken fixture must never turn into a skipped (and so silently green) test.
struct FixtureFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
