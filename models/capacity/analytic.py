"""Instant analytic screening of capacity candidates (issue #13): the knee of each candidate --
the highest arrival rate one replica holds while the pool's p95 TTFT, ITL and end-to-end
latency meet their SLO and its KV cache holds the running sequences -- from the step-time
predictor (models/steptime.py) and a queueing approximation, in well under a millisecond a
candidate. The planner screens the whole space with it, then verifies the cheapest on the
simulator (models/capacity/search.py), seeding the simulator's search with this knee.

**The pool's shape.** The apps' joint (prompt, output) samples are pooled with each app's
share of the pool's busiest hour of the week and resampled systematically to at most
SHAPE_SAMPLES equal-weight draws. A request's cacheable prefix is its app's ``prefix_len``
(whole KV blocks of 16 tokens, at most the prompt less one token): with prefix caching on,
its computed prompt is ``pc = prompt - prefix``, and each app's prefix is held once in the KV
cache. The arrivals' squared coefficient of variation is ``Ca² = Σ share / burstiness`` (a
gamma gap of shape k has CV² 1/k).

**The operating point**, parametrised by N, the mean number of sequences decoding (not by the
rate, so no fixed point is needed for the decode batch). vLLM V1 runs one step at a time; a
step carries every decoding sequence (one token each) and, when prompts wait, prefill chunks
up to the token budget left, ``room = max_num_batched_tokens - N``. With ``O' = E[output - 1]``
decode steps per request (the prefill step makes the first token), Little's law gives the rate
``λ = N / (O' · τ̄)``, τ̄ the mean step. Steps are of two kinds: decode-only, ``τ_d = S(N, N·L)``
(S the predictor, L the mean context a decoding sequence attends to), and mixed, with q prompt
tokens, priced linearly between τ_d and the full-budget step ``S(N, N·L, room)``: ``τ_m = τ_d +
q·(S(N, N·L, room) - τ_d)/room`` (linear, so the rate grows monotonically with N: pricing each q
with the predictor's tile-quantised GEMMs made it dip, and a looser SLO could lower the knee). A
fraction ``f = 1 - exp(-λ·τ̄·chunks)`` of steps carries prefill (arrivals in a step are
prefilled together in the next; a prompt longer than ``room`` needs ``ceil(pc / room)`` steps),
with ``q = min(room, λ·τ̄·E[pc] / f)`` tokens on average; ``τ̄ = τ_d + f·(τ_m - τ_d)``; three
iterations of (f, q, τ̄, λ) converge. Above one sequence N is a whole number.

**The p95 latencies at that point.**
- ITL: every step's time is an inter-token gap of each of its N sequences, so ITL's p95 is
  τ_d while fewer than 5 % of steps carry prefill, else the mixed step with the
  ``1 - 0.05/f`` quantile of prefill chunk size (times the coalescing factor q / E[chunk]).
- TTFT: a request waits for the step under way (``τ̄``), then for the token budget -- an
  M/G/1 queue whose server is the prefill budget: service ``s = pc / room · S(N, room)``,
  utilisation ``ρ = λ·E[s]``, Kingman's mean wait ``W = ρ/(1-ρ) · E[s] · (Ca² + Cs²)/2`` and
  the exponential tail ``W95 = W/ρ · ln(20ρ)`` -- then for its own prefill: ``ceil(pc95/room)``
  mixed steps of ``min(room, max(pc95, q))`` tokens.
- E2E: per sample, ``τ̄/2 + chunks·S(chunk) + (output - 1)·τ̄ + W`` (a mixed step priced
  linearly between τ_d and S(N, room)), its 95th percentile.
- Each p95 is multiplied by a calibration factor (TTFT_SCALE, ITL_SCALE, E2E_SCALE), checked
  against the simulator's knee (search.find_knee) over the bench's twelve pools x candidates
  (bench/capacity_screen.py prints the table): at 1.0 the median |error| is ~6 %, the worst
  ~17 % and the most optimistic +4 %; the errors lean to the safe (low) side, so the factors
  stay 1.0.

**Limits of one replica.** KV: ``N95 · L_kv + shared prefixes <= KV tokens`` with
``N95 = N + 1.645·sqrt(N)`` (Poisson-like concurrency; L_kv the mean KV footprint of a decoding
sequence); beyond it vLLM preempts. Compute: ``ρ <= RHO_MAX`` (the budget keeps up with the
prompts) and ``N95 <= max_num_seqs``.

**The knee**: every constraint grows with N, so a binary search over a fixed geometric grid
of N finds the largest N meeting them all (max_num_seqs applied last, so candidates that
differ only in it share the search); the knee is λ there, and the binding constraint is the
one that fails just above it ("ttft", "itl", "e2e", "kv" or "compute"). A knee of 0 means
even a trickle misses the SLO (e.g. a TTFT target below one prompt's prefill).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inferledger.core.errors import BadInputError
from models.capacity.candidates import (
    enumerate_candidates as enumerate_candidates,  # the planner's entry point here too
)
from models.capacity.candidates import (
    infeasible_reason,
    kv_cache_tokens,
    predictor_for,
    scheduler_limits,
)
from models.capacity.pools import app_shares, pool_burstiness, prefix_plan
from models.capacity.types import Candidate, Pool, Slo
from models.execution_time import StepShape
from models.model_catalog import DEFAULT_BLOCK_SIZE, get_model
from models.steptime import RooflinePredictor

#: equal-weight (prompt, output) draws the pool's shape is resampled to
SHAPE_SAMPLES = 256
#: the prefill budget's utilisation a replica may run at (past it, queues grow without bound)
RHO_MAX = 0.95
#: z of the 95th percentile of a normal: concurrency N has a p95 of about N + Z95·sqrt(N)
Z95 = 1.645
#: calibration factors on the predicted p95s (checked by bench/capacity_screen.py)
TTFT_SCALE = 1.0
ITL_SCALE = 1.0
E2E_SCALE = 1.0
#: steps of the geometric grid of N searched from _N_MIN to _N_MAX (0.08 % apart)
_GRID = 2**14
_N_MIN = 0.01
_N_MAX = 8192.0
_FIXED_POINT_ITERATIONS = 3


@dataclass(frozen=True, slots=True)
class Screen:
    """A candidate's analytic verdict for a pool at its peak rate.

    knee_rate: req/s one replica holds within the SLO; replicas: ceil(peak / knee), at least 1;
    binding: what limits the knee ("ttft", "itl", "e2e", "kv", "compute"); feasible False with
    a reason when the candidate cannot serve the pool (or its knee is 0)."""

    candidate: Candidate
    knee_rate: float
    replicas: int
    gpu_hours_per_month: float
    monthly_cost: float
    binding: str
    feasible: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class _Loads:
    """The pool's per-request work with prefix caching on or off (module docstring)."""

    pc: np.ndarray  # computed prompt tokens per sample, sorted ascending
    pc_by_sample: np.ndarray  # the same, in sample order (beside output)
    output: np.ndarray
    decode_steps: float  # O' = E[output - 1]
    mean_pc: float
    pc95: float
    cs2: float  # squared CV of the computed prompt
    context: float  # L: mean context a decoding sequence attends to
    kv_per_seq: float  # L_kv: mean KV tokens a decoding sequence holds privately
    position: float  # mean attention context of a computed prompt token
    shared_kv: float  # prefix tokens held once (prefix caching on)


