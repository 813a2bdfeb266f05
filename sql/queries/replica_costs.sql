-- one row per vLLM replica of the selected deployments: its GPUs and GPU type
-- (deployment_replicas), its GPU cost over the hours [$start, $end) (mart_replica_hours: total,
-- idle, GPU-hours, priced GPU-hours and the $/GPU-hour they imply), and the mean DCGM
-- utilization of its GPUs where the GPU -> replica mapping is known: a DCGM series whose `pod`
-- label (dcgm-exporter --kubernetes) names the replica or its host, else whose `Hostname` (or
-- `hostname`, newer dcgm-exporter's spelling) is the replica's host (host.name of its engine spans) when no other replica runs on that host.
-- Elsewhere gpu_util is NULL (a host shared by several replicas does not say which GPU is
-- whose). The environment and model filters select deployments.
with selected as (
    select replica, deployment, gpus, gpu_type, host
    from deployment_replicas
    where
        -- deployments have no team, app or route: those filters do not narrow them
        global_filter(environment, null, null, null, model, $environment, null, null, null, $model)
),

hosts as (
    select host, count(*) as replicas_on_host
    from selected
    where host is not null
    group by host
),

dcgm as (
    select
        target, series_key, value / 100.0 as util,
        labels['pod'] as pod,
        coalesce(labels['Hostname'], labels['hostname']) as hostname
    from canonical_metric_samples()
    where metric = 'DCGM_FI_DEV_GPU_UTIL' and ts >= $start and ts < $end
),

mapped as (
    select s.replica, avg(d.util) as gpu_util, count(distinct d.series_key) as dcgm_gpus
    from selected as s
    left join hosts as h on h.host = s.host
    inner join dcgm as d
        on d.pod = s.replica
        or (d.pod is not null and d.pod = s.host)
        or (d.pod is null and d.hostname = s.host and h.replicas_on_host = 1)
    group by s.replica
),

costs as (
    select
        replica,
        sum(gpu_s) / 3600 as gpu_hours,
        sum(total_cost) as total_cost,
        sum(idle_cost) as idle_cost,
        sum(gpu_s) filter (where priced) / 3600 as priced_gpu_hours,
        -- scraped time's price: estimated cost (requests with no scrape behind them) is in
        -- total_cost but not in gpu_s
        3600 * sum(total_cost - est_cost) filter (where priced)
            / nullif(sum(gpu_s) filter (where priced), 0) as price_per_gpu_hour
    from mart_replica_hours
    where hour >= $start and hour < $end and replica in (select replica from selected)
    group by replica
),

final as (
    select
        s.replica, s.deployment, s.gpus, s.gpu_type,
        m.gpu_util, m.dcgm_gpus,
        c.gpu_hours,
        coalesce(c.total_cost, 0) as total_cost,
        coalesce(c.idle_cost, 0) as idle_cost,
        c.priced_gpu_hours,
        c.price_per_gpu_hour
    from selected as s
    left join mapped as m on m.replica = s.replica
    left join costs as c on c.replica = s.replica
)

select * from final
order by deployment, replica
