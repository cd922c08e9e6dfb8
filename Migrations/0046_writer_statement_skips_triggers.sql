-- 0046: the write path's one writes statement no longer calls the derived-state triggers whose
-- work it does itself (docs/write-path.md "The writer's statement skips the triggers").
--
-- Since 0040-0044 an update's or an end's writes statement (the target's change, its operation,
-- the supersede of queued operations by it) keeps the dispatch head and the quota counters of
-- its rows itself, and the triggers only found, with one query each over their transition
-- tables, that there was nothing left to do: three PL/pgSQL calls per update. With those
-- triggers disabled, deploy/bench/writes spent 0.25 ms less of PostgreSQL's CPU per update
-- (a quarter of it).
--
-- The writer now says so for the one statement: it sets `liverelay.writer_rows` to 'on' (SET
-- LOCAL) in the statement just before its writes statement, in the same pipeline, and clears it
-- in the statement just after it unless COMMIT follows (`WritePath.writerRows`). It does so only
-- when every row the statement writes is kept by the writer: the insert of its operation, the
-- supersede of queued operations by it (heads and quota: 0040, 0041; a supersede is no event),
-- and a change of its target that leaves the target's status as it was (the statement never
-- changes a target's channel or delivery, so no member count, live count or event). An end
-- that moves its target to `ending` sets nothing and runs the triggers as before.
-- The triggers' WHEN clause skips the call; every other statement, and the writer's when the
-- setting is anything but 'on', runs them as before, with the same checks in their bodies.
-- The clause is kept this small on purpose: PostgreSQL reads it back from its stored form for
-- every statement that could fire the trigger.
DROP TRIGGER operations_after_insert ON operations;
DROP TRIGGER operations_after_update ON operations;
DROP TRIGGER targets_after_update ON targets;
CREATE TRIGGER operations_after_insert AFTER INSERT ON operations
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
  WHEN (current_setting('liverelay.writer_rows', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION lr_operations_after_insert();
CREATE TRIGGER operations_after_update AFTER UPDATE ON operations
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
  WHEN (current_setting('liverelay.writer_rows', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION lr_operations_after_update();
CREATE TRIGGER targets_after_update AFTER UPDATE ON targets
  REFERENCING OLD TABLE AS lr_old_targets NEW TABLE AS lr_new_targets FOR EACH STATEMENT
  WHEN (current_setting('liverelay.writer_rows', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION lr_targets_after_update();
