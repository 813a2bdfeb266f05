"""Ground truth for the per-request GPU-share estimator, from the serving simulator.

docs/cost-model.md ("Replica cost and its split") estimates each request's GPU-seconds from its
engine span alone: at every instant the replica's GPUs are shared among the requests in prefill
or decode in proportion to their token rates. On a real GPU nobody knows the true split; in the
simulator every engine step's batch is known, so the truth can be computed and the estimator
measured against it (tests/test_estimator_truth.py, bench/estimator_accuracy.py).

**Definition (the "tokens" truth).** An engine step of duration d on a replica of g GPUs uses
d x g GPU-seconds. They are split among the requests in the step's batch in proportion to the
tokens each one processed in that step: a decoding request processes 1 token, a prefilling
request its chunk's tokens (chunked prefill: a long prompt spreads over several steps, next to
the decoders of those steps). A request's true prefill GPU-seconds are the sum of its shares over
the steps in which it was prefilling, its decode GPU-seconds the sum over the steps in which it
was decoding. Recomputation after a preemption is prefill work (as in RequestRecord.gpu_prefill_s;
the estimator, which sees only the span's timestamps, puts it in the decode stage).

**The alternative ("sequences") truth.** Each step's d x g GPU-seconds split equally among the
sequences of its batch, whatever their tokens: what a step costs if its time were set by the
number of sequences (weights, KV reads) rather than by the tokens computed.

Under both, the shares of a step add up to its GPU-seconds, so over a run the requests' shares
add up to the replicas' busy GPU-seconds (up to floating-point rounding), and idle time is
nobody's. A stretch of k identical pure-decode steps (the simulator prices them as one event)
gives each of its n decoders d/n under both truths, exactly what the k steps one by one give.

The simulator reports each step to an optional observer (Cluster.run(step_observer=...);
models/serving/replica.py): (replica, start_s, end_s, steps, [(request id, tokens, phase)]).
GpuShareLedger is such an observer; true_gpu_shares() applies it to recorded steps.
ground_truth_run() simulates a mixed workload on Llama-3.1-8B / H200 replicas and returns the
engine spans it emits (what ingest stores) beside the truth table keyed by those spans' ids.
"""

from __future__ import annotations

import enum
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from models.serving.cluster import Cluster
from models.serving.config import SimulationOptions
from models.serving.records import SimulationResult
from models.serving.replica import StepObserver
from models.serving.request import RequestSpec
from models.serving.scenario import ScenarioConfig
from models.serving.scenario_run import ResolvedEngine, cluster_config, resolve_engine
from models.serving.telemetry import engine_spans

PREFILL = "prefill"
DECODE = "decode"
Work = tuple[str, int, str]  # (request id, tokens processed in the step, PREFILL | DECODE)

# 2026-01-05 09:58:00 UTC: the default run starts two minutes before an hour boundary, so the
# estimator's hourly pieces are exercised.
DEFAULT_EPOCH_NS = 1_767_607_080_000_000_000
HOUR_NS = 3_600_000_000_000
# Size classes of the accuracy report: prompts of at least this many tokens are "long", and
# outputs of at least this many tokens (about the medians of the default workload).
LONG_PROMPT_TOKENS = 1024
LONG_OUTPUT_TOKENS = 128


