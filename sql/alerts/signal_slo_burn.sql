-- one row per environment x team x app x route x workflow x model x deployment x latency
-- objective x side (in_short: started in the short window [$short_start, $end); else only in the
-- long one [$window_start, $short_start)): requests the objective covers and those over its
-- target (bad), for the slo_burn alert kind. Objectives: slo_targets' version in effect at $end,
-- matched as the SLO views match them (route LIKE pattern, app and environment when set); only
-- stages mart_requests measures per request (queue, prefill, ttft, decode, tpot, e2e).
with targets as (
    select objective, route as route_pattern, app as target_app,
        environment as target_environment, stage, percentile, target_s
    from slo_targets
    where effective_from <= $end::timestamptz
        and stage in ('queue', 'prefill', 'ttft', 'decode', 'tpot', 'e2e')
    qualify row_number() over (partition by objective order by effective_from desc) = 1
),

requests as (
    select *
    from mart_requests
    where hour >= date_trunc('hour', $window_start::timestamptz) and hour < $end::timestamptz
        and start_time >= $window_start::timestamptz and start_time < $end::timestamptz
),

measured as (
    select
        r.environment, r.team, r.app, r.route, r.workflow, r.model, r.deployment,
        t.objective, t.stage, t.percentile, t.target_s,
        r.start_time >= $short_start::timestamptz as in_short,
        case t.stage
            when 'queue' then r.queue_s
            when 'prefill' then r.prefill_s
            when 'ttft' then r.ttft_s
            when 'decode' then r.decode_s
            when 'tpot' then r.tpot_s
            else r.e2e_s
        end as latency_s
    from requests as r
    inner join targets as t
        on
            r.route like t.route_pattern
            and (t.target_app is null or t.target_app = r.app)
            and (t.target_environment is null or t.target_environment = r.environment)
),

final as (
    select
        environment, team, app, route, workflow, model, deployment,
        objective, stage, percentile, target_s, in_short,
        count(*) as requests,
        count(*) filter (where latency_s > target_s) as bad
    from measured
    where latency_s is not null
    group by all
)

select * from final
