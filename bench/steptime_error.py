"""Step-time model: its error against operator timings and whole-model steps, and its cost.

Refits the coefficients on an operator-timing CSV and a whole-step CSV (default: the bundled H200
measurements, the shipped fit) and prints, per operator family, rows and median / worst relative
error; then every whole step's measured and predicted time and signed error, marked fitted or
held out, with the medians of each set; then the cost of ``step_time_s`` and
``decode_steps_time_s`` in µs per call on a realistic mix of step shapes.

    .venv/bin/python bench/steptime_error.py [--csv PATH] [--steps PATH] [--held-out auto|none]
                                             [--gpu h200] [--calls 200000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.calibration import calibrate, step_table
from models.execution_time import StepShape
from models.steptime import RooflinePredictor, build_predictor


def mixed_shapes(count: int, seed: int = 7) -> list[StepShape]:
    """Steps as the simulator makes them: mostly decode batches, a quarter with a prefill chunk."""
    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        decode = rng.randint(1, 256)
        context = decode * rng.randint(200, 8000)
        if rng.random() < 0.25:
            chunk = rng.choice((256, 512, 1024, 2048))
            before = rng.randint(0, 4096)
            shapes.append(StepShape(decode, context, chunk, chunk * (before + chunk / 2), 1))
        else:
            shapes.append(StepShape(decode, context))
    return shapes


def per_call_us(predictor: RooflinePredictor, shapes: list[StepShape], calls: int) -> float:
    f = predictor.step_time_s
    rounds = max(1, calls // len(shapes))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(rounds):
            for s in shapes:
                f(s)
        best = min(best, (time.perf_counter() - start) / (rounds * len(shapes)))
    return best * 1e6


def fast_forward_us(predictor: RooflinePredictor, calls: int) -> float:
    shape = StepShape(64, 64 * 1000)
    f = predictor.decode_steps_time_s
    start = time.perf_counter()
    for i in range(calls):
        f(shape, 1 + i % 500)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_csv = resources.files("models").joinpath("data", "h200-llama-ops.csv")
    default_steps = resources.files("models").joinpath("data", "h200-llama-steps.csv")
    parser.add_argument("--csv", default=str(default_csv), help="operator timings")
    parser.add_argument("--steps", default=str(default_steps), help="whole-step timings")
    parser.add_argument("--held-out", default="auto", choices=("auto", "none"))
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()

    start = time.perf_counter()
    result = calibrate(args.csv, args.gpu, steps_csv=args.steps, held_out=args.held_out)
    fit_s = time.perf_counter() - start
    print(f"operator timings: {result.source} ({result.rows} rows, fit in {fit_s:.2f} s)")
    print(f"whole steps: {args.steps} ({len(result.steps)} rows, held out: {args.held_out})")
    print(f"{'family':<15}{'rows':>5}{'median':>9}{'worst':>9}  worst row")
    for f in result.families:
        print(
            f"{f.family:<15}{f.rows:>5}{f.median_rel_error:>9.1%}{f.worst_rel_error:>9.1%}"
            f"  {f.worst_row}"
        )
    print()
    print("\n".join(step_table(result)))

    shapes = mixed_shapes(1000)
    start = time.perf_counter()
    predictor = build_predictor("llama-3.1-8b", "h200", "bf16", 1, coefficients=result.coefficients)
    build_ms = (time.perf_counter() - start) * 1e3
    tp4 = build_predictor("llama-3.1-70b", "h100", "bf16", 4, coefficients=result.coefficients)
    print()
    print(f"predictor_build_ms {build_ms:.1f}")
    print(f"step_time_s_us_per_call_8b_h200 {per_call_us(predictor, shapes, args.calls):.3f}")
    print(f"step_time_s_us_per_call_70b_h100_tp4 {per_call_us(tp4, shapes, args.calls):.3f}")
    eager = build_predictor(
        "llama-3.1-8b", "h200", coefficients=result.coefficients, cudagraph_max_tokens=0
    )
    print(f"step_time_s_us_per_call_8b_h200_eager {per_call_us(eager, shapes, args.calls):.3f}")
    print(f"decode_steps_time_s_us_per_call {fast_forward_us(predictor, args.calls // 4):.3f}")


if __name__ == "__main__":
    main()
