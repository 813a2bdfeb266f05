-- one row per finding: scope (route or workflow) x week in which cost per request (or per 1M
-- tokens) fell while cost per accepted outcome rose, against the week before
-- kind 'model_route': the route's (workflow's) main model changed between the two weeks;
-- 'week_over_week': same model, something else changed (price, deployment, prompt, traffic).
-- A route-level finding hides the workflow-level one of the same workflow and week.
-- compared = 'switch': the same test across a model switch, the hour the scope's main model
-- (the model that began most of its tasks) changed: its tasks after the switch on the new
-- model against those before it on the old one, each side up to 7 days and never past the
-- scope's previous or next switch, so a mid-week move to a cheaper model is found whatever
-- weeks the data spans. A weekly finding and a switch finding that say the same (scope, week,
-- models) are one row, the weekly one; a switch finding hides a weekly one of other models
-- in its week.
-- Cost per accepted outcome here counts decided tasks only (pending ones are left out on both
-- sides, so a week whose tasks are still in review does not look dear). See
-- docs/unit-economics.md ("False economy").
with thresholds as (
    select
        -- decided tasks each week needs on both sides: fewer is noise, not a finding
        20 as min_decided_tasks,
        -- cost per request (or per 1M tokens) must fall by at least this fraction ...
        0.10 as min_unit_cost_drop,
        -- ... while cost per accepted outcome rises by at least this fraction (or no task of
        -- the later week was accepted at all)
        0.10 as min_outcome_cost_rise
),

tasks as (
    select * from task_outcomes
),

scoped as (
    select 'route' as scope, workflow, app, route, * exclude (workflow, app, route)
    from tasks
    union all by name
    select 'workflow' as scope, workflow, null as app, null as route,
        * exclude (workflow, app, route)
    from tasks
    where workflow is not null
),

weekly as (
    select
        scope, workflow, app, route, week,
        count(*) as tasks,
        count(*) filter (where decided) as decided,
        count(*) filter (where is_accepted) as accepted,
        coalesce(sum(total_cost) filter (where decided), 0) as decided_cost,
        sum(llm_cost) as llm_cost,
        cast(sum(llm_calls) as bigint) as llm_calls,
        cast(sum(tokens) as bigint) as tokens
    from scoped
    group by scope, workflow, app, route, week
),

main_models as (
    -- the model that ended most of the scope's tasks that week (ties: the first by name)
    select scope, workflow, app, route, week, final_model as model
    from scoped
    where final_model is not null
    group by scope, workflow, app, route, week, final_model
    qualify row_number() over (
        partition by scope, workflow, app, route, week order by count(*) desc, final_model
    ) = 1
),

weekly_measured as (
    select w.*, m.model
    from weekly as w
    left join main_models as m
        on
            m.scope = w.scope and m.week = w.week
            and m.workflow is not distinct from w.workflow
            and m.app is not distinct from w.app
            and m.route is not distinct from w.route
),

hourly_models as (
    -- the model that began most of the scope's tasks each hour (ties: the first by name);
    -- hours count from the epoch, so no session time zone moves them
    select
        scope, workflow, app, route,
        cast(floor(epoch(first_start) / 3600) as bigint) as hour_n,
        first_model as model
    from scoped
    where first_model is not null and first_start is not null
    group by scope, workflow, app, route, hour_n, first_model
    qualify row_number() over (
        partition by scope, workflow, app, route, hour_n order by count(*) desc, first_model
    ) = 1
),

switches as (
    select
        scope, workflow, app, route, hour_n,
        lag(model) over by_hour as model_before,
        model as model_after
    from hourly_models
    window by_hour as (partition by scope, workflow, app, route order by hour_n)
    qualify lag(model) over by_hour is distinct from model and lag(model) over by_hour is not null
),

switch_spans as (
    -- each side runs up to 7 days (168 hours), never past the previous or next switch
    select
        *,
        greatest(coalesce(lag(hour_n) over by_switch, hour_n - 168), hour_n - 168) as from_n,
        least(coalesce(lead(hour_n) over by_switch, hour_n + 168), hour_n + 168) as to_n
    from switches
    window by_switch as (partition by scope, workflow, app, route order by hour_n)
),

