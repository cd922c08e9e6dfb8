-- 0035: the row-level security test, written so the planner's estimate of it holds in the
-- system scope (docs/security.md "Row-level security and the planner").
--
-- Every policy (0001 onwards) is `lr_tenant_visible(tenant_id)`, a SQL function PostgreSQL
-- inlines into each query. Its body was
--     row_tenant = current_setting('app.tenant_id', true) OR current_setting('app.scope', true) = 'system'
-- To estimate it, the planner evaluates `current_setting` once. In the system scope (the
-- dispatcher, the fan-out expander, the sweeps) `app.tenant_id` is unset, so the first
-- comparison counts for no rows, and the second compares no column, so it gets the default
-- estimate of an `=`: 0.5 % of rows. The policy was taken to keep 0.5 % of every table the
-- system scope read, where it keeps all of it. Plans chosen on such estimates go wrong where a
-- LIMIT should stop early: the fan-out walk of 500 members was planned as a scan of `targets`
-- with a sort of every remaining member (FanoutStore.withWalkSettings), because 0.5 % of the
-- remaining members looked like fewer than 500.
--
-- The same test as a CASE: for an expression no statistics describe, PostgreSQL assumes half of
-- the rows match. In the system scope that is 2 times off instead of 200. In a tenant's scope the
-- old form was estimated as the tenant's share of the table, the CASE as half of it; the
-- product's statements name their tenant (`tenant_id = $1`), which the planner estimates from the
-- column's statistics either way. The answer is the same for every row and every setting: the
-- system scope sees every row; otherwise a row is visible when its tenant equals `app.tenant_id`,
-- and when that is unset (NULL) no row is. The function stays an inlinable SQL function.
CREATE OR REPLACE FUNCTION lr_tenant_visible(row_tenant text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN current_setting('app.scope', true) = 'system' THEN true
              ELSE row_tenant = current_setting('app.tenant_id', true) END
$$;
