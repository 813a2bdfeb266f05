-- one row per FOCUS charge of the hours [$start, $stop): the ledger's spend (idle policy
-- `separate`) as priced meters, in exact decimals. ledger/focus.py wraps it in
-- focus_1_2.sql or focus_1_3.sql, which name the FOCUS columns. Definitions: docs/focus.md.
--
-- source       tokens | gpu | service_call | service_hour | review
-- quantity     PricingQuantity, DECIMAL(38,9); cost = quantity x unit_price, exactly
-- split rows   a GPU replica-hour (or an hourly service) split across apps and teams: they
--              share origin_id, their alloc_ratio adds up to exactly 1 and their quantities to
--              exactly the origin's; idle is its own part (stage 'idle', no app)
with

-- hosted API requests (no engine span): each token meter at the price in effect at the
-- request's start; cached input without a price of its own is priced (and counted) as input
hosted as (
    select
        r.hour, r.start_ns, r.environment, r.app, r.team, r.route, r.workflow, r.model,
        coalesce(r.provider, 'unknown') as provider,
        unnest([
            {'unit': 'input_mtok', 'tokens': greatest(coalesce(r.input_tokens, 0)
                - coalesce(r.cached_input_tokens, 0), 0)},
            {'unit': 'cached_input_mtok', 'tokens': coalesce(r.cached_input_tokens, 0)},
            {'unit': 'output_mtok', 'tokens': coalesce(r.output_tokens, 0)}
        ]) as meter
    from mart_requests as r
    where r.engine_span_id is null and r.hosting = 'hosted' and r.hour >= $start and r.hour < $stop
),

hosted_priced as (
    select
        h.*,
        coalesce(own.price_id, fallback.price_id) as price_id,
        coalesce(own.price, fallback.price) as price,
        case when own.price_id is null then 'input_mtok' else h.meter.unit end as unit
    from hosted as h
    left join prices_effective as own
        on
            own.kind = 'model' and own.subject = h.model and own.unit = h.meter.unit
            and epoch_ns(own.effective_from) <= h.start_ns
            and (own.effective_to is null or h.start_ns < epoch_ns(own.effective_to))
    left join prices_effective as fallback
        on
            h.meter.unit = 'cached_input_mtok'
            and fallback.kind = 'model' and fallback.subject = h.model
            and fallback.unit = 'input_mtok'
            and epoch_ns(fallback.effective_from) <= h.start_ns
            and (fallback.effective_to is null or h.start_ns < epoch_ns(fallback.effective_to))
    where h.meter.tokens > 0
),

tokens as (
    select
        'tokens' as source, hour, environment, app, team, route, workflow, model,
        null::varchar as deployment, null::varchar as replica, null::varchar as gpu_type,
        case unit when 'output_mtok' then 'decode' else 'prefill' end as stage,
        null::varchar as service, null::varchar as reviewer, provider, unit, price_id,
        any_value(price) as price,
        sum(meter.tokens)::decimal(38, 9) as consumed,
        (sum(meter.tokens)::decimal(38, 9) * 0.000001)::decimal(38, 9) as quantity,
        null::varchar as origin_id, null::decimal(38, 12) as alloc_ratio,
        null::double as alloc_usage
    from hosted_priced
    where price_id is not null
    group by all
),

-- self-hosted replica-hours with a cost: the GPU-hours they were paid for (scraped up time plus
-- estimated time) and the GPU price versions in effect during the hour, the deployment's
-- override before the fleet-wide price
replica_hours as (
    select
        h.hour, h.replica, h.deployment, h.gpus, h.total_cost, h.idle_cost, h.gpu_s,
        h.usage_gpu_s,
        (h.gpu_s + h.gpus * h.est_s) / 3600.0 as gpu_hours,
        dr.gpu_type, dr.model
    from mart_replica_hours as h
    left join deployment_replicas as dr on dr.replica = h.replica
    where h.hour >= $start and h.hour < $stop and h.total_cost > 0
),

gpu_overlaps as (
    select
        rh.hour, rh.replica, p.price_id, p.price, p.deployment <> '' as is_override,
        epoch(least(coalesce(p.effective_to, rh.hour + interval 1 hour), rh.hour + interval 1 hour))
        - epoch(greatest(p.effective_from, rh.hour)) as seconds
    from replica_hours as rh
    inner join prices_effective as p
        on
            p.kind = 'gpu' and p.unit = 'gpu_hour' and p.subject = rh.gpu_type
            and p.deployment in ('', rh.deployment)
            and p.effective_from < rh.hour + interval 1 hour
            and (p.effective_to is null or p.effective_to > rh.hour)
),

-- the fleet-wide price covers what no override does (pro rata within the hour)
gpu_versions as (
    select
        hour, replica, price_id, price,
        case
            when is_override then seconds
            else seconds * greatest(
                1 - coalesce(sum(seconds) filter (where is_override)
                    over (partition by hour, replica), 0) / 3600.0, 0)
        end as seconds
    from gpu_overlaps
),

