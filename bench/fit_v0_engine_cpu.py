"""Refit models/serving/engine_era.py's V0_ENGINE_CPU_SCALE on the V0 rows of
bench/data/published_runs.yaml that are `split: fit` (holdout rows are never simulated here).

For each scale on the grid, every fit V0 row is simulated (bench/fidelity.py, one seed) and the
median |error| of their scored metrics is printed; the smallest is the fit. Rerun it whenever the
step-time model changes (the scale absorbs what V0's steps cost beyond it).

    .venv/bin/python bench/fit_v0_engine_cpu.py [--grid 1,5,7,8,9,10,11,12,14]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fidelity

import models.serving.engine_era as engine_era


def errors_at(scale: float, runs: list[fidelity.PublishedRun]) -> list[float]:
    """Scored errors (percent) of the runs with V0_ENGINE_CPU_SCALE = scale."""
    engine_era.V0_ENGINE_CPU_SCALE = scale
    out: list[float] = []
    for run in runs:
        for line in fidelity.format_rows([fidelity.simulate_row(run)])[1:]:
            if line.startswith("  ") and "not scored" not in line:
                out.append(float(line.split()[-1].rstrip("%")))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", default="1,5,7,8,9,10,11,12,14")
    args = parser.parse_args(argv)
    runs = [
        r
        for r in fidelity.load_runs()
        if r.split == "fit" and r.era == "v0" and r.conditions.get("engine") == "v0"
    ]
    print(f"fit rows: {', '.join(r.id for r in runs)}")
    best: tuple[float, float] | None = None
    for scale in (float(x) for x in args.grid.split(",")):
        errs = errors_at(scale, runs)
        med = statistics.median(abs(e) for e in errs)
        print(
            f"scale {scale:5.1f}: median |error| {med:5.1f}%  "
            + " ".join(f"{e:+.0f}" for e in errs)
        )
        if best is None or med < best[1]:
            best = (scale, med)
    if best is not None:
        print(f"best: {best[0]:g} (median |error| {best[1]:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
