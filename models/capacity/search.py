"""Simulator-verified capacity (issue #13): the knee of a candidate (the highest request rate
one replica serves within the pool's SLO) by bracketing and bisection, and the fewest replicas
that hold the pool's peak, each answer checked by simulating it. analytic.py screens the whole
candidate space in an instant; this module verifies the best of it with the serving simulator
(models/serving), so the recommendation rests on simulated runs, not a formula alone.

Every point is one run of the pool's own traffic (pools.pool_requests: its apps' joint
length samples, prefixes and burstiness) at one rate. The search keeps the seed and the number
of requests fixed while it moves the rate (common random numbers: the same draws, only the
gaps scaled), so the SLO check is near-monotone in the rate and in the replica count, and a
bisection finds the crossing a dense sweep would (bench/capacity_knee.py measures it).

    knee, curve = find_knee(pool, candidate, guess=screen.knee_rate)
    replicas, at_peak = fewest_replicas(pool, candidate, peak_rate, knee)
    verify(pool, candidate, peak_rate)  # both, as one Verified

docs/capacity-planner.md explains the method and its measured accuracy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from functools import lru_cache
from multiprocessing import get_context
from typing import Any

from inferledger.core.errors import BadInputError
from models.capacity.pools import pool_requests, pool_stats
from models.capacity.types import Candidate, Pool, Slo
from models.serving.cluster import Cluster
from models.serving.config import RouterPolicy, SimulationOptions
from models.serving.records import SimulationResult
from models.serving.request import FinishReason, RequestSpec
from models.serving.scenario import ScenarioConfig
from models.serving.scenario_run import ResolvedEngine, cluster_config, resolve_engine
from models.serving.summary import summarize
from models.steptime import RooflinePredictor

Cancelled = Callable[[], bool]

#: share of the arrival span left out at each end: start-up (an empty engine) and drain
WINDOW_EDGE = 0.1
#: requests per replica: enough for the busiest replica to turn its batch over this many times
TURNOVERS = 8
MIN_REQUESTS_PER_REPLICA = 400
MAX_REQUESTS_PER_REPLICA = 3000
#: the most requests one run simulates, however many replicas (each keeps >= ~1 turnover)
MAX_REQUESTS = 24_000
#: after the last arrival the run goes on this long at most (and >= MIN_TAIL_S); requests
#: still in flight then are aborted and count as failed: an overloaded point stays cheap
TAIL_SLO_MULTIPLE = 4.0
MIN_TAIL_S = 60.0
MAX_SAMPLES = 2000
#: the knee search gives up below guess / MAX_DROP (the SLO cannot be met at any load)
MAX_DROP = 1000.0
MAX_DOUBLINGS = 24
#: other draws of the traffic an answer of fewest_replicas must also meet the SLO on
CONFIRM_SEEDS = 1
#: a steady state finishes at least this share of what is sent (keeps_up)
KEEP_UP_SHARE = 0.9
#: ... and its wait does not grow through the window by more than this times its start
QUEUE_GROWTH = 2.0
QUEUE_GROWTH_MIN_S = 1.0
#: extra points of the latency-vs-load curve, as multiples of the knee
CURVE_MULTIPLES = (0.25, 0.5, 0.75, 1.1, 1.2, 1.3)


class PlanCancelled(Exception):
    """The user cancelled the plan; raised between simulations."""


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One simulated run: `rate` req/s offered to `replicas` replicas, measured over its
    steady window. Latencies in seconds (p50 / p95 of the requests sent in the window; ITL
    over every token gap in it); throughput_rps / output_tokens_per_s: finished in the window;
    kv_peak: the fullest any replica's KV cache got (0..1); preemptions: whole run; failed:
    requests sent in the window that failed (rejected, or still unfinished when the run was
    cut off: overload); meets_slo: every p95 target of the pool met, none failed, and the
    replicas keep up with the load (keeps_up);
    goodput_rps: requests meeting every target (TTFT, TPOT against the ITL target, E2E) per
    second of the window."""

    rate: float
    replicas: int
    ttft_p50_s: float
    ttft_p95_s: float
    itl_p50_s: float
    itl_p95_s: float
    e2e_p50_s: float
    e2e_p95_s: float
    throughput_rps: float
    output_tokens_per_s: float
    kv_peak: float
    preemptions: int
    failed: int
    meets_slo: bool
    goodput_rps: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Verified:
    """A candidate checked on the simulator: its knee (req/s per replica; 0 when no load meets
    the SLO), the latency-vs-load curve (sorted by rate), the fewest replicas meeting the SLO
    at the peak (0 when none can) and that run (at_peak; when replicas is 0, the failing run
    of one replica at the peak), and how many simulations it took."""

    candidate: Candidate
    knee_rate: float
    curve: tuple[LoadPoint, ...]
    replicas: int
    at_peak: LoadPoint
    simulations: int


