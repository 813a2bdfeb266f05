"""Serve a task plan on the simulated deployments, closing the loop between apps and engines.

An app waits for an LLM call to finish before its next step (a tool call, the second call), a
client retries after a failed attempt ends, and a conversation's next turn comes after the last
answer; so when some engine requests arrive depends on when others finish. The simulator takes
arrival times up front, so the plan is served in passes: pass 1 places dependent calls using a
rough latency estimate; each later pass places them after their predecessors as the previous
pass actually finished them. The loop stops when no arrival moves by more than `tolerance_s`
(or after `max_passes`); the last pass's records are the facts every span is built from. A
dependent call that the final pass still started before its predecessor ended (possible only
when the last pass slowed a predecessor down) is counted in `overlaps`.

The same walk (`walk_attempt`) lays out the app's spans for the span builder, so the app's
timings and the engine's agree: every CLIENT span encloses its engine request.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from models.execution_time import StepShape
from models.serving import (
    CacheConfig,
    Cluster,
    ClusterConfig,
    ReplicaConfig,
    RequestRecord,
    RequestSpec,
    RouterPolicy,
    SchedulerConfig,
    SimulationOptions,
    SimulationResult,
)
from models.serving.live import LiveCluster
from models.steptime import build_predictor
from models.workload.config import DeploymentConfig, WorkloadConfig
from models.workload.plan import (
    FANOUT_STAGGER_S,
    NETWORK_S,
    Attempt,
    LlmCall,
    Step,
    StepKind,
    TaskPlan,
)

DEFAULT_SAMPLE_INTERVAL_S = 15.0  # a Prometheus scrape interval


@dataclass(frozen=True, slots=True)
class Deployment:
    """A deployment ready to simulate: its config, cluster, and a rough latency estimate."""

    config: DeploymentConfig
    cluster: Cluster
    num_gpu_blocks: int
    prefill_s_per_token: float
    decode_step_s: float

    def run(self, specs: Sequence[RequestSpec]) -> SimulationResult:
        """Serve `specs` (sorted by arrival). With prefix-affinity routing the gateway, not the
        router, picks each request's replica (affinity_replica); the engines run as in a batch
        run (LiveCluster gives the same records and series for the same placements)."""
        if self.config.routing != "prefix_affinity":
            return self.cluster.run(specs)
        cluster = self.cluster
        if not specs:
            return cluster.run(specs)
        live = LiveCluster(
            cluster.config, cluster.predictor, cluster.options, start_s=specs[0].arrival_s
        )
        n = cluster.config.num_replicas
        for spec in specs:
            live.submit(spec, replica=affinity_replica(spec.prompt, n))
        records = live.run_until_idle()
        records.sort(key=lambda r: r.arrival_s)
        return SimulationResult(
            config=cluster.config,
            options=cluster.options,
            requests=tuple(records),
            replicas=live.replica_records(),
            start_s=specs[0].arrival_s,
            end_s=live.now,
        )

    def estimate_s(self, call: LlmCall) -> float:
        """Rough time from arrival to finish on a lightly loaded replica (pass 1 only)."""
        return (
            0.01
            + call.prompt_tokens * self.prefill_s_per_token
            + (call.output_tokens * self.decode_step_s)
        )


def affinity_replica(prompt: Sequence[tuple[str, int]], replicas: int) -> int:
    """The replica a prefix-affinity gateway sends a prompt to: a hash of its leading shared
    segments (those no single task owns: a system prompt, a repository's context), so prompts
    that share them meet their cached prefix, and a popular prefix makes its replica hot. A
    prompt that starts with its own tokens is spread by those."""
    shared = []
    for key, _ in prompt:
        if ":" in key:  # a task's own segment (models.workload.plan)
            break
        shared.append(key)
    text = "\x1f".join(shared) if shared else prompt[0][0]
    return zlib.crc32(text.encode()) % replicas


_ROUTERS = {
    "least_outstanding_requests": RouterPolicy.LEAST_OUTSTANDING_REQUESTS,
    "round_robin": RouterPolicy.ROUND_ROBIN,
    "prefix_affinity": RouterPolicy.LEAST_OUTSTANDING_REQUESTS,  # unused: the gateway picks
}


def build_deployments(
    config: WorkloadConfig,
    *,
    sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
) -> dict[str, Deployment]:
    """One simulated cluster per deployment, priced by the calibrated step-time model and
    routed as the deployment's `routing` says."""
    out = {}
    for d in config.deployments:
        predictor = build_predictor(
            d.model, d.gpu, d.dtype, d.tensor_parallel_size, d.kv_cache_dtype
        )
        blocks = predictor.num_gpu_blocks(d.gpu_memory_utilization)
        cluster_config = ClusterConfig(
            ReplicaConfig(
                CacheConfig(num_gpu_blocks=blocks),
                SchedulerConfig(
                    max_num_seqs=d.max_num_seqs,
                    max_num_batched_tokens=d.max_num_batched_tokens,
                    max_model_len=d.max_model_len,
                ),
                label=d.name,
            ),
            num_replicas=d.replicas,
            router=_ROUTERS[d.routing],
        )
        options = SimulationOptions(sample_interval_s=sample_interval_s)
        prefill = predictor.step_time_s(
            StepShape(prefill_tokens=2048, prefill_attention=2048 * 1024.0, num_prefill_seqs=1)
        )
        decode = predictor.step_time_s(StepShape(num_decode=16, decode_context_sum=16 * 3000))
        out[d.name] = Deployment(
            config=d,
            cluster=Cluster(cluster_config, predictor, options),
            num_gpu_blocks=blocks,
            prefill_s_per_token=prefill / 2048,
            decode_step_s=decode,
        )
    return out


@dataclass(frozen=True, slots=True)
class Schedule:
    """When each task and attempt starts and ends, and when each engine call should arrive
    (seconds from the plan's start)."""

    task_start: np.ndarray
    task_end: np.ndarray
    attempt_start: np.ndarray
    attempt_end: np.ndarray
    wanted_arrival: np.ndarray  # per engine call, after its predecessors as given
    overlaps: int  # steps that started before the previous step ended (fixed arrivals only)


@dataclass(frozen=True, slots=True)
class SimulatedPlan:
    """A plan served: the engines' results and the app timeline consistent with them."""

    plan: TaskPlan
    results: Mapping[str, SimulationResult]  # per deployment
    records: tuple[RequestRecord, ...]  # per engine call (engine_index order)
    arrival: np.ndarray  # engine arrival per engine call (s from the plan's start)
    finish: np.ndarray  # engine finish per engine call
    schedule: Schedule
    passes: int
    max_drift_s: float  # how far the last pass moved an arrival


def traceparent(trace_id: bytes, span_id: bytes) -> str:
    """W3C Trace Context `traceparent` header (version 00, sampled)."""
    return f"00-{trace_id.hex()}-{span_id.hex()}-01"


StepVisitor = Callable[[Step, float, float, list[tuple[float, float]]], None]
_MIN_STEP_S = 0.0005  # shortest a retrieval or tool span is ever drawn


def _anchored(step: Step) -> bool:
    return step.kind is StepKind.LLM and step.calls[0].engine_index >= 0


def walk_attempt(
    attempt: Attempt,
    start: float,
    arrival: np.ndarray,
    finish: np.ndarray | None,
    estimate: np.ndarray | None,
    *,
    fixed: bool,
    wanted: np.ndarray | None = None,
    visit: StepVisitor | None = None,
) -> tuple[float, float, int]:
    """Lay out one attempt; returns (start, end, overlaps).

    Planning (fixed=False): the attempt starts at `start` and each step follows the previous
    one; an engine call ends at `finish` (or arrival + `estimate` when finish is None), and the
    arrival each engine call should have is written to `wanted`.

    Final layout (fixed=True): engine calls happened when the simulation says, so the attempt
    is anchored on them: its start is laid out backwards from its first engine call, and a
    tool step before a later engine call takes the time left until that call (its planned
    duration moves by what the engine's timings moved). A step that still starts before the
    previous one ended counts as an overlap. `visit(step, start, end, calls)` receives every
    step with its calls' client-side (start, end).
    """
    steps = attempt.steps
    if fixed:
        lead = 0.0
        for step in steps:
            if _anchored(step):
                start = float(arrival[step.calls[0].engine_index]) - NETWORK_S - step.gap_s - lead
                break
            lead += step.gap_s + step.duration_s
    cursor = start
    overlaps = 0
    for i, step in enumerate(steps):
        s = cursor + step.gap_s
        call_times: list[tuple[float, float]] = []
        if step.kind is StepKind.LLM:
            anchored = _anchored(step)
            if anchored and wanted is not None:
                for j, call in enumerate(step.calls):
                    wanted[call.engine_index] = s + j * FANOUT_STAGGER_S + NETWORK_S
            if anchored and fixed:
                s_fixed = float(arrival[step.calls[0].engine_index]) - NETWORK_S
                if s_fixed < cursor - 1e-9:
                    overlaps += 1
                s = s_fixed
            e = s
            for j, call in enumerate(step.calls):
                k = call.engine_index
                if k >= 0:
                    c_start = float(arrival[k]) - NETWORK_S if fixed else s + j * FANOUT_STAGGER_S
                    if finish is not None:
                        engine_end = float(finish[k])
                    else:
                        assert estimate is not None
                        engine_end = c_start + NETWORK_S + float(estimate[k])
                    c_end = engine_end + NETWORK_S
                else:
                    c_start = s + j * FANOUT_STAGGER_S
                    c_end = c_start + call.hosted_duration_s
                call_times.append((c_start, c_end))
                e = max(e, c_end)
        else:
            e = s + step.duration_s
            nxt = steps[i + 1] if i + 1 < len(steps) else None
            if fixed and nxt is not None and _anchored(nxt):
                due = float(arrival[nxt.calls[0].engine_index]) - NETWORK_S - nxt.gap_s
                e = max(s + _MIN_STEP_S, due)
        if visit is not None:
            visit(step, s, e, call_times)
        cursor = e
    return start, cursor + attempt.post_s, overlaps


def schedule_plan(
    plan: TaskPlan,
    arrival: np.ndarray,
    finish: np.ndarray | None,
    estimate: np.ndarray | None = None,
    *,
    fixed: bool,
) -> Schedule:
    """Lay out every task (see walk_attempt). A retry follows the failed attempt after its
    backoff; a conversation's turn follows the previous turn after the user's think time.
    With fixed=True, an attempt that (anchored on its engine calls) starts before what it
    follows has ended counts as an overlap."""
    n_tasks = len(plan.tasks)
    task_start = np.empty(n_tasks)
    task_end = np.empty(n_tasks)
    attempt_start = np.empty(plan.num_attempts)
    attempt_end = np.empty(plan.num_attempts)
    wanted = np.array(arrival, dtype=float, copy=True)
    overlaps = 0
    for ti, task in enumerate(plan.tasks):
        if task.previous_turn is None:
            after = -np.inf
            t = task.start_s
        else:
            after = float(task_end[task.previous_turn])
            t = after + task.think_s
        end = t
        for attempt in task.attempts:
            planned = t if attempt.number == 1 else end + attempt.delay_s
            if attempt.number > 1:
                after = end
            a_start, end, o = walk_attempt(
                attempt, planned, arrival, finish, estimate, fixed=fixed, wanted=wanted
            )
            overlaps += o + (1 if fixed and a_start < after - 1e-9 else 0)
            attempt_start[attempt.index] = a_start
            attempt_end[attempt.index] = end
            if attempt.number == 1:
                task_start[ti] = a_start
        task_end[ti] = end
    return Schedule(task_start, task_end, attempt_start, attempt_end, wanted, overlaps)


def _engine_specs(plan: TaskPlan) -> list[RequestSpec]:
    """Each engine call as the app sends it (arrival 0; placed by each pass). Its context is
    what vLLM's API server keeps from the HTTP request: the W3C trace headers, which make the
    engine's span a child of the app's CLIENT span, and the sampling parameters it traces."""
    trace_of: list[bytes] = [b""] * len(plan.engine_calls)
    for task in plan.tasks:
        for attempt in task.attempts:
            for step in attempt.steps:
                for call in step.calls:
                    if call.engine_index >= 0:
                        trace_of[call.engine_index] = attempt.trace_id
    return [
        RequestSpec(
            request_id=call.request_id,
            arrival_s=0.0,
            prompt=call.prompt,
            output_tokens=call.output_tokens,
            max_tokens=call.max_tokens,
            context={
                "traceparent": traceparent(trace_of[call.engine_index], call.span_id),
                "max_tokens": call.max_tokens,
                "temperature": call.temperature,
            },
        )
        for call in plan.engine_calls
    ]


def simulate_plan(
    plan: TaskPlan,
    deployments: Mapping[str, Deployment],
    *,
    max_passes: int = 2,
    tolerance_s: float = 0.001,
) -> SimulatedPlan:
    """Serve the plan's engine calls on the deployments until the app timeline and the
    engines' timings agree (see the module docstring)."""
    if max_passes < 1:
        raise ValueError("max_passes must be >= 1")
    calls = plan.engine_calls
    n = len(calls)
    estimate = np.array(
        [deployments[c.deployment].estimate_s(c) for c in calls],
        dtype=float,  # type: ignore[index]
    )
    first = schedule_plan(plan, np.zeros(n), None, estimate, fixed=False)
    arrival = first.wanted_arrival
    results: dict[str, SimulationResult] = {}
    finish = np.empty(n)
    records: list[RequestRecord | None] = [None] * n
    passes = 0
    drift = float("inf")
    index = {c.request_id: c.engine_index for c in calls}
    base = _engine_specs(plan)
    by_deployment = {
        name: [c.engine_index for c in calls if c.deployment == name] for name in deployments
    }
    while True:
        passes += 1
        for name, dep in deployments.items():
            order = sorted(by_deployment[name], key=lambda k: arrival[k])
            specs = [replace(base[k], arrival_s=float(arrival[k])) for k in order]
            result = dep.run(specs)
            results[name] = result
            for rec in result.requests:
                k = index[rec.request_id]
                records[k] = rec
                finish[k] = rec.finished_s
        replan = schedule_plan(plan, arrival, finish, fixed=False)
        drift = float(np.max(np.abs(replan.wanted_arrival - arrival))) if n else 0.0
        if drift <= tolerance_s or passes >= max_passes:
            break
        arrival = replan.wanted_arrival
    schedule = schedule_plan(plan, arrival, finish, fixed=True)
    return SimulatedPlan(
        plan=plan,
        results=results,
        records=tuple(records),  # type: ignore[arg-type]
        arrival=arrival,
        finish=finish,
        schedule=schedule,
        passes=passes,
        max_drift_s=drift,
    )
