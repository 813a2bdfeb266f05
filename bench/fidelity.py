"""Serving fidelity: published vLLM runs reproduced by the simulator, and scored (issue #11).

Reads bench/data/published_runs.yaml (every row cites its source and states its conditions as
`inferledger simulate` scenario fields), runs each row the simulator can express through the
same code the command uses (scenario_from_mapping -> run_scenario -> summarize_run), and prints
per row the truth, the prediction and the signed % error of every reported metric; then the
median |error| per metric family (E2E, ITL/TPOT, TTFT, throughput) for the fit and the held-out
rows, beside BLIS's published figures and issue #11's targets; then the rows it cannot express,
with the reason. docs/fidelity.md shows a run and explains the method.

    nice -n 15 .venv/bin/python bench/fidelity.py [--rows ID,...] [--split fit|holdout|all]
                                                  [--seeds N] [--data PATH] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inferledger.core.errors import BadInputError
from models.serving.scenario import ScenarioConfig, scenario_from_mapping
from models.serving.scenario_run import resolve_engine, run_scenario, summarize_run

DATA = Path(__file__).resolve().parent / "data" / "published_runs.yaml"
SPLITS = ("fit", "holdout")
ERAS = ("v1", "v0", "unknown")
PERCENTILES = (90.0, 99.0)

#: BLIS (inference-sim) on its 36 held-out runs: median of per-run MAPE ("How BLIS learns
#: latency", docs/blog/posts/how-blis-learns-latency.md in inference-sim/inference-sim:
#: E2E mean 6.7 %, ITL mean 7.1 %, TTFT mean 17.6 %). It reports no throughput error.
ANCHOR = {"e2e": 6.7, "itl": 7.1, "ttft": 17.6}
#: issue #11's goal: <= 6 % median error on E2E and ITL, <= 12 % on TTFT.
TARGET = {"e2e": 6.0, "itl": 6.0, "ttft": 12.0}

#: metric family -> the truth metrics that stand for it, in order of preference: a row counts
#: once per family, with the first of these it reports (means first, as BLIS reports means).
FAMILIES: dict[str, tuple[str, ...]] = {
    "e2e": ("mean_e2el_ms", "median_e2el_ms", "batch_latency_ms"),
    "itl": ("mean_itl_ms", "median_itl_ms", "mean_tpot_ms", "median_tpot_ms"),
    "ttft": ("mean_ttft_ms", "median_ttft_ms"),
    "throughput": ("output_throughput", "request_throughput", "total_token_throughput"),
    "tail_p99": ("p99_ttft_ms", "p99_e2el_ms", "p99_itl_ms", "p99_tpot_ms"),
}
_LATENCIES = ("ttft", "tpot", "itl", "e2el")
#: every metric a row's truth may carry: `vllm bench serve` result keys, plus batch_latency_ms
#: (`vllm bench latency`'s time for one batch = the simulated first send to last token)
METRICS: frozenset[str] = frozenset(
    {
        "duration",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "batch_latency_ms",
    }
    | {f"{stat}_{m}_ms" for m in _LATENCIES for stat in ("mean", "median", "p90", "p99")}
)


class DataError(ValueError):
    """The data file breaks a rule; the message names the row."""


@dataclass(frozen=True, slots=True)
class PublishedRun:
    """One published measurement: where it is, what ran, what it reported."""

    id: str
    split: str
    source: Mapping[str, Any]
    engine: Mapping[str, Any]
    conditions: Mapping[str, Any]
    truth: Mapping[str, float]
    approximation: str | None = None
    not_expressible: str | None = None
    not_comparable: tuple[str, ...] = ()
    hardware: str | None = None

    @property
    def era(self) -> str:
        return str(self.engine["era"])

    @property
    def expressible(self) -> bool:
        return self.not_expressible is None

    def scenario(self) -> ScenarioConfig:
        """The row's conditions as the scenario `inferledger simulate --scenario` would read."""
        return scenario_from_mapping(dict(self.conditions), where=self.id)

    def hardware_label(self) -> str:
        if self.hardware:
            return self.hardware
        tp = int(self.conditions.get("tensor_parallel_size", 1))
        return f"{tp} x {self.conditions.get('gpu', '?')}"


