-- The cost allocation of one window of whole hours [$h0_ns, $h1_ns), run by models/allocation.py
-- statement by statement (each `-- step:` is one statement) inside one write transaction.
-- Definitions: docs/cost-model.md. Times are integer Unix nanoseconds; an hour is 3.6e12 ns.
-- Every step reads only the window (plus $lookback_ns before it for requests and tasks that
-- began earlier), so a refresh costs what the window holds, not what the database holds.

-- step: w_hours
-- one row per hour of the window
create or replace temp table w_hours as
select
    range as hs_ns,
    range + 3600000000000 as he_ns,
    to_timestamp(range // 1000000000) as hour
from range($h0_ns::bigint, $h1_ns::bigint, 3600000000000::bigint);

-- step: w_spans
-- one row per span that overlaps the window or began up to $lookback_ns before it
create or replace temp table w_spans as
select
    trace_id, span_id, parent_span_id, name, start_ns, end_ns, status_code, service_name,
    service_instance_id, environment, gen_ai_operation, gen_ai_provider, request_model,
    response_model, input_tokens, output_tokens, cached_input_tokens, latency_queue_s,
    latency_ttft_s, latency_e2e_s, app, team, route, stage, task_id, workflow, attempt,
    fallback, review_s,
    (name = 'llm_request' or latency_ttft_s is not null) as is_engine
from stg_spans
where start_ns >= $h0_ns - $lookback_ns and start_ns < $h1_ns and end_ns >= $h0_ns;

-- step: w_req
-- one row per LLM request that overlaps the window: the app's GenAI client span with its
-- engine span, or an engine span with no client span
create or replace temp table w_req as
with engine as (
    select * from w_spans where is_engine
),

client as (
    select * from w_spans
    where
        not is_engine
        and gen_ai_operation in ('chat', 'text_completion', 'generate_content', 'embeddings')
),

roots as (
    select trace_id, environment, app, team, route, workflow, task_id, attempt, fallback
    from w_spans
    where parent_span_id is null and not is_engine
    qualify row_number() over (partition by trace_id order by start_ns, span_id) = 1
),

paired as (
    select
        c.trace_id, c.span_id, e.span_id as engine_span_id, c.start_ns, c.end_ns,
        c.environment, c.app, c.team, c.route, c.workflow, c.task_id, c.attempt, c.fallback,
        c.service_name, c.gen_ai_operation as operation, c.gen_ai_provider as provider,
        coalesce(c.request_model, c.response_model, e.request_model) as model,
        e.service_instance_id as replica,
        (c.status_code = 2 or coalesce(e.status_code, 0) = 2) as failed,
        coalesce(c.input_tokens, e.input_tokens) as input_tokens,
        coalesce(c.cached_input_tokens, e.cached_input_tokens) as cached_input_tokens,
        coalesce(c.output_tokens, e.output_tokens) as output_tokens,
        e.start_ns as e_start_ns, e.end_ns as e_end_ns, e.latency_queue_s, e.latency_ttft_s,
        (c.end_ns - c.start_ns) / 1e9 as e2e_s
    from client as c
    left join engine as e on e.trace_id = c.trace_id and e.parent_span_id = c.span_id
    qualify row_number() over (
        partition by c.trace_id, c.span_id order by e.start_ns nulls last, e.span_id
    ) = 1
),

orphans as (
    select
        e.trace_id, e.span_id, e.span_id as engine_span_id, e.start_ns, e.end_ns,
        e.environment, e.app, e.team, e.route, e.workflow, e.task_id, e.attempt, e.fallback,
        e.service_name, coalesce(e.gen_ai_operation, 'chat') as operation,
        e.gen_ai_provider as provider, coalesce(e.request_model, e.response_model) as model,
        e.service_instance_id as replica, e.status_code = 2 as failed,
        e.input_tokens, e.cached_input_tokens, e.output_tokens,
        e.start_ns as e_start_ns, e.end_ns as e_end_ns, e.latency_queue_s, e.latency_ttft_s,
        coalesce(e.latency_e2e_s, (e.end_ns - e.start_ns) / 1e9) as e2e_s
    from engine as e
    anti join client as c on c.trace_id = e.trace_id and c.span_id = e.parent_span_id
),

final as (
    select
        p.trace_id, p.span_id, p.engine_span_id, p.start_ns, p.end_ns,
        coalesce(p.environment, r.environment) as environment,
        coalesce(p.app, r.app) as app,
        coalesce(p.team, r.team) as team,
        coalesce(p.route, r.route) as route,
        coalesce(p.workflow, r.workflow) as workflow,
        coalesce(p.task_id, r.task_id, 'trace:' || p.trace_id) as task_key,
        coalesce(p.attempt, r.attempt) as attempt,
        coalesce(p.fallback, r.fallback, false) as fallback,
        p.service_name, p.operation, p.provider,
        coalesce(p.model, dr.model) as model,
        case when p.engine_span_id is not null then coalesce(dr.deployment, p.replica) end
            as deployment,
        p.replica, p.failed, p.input_tokens, p.cached_input_tokens, p.output_tokens,
        p.e_start_ns, p.e_end_ns, p.latency_queue_s, p.latency_ttft_s, p.e2e_s,
        coalesce(dr.gpus, 1) as gpus
    from (select * from paired union all by name select * from orphans) as p
    left join roots as r on r.trace_id = p.trace_id
    left join deployment_replicas as dr on dr.replica = p.replica
)

select * from final;

-- step: w_intervals
-- one row per engine request x stage x hour of the window: the stage's interval, clipped to
-- the hour, and the request's weight in it (tokens per second; docs/cost-model.md)
create or replace temp table w_intervals as
with stages as (
    select
        trace_id, span_id, replica, deployment, gpus, e_end_ns as end_ns,
        input_tokens, cached_input_tokens, output_tokens,
        -- scheduled = arrival (the engine span's start) + time in queue; first token =
        -- arrival + TTFT; both clamped into the span
        least(
            greatest(e_start_ns + cast(round(coalesce(latency_queue_s, 0) * 1e9) as bigint),
                e_start_ns),
            e_end_ns
        ) as sched_ns,
        case
            when latency_ttft_s is null then sched_ns
            else least(
                greatest(e_start_ns + cast(round(latency_ttft_s * 1e9) as bigint), sched_ns),
                e_end_ns
            )
        end as first_ns
    from w_req
    where engine_span_id is not null and replica is not null
),

both_stages as (
    select
        trace_id, span_id, replica, deployment, gpus, 'prefill' as stage,
        sched_ns as a, first_ns as b,
        greatest(coalesce(input_tokens, 0) - coalesce(cached_input_tokens, 0), 1)
        / greatest((first_ns - sched_ns) / 1e9, 1e-6) as w
    from stages
    union all
    select
        trace_id, span_id, replica, deployment, gpus, 'decode' as stage,
        first_ns as a, end_ns as b,
        greatest(coalesce(output_tokens, 1) - 1, 1)
        / greatest((end_ns - first_ns) / 1e9, 1e-6) as w
        from stages
),

final as (
    select
        s.trace_id, s.span_id, s.replica, s.deployment, s.gpus, s.stage, s.w,
        h.hs_ns, h.hour,
        greatest(s.a, h.hs_ns) as a,
        least(s.b, h.he_ns) as b
    from both_stages as s
    inner join w_hours as h on s.a < h.he_ns and s.b > h.hs_ns
    where least(s.b, h.he_ns) > greatest(s.a, h.hs_ns)
)

select * from final;

-- step: w_gpu_price
-- one row per deployment x price segment [a, b): the $/GPU-hour in effect (the deployment's
-- override, else its GPU type's fleet price; NULL before the first price)
create or replace temp table w_gpu_price as
with deps as (
    select deployment, any_value(gpu_type) as gpu_type
    from deployment_replicas
    group by deployment
),

points as (
    select deployment, gpu_type, 0::bigint as t from deps
    union
    select d.deployment, d.gpu_type, epoch_ns(p.effective_from) as t
    from deps as d
    inner join prices_effective as p
        on
            p.kind = 'gpu' and p.unit = 'gpu_hour' and p.subject = d.gpu_type
            and (p.deployment = '' or p.deployment = d.deployment)
    union
    -- an ended version (price_book.effective_to, `prices end`) stops applying there
    select d.deployment, d.gpu_type, epoch_ns(p.effective_to) as t
    from deps as d
    inner join prices_effective as p
        on
            p.kind = 'gpu' and p.unit = 'gpu_hour' and p.subject = d.gpu_type
            and (p.deployment = '' or p.deployment = d.deployment)
            and p.effective_to is not null
),

priced as (
    select
        pt.deployment,
        pt.t as a,
        coalesce(lead(pt.t) over (partition by pt.deployment order by pt.t),
            9223372036854775807) as b,
        coalesce(
            (select max(o.price) from prices_effective as o
             where o.kind = 'gpu' and o.unit = 'gpu_hour' and o.subject = pt.gpu_type
                and o.deployment = pt.deployment and epoch_ns(o.effective_from) <= pt.t
                and (o.effective_to is null or pt.t < epoch_ns(o.effective_to))),
            (select max(f.price) from prices_effective as f
             where f.kind = 'gpu' and f.unit = 'gpu_hour' and f.subject = pt.gpu_type
                and f.deployment = '' and epoch_ns(f.effective_from) <= pt.t
                and (f.effective_to is null or pt.t < epoch_ns(f.effective_to)))
        ) as price
    from points as pt
)

select * from priced;

-- step: w_scrape_cover
-- one row per vLLM scrape around the window: the stretch [a, b) it covers (until the next
-- scrape, at most $gap_ns; the last one its replica's median interval) and whether it said up.
-- w_rate prices the up stretches; w_scraped measures coverage from all of them.
create or replace temp table w_scrape_cover as
with sc as (
    select
        target as replica, epoch_ns(ts) as t_ns, up,
        lead(epoch_ns(ts)) over (partition by target order by ts) as next_ns
    from scrapes
    where
        kind = 'vllm'
        and ts >= to_timestamp(($h0_ns - $gap_ns) // 1000000000)
        and ts < to_timestamp(($h1_ns + $gap_ns) // 1000000000)
),

med as (
    select replica, median(next_ns - t_ns)::bigint as med_ns
    from sc
    where next_ns is not null
    group by replica
)

select
    sc.replica, sc.t_ns as a,
    least(coalesce(sc.next_ns, sc.t_ns + coalesce(med.med_ns, 15000000000)),
        sc.t_ns + $gap_ns) as b,
    sc.up
from sc
left join med on med.replica = sc.replica;

-- step: w_rate
-- one row per replica x hour x stretch of up time at one price: $/s and GPUs while up
create or replace temp table w_rate as
with up as (
    select replica, a, b from w_scrape_cover where up
),

reps as (
    select
        up.replica, up.a, up.b,
        coalesce(dr.deployment, up.replica) as deployment,
        coalesce(dr.gpus, 1) as gpus
    from up
    left join deployment_replicas as dr on dr.replica = up.replica
),

priced as (
    select
        r.replica, r.deployment, r.gpus,
        greatest(r.a, coalesce(p.a, r.a)) as a,
        least(r.b, coalesce(p.b, r.b)) as b,
        p.price
    from reps as r
    left join w_gpu_price as p on p.deployment = r.deployment and p.a < r.b and p.b > r.a
),

final as (
    select
        p.replica, p.deployment, p.gpus, h.hs_ns, h.hour,
        greatest(p.a, h.hs_ns) as a,
        least(p.b, h.he_ns) as b,
        p.gpus * coalesce(p.price, 0) / 3600.0 as rate,
        p.price is not null as priced
    from priced as p
    inner join w_hours as h on p.a < h.he_ns and p.b > h.hs_ns
    where least(p.b, h.he_ns) > greatest(p.a, h.hs_ns)
)

select * from final;

-- step: w_scraped
-- one row per replica x hour: seconds covered by its vLLM scrapes, up or down (each scrape
-- covers until the next, at most the gap), for coverage (mart_coverage_hourly)
create or replace temp table w_scraped as
select
    s.replica, h.hs_ns,
    sum(least(s.b, h.he_ns) - greatest(s.a, h.hs_ns)) / 1e9 as scraped_s
from w_scrape_cover as s
inner join w_hours as h on s.a < h.he_ns and s.b > h.hs_ns
group by s.replica, h.hs_ns;

-- step: w_est
-- one row per replica x hour x price segment for every replica that served a request in the
-- window: the $/s its requests are charged while no successful scrape covers them (GPUs x
-- the deployment's $/GPU-hour; docs/cost-model.md, "Estimated cost"). rate is NULL when the
-- deployment has no GPU price or is unknown (a replica never scraped): that time is unpriced.
create or replace temp table w_est as
with reps as (
    select distinct replica, deployment, gpus, hs_ns from w_intervals
),

final as (
    select
        r.replica, r.hs_ns,
        greatest(coalesce(p.a, h.hs_ns), h.hs_ns) as a,
        least(coalesce(p.b, h.he_ns), h.he_ns) as b,
        r.gpus * p.price / 3600.0 as rate
    from reps as r
    inner join w_hours as h on h.hs_ns = r.hs_ns
    left join w_gpu_price as p
        on p.deployment = r.deployment and p.a < h.he_ns and p.b > h.hs_ns
)

select * from final
where b > a;

-- step: w_sweep
-- one row per replica x hour x instant where anything starts or stops: F (dollars per unit
-- weight) and G (seconds per unit weight) accumulated up to that instant, FE and GE (the same
-- over estimated stretches only), GU (over stretches nobody can price) and GN (over stretches
-- with no successful scrape, estimated or not), and the stretch
-- from it to the next instant (its rate, total weight, whether busy, up or estimated)
create or replace temp table w_sweep as
with ev as (
    select
        replica, hs_ns, a as t, w as dw, 1 as dn, 0.0 as dr, 0 as du, 0 as dun, 0.0 as de,
        0 as dep
    from w_intervals
    union all
    select replica, hs_ns, b as t, -w, -1, 0.0, 0, 0, 0.0, 0 from w_intervals
    union all
    select replica, hs_ns, a as t, 0.0, 0, rate, 1, case when priced then 0 else 1 end, 0.0, 0
    from w_rate
    union all
    select replica, hs_ns, b as t, 0.0, 0, -rate, -1, case when priced then 0 else -1 end, 0.0, 0
    from w_rate
    union all
    select replica, hs_ns, a as t, 0.0, 0, 0.0, 0, 0, coalesce(rate, 0.0),
        case when rate is null then 0 else 1 end
    from w_est
    union all
    select replica, hs_ns, b as t, 0.0, 0, 0.0, 0, 0, -coalesce(rate, 0.0),
        case when rate is null then 0 else -1 end
    from w_est
),

agg as (
    select
        replica, hs_ns, t, sum(dw) as dw, sum(dn) as dn, sum(dr) as dr, sum(du) as du,
        sum(dun) as dun, sum(de) as de, sum(dep) as dep
    from ev
    group by replica, hs_ns, t
),

running as (
    select
        replica, hs_ns, t,
        sum(dw) over w as weight,
        sum(dn) over w as active,
        sum(dr) over w as rate,
        sum(du) over w as ups,
        sum(dun) over w as ups_unpriced,
        sum(de) over w as est_rate,
        sum(dep) over w as est_priced,
        coalesce(lead(t) over (partition by replica, hs_ns order by t), t) - t as dt_ns
    from agg
    window w as (partition by replica, hs_ns order by t rows unbounded preceding)
),

stretches as (
    select
        *,
        dt_ns / 1e9 as dt,
        active > 0 as busy,
        ups > 0 as is_up,
        -- busy with no successful scrape: charged at the estimated rate when one is known
        active > 0 and ups <= 0 and est_priced > 0 as is_est,
        active > 0 and (
            (ups > 0 and ups_unpriced > 0) or (ups <= 0 and est_priced <= 0)
        ) as is_unpriced,
        -- clamp the running sums: a stretch with nobody active has rate and weight 0 exactly
        case
            when ups > 0 then greatest(rate, 0)
            when active > 0 and est_priced > 0 then greatest(est_rate, 0)
            else 0
        end as r,
        case when active > 0 then dt * r / greatest(weight, 1e-12) else 0 end as d_f,
        case when active > 0 then dt / greatest(weight, 1e-12) else 0 end as d_g
    from running
),

-- replica-hours with busy time that no successful scrape covers or no price prices: only
-- they need the FE, GE, GU and GN sums (a fully scraped fleet has almost none, and the sweep
-- is the costliest step of a refresh)
flagged as (
    select distinct replica, hs_ns
    from stretches
    where active > 0 and (ups <= 0 or ups_unpriced > 0)
),

covered as (
    select
        replica, hs_ns, t, dt, busy, is_up, is_est, is_unpriced, r,
        coalesce(sum(d_f) over w, 0) as f,
        coalesce(sum(d_g) over w, 0) as g,
        0.0 as fe, 0.0 as ge, 0.0 as gu, 0.0 as gn
    from stretches
    anti join flagged using (replica, hs_ns)
    window w as (
        partition by replica, hs_ns order by t rows between unbounded preceding and 1 preceding
    )
),

uncovered as (
    select
        replica, hs_ns, t, dt, busy, is_up, is_est, is_unpriced, r,
        coalesce(sum(d_f) over w, 0) as f,
        coalesce(sum(d_g) over w, 0) as g,
        coalesce(sum(case when is_est then d_f else 0 end) over w, 0) as fe,
        coalesce(sum(case when is_est then d_g else 0 end) over w, 0) as ge,
        coalesce(sum(case when is_unpriced then d_g else 0 end) over w, 0) as gu,
        coalesce(sum(case when not is_up then d_g else 0 end) over w, 0) as gn
    from stretches
    semi join flagged using (replica, hs_ns)
    window w as (
        partition by replica, hs_ns order by t rows between unbounded preceding and 1 preceding
    )
)

select * from covered
union all
select * from uncovered;

-- step: w_pieces
-- one row per engine request x stage x hour: its GPU-seconds and cost, w x (F(b) - F(a)),
-- and the parts of them estimated (no successful scrape) or not costable
create or replace temp table w_pieces as
select
    i.trace_id, i.span_id, i.hs_ns, i.hour, i.deployment, i.replica, i.stage,
    i.w * (sb.g - sa.g) * i.gpus as gpu_s,
    i.w * (sb.f - sa.f) as cost,
    i.w * (sb.ge - sa.ge) * i.gpus as est_gpu_s,
    i.w * (sb.fe - sa.fe) as est_cost,
    i.w * (sb.gu - sa.gu) * i.gpus as unpriced_gpu_s,
    i.w * (sb.gn - sa.gn) * i.gpus as uncovered_gpu_s
from w_intervals as i
inner join w_sweep as sa on sa.replica = i.replica and sa.hs_ns = i.hs_ns and sa.t = i.a
inner join w_sweep as sb on sb.replica = i.replica and sb.hs_ns = i.hs_ns and sb.t = i.b;

-- step: w_replica_hours
-- one row per replica x hour of the window that was up or served a request
create or replace temp table w_replica_hours as
with sweep as (
    select
        replica, hs_ns,
        sum(dt) filter (where is_up) as up_s,
        sum(dt) filter (where is_up and busy) as busy_s,
        sum(dt) filter (where is_est) as est_s,
        sum(dt) filter (where is_unpriced and not is_up) as unpriced_s,
        sum(dt * r) as total_cost,
        sum(dt * r) filter (where is_est) as est_cost,
        sum(dt * r) filter (where not busy) as idle_cost
    from w_sweep
    group by replica, hs_ns
),

pieces as (
    -- usage GPU-seconds inside scraped up time only, so that usage_gpu_s <= gpu_s
    select
        replica, hs_ns, sum(cost) as usage_cost,
        sum(gpu_s - uncovered_gpu_s) as usage_gpu_s
    from w_pieces
    group by replica, hs_ns
),

rate as (
    select replica, hs_ns, any_value(deployment) as deployment, any_value(gpus) as gpus,
        bool_and(priced) as priced
    from w_rate
    group by replica, hs_ns
),

final as (
    select
        h.hour, s.replica,
        coalesce(rt.deployment, dr.deployment, s.replica) as deployment,
        coalesce(rt.gpus, dr.gpus, 1) as gpus,
        coalesce(s.up_s, 0) as up_s,
        coalesce(s.busy_s, 0) as busy_s,
        coalesce(s.est_s, 0) as est_s,
        coalesce(s.unpriced_s, 0) as unpriced_s,
        coalesce(s.total_cost, 0) as total_cost,
        coalesce(s.est_cost, 0) as est_cost,
        coalesce(s.total_cost, 0) - coalesce(s.idle_cost, 0) as usage_cost,
        coalesce(s.idle_cost, 0) as idle_cost,
        coalesce(rt.gpus, dr.gpus, 1) * coalesce(s.up_s, 0) as gpu_s,
        coalesce(p.usage_gpu_s, 0) as usage_gpu_s,
        -- an hour with no up time is priced when all its busy time could be estimated
        coalesce(rt.priced, coalesce(s.unpriced_s, 0) = 0) as priced,
        coalesce(dr.idle_policy, 'separate') as idle_policy,
        s.hs_ns
    from sweep as s
    inner join w_hours as h on h.hs_ns = s.hs_ns
    left join pieces as p on p.replica = s.replica and p.hs_ns = s.hs_ns
    left join rate as rt on rt.replica = s.replica and rt.hs_ns = s.hs_ns
    left join deployment_replicas as dr on dr.replica = s.replica
)

select * from final;

-- step: w_pieces_shared
-- the pieces with their share of their deployment-hour's idle cost under each policy
create or replace temp table w_pieces_shared as
with dep_hours as (
    select
        hs_ns, deployment, sum(idle_cost) as idle_cost, any_value(idle_policy) as idle_policy
    from w_replica_hours
    group by hs_ns, deployment
),

usage as (
    select
        hs_ns, deployment, sum(cost) as usage_cost,
        count(distinct (trace_id, span_id)) as requests
    from w_pieces
    group by hs_ns, deployment
),

counted as (
    select
        p.*,
        count(*) over (partition by p.hs_ns, p.deployment, p.trace_id, p.span_id) as own_pieces
    from w_pieces as p
),

final as (
    select
        c.trace_id, c.span_id, c.hour, c.deployment, c.replica, c.stage, c.gpu_s, c.cost,
        c.est_gpu_s, c.est_cost, c.unpriced_gpu_s,
        case
            when u.usage_cost > 0 then coalesce(d.idle_cost, 0) * c.cost / u.usage_cost else 0
        end as idle_usage,
        coalesce(d.idle_cost, 0) / u.requests / c.own_pieces as idle_even,
        coalesce(d.idle_policy, 'separate') as idle_policy
    from counted as c
    inner join usage as u on u.hs_ns = c.hs_ns and u.deployment = c.deployment
    left join dep_hours as d on d.hs_ns = c.hs_ns and d.deployment = c.deployment
)

select
    * exclude (idle_policy),
    by_idle_policy(idle_policy, 0, idle_usage, idle_even, 0) as idle_configured
from final;

-- step: store_pieces
delete from mart_request_pieces where hour in (select hour from w_hours);

-- step: insert_pieces
insert into mart_request_pieces by name
select trace_id, span_id, hour, deployment, replica, stage, gpu_s, cost, idle_usage, idle_even,
    idle_configured, est_gpu_s, est_cost, unpriced_gpu_s
from w_pieces_shared;

-- step: store_replica_hours
delete from mart_replica_hours where hour in (select hour from w_hours);

-- step: insert_replica_hours
insert into mart_replica_hours by name
select hour, replica, deployment, gpus, up_s, busy_s, total_cost, usage_cost, idle_cost, gpu_s,
    usage_gpu_s, priced, est_s, est_cost, unpriced_s
from w_replica_hours;

-- step: w_requests_costed
-- the window's requests with their costs: GPU pieces summed over every hour they touch, or
-- tokens x the model's price in effect at the request's start
create or replace temp table w_requests_costed as
with pieces as (
    select
        p.trace_id, p.span_id,
        sum(p.gpu_s) filter (where p.stage = 'prefill') as prefill_gpu_s,
        sum(p.gpu_s) filter (where p.stage = 'decode') as decode_gpu_s,
        sum(p.cost) filter (where p.stage = 'prefill') as prefill_cost,
        sum(p.cost) filter (where p.stage = 'decode') as decode_cost,
        sum(p.idle_usage) as idle_usage_cost,
        sum(p.idle_even) as idle_even_cost,
        sum(p.idle_configured) as idle_configured_cost,
        sum(p.est_gpu_s) as est_gpu_s,
        sum(p.est_cost) as est_cost,
        sum(p.unpriced_gpu_s) as unpriced_gpu_s
    from mart_request_pieces as p
    semi join w_req as r on r.trace_id = p.trace_id and r.span_id = p.span_id
    group by p.trace_id, p.span_id
),

token_prices as (
    select
        r.trace_id, r.span_id,
        max(pe.price) filter (where pe.unit = 'input_mtok') as p_in,
        max(pe.price) filter (where pe.unit = 'cached_input_mtok') as p_cached,
        max(pe.price) filter (where pe.unit = 'output_mtok') as p_out
    from w_req as r
    inner join prices_effective as pe
        on
            pe.kind = 'model' and pe.subject = r.model
            and epoch_ns(pe.effective_from) <= r.start_ns
            and (pe.effective_to is null or r.start_ns < epoch_ns(pe.effective_to))
    where r.engine_span_id is null
    group by r.trace_id, r.span_id
),

final as (
    select
        r.*,
        case
            when r.engine_span_id is not null then 'self_hosted'
            when tp.p_in is not null or tp.p_out is not null then 'hosted'
            else 'unpriced'
        end as hosting,
        coalesce(p.prefill_gpu_s, 0) as prefill_gpu_s,
        coalesce(p.decode_gpu_s, 0) as decode_gpu_s,
        coalesce(
            p.prefill_cost,
            (
                greatest(coalesce(r.input_tokens, 0) - coalesce(r.cached_input_tokens, 0), 0)
                * coalesce(tp.p_in, 0)
                + coalesce(r.cached_input_tokens, 0) * coalesce(tp.p_cached, tp.p_in, 0)
            ) / 1e6,
            0
        ) as prefill_cost,
        coalesce(p.decode_cost, coalesce(r.output_tokens, 0) * coalesce(tp.p_out, 0) / 1e6, 0)
            as decode_cost,
        coalesce(p.idle_usage_cost, 0) as idle_usage_cost,
        coalesce(p.idle_even_cost, 0) as idle_even_cost,
        coalesce(p.idle_configured_cost, 0) as idle_configured_cost,
        -- never $0 without a mark: time on a replica with no scrape is estimated, and what
        -- cannot be costed at all (no price, no GPU size, no replica named) is unpriced
        case
            when r.engine_span_id is null and tp.p_in is null and tp.p_out is null
                then 'unpriced'
            when r.engine_span_id is not null
                and (r.replica is null or coalesce(p.unpriced_gpu_s, 0) > 0) then 'unpriced'
            when coalesce(p.est_gpu_s, 0) > 0 then 'estimated'
            else 'measured'
        end as cost_basis,
        coalesce(p.est_cost, 0) as estimated_cost
    from w_req as r
    left join pieces as p on p.trace_id = r.trace_id and p.span_id = r.span_id
    left join token_prices as tp on tp.trace_id = r.trace_id and tp.span_id = r.span_id
)

select * from final;

-- step: store_requests
delete from mart_requests
where (trace_id, span_id) in (select (trace_id, span_id) from w_req);

-- step: insert_requests
insert into mart_requests by name
select
    trace_id, span_id, engine_span_id, start_ns, end_ns,
    to_timestamp(start_ns // 1000 / 1e6) as start_time,
    to_timestamp(start_ns // 3600000000000 * 3600) as hour,
    environment, app, team, route, workflow, task_key, attempt, fallback, service_name,
    operation, provider, model, deployment, replica, hosting, failed, input_tokens,
    cached_input_tokens, output_tokens,
    latency_queue_s as queue_s,
    case when e_start_ns is not null and latency_ttft_s is not null
        then greatest(latency_ttft_s - coalesce(latency_queue_s, 0), 0) end as prefill_s,
    case when e_start_ns is not null and latency_ttft_s is not null
        then greatest((e_end_ns - e_start_ns) / 1e9 - latency_ttft_s, 0) end as decode_s,
    latency_ttft_s as ttft_s,
    case when e_start_ns is not null and latency_ttft_s is not null and output_tokens > 1
        then greatest((e_end_ns - e_start_ns) / 1e9 - latency_ttft_s, 0) / (output_tokens - 1)
    end as tpot_s,
    e2e_s, prefill_gpu_s, decode_gpu_s, prefill_cost, decode_cost, idle_usage_cost,
    idle_even_cost, idle_configured_cost, cost_basis, estimated_cost
from w_requests_costed;

-- step: w_coverage
-- one row per deployment x hour of the window with a replica expected, scraped or busy: how
-- much of the time its replicas ran was scraped, and the requests that ran without a scrape
create or replace temp table w_coverage as
with lifetimes as (
    -- a replica is expected to run from its first to its last successful scrape
    select
        dr.replica, dr.deployment, h.hs_ns,
        (least(epoch_ns(dr.last_seen), h.he_ns) - greatest(epoch_ns(dr.first_seen), h.hs_ns))
        / 1e9 as lifetime_s
    from deployment_replicas as dr
    inner join w_hours as h
        on epoch_ns(dr.first_seen) < h.he_ns and epoch_ns(dr.last_seen) > h.hs_ns
),

replica_hours as (
    select replica, hs_ns from lifetimes
    union
    select replica, hs_ns from w_scraped
    union
    select replica, hs_ns from w_replica_hours
),

per_replica as (
    select
        k.replica, k.hs_ns,
        coalesce(rh.deployment, l.deployment, dr.deployment, k.replica) as deployment,
        coalesce(sc.scraped_s, 0) as scraped_s,
        coalesce(rh.up_s, 0) as up_s,
        coalesce(rh.est_s, 0) as est_s,
        coalesce(rh.unpriced_s, 0) as unpriced_s,
        -- the lifetime, widened to cover busy time that no scrape saw
        greatest(
            coalesce(l.lifetime_s, 0),
            coalesce(sc.scraped_s, 0),
            coalesce(rh.up_s, 0) + coalesce(rh.est_s, 0) + coalesce(rh.unpriced_s, 0)
        ) as expected_s
    from replica_hours as k
    left join lifetimes as l on l.replica = k.replica and l.hs_ns = k.hs_ns
    left join w_scraped as sc on sc.replica = k.replica and sc.hs_ns = k.hs_ns
    left join w_replica_hours as rh on rh.replica = k.replica and rh.hs_ns = k.hs_ns
    left join deployment_replicas as dr on dr.replica = k.replica
),

per_request as (
    select
        hs_ns, deployment, trace_id, span_id,
        bool_or(uncovered_gpu_s > 0) as uncovered,
        bool_or(unpriced_gpu_s > 0) as unpriced,
        sum(est_cost) as est_cost
    from w_pieces
    group by hs_ns, deployment, trace_id, span_id
),

requests as (
    select
        hs_ns, deployment,
        count(*) as requests,
        count(*) filter (where uncovered) as uncovered_requests,
        count(*) filter (where unpriced) as unpriced_requests,
        sum(est_cost) as estimated_cost
    from per_request
    group by hs_ns, deployment
),

deployments as (
    select
        hs_ns, deployment,
        count(*) as replicas,
        sum(expected_s) as expected_s,
        sum(least(scraped_s, expected_s)) as scraped_s,
        sum(up_s) as up_s,
        sum(est_s) as est_s,
        sum(unpriced_s) as unpriced_s
    from per_replica
    group by hs_ns, deployment
),

final as (
    select
        h.hour, d.deployment, d.replicas, d.expected_s, d.scraped_s, d.up_s, d.est_s,
        d.unpriced_s,
        coalesce(r.requests, 0) as requests,
        coalesce(r.uncovered_requests, 0) as uncovered_requests,
        coalesce(r.estimated_cost, 0) as estimated_cost,
        coalesce(r.unpriced_requests, 0) as unpriced_requests
    from deployments as d
    inner join w_hours as h on h.hs_ns = d.hs_ns
    left join requests as r on r.hs_ns = d.hs_ns and r.deployment = d.deployment
)

select * from final;

-- step: store_coverage
delete from mart_coverage_hourly where hour in (select hour from w_hours);

-- step: insert_coverage
insert into mart_coverage_hourly by name
select * from w_coverage;
