-- one row per key of $dim (team, app, route, model, workflow, deployment, environment): spend,
-- requests, input tokens and retry spend in [$start, $end) and in the period of the same length
-- just before it, under idle policy $policy; the unshared idle is its own key '(idle)'. The
-- inputs of the top-movers decomposition (models/overview.py decompose). Retry spend: LLM calls
-- of attempts after the first (inferledger.attempt > 1) with their idle share under the policy.
with spend as (
    select
        coalesce(
            case $dim
                when 'team' then team
                when 'app' then app
                when 'route' then route
                when 'model' then model
                when 'workflow' then workflow
                when 'deployment' then deployment
                when 'environment' then environment
            end,
            case when stage = 'idle' and app is null then '(idle)' else '(none)' end
        ) as key,
        hour >= $start as current,
        cost,
        requests,
        input_tokens
    from spend_hourly
    where
        idle_policy = $policy and hour >= $start - ($end - $start) and hour < $end
        and global_filter(
            environment, team, app, route, model, $environment, $team, $app, $route, $model
        )
),

retries as (
    select
        coalesce(
            case $dim
                when 'team' then team
                when 'app' then app
                when 'route' then route
                when 'model' then model
                when 'workflow' then workflow
                when 'deployment' then deployment
                when 'environment' then environment
            end,
            '(none)'
        ) as key,
        hour >= $start as current,
        prefill_cost + decode_cost
        + by_idle_policy($policy, 0, idle_usage_cost, idle_even_cost, idle_configured_cost)
            as cost
    from mart_requests
    where
        attempt > 1 and hour >= $start - ($end - $start) and hour < $end
        and global_filter(
            environment, team, app, route, model, $environment, $team, $app, $route, $model
        )
),

spend_sums as (
    select
        key,
        coalesce(sum(cost) filter (where current), 0) as cost,
        coalesce(sum(cost) filter (where not current), 0) as cost_before,
        cast(coalesce(sum(requests) filter (where current), 0) as bigint) as requests,
        cast(coalesce(sum(requests) filter (where not current), 0) as bigint) as requests_before,
        cast(coalesce(sum(input_tokens) filter (where current), 0) as bigint) as input_tokens,
        cast(coalesce(sum(input_tokens) filter (where not current), 0) as bigint)
            as input_tokens_before
    from spend
    group by key
),

retry_sums as (
    select
        key,
        coalesce(sum(cost) filter (where current), 0) as retry_cost,
        coalesce(sum(cost) filter (where not current), 0) as retry_cost_before
    from retries
    group by key
),

final as (
    select
        s.*,
        coalesce(r.retry_cost, 0) as retry_cost,
        coalesce(r.retry_cost_before, 0) as retry_cost_before,
        s.cost - s.cost_before as delta
    from spend_sums as s
    left join retry_sums as r on r.key = s.key
)

select * from final
order by abs(delta) desc, key
limit $limit
