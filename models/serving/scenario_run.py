"""From a scenario (models/serving/scenario.py) to a simulation: the engine vLLM would run
(KV blocks and scheduler limits from vLLM's defaults), the cluster, the workload (a traffic mix,
a fitted dataset or a replayed trace), the run itself, the client's delays, and the summary
with the client's measurement window.

    run = run_scenario(replace(load_scenario("examples/scenarios/chat.yaml"), num_prompts=200))
    summarize_run(run)   # summarize(run.result) with the client delays and the window
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from inferledger.core.errors import BadInputError
from models.gpu_catalog import Precision, get_gpu, parse_precision
from models.model_catalog import get_model
from models.serving.cluster import Cluster
from models.serving.config import (
    CacheConfig,
    ClusterConfig,
    ReplicaConfig,
    RouterPolicy,
    SchedulerConfig,
    SimulationOptions,
)
from models.serving.engine_era import engine_step_model, usage_scheduler_defaults
from models.serving.records import SimulationResult
from models.serving.request import RequestSpec
from models.serving.scenario import (
    DEFAULT_MAX_MODEL_LEN,
    KV_CACHE_DTYPES,
    ScenarioConfig,
)
from models.serving.summary import summarize
from models.serving.workload import arrival_times, random_workload
from models.steptime import RooflinePredictor, build_predictor
from models.workload.datasets import get_dataset
from models.workload.trace import read_trace, trace_specs


@dataclass(frozen=True, slots=True)
class ResolvedEngine:
    """What the scenario's deployment comes to once vLLM's defaults are applied."""

    model: str
    gpu: str
    weight_dtype: str
    kv_cache_dtype: str
    tensor_parallel_size: int
    num_gpu_blocks: int
    kv_cache_tokens: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_prefix_caching: bool
    gpu_memory_utilization: float
    admission: str = "vllm"
    num_scheduler_steps: int = 1
    engine: str = "v1"
    usage_context: str = "api_server"
    enable_chunked_prefill: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scheduler_defaults(gpu: str, usage_context: str = "api_server") -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) that vLLM picks for a GPU: the OpenAI server's
    by default, the offline LLM class's with usage_context "llm_class" (engine_era)."""
    return usage_scheduler_defaults(get_gpu(gpu), usage_context)


def resolve_engine(scenario: ScenarioConfig) -> tuple[ResolvedEngine, RooflinePredictor]:
    """The engine config and step-time predictor of the scenario's deployment."""
    if scenario.model is None:
        raise BadInputError("model is required (--model, or 'model' in the scenario)")
    if scenario.gpu is None:
        raise BadInputError("gpu is required (--gpu, or 'gpu' in the scenario)")
    model = get_model(scenario.model)
    gpu = get_gpu(scenario.gpu)
    weights = parse_precision(scenario.dtype, "dtype")
    kv = KV_CACHE_DTYPES[scenario.kv_cache_dtype]
    predictor = build_predictor(model, gpu, weights, scenario.tensor_parallel_size, kv)
    if scenario.engine != "v1":
        # the same coefficients (as carried to this GPU), V0's engine CPU terms (engine_era)
        async_scheduling, coefficients = engine_step_model(scenario.engine, predictor.coefficients)
        predictor = build_predictor(
            model,
            gpu,
            weights,
            scenario.tensor_parallel_size,
            kv,
            coefficients,
            async_scheduling=async_scheduling,
        )
    blocks = predictor.num_gpu_blocks(scenario.gpu_memory_utilization, scenario.block_size)
    seqs, tokens = usage_scheduler_defaults(gpu, scenario.usage_context)
    max_num_seqs = scenario.max_num_seqs if scenario.max_num_seqs is not None else seqs
    batched = scenario.max_num_batched_tokens
    batched = batched if batched is not None else tokens
    if batched < max_num_seqs:
        raise BadInputError(
            f"max_num_batched_tokens ({batched}) must be >= max_num_seqs ({max_num_seqs})"
        )
    max_model_len = scenario.max_model_len or DEFAULT_MAX_MODEL_LEN
    if not scenario.enable_chunked_prefill and batched < max_model_len:
        # vLLM V0 refuses to start so (a prompt of max_model_len could never be scheduled)
        raise BadInputError(
            f"without chunked prefill, max_num_batched_tokens ({batched}) must be >= "
            f"max_model_len ({max_model_len}): raise --max-num-batched-tokens or lower "
            "--max-model-len"
        )
    kv_tokens = blocks * scenario.block_size
    if kv_tokens < max_model_len:
        # vLLM refuses to start when one request of max_model_len cannot fit the KV cache.
        raise BadInputError(
            f"the KV cache holds {kv_tokens} tokens, fewer than max_model_len {max_model_len}: "
            "lower --max-model-len, raise --gpu-memory-utilization or use more GPUs"
        )
    engine = ResolvedEngine(
        model=model.name,
        gpu=gpu.name,
        weight_dtype=str(weights),
        kv_cache_dtype=str(kv or Precision.BF16),
        tensor_parallel_size=scenario.tensor_parallel_size,
        num_gpu_blocks=blocks,
        kv_cache_tokens=kv_tokens,
        block_size=scenario.block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=batched,
        max_model_len=max_model_len,
        enable_prefix_caching=scenario.enable_prefix_caching,
        gpu_memory_utilization=scenario.gpu_memory_utilization,
        admission=scenario.admission,
        num_scheduler_steps=scenario.num_scheduler_steps,
        engine=scenario.engine,
        usage_context=scenario.usage_context,
        enable_chunked_prefill=scenario.enable_chunked_prefill,
    )
    return engine, predictor


