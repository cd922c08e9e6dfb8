import Foundation

/// The sender used while no provider client is wired in: every push answers
/// `.noCredentials`, so operations fail visibly (`PROVIDER_CREDENTIALS_INVALID`) instead of
/// sitting queued forever. `WorkerCommand.makePushSender` replaces it with the APNs/FCM client.
public struct UnconfiguredPushSender: PushSender {
    public init() {}
    public func send(_ push: OutgoingPush) -> PushResult {
        .noCredentials("no APNs/FCM client is configured in this process")
    }
}