class Split(enum.Enum):
    """How a step's GPU-seconds are split among its batch (see the module docstring)."""

    TOKENS = "tokens"
    SEQUENCES = "sequences"


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One engine step, or a stretch of `steps` identical pure-decode steps, as observed."""

    replica: int
    start_s: float
    end_s: float
    steps: int
    work: tuple[Work, ...]


class StepRecorder:
    """A step observer that keeps every step (for small runs and hand-checked cases)."""

    def __init__(self) -> None:
        self.steps: list[StepRecord] = []

    def __call__(
        self, replica: int, start_s: float, end_s: float, steps: int, work: Sequence[Work]
    ) -> None:
        self.steps.append(StepRecord(replica, start_s, end_s, steps, tuple(work)))


@dataclass(frozen=True, slots=True)
class TrueShare:
    """A request's true GPU-seconds under one split."""

    replica: int
    prefill_gpu_s: float
    decode_gpu_s: float

    @property
    def gpu_s(self) -> float:
        return self.prefill_gpu_s + self.decode_gpu_s


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What the batches of a run looked like (so a report can say what it measured)."""

    events: int  # steps or stretches observed
    engine_steps: int
    busy_s: float  # replica-seconds in steps (not multiplied by GPUs)
    mean_batch: float  # sequences per step, weighted by step time
    p10_batch: float
    p50_batch: float
    p90_batch: float
    max_batch: int
    mixed_share: float  # share of busy time in steps with prefill chunks beside decoders
    prefill_only_share: float  # ... with prefill chunks and no decoder
    decode_only_share: float


class GpuShareLedger:
    """A step observer that accumulates every request's true shares under both splits, in
    O(batch) per step, without keeping the steps. Shares are in replica-seconds; shares()
    multiplies by the replica's GPU count."""

    def __init__(self) -> None:
        # request id -> [replica, prefill_tok, decode_tok, prefill_seq, decode_seq]
        self._acc: dict[str, list] = {}
        self._busy: dict[int, float] = {}
        self._steps = 0
        # per event: duration, sequences, and kind (1 prefill present, 2 decode present)
        self._durations = array("d")
        self._batch = array("q")
        self._kind = array("b")

    def __call__(
        self, replica: int, start_s: float, end_s: float, steps: int, work: Sequence[Work]
    ) -> None:
        duration = end_s - start_s
        if not duration > 0.0 or steps < 1 or not work:
            raise ValueError(f"replica {replica}: bad step {start_s}..{end_s} x{steps} {work!r}")
        tokens = 0
        for _, t, _ in work:
            tokens += t
        per_token = duration / tokens
        per_seq = duration / len(work)
        acc = self._acc
        kind = 0
        for request_id, t, phase in work:
            row = acc.get(request_id)
            if row is None:
                row = acc[request_id] = [replica, 0.0, 0.0, 0.0, 0.0]
            elif row[0] != replica:
                raise ValueError(f"request {request_id!r} ran on replicas {row[0]} and {replica}")
            if phase == DECODE:
                row[2] += per_token * t
                row[4] += per_seq
                kind |= 2
            elif phase == PREFILL:
                row[1] += per_token * t
                row[3] += per_seq
                kind |= 1
            else:
                raise ValueError(f"request {request_id!r}: unknown phase {phase!r}")
        self._busy[replica] = self._busy.get(replica, 0.0) + duration
        self._steps += steps
        self._durations.append(duration)
        self._batch.append(len(work))
        self._kind.append(kind)

    def shares(
        self, split: Split = Split.TOKENS, gpus_per_replica: int | Mapping[int, int] = 1
    ) -> dict[str, TrueShare]:
        """request id -> its true GPU-seconds under `split`."""
        i = 1 if split is Split.TOKENS else 3
        out = {}
        for request_id, row in self._acc.items():
            g = _gpus(gpus_per_replica, row[0])
            out[request_id] = TrueShare(row[0], row[i] * g, row[i + 1] * g)
        return out

    def busy_gpu_s(self, gpus_per_replica: int | Mapping[int, int] = 1) -> dict[int, float]:
        """replica -> GPU-seconds spent in steps."""
        return {r: s * _gpus(gpus_per_replica, r) for r, s in sorted(self._busy.items())}

    def batch_stats(self) -> BatchStats:
        d = np.frombuffer(self._durations, dtype=np.float64)
        n = np.frombuffer(self._batch, dtype=np.int64)
        k = np.frombuffer(self._kind, dtype=np.int8)
        total = float(d.sum())
        if not len(d):
            return BatchStats(0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 0.0)
        order = np.argsort(n, kind="stable")
        cum = np.cumsum(d[order]) / total

        def quantile(q: float) -> float:
            return float(n[order][min(int(np.searchsorted(cum, q)), len(n) - 1)])

        return BatchStats(
            events=len(d),
            engine_steps=self._steps,
            busy_s=total,
            mean_batch=float((n * d).sum() / total),
            p10_batch=quantile(0.1),
            p50_batch=quantile(0.5),
            p90_batch=quantile(0.9),
            max_batch=int(n.max()),
            mixed_share=float(d[k == 3].sum() / total),
            prefill_only_share=float(d[k == 1].sum() / total),
            decode_only_share=float(d[k == 2].sum() / total),
        )


def _gpus(gpus_per_replica: int | Mapping[int, int], replica: int) -> int:
    if isinstance(gpus_per_replica, int):
        return gpus_per_replica
    return gpus_per_replica.get(replica, 1)


