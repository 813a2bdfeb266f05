-- one row per day x reason x model x deployment with requests the ledger could not price, so a
-- missing price or deployment shows up instead of reading as free. A self-hosted request whose
-- time had no scrape is costed from its deployment's size and price (cost_basis 'estimated');
-- it is listed here only when even that is unknown (docs/cost-model.md, "Coverage").
with requests as (
    select
        date_trunc('day', r.hour) as day,
        case
            when r.hosting = 'unpriced' then 'no token price for the model'
            when r.cost_basis <> 'unpriced' then null
            when r.replica is null then 'engine span names no replica'
            when dr.replica is null
                then 'replica never scraped: deployment, GPU type and size unknown'
            else 'no GPU price for the deployment'
        end as reason,
        r.model, r.deployment, r.replica, r.input_tokens, r.output_tokens
    from mart_requests as r
    left join deployment_replicas as dr on dr.replica = r.replica
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
