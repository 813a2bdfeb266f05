-- one row per key of $dim x price change (model token prices, GPU prices) effective in the
-- previous period or [$start, $end) that applies to what the key used in those periods: a
-- model's token price for its hosted calls, a GPU price (fleet-wide for the GPU type, or a
-- deployment's override) for its self-hosted calls. old_price: the change's, else (an added
-- version) the version in effect just before it.
with changes as (
    select change_id, action, kind, subject, deployment, unit, old_price, new_price, effective_from
    from price_book_changes
    where
        kind in ('model', 'gpu')
        and effective_from >= $start - ($end - $start) and effective_from < $end
),

used as (
    select distinct
        coalesce(
            case $dim
                when 'team' then team
                when 'app' then app
                when 'route' then route
                when 'model' then model
                when 'workflow' then workflow
                when 'deployment' then deployment
                when 'environment' then environment
            end,
            '(none)'
        ) as key,
        model,
        deployment
    from mart_spend_hourly
    where
        stage in ('prefill', 'decode') and hour >= $start - ($end - $start) and hour < $end
        and global_filter(
            environment, team, app, route, model, $environment, $team, $app, $route, $model
        )
),

gpu_types as (
    select distinct deployment, gpu_type from deployment_replicas where gpu_type is not null
),

touched as (
    select distinct u.key, c.*
    from changes as c
    inner join used as u
        on (c.kind = 'model' and u.deployment is null and c.subject = u.model)
        or (
            c.kind = 'gpu' and u.deployment is not null
            and (
                c.deployment = u.deployment
                or (c.deployment = '' and exists (
                    select 1 from gpu_types as g
                    where g.deployment = u.deployment and g.gpu_type = c.subject
                ))
            )
        )
),

final as (
    select
        t.key, t.change_id, t.action, t.kind, t.subject, t.deployment, t.unit,
        coalesce(t.old_price, (
            select p.price from price_book as p
            where
                p.kind = t.kind and p.subject = t.subject and p.deployment = t.deployment
                and p.unit = t.unit and p.effective_from < t.effective_from
            order by p.effective_from desc
            limit 1
        )) as old_price,
        t.new_price,
        t.effective_from
    from touched as t
)

select * from final
order by key, effective_from, change_id