def true_gpu_shares(
    steps: Iterable[StepRecord],
    *,
    split: Split = Split.TOKENS,
    gpus_per_replica: int | Mapping[int, int] = 1,
) -> dict[str, TrueShare]:
    """request id -> true prefill and decode GPU-seconds over `steps` (module docstring)."""
    ledger = GpuShareLedger()
    for s in steps:
        ledger(s.replica, s.start_s, s.end_s, s.steps, s.work)
    return ledger.shares(split, gpus_per_replica)


# --- a ground-truth run -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroundTruthScenario:
    """A small mixed workload on Llama-3.1-8B replicas: prompts and outputs log-uniform in
    their ranges, Poisson arrivals; a share of the prompts starts with one of a few shared
    system prompts (so the spans carry prefix-cache hits)."""

    num_requests: int = 3000
    replicas: int = 2
    request_rate: float = 20.0  # requests per second, whole cluster
    prompt_tokens: tuple[int, int] = (100, 8000)
    output_tokens: tuple[int, int] = (20, 800)
    shared_prefix_share: float = 0.3
    shared_prefix_tokens: int = 512
    num_shared_prefixes: int = 4
    model: str = "llama-3.1-8b"
    gpu: str = "h200"
    tensor_parallel_size: int = 1
    router: str = "least_outstanding_requests"
    max_num_batched_tokens: int | None = None  # vLLM's default (8192 on an H200)
    epoch_ns: int = DEFAULT_EPOCH_NS

    def __post_init__(self) -> None:
        lo, hi = self.prompt_tokens
        if not 1 <= lo <= hi:
            raise ValueError(f"prompt_tokens must be 1 <= low <= high, got {self.prompt_tokens}")
        lo, hi = self.output_tokens
        if not 1 <= lo <= hi:
            raise ValueError(f"output_tokens must be 1 <= low <= high, got {self.output_tokens}")
        if self.num_requests < 1 or self.replicas < 1 or not self.request_rate > 0:
            raise ValueError("num_requests, replicas and request_rate must be positive")
        if not 0.0 <= self.shared_prefix_share <= 1.0:
            raise ValueError("shared_prefix_share must be in [0, 1]")


def replica_name(index: int) -> str:
    """service.instance.id of a simulated replica in a ground-truth run."""
    return f"replica-{index}"


def size_class(prompt_tokens: int, output_tokens: int) -> str:
    """'short-prompt/long-output' etc. (LONG_PROMPT_TOKENS, LONG_OUTPUT_TOKENS)."""
    p = "long" if prompt_tokens >= LONG_PROMPT_TOKENS else "short"
    o = "long" if output_tokens >= LONG_OUTPUT_TOKENS else "short"
    return f"{p}-prompt/{o}-output"


def make_requests(scenario: GroundTruthScenario, rng: np.random.Generator) -> list[RequestSpec]:
    """The scenario's requests, drawn from `rng` alone."""
    n = scenario.num_requests
    gaps = rng.exponential(1.0 / scenario.request_rate, size=n)
    times = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    prompts = _log_uniform(rng, scenario.prompt_tokens, n)
    outputs = _log_uniform(rng, scenario.output_tokens, n)
    shared = rng.random(n) < scenario.shared_prefix_share
    which = rng.integers(0, scenario.num_shared_prefixes, size=n)
    pre = scenario.shared_prefix_tokens
    specs = []
    for i in range(n):
        request_id = f"gt-{i}"
        total = int(prompts[i])
        if shared[i] and pre and total > pre:
            prompt: tuple[tuple[str, int], ...] = (
                (f"system-{int(which[i])}", pre),
                (request_id, total - pre),
            )
        else:
            prompt = ((request_id, total),)
        out = int(outputs[i])
        specs.append(
            RequestSpec(
                request_id=request_id,
                arrival_s=float(times[i]),
                prompt=prompt,
                output_tokens=out,
                max_tokens=out,
                context={"max_tokens": out},
            )
        )
    return specs


def _log_uniform(rng: np.random.Generator, bounds: tuple[int, int], n: int) -> np.ndarray:
    lo, hi = bounds
    x = np.exp(rng.uniform(math.log(lo), math.log(hi + 1), size=n))
    return np.clip(np.floor(x), lo, hi).astype(np.int64)


