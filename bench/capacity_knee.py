"""The capacity planner's knee (issue #13): how close the searched knee (models/capacity/
search.find_knee: bracket + bisection from the analytic guess) and the analytic knee
(models/capacity/analytic.analytic_knee) come to the simulator's own knee found by a dense sweep
(search.brute_force_knee: x2, x1.1, then 1 % steps from a low rate up), over pools x
candidates: Llama-3.1 8B and 70B, H100 and H200, bf16 and fp8, chat-like and long-context
traffic, tight and loose SLOs.

Error = knee / truth - 1; positive is the unsafe side (a knee the simulator does not hold).
Targets (issue #13): searched knee <= 7 % median, <= 15 % worst |error|, never above the truth
by more than 10 %.

    python bench/capacity_knee.py            # 16 cases, a few minutes on 2 cores
    python bench/capacity_knee.py --quick    # 12 cases with fewer requests per run
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from models.capacity import search
from models.capacity.analytic import analytic_knee
from models.capacity.types import AppProfile, Candidate, Pool, Slo, SloClass

TARGET_MEDIAN = 0.07
TARGET_WORST = 0.15
TARGET_UNSAFE = 0.10


def chat_app(model: str, seed: int = 1) -> AppProfile:
    """Chat-like: lognormal prompts around 700 tokens with a 300-token system prompt, outputs
    around 220."""
    rng = np.random.default_rng(seed)
    prompts = np.clip(rng.lognormal(np.log(700), 0.6, 1000), 320, 8000).astype(int)
    outputs = np.clip(rng.lognormal(np.log(220), 0.7, 1000), 8, 2000).astype(int)
    return AppProfile(
        app="chat",
        model=model,
        hourly_requests=(3600.0,) * 168,
        lengths=tuple(zip(prompts.tolist(), outputs.tolist(), strict=True)),
        burstiness=1.0,
        prefix_len=300,
        prefix_hit_rate=0.3,
    )


def long_app(model: str, seed: int = 2) -> AppProfile:
    """Long-context (RAG / documents): prompts 4k-16k tokens, outputs around 300, bursty."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(4000, 16000, 1000)
    outputs = np.clip(rng.lognormal(np.log(300), 0.5, 1000), 16, 1500).astype(int)
    return AppProfile(
        app="docs",
        model=model,
        hourly_requests=(3600.0,) * 168,
        lengths=tuple(zip(prompts.tolist(), outputs.tolist(), strict=True)),
        burstiness=0.7,
    )


SLOS = {
    ("chat", "tight"): Slo(ttft_p95_s=0.5, itl_p95_s=0.05, e2e_p95_s=15.0),
    ("chat", "loose"): Slo(ttft_p95_s=2.0, itl_p95_s=0.1, e2e_p95_s=40.0),
    ("long", "tight"): Slo(ttft_p95_s=2.0, itl_p95_s=0.08, e2e_p95_s=30.0),
    ("long", "loose"): Slo(ttft_p95_s=6.0, itl_p95_s=0.15, e2e_p95_s=90.0),
}
CANDIDATES = {
    "8b": [
        Candidate("llama-3.1-8b", "H100", price_per_gpu_hour=2.5),
        Candidate(
            "llama-3.1-8b", "H200", dtype="fp8", kv_cache_dtype="fp8", price_per_gpu_hour=3.5
        ),
    ],
    "70b": [
        Candidate("llama-3.1-70b", "H100", tensor_parallel_size=4, price_per_gpu_hour=2.5),
        Candidate(
            "llama-3.1-70b", "H200", tensor_parallel_size=2, dtype="fp8", price_per_gpu_hour=3.5
        ),
    ],
}
MODELS = {"8b": "llama-3.1-8b", "70b": "llama-3.1-70b"}


@dataclass(frozen=True)
class Case:
    pool: Pool
    candidate: Candidate

    @property
    def name(self) -> str:
        return f"{self.pool.name} | {self.candidate.label()}"


def cases(quick: bool) -> list[Case]:
    out = []
    for size, model in MODELS.items():
        for kind, make in (("chat", chat_app), ("long", long_app)):
            for tightness in ("tight", "loose"):
                if quick and kind == "long" and tightness == "loose":
                    continue
                slo = SLOS[(kind, tightness)]
                pool = Pool(
                    f"{kind}-{tightness}/{model}",
                    SloClass.INTERACTIVE,
                    model,
                    (make(model),),
                    slo,
                )
                out.extend(Case(pool, c) for c in CANDIDATES[size])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="12 cases, fewer requests per run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = []
    began = time.perf_counter()
    header = f"{'case':<62} {'truth':>8} {'search':>8} {'err':>7} {'analytic':>9} {'err':>7} sims"
    print(header)
    print("-" * len(header))
    for case in cases(args.quick):
        pool, cand = case.pool, case.candidate
        n = search.default_requests(pool, cand)
        if args.quick:
            n = min(n, 1000)
        guess, _binding = analytic_knee(pool, cand)
        t0 = time.perf_counter()
        knee, curve = search.find_knee(
            pool, cand, guess=guess or None, seed=args.seed, num_requests=n
        )
        t_search = time.perf_counter() - t0
        # the sweep's grid starts at a fixed rate, not at anything the search found
        truth = search.brute_force_knee(pool, cand, seed=args.seed, num_requests=n)
        err = knee / truth - 1 if truth > 0 else float("nan")
        a_err = guess / truth - 1 if truth > 0 else float("nan")
        rows.append((err, a_err, t_search, len(curve)))
        print(
            f"{case.name[:62]:<62} {truth:8.3f} {knee:8.3f} {err:+7.1%} {guess:9.3f} "
            f"{a_err:+7.1%} {len(curve):4d}",
            flush=True,
        )
    errs = np.array([r[0] for r in rows])
    a_errs = np.array([r[1] for r in rows])
    print()
    for label, e in (("searched", errs), ("analytic", a_errs)):
        e = e[np.isfinite(e)]
        print(
            f"{label:>9} knee: median |err| {np.median(np.abs(e)):.1%}, worst |err| "
            f"{np.max(np.abs(e)):.1%}, worst unsafe (above truth) {max(0.0, e.max()):.1%}, "
            f"signed median {np.median(e):+.1%}  ({len(e)} cases)"
        )
    e = errs[np.isfinite(errs)]
    ok = (
        np.median(np.abs(e)) <= TARGET_MEDIAN
        and np.max(np.abs(e)) <= TARGET_WORST
        and e.max() <= TARGET_UNSAFE
    )
    print(
        f"targets (searched): median <= {TARGET_MEDIAN:.0%}, worst <= {TARGET_WORST:.0%}, "
        f"unsafe <= {TARGET_UNSAFE:.0%}: {'MET' if ok else 'MISSED'}"
    )
    print(
        f"search: {np.mean([r[3] for r in rows]):.1f} simulations and "
        f"{np.mean([r[2] for r in rows]):.1f} s per knee on average; "
        f"bench wall {time.perf_counter() - began:.0f} s"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
