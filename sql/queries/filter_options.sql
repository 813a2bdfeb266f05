-- one row per global filter field (environment, team, app, route, model) and value: what the
-- filter bar offers, the distinct non-null values of the spend mart, the first 500 of each
with keyed as (
    select 'environment' as field, environment as value from mart_spend_hourly
    union all
    select 'team' as field, team as value from mart_spend_hourly
    union all
    select 'app' as field, app as value from mart_spend_hourly
    union all
    select 'route' as field, route as value from mart_spend_hourly
    union all
    select 'model' as field, model as value from mart_spend_hourly
),

distinct_values as (
    select distinct field, value from keyed where value is not null
),

final as (
    select field, value
    from distinct_values
    qualify row_number() over (partition by field order by value) <= 500
)

select * from final
order by field, value