@dataclass(frozen=True, slots=True)
class PoolShape:
    """What the analytic model needs of a pool: its loads with and without prefix caching, the
    arrivals' CV², and the longest request (prompt + output tokens)."""

    with_cache: _Loads
    without_cache: _Loads
    ca2: float
    max_context: int

    def loads(self, prefix_caching: bool) -> _Loads:
        return self.with_cache if prefix_caching else self.without_cache


def pool_shape(pool: Pool, samples: int = SHAPE_SAMPLES) -> PoolShape:
    """The pool's shape for the analytic model (module docstring), deterministic. Shares,
    prefixes and burstiness are pools.pool_requests' (app_shares, prefix_plan,
    pool_burstiness), so the screen sees the traffic the simulator is given."""
    if not pool.apps:
        raise BadInputError(f"pool {pool.name!r} has no apps")
    shares = app_shares(pool)
    prompts, outputs, prefixes, weights = [], [], [], []
    shared = 0.0
    for app in pool.apps:
        lengths = np.asarray(app.lengths, dtype=float).reshape(-1, 2)
        length, share = prefix_plan(app)
        # a warm cache holds the prefix's whole blocks; share of the requests carry it
        cached = math.floor(length / DEFAULT_BLOCK_SIZE) * DEFAULT_BLOCK_SIZE * share
        prompts.append(lengths[:, 0])
        outputs.append(lengths[:, 1])
        prefixes.append(np.where(lengths[:, 0] > length, cached, 0.0))
        weights.append(np.full(len(lengths), shares[app.app] / len(lengths)))
        if length and shares[app.app] > 0:
            shared += length
    p, o, c = np.concatenate(prompts), np.concatenate(outputs), np.concatenate(prefixes)
    w = np.concatenate(weights)
    # systematic resampling: draw k sits at the cumulative weight (k + 0.5) / m
    m = min(samples, len(p))
    idx = np.searchsorted(np.cumsum(w) / w.sum(), (np.arange(m) + 0.5) / m)
    idx = np.minimum(idx, len(p) - 1)
    p, o, c = p[idx], o[idx], c[idx]
    return PoolShape(
        with_cache=_loads(p, o, c, shared),
        without_cache=_loads(p, o, np.zeros_like(c), 0.0),
        ca2=1.0 / pool_burstiness(pool, shares),
        max_context=max(a + b for app in pool.apps for a, b in app.lengths),
    )


