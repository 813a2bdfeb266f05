"""The benchmark ledger's fleet (bench/ledger_data.py): its self-hosted deployments and their
rough H200 step-time figures, the routes each app calls with their length, retrieval, tool and
review draws, the OpenTelemetry resource keys of app and engine spans, and the labels vLLM's
cache_config_info carries. Data only; the generator turns it into spans and scrapes."""

from __future__ import annotations

# Deployments as in docs/demo.md. Step-time figures are rough H200 numbers: prefill tokens/s of
# one replica and seconds per output token under a typical batch; queue_mean_s is the mean wait of a
# request that waits at all, at the mean load (it grows with the square of the hour's load).
DEPLOYMENTS = (
    {
        "deployment": "llama-3.1-8b-h200",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "engine_service": "vllm-llama-8b",
        "host": "gpu-node-a",
        "server_address": "llama-8b.inference.svc.cluster.local",
        "prefill_tok_s": 25_000.0,
        "tpot_s": 0.012,
        "queue_mean_s": 0.05,
        "num_gpu_blocks": 51_828,
    },
    {
        "deployment": "llama-3.1-70b-fp8-h200",
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "engine_service": "vllm-llama-70b",
        "host": "gpu-node-b",
        "server_address": "llama-70b.inference.svc.cluster.local",
        "prefill_tok_s": 6_000.0,
        "tpot_s": 0.030,
        "queue_mean_s": 0.4,
        "num_gpu_blocks": 10_337,
    },
)

