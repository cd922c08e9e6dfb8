import Foundation
import XCTest

/// Polls `condition` every `pollSeconds` (default 20 ms) until it holds or `seconds` have
/// passed; returns whether it held. Never fails the test by itself — for conditions whose
/// outcome the caller asserts. Use it only where no signal (NOTIFY, callback, semaphore) exists
/// to wait on (CONTRIBUTING.md "Test": wait on conditions, not sleeps).
public func waitUntil(within seconds: Double, every pollSeconds: Double = 0.02, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: pollSeconds)
    }
    return try condition()
}

/// `waitUntil` that fails the calling test with `what` when `condition` never holds within
/// `seconds` (default 20). Returns whether it held.
@discardableResult
public func eventually(
    _ what: String, within seconds: Double = 20, every pollSeconds: Double = 0.02,
    file: StaticString = #filePath, line: UInt = #line, _ condition: () throws -> Bool
) rethrows -> Bool {
    if try waitUntil(within: seconds, every: pollSeconds, condition) { return true }
    XCTFail("\(what): not within \(seconds) s", file: file, line: line)
    return false
}
