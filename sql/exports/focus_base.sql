-- one row per FOCUS charge (the rows of focus_charges.sql, named `charges` by ledger/focus.py):
-- the values of the FOCUS columns both versions share, and the tags split three ways. The
-- constants are documented in docs/focus.md ("Column values").
select
    c.*,
    pe.kind || '/' || pe.subject || '/' || pe.unit as sku_id,
    pe.currency,
    timezone('UTC', date_trunc('month', timezone('UTC', c.hour))) as billing_period_start,
    timezone('UTC', date_trunc('month', timezone('UTC', c.hour)) + interval 1 month)
        as billing_period_end,
    c.hour + interval 1 hour as charge_period_end,
    case c.source when 'tokens' then c.provider else 'Internal' end as provider_name,
    -- hostprovidername.md (1.3): "Not Applicable" for a service on no infrastructure
    case c.source
        when 'tokens' then c.provider when 'review' then 'Not Applicable' else 'Internal'
    end as host_provider_name,
    case c.source
        when 'tokens' then 'LLM API'
        when 'gpu' then 'Self-hosted LLM inference'
        when 'review' then 'Human review'
        else c.service
    end as service_name,
    case c.source when 'review' then 'Other' else 'AI and Machine Learning' end
        as service_category,
    case c.source
        when 'review' then 'Other (Other)'
        when 'tokens' then 'Generative AI'
        when 'gpu' then 'Generative AI'
        else 'Other (AI and Machine Learning)'
    end as service_subcategory,
    case c.source
        when 'tokens' then c.provider || '/' || c.model
        when 'gpu' then c.replica
        when 'review' then 'reviewer/' || c.reviewer
        else c.service
    end as resource_id,
    case c.source
        when 'tokens' then c.model
        when 'gpu' then c.replica
        when 'review' then c.reviewer
        else c.service
    end as resource_name,
    case c.source
        when 'tokens' then 'Hosted model'
        when 'gpu' then 'GPU replica'
        when 'review' then 'Reviewer'
        else case c.stage when 'tools' then 'Tool' else 'Retrieval service' end
    end as resource_type,
    case c.source
        when 'tokens' then case c.unit
            when 'input_mtok' then 'Input Tokens'
            when 'cached_input_mtok' then 'Cached Input Tokens'
            else 'Output Tokens'
        end
        when 'gpu' then 'GPU Time'
        when 'service_call' then 'Calls'
        when 'service_hour' then 'Service Time'
        else 'Review Time'
    end as sku_meter,
    case c.source
        when 'tokens' then 'Tokens'
        when 'gpu' then 'GPU-Hours'
        when 'service_call' then 'Requests'
        else 'Hours'
    end as consumed_unit,
    case c.source
        when 'tokens' then '1000000 Tokens'
        when 'gpu' then 'GPU-Hours'
        when 'service_call' then 'Requests'
        else 'Hours'
    end as pricing_unit,
    case c.source
        when 'tokens' then c.model || ' ' || case c.unit
            when 'input_mtok' then 'input tokens'
            when 'cached_input_mtok' then 'cached input tokens'
            else 'output tokens'
        end
        when 'gpu' then c.gpu_type || ' GPU time on ' || c.replica || ' (' || c.deployment || ')'
            || case when c.stage = 'idle' then ', idle' else ', ' || c.stage end
        when 'service_call' then c.service || ' calls'
        when 'service_hour' then c.service || ' hours'
        else 'review hours'
    end as charge_description,
    -- tags of the origin charge (its resource) and of the part a split row allocates to
    map_from_entries(list_filter(
        case c.source
            when 'gpu' then [
                {'k': 'inferledger/deployment', 'v': c.deployment},
                {'k': 'inferledger/replica', 'v': c.replica},
                {'k': 'inferledger/gpu_type', 'v': c.gpu_type},
                {'k': 'inferledger/model', 'v': c.model}
            ]
            when 'service_hour' then [
                {'k': 'inferledger/service', 'v': c.service},
                {'k': 'inferledger/stage', 'v': c.stage}
            ]
            else []
        end, lambda e: e.v is not null
    )) as origin_tags,
    map_from_entries(list_filter(
        [
            {'k': 'inferledger/environment', 'v': c.environment},
            {'k': 'inferledger/app', 'v': c.app},
            {'k': 'inferledger/team', 'v': c.team},
            {'k': 'inferledger/route', 'v': c.route},
            {'k': 'inferledger/workflow', 'v': c.workflow}
        ]
        || case c.source
            when 'gpu' then [{'k': 'inferledger/stage', 'v': c.stage}]
            when 'service_hour' then []
            else [
                {'k': 'inferledger/model', 'v': c.model},
                {'k': 'inferledger/stage', 'v': c.stage},
                {'k': 'inferledger/service', 'v': c.service},
                {'k': 'inferledger/reviewer', 'v': c.reviewer}
            ]
        end,
        lambda e: e.v is not null
    )) as part_tags,
    case c.source when 'gpu' then 'inferledger-gpu-share' else 'inferledger-service-duration' end
        as alloc_method_id,
    case when c.origin_id is not null then json_object('Elements', [json_object(
        'AllocatedRatio', c.alloc_ratio,
        'UsageUnit', case c.source when 'gpu' then 'GPU-Seconds' else 'Seconds' end,
        'UsageQuantity', c.alloc_usage
    )]) end as alloc_details,
    case
        when c.origin_id is not null and c.stage <> 'idle' then concat_ws(
            ';', 'environment=' || coalesce(c.environment, ''), 'app=' || coalesce(c.app, ''),
            'team=' || coalesce(c.team, ''), 'route=' || coalesce(c.route, ''),
            'workflow=' || coalesce(c.workflow, ''),
            case when c.source = 'gpu' then 'stage=' || c.stage end
        )
    end as alloc_resource_id,
    case
        when c.origin_id is not null and c.stage <> 'idle' then concat_ws(
            ', ', 'app ' || coalesce(c.app, '(none)'), 'team ' || coalesce(c.team, '(none)'),
            'route ' || coalesce(c.route, '(none)'),
            case when c.source = 'gpu' then c.stage end
        )
    end as alloc_resource_name
from charges as c
inner join prices_effective as pe on pe.price_id = c.price_id