-- the GPU-hours each version priced: with one version, the hour's cost / its price (exact
-- whatever part of the hour was up or priced); with two over the whole hour, the split that
-- gives the hour's cost at their two prices; else the hour's GPU-hours pro rata of time
gpu_counted as (
    select
        v.*,
        count(*) over w as versions,
        sum(v.seconds) over w as covered_s,
        sum(v.price) over w - v.price as other_price
    from gpu_versions as v
    where v.seconds > 0
    window w as (partition by v.hour, v.replica)
),

gpu_origins as (
    select
        rh.*, v.price_id, v.price,
        'gpu:' || rh.replica || '@' || strftime(timezone('UTC', rh.hour), '%Y-%m-%dT%H')
        || '#' || v.price_id as origin_id,
        round(case
            when v.versions = 1 and v.price > 0 then rh.total_cost / v.price
            when v.versions = 2 and v.covered_s >= 3600 - 1e-6 and v.price <> v.other_price
                then least(greatest(
                    (rh.total_cost - v.other_price * rh.gpu_hours) / (v.price - v.other_price),
                    0), rh.gpu_hours)
            else rh.gpu_hours * v.seconds / 3600.0
        end, 9)::decimal(38, 9) as origin_quantity
    from replica_hours as rh
    inner join gpu_counted as v on v.hour = rh.hour and v.replica = rh.replica
),

-- what each replica-hour is split by: its requests' GPU-share cost per slice and stage
-- (docs/cost-model.md, "The GPU-share estimator"), and its idle cost as its own part
gpu_parts as (
    select
        p.hour, p.replica, r.environment, r.app, r.team, r.route, r.workflow, p.stage,
        sum(p.cost) as weight, sum(p.gpu_s) as usage
    from mart_request_pieces as p
    inner join mart_requests as r on r.trace_id = p.trace_id and r.span_id = p.span_id
    where p.hour >= $start and p.hour < $stop
    group by all
    having sum(p.cost) > 0
    union all
    select
        hour, replica, null, null, null, null, null, 'idle', idle_cost,
        greatest(gpu_s - usage_gpu_s, 0)
    from replica_hours
    where idle_cost > 0
),

gpu_split as (
    select
        o.hour, o.replica, o.deployment, o.gpu_type, o.model, o.price_id, o.price,
        o.origin_id, o.origin_quantity,
        p.environment, p.app, p.team, p.route, p.workflow, p.stage, p.usage,
        p.weight / sum(p.weight) over (partition by o.origin_id) as share,
        row_number() over (
            partition by o.origin_id
            order by p.weight desc, p.stage, p.environment, p.app, p.team, p.route, p.workflow
        ) as rank
    from gpu_origins as o
    inner join gpu_parts as p on p.hour = o.hour and p.replica = o.replica
),

-- service calls priced per call, at the price in effect at the call's start
service_calls as (
    select
        'service_call' as source, c.hour, c.environment, c.app, c.team, c.route, c.workflow,
        null::varchar as model, null::varchar as deployment, null::varchar as replica,
        null::varchar as gpu_type, c.stage, c.service, null::varchar as reviewer,
        null::varchar as provider, 'call' as unit, p.price_id, any_value(p.price) as price,
        count(*)::decimal(38, 9) as consumed, count(*)::decimal(38, 9) as quantity,
        null::varchar as origin_id, null::decimal(38, 12) as alloc_ratio,
        null::double as alloc_usage
    from mart_service_calls as c
    inner join prices_effective as p
        on
            p.kind = 'service' and p.unit = 'call' and p.subject = c.service
            and epoch_ns(p.effective_from) <= c.start_ns
            and (p.effective_to is null or c.start_ns < epoch_ns(p.effective_to))
    where c.hour >= $start and c.hour < $stop
    group by all
),

-- services priced per hour: the hours each price version was in effect, split over the hour's
-- calls by duration (equally per call when they took no time), as mart_service_calls does
service_hour_origins as (
    select
        h.hour, h.service, h.stage, p.price_id, p.price,
        'service:' || h.service || '@' || strftime(timezone('UTC', h.hour), '%Y-%m-%dT%H')
        || '#' || p.price_id as origin_id,
        round((epoch(least(coalesce(p.effective_to, h.hour + interval 1 hour),
            h.hour + interval 1 hour)) - epoch(greatest(p.effective_from, h.hour))) / 3600.0, 9)
            ::decimal(38, 9) as origin_quantity
    from mart_service_hours as h
    inner join prices_effective as p
        on
            p.kind = 'service' and p.unit = 'hour' and p.subject = h.service
            and p.effective_from < h.hour + interval 1 hour
            and (p.effective_to is null or p.effective_to > h.hour)
    where h.hour >= $start and h.hour < $stop
),