switch_sides as (
    select
        w.scope, w.workflow, w.app, w.route, w.hour_n, w.model_before, w.model_after,
        t.first_start < make_timestamptz(w.hour_n * 3600000000) as before,
        t.week, t.decided, t.is_accepted, t.total_cost, t.llm_cost, t.llm_calls, t.tokens
    from switch_spans as w
    inner join scoped as t
        on
            t.scope = w.scope
            and t.workflow is not distinct from w.workflow
            and t.app is not distinct from w.app
            and t.route is not distinct from w.route
            and t.first_start >= make_timestamptz(w.from_n * 3600000000)
            and t.first_start < make_timestamptz(w.to_n * 3600000000)
            and t.first_model = case
                when t.first_start < make_timestamptz(w.hour_n * 3600000000) then w.model_before
                else w.model_after
            end
),

switch_measured as (
    select
        scope, workflow, app, route, hour_n, before,
        case when before then model_before else model_after end as model,
        min(week) as week,
        count(*) as tasks,
        count(*) filter (where decided) as decided,
        count(*) filter (where is_accepted) as accepted,
        coalesce(sum(total_cost) filter (where decided), 0) as decided_cost,
        sum(llm_cost) as llm_cost,
        cast(sum(llm_calls) as bigint) as llm_calls,
        cast(sum(tokens) as bigint) as tokens
    from switch_sides
    group by scope, workflow, app, route, hour_n, before, model_before, model_after
),

sides as (
    -- both comparisons as "before" and "after" sides sharing a pair key: a week is the after
    -- side of the week before it (pair_week = its week) and the before side of the next
    -- (pair_week = its week + 7); a switch's two sides share its hour
    select
        'weeks' as compared, null::timestamptz as switched_at, true as is_before,
        week + 7 as pair_week, null::bigint as pair_hour, *
    from weekly_measured
    union all by name
    select
        'weeks' as compared, null::timestamptz as switched_at, false as is_before,
        week as pair_week, null::bigint as pair_hour, *
    from weekly_measured
    union all by name
    select
        'switch' as compared, make_timestamptz(hour_n * 3600000000) as switched_at,
        before as is_before, null::date as pair_week, hour_n as pair_hour, *
    from switch_measured
),

ratios as (
    select
        *,
        llm_cost / nullif(llm_calls, 0) as cost_per_request,
        llm_cost * 1e6 / nullif(tokens, 0) as cost_per_1m_tokens,
        decided_cost / nullif(accepted, 0) as cost_per_accepted,
        accepted / nullif(decided, 0) as accepted_rate
    from sides
),

pairs as (
    select
        a.compared, a.switched_at,
        a.scope, a.workflow, a.app, a.route,
        b.week, a.week as week_before,
        a.model as model_before, b.model as model_after,
        a.tasks as tasks_before, b.tasks as tasks_after,
        a.decided as decided_before, b.decided as decided_after,
        a.accepted as accepted_before, b.accepted as accepted_after,
        a.accepted_rate as accepted_rate_before, b.accepted_rate as accepted_rate_after,
        a.cost_per_request as cost_per_request_before,
        b.cost_per_request as cost_per_request_after,
        a.cost_per_1m_tokens as cost_per_1m_tokens_before,
        b.cost_per_1m_tokens as cost_per_1m_tokens_after,
        a.cost_per_accepted as cost_per_accepted_before,
        b.cost_per_accepted as cost_per_accepted_after,
        100 * (b.cost_per_request / nullif(a.cost_per_request, 0) - 1)
            as cost_per_request_change_pct,
        100 * (b.cost_per_1m_tokens / nullif(a.cost_per_1m_tokens, 0) - 1)
            as cost_per_1m_tokens_change_pct,
        100 * (b.cost_per_accepted / nullif(a.cost_per_accepted, 0) - 1)
            as cost_per_accepted_change_pct
    from ratios as a
    inner join ratios as b
        on
            b.compared = a.compared and b.scope = a.scope and a.is_before and not b.is_before
            and b.pair_week is not distinct from a.pair_week
            and b.pair_hour is not distinct from a.pair_hour
            and b.workflow is not distinct from a.workflow
            and b.app is not distinct from a.app
            and b.route is not distinct from a.route
),