# --- one simulated point ----------------------------------------------------------------------


def _longest_sequence(pool: Pool) -> int:
    return max(p + o for app in pool.apps for p, o in app.lengths)


@lru_cache(maxsize=64)
def _engine(candidate: Candidate, max_model_len: int) -> tuple[ResolvedEngine, RooflinePredictor]:
    """The candidate's engine and step-time predictor (cached: building the predictor's tables
    costs more than a short run, and a search runs one candidate many times)."""
    scenario = _scenario(candidate, 1, max_model_len)
    return resolve_engine(scenario)


def _scenario(candidate: Candidate, replicas: int, max_model_len: int) -> ScenarioConfig:
    # max_model_len: the pool's longest request, so the engine starts on any GPU whose KV cache
    # holds it (vLLM's default, the model's whole context, would refuse small GPUs).
    return ScenarioConfig(
        model=candidate.model,
        gpu=candidate.gpu,
        dtype=candidate.dtype,
        kv_cache_dtype=candidate.kv_cache_dtype,
        tensor_parallel_size=candidate.tensor_parallel_size,
        replicas=replicas,
        router=RouterPolicy.LEAST_OUTSTANDING_REQUESTS.value,
        max_num_seqs=candidate.max_num_seqs,
        max_num_batched_tokens=candidate.max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_prefix_caching=candidate.enable_prefix_caching,
    )


def default_requests(pool: Pool, candidate: Candidate, replicas: int = 1) -> int:
    """Requests one run simulates: per replica, TURNOVERS times the most requests it can hold
    at once (max_num_seqs, or what its KV cache holds at the pool's mean context), within
    [MIN, MAX]_REQUESTS_PER_REPLICA; times the replicas, at most MAX_REQUESTS. It does not
    depend on the rate, so a search compares rates on the same draws."""
    engine, _ = _engine(candidate, _longest_sequence(pool))
    held = min(engine.max_num_seqs, engine.kv_cache_tokens / max(pool_stats(pool).mean_context, 1))
    per_replica = min(max(TURNOVERS * held, MIN_REQUESTS_PER_REPLICA), MAX_REQUESTS_PER_REPLICA)
    return int(min(per_replica * max(replicas, 1), MAX_REQUESTS))


def _tail_s(pool: Pool) -> float:
    """How long a run may go on after its last arrival."""
    slo = pool.slo
    if slo.e2e_p95_s is not None:
        bound = slo.e2e_p95_s
    else:
        longest_out = max(o for app in pool.apps for _, o in app.lengths)
        bound = (slo.ttft_p95_s or 0.0) + longest_out * (slo.itl_p95_s or 0.1)
    return max(MIN_TAIL_S, TAIL_SLO_MULTIPLE * bound)


