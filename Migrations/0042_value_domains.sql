-- 0042: the one-column value checks of `targets` and `operations` become domains (docs/
-- write-path.md "Checks as domains").
--
-- PostgreSQL evaluates every CHECK constraint of a table on every INSERT and UPDATE, whichever
-- columns the statement sets, and it reads each constraint's stored expression again for every
-- statement (ExecConstraints -> stringToNode: 4.9 % of the machine's samples in a profile of
-- deploy/bench/writes, more than the update of the target row itself). An update writes the
-- target row once and the operations table twice (its insert and the supersede), so it paid for
-- 7 + 4 + 4 expressions, most of them lists of allowed words.
--
-- A domain's check is cached with the type and is evaluated only where a value is assigned to a
-- column of that type: an update of the target's state no longer checks its origin, its end
-- reason or its channel delivery, and the supersede checks only the status it sets. The allowed
-- values are unchanged; a wrong value is still refused with SQLSTATE 23514 (check_violation).
-- The two checks that relate two columns stay table constraints (targets_channel_delivery,
-- targets_terminal_ended_at).
--
-- Changing a column's type to a domain with a check rewrites the table and rebuilds its indexes
-- (under an ACCESS EXCLUSIVE lock, once). The trigger on targets' token columns depends on
-- token_status, so it is dropped and created again unchanged.

CREATE DOMAIN lr_target_status AS text
  CHECK (VALUE IN ('reserved', 'starting', 'token_pending', 'ready', 'ending', 'ended', 'creation_failed', 'start_unknown'));
CREATE DOMAIN lr_target_end_reason AS text
  CHECK (VALUE IN ('sender', 'device', 'token_invalid', 'installation_retired', 'system_expired'));
CREATE DOMAIN lr_target_origin AS text CHECK (VALUE IN ('local', 'remote'));
CREATE DOMAIN lr_token_status AS text CHECK (VALUE IN ('pending', 'registered', 'invalid'));
CREATE DOMAIN lr_member_delivery AS text CHECK (VALUE IN ('broadcast', 'fanout'));
CREATE DOMAIN lr_operation_kind AS text CHECK (VALUE IN ('start', 'update', 'end'));
CREATE DOMAIN lr_operation_status AS text
  CHECK (VALUE IN ('queued', 'sending', 'accepted', 'failed', 'cancelled', 'superseded', 'unknown', 'expired'));
CREATE DOMAIN lr_push_priority AS integer CHECK (VALUE IN (5, 10));
CREATE DOMAIN lr_sent_priority AS smallint CHECK (VALUE IN (1, 5, 10));

DROP TRIGGER dispatch_target_token ON targets;

ALTER TABLE targets
  DROP CONSTRAINT targets_status_check,
  DROP CONSTRAINT targets_end_reason_check,
  DROP CONSTRAINT targets_origin_check,
  DROP CONSTRAINT targets_token_status_check,
  DROP CONSTRAINT targets_delivery_check,
  ALTER COLUMN status TYPE lr_target_status,
  ALTER COLUMN end_reason TYPE lr_target_end_reason,
  ALTER COLUMN origin TYPE lr_target_origin,
  ALTER COLUMN token_status TYPE lr_token_status,
  ALTER COLUMN delivery TYPE lr_member_delivery;

CREATE TRIGGER dispatch_target_token AFTER UPDATE OF push_token, token_status ON targets
  FOR EACH ROW EXECUTE FUNCTION lr_dispatch_target_token();

ALTER TABLE operations
  DROP CONSTRAINT operations_kind_check,
  DROP CONSTRAINT operations_status_check,
  DROP CONSTRAINT operations_priority_check,
  DROP CONSTRAINT operations_sent_priority_check,
  ALTER COLUMN kind TYPE lr_operation_kind,
  ALTER COLUMN status TYPE lr_operation_status,
  ALTER COLUMN priority TYPE lr_push_priority,
  ALTER COLUMN sent_priority TYPE lr_sent_priority;

-- A column's type change drops its planner statistics, and the row counts PlannerStatistics
-- watches did not move: gather them again now rather than when autovacuum gets to it.
ANALYZE targets;
ANALYZE operations;