def _loads(p: np.ndarray, o: np.ndarray, cached: np.ndarray, shared: float) -> _Loads:
    pc = p - cached
    steps = o - 1
    total_steps = float(steps.sum())
    if total_steps > 0:
        context = float(np.dot(steps, p + o / 2) / total_steps)
        kv = float(np.dot(steps, pc + o / 2) / total_steps)
    else:
        context, kv = float(p.mean()), float(pc.mean())
    mean_pc = float(pc.mean())
    return _Loads(
        pc=np.sort(pc),
        pc_by_sample=pc,
        output=o,
        # outputs of one token have no decode step; keep N a meaningful parameter
        decode_steps=max(float(steps.mean()), 0.05),
        mean_pc=mean_pc,
        pc95=float(np.quantile(pc, 0.95)),
        cs2=float(pc.var() / mean_pc**2),
        context=context,
        kv_per_seq=kv,
        position=float(np.dot(pc, cached + pc / 2) / pc.sum()),
        shared_kv=shared,
    )


@dataclass(frozen=True, slots=True)
class Point:
    """The analytic operating point of one replica at N decoding sequences (seconds, req/s).
    The ratios are value / limit: a constraint holds while its ratio is <= 1."""

    decoding: float
    rate: float
    step_s: float
    ttft_p95_s: float
    itl_p95_s: float
    e2e_p95_s: float
    prefill_utilization: float
    kv_ratio: float
    compute_ratio: float

    def ratios(self, slo: Slo) -> dict[str, float]:
        out = {"kv": self.kv_ratio, "compute": self.compute_ratio}
        if slo.ttft_p95_s is not None:
            out["ttft"] = self.ttft_p95_s / slo.ttft_p95_s
        if slo.itl_p95_s is not None:
            out["itl"] = self.itl_p95_s / slo.itl_p95_s
        if slo.e2e_p95_s is not None:
            out["e2e"] = self.e2e_p95_s / slo.e2e_p95_s
        return out


