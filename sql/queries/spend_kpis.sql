-- one row: spend, idle, requests and tokens in [$start, $end) under idle policy $policy, with
-- the part of the spend that is estimated (GPU time with no scrape behind it) and the requests
-- estimated or not costable at all (docs/cost-model.md, "Coverage")
with spend as (
    select
        coalesce(sum(cost), 0) as cost,
        coalesce(sum(cost) filter (where stage = 'idle'), 0) as idle_cost,
        coalesce(sum(cost) filter (where stage = 'idle' and app is null), 0)
            as unshared_idle_cost,
        coalesce(sum(requests), 0) as requests,
        coalesce(sum(input_tokens), 0) as input_tokens,
        coalesce(sum(output_tokens), 0) as output_tokens
    from spend_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
),

marks as (
    select
        coalesce(sum(estimated_cost), 0) as estimated_cost,
        coalesce(sum(estimated_requests), 0) as estimated_requests,
        coalesce(sum(unpriced_requests), 0) as unpriced_requests
    from mart_spend_hourly
    where
        hour >= $start and hour < $end
        and global_filter(
            environment, team, app, route, model, $environment, $team, $app, $route, $model
        )
),

final as (
    select s.*, m.estimated_cost, m.estimated_requests, m.unpriced_requests
    from spend as s
    cross join marks as m
)

select * from final
