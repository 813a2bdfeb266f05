-- one row per false-economy finding whose week overlaps [$start, $end): a route or workflow
-- where cost per request (or per 1M tokens) fell while cost per accepted outcome rose, with
-- its one-sentence explanation (false_economy_findings, docs/unit-economics.md). The app and
-- route filters match route-level findings only (a workflow-level one has neither).
select
    kind, scope, workflow, app, route, week, week_before, model_before, model_after,
    cost_per_request_change_pct, cost_per_1m_tokens_change_pct, cost_per_accepted_change_pct,
    accepted_rate_before, accepted_rate_after, explanation
from false_economy_findings
where
    week < cast(timezone('UTC', $end) as date)
    and week + 7 > cast(timezone('UTC', $start) as date)
    and ($app is null or app = $app)
    and ($route is null or route = $route)
order by week desc, scope, workflow nulls last, app nulls last, route nulls last
