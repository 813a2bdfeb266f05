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
    case p_policy
        when 'separate' then cost_separate
        when 'usage' then cost_usage
        when 'even' then cost_even
        else cost_configured
    end as cost
from mart_spend_hourly
where
    hour >= p_start and hour < p_end
    and (p_environment is null or environment = p_environment)
    and (p_team is null or team = p_team)
    and (p_app is null or app = p_app)
    and (p_route is null or route = p_route)
    and (p_model is null or model = p_model);
