-- one row per deployment: prefix-cache hit rate, prefill cost saved, preemptions, KV-bound
-- time, cost per 1M tokens and GPU utilization over [$start, $end)
select
    deployment,
    sum(prefix_hits) / nullif(sum(prefix_queries), 0) as prefix_hit_rate,
    sum(prefill_cost_saved) as prefill_cost_saved,
    sum(preemptions) as preemptions,
    sum(kv_bound_s) as kv_bound_s,
    sum(compute_bound_s) as compute_bound_s,
    avg(gpu_util_mean) as gpu_util_mean,
    sum(idle_cost) as idle_cost
from cache_efficiency
where hour >= $start and hour < $end
group by deployment
order by deployment
