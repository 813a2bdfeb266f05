"""Which vLLM engine a scenario runs: V1 (today's) or V0 (vLLM <= 0.10, the engine of the 2024
benchmarks), and how the engine was driven (the OpenAI server or the offline LLM class).

Scenario fields (models/serving/scenario.py) select these; this module holds the numbers of
`engine` and `usage_context` and says what each field changes (nothing else does):

engine: v0
    The step-time predictor runs the engine's CPU work per step (scheduler, input preparation,
    output processing) *before* the forward pass instead of beside it: RooflinePredictor's
    ``async_scheduling=False`` (models/steptime.py). V0 had no async scheduling; its CPU work
    per step is serial with the GPU (vLLM blog, "vLLM v0.6.0: 2.7x Throughput Improvement and
    5x Latency Reduction", 2024-09-05, https://blog.vllm.ai/2024/09/05/perf-update.html: for
    Llama 3 8B on one H100 under v0.5.3, "29% of the total execution time is spent on
    scheduling, including gathering the LLM results from the last step, scheduling the
    requests to run next, and preparing these requests as tensors for GPUs"). The CPU work's
    size is the V1 step model's own assumed engine terms (models/step_coefficients.py:
    ``engine_step_cpu_s`` = 300 us + ``engine_seq_cpu_s`` = 2 us per sequence) times
    V0_ENGINE_CPU_SCALE, per step, FITTED on the `split: fit` rows of vLLM 0.6.0 with
    ``--num-scheduler-steps 10`` (bench/data/published_runs.yaml, sglang-v060-*; the only V0
    rows): 2.1 ms + 14 us per sequence per step. It is a per-step average over a multi-step
    pass (the scheduling done once per pass plus what every step still does on the CPU: the
    sampler's output, advancing the inputs); it is applied unchanged for other pass lengths,
    an extrapolation. It also absorbs whatever else those rows' steps cost beyond the V1 step
    model (that model's own error on A100 and H100 steps included): refit it with
    bench/fit_v0_engine_cpu.py whenever the step model changes.

num_scheduler_steps, enable_chunked_prefill (models/serving/config.py SchedulerConfig)
    Multi-step scheduling (admission between passes, bursts) and V0's prompt-only steps live
    in the replica scheduler (models/serving/replica_scheduler.py).

usage_context: api_server | llm_class
    vLLM's EngineArgs picks max_num_batched_tokens and max_num_seqs per UsageContext and GPU
    (vllm/engine/arg_utils.py, EngineArgs._set_default_args / get_batch_defaults, vLLM
    0.9-0.11): on GPUs with >= 70 GiB that are not A100, LLM_CLASS 16384 tokens / 1024 seqs,
    OPENAI_API_SERVER 8192 / 1024; otherwise LLM_CLASS 8192 / 256, OPENAI_API_SERVER 2048 /
    256. `vllm bench latency` and `vllm bench throughput` (benchmarks/benchmark_latency.py,
    benchmark_throughput.py) build the LLM class; `vllm serve` the API server. Explicit
    --max-num-batched-tokens / --max-num-seqs win.
"""

from __future__ import annotations

from dataclasses import replace

from models.gpu_catalog import GpuSpec
from models.step_coefficients import StepTimeCoefficients, default_coefficients

ENGINES = ("v1", "v0")
USAGE_CONTEXTS = ("api_server", "llm_class")

# vLLM picks larger scheduler limits on big GPUs (vllm/engine/arg_utils.py: device memory
# >= 70 GiB and "a100" not in the device name).
LARGE_GPU_MIN_GIB = 70
_GIB = 1 << 30
# (max_num_seqs, max_num_batched_tokens) by (large GPU, usage context); arg_utils.py's tables.
_SCHEDULER_DEFAULTS = {
    (True, "api_server"): (1024, 8192),
    (True, "llm_class"): (1024, 16384),
    (False, "api_server"): (256, 2048),
    (False, "llm_class"): (256, 8192),
}

#: V0's engine CPU per step relative to the V1 step model's assumed engine terms, serial with
#: the forward pass. FITTED by bench/fit_v0_engine_cpu.py on the five `split: fit`
#: sglang-v060-* rows (vLLM 0.6.0, --num-scheduler-steps 10, chunked prefill off): the median
#: |error| of their 18 scored metrics (ITL scored once per 10-token chunk) is smallest at 7 on
#: the grid 1-14 (5.3 %, 5.7 % at 8, against 19.4 % at 1, with the step model of 2026-12-07
#: 21:35 UTC); the holdout row was never simulated for the fit. See docs/simulator.md "Older
#: engines".
V0_ENGINE_CPU_SCALE = 7.0


def usage_scheduler_defaults(gpu: GpuSpec, usage_context: str = "api_server") -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM picks for a GPU and usage context."""
    if usage_context not in USAGE_CONTEXTS:
        raise ValueError(f"usage_context must be one of {', '.join(USAGE_CONTEXTS)}")
    large = gpu.memory_bytes / _GIB >= LARGE_GPU_MIN_GIB and not gpu.name.upper().startswith("A100")
    return _SCHEDULER_DEFAULTS[(large, usage_context)]


def engine_step_model(
    engine: str, base: StepTimeCoefficients | None = None
) -> tuple[bool, StepTimeCoefficients | None]:
    """(async_scheduling, coefficients) of the step-time predictor for an engine. ``base``: the
    coefficients the V1 predictor of the deployment uses (RooflinePredictor.coefficients; the
    shipped fit when None). V1 returns (True, None): exactly today's predictor."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "v1":
        return True, None
    if base is None:
        base = default_coefficients()
    scale = V0_ENGINE_CPU_SCALE
    return False, replace(
        base,
        engine_step_cpu_s=base.engine_step_cpu_s * scale,
        engine_seq_cpu_s=base.engine_seq_cpu_s * scale,
    )
