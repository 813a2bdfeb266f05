-- one row per replica (vLLM scrape target): its deployment, model, GPUs and KV cache, with the
-- source of each value. A configured value (deployments) wins over a learned one (replicas);
-- learned values fill what the configuration leaves open; then defaults. *_source is 'config'
-- or 'ui' (the deployments row's owner), 'learned', 'default', or NULL when nothing is known.
-- A replica whose scrape target names no deployment is a deployment of its own name.
with replica_facts as (
    select
        r.*,
        coalesce(r.deployment, r.replica) as deployment_name
    from replicas as r
),

configured as (
    -- discovered rows carry no values, only the name: they configure nothing
    select * from deployments where source <> 'discovered'
),

joined as (
    select
        r.replica,
        r.deployment_name as deployment,
        case when r.deployment is null then 'default' else 'learned' end as deployment_source,
        c.source as config_source,
        c.model as config_model,
        c.gpu_type as config_gpu_type,
        c.gpus_per_replica as config_gpus,
        c.tensor_parallel as config_tensor_parallel,
        c.idle_policy as config_idle_policy,
        c.environment as config_environment,
        r.model as learned_model,
        r.gpu_type as learned_gpu_type,
        r.dcgm_model_name,
        r.block_size,
        r.num_gpu_blocks,
        r.cache_dtype,
        r.prefix_caching,
        r.host,
        r.first_seen,
        r.last_seen,
        r.learned_at
    from replica_facts as r
    left join configured as c on c.deployment = r.deployment_name
),

final as (
    select
        replica,
        deployment,
        deployment_source,
        coalesce(config_model, learned_model) as model,
        case
            when config_model is not null then config_source
            when learned_model is not null then 'learned'
        end as model_source,
        coalesce(config_gpu_type, learned_gpu_type) as gpu_type,
        case
            when config_gpu_type is not null then config_source
            when learned_gpu_type is not null then 'learned'
        end as gpu_type_source,
        -- GPUs held by one replica: tensor_parallel x pipeline stages when configured; one of
        -- gpus_per_replica and tensor_parallel implies the other when only one is given.
        coalesce(config_gpus, config_tensor_parallel, 1) as gpus,
        case
            when coalesce(config_gpus, config_tensor_parallel) is not null then config_source
            else 'default'
        end as gpus_source,
        coalesce(config_tensor_parallel, config_gpus, 1) as tensor_parallel,
        case
            when coalesce(config_tensor_parallel, config_gpus) is not null then config_source
            else 'default'
        end as tensor_parallel_source,
        coalesce(config_idle_policy, 'separate') as idle_policy,
        coalesce(config_source, 'default') as idle_policy_source,
        config_environment as environment,
        case when config_environment is not null then config_source end as environment_source,
        num_gpu_blocks,
        block_size,
        num_gpu_blocks * block_size as kv_cache_tokens,
        cache_dtype,
        prefix_caching,
        dcgm_model_name,
        host,
        first_seen,
        last_seen,
        learned_at
    from joined
)

select * from final
