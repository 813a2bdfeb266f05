-- one row per hour: what was spent, added up from the priced inputs rather than from the
-- allocation, for reconciling with the bill: GPU time up x price, hosted tokens x price,
-- services, review. For every idle policy, sum(spend_hourly.cost) over the hour = `total`.
-- gpu_cost includes estimated_cost: GPU time requests ran with no scrape behind them, costed
-- from the deployment's size and price (docs/cost-model.md, "Coverage").
with gpu as (
    select
        hour,
        sum(total_cost) as gpu_cost,
        sum(est_cost) as estimated_cost,
        sum(gpu_s) / 3600 as gpu_hours,
        sum(idle_cost) as idle_cost
    from mart_replica_hours
    group by hour
),

hosted as (
    select hour, sum(prefill_cost + decode_cost) as hosted_cost
    from mart_requests
    where engine_span_id is null
    group by hour
),

-- a call's cost holds its per-call price and its share of an hourly price; an hour of an
-- hourly-priced service without a call is its own line
services as (
    select hour, sum(cost) as service_cost
    from (
        select hour, cost from mart_service_calls
        union all
        select hour, unattributed as cost from mart_service_hours
    )
    group by hour
),

reviews as (
    select hour, sum(cost) as review_cost from mart_reviews group by hour
),

hours as (
    select hour from gpu
    union select hour from hosted
    union select hour from services
    union select hour from reviews
),

final as (
    select
        h.hour,
        coalesce(g.gpu_cost, 0) as gpu_cost,
        coalesce(g.estimated_cost, 0) as estimated_cost,
        coalesce(g.gpu_hours, 0) as gpu_hours,
        coalesce(g.idle_cost, 0) as idle_cost,
        coalesce(x.hosted_cost, 0) as hosted_cost,
        coalesce(s.service_cost, 0) as service_cost,
        coalesce(r.review_cost, 0) as review_cost,
        coalesce(g.gpu_cost, 0) + coalesce(x.hosted_cost, 0) + coalesce(s.service_cost, 0)
        + coalesce(r.review_cost, 0) as total
    from hours as h
    left join gpu as g on g.hour = h.hour
    left join hosted as x on x.hour = h.hour
    left join services as s on s.hour = h.hour
    left join reviews as r on r.hour = h.hour
)

select * from final
