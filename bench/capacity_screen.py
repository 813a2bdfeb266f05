"""The capacity planner's analytic screen (issue #13): its speed, and its knee against the
simulator's brute-force knee.

1. Speed: enumerates and screens a candidate space of at least 1,000 configurations for one
   pool (cold: predictors built inside the timing) and prints candidates screened, wall
   seconds and candidates per second (target: >= 1,000 in <= 2 s on the 2-core dev machine).
2. Accuracy: for a dozen pools x candidates (models, GPUs, TP, fp8, prompt/output shapes,
   prefixes, burstiness, SLOs), the analytic knee (models/capacity/analytic.py) beside the
   simulator's knee -- the highest rate per replica whose simulated p95 TTFT, ITL and E2E meet
   the SLO, found by bracketing and bisection on the rate to 2 % -- and the
   signed error (analytic / simulated - 1; positive = optimistic, on the unsafe side), with the
   median and worst |error|.

    .venv/bin/python bench/capacity_screen.py [--quick]

The simulated knee is models/capacity/search.find_knee's (pools.pool_requests' traffic,
measured over the run's steady window); tests/test_capacity_analytic.py uses the same cases.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.capacity.analytic import analytic_knee, screen
from models.capacity.candidates import CandidateSpace, enumerate_candidates
from models.capacity.search import find_knee
from models.capacity.types import AppProfile, Candidate, Pool, Slo, SloClass


def make_app(
    name: str,
    model: str,
    *,
    prompt: tuple[int, int],
    output: tuple[int, int],
    prefix_len: int = 0,
    burstiness: float = 1.0,
    seed: int = 0,
    samples: int = 400,
) -> AppProfile:
    """An app with flat traffic and lengths uniform in the given (low, high) ranges; every
    request longer than the prefix carries it (the hit rate that says so)."""
    rng = np.random.default_rng(seed)
    p = rng.integers(prompt[0], prompt[1] + 1, samples)
    o = rng.integers(output[0], output[1] + 1, samples)
    hit = prefix_len * float(np.mean(p > prefix_len)) / float(p.mean()) if prefix_len else 0.0
    return AppProfile(
        app=name,
        model=model,
        hourly_requests=tuple([3600.0] * 168),
        lengths=tuple((int(a), int(b)) for a, b in zip(p, o, strict=True)),
        prefix_len=prefix_len,
        prefix_hit_rate=hit,
        burstiness=burstiness,
    )


def make_pool(model: str, apps: tuple[AppProfile, ...], slo: Slo) -> Pool:
    return Pool(f"interactive/{model}", SloClass.INTERACTIVE, model, apps, slo)


def accuracy_cases() -> list[tuple[str, Pool, Candidate]]:
    """A dozen pools x candidates spanning the space the planner screens."""
    m8, m70 = "llama-3.1-8b", "llama-3.1-70b"
    chat8 = make_app("chat", m8, prompt=(200, 1200), output=(50, 300), prefix_len=256)
    rag8 = make_app("rag", m8, prompt=(2000, 6000), output=(100, 300), prefix_len=1024, seed=1)
    code8 = make_app("code", m8, prompt=(500, 3000), output=(200, 800), burstiness=0.5, seed=2)
    summ8 = make_app("summ", m8, prompt=(3000, 8000), output=(200, 600), seed=3)
    chat70 = make_app("chat", m70, prompt=(200, 1200), output=(50, 300), prefix_len=256, seed=4)
    agent70 = make_app("agent", m70, prompt=(1000, 4000), output=(50, 200), prefix_len=512, seed=5)
    tight = Slo(ttft_p95_s=0.5, itl_p95_s=0.05, e2e_p95_s=20.0)
    loose = Slo(ttft_p95_s=2.0, itl_p95_s=0.1, e2e_p95_s=60.0)
    e2e_only = Slo(e2e_p95_s=30.0)
    ttft_only = Slo(ttft_p95_s=1.0)

    def cand(model: str, gpu: str, tp: int = 1, dtype: str = "auto", kv: str = "auto",
             seqs: int | None = None, tokens: int | None = None) -> Candidate:  # fmt: skip
        return Candidate(model, gpu, tp, dtype, kv, seqs, tokens, True, 3.0)

    return [
        ("chat 8B 1xH100 tight", make_pool(m8, (chat8,), tight), cand(m8, "H100")),
        ("chat 8B 1xH200 fp8 loose", make_pool(m8, (chat8,), loose), cand(m8, "H200", 1, "fp8")),
        ("rag 8B 1xH100 tight", make_pool(m8, (rag8,), tight), cand(m8, "H100")),
        ("rag 8B 1xH200 tokens=2048", make_pool(m8, (rag8,), loose),
         cand(m8, "H200", tokens=2048)),
        ("code 8B bursty 1xH100", make_pool(m8, (code8,), tight), cand(m8, "H100")),
        ("summ 8B e2e-only 1xH100", make_pool(m8, (summ8,), e2e_only), cand(m8, "H100")),
        ("chat+rag 8B 1xH100 seqs=64", make_pool(m8, (chat8, rag8), loose),
         cand(m8, "H100", seqs=64)),
        ("chat 8B ttft-only 1xH100 kv-fp8", make_pool(m8, (chat8,), ttft_only),
         cand(m8, "H100", kv="fp8")),
        ("chat 70B 4xH100", make_pool(m70, (chat70,), tight), cand(m70, "H100", 4)),
        ("chat 70B 2xH200 fp8", make_pool(m70, (chat70,), loose), cand(m70, "H200", 2, "fp8")),
        ("agent 70B 8xH100", make_pool(m70, (agent70,), tight), cand(m70, "H100", 8)),
        ("agent 70B 4xH200 fp8 kv-fp8", make_pool(m70, (agent70,), loose),
         cand(m70, "H200", 4, "fp8", "fp8")),
    ]  # fmt: skip


def speed(repeats: int = 1) -> tuple[int, float]:
    """(candidates screened, wall seconds) for a >= 1,000-candidate space, cold caches."""
    pool = accuracy_cases()[0][1]
    space = CandidateSpace(
        gpus=("H100", "H200", "A100-80GB"),
        max_num_seqs=(64, 128, 256, None),
        max_num_batched_tokens=(2048, 4096, 8192, None),
        prefix_caching=(True, False),
        prices={"H100": 3.0, "H200": 4.0, "A100-80GB": 2.0},
    )
    start = time.perf_counter()
    for _ in range(repeats):
        feasible, infeasible = enumerate_candidates(pool.model, space, max_context=16000)
        screened = screen(pool, 50.0, [*feasible, *(c for c, _ in infeasible)])
    return len(screened), (time.perf_counter() - start) / repeats


def accuracy(cases: int | None = None) -> list[tuple[str, str, float, float]]:
    """(case, binding, analytic knee, simulated knee) for the first ``cases`` accuracy cases:
    the simulated knee is search.find_knee's (bracketed from the analytic one, to 2 %)."""
    rows = []
    for name, pool, candidate in accuracy_cases()[:cases]:
        knee, binding = analytic_knee(pool, candidate)
        simulated, _ = find_knee(pool, candidate, guess=knee)
        rows.append((name, binding, knee, simulated))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 4 accuracy cases only")
    args = parser.parse_args(argv)

    count, wall = speed()
    print(f"screened {count} candidates in {wall:.2f} s: {count / wall:,.0f} candidates/s")

    print(f"\n{'case':34} {'binding':8} {'analytic':>9} {'simulated':>9} {'error':>7}")
    errors = []
    for name, binding, knee, sim in accuracy(4 if args.quick else None):
        err = knee / sim - 1 if sim > 0 else math.inf
        errors.append(err)
        print(f"{name:34} {binding:8} {knee:9.2f} {sim:9.2f} {err:+7.1%}")
    absolute = np.abs(errors)
    print(
        f"\nknee error over {len(errors)} cases: median |error| {np.median(absolute):.1%}, "
        f"worst {absolute.max():.1%}, most optimistic {max(errors):+.1%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
