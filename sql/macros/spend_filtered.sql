-- spend_filtered(start, end, policy, environment, team, app, route, model): the rows of
-- mart_spend_hourly in hours [start, end) that match the filters (NULL matches everything),
-- with `cost` under the idle policy (separate, usage, even, configured). The dashboards'
-- spend queries all read through it, so they filter alike (sql/queries/spend_*.sql).
CREATE OR REPLACE MACRO spend_filtered(
    p_start, p_end, p_policy, p_environment, p_team, p_app, p_route, p_model
) AS TABLE
select
    hour, environment, app, team, route, workflow, model, deployment, stage,
    requests, failed_requests, input_tokens, output_tokens,
    by_idle_policy(p_policy, cost_separate, cost_usage, cost_even, cost_configured) as cost
from mart_spend_hourly
where
    hour >= p_start and hour < p_end
    and global_filter(
        environment, team, app, route, model, p_environment, p_team, p_app, p_route, p_model
    );