def _require(cond: bool, row_id: str, message: str) -> None:
    if not cond:
        raise DataError(f"{row_id}: {message}")


def parse_run(raw: Any, index: int) -> PublishedRun:
    """One row of the data file, checked: a cited source, an engine era, conditions, numeric
    truth of known metrics."""
    if not isinstance(raw, Mapping):
        raise DataError(f"row {index}: must be a mapping")
    row_id = str(raw.get("id") or f"row {index}")
    known = {
        "id",
        "split",
        "source",
        "engine",
        "conditions",
        "truth",
        "recorded",
        "approximation",
        "not_expressible",
        "not_comparable",
        "hardware",
    }
    unknown = sorted(set(raw) - known)
    _require(not unknown, row_id, f"unknown field(s) {', '.join(unknown)}")
    _require(bool(raw.get("id")), row_id, "id is required")
    _require(raw.get("split") in SPLITS, row_id, f"split must be one of {', '.join(SPLITS)}")
    source = raw.get("source")
    _require(isinstance(source, Mapping), row_id, "source must be a mapping")
    cited = bool(source.get("url")) or all(source.get(k) for k in ("repo", "path", "commit"))
    _require(cited, row_id, "source needs a url, or repo + path + commit")
    _require(bool(source.get("quote")), row_id, "source needs a quote (where the numbers are)")
    _require(bool(source.get("date")), row_id, "source needs a date (or 'not stated')")
    engine = raw.get("engine")
    _require(isinstance(engine, Mapping), row_id, "engine must be a mapping")
    _require(engine.get("era") in ERAS, row_id, f"engine.era must be one of {', '.join(ERAS)}")
    _require(bool(engine.get("version")), row_id, "engine.version is required")
    conditions = raw.get("conditions")
    _require(isinstance(conditions, Mapping) and bool(conditions), row_id, "conditions needed")
    truth = raw.get("truth")
    _require(isinstance(truth, Mapping) and bool(truth), row_id, "truth needs a metric")
    for metric, value in truth.items():
        _require(metric in METRICS, row_id, f"unknown truth metric {metric!r}")
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        _require(ok and math.isfinite(value) and value > 0, row_id, f"{metric} must be > 0")
    skip = tuple(raw.get("not_comparable") or ())
    _require(set(skip) <= set(truth), row_id, "not_comparable names a metric not in truth")
    not_expressible = raw.get("not_expressible")
    if not_expressible is None:
        _require(
            bool(conditions.get("model")) and bool(conditions.get("gpu")),
            row_id,
            "an expressible row needs conditions.model and conditions.gpu",
        )
    return PublishedRun(
        id=str(raw["id"]),
        split=str(raw["split"]),
        source=dict(source),
        engine=dict(engine),
        conditions=dict(conditions),
        truth={k: float(v) for k, v in truth.items()},
        approximation=raw.get("approximation"),
        not_expressible=not_expressible,
        not_comparable=skip,
        hardware=raw.get("hardware"),
    )