findings as (
    select
        p.*,
        coalesce(p.cost_per_request_change_pct <= -100 * t.min_unit_cost_drop, false)
            as request_cheaper
    from pairs as p
    cross join thresholds as t
    where
        p.decided_before >= t.min_decided_tasks
        and p.decided_after >= t.min_decided_tasks
        and p.accepted_before > 0
        and (
            p.cost_per_request_change_pct <= -100 * t.min_unit_cost_drop
            or p.cost_per_1m_tokens_change_pct <= -100 * t.min_unit_cost_drop
        )
        and (
            p.accepted_after = 0
            or p.cost_per_accepted_change_pct >= 100 * t.min_outcome_cost_rise
        )
),

distinct_findings as (
    -- a switch finding that a weekly one already states (same scope, week and models) is
    -- left out; a weekly one is left out where a switch to other models explains its week
    select f.*
    from findings as f
    where
        not exists (
            select 1 from findings as o
            where
                o.scope = f.scope and o.week = f.week and o.compared <> f.compared
                and o.workflow is not distinct from f.workflow
                and o.app is not distinct from f.app
                and o.route is not distinct from f.route
                and (
                    o.model_before is not distinct from f.model_before
                    and o.model_after is not distinct from f.model_after
                ) = (f.compared = 'switch')
        )
),

kept as (
    -- a workflow-level finding only where none of its routes has one that week
    select f.*
    from distinct_findings as f
    where
        f.scope = 'route'
        or not exists (
            select 1 from distinct_findings as r
            where r.scope = 'route' and r.workflow = f.workflow and r.week = f.week
        )
),

final as (
    select
        case
            when model_before is distinct from model_after then 'model_route'
            else 'week_over_week'
        end as kind,
        compared,
        switched_at,
        scope,
        workflow,
        app,
        route,
        week,
        week_before,
        model_before,
        model_after,
        tasks_before,
        tasks_after,
        decided_before,
        decided_after,
        accepted_before,
        accepted_after,
        accepted_rate_before,
        accepted_rate_after,
        cost_per_request_before,
        cost_per_request_after,
        cost_per_request_change_pct,
        cost_per_1m_tokens_before,
        cost_per_1m_tokens_after,
        cost_per_1m_tokens_change_pct,
        cost_per_accepted_before,
        cost_per_accepted_after,
        cost_per_accepted_change_pct,
        concat(
            case
                when scope = 'route'
                    then concat(
                        'Route ', coalesce(route, '(none)'),
                        ' (workflow ', coalesce(workflow, '(none)'),
                        ', app ', coalesce(app, '(none)'), ')'
                    )
                else concat('Workflow ', workflow)
            end,
            case
                when compared = 'switch'
                    then concat(
                        ', switch at ',
                        strftime(timezone('UTC', switched_at), '%Y-%m-%d %H:%M UTC'), ': '
                    )
                else concat(', week of ', strftime(week, '%Y-%m-%d'), ': ')
            end,
            case
                when model_before is distinct from model_after
                    then concat(
                        'moving from ', coalesce(model_before, '(none)'), ' to ',
                        coalesce(model_after, '(none)'), ' cut '
                    )
                else 'a change on the same model cut '
            end,
            case
                when request_cheaper
                    then printf('cost per request by %.1f%%', -cost_per_request_change_pct)
                else printf('cost per 1M tokens by %.1f%%', -cost_per_1m_tokens_change_pct)
            end,
            case
                when accepted_after = 0 then ' but no task was accepted'
                else printf(
                    ' but cost per accepted outcome rose by %.1f%%', cost_per_accepted_change_pct
                )
            end,
            printf(
                ' (acceptance %.1f%% -> %.1f%%).',
                100 * accepted_rate_before, 100 * accepted_rate_after
            )
        ) as explanation
    from kept
)

select * from final
