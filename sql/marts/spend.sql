-- Services, review and the hourly spend of one window of whole hours, run after allocation.sql
-- in the same transaction (its temp tables w_hours, w_spans, w_replica_hours and
-- w_pieces_shared are still there). Definitions: docs/cost-model.md.

-- step: w_roots
-- one row per trace with a root span overlapping the window (a retrieval or tool call in the
-- window lies inside its root, so the root is in w_spans): what its other spans inherit
create or replace temp table w_roots as
select
    trace_id, environment, app, team, route, workflow,
    coalesce(task_id, 'trace:' || trace_id) as task_key
from w_spans
where parent_span_id is null and not is_engine
qualify row_number() over (partition by trace_id order by start_ns, span_id) = 1;

-- step: w_service_calls
-- one row per retrieval or tool span starting in the window, with its service key and its
-- per-call price
create or replace temp table w_service_calls as
with s as (
    select
        ws.trace_id, ws.span_id, ws.start_ns, ws.end_ns, ws.stage, ws.status_code,
        coalesce(ws.environment, r.environment) as environment,
        coalesce(ws.app, r.app) as app,
        coalesce(ws.team, r.team) as team,
        coalesce(ws.route, r.route) as route,
        coalesce(ws.workflow, r.workflow) as workflow,
        coalesce(ws.task_id, r.task_key, 'trace:' || ws.trace_id) as task_key
    from w_spans as ws
    left join w_roots as r on r.trace_id = ws.trace_id
    where ws.stage in ('retrieval', 'tools') and ws.start_ns >= $h0_ns
),

keyed as (
    select
        s.*,
        coalesce(
            kv(sp.attr_keys, sp.attr_values, 'gen_ai.tool.name'),
            kv(sp.attr_keys, sp.attr_values, 'gen_ai.data_source.id'),
            kv(sp.attr_keys, sp.attr_values, 'db.system.name'),
            kv(sp.attr_keys, sp.attr_values, 'server.address'),
            sp.name
        ) as service
    from s
    inner join spans as sp
        on
            sp.trace_id = s.trace_id and sp.span_id = s.span_id
            and sp.start_ns >= $h0_ns and sp.start_ns < $h1_ns
),

call_prices as (
    select k.trace_id, k.span_id, max(p.price) as call_price
    from keyed as k
    inner join prices_effective as p
        on
            p.kind = 'service' and p.unit = 'call' and p.subject = k.service
            and epoch_ns(p.effective_from) <= k.start_ns
            and (p.effective_to is null or k.start_ns < epoch_ns(p.effective_to))
    group by k.trace_id, k.span_id
)

select
    k.*,
    k.start_ns // 3600000000000 * 3600000000000 as hs_ns,
    (k.end_ns - k.start_ns) / 1e9 as duration_s,
    k.status_code = 2 as failed,
    coalesce(cp.call_price, 0) as call_cost
from keyed as k
left join call_prices as cp on cp.trace_id = k.trace_id and cp.span_id = k.span_id;

-- step: w_service_hours
-- one row per hour x service with an hourly price in effect: the hour's cost (a price change
-- inside the hour counts pro rata) and the calls it is spread over
create or replace temp table w_service_hours as
with hourly as (
    select
        h.hs_ns, h.hour, p.subject as service,
        coalesce(any_value(p.stage), 'retrieval') as price_stage,
        sum(
            p.price
            * (least(coalesce(epoch_ns(p.effective_to), h.he_ns), h.he_ns)
                - greatest(epoch_ns(p.effective_from), h.hs_ns))
            / 3.6e12
        ) as cost
    from w_hours as h
    inner join prices_effective as p
        on
            p.kind = 'service' and p.unit = 'hour'
            and epoch_ns(p.effective_from) < h.he_ns
            and (p.effective_to is null or epoch_ns(p.effective_to) > h.hs_ns)
    group by h.hs_ns, h.hour, p.subject
),

calls as (
    select
        hs_ns, service, count(*) as calls, sum(duration_s) as duration_s,
        any_value(stage) as stage
    from w_service_calls
    group by hs_ns, service
)

select
    h.hs_ns, h.hour, h.service, coalesce(c.stage, h.price_stage) as stage, h.cost,
    coalesce(c.calls, 0) as calls,
    coalesce(c.duration_s, 0) as duration_s,
    case when coalesce(c.calls, 0) = 0 then h.cost else 0 end as unattributed
from hourly as h
left join calls as c on c.hs_ns = h.hs_ns and c.service = h.service;

-- step: store_service_calls
delete from mart_service_calls where hour in (select hour from w_hours);

