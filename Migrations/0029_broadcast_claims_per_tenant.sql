-- Broadcast claims are shared across tenants (docs/channels.md "APNs wire"): a claim walks the
-- tenants with queued broadcasts (one probe of this index per tenant) and takes each tenant's
-- earliest due channel head, round robin across tenants. Before, a claim took the earliest due
-- broadcast of the whole table, so a tenant that queued many broadcasts (alert writes to many
-- channels are never coalesced) put every other tenant's broadcasts behind its backlog.
CREATE INDEX channel_operations_broadcast_tenant ON channel_operations (tenant_id, broadcast_next_at)
  WHERE broadcast_status = 'queued';
