-- one row per day x reason x model x deployment with requests the ledger could not price, so a
-- missing price or deployment shows up instead of reading as free
with requests as (
    select
        date_trunc('day', r.hour) as day,
        case
            when r.hosting = 'unpriced' then 'no token price for the model'
            when r.hosting = 'self_hosted' and rh.replica is null
                then 'replica not scraped in that hour (no up time)'
            when r.hosting = 'self_hosted' and not rh.priced
                then 'no GPU price for the deployment'
        end as reason,
        r.model, r.deployment, r.replica, r.input_tokens, r.output_tokens
    from mart_requests as r
    left join mart_replica_hours as rh on rh.replica = r.replica and rh.hour = r.hour
),

final as (
    select
        day, reason, model, deployment,
        count(*) as requests,
        sum(input_tokens) as input_tokens,
        sum(output_tokens) as output_tokens
    from requests
    where reason is not null
    group by all
)

select * from final