def simulate_point(
    pool: Pool,
    candidate: Candidate,
    rate: float,
    *,
    replicas: int = 1,
    seed: int = 0,
    num_requests: int | None = None,
) -> LoadPoint:
    """Simulate the pool's traffic at `rate` req/s in all, on `replicas` replicas of the
    candidate behind a least-outstanding-requests router; measured over the steady window
    (WINDOW_EDGE of the arrival span left out at each end). num_requests: default
    default_requests(pool, candidate, replicas)."""
    if not (rate > 0 and math.isfinite(rate)):
        raise BadInputError(f"rate must be a finite number > 0 req/s, got {rate}")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise BadInputError(f"replicas must be an integer >= 1, got {replicas!r}")
    n = num_requests if num_requests is not None else default_requests(pool, candidate, replicas)
    if n < 20:
        raise BadInputError(f"num_requests must be >= 20, got {n}")
    specs = pool_requests(pool, rate, n, seed=seed)
    return _run(pool, candidate, specs, rate, replicas)


def _run(
    pool: Pool, candidate: Candidate, specs: Sequence[RequestSpec], rate: float, replicas: int
) -> LoadPoint:
    max_len = _longest_sequence(pool)
    engine, predictor = _engine(candidate, max_len)
    config = cluster_config(_scenario(candidate, replicas, max_len), engine)
    first, last = specs[0].arrival_s, specs[-1].arrival_s
    horizon = last + _tail_s(pool)
    # gauges are sampled on a grid: keep it to ~MAX_SAMPLES points however slow the traffic
    interval = max(1.0, (horizon - first) / MAX_SAMPLES)
    options = SimulationOptions(sample_interval_s=interval, horizon_s=horizon)
    result = Cluster(config, predictor, options).run(specs)
    return _measure(result, pool.slo, rate, replicas, first, last)


def _measure(
    result: SimulationResult, slo: Slo, rate: float, replicas: int, first: float, last: float
) -> LoadPoint:
    span = last - first
    run_end = max(r.finished_s for r in result.requests) - first
    warmup = WINDOW_EDGE * span
    cooldown = max(run_end - (1 - WINDOW_EDGE) * span, 0.0)
    s = summarize(result, percentiles=(50, 95), warmup_s=warmup, cooldown_s=cooldown)
    lo, hi = first + warmup, first + (1 - WINDOW_EDGE) * span
    sent = [r for r in result.requests if lo <= r.arrival_s <= hi]
    # An abort here is the horizon cutting an overloaded run short: a request not served.
    failed = sum(1 for r in sent if r.finish_reason in (FinishReason.ABORT, FinishReason.ERROR))
    ttft_p95 = float(s["p95_ttft_ms"]) / 1000.0
    itl_p95 = float(s["p95_itl_ms"]) / 1000.0
    e2e_p95 = float(s["p95_e2el_ms"]) / 1000.0
    meets = (
        failed == 0
        and bool(sent)
        and keeps_up(sent, float(s["request_throughput"]), hi - lo)
        and _within(ttft_p95, slo.ttft_p95_s)
        and _within(itl_p95, slo.itl_p95_s)
        and _within(e2e_p95, slo.e2e_p95_s)
    )
    good = sum(1 for r in sent if _request_meets(r, slo))
    duration = float(s["duration"])
    return LoadPoint(
        rate=float(rate),
        replicas=replicas,
        ttft_p50_s=float(s["p50_ttft_ms"]) / 1000.0,
        ttft_p95_s=ttft_p95,
        itl_p50_s=float(s["p50_itl_ms"]) / 1000.0,
        itl_p95_s=itl_p95,
        e2e_p50_s=float(s["p50_e2el_ms"]) / 1000.0,
        e2e_p95_s=e2e_p95,
        throughput_rps=float(s["request_throughput"]),
        output_tokens_per_s=float(s["output_throughput"]),
        kv_peak=float(s["max_kv_cache_usage"]),
        preemptions=int(s["num_preemptions"]),
        failed=failed,
        meets_slo=meets,
        goodput_rps=good / duration if duration > 0 else 0.0,
    )