class _Replica:
    """One candidate's replica against one pool's loads: evaluates operating points."""

    __slots__ = ("budget", "ca2", "kv_tokens", "loads", "predictor")

    def __init__(
        self,
        predictor: RooflinePredictor,
        kv_tokens: int,
        budget: int,
        loads: _Loads,
        ca2: float,
    ) -> None:
        self.predictor = predictor
        self.kv_tokens = kv_tokens
        self.budget = budget
        self.loads = loads
        self.ca2 = ca2

    def _step(self, n: int, ctx: int, q: float) -> float:
        if q <= 0:
            return self.predictor.step_time_s(StepShape(num_decode=n, decode_context_sum=ctx))
        tokens = max(1, round(q))
        seqs = max(1, min(tokens, round(q / max(min(self.loads.mean_pc, q), 1.0))))
        return self.predictor.step_time_s(
            StepShape(
                num_decode=n,
                decode_context_sum=ctx,
                prefill_tokens=tokens,
                prefill_attention=tokens * self.loads.position,
                num_prefill_seqs=seqs,
            )
        )

    def point(self, decoding: float) -> Point:
        ld = self.loads
        # steps carry whole sequences: above one, N is rounded once and used throughout, so
        # the rate is a non-decreasing step function of N (a fractional N with a rounded
        # batch would make the rate dip at every integer); below one it is the busy share
        if decoding >= 1:
            decoding = float(round(decoding))
        n = max(1, round(decoding))
        ctx = round(n * ld.context)
        room = self.budget - n
        if room < 1:  # the budget cannot even carry the decodes: no prefill ever runs
            inf = math.inf
            return Point(decoding, 0.0, inf, inf, inf, inf, inf, inf, inf)
        pc = ld.pc
        chunks = np.ceil(pc / room)
        mean_chunks = float(chunks.mean())
        mean_chunk = ld.mean_pc / mean_chunks
        tau_d = self._step(n, ctx, 0)
        tau_full = self._step(n, ctx, room)
        per_token = (tau_full - tau_d) / room  # a mixed step, linear in its prefill tokens
        tau = tau_d
        rate = decoding / (ld.decode_steps * tau)
        f, q = 0.0, 0.0
        for _ in range(_FIXED_POINT_ITERATIONS):
            f = 1.0 - math.exp(-rate * tau * mean_chunks)
            q = min(float(room), rate * tau * ld.mean_pc / f) if f > 0 else 0.0
            tau = tau_d + f * q * per_token
            rate = decoding / (ld.decode_steps * tau)
        coalesce = max(1.0, q / mean_chunk)

        # ITL: steps are gaps of every decoding sequence alike
        if f <= 0.05:
            itl = tau_d
        else:
            k = min(len(pc) - 1, int((1 - 0.05 / f) * len(pc)))
            itl = self._step(n, ctx, min(room, min(float(pc[k]), room) * coalesce))

        # TTFT: the step under way, the wait for the budget, the request's own prefill
        service = ld.mean_pc / room * tau_full
        rho = rate * service
        if rho >= 1:
            wait = wait95 = math.inf
        else:
            wait = rho / (1 - rho) * service * (self.ca2 + ld.cs2) / 2
            wait95 = wait / rho * math.log(20 * rho) if rho > 0.05 else 0.0
        own = math.ceil(ld.pc95 / room) * self._step(n, ctx, min(room, max(ld.pc95, q)))
        ttft = tau + own + wait95

        # E2E: per sample, with a mixed step priced linearly in its prefill tokens
        by_sample = ld.pc_by_sample
        steps = np.ceil(by_sample / room)
        chunk = np.minimum(by_sample, room)
        prefill = steps * (tau_d + (tau_full - tau_d) * chunk / room)
        e2e_all = 0.5 * tau + prefill + (ld.output - 1) * tau
        k95 = int(0.95 * (len(e2e_all) - 1))
        e2e = float(np.partition(e2e_all, k95)[k95]) + wait

        n95 = decoding + Z95 * math.sqrt(decoding)
        kv_ratio = (n95 * ld.kv_per_seq + ld.shared_kv) / self.kv_tokens
        compute_ratio = rho / RHO_MAX
        return Point(
            decoding=decoding,
            rate=rate,
            step_s=tau,
            ttft_p95_s=ttft * TTFT_SCALE,
            itl_p95_s=itl * ITL_SCALE,
            e2e_p95_s=e2e * E2E_SCALE,
            prefill_utilization=rho,
            kv_ratio=kv_ratio,
            compute_ratio=compute_ratio,
        )


#: (predictor, KV tokens, token budget, loads) -> the knee without the max_num_seqs limit
_KneeCache = dict[tuple[int, int, int, int], tuple[float, str, "Point"]]


def _worst(point: Point, slo: Slo) -> tuple[str, float]:
    ratios = point.ratios(slo)
    name = max(ratios, key=lambda k: ratios[k])
    return name, ratios[name]


def _grid_n(index: int) -> float:
    return _N_MIN * (_N_MAX / _N_MIN) ** (index / _GRID)


def _unseated_knee(replica: _Replica, slo: Slo) -> tuple[float, str, Point]:
    """(N, binding, point) at the largest N meeting the SLO, KV and the prefill budget.

    A binary search over a fixed geometric grid of N (not a bisection of the interval): the
    answer is the last grid point that passes whatever path the search took, so a looser SLO
    can never land on a lower point."""
    lo, hi = 0, _GRID
    low = replica.point(_grid_n(lo))
    name, ratio = _worst(low, slo)
    if ratio > 1:
        return 0.0, name, low
    binding = _worst(replica.point(_grid_n(hi)), slo)[0]
    while hi - lo > 1:  # every ratio grows with N
        mid = (lo + hi) // 2
        point = replica.point(_grid_n(mid))
        name, ratio = _worst(point, slo)
        if ratio <= 1:
            lo, low = mid, point
        else:
            hi, binding = mid, name
    return _grid_n(lo), binding, low


def _seated_decoding(max_seqs: int) -> float:
    """The N whose p95 concurrency N + Z95·sqrt(N) is max_num_seqs."""
    root = (-Z95 + math.sqrt(Z95 * Z95 + 4 * max_seqs)) / 2
    return root * root


