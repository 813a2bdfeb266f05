"""Traffic forecast back-test (issue #13): the capacity planner's hourly forecast
(models/capacity/forecast.py) against the seasonal-naive forecast (same hour last week), and
how often its P10-P90 band holds the actual hour. Targets: MASE < 1, coverage 80 ± 5 %.

    .venv/bin/python bench/traffic_forecast.py                 # the demo's traffic model
    .venv/bin/python bench/traffic_forecast.py --db LEDGER.duckdb   # a ledger's own history

(a) Histories drawn from the demo's own traffic model: every app of models/data/workload.yaml,
its arrival intensity (models/workload/arrivals.py: daily and weekly curves, random bursts)
integrated over 1-minute bins and drawn as Poisson counts, summed per UTC hour, over --weeks
weeks (seeded). Arrivals are tasks; the forecast is of the series it is given, so tasks stand
in for requests here. Each app is run as drawn ("flat") and with a compounding trend of
--trend per week on top ("trend"), the case the damped trend is for.

(b) With --db, the hourly requests per app of a ledger's mart_requests (read through Storage).

Each series is back-tested at --origins rolling origins --step hours apart, the latest one
--horizon hours before the history ends; each forecast sees only the history before it and
reads its band off its own past errors (nothing is fitted across origins). Overall: the mean
MASE of the series, the pooled coverage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from models.capacity.forecast import Backtest, backtest  # noqa: E402
from models.workload.arrivals import draw_bursts, intensity  # noqa: E402
from models.workload.config import load_workload  # noqa: E402

START = datetime(2025, 1, 6, tzinfo=UTC)  # a Monday, 00:00 UTC
BIN_S = 60.0
HOUR_S = 3600
MASE_TARGET = 1.0
COVERAGE_TARGET = (0.75, 0.85)


def demo_histories(weeks: int, seed: int, trend: float) -> dict[str, np.ndarray]:
    """Hourly arrivals of every demo app over `weeks` weeks, flat and with `trend` per week."""
    workload = load_workload()
    start = START.timestamp()
    duration = weeks * 168 * HOUR_S
    edges = np.arange(start, start + duration, BIN_S)
    out: dict[str, np.ndarray] = {}
    for i, app in enumerate(workload.apps):
        rng = np.random.default_rng([seed, i])
        bursts = draw_bursts(app.arrivals, rng, start, duration)
        rate = intensity(app.arrivals, edges, BIN_S, bursts) * BIN_S
        growth = (1 + trend) ** ((edges - start) / (168 * HOUR_S))
        for label, mean in (("flat", rate), ("trend", rate * growth)):
            counts = rng.poisson(mean)
            out[f"{app.name} ({label})"] = counts.reshape(-1, int(HOUR_S / BIN_S)).sum(axis=1)
    return out


def ledger_histories(db: Path) -> tuple[dict[str, np.ndarray], float]:
    """Hourly requests per app of a ledger (every hour between its first and last, 0 if none)."""
    from inferledger.core.storage import Storage

    with Storage(db, read_timeout_s=600, memory_limit="2GB", threads=2) as storage:
        rows = storage.fetchall(
            """
            select hour, coalesce(app, '(no app)'), count(*)
            from mart_requests group by all order by 1
            """
        )
    if not rows:
        raise SystemExit(f"{db}: mart_requests has no rows")
    first = rows[0][0].timestamp()
    hours = int((rows[-1][0].timestamp() - first) // HOUR_S) + 1
    out: dict[str, np.ndarray] = {}
    for hour, app, count in rows:
        series = out.setdefault(app, np.zeros(hours))
        series[int((hour.timestamp() - first) // HOUR_S)] += count
    return out, first


def run(
    histories: dict[str, np.ndarray], start: float, args: argparse.Namespace
) -> dict[str, Backtest]:
    results = {}
    print(f"{'series':<36} {'hours':>6} {'origins':>7} {'MASE':>6} {'rel MAE':>8} {'P10-P90':>8}")
    for name, x in histories.items():
        r = backtest(x, start, horizon_h=args.horizon, origins=args.origins, step_h=args.step)
        results[name] = r
        print(
            f"{name:<36} {x.size:>6} {r.origins:>7} {r.mase:>6.3f} {r.relative_mae:>8.3f} "
            f"{r.coverage:>7.1%}"
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", help="back-test a ledger's mart_requests instead of the demo")
    parser.add_argument("--weeks", type=int, default=12, help="demo history in weeks (12)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--trend", type=float, default=0.02, help="demo trend per week (0.02)")
    parser.add_argument("--horizon", type=int, default=168, help="hours ahead (168)")
    parser.add_argument("--origins", type=int, default=28)
    parser.add_argument("--step", type=int, default=24, help="hours between origins (24)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    if args.db:
        histories, start = ledger_histories(Path(args.db))
    else:
        histories, start = demo_histories(args.weeks, args.seed, args.trend), START.timestamp()
    results = run(histories, start, args)
    seconds = time.perf_counter() - started

    mase = float(np.mean([r.mase for r in results.values()]))
    hours = sum(r.hours for r in results.values())
    coverage = sum(r.coverage * r.hours for r in results.values()) / hours
    ok_mase = mase < MASE_TARGET and all(r.mase < MASE_TARGET for r in results.values())
    ok_cover = COVERAGE_TARGET[0] <= coverage <= COVERAGE_TARGET[1]
    print(
        f"\noverall: mean MASE {mase:.3f} (each < 1: {'ok' if ok_mase else 'MISSED'}), "
        f"P10-P90 covers {coverage:.1%} of {hours} held-out hours "
        f"(80 +- 5 %: {'ok' if ok_cover else 'MISSED'}); {seconds:.1f} s"
    )
    print(f"method (latest origin): {next(iter(results.values())).method}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "overall": {"mase": mase, "coverage": coverage, "hours": hours},
                    "series": {k: r.to_dict() for k, r in results.items()},
                },
                indent=1,
            )
        )
    return 0 if ok_mase and ok_cover else 1


if __name__ == "__main__":
    raise SystemExit(main())
