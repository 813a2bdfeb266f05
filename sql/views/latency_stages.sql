-- one row per hour × environment × app × route × stage: count, mean and exact p50/p95/p99 (nearest
-- rank) of the latencies of successful requests and service calls that started in the hour.
-- Stages: queue, prefill (scheduled → first token), ttft, decode (first → last token), tpot,
-- e2e (one LLM call), retrieval, tools. For ranges longer than an hour use
-- latency_percentiles_over(start, end) (merged histograms, within 2.4 %; docs/efficiency.md).
with latency as (
    select * from mart_latency_hourly
),

final as (
    select
        hour, environment, app, route, stage,
        count, sum_s, sum_s / count as mean_s, min_s, max_s, p50_s, p95_s, p99_s
    from latency
)

select * from final