_SUPPORT = {
    "app": "support-assistant",
    "service": "support-assistant",
    "namespace": "cx",
    "version": "3.4.1",
    "team": "customer-experience",
}
# One row per route: share of requests, app identity, token ranges (input skew: u**skew),
# cached fraction range, retrieval/tool probability and service, review, outcome shares.
# Retrieval: .45*.7 + .25 + .12*.3 = 60 %; tools: .25*.3 + .08 = 15.5 %.
ROUTES = (
    {
        "weight": 0.45, "app": "code-assistant", "service": "code-assistant",
        "namespace": "devprod", "version": "2.8.0", "team": "developer-productivity",
        "route": "/complete", "workflow": "code-completion", "dep_ix": 0,
        "temperature": "0.2", "max_tokens": 256, "in_lo": 3000, "in_hi": 8000, "in_skew": 1.0,
        "c_lo": 0.55, "c_hi": 0.95, "out_lo": 8, "out_hi": 160,
        "ret_p": 0.7, "ret_name": "code-context", "ret_db": "elasticsearch",
        "ret_address": "search.devprod.svc.cluster.local", "ret_top_k": "8",
        "ret_ms_lo": 10.0, "ret_ms_hi": 40.0,
        "tool_p": 0.0, "tool_name": "none", "tool_ms_lo": 0.0, "tool_ms_hi": 0.0,
        "review_p": 0.0, "review_s": 0.0, "acc_p": 0.31, "corr_p": 0.0,
    },
    {
        "weight": 0.25, **_SUPPORT, "route": "/answer", "workflow": "answer-ticket",
        "dep_ix": 0, "temperature": "0.3", "max_tokens": 1024,
        "in_lo": 2400, "in_hi": 4400, "in_skew": 1.0, "c_lo": 0.45, "c_hi": 0.85,
        "out_lo": 24, "out_hi": 420,
        "ret_p": 1.0, "ret_name": "support-kb", "ret_db": "qdrant",
        "ret_address": "qdrant.search.svc.cluster.local", "ret_top_k": "4",
        "ret_ms_lo": 30.0, "ret_ms_hi": 70.0,
        "tool_p": 0.3, "tool_name": "lookup_order", "tool_ms_lo": 30.0, "tool_ms_hi": 120.0,
        "review_p": 0.1, "review_s": 75.0, "acc_p": 0.72, "corr_p": 0.14,
    },
    {
        "weight": 0.12, "app": "internal-chat", "service": "internal-chat",
        "namespace": "platform", "version": "1.2.0", "team": "platform",
        "route": "/chat", "workflow": "chat", "dep_ix": 1,
        "temperature": "0.7", "max_tokens": 2048, "in_lo": 300, "in_hi": 9000, "in_skew": 2.0,
        "c_lo": 0.5, "c_hi": 0.95, "out_lo": 40, "out_hi": 700,
        "ret_p": 0.3, "ret_name": "wiki", "ret_db": "pgvector",
        "ret_address": "pgvector.platform.svc.cluster.local", "ret_top_k": "6",
        "ret_ms_lo": 40.0, "ret_ms_hi": 120.0,
        "tool_p": 0.0, "tool_name": "none", "tool_ms_lo": 0.0, "tool_ms_hi": 0.0,
        "review_p": 0.0, "review_s": 0.0, "acc_p": 0.80, "corr_p": 0.05,
    },
    {
        "weight": 0.10, **_SUPPORT, "route": "/summarize", "workflow": "summarize-ticket",
        "dep_ix": 0, "temperature": "0.3", "max_tokens": 512,
        "in_lo": 1000, "in_hi": 12800, "in_skew": 2.0, "c_lo": 0.05, "c_hi": 0.2,
        "out_lo": 100, "out_hi": 400,
        "ret_p": 0.0, "ret_name": "none", "ret_db": "none", "ret_address": "none",
        "ret_top_k": "0", "ret_ms_lo": 0.0, "ret_ms_hi": 0.0,
        "tool_p": 0.0, "tool_name": "none", "tool_ms_lo": 0.0, "tool_ms_hi": 0.0,
        "review_p": 0.0, "review_s": 0.0, "acc_p": 0.75, "corr_p": 0.15,
    },
    {
        "weight": 0.08, "app": "document-extraction", "service": "doc-extractor",
        "namespace": "finance", "version": "0.9.3", "team": "finance-ops",
        "route": "/extract", "workflow": "extract-invoice", "dep_ix": 0,
        "temperature": "0.0", "max_tokens": 2048, "in_lo": 5400, "in_hi": 7400, "in_skew": 1.0,
        "c_lo": 0.18, "c_hi": 0.26, "out_lo": 300, "out_hi": 900,
        "ret_p": 0.0, "ret_name": "none", "ret_db": "none", "ret_address": "none",
        "ret_top_k": "0", "ret_ms_lo": 0.0, "ret_ms_hi": 0.0,
        "tool_p": 1.0, "tool_name": "post_to_erp", "tool_ms_lo": 80.0, "tool_ms_hi": 400.0,
        "review_p": 1.0, "review_s": 40.0, "acc_p": 0.70, "corr_p": 0.20,
    },
)  # fmt: skip

APP_RESOURCE_KEYS = [
    "service.name",
    "service.namespace",
    "service.version",
    "deployment.environment.name",
    "inferledger.app",
    "inferledger.team",
    "telemetry.sdk.language",
]
ENGINE_RESOURCE_KEYS = [
    "service.name",
    "service.instance.id",
    "deployment.environment.name",
    "host.name",
]
# vLLM's cache_config_info labels (vLLM 0.11, as the demo exports them), num_gpu_blocks aside.
CACHE_CONFIG_LABELS = {
    "block_size": "16", "cache_dtype": "auto", "calculate_kv_scales": "False",
    "cpu_kvcache_space_bytes": "None", "cpu_offload_gb": "0", "enable_prefix_caching": "True",
    "engine": "0", "gpu_memory_utilization": "0.9", "is_attention_free": "False",
    "kv_cache_memory_bytes": "None", "kv_offloading_backend": "None",
    "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None", "mamba_cache_dtype": "auto", "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "auto", "num_cpu_blocks": "0", "num_gpu_blocks_override": "None",
    "prefix_caching_hash_algo": "sha256", "sliding_window": "None", "swap_space": "4",
}  # fmt: skip
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
