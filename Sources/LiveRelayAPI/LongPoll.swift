import Foundation
import HTTPServer
import LiveRelayCore

/// Long-polls (`wait_until_ready_ms`, `wait_ms`) as deferred responses: the connection is
/// suspended and no worker thread is held while waiting; at most
/// `EventWaiter.maxWaitsPerCredential` run at once per credential (docs/http-limits.md,
/// "Long-polls").
enum LongPoll {
    /// The id of the (already authenticated) credential presented by `req` (`sk_…`, `mk_…`,
    /// …): the key of the per-credential cap. `"?"` when there is none (not expected).
    static func credentialId(_ req: HTTPRequest) -> String {
        guard let header = req.header("authorization"), header.count > 7, let text = BearerToken.parse(header) else { return "?" }
        return CredentialToken.parse(text)?.id ?? "?"
    }

    /// 429 `RATE_LIMITED`: the credential already has `limit` long-polls waiting.
    static func tooMany(_ limit: Int) -> HTTPError {
        HTTPError(
            status: 429, code: "RATE_LIMITED",
            message: "this credential already has \(limit) long-polls waiting; retry when one finishes",
            details: ["limit": .int(Int64(limit)), "retry_after_seconds": 1], headers: [("Retry-After", "1")])
    }

    /// A deferred response that waits on `key` (see `EventWaiter.waitAsync`) for up to
    /// `timeoutSeconds`, then answers `render(result)` (run through `Endpoint.run`'s error
    /// mapping, on a worker). When the credential is at its cap, answers `refused()` instead.
    static func respond(
        _ ctx: APIContext, _ req: HTTPRequest, key: String, timeoutSeconds: Double,
        check: @escaping @Sendable () throws -> Bool,
        render: @escaping @Sendable (Result<Bool, Error>) throws -> HTTPResponse,
        refused: @escaping @Sendable () throws -> HTTPResponse
    ) -> HTTPResponse {
        .deferred { completion in
            let admitted = ctx.events.waitAsync(
                for: key, credential: credentialId(req), timeoutSeconds: timeoutSeconds,
                run: { job in completion.run(job) }, check: check
            ) { result in
                completion.complete { try Endpoint.run(ctx, req) { try render(result) } }
            }
            if !admitted { completion.complete { try Endpoint.run(ctx, req) { try refused() } } }
        }
    }
}
