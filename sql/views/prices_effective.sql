-- one row per price version (kind, subject, deployment, unit, effective_from), with effective_to
-- = the earlier of the version's own end (price_book.effective_to, set by `prices end`) and the
-- next version's effective_from for the same (kind, subject, deployment, unit); NULL while it is
-- current. Join on `t >= effective_from and (effective_to is null or t < effective_to)`;
-- for GPUs, a deployment's override (deployment = name) wins over the fleet-wide row ('').
with versions as (
    select
        price_id, kind, subject, deployment, unit, price, currency, stage,
        effective_from, effective_to as ends_at, note, source, created_at
    from price_book
),

final as (
    select
        price_id, kind, subject, deployment, unit, price, currency, stage,
        effective_from,
        -- least() skips a NULL: whichever end is known, the earlier when both are
        least(
            ends_at,
            lead(effective_from) over (
                partition by kind, subject, deployment, unit order by effective_from
            )
        ) as effective_to,
        note, source, created_at
    from versions
)

select * from final