-- step: insert_service_calls
insert into mart_service_calls by name
select
    c.trace_id, c.span_id, c.start_ns,
    to_timestamp(c.hs_ns // 1000000000) as hour,
    c.environment, c.app, c.team, c.route, c.workflow, c.task_key, c.stage, c.service,
    c.duration_s, c.failed,
    c.call_cost
    + coalesce(
        case
            when h.duration_s > 0 then h.cost * c.duration_s / h.duration_s
            else h.cost / h.calls
        end,
        0
    ) as cost
from w_service_calls as c
left join w_service_hours as h on h.hs_ns = c.hs_ns and h.service = c.service;

-- step: store_service_hours
delete from mart_service_hours where hour in (select hour from w_hours);

-- step: insert_service_hours
insert into mart_service_hours by name
select hour, service, stage, cost, calls, unattributed from w_service_hours;

-- step: w_reviews
-- one row per task with review time whose last root span ends in the window: the review is
-- reported in that hour, priced at the reviewer's rate then
create or replace temp table w_reviews as
with roots as (
    -- root spans ending in the window (the final attempt's root carries the review seconds)
    select
        coalesce(task_id, 'trace:' || trace_id) as task_key,
        trace_id, start_ns, end_ns, review_s, environment, app, team, route, workflow
    from w_spans
    where
        parent_span_id is null and not is_engine
        and end_ns >= $h0_ns and end_ns < $h1_ns
),

later as (
    -- the same tasks' roots that end after the window: their review belongs to a later hour
    select distinct s.task_id as task_key
    from spans as s
    where
        s.start_ns >= $h0_ns - $lookback_ns and s.start_ns < $h1_ns + $lookback_ns
        and s.end_ns >= $h1_ns and s.parent_span_id is null and s.task_id is not null
        and s.task_id in (select task_key from roots)
),

tasks as (
    select
        task_key,
        max(end_ns) as end_ns,
        max(review_s) as span_review_s,
        arg_max(environment, end_ns) as environment,
        arg_max(app, end_ns) as app,
        arg_max(team, end_ns) as team,
        arg_max(route, end_ns) as route,
        arg_max(workflow, end_ns) as workflow
    from roots
    where task_key not in (select task_key from later)
    group by task_key
),

decided as (
    select
        t.*,
        d.review_s as decided_review_s,
        d.reviewer
    from tasks as t
    left join task_outcome_decisions as d on d.task_key = t.task_key
),

reviewed as (
    select
        *,
        coalesce(decided_review_s, span_review_s) as review_s,
        case when decided_review_s is not null then 'outcome' else 'span' end as source
    from decided
    where coalesce(decided_review_s, span_review_s) > 0
),

final as (
    select
        r.task_key, r.end_ns, r.environment, r.app, r.team, r.route, r.workflow, r.reviewer,
        r.review_s, r.source,
        r.review_s / 3600.0 * coalesce(
            (select max(p.price) from prices_effective as p
             where p.kind = 'reviewer' and p.unit = 'hour' and p.subject = r.reviewer
                and epoch_ns(p.effective_from) <= r.end_ns
                and (p.effective_to is null or r.end_ns < epoch_ns(p.effective_to))),
            (select max(p.price) from prices_effective as p
             where p.kind = 'reviewer' and p.unit = 'hour' and p.subject = '*'
                and epoch_ns(p.effective_from) <= r.end_ns
                and (p.effective_to is null or r.end_ns < epoch_ns(p.effective_to))),
            0
        ) as cost
    from reviewed as r
)

select * from final;

-- step: store_reviews
delete from mart_reviews
where hour in (select hour from w_hours) or task_key in (select task_key from w_reviews);

-- step: insert_reviews
insert into mart_reviews by name
select
    task_key, to_timestamp(end_ns // 3600000000000 * 3600) as hour, environment, app, team,
    route, workflow, reviewer, review_s, source, cost
from w_reviews;

-- step: store_spend
delete from mart_spend_hourly where hour in (select hour from w_hours);

-- step: insert_spend
-- every cost of the window's hours, one row per hour x slice x stage; the four cost columns
-- differ only on idle rows (docs/cost-model.md, "Idle policy")
insert into mart_spend_hourly by name
with req as (
    select * from mart_requests where hour in (select hour from w_hours)
),

gpu_pieces as (
    select
        p.hour, r.environment, r.app, r.team, r.route, r.workflow, r.model, p.deployment,
        p.stage, 0 as requests, 0 as failed_requests, 0 as input_tokens, 0 as output_tokens,
        p.cost as c_sep, p.cost as c_use, p.cost as c_even, p.cost as c_conf,
        p.est_cost as est, 0 as est_req, 0 as unp_req
    from mart_request_pieces as p
    inner join mart_requests as r on r.trace_id = p.trace_id and r.span_id = p.span_id
    where p.hour in (select hour from w_hours)
),

idle_shares as (
    select
        p.hour, r.environment, r.app, r.team, r.route, r.workflow, r.model, p.deployment,
        'idle' as stage, 0 as requests, 0 as failed_requests, 0 as input_tokens, 0 as output_tokens,
        0.0 as c_sep, p.idle_usage as c_use, p.idle_even as c_even,
        p.idle_configured as c_conf, 0.0 as est, 0 as est_req, 0 as unp_req
    from mart_request_pieces as p
    inner join mart_requests as r on r.trace_id = p.trace_id and r.span_id = p.span_id
    where p.hour in (select hour from w_hours)
),

token_priced as (
    select
        hour, environment, app, team, route, workflow, model, deployment, 'prefill' as stage,
        0 as requests, 0 as failed_requests, 0 as input_tokens, 0 as output_tokens,
        prefill_cost as c_sep, prefill_cost as c_use, prefill_cost as c_even,
        prefill_cost as c_conf, 0.0 as est, 0 as est_req, 0 as unp_req
    from req
    where engine_span_id is null
    union all
    select
        hour, environment, app, team, route, workflow, model, deployment, 'decode' as stage,
        0 as requests, 0 as failed_requests, 0 as input_tokens, 0 as output_tokens,
        decode_cost as c_sep, decode_cost as c_use, decode_cost as c_even,
        decode_cost as c_conf, 0.0 as est, 0 as est_req, 0 as unp_req
    from req
    where engine_span_id is null
),

counts as (
    select
        hour, environment, app, team, route, workflow, model, deployment, 'decode' as stage,
        1 as requests, case when failed then 1 else 0 end as failed_requests,
        coalesce(input_tokens, 0) as input_tokens,
        coalesce(output_tokens, 0) as output_tokens,
        0.0 as c_sep, 0.0 as c_use, 0.0 as c_even, 0.0 as c_conf, 0.0 as est,
        case when cost_basis = 'estimated' then 1 else 0 end as est_req,
        case when cost_basis = 'unpriced' then 1 else 0 end as unp_req
    from req
),

services as (
    select
        hour, environment, app, team, route, workflow, null as model, null as deployment,
        stage, 0 as requests, 0 as failed_requests, 0 as input_tokens, 0 as output_tokens,
        cost as c_sep, cost as c_use, cost as c_even, cost as c_conf, 0.0 as est, 0 as est_req,
        0 as unp_req
    from mart_service_calls
    where hour in (select hour from w_hours)
),

service_idle as (
    select
        hour, null as environment, null as app, null as team, null as route,
        null as workflow, null as model, null as deployment, stage,
        0 as requests, 0 as failed_requests, 0 as input_tokens, 0 as output_tokens,
        unattributed as c_sep, unattributed as c_use, unattributed as c_even,
        unattributed as c_conf, 0.0 as est, 0 as est_req, 0 as unp_req
    from w_service_hours
    where unattributed > 0
),

reviews as (
    select
        hour, environment, app, team, route, workflow, null as model, null as deployment,
        'review' as stage, 0 as requests, 0 as failed_requests, 0 as input_tokens, 0 as output_tokens,
        cost as c_sep, cost as c_use, cost as c_even, cost as c_conf, 0.0 as est, 0 as est_req,
        0 as unp_req
    from mart_reviews
    where hour in (select hour from w_hours)
),

dep_hours as (
    select
        hs_ns, any_value(hour) as hour, deployment, sum(idle_cost) as idle_cost,
        any_value(idle_policy) as idle_policy
    from w_replica_hours
    group by hs_ns, deployment
),

dep_usage as (
    select
        hour, deployment, sum(cost) as usage_cost, count(*) as pieces
    from w_pieces_shared
    group by hour, deployment
),

idle_left as (
    -- the idle nobody shares: all of it under `separate`, and under a sharing policy the
    -- idle of a deployment-hour that had no usage (or no request) to share it by
    select
        d.hour, null as environment, null as app, null as team, null as route,
        null as workflow, dm.model, d.deployment, 'idle' as stage,
        0 as requests, 0 as failed_requests, 0 as input_tokens, 0 as output_tokens,
        d.idle_cost as c_sep,
        case when coalesce(u.usage_cost, 0) > 0 then 0 else d.idle_cost end as c_use,
        case when coalesce(u.pieces, 0) > 0 then 0 else d.idle_cost end as c_even,
        by_idle_policy(
            d.idle_policy,
            d.idle_cost,
            case when coalesce(u.usage_cost, 0) > 0 then 0 else d.idle_cost end,
            case when coalesce(u.pieces, 0) > 0 then 0 else d.idle_cost end,
            d.idle_cost
        ) as c_conf,
        0.0 as est, 0 as est_req, 0 as unp_req
    from dep_hours as d
    left join dep_usage as u on u.hour = d.hour and u.deployment = d.deployment
    left join (
        select deployment, any_value(model) as model from deployment_replicas group by deployment
    ) as dm on dm.deployment = d.deployment
    where d.idle_cost <> 0
),

everything as (
    select * from gpu_pieces
    union all select * from idle_shares
    union all select * from token_priced
    union all select * from counts
    union all select * from services
    union all select * from service_idle
    union all select * from reviews
    union all select * from idle_left
)

select
    hour, environment, app, team, route, workflow, model, deployment, stage,
    sum(requests) as requests,
    sum(failed_requests) as failed_requests,
    sum(input_tokens) as input_tokens,
    sum(output_tokens) as output_tokens,
    sum(c_sep) as cost_separate,
    sum(c_use) as cost_usage,
    sum(c_even) as cost_even,
    sum(c_conf) as cost_configured,
    sum(est) as estimated_cost,
    sum(est_req) as estimated_requests,
    sum(unp_req) as unpriced_requests
from everything
group by all;
