-- 0020: plans of the functions the statement triggers call, and the time format inlined.
--
-- 1. lr_dispatch_heads_refresh_set (0016) and lr_channel_members_apply (0015) are PL/pgSQL
--    functions whose statements take array parameters. PL/pgSQL plans such statements like any
--    prepared statement: a custom plan knows the arrays (one or two elements for a write), so the
--    generic plan (which assumes ten rows per unnest) always looks dearer and PostgreSQL keeps
--    re-planning both statements on every call. For a single update that planning was most of
--    the write's server time: 3.84 ms per call, twice per update, beside 0.57 ms of execution
--    (deploy/bench/writes with BENCH_PROFILE=1); in psql, 500 one-target refreshes took 205 ms,
--    and 26 ms with generic plans. The generic plans drive every join from the arrays through
--    primary keys (unnest outer, index inner), which is right for one element and for 512.
-- 2. lr_ts (0012) was declared IMMUTABLE around to_char, which is STABLE, so PostgreSQL would
--    not inline it and ran it as a separate SQL function call each time (four per operation
--    object, six per target object). STABLE is its true volatility and lets it inline:
--    lr_operation_object over 20,000 operations 314 -> 152 ms, lr_target_object over 10,000
--    targets 317 -> 221 ms (psql, same cluster). It is used in no index or constraint.
ALTER FUNCTION lr_dispatch_heads_refresh_set(text[], text[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION lr_channel_members_apply(text[], text[], text[], bigint[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION lr_ts(timestamptz) STABLE;
