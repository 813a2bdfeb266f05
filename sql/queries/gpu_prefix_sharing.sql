-- one row per app x route: prefix-cache hit rate from the requests' cached-token counts over
-- the hours [$start, $end), their share of all input tokens, the prefill cost the cache saved,
-- and poor_sharing_rank (1 = the app and route whose requests share prefixes worst; NULL: no
-- request reported a cached count). cache_by_app_between; the app and route filters apply
-- (its mart has no team or environment, and it is ranked over every model).
select
    app, route,
    concat(coalesce(app, '(none)'), ' ', coalesce(route, '(none)')) as label,
    requests, input_tokens, cache_reported_input_tokens, cached_input_tokens,
    hit_rate, input_token_share, prefill_cost, prefill_cost_saved, poor_sharing_rank
from cache_by_app_between($start, $end)
where
    ($app is null or app = $app)
    and ($route is null or route = $route)
order by poor_sharing_rank nulls last, input_tokens desc
