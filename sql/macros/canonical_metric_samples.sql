-- one row per sample (target × canonical metric × label set × ts): metric_samples with renamed
-- metrics (metric_name_aliases, e.g. vllm:gpu_cache_usage_perc) under their current name.
-- An exporter inside a deprecation window exports the old and the new name in the same scrape;
-- then the sample under the old name is dropped, so no series is counted twice.
--
-- Why a macro and not only the view stg_metric_samples: DuckDB 2.0.1 binds a macro's body when
-- the macro is created, and the storage gateway creates sql/macros before sql/views, so a macro
-- can read tables and macros only. histogram_quantile_over builds on this logic, so it lives
-- here once and the views select from it. Macros are created in file-name order: a macro may
-- only use macros whose file names sort before its own.
CREATE OR REPLACE MACRO canonical_metric_samples() AS TABLE
-- metric_samples is named in each CTE rather than in one import CTE: DuckDB materializes a CTE
-- that is read more than once, which would copy the whole table and stop filters on metric,
-- family or target from reaching the scan.
with aliases as (
    select old_name, new_name from metric_name_aliases
),

current_names as (
    select
        ts, target, metric, family, type, labels, series_key, le, value,
        metric as exported_metric
    from metric_samples
    where metric not in (select old_name from aliases)
),

renamed as (
    select
        s.ts, s.target,
        m.new_name as metric,
        coalesce(f.new_name, s.family) as family,
        s.type, s.labels, s.series_key, s.le, s.value,
        s.metric as exported_metric
    from metric_samples as s
    inner join aliases as m on m.old_name = s.metric
    left join aliases as f on f.old_name = s.family
),

renamed_without_twin as (
    select r.*
    from renamed as r
    left join metric_samples as twin
        on twin.target = r.target
        and twin.ts = r.ts
        and twin.metric = r.metric
        and twin.series_key = r.series_key
        and twin.le is not distinct from r.le
    where twin.metric is null
),

final as (
    select * from current_names
    union all
    select * from renamed_without_twin
)

select * from final;