def cluster_config(scenario: ScenarioConfig, engine: ResolvedEngine) -> ClusterConfig:
    replica = ReplicaConfig(
        CacheConfig(engine.num_gpu_blocks, engine.block_size, engine.enable_prefix_caching),
        SchedulerConfig(
            max_num_seqs=engine.max_num_seqs,
            max_num_batched_tokens=engine.max_num_batched_tokens,
            max_model_len=engine.max_model_len,
            admission=engine.admission,
            num_scheduler_steps=engine.num_scheduler_steps,
            enable_chunked_prefill=engine.enable_chunked_prefill,
        ),
    )
    return ClusterConfig(replica, scenario.replicas, RouterPolicy(scenario.router))


def make_workload(scenario: ScenarioConfig) -> list[RequestSpec]:
    """The scenario's requests, from its seed alone. Each request's context carries its
    max_tokens (and traffic class), which vLLM's telemetry reports."""
    if scenario.trace is not None:
        return trace_specs(read_trace(scenario.trace))
    rng = np.random.default_rng(scenario.seed)
    n = scenario.num_prompts
    if scenario.dataset_name != "random":
        return dataset_workload(scenario, rng)
    if not scenario.mix:
        specs = random_workload(
            rng,
            num_prompts=n,
            input_len=scenario.random_input_len,
            output_len=scenario.random_output_len,
            range_ratio=scenario.random_range_ratio,
            prefix_len=scenario.random_prefix_len,
            request_rate=scenario.request_rate,
            burstiness=scenario.burstiness,
        )
        return [replace(s, context={"max_tokens": s.max_tokens}) for s in specs]
    mix = scenario.mix
    times = arrival_times(rng, n, scenario.request_rate, scenario.burstiness)
    weights = np.array([c.weight for c in mix], dtype=float)
    kinds = rng.choice(len(mix), size=n, p=weights / weights.sum())
    draws = rng.random((n, 3))
    specs = []
    for i in range(n):
        c = mix[int(kinds[i])]
        request_id = f"{c.name}-{i}"
        in_len = _uniform_len(c.input_len, c.range_ratio, draws[i, 0])
        out_len = _uniform_len(c.output_len, c.range_ratio, draws[i, 1])
        max_tokens = out_len if c.max_tokens is None else c.max_tokens
        out_len = min(out_len, max_tokens)
        prompt: tuple[tuple[str, int], ...] = ((request_id, in_len),)
        if c.prefix_len:
            k = min(int(draws[i, 2] * c.num_prefixes), c.num_prefixes - 1)
            prompt = ((f"{c.name}/prefix-{k}", c.prefix_len), *prompt)
        specs.append(
            RequestSpec(
                request_id=request_id,
                arrival_s=float(times[i]),
                prompt=prompt,
                output_tokens=out_len,
                max_tokens=max_tokens,
                context={"max_tokens": max_tokens, "traffic_class": c.name},
            )
        )
    return specs


