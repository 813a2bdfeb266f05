-- one row per app × route over every hour in mart_cache_by_app: prefix-cache hit rate from the
-- requests' cached-token counts, prefill cost saved, and poor_sharing_rank (1 = the app and route
-- whose requests share prefixes worst). For a range of hours use cache_by_app_between(start, end);
-- the formulas are in sql/macros/cache_by_app_between.sql and docs/efficiency.md.
with by_app as (
    select * from cache_by_app_between(null, null)
),

final as (
    select
        app, route, requests, input_tokens, cache_reported_input_tokens, cached_input_tokens,
        uncached_input_tokens, hit_rate, input_token_share, prefill_cost, prefill_cost_saved,
        poor_sharing_rank, first_hour, last_hour
    from by_app
)

select * from final