@dataclass(frozen=True, slots=True)
class GroundTruthRun:
    """A simulated run, what it emitted, and the truth.

    exports: one OTLP export request per replica (vLLM's `llm_request` spans, resource
        service.instance.id = replica_name(i), cached tokens included); serialize and ingest.
    truth: one row per traced request (the engine span's trace_id, span_id as stored: lowercase
        hex), with both splits (prefill_gpu_s/decode_gpu_s: tokens; *_seq: sequences).
    busy_gpu_s: replica name -> GPU-seconds spent in steps (= the truth's total, either split).
    from_ns, to_ns: whole hours covering every span.
    """

    scenario: GroundTruthScenario
    seed: int
    result: SimulationResult
    exports: tuple[ExportTraceServiceRequest, ...]
    truth: pa.Table
    busy_gpu_s: dict[str, float]
    gpus_per_replica: int
    batch: BatchStats
    from_ns: int
    to_ns: int
    untraced_gpu_s: float  # GPU-seconds of requests without a span (aborted; none by default)

    def otlp_bodies(self) -> list[bytes]:
        """The exports as OTLP/HTTP protobuf bodies."""
        return [e.SerializeToString() for e in self.exports]


TRUTH_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("request_id", pa.string()),
        ("replica", pa.string()),
        ("size_class", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("cached_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("num_preemptions", pa.int64()),
        ("prefill_gpu_s", pa.float64()),
        ("decode_gpu_s", pa.float64()),
        ("prefill_gpu_s_seq", pa.float64()),
        ("decode_gpu_s_seq", pa.float64()),
    ]
)


def simulate(
    scenario: GroundTruthScenario,
    seed: int,
    step_observer: StepObserver | None,
    options: SimulationOptions | None = None,
) -> tuple[SimulationResult, ResolvedEngine]:
    """Run the scenario's requests (drawn from numpy's Generator(seed)) through the simulator,
    reporting every step to `step_observer`."""
    engine, predictor = resolve_engine(
        ScenarioConfig(
            model=scenario.model,
            gpu=scenario.gpu,
            tensor_parallel_size=scenario.tensor_parallel_size,
            replicas=scenario.replicas,
            router=scenario.router,
            max_num_batched_tokens=scenario.max_num_batched_tokens,
        )
    )
    config = cluster_config(
        ScenarioConfig(replicas=scenario.replicas, router=scenario.router), engine
    )
    specs = make_requests(scenario, np.random.default_rng(seed))
    result = Cluster(config, predictor, options).run(specs, step_observer=step_observer)
    return result, engine


