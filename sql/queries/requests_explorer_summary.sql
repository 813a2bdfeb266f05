-- one row: how many LLM requests in [$start, $end) match the global and explorer filters (the
-- explorer's total and page count, $page_size rows a page), their cost under idle policy
-- $policy and how many failed. Same filters as requests_explorer.sql.
with requests as (
    select
        failed,
        prefill_cost + decode_cost + case $policy
            when 'separate' then 0.0
            when 'usage' then idle_usage_cost
            when 'even' then idle_even_cost
            else idle_configured_cost
        end as cost
    from mart_requests
    where
        hour >= $start and hour < $end
        and ($environment is null or environment = $environment)
        and ($team is null or team = $team)
        and ($app is null or app = $app)
        and ($route is null or route = $route)
        and ($model is null or model = $model)
        and ($hosting is null or hosting = $hosting)
        and (not $failed_only or failed)
        and ($model_like is null or contains(lower(model), lower($model_like)))
),

final as (
    select
        count(*) as requests,
        coalesce(sum(cost), 0) as cost,
        count(*) filter (where failed) as failed,
        cast(ceil(count(*) / $page_size) as bigint) as pages
    from requests
    where $min_cost is null or cost >= $min_cost
)

select * from final
