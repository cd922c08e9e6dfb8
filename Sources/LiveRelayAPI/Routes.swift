import HTTPServer
import JSON
import LiveRelayCore

/// A route handler of the API: answers one request with the composition root's context.
/// What it throws goes through `Endpoint.run` (applied by `APIRoutes.router`), then through the
/// server's own mapping (`HTTPError` → its envelope, anything else → `500 INTERNAL`).
typealias APIHandler = @Sendable (APIContext, HTTPRequest) throws -> HTTPResponse

/// One row of the route table: an HTTP method, a `Router` pattern (literal segments and `{name}`
/// placeholders, docs/endpoints.md) and the handler that answers it.
struct APIRoute: Sendable {
    let method: String
    let pattern: String
    let handler: APIHandler

    /// A route for `method` and `pattern` answered by `handler`.
    init(_ method: String, _ pattern: String, _ handler: @escaping APIHandler) {
        self.method = method
        self.pattern = pattern
        self.handler = handler
    }
}

/// Builds the router with every endpoint of the API (docs/endpoints.md, openapi.yaml).
public enum APIRoutes {
    /// Every route of the API, in registration order: the service endpoints, the public API,
    /// then the console. `capabilities` is the document `GET /v1/remote-updates/capabilities`
    /// answers (`Capabilities.document`, built once).
    static func table(capabilities: JSONValue) -> [APIRoute] {
        [
            // service (no credential) and capabilities
            APIRoute("GET", "/healthz", ServiceHandlers.healthz),
            APIRoute("GET", "/readyz", ServiceHandlers.readyz),
            APIRoute("GET", "/metrics", ServiceHandlers.metrics),
            APIRoute("GET", "/v1/remote-updates/capabilities", ServiceHandlers.capabilities(capabilities)),
            // operator: tenants
            APIRoute("POST", "/v1/operator/tenants", OperatorHandlers.create),
            APIRoute("GET", "/v1/operator/tenants", OperatorHandlers.list),
            APIRoute("GET", "/v1/operator/tenants/{id}", OperatorHandlers.get),
            APIRoute("PATCH", "/v1/operator/tenants/{id}", OperatorHandlers.patch),
            // tenant admin: master and publishable keys, audit events
            APIRoute("POST", "/v1/master-keys", MasterKeyHandlers.createMaster),
            APIRoute("GET", "/v1/master-keys", MasterKeyHandlers.listMaster),
            APIRoute("POST", "/v1/master-keys/{id}/revoke", MasterKeyHandlers.revokeMaster),
            APIRoute("POST", "/v1/publishable-keys", MasterKeyHandlers.createPublishable),
            APIRoute("GET", "/v1/publishable-keys", MasterKeyHandlers.listPublishable),
            APIRoute("POST", "/v1/publishable-keys/{id}/revoke", MasterKeyHandlers.revokePublishable),
            APIRoute("GET", "/v1/audit-events", MasterKeyHandlers.listAudit),
            // tenant admin: sender keys
            APIRoute("POST", "/v1/remote-updates/sender-keys", SenderKeyHandlers.create),
            APIRoute("GET", "/v1/remote-updates/sender-keys", SenderKeyHandlers.list),
            APIRoute("GET", "/v1/remote-updates/sender-keys/{id}", SenderKeyHandlers.get),
            APIRoute("POST", "/v1/remote-updates/sender-keys/{id}/revoke", SenderKeyHandlers.revoke),
            // devices: installations
            APIRoute("POST", "/v1/installations", InstallationHandlers.registerInstallation),
            APIRoute("POST", "/v1/installations/{id}/credential/renew", InstallationHandlers.renew),
            APIRoute("POST", "/v1/installations/{id}/disconnect", InstallationHandlers.disconnect),
            APIRoute("PUT", "/v1/installations/{id}/fcm-token", InstallationHandlers.fcmToken),
            APIRoute("PATCH", "/v1/installations/{id}", InstallationHandlers.patchAttributes),
            // senders: remote start, update, end
            APIRoute("POST", "/v1/remote-updates/live-activities/start", LifecycleHandlers.start),
            APIRoute("POST", "/v1/remote-updates/live-activities/update", LifecycleHandlers.update),
            APIRoute("POST", "/v1/remote-updates/live-activities/end", LifecycleHandlers.end),
            // senders: target reads and usage
            APIRoute("GET", "/v1/remote-updates/live-activities/targets", TargetReadHandlers.list),
            APIRoute("GET", "/v1/remote-updates/live-activities/targets/{tgt}", TargetReadHandlers.get),
            APIRoute("GET", "/v1/remote-updates/live-activities/targets/{tgt}/snapshot", TargetReadHandlers.snapshot),
            APIRoute("GET", "/v1/remote-updates/live-activities/targets/{tgt}/operations", TargetReadHandlers.operations),
            APIRoute("GET", "/v1/remote-updates/operations/{op}", TargetReadHandlers.operation),
            APIRoute("GET", "/v1/remote-updates/usage", TargetReadHandlers.usage),
            APIRoute("GET", "/v1/remote-updates/usage/daily", UsageDailyHandlers.daily),
            // devices: local targets
            APIRoute("POST", "/v1/installations/{id}/targets", DeviceTargetHandlers.reserve),
            APIRoute("PUT", "/v1/installations/{id}/targets/{tgt}/push-token", DeviceTargetHandlers.pushToken),
            APIRoute("POST", "/v1/installations/{id}/targets/{tgt}/creation-failed", DeviceTargetHandlers.creationFailed),
            APIRoute("POST", "/v1/installations/{id}/targets/{tgt}/ended", DeviceTargetHandlers.ended),
            // devices: start targets, bindings, render reports
            APIRoute("POST", "/v1/installations/{id}/start-targets", DeviceHandlers.prepare),
            APIRoute("PUT", "/v1/installations/{id}/start-targets/{st}/push-to-start-token", DeviceHandlers.pushToStartToken),
            APIRoute("POST", "/v1/installations/{id}/bindings/{bnd}/retire", DeviceHandlers.retireBinding),
            APIRoute("POST", "/v1/installations/{id}/targets/{tgt}/render-reports", DeviceHandlers.renderReport),
            // tenant admin: provider credentials
            APIRoute("PUT", "/v1/provider-credentials/apns", ProviderCredentialHandlers.putAPNs),
            APIRoute("PUT", "/v1/provider-credentials/fcm", ProviderCredentialHandlers.putFCM),
            APIRoute("GET", "/v1/provider-credentials", ProviderCredentialHandlers.list),
            APIRoute("DELETE", "/v1/provider-credentials/apns", ProviderCredentialHandlers.deleteAPNs),
            APIRoute("DELETE", "/v1/provider-credentials/fcm", ProviderCredentialHandlers.deleteFCM),
            // webhooks and events
            APIRoute("POST", "/v1/webhook-endpoints", WebhookHandlers.create),
            APIRoute("GET", "/v1/webhook-endpoints", WebhookHandlers.list),
            APIRoute("GET", "/v1/webhook-endpoints/{we}", WebhookHandlers.get),
            APIRoute("PATCH", "/v1/webhook-endpoints/{we}", WebhookHandlers.update),
            APIRoute("DELETE", "/v1/webhook-endpoints/{we}", WebhookHandlers.delete),
            APIRoute("POST", "/v1/webhook-endpoints/{we}/rotate-secret", WebhookHandlers.rotate),
            APIRoute("POST", "/v1/webhook-endpoints/{we}/test", WebhookHandlers.test),
            APIRoute("GET", "/v1/webhook-endpoints/{we}/deliveries", WebhookHandlers.deliveries),
            APIRoute("GET", "/v1/events", WebhookHandlers.listEvents),
            APIRoute("GET", "/v1/events/{evt}", WebhookHandlers.getEvent),
            // channels
            APIRoute("POST", "/v1/remote-updates/channels", ChannelHandlers.create),
            APIRoute("GET", "/v1/remote-updates/channels", ChannelHandlers.list),
            APIRoute("GET", "/v1/remote-updates/channels/{ch}", ChannelHandlers.get),
            APIRoute("GET", "/v1/remote-updates/channels/{ch}/snapshot", ChannelHandlers.snapshot),
            APIRoute("POST", "/v1/remote-updates/channels/{ch}/update", ChannelHandlers.update),
            APIRoute("POST", "/v1/remote-updates/channels/{ch}/end", ChannelHandlers.end),
            APIRoute("GET", "/v1/remote-updates/channels/{ch}/operations", ChannelHandlers.operations),
            APIRoute("GET", "/v1/remote-updates/channels/{ch}/members", ChannelHandlers.members),
            APIRoute("GET", "/v1/remote-updates/channel-operations/{cop}", ChannelHandlers.operation),
            // the tenant console (docs/console.md)
            APIRoute("GET", "/console", ConsoleHandlers.redirect),
            APIRoute("GET", "/console/", ConsoleHandlers.index),
            APIRoute("GET", "/console/{file}", ConsoleHandlers.namedFile)
        ]
    }

    /// Registers every route of `table` on a new router, each handler wrapped in
    /// `Endpoint.run`: the API's one error mapping (`DomainError` → its envelope, database
    /// outages and lock timeouts → `503 SERVICE_UNAVAILABLE`), applied here and at no route.
    /// For the service and console routes, which throw neither, it changes nothing. The
    /// `Router` keeps its own answers: `404 NOT_FOUND`, `405 METHOD_NOT_ALLOWED` with `Allow`,
    /// `HEAD` answered by the `GET` handler.
    /// - Parameter defaultExpirationSeconds: reported by capabilities (docs/providers.md).
    public static func router(_ ctx: APIContext, defaultExpirationSeconds: Int) -> Router {
        let capabilities = Capabilities.document(
            defaultExpirationSeconds: defaultExpirationSeconds, limits: ctx.limits,
            retentionDays: ctx.retentionDays, priorityBudgets: ctx.priorityBudgets)
        let r = Router()
        for route in table(capabilities: capabilities) {
            let handler = route.handler
            r.add(route.method, route.pattern) { req in try Endpoint.run(ctx, req) { try handler(ctx, req) } }
        }
        return r
    }
}