def load_runs(path: str | Path = DATA) -> list[PublishedRun]:
    """Every row of the data file, checked; ids unique."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, Mapping) or not isinstance(data.get("rows"), list):
        raise DataError(f"{path}: expected a mapping with a 'rows' list")
    runs = [parse_run(raw, i) for i, raw in enumerate(data["rows"])]
    seen: set[str] = set()
    for run in runs:
        if run.id in seen:
            raise DataError(f"{run.id}: id used twice")
        seen.add(run.id)
    return runs


def check_expressible(run: PublishedRun) -> None:
    """Build the row's scenario and resolve its engine (KV blocks, scheduler limits) without
    simulating: a row marked expressible must pass."""
    resolve_engine(run.scenario())


# --- scoring ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetricError:
    metric: str
    truth: float
    predicted: float
    scored: bool  # False for a metric the row records as not comparable
    low: float | None = None  # the smallest and largest prediction over the seeds run
    high: float | None = None

    @property
    def error_pct(self) -> float:
        """Signed: positive when the simulator predicts more (slower latency, higher rate)."""
        return 100.0 * (self.predicted - self.truth) / self.truth


@dataclass(frozen=True, slots=True)
class RowResult:
    run: PublishedRun
    metrics: tuple[MetricError, ...]
    wall_s: float
    engine: Mapping[str, Any] = field(default_factory=dict)

    def family_error(self, family: str) -> MetricError | None:
        """The row's representative metric of a family (FAMILIES' order), if it reports one."""
        by_name = {m.metric: m for m in self.metrics if m.scored}
        for name in FAMILIES[family]:
            if name in by_name:
                return by_name[name]
        return None


def predicted(summary: Mapping[str, Any], metric: str) -> float:
    """The simulator's value of a truth metric, from summarize_run's keys."""
    if metric == "batch_latency_ms":
        return 1000.0 * float(summary["run_duration"])
    return float(summary[metric])


def simulate_row(run: PublishedRun, seeds: int = 1) -> RowResult:
    """Run one expressible row as `inferledger simulate` would, and score every metric. With
    seeds > 1 the workload is drawn with seeds seed, seed+1, ... and the prediction is their
    mean (low/high: the range), for rows whose lengths or arrivals are random draws standing in
    for a sample the source does not publish."""
    started = time.perf_counter()
    base = run.scenario()
    values: dict[str, list[float]] = {m: [] for m in run.truth}
    engine: Mapping[str, Any] = {}
    for i in range(max(1, seeds)):
        simulated = run_scenario(replace(base, seed=base.seed + i))
        summary = summarize_run(simulated, percentiles=PERCENTILES)
        engine = simulated.engine.to_dict()
        for m in run.truth:
            values[m].append(predicted(summary, m))
    metrics = tuple(
        MetricError(
            m,
            v,
            statistics.fmean(values[m]),
            m not in run.not_comparable,
            min(values[m]) if seeds > 1 else None,
            max(values[m]) if seeds > 1 else None,
        )
        for m, v in run.truth.items()
    )
    return RowResult(run, metrics, time.perf_counter() - started, engine)


def family_summary(
    results: Iterable[RowResult], *, splits: Sequence[str], eras: Sequence[str] = ERAS
) -> dict[str, dict[str, float | int | None]]:
    """Per family: rows counted, median |error| and median signed error (%), over the results
    of the given splits and engine eras."""
    chosen = [r for r in results if r.run.split in splits and r.run.era in eras]
    out: dict[str, dict[str, float | int | None]] = {}
    for family in FAMILIES:
        errors = [e.error_pct for r in chosen if (e := r.family_error(family)) is not None]
        out[family] = {
            "rows": len(errors),
            "median_abs_pct": statistics.median(abs(e) for e in errors) if errors else None,
            "median_signed_pct": statistics.median(errors) if errors else None,
        }
    return out


def summaries(results: Sequence[RowResult]) -> dict[str, dict[str, dict[str, Any]]]:
    """The summary blocks the report prints, each for fit, holdout and both: every run row; the
    rows not run on the old V0 engine (V1 or unstated); the V1 (current engine) rows alone."""
    groups = {"all engines": ERAS, "V1 + unstated": ("v1", "unknown"), "V1 only": ("v1",)}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for label, eras in groups.items():
        for split, splits in (("fit", ("fit",)), ("holdout", ("holdout",)), ("all", SPLITS)):
            out[f"{label} / {split}"] = family_summary(results, splits=splits, eras=eras)
    return out


# --- the report -------------------------------------------------------------------------------


def _num(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


def format_rows(results: Sequence[RowResult]) -> list[str]:
    lines = [f"{'row / metric':<44} {'truth':>10} {'predicted':>10} {'error':>8}"]
    for r in results:
        run = r.run
        lines.append(
            f"{run.id}  [{run.split}, {run.era}; {run.hardware_label()}, "
            f"{run.conditions.get('model')}; {r.wall_s:.1f} s]"
        )
        for m in r.metrics:
            note = "" if m.scored else "  (not scored)"
            if m.low is not None and m.high is not None:
                note = f"  [seeds: {_num(m.low)} to {_num(m.high)}]{note}"
            lines.append(
                f"  {m.metric:<42} {_num(m.truth):>10} {_num(m.predicted):>10} "
                f"{m.error_pct:>+7.1f}%{note}"
            )
    return lines


def format_summary(blocks: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    header = f"{'median |error| (rows)':<28}" + "".join(f"{f:>16}" for f in FAMILIES)
    lines = [header]
    for label, fam in blocks.items():
        cells = []
        for family in FAMILIES:
            s = fam[family]
            value = s["median_abs_pct"]
            cells.append(f"{'—':>16}" if value is None else f"{value:>9.1f}% ({s['rows']:>2})")
        lines.append(f"{label:<28}" + "".join(cells))
    anchor = "".join(f"{ANCHOR[f]:>15.1f}%" if f in ANCHOR else f"{'—':>16}" for f in FAMILIES)
    target = "".join(f"{TARGET[f]:>15.1f}%" if f in TARGET else f"{'—':>16}" for f in FAMILIES)
    lines.append(f"{'BLIS (36 runs, anchor)':<28}" + anchor)
    lines.append(f"{'issue #11 target':<28}" + target)
    return lines


def format_not_expressible(runs: Sequence[PublishedRun]) -> list[str]:
    lines = []
    for run in runs:
        lines.append(f"{run.id}  [{run.split}; {run.hardware_label()}]")
        lines.append(f"  not expressible: {' '.join(str(run.not_expressible).split())}")
    return lines


def report_json(results: Sequence[RowResult], skipped: Sequence[PublishedRun]) -> dict[str, Any]:
    return {
        "rows": [
            {
                "id": r.run.id,
                "split": r.run.split,
                "era": r.run.era,
                "hardware": r.run.hardware_label(),
                "engine_version": r.run.engine["version"],
                "approximation": r.run.approximation,
                "wall_s": r.wall_s,
                "simulated_engine": dict(r.engine),
                "metrics": [
                    {
                        "metric": m.metric,
                        "truth": m.truth,
                        "predicted": m.predicted,
                        "error_pct": m.error_pct,
                        "scored": m.scored,
                        "predicted_low": m.low,
                        "predicted_high": m.high,
                    }
                    for m in r.metrics
                ],
            }
            for r in results
        ],
        "summary": summaries(results),
        "not_expressible": [
            {"id": s.id, "split": s.split, "reason": s.not_expressible} for s in skipped
        ],
        "anchor_blis_median_pct": ANCHOR,
        "target_median_pct": TARGET,
    }


def select(runs: Sequence[PublishedRun], ids: str | None, split: str) -> list[PublishedRun]:
    chosen = list(runs)
    if ids:
        wanted = [i.strip() for i in ids.split(",") if i.strip()]
        known = {r.id for r in runs}
        missing = [i for i in wanted if i not in known]
        if missing:
            raise BadInputError(f"--rows: unknown row id(s) {', '.join(missing)}")
        chosen = [r for r in runs if r.id in wanted]
    if split != "all":
        chosen = [r for r in chosen if r.split == split]
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DATA), help="published runs YAML")
    parser.add_argument("--rows", help="comma-separated row ids (default: every row)")
    parser.add_argument("--split", choices=("fit", "holdout", "all"), default="all")
    parser.add_argument("--json", metavar="OUT", help="write rows, errors and summary as JSON")
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="workload seeds per row; the prediction is their mean (default 1: the row's seed)",
    )
    args = parser.parse_args(argv)
    try:
        chosen = select(load_runs(args.data), args.rows, args.split)
    except (DataError, BadInputError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runnable = [r for r in chosen if r.expressible]
    skipped = [r for r in chosen if not r.expressible]
    if args.seeds < 1:
        print("error: --seeds must be >= 1", file=sys.stderr)
        return 2
    results = []
    for run in runnable:
        try:
            results.append(simulate_row(run, args.seeds))
        except BadInputError as exc:  # conditions the simulator refuses: name the row
            print(f"error: {run.id}: {exc}", file=sys.stderr)
            return 2
    print("\n".join(format_rows(results)))
    print()
    print("\n".join(format_summary(summaries(results))))
    if skipped:
        print()
        print("\n".join(format_not_expressible(skipped)))
    if args.json:
        text = json.dumps(report_json(results, skipped), indent=2, allow_nan=False)
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