def keeps_up(sent: Sequence[Any], throughput_rps: float, window_s: float) -> bool:
    """Whether the replicas keep up with the offered load over the window, as a steady state
    must: a finite run of an overloaded engine still ends, so its percentiles alone can pass a
    loose target (a batch class's end-to-end only) while its queue grows without bound. Two
    signs of overload, either one enough: requests finish in the window at under
    KEEP_UP_SHARE of the rate they are sent in it; or the wait grows through the window -- the
    mean TTFT of its last third exceeds its first third's by more than QUEUE_GROWTH times that
    (and by more than QUEUE_GROWTH_MIN_S), where a stable queue's wait only fluctuates."""
    if window_s <= 0 or len(sent) < 6:
        return True
    if throughput_rps < KEEP_UP_SHARE * len(sent) / window_s:
        return False
    ordered = sorted(sent, key=lambda r: r.arrival_s)
    third = len(ordered) // 3
    early = sum(r.ttft_s or 0.0 for r in ordered[:third]) / third
    late = sum(r.ttft_s or 0.0 for r in ordered[-third:]) / third
    return late - early <= max(QUEUE_GROWTH * early, QUEUE_GROWTH_MIN_S)


def _within(value: float, target: float | None) -> bool:
    return target is None or value <= target


def _request_meets(r: Any, slo: Slo) -> bool:
    if not r.succeeded:
        return False
    tpot = r.tpot_s
    return (
        _within(r.ttft_s, slo.ttft_p95_s)
        and _within(r.e2e_s, slo.e2e_p95_s)
        and (tpot is None or _within(tpot, slo.itl_p95_s))
    )


# --- the knee ---------------------------------------------------------------------------------


def _check(cancelled: Cancelled | None) -> None:
    if cancelled is not None and cancelled():
        raise PlanCancelled("the plan was cancelled")


class _Prober:
    """Simulates one candidate at rates, once each, on the same draws; remembers every point."""

    def __init__(
        self,
        pool: Pool,
        candidate: Candidate,
        seed: int,
        num_requests: int,
        cancelled: Cancelled | None,
    ) -> None:
        self.pool, self.candidate, self.seed = pool, candidate, seed
        self.num_requests, self.cancelled = num_requests, cancelled
        self.points: dict[float, LoadPoint] = {}

    def __call__(self, rate: float) -> LoadPoint:
        if rate not in self.points:
            _check(self.cancelled)
            self.points[rate] = simulate_point(
                self.pool, self.candidate, rate, seed=self.seed, num_requests=self.num_requests
            )
        return self.points[rate]

    def meets(self, rate: float) -> bool:
        return self(rate).meets_slo

    def curve(self) -> list[LoadPoint]:
        return [self.points[r] for r in sorted(self.points)]


def find_knee(
    pool: Pool,
    candidate: Candidate,
    *,
    guess: float | None = None,
    rel_tol: float = 0.02,
    seed: int = 0,
    cancelled: Cancelled | None = None,
    num_requests: int | None = None,
) -> tuple[float, list[LoadPoint]]:
    """The highest rate (req/s) one replica serves meeting pool.slo, to rel_tol, and every
    point simulated (plus a few spread up to 1.3 x the knee for the chart), sorted by rate.

    Brackets the knee from `guess` (default 1 req/s): up or down by 1.25x when a guess is
    given, then doubling the step; then bisects (geometrically) until hi / lo - 1 <= rel_tol.
    Returns 0.0 when even guess / MAX_DROP misses the SLO (a target below the unloaded
    latency)."""
    if not 0 < rel_tol < 1:
        raise BadInputError(f"rel_tol must be in (0, 1), got {rel_tol}")
    if guess is not None and not (guess > 0 and math.isfinite(guess)):
        guess = None
    n = num_requests if num_requests is not None else default_requests(pool, candidate, 1)
    probe = _Prober(pool, candidate, seed, n, cancelled)
    start = guess if guess is not None else 1.0
    factor = 1.25 if guess is not None else 2.0
    lo: float | None
    hi: float | None
    if probe.meets(start):
        lo, hi = start, None
        for _ in range(MAX_DOUBLINGS):
            rate = lo * factor
            if not probe.meets(rate):
                hi = rate
                break
            lo, factor = rate, factor * factor
        if hi is None:  # meets at any rate tried: say so at the highest
            return lo, probe.curve()
    else:
        lo, hi = None, start
        while hi > start / MAX_DROP:
            rate = max(hi / factor, start / MAX_DROP)
            if probe.meets(rate):
                lo = rate
                break
            hi, factor = rate, min(factor * factor, 16.0)
        if lo is None:
            return 0.0, probe.curve()
    while hi / lo - 1 > rel_tol:
        mid = math.sqrt(lo * hi)
        if probe.meets(mid):
            lo = mid
        else:
            hi = mid
    knee = lo
    for k in CURVE_MULTIPLES:
        rate = k * knee
        if all(abs(rate / r - 1) > 0.05 for r in probe.points):
            probe(rate)
    return knee, probe.curve()


