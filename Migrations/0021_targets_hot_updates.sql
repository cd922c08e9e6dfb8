-- 0021: target updates become HOT updates (docs/write-path.md "HOT updates").
--
-- PostgreSQL can update a row in place on its page (a heap-only tuple, no new index entries) only
-- when no index references a column whose value changed; columns in index expressions and in
-- partial-index predicates count. 0009's targets_terminal_ended indexed
-- COALESCE(ended_at, updated_at), and every write, claim stamp and fan-out step sets updated_at,
-- so not one target update was HOT (pg_stat_user_tables: 0 of 73,078 in deploy/bench/writes):
-- each wrote a new entry into all nine target indexes, and every lookup of a target by primary key
-- walked one index entry per old version until VACUUM. The purge index now names ended_at alone;
-- every terminal target carries its ended_at (the constraint makes it so; the code already sets it
-- at each transition to 'ended' or 'creation_failed').
-- Backfill (system scope for this statement only: row-level security would hide other tenants).
SELECT set_config('app.scope', 'system', true);
UPDATE targets SET ended_at = updated_at WHERE status IN ('ended', 'creation_failed') AND ended_at IS NULL;
SELECT set_config('app.scope', '', true);
ALTER TABLE targets ADD CONSTRAINT targets_terminal_ended_at
  CHECK (status NOT IN ('ended', 'creation_failed') OR ended_at IS NOT NULL);
DROP INDEX targets_terminal_ended;
CREATE INDEX targets_terminal_ended ON targets (ended_at) WHERE status IN ('ended', 'creation_failed');
