"""The capacity planner's decisions (issue #13) against simulator truth, over randomised
scenarios (seeded): a Llama-3.1-8B pool (chat-like, long-context or a mix), an SLO, a peak
rate sized so that the candidates need 1-8 replicas, and a candidate space of 6-10 shapes.

The planner's pick goes through the real path: models.capacity.plan.run_plan (analytic screen
of the space, the `--top-k` cheapest verified on the simulator with search.verify, the cheapest
verified one meeting the SLO at the peak). Truth, brute force on the simulator: for every
candidate the planner could run, the fewest replicas meeting the SLO at the peak, scanning
n = 1, 2, ... with search.simulate_point (each n with its default request count) on seed 0 and
the search.CONFIRM_SEEDS draws after it -- the standard the planner holds its answer to; the
optimum is the cheapest of them. The pick is then re-simulated on a draw neither used
(seed 12345).

Prints the cost gap (pick / optimum - 1: median and worst; targets <= 3 % / <= 10 %), how often
the pick's replica count equals its true fewest (target >= 90 %), the picks that miss the SLO
when re-simulated with another seed (target 0) and, with --timing, the wall time of verifying
20 candidates (search.verify_many) on 1 and on 2 workers (target <= 5 min on 2 cores).

    python bench/capacity_decisions.py                  # 50 scenarios, one core
    python bench/capacity_decisions.py --quick          # 8 scenarios, a smoke run
    python bench/capacity_decisions.py --scenarios 20 --timing
    python bench/capacity_decisions.py --timing-only
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np

from models.capacity import analytic, search
from models.capacity import pools as pooling
from models.capacity.candidates import CandidateSpace, enumerate_candidates
from models.capacity.plan import PlanInputs, run_plan
from models.capacity.types import AppProfile, Candidate, Pool, Slo, SloClass, WorkloadProfile

TARGET_GAP_MEDIAN = 0.03
TARGET_GAP_WORST = 0.10
TARGET_EXACT = 0.90
TARGET_TIMING_S = 300.0
PRICES = {"H100": 2.5, "H200": 3.6}
MODEL = "llama-3.1-8b"
HOURS = 730.0
#: the truth's replica scan stops here (scenarios are sized to need <= ~8)
MAX_TRUE_REPLICAS = 12
RESEED = 12345
NOW = datetime(2026, 1, 5, tzinfo=UTC)


def _app(rng: np.random.Generator, name: str, kind: str) -> AppProfile:
    if kind == "chat":
        prompts = np.clip(rng.lognormal(np.log(rng.uniform(400, 1500)), 0.6, 600), 64, 8000)
        outputs = np.clip(rng.lognormal(np.log(rng.uniform(100, 400)), 0.7, 600), 8, 2000)
        prefix = int(rng.choice([0, 200, 500]))
        prompts = np.maximum(prompts, prefix + 16)
    else:
        prompts = rng.integers(3000, 12000, 600)
        outputs = np.clip(rng.lognormal(np.log(rng.uniform(150, 400)), 0.5, 600), 16, 1500)
        prefix = 0
    return AppProfile(
        app=name,
        model=MODEL,
        hourly_requests=tuple(1.0 for _ in range(168)),  # rescaled in scenario()
        lengths=tuple(zip(prompts.astype(int).tolist(), outputs.astype(int).tolist(), strict=True)),
        burstiness=float(rng.choice([1.0, 0.8, 0.6])),
        prefix_len=prefix,
        prefix_hit_rate=0.3 if prefix else 0.0,
    )


def _space(rng: np.random.Generator) -> CandidateSpace:
    """A random product of 6-10 candidates (the planner takes a space, not a list)."""
    shapes = [
        # (gpus, tps, dtypes, kvs, seqs): 8 candidates each, the last but one 6
        (("H100", "H200"), (1, 2), ("auto", "fp8"), ("auto",), (None,)),
        (("H100", "H200"), (1, 2), ("fp8",), ("auto", "fp8"), (None,)),
        (("H100", "H200"), (1,), ("auto", "fp8"), ("auto", "fp8"), (None,)),
        (("H100",), (1, 2), ("auto", "fp8"), ("auto", "fp8"), (None,)),
        (("H100", "H200"), (1,), ("auto", "fp8"), ("auto",), (None, 64)),
        (("H100", "H200"), (1,), ("auto", "fp8"), ("fp8",), (None, 128)),
        (("H100", "H200"), (1,), ("auto",), ("auto",), (None, 64, 256)),
        (("H200",), (1, 2), ("auto", "fp8"), ("auto", "fp8"), (None,)),
    ]
    gpus, tps, dtypes, kvs, seqs = shapes[int(rng.integers(len(shapes)))]
    return CandidateSpace(
        gpus=gpus,
        tensor_parallel_sizes=tps,
        dtypes=dtypes,
        kv_cache_dtypes=kvs,
        max_num_seqs=seqs,
        prices={g: PRICES[g] for g in gpus},
    )


def scenario(seed: int) -> PlanInputs:
    """A random pool of Llama-3.1-8B apps, its SLO, a peak rate and a space of 6-10 candidates.
    The peak is set from the analytic knee of 1xH100 bf16 so that it needs 1-6 replicas of it
    (cheaper-per-request shapes need as many or fewer)."""
    rng = np.random.default_rng([seed, 0xDEC])
    kinds = [str(k) for k in rng.choice(["chat", "long"], size=int(rng.integers(1, 3)))]
    apps = [_app(rng, f"app{i}", k) for i, k in enumerate(kinds)]
    long = "long" in kinds
    scale = float(rng.uniform(1.0, 3.0))
    slo = Slo(
        ttft_p95_s=(2.0 if long else 0.5) * scale,
        itl_p95_s=float(rng.choice([0.04, 0.06, 0.1])),
        e2e_p95_s=(30.0 if long else 15.0) * scale,
    )
    space = _space(rng)
    shares = rng.dirichlet(np.ones(len(apps)))
    # a weekly shape: a daytime hump, peak hour known; the peak sized below
    hours = np.arange(168)
    shape = 0.4 + 0.6 * np.clip(np.sin((hours % 24 - 6) / 24 * 2 * np.pi), 0, None)
    shape = shape / shape.max()
    ref = Pool("ref", SloClass.INTERACTIVE, MODEL, tuple(apps), slo)
    knee, _ = analytic.analytic_knee(ref, Candidate(MODEL, "H100", price_per_gpu_hour=2.5))
    if knee <= 0:
        knee = 1.0
    peak = float(knee * rng.uniform(0.6, 6.0))
    scaled = [
        _with_hourly(a, tuple(float(x) for x in shape * peak * 3600 * share))
        for a, share in zip(apps, shares, strict=True)
    ]
    return PlanInputs(
        name=f"bench-{seed}",
        profile=WorkloadProfile(apps=tuple(scaled)),
        slos={SloClass.INTERACTIVE: slo},
        space=space,
        seed=0,
        hours_per_month=HOURS,
    )


def _with_hourly(app: AppProfile, hourly: tuple[float, ...]) -> AppProfile:
    return AppProfile(
        app=app.app,
        model=app.model,
        hourly_requests=hourly,
        lengths=app.lengths,
        burstiness=app.burstiness,
        prefix_len=app.prefix_len,
        prefix_hit_rate=app.prefix_hit_rate,
    )


def monthly(c: Candidate, replicas: int) -> float:
    return replicas * c.gpus * c.price_per_gpu_hour * HOURS


def true_replicas(
    pool: Pool, c: Candidate, peak: float, seed: int = 0, cap: int = MAX_TRUE_REPLICAS
) -> tuple[int | None, int]:
    """Fewest replicas meeting the SLO at the peak on every draw the planner holds an answer
    to (seed and the search.CONFIRM_SEEDS after it), by simulating n = 1, 2, ... (None: > cap
    or the engine cannot start), and the simulations it took."""
    sims = 0
    draws = range(seed, seed + 1 + search.CONFIRM_SEEDS)
    for n in range(1, cap + 1):
        try:
            for draw in draws:
                sims += 1
                if not search.simulate_point(pool, c, peak, replicas=n, seed=draw).meets_slo:
                    break
            else:
                return n, sims
        except Exception:  # a shape the simulator refuses is not a solution
            return None, sims
    return None, sims


def run_scenario(seed: int, top_k: int) -> dict[str, Any]:
    inputs = scenario(seed)
    inputs = PlanInputs(
        name=inputs.name,
        profile=inputs.profile,
        slos=inputs.slos,
        space=inputs.space,
        verify_top=top_k,
        seed=inputs.seed,
        hours_per_month=inputs.hours_per_month,
    )
    began = time.perf_counter()
    result = run_plan(inputs, now=NOW)
    plan_s = time.perf_counter() - began
    (pool_row,) = result["pools"]
    pools, _ = pooling.make_pools(inputs.profile, inputs.slos)
    (pool,) = pools
    peak = float(pool_row["peak_rate"])
    longest = max(p + o for a in pool.apps for p, o in a.lengths)
    feasible, _ = enumerate_candidates(pool.model, inputs.space, max_context=longest)
    began = time.perf_counter()
    truth: dict[Candidate, int | None] = {}
    sims = 0
    for c in feasible:
        truth[c], k = true_replicas(pool, c, peak)
        sims += k
    truth_s = time.perf_counter() - began
    costs = {c: monthly(c, n) for c, n in truth.items() if n is not None}
    best = min(costs.values()) if costs else None
    out: dict[str, Any] = {
        "seed": seed,
        "peak": round(peak, 2),
        "candidates": len(feasible),
        "true_n": sorted(n for n in truth.values() if n is not None),
        "plan_s": round(plan_s, 1),
        "truth_s": round(truth_s, 1),
        "truth_sims": sims,
    }
    if pool_row["best"] is None or best is None:
        out.update(gap=None, exact=None, violates=None, picked=None)
        return out
    row = pool_row["candidates"][pool_row["best"]]
    pick = Candidate(**row["candidate"])
    n = int(row["replicas"])
    out["picked"] = f"{n} x {pick.label()}"
    out["optimum"] = " | ".join(
        f"{truth[c]} x {c.label()}" for c, v in costs.items() if v <= best * (1 + 1e-9)
    )
    out["gap"] = monthly(pick, n) / best - 1
    out["exact"] = truth.get(pick) == n
    out["true_pick_n"] = truth.get(pick)
    again = search.simulate_point(pool, pick, peak, replicas=n, seed=RESEED)
    out["violates"] = not again.meets_slo
    return out


def timing(workers: int) -> float:
    """Wall seconds to verify 20 candidates of one chat pool at a peak needing a few replicas."""
    inputs = scenario(7)
    pools, _ = pooling.make_pools(inputs.profile, inputs.slos)
    pool = pools[0]
    peak = pooling.pool_peak_rate(pool)
    cands = [
        Candidate(MODEL, gpu, tp, dtype, kv, seqs, price_per_gpu_hour=PRICES[gpu])
        for gpu in ("H100", "H200")
        for tp in (1, 2)
        for dtype, kv in (("auto", "auto"), ("fp8", "fp8"), ("fp8", "auto"))
        for seqs in (None, 128)
    ][:20]
    screens = [s for s in analytic.screen(pool, peak, cands) if s.feasible][:20]
    began = time.perf_counter()
    search.verify_many(
        pool,
        [s.candidate for s in screens],
        peak,
        guesses=[s.knee_rate for s in screens],
        workers=workers,
    )
    return time.perf_counter() - began


def _report(rows: list[dict[str, Any]]) -> None:
    gaps = np.array([r["gap"] for r in rows if r["gap"] is not None], dtype=float)
    exact = [bool(r["exact"]) for r in rows if r["exact"] is not None]
    violations = sum(1 for r in rows if r["violates"])
    no_pick = sum(1 for r in rows if r["picked"] is None)
    if not len(gaps):
        print(f"\n{len(rows)} scenarios: no scenario with both a pick and a true optimum")
        return
    print(
        f"\n{len(rows)} scenarios, {len(gaps)} with a pick and a true optimum "
        f"({no_pick} without a pick):\n"
        f"  cost gap vs brute-force optimum: median {np.median(gaps):.1%} (target <= "
        f"{TARGET_GAP_MEDIAN:.0%}), worst {gaps.max():.1%} (target <= {TARGET_GAP_WORST:.0%}); "
        f"at or below the optimum's cost {np.mean(gaps <= 1e-9):.0%}, below it (a pick the "
        f"truth's scan finds short) {int(np.sum(gaps < -1e-9))} (lowest {gaps.min():.1%})\n"
        f"  replica count exact: {np.mean(exact):.0%} ({sum(exact)}/{len(exact)}; target >= "
        f"{TARGET_EXACT:.0%})\n"
        f"  picks missing the SLO re-simulated with seed {RESEED}: {violations} (target 0)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--scenarios", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="8 scenarios, top-k 3")
    parser.add_argument("--top-k", type=int, default=4, help="candidates verified per scenario")
    parser.add_argument("--timing", action="store_true", help="also time 20 verifications")
    parser.add_argument("--timing-only", action="store_true")
    args = parser.parse_args(argv)
    scenarios = 8 if args.quick else args.scenarios
    top_k = 3 if args.quick else args.top_k
    began = time.perf_counter()
    if not args.timing_only:
        rows = []
        for seed in range(scenarios):
            row = run_scenario(seed, top_k)
            rows.append(row)
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()})
            print(f"  [{time.perf_counter() - began:.0f} s]", flush=True)
        _report(rows)
        print(f"  (top-k {top_k}; wall {time.perf_counter() - began:.0f} s)", flush=True)
    if args.timing or args.timing_only:
        one = timing(1)
        print(f"verify 20 candidates: {one:.0f} s on 1 worker", flush=True)
        two = timing(2)
        print(
            f"verify 20 candidates: {two:.0f} s on 2 workers (x{one / two:.2f}; target <= "
            f"{TARGET_TIMING_S:.0f} s on 2 cores)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
