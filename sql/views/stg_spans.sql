-- one row per span (trace_id, span_id), with the attribute mapping rules applied
-- and the attribute lists turned into `attributes` / `resource_attributes` maps
-- A value the span carries itself wins; otherwise the matching rule with the lowest priority
-- (then lowest rule_id); stage also falls back to what gen_ai.operation.name implies.
with rule_hits as (
    select
        s.trace_id,
        s.span_id,
        r.target,
        r.value,
        row_number() over (
            partition by s.trace_id, s.span_id, r.target order by r.priority, r.rule_id
        ) as rank_in_target
    from spans as s
    inner join attribute_mappings as r
        on (
            case
                when starts_with(r.source_key, 'resource.')
                    then kv(s.resource_keys, s.resource_values, substr(r.source_key, 10))
                else kv(s.attr_keys, s.attr_values, r.source_key)
            end
        ) like r.match
),

mapped as (
    select
        trace_id,
        span_id,
        max(value) filter (where target = 'app') as app,
        max(value) filter (where target = 'team') as team,
        max(value) filter (where target = 'route') as route,
        max(value) filter (where target = 'workflow') as workflow,
        max(value) filter (where target = 'environment') as environment,
        max(value) filter (where target = 'stage') as stage
    from rule_hits
    where rank_in_target = 1
    group by trace_id, span_id
),

final as (
    select
        s.* exclude (attr_keys, attr_values, resource_keys, resource_values) replace (
            coalesce(s.app, m.app) as app,
            coalesce(s.team, m.team) as team,
            coalesce(s.route, m.route) as route,
            coalesce(s.workflow, m.workflow) as workflow,
            coalesce(s.environment, m.environment) as environment,
            coalesce(
                s.stage,
                m.stage,
                case s.gen_ai_operation
                    when 'execute_tool' then 'tools'
                    when 'retrieval' then 'retrieval'
                    when 'embeddings' then 'retrieval'
                end
            ) as stage
        ),
        map(s.attr_keys, s.attr_values) as attributes,
        map(s.resource_keys, s.resource_values) as resource_attributes,
        make_timestamp(s.start_ns // 1000) as start_time,
        (s.end_ns - s.start_ns) / 1e6 as duration_ms
    from spans as s
    left join mapped as m on s.trace_id = m.trace_id and s.span_id = m.span_id
)

select * from final