service_hour_parts as (
    select
        hour, service, environment, app, team, route, workflow,
        sum(duration_s) as duration_s, count(*) as calls
    from mart_service_calls
    where hour >= $start and hour < $stop
    group by all
),

service_hour_split as (
    select
        o.*, p.environment, p.app, p.team, p.route, p.workflow,
        p.duration_s as usage,
        case
            when p.service is null then 1.0
            when sum(p.duration_s) over (partition by o.origin_id) > 0
                then p.duration_s / sum(p.duration_s) over (partition by o.origin_id)
            else p.calls / sum(p.calls) over (partition by o.origin_id)
        end as share,
        row_number() over (
            partition by o.origin_id
            order by p.duration_s desc nulls last, p.calls desc, p.environment, p.app,
                p.team, p.route, p.workflow
        ) as rank,
        p.service is not null as split
    from service_hour_origins as o
    left join service_hour_parts as p on p.hour = o.hour and p.service = o.service
),

-- human review: reviewer hours at the rate the ledger used (the version in effect during the
-- hour whose price matches the hour's cost per review hour)
review_rates as (
    select
        r.hour, r.environment, r.app, r.team, r.route, r.workflow,
        coalesce(r.reviewer, '*') as reviewer, sum(r.review_s) as review_s,
        sum(r.cost) as cost
    from mart_reviews as r
    where r.hour >= $start and r.hour < $stop and r.cost > 0
    group by all
),

reviews as (
    select
        'review' as source, r.hour, r.environment, r.app, r.team, r.route, r.workflow,
        null::varchar as model, null::varchar as deployment, null::varchar as replica,
        null::varchar as gpu_type, 'review' as stage, null::varchar as service, r.reviewer,
        null::varchar as provider, 'hour' as unit,
        arg_min(p.price_id, abs(p.price - r.cost / (r.review_s / 3600.0))) as price_id,
        arg_min(p.price, abs(p.price - r.cost / (r.review_s / 3600.0))) as price,
        round(any_value(r.review_s) / 3600.0, 9)::decimal(38, 9) as consumed,
        round(any_value(r.review_s) / 3600.0, 9)::decimal(38, 9) as quantity,
        null::varchar as origin_id, null::decimal(38, 12) as alloc_ratio,
        null::double as alloc_usage
    from review_rates as r
    inner join prices_effective as p
        on
            p.kind = 'reviewer' and p.unit = 'hour' and p.subject in (r.reviewer, '*')
            and p.effective_from < r.hour + interval 1 hour
            and (p.effective_to is null or p.effective_to > r.hour)
    group by r.hour, r.environment, r.app, r.team, r.route, r.workflow, r.reviewer
),

-- split parts: ratios rounded to 12 places and quantities to 9, the largest part taking the
-- remainder, so that both add up exactly per origin charge
split as (
    select
        'gpu' as source, hour, environment, app, team, route, workflow, model, deployment,
        replica, gpu_type, stage, null::varchar as service, null::varchar as reviewer,
        null::varchar as provider, 'gpu_hour' as unit, price_id, price, origin_id,
        origin_quantity, share::decimal(38, 12) as ratio, rank, usage, true as split
    from gpu_split
    union all
    select
        'service_hour', hour, environment, app, team, route, workflow, null, null, null, null,
        stage, service, null, null, 'hour', price_id, price, origin_id, origin_quantity,
        share::decimal(38, 12), rank, usage, split
    from service_hour_split
),

split_exact as (
    select
        *,
        case
            when rank = 1
                then 1 - (sum(ratio) over (partition by origin_id) - ratio)
            else ratio
        end as alloc_ratio,
        (origin_quantity * ratio)::decimal(38, 9) as part_quantity
    from split
),

split_rows as (
    select
        source, hour, environment, app, team, route, workflow, model, deployment, replica,
        gpu_type, stage, service, reviewer, provider, unit, price_id, price,
        case
            when rank = 1
                then origin_quantity
                - (sum(part_quantity) over (partition by origin_id) - part_quantity)
            else part_quantity
        end as consumed,
        case
            when rank = 1
                then origin_quantity
                - (sum(part_quantity) over (partition by origin_id) - part_quantity)
            else part_quantity
        end as quantity,
        case when split then origin_id end as origin_id,
        case when split then alloc_ratio::decimal(38, 12) end as alloc_ratio,
        case when split then usage end as alloc_usage
    from split_exact
),

everything as (
    select * from tokens
    union all by name select * from split_rows
    union all by name select * from service_calls
    union all by name select * from reviews
),

final as (
    select
        * exclude (price, consumed, quantity),
        consumed::decimal(38, 9) as consumed,
        quantity::decimal(38, 9) as quantity,
        price::decimal(38, 10) as unit_price,
        (quantity::decimal(38, 9) * price::decimal(38, 10))::decimal(38, 19) as cost
    from everything
    -- a split part keeps its row even when its quantity rounds to 0: the ratios must add up
    where quantity > 0 or origin_id is not null
)

select * from final
