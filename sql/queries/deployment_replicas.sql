-- one row per replica (a vLLM scrape target): its deployment, model, GPU type and count and idle
-- policy, each with where the value came from (config or learned from scrapes), and its KV-cache
-- blocks; the admin Deployments page
with final as (
    select
        replica,
        deployment,
        model,
        model_source,
        gpu_type,
        gpu_type_source,
        gpus,
        gpus_source,
        idle_policy,
        idle_policy_source,
        num_gpu_blocks,
        block_size,
        last_seen
    from deployment_replicas
)

select * from final
order by deployment, replica