def knee_point(
    shape: PoolShape, slo: Slo, candidate: Candidate, cache: _KneeCache | None = None
) -> tuple[float, str, Point]:
    """(knee rate, binding, the operating point at the knee) of a feasible candidate.

    max_num_seqs is the last limit applied: the knee of the other limits is found once per
    (predictor, KV cache, token budget, prefix caching), which ``cache`` (one screen's) keeps
    for the candidates that differ only in max_num_seqs."""
    seqs, budget = scheduler_limits(candidate)
    predictor = predictor_for(candidate)
    kv_tokens = kv_cache_tokens(candidate)
    loads = shape.loads(candidate.enable_prefix_caching)
    replica = _Replica(predictor, kv_tokens, budget, loads, shape.ca2)
    key = (id(predictor), kv_tokens, budget, id(loads))
    found = cache.get(key) if cache is not None else None
    if found is None:
        found = _unseated_knee(replica, slo)
        if cache is not None:
            cache[key] = found
    decoding, binding, point = found
    if decoding <= 0:
        return 0.0, binding, point
    seated = _seated_decoding(seqs)
    if seated < decoding:
        point = replica.point(seated)
        return point.rate, "compute", point
    return point.rate, binding, point


def analytic_knee(pool: Pool, candidate: Candidate) -> tuple[float, str]:
    """(knee rate in req/s per replica, binding constraint) of a candidate for a pool. An
    infeasible candidate (infeasible_reason) has knee 0 and binding "kv" or "compute"."""
    shape = pool_shape(pool)
    reason = infeasible_reason(candidate, shape.max_context)
    if reason is not None:
        return 0.0, _infeasible_binding(reason)
    knee, binding, _ = knee_point(shape, pool.slo, candidate)
    return knee, binding


def _infeasible_binding(reason: str) -> str:
    """ "kv" for a deployment without room for the pool's KV cache (the weights leave none, or
    too little for its longest request), else "compute" (precision, TP, scheduler, price)."""
    return "kv" if "KV cache" in reason or "does not fit" in reason else "compute"


def screen(
    pool: Pool,
    peak_rate: float,
    candidates: Sequence[Candidate],
    *,
    hours_per_month: float = 730.0,
) -> list[Screen]:
    """Every candidate's knee, replicas at ``peak_rate`` (req/s) and monthly cost, feasible ones
    cheapest first by the cost of the replicas the peak needs before rounding up (at least
    one; then by knee, highest first), infeasible ones after."""
    if not (math.isfinite(peak_rate) and peak_rate >= 0):
        raise BadInputError(f"peak_rate must be a finite rate >= 0 req/s, got {peak_rate!r}")
    if not (math.isfinite(hours_per_month) and hours_per_month > 0):
        raise BadInputError(f"hours_per_month must be > 0, got {hours_per_month!r}")
    shape = pool_shape(pool)
    cache: _KneeCache = {}
    out: list[Screen] = []
    for candidate in candidates:
        if candidate.model != pool.model and _model_name(candidate.model) != _model_name(
            pool.model
        ):
            raise BadInputError(
                f"candidate {candidate.label()} serves {candidate.model}, not the pool's "
                f"{pool.model}"
            )
        reason = infeasible_reason(candidate, shape.max_context)
        if reason is not None:
            binding = _infeasible_binding(reason)
            out.append(Screen(candidate, 0.0, 0, 0.0, 0.0, binding, False, reason))
            continue
        knee, binding, _ = knee_point(shape, pool.slo, candidate, cache)
        if knee <= 0:
            out.append(
                Screen(
                    candidate, 0.0, 0, 0.0, 0.0, binding, False,
                    f"misses the {binding} SLO even at the lowest load",
                )
            )  # fmt: skip
            continue
        replicas = max(1, math.ceil(peak_rate / knee - 1e-9))
        hours = replicas * candidate.tensor_parallel_size * hours_per_month
        out.append(
            Screen(
                candidate=candidate,
                knee_rate=knee,
                replicas=replicas,
                gpu_hours_per_month=hours,
                monthly_cost=hours * candidate.price_per_gpu_hour,
                binding=binding,
                feasible=True,
            )
        )

    def fractional_cost(s: Screen) -> float:
        # the cost of the replicas the peak needs, not rounded up (at least one): a knee a
        # hair short of peak / n must not cost a whole replica more in the ranking, or the
        # candidate can fall out of the cheapest the planner simulates (the rounded count
        # and cost are what it reports)
        c = s.candidate
        return max(peak_rate / s.knee_rate, 1.0) * c.tensor_parallel_size * c.price_per_gpu_hour

    out.sort(
        key=lambda s: (
            not s.feasible,
            fractional_cost(s) if s.feasible else 0.0,
            -s.knee_rate,
            s.candidate.label(),
        )
    )
    return out


def _model_name(name: str) -> str:
    return get_model(name).name
