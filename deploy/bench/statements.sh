# Sourced by deploy/bench/dispatch and deploy/bench/fanout: BENCH_STATEMENTS=1 turns on
# pg_stat_statements (track = all, so trigger statements are listed too) and per-function times
# on the bench's cluster, and prints the 25 costliest statements and 20 costliest PL/pgSQL
# functions at the end ("statements …" / "functions …" lines); plans / plan_total_ms count the
# planning (pg_stat_statements.track_planning): a statement re-planned on every call shows plans = calls. Needs `psql` (a function of the
# caller) and `$work/pg` (the cluster of deploy/local/pg-cluster; a restart keeps the
# caller's PG_FSYNC when it exports it).
# BENCH_AUTO_EXPLAIN=1: auto_explain logs every statement over BENCH_AUTO_EXPLAIN_MS (300) ms with
# its plan (row counts and triggers, nested statements too; per-node times too with
# BENCH_AUTO_EXPLAIN_TIMING=1, which slows every statement); the log is copied to
# /tmp/<bench>-bench-auto-explain.log.
bench_auto_explain_enable() {
  [ "${BENCH_AUTO_EXPLAIN:-0}" = 1 ] || return 0
  printf "shared_preload_libraries = 'auto_explain'\nauto_explain.log_min_duration = '%sms'\nauto_explain.log_analyze = on\nauto_explain.log_nested_statements = on\nauto_explain.log_triggers = on\nauto_explain.log_timing = %s\n" \
    "${BENCH_AUTO_EXPLAIN_MS:-300}" "$([ "${BENCH_AUTO_EXPLAIN_TIMING:-0}" = 1 ] && echo on || echo off)" \
    | runuser -u postgres -- tee -a "$work/pg/data/postgresql.conf" >/dev/null
  deploy/local/pg-cluster stop "$work/pg"; PG_FSYNC="${PG_FSYNC:-on}" deploy/local/pg-cluster start "$work/pg" >/dev/null
}
bench_auto_explain_report() {
  [ "${BENCH_AUTO_EXPLAIN:-0}" = 1 ] || return 0
  cp "$work/pg/postgres.log" "/tmp/$1-bench-auto-explain.log"; echo "auto_explain: /tmp/$1-bench-auto-explain.log"
}
bench_statements_enable() {
  [ "${BENCH_STATEMENTS:-0}" = 1 ] || return 0
  # Both on: one shared_preload_libraries line naming both (the last line of a setting wins), so
  # callers run bench_auto_explain_enable before this (deploy/bench/dispatch and fanout do).
  local preload=pg_stat_statements; [ "${BENCH_AUTO_EXPLAIN:-0}" = 1 ] && preload="auto_explain,pg_stat_statements"
  printf "shared_preload_libraries = '%s'\npg_stat_statements.track = 'all'\npg_stat_statements.track_planning = on\ntrack_functions = 'pl'\n" "$preload" \
    | runuser -u postgres -- tee -a "$work/pg/data/postgresql.conf" >/dev/null
  deploy/local/pg-cluster stop "$work/pg"; PG_FSYNC="${PG_FSYNC:-on}" deploy/local/pg-cluster start "$work/pg" >/dev/null
  psql -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
}
bench_statements_report() {
  [ "${BENCH_STATEMENTS:-0}" = 1 ] || return 0
  psql <<'SQL' | sed 's/^/statements /'
\pset footer off
SELECT toplevel AS top, calls, round(total_exec_time::numeric, 1) AS total_ms, round(mean_exec_time::numeric, 3) AS mean_ms,
       plans, round(total_plan_time::numeric, 1) AS plan_total_ms, rows,
       left(regexp_replace(query, '\s+', ' ', 'g'), 140) AS query
  FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25;
SQL
  psql <<'SQL' | sed 's/^/functions /'
\pset footer off
SELECT funcname, calls, round(total_time::numeric, 1) AS total_ms, round(self_time::numeric, 1) AS self_ms
  FROM pg_stat_user_functions ORDER BY self_time DESC LIMIT 20;
SQL
}