def dataset_workload(scenario: ScenarioConfig, rng: np.random.Generator) -> list[RequestSpec]:
    """num_prompts requests with lengths from a shipped dataset's fitted distribution (like
    `vllm bench serve --dataset-name sharegpt`: max_tokens = the drawn output length) and
    vllm bench serve's arrival process."""
    n = scenario.num_prompts
    lengths = get_dataset(scenario.dataset_name).sample(rng, n)
    times = arrival_times(rng, n, scenario.request_rate, scenario.burstiness)
    specs = []
    for i in range(n):
        request_id = f"{scenario.dataset_name}-{i}"
        out = int(lengths[i, 1])
        specs.append(
            RequestSpec(
                request_id=request_id,
                arrival_s=float(times[i]),
                prompt=((request_id, int(lengths[i, 0])),),
                output_tokens=out,
                max_tokens=out,
                context={"max_tokens": out},
            )
        )
    return specs


def _uniform_len(mean: int, ratio: float, u: float) -> int:
    """An integer uniform in [mean(1-ratio), mean(1+ratio)] (at least 1), from u in [0, 1)."""
    low = max(1, int(mean * (1 - ratio)))
    high = max(low, int(mean * (1 + ratio)))
    return low + min(int(u * (high - low + 1)), high - low)


@dataclass(frozen=True, slots=True)
class ScenarioRun:
    """A scenario, the engine it resolved to, and the simulation's result. client_delay_s:
    each request's client + network delay (client_delays()), empty when the scenario has
    none."""

    scenario: ScenarioConfig
    engine: ResolvedEngine
    result: SimulationResult
    client_delay_s: Mapping[str, float] = field(default_factory=dict)

    def config_dict(self) -> dict[str, Any]:
        """Everything the run depended on, as plain data (written beside every result)."""
        return {
            "scenario": self.scenario.to_dict(),
            "engine": self.engine.to_dict(),
            "simulation": self.result.config_dict(),
        }


def run_scenario(scenario: ScenarioConfig, options: SimulationOptions | None = None) -> ScenarioRun:
    """Simulate the scenario. The same scenario always gives the same result."""
    specs = make_workload(scenario)  # first: a bad trace line is reported before anything runs
    engine, predictor = resolve_engine(scenario)
    cluster = Cluster(cluster_config(scenario, engine), predictor, options)
    delays = client_delays(scenario, [s.request_id for s in specs])
    result = cluster.run(specs, max_concurrency=scenario.max_concurrency, client_delay_s=delays)
    return ScenarioRun(scenario, engine, result, delays)


#: a stream of its own for the client delays, so turning them on leaves the workload as it was
_CLIENT_STREAM = 0x636C69656E74


def client_delays(scenario: ScenarioConfig, request_ids: Sequence[str]) -> dict[str, float]:
    """Each request's client + network delay in seconds: client_delay_ms plus a normal jitter
    of standard deviation client_jitter_ms, cut at 0; drawn from the seed in request order.
    What a client adds to the TTFT and E2E latency it measures (the request's trip to the
    server and the response's trip back, the HTTP stack, the client's tokenisation); it moves
    every token of a request equally, so TPOT and ITL do not change. Under max_concurrency it
    also keeps the request's slot busy until the response has reached its client
    (Cluster.run). Empty when both are 0."""
    mean = scenario.client_delay_ms / 1000.0
    sigma = scenario.client_jitter_ms / 1000.0
    if mean == 0 and sigma == 0:
        return {}
    rng = np.random.default_rng([scenario.seed, _CLIENT_STREAM])
    draws = rng.standard_normal(len(request_ids))
    return {
        rid: max(0.0, mean + sigma * float(z)) for rid, z in zip(request_ids, draws, strict=True)
    }


def summarize_run(
    run: ScenarioRun, *, percentiles: tuple[float, ...] = (99,)
) -> dict[str, float | int | None]:
    """summarize() of the run as its client measures it: with the scenario's client delays and
    over its measured window (warmup_s / cooldown_s left out)."""
    return summarize(
        run.result,
        percentiles=percentiles,
        client_delay_s=run.client_delay_s,
        warmup_s=run.scenario.warmup_s,
        cooldown_s=run.scenario.cooldown_s,
    )