def brute_force_knee(
    pool: Pool,
    candidate: Candidate,
    *,
    step: float = 0.01,
    seed: int = 0,
    num_requests: int | None = None,
    start: float = 0.01,
) -> float:
    """The knee by a dense sweep from a low rate up (truth for the benches; slow): x2 from
    `start` until the SLO is missed, then x1.1 from the last rate that met it, then x(1 +
    step) likewise; the last rate meeting the SLO before the first miss. Same draws as
    find_knee (same seed and num_requests). 0.0 when `start` already misses."""
    n = num_requests if num_requests is not None else default_requests(pool, candidate, 1)
    probe = _Prober(pool, candidate, seed, n, None)
    if not probe.meets(start):
        return 0.0
    lo = start
    for factor in (2.0, 1.1, 1.0 + step):
        for _ in range(10_000):
            rate = lo * factor
            if not probe.meets(rate):
                break
            lo = rate
    return lo


# --- replicas ---------------------------------------------------------------------------------


def fewest_replicas(
    pool: Pool,
    candidate: Candidate,
    peak_rate: float,
    knee: float,
    *,
    seed: int = 0,
    max_replicas: int = 512,
    cancelled: Cancelled | None = None,
    num_requests: int | None = None,
) -> tuple[int, LoadPoint]:
    """The fewest replicas meeting pool.slo with peak_rate req/s offered to them all, and that
    run. Starts at ceil(peak_rate / knee), steps down while the SLO still holds or up until it
    does (galloping: +1, +2, +4, ... then bisecting back), simulating n replicas each time
    (num_requests: default_requests for n replicas, the count any later check of n simulates).
    The answer is then confirmed on CONFIRM_SEEDS other draws of the same traffic: a count
    that met the SLO on one draw only is at the edge, and one more replica is added until every
    draw meets it -- a recommendation must not miss its SLO when simulated again. When even
    max_replicas misses, returns (max_replicas, that failing run)."""
    if not (peak_rate > 0 and math.isfinite(peak_rate)):
        raise BadInputError(f"peak_rate must be a finite number > 0 req/s, got {peak_rate}")
    if not (knee > 0 and math.isfinite(knee)):
        raise BadInputError(f"knee must be > 0 req/s per replica, got {knee}")
    if max_replicas < 1:
        raise BadInputError(f"max_replicas must be >= 1, got {max_replicas}")
    n0 = min(max(1, math.ceil(peak_rate / knee - 1e-9)), max_replicas)
    runs: dict[tuple[int, int], LoadPoint] = {}

    def run(n: int, draw: int = seed) -> LoadPoint:
        if (n, draw) not in runs:
            _check(cancelled)
            runs[n, draw] = simulate_point(
                pool, candidate, peak_rate, replicas=n, seed=draw, num_requests=num_requests
            )
        return runs[n, draw]

    if run(n0).meets_slo:
        good, bad, step = n0, 0, 1
        while good > 1:
            n = max(good - step, 1)
            if run(n).meets_slo:
                good, step = n, step * 2
            else:
                bad = n
                break
    else:
        bad, good, step = n0, 0, 1
        while bad < max_replicas:
            n = min(bad + step, max_replicas)
            if run(n).meets_slo:
                good = n
                break
            bad, step = n, step * 2
        if good == 0:
            return bad, run(bad)
    while good - bad > 1:
        mid = (good + bad) // 2
        if run(mid).meets_slo:
            good = mid
        else:
            bad = mid
    draws = [seed, *(seed + 1 + i for i in range(CONFIRM_SEEDS))]
    while good < max_replicas and not all(run(good, draw).meets_slo for draw in draws):
        good += 1
    return good, run(good)