def ground_truth_run(scenario: GroundTruthScenario, seed: int) -> GroundTruthRun:
    """Simulate `scenario` with requests drawn from numpy's Generator(seed) and return the
    engine spans beside the true per-request GPU-seconds. Deterministic."""
    ledger = GpuShareLedger()
    result, engine = simulate(scenario, seed, ledger)
    gpus = engine.tensor_parallel_size
    tok, seq = ledger.shares(Split.TOKENS, gpus), ledger.shares(Split.SEQUENCES, gpus)

    exports = []
    ids: dict[str, tuple[str, str]] = {}
    for i in range(scenario.replicas):
        export = engine_spans(
            [r for r in result.requests if r.replica == i],
            epoch_ns=scenario.epoch_ns,
            resource={"service.instance.id": replica_name(i)},
            include_branch_attributes=True,  # gen_ai.usage.cached_tokens for the weights
        )
        for rs in export.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    rid = next(
                        a.value.string_value
                        for a in span.attributes
                        if a.key == "gen_ai.request.id"
                    )
                    ids[rid] = (span.trace_id.hex(), span.span_id.hex())
        exports.append(export)

    rows: dict[str, list] = {name: [] for name in TRUTH_SCHEMA.names}
    untraced = 0.0
    for r in result.requests:
        t = tok.get(r.request_id)
        if t is None:
            continue  # never computed a token (rejected)
        if r.request_id not in ids:
            untraced += t.gpu_s
            continue
        q = seq[r.request_id]
        trace_id, span_id = ids[r.request_id]
        for name, value in (
            ("trace_id", trace_id),
            ("span_id", span_id),
            ("request_id", r.request_id),
            ("replica", replica_name(r.replica)),
            ("size_class", size_class(r.prompt_tokens, r.output_tokens)),
            ("prompt_tokens", r.prompt_tokens),
            ("cached_tokens", r.cached_tokens),
            ("output_tokens", r.output_tokens),
            ("num_preemptions", r.num_preemptions),
            ("prefill_gpu_s", t.prefill_gpu_s),
            ("decode_gpu_s", t.decode_gpu_s),
            ("prefill_gpu_s_seq", q.prefill_gpu_s),
            ("decode_gpu_s_seq", q.decode_gpu_s),
        ):
            rows[name].append(value)
    truth = pa.table(rows, schema=TRUTH_SCHEMA)
    first_ns = scenario.epoch_ns + round(result.start_s * 1e9)
    last_ns = scenario.epoch_ns + round(result.end_s * 1e9)
    return GroundTruthRun(
        scenario=scenario,
        seed=seed,
        result=result,
        exports=tuple(exports),
        truth=truth,
        busy_gpu_s={replica_name(r): s for r, s in ledger.busy_gpu_s(gpus).items()},
        gpus_per_replica=gpus,
        batch=ledger.batch_stats(),
        from_ns=first_ns // HOUR_NS * HOUR_NS,
        to_ns=-(-(last_ns + 1) // HOUR_NS) * HOUR_NS,
        untraced_gpu_s=untraced,
    )


# --- comparing an estimate with the truth --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorStats:
    """How far per-request estimates are from the truth.

    Relative errors are |estimate - true| / true of each request's total GPU-seconds (prefill +
    decode). misattributed_share = sum |estimate - true| / 2 / sum true: the share of all
    GPU-seconds given to the wrong request (half the absolute differences, since what one request
    gets too much another gets too little when totals agree); stage_misattributed_share does the
    same per (request, stage), so it also counts GPU-seconds put in the wrong stage.
    """

    requests: int
    true_gpu_s: float
    estimated_gpu_s: float
    median_abs_rel_error: float
    p90_abs_rel_error: float
    max_abs_rel_error: float
    misattributed_share: float
    stage_misattributed_share: float
    unmatched_estimates: int  # estimate rows whose span is not in the truth


SpanKey = tuple[str, str]  # (trace_id, span_id) of the engine span


def error_stats(
    truth: Mapping[SpanKey, tuple[float, float]], estimate: Mapping[SpanKey, tuple[float, float]]
) -> ErrorStats:
    """Compare estimate with truth, both key -> (prefill_gpu_s, decode_gpu_s). A request the
    estimate lacks counts as estimated 0."""
    keys = list(truth)
    t = np.array([truth[k] for k in keys], dtype=float).reshape(-1, 2)
    e = np.array([estimate.get(k, (0.0, 0.0)) for k in keys], dtype=float).reshape(-1, 2)
    extra = [k for k in estimate if k not in truth]
    extra_gpu_s = sum(sum(estimate[k]) for k in extra)
    tt, et = t.sum(axis=1), e.sum(axis=1)
    total = float(tt.sum())
    rel = np.abs(et - tt) / np.where(tt > 0, tt, np.nan)
    rel = rel[~np.isnan(rel)]
    return ErrorStats(
        requests=len(keys),
        true_gpu_s=total,
        estimated_gpu_s=float(et.sum()) + extra_gpu_s,
        median_abs_rel_error=float(np.median(rel)) if len(rel) else 0.0,
        p90_abs_rel_error=float(np.quantile(rel, 0.9)) if len(rel) else 0.0,
        max_abs_rel_error=float(rel.max()) if len(rel) else 0.0,
        misattributed_share=float((np.abs(et - tt).sum() + extra_gpu_s) / 2 / total),
        stage_misattributed_share=float((np.abs(e - t).sum() + extra_gpu_s) / 2 / total),
        unmatched_estimates=len(extra),
    )


def truth_by_span(
    truth: pa.Table, split: Split = Split.TOKENS, where: Sequence[bool] | None = None
) -> dict[SpanKey, tuple[float, float]]:
    """(trace_id, span_id) -> (prefill_gpu_s, decode_gpu_s) of the truth table under `split`,
    optionally only the rows where `where` is true."""
    suffix = "" if split is Split.TOKENS else "_seq"
    cols = [
        truth.column(c).to_pylist()
        for c in ("trace_id", "span_id", f"prefill_gpu_s{suffix}", f"decode_gpu_s{suffix}")
    ]
    out = {}
    for i, (trace_id, span_id, p, d) in enumerate(zip(*cols, strict=True)):
        if where is None or where[i]:
            out[(trace_id, span_id)] = (p, d)
    return out


def estimate_by_span(estimate: pa.Table) -> dict[SpanKey, tuple[float, float]]:
    """(trace_id, span_id) -> (prefill_gpu_s, decode_gpu_s) of an estimator's output, summing
    rows of the same span (an estimator may return one row per request and hour)."""
    out: dict[SpanKey, tuple[float, float]] = {}
    cols = [
        estimate.column(c).to_pylist()
        for c in ("trace_id", "span_id", "prefill_gpu_s", "decode_gpu_s")
    ]
    for trace_id, span_id, p, d in zip(*cols, strict=True):
        p0, d0 = out.get((trace_id, span_id), (0.0, 0.0))
        out[(trace_id, span_id)] = (p0 + (p or 0.0), d0 + (d or 0.0))
    return out


# --- the estimator of docs/cost-model.md, restated -----------------------------------------------

SPAN_COLUMNS = (
    "trace_id",
    "span_id",
    "service_instance_id",
    "start_ns",
    "end_ns",
    "latency_queue_s",
    "latency_ttft_s",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
)


def reference_estimate(
    spans: pa.Table, gpus_per_replica: Mapping[str, int] | None = None
) -> pa.Table:
    """docs/cost-model.md's GPU-share estimator in numpy, from engine-span rows (SPAN_COLUMNS of
    the `spans` table): a reference for the SQL one (ledger/allocation.py) and for measuring
    the formula itself. Returns trace_id, span_id, replica, prefill_gpu_s, decode_gpu_s.

    Each request is active in prefill on [start + queue, start + ttft) with weight
    max(input - cached, 1) / length, and in decode on [start + ttft, end) with weight
    max(output - 1, 1) / length; at every instant the replica's GPUs are split in proportion to
    the weights of the active requests. Times are ns relative to the replica's first span."""
    gpus_per_replica = gpus_per_replica or {}
    col = {c: spans.column(c).to_numpy(zero_copy_only=False) for c in SPAN_COLUMNS}
    replicas = col["service_instance_id"].astype(str)
    prefill = np.zeros(len(replicas))
    decode = np.zeros(len(replicas))
    for name in np.unique(replicas):
        idx = np.flatnonzero(replicas == name)
        start = col["start_ns"][idx].astype(np.int64)
        base = int(start.min())
        start = start - base
        sched = start + np.round(col["latency_queue_s"][idx].astype(float) * 1e9).astype(np.int64)
        first = start + np.round(col["latency_ttft_s"][idx].astype(float) * 1e9).astype(np.int64)
        end = col["end_ns"][idx].astype(np.int64) - base
        cached = np.nan_to_num(col["cached_input_tokens"][idx].astype(float))
        w_pre = np.maximum(col["input_tokens"][idx].astype(float) - cached, 1.0)
        w_dec = np.maximum(col["output_tokens"][idx].astype(float) - 1.0, 1.0)
        # intervals: prefill then decode of each request
        a = np.concatenate((sched, first))
        b = np.concatenate((first, end))
        tokens = np.concatenate((w_pre, w_dec))
        length = (b - a).astype(float)
        w = np.where(length > 0, tokens / np.where(length > 0, length, 1.0), 0.0)
        live = length > 0
        points = np.unique(np.concatenate((a[live], b[live])))
        # W and the number of active intervals on each segment [points[j], points[j+1])
        ia = np.searchsorted(points, a[live])
        ib = np.searchsorted(points, b[live])
        dw = np.zeros(len(points))
        dn = np.zeros(len(points), dtype=np.int64)
        np.add.at(dw, ia, w[live])
        np.add.at(dw, ib, -w[live])
        np.add.at(dn, ia, 1)
        np.add.at(dn, ib, -1)
        weight = np.cumsum(dw)[:-1]
        active = np.cumsum(dn)[:-1] > 0
        seg = np.diff(points).astype(float) * 1e-9  # seconds
        g = gpus_per_replica.get(str(name), 1)
        inc = np.where(active, g * seg / np.where(active, weight, 1.0), 0.0)
        big_f = np.concatenate(([0.0], np.cumsum(inc)))
        share = np.zeros(len(a))
        share[live] = w[live] * (big_f[ib] - big_f[ia])
        n = len(idx)
        prefill[idx] = share[:n]
        decode[idx] = share[n:]
    return pa.table(
        {
            "trace_id": spans.column("trace_id"),
            "span_id": spans.column("span_id"),
            "replica": pa.array(replicas, pa.string()),
            "prefill_gpu_s": pa.array(prefill),
            "decode_gpu_s": pa.array(decode),
        }
    )
