-- 0035: the row-level security test, written so the planner can estimate it (docs/security.md
-- "Row-level security and the planner").
--
-- Every policy (0001 onwards) is `lr_tenant_visible(tenant_id)`, a SQL function PostgreSQL
-- inlines into each query. Its body was
--     row_tenant = current_setting('app.tenant_id', true) OR current_setting('app.scope', true) = 'system'
-- and the planner prices each `=` against a function result it cannot know at 0.5 % of rows, so
-- the policy was taken to keep ~1 % of the rows a statement reads, on every table, in every
-- statement. In the system scope (the dispatcher, the fan-out expander, the sweeps) it keeps all
-- of them: row estimates were ~100 times too low. Plans chosen on such estimates go wrong where
-- a LIMIT should stop early: the fan-out walk of 500 members was planned as a scan of `targets`
-- with a sort of every remaining member (FanoutStore.walkStatements), because ~1 % of the
-- remaining members looked like fewer than 500.
--
-- The same test as a CASE: for an expression it has no statistics for, PostgreSQL assumes half
-- of the rows match (0.5), off by 2 at most in the system scope, and a tenant's statements
-- already name their tenant (`tenant_id = $1`), which the planner estimates from the column's
-- statistics. The result is the same for every row and every setting: the system scope sees
-- every row; otherwise a row is visible when its tenant equals `app.tenant_id`, and when that is
-- unset (NULL) no row is (NULL, as before). The function stays an inlinable SQL function.
CREATE OR REPLACE FUNCTION lr_tenant_visible(row_tenant text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN current_setting('app.scope', true) = 'system' THEN true
              ELSE row_tenant = current_setting('app.tenant_id', true) END
$$;
