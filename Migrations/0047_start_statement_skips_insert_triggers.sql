-- 0047: a remote start's one writes statement no longer calls the insert triggers whose work it
-- does itself (docs/write-path.md "The writer's statement skips the triggers"), as 0046 did for
-- an update's.
--
-- A start inserts its target (`starting`, no channel: a channel join is a statement of its own)
-- and its queued start operation in one statement (`WritePath.startWrites`). Four statement
-- triggers ran for it: the target's event trigger (which found no `ready` or `ended` row), its
-- channel-member trigger (no channel), its live-target count (+1), and the operations insert
-- trigger (the head is the writer's since 0040; the quota unit, +1). The statement now adds the
-- live-target count and the reserved unit itself, and sets `liverelay.writer_rows` to 'on' for
-- itself alone, as an update does (set in the statement just before it, cleared just after it).
-- The WHEN clause is 0046's: every other insert of targets (local starts, imports, tests) runs
-- the triggers as before.
DROP TRIGGER targets_event_insert ON targets;
DROP TRIGGER targets_channel_members_insert ON targets;
DROP TRIGGER targets_live_count_insert ON targets;
CREATE TRIGGER targets_event_insert AFTER INSERT ON targets
  REFERENCING NEW TABLE AS lr_new_targets FOR EACH STATEMENT
  WHEN (current_setting('liverelay.writer_rows', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION lr_targets_event_stmt();
CREATE TRIGGER targets_channel_members_insert AFTER INSERT ON targets
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
  WHEN (current_setting('liverelay.writer_rows', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION lr_channel_members_after_insert();
CREATE TRIGGER targets_live_count_insert AFTER INSERT ON targets
  REFERENCING NEW TABLE AS lr_new_targets FOR EACH STATEMENT
  WHEN (current_setting('liverelay.writer_rows', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION lr_live_targets_count_stmt();
