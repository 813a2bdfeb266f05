-- one row per app (NULL app as '(none)'): the capacity planner's per-app figures over
-- [$start, $end) in the scope ($apps, $routes: empty lists mean all; $environment: NULL means
-- all): requests, tasks, prefix-cache tokens, the shared prefix's length (median cached tokens
-- of the requests that hit), and the model it runs on: the most frequent self-hosted model,
-- else the most frequent model (ledger/capacity_profile.py, docs/capacity-planner.md).
with requests as (
    select *
    from capacity_requests(
        $start::timestamptz, $end::timestamptz, $apps::varchar[], $routes::varchar[],
        $environment::varchar
    )
),

models as (
    select
        app, model,
        count(*) filter (where hosting = 'self_hosted') as self_hosted,
        count(*) as requests
    from requests
    where model is not null
    group by all
),

app_model as (
    select app, arg_max(model, (self_hosted, requests, model)) as model,
        max(self_hosted) > 0 as self_hosted
    from models
    group by all
),

sums as (
    select
        app,
        count(*) as requests,
        count(distinct task_key) as tasks,
        count(*) filter (where cached_input_tokens is not null and input_tokens > 0)
            as cache_requests,
        cast(coalesce(sum(input_tokens) filter (
            where cached_input_tokens is not null and input_tokens > 0), 0) as double)
            as cache_queried_tokens,
        cast(coalesce(sum(cached_input_tokens) filter (where input_tokens > 0), 0) as double)
            as cache_hit_tokens,
        cast(median(cached_input_tokens) filter (where cached_input_tokens > 0) as double)
            as prefix_len
    from requests
    group by all
),

final as (
    select s.*, m.model, coalesce(m.self_hosted, false) as self_hosted
    from sums as s
    left join app_model as m on m.app = s.app
)

select * from final order by app
