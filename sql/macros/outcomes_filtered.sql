-- outcomes_filtered(start, end, policy, environment, team, app, route, model): the rows of
-- mart_outcomes_hourly for tasks that started in the hours [start, end) and match the global
-- filters (NULL matches everything; the model filter matches a task whose first or final LLM
-- call used the model), with `policy_cost`, their total cost under the idle policy. The Unit
-- economics page's queries all read through it, so they select tasks alike
-- (sql/queries/economics_by_key.sql, economics_totals.sql).
CREATE OR REPLACE MACRO outcomes_filtered(
    p_start, p_end, p_policy, p_environment, p_team, p_app, p_route, p_model
) AS TABLE
select
    by_idle_policy(
        p_policy, total_cost, total_cost_usage, total_cost_even, total_cost_configured
    ) as policy_cost,
    *
from mart_outcomes_hourly
where
    hour >= p_start and hour < p_end
    and global_filter(
        environment, team, app, route, null, p_environment, p_team, p_app, p_route, null
    )
    and (p_model is null or first_model = p_model or final_model = p_model);
