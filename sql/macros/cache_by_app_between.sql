-- one row per app × route: prefix-cache hit rate from the requests' own cached-token counts in
-- the hours [start_ts, end_ts) (NULL: unbounded), the prefill cost the cache saved, and a rank
-- of the poorest sharers (1 = lowest hit rate; ties: more prompt tokens first).
-- hit_rate = cached_input_tokens ÷ cache_reported_input_tokens: requests whose spans do not
-- report cached tokens are left out of the rate (they still count in requests, input_tokens).
-- prefill_cost_saved = Σ over self-hosted deployment-hours of the app's cached tokens × that
-- deployment-hour's prefill cost per uncached prompt token (docs/cost-model.md "Efficiency");
-- hosted requests save by their price book's cached-input price and are not counted here.
-- The view cache_by_app is this macro over all hours. Call:
-- select * from cache_by_app_between(?, ?) order by poor_sharing_rank
CREATE OR REPLACE MACRO cache_by_app_between(start_ts, end_ts) AS TABLE
with rows_in_range as (
    select *
    from mart_cache_by_app
    where
        (start_ts is null or hour >= start_ts)
        and (end_ts is null or hour < end_ts)
),

unit_costs as (
    -- prefill cost per uncached prompt token, per self-hosted deployment-hour
    select
        hour, deployment,
        sum(prefill_cost) / nullif(sum(uncached_input_tokens), 0) as prefill_cost_per_token
    from rows_in_range
    where hosting = 'self_hosted' and deployment is not null
    group by hour, deployment
),

by_app as (
    select
        r.app, r.route,
        cast(sum(r.requests) as bigint) as requests,
        cast(sum(r.input_tokens) as bigint) as input_tokens,
        cast(sum(r.cache_reported_input_tokens) as bigint) as cache_reported_input_tokens,
        cast(sum(r.cached_input_tokens) as bigint) as cached_input_tokens,
        cast(sum(r.uncached_input_tokens) as bigint) as uncached_input_tokens,
        sum(r.prefill_cost) as prefill_cost,
        coalesce(
            sum(r.cached_input_tokens * u.prefill_cost_per_token)
                filter (where r.hosting = 'self_hosted'),
            0
        ) as prefill_cost_saved,
        min(r.hour) as first_hour,
        max(r.hour) as last_hour
    from rows_in_range as r
    left join unit_costs as u on u.hour = r.hour and u.deployment = r.deployment
    group by r.app, r.route
),

final as (
    select
        *,
        cached_input_tokens / nullif(cache_reported_input_tokens, 0) as hit_rate,
        input_tokens / nullif(sum(input_tokens) over (), 0) as input_token_share,
        case when cache_reported_input_tokens > 0 then
            rank() over (
                partition by cache_reported_input_tokens > 0
                order by
                    cached_input_tokens / nullif(cache_reported_input_tokens, 0),
                    cache_reported_input_tokens desc
            )
        end as poor_sharing_rank
    from by_app
)

select * from final;