# --- both, for one candidate or many ----------------------------------------------------------


def verify(
    pool: Pool,
    candidate: Candidate,
    peak_rate: float,
    *,
    guess: float | None = None,
    seed: int = 0,
    cancelled: Cancelled | None = None,
) -> Verified:
    """find_knee, then fewest_replicas at peak_rate: the candidate checked on the simulator."""
    knee, curve = find_knee(pool, candidate, guess=guess, seed=seed, cancelled=cancelled)
    sims = len(curve)
    if knee <= 0:
        _check(cancelled)
        at_peak = simulate_point(pool, candidate, peak_rate, seed=seed)
        return Verified(candidate, 0.0, tuple(curve), 0, at_peak, sims + 1)
    counted: list[int] = []

    def check_and_count() -> bool:
        # polled once before each new simulation: so it also counts them
        counted.append(1)
        return cancelled() if cancelled is not None else False

    replicas, at_peak = fewest_replicas(
        pool, candidate, peak_rate, knee, seed=seed, cancelled=check_and_count
    )
    return Verified(candidate, knee, tuple(curve), replicas, at_peak, sims + len(counted))


def _verify_job(args: tuple[Pool, Candidate, float, float | None, int]) -> Verified:
    pool, candidate, peak_rate, guess, seed = args
    return verify(pool, candidate, peak_rate, guess=guess, seed=seed)


def verify_many(
    pool: Pool,
    candidates: Sequence[Candidate],
    peak_rate: float,
    *,
    guesses: Sequence[float | None] | None = None,
    seed: int = 0,
    workers: int | None = None,
    cancelled: Cancelled | None = None,
) -> list[Verified]:
    """verify() every candidate, in their order; `workers` processes (default: one per CPU,
    at most one per candidate; 1 runs them here). Each candidate's answer is the same however
    many workers run them. cancelled() is polled as candidates finish (and between
    simulations when workers is 1); pending candidates are dropped on cancel."""
    if guesses is not None and len(guesses) != len(candidates):
        raise BadInputError("guesses must give one knee guess (or None) per candidate")
    hints = list(guesses) if guesses is not None else [None] * len(candidates)
    count = workers if workers is not None else min(len(candidates), os.cpu_count() or 1)
    if count <= 1 or len(candidates) <= 1:
        return [
            verify(pool, c, peak_rate, guess=g, seed=seed, cancelled=cancelled)
            for c, g in zip(candidates, hints, strict=True)
        ]
    _check(cancelled)
    # forkserver: the planner runs in a web server's worker thread, and forking a threaded
    # process can deadlock the child on a lock another thread held
    with ProcessPoolExecutor(max_workers=count, mp_context=get_context("forkserver")) as ex:
        futures: dict[Future[Verified], int] = {
            ex.submit(_verify_job, (pool, c, peak_rate, g, seed)): i
            for i, (c, g) in enumerate(zip(candidates, hints, strict=True))
        }
        out: list[Verified | None] = [None] * len(candidates)
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for f in done:
                out[futures[f]] = f.result()
            if cancelled is not None and cancelled():
                for f in pending:
                    f.cancel()
                ex.shutdown(wait=False, cancel_futures=True)
                raise PlanCancelled("the plan was cancelled")
    return [v for v in out if v is not None]
