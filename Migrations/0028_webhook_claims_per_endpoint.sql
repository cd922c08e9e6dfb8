-- Webhook claims take their candidates per endpoint (docs/webhooks.md "Delivery"): for every
-- enabled endpoint, its earliest due pending deliveries; for every other endpoint, its due
-- webhook.test deliveries only. Before, a claim took the 2,000 earliest due deliveries of the
-- whole table and only then dropped those of disabled endpoints and shared the rest per tenant,
-- so 2,000 due deliveries of one tenant's disabled endpoint (they stay pending) left every
-- claim empty for every tenant, and one tenant's large due backlog kept every other tenant out
-- of the candidates. Each probe below reads at most the claim's per-endpoint share.
CREATE INDEX webhook_deliveries_endpoint_due ON webhook_deliveries (tenant_id, endpoint_id, next_attempt_at)
  WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint_test_due ON webhook_deliveries (tenant_id, endpoint_id, next_attempt_at)
  WHERE status = 'pending' AND event_type = 'webhook.test';
