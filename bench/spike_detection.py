"""Spend-spike detection on injected spikes (issue #12: precision and recall >= 0.9, at most one
false alert per scope per week).

Each scope gets an hourly spend series of ``--warmup-weeks`` (history for the baseline only)
+ ``--weeks`` (scored) weeks:

    spend(h) = level x trend(h) x daily(h) x weekly(h) x noise(h) x spike(h)

- level: log-uniform $5 … $200 per hour (above the detector's min_baseline: a scope that
  usually costs cents is meant not to alert, tests/test_spike_detection.py checks that);
- daily: a business-hours bump peaking at a random hour 11-16 UTC, depth 30-80 %;
- weekly: Saturday and Sunday at 30-90 % of a weekday;
- trend: linear, -30 % … +40 % over the whole series;
- noise: lognormal, sigma 0.10-0.20 per scope (mean 1);
- spikes: about ``--spikes-per-week`` per scope (Poisson, uniform start hours, also in the
  warm-up weeks so baselines carry old spikes), size 2-6x, length 1-4 h.

Detection is the product's: every hour, once the hour is complete (tick at its end), each
scope's value is ``spike_ratio(spend, same_hour_of_week_baseline(...), min_baseline)`` (no
value with fewer than DEFAULT_MIN_WEEKS weeks of history), and one rule over all scopes goes
through ``models.alert_lifecycle.evaluate`` with the defaults of models/spike_detection.py.

Scoring: a spike covers its hours [start, end); an alert is *true* when it starts firing at a
tick in [start, end + 1 h] of a spike (during it or within the hour after), else *false*. A
spike is *detected* when an alert of its scope is firing at any tick in that interval.
precision = true alerts / alerts; recall = detected spikes / spikes (scored weeks only).

Seeds: the defaults were tuned on seeds 0-4 (``--seeds 0 1 2 3 4``); the held-out check is
seeds 100-104 (the default), never used while tuning.

    .venv/bin/python bench/spike_detection.py                     # held-out seeds 100-104
    .venv/bin/python bench/spike_detection.py --seeds 0 1 2 3 4   # tuning seeds
    .venv/bin/python bench/spike_detection.py --threshold 2.0 --resolve-threshold 1.4
    .venv/bin/python bench/spike_detection.py --baseline flat --threshold 3   # the contrast
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.alert_config import AlertRule, scope_key
from models.alert_lifecycle import Observation, OpenAlert, evaluate, is_open
from models.spike_detection import (
    DEFAULT_MIN_BASELINE,
    DEFAULT_MIN_WEEKS,
    DEFAULT_PENDING_S,
    DEFAULT_RESOLVE_S,
    DEFAULT_RESOLVE_THRESHOLD,
    DEFAULT_THRESHOLD,
    DEFAULT_WEEKS,
    same_hour_of_week_baseline,
    spike_ratio,
)

HOUR = timedelta(hours=1)
START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday


@dataclass(frozen=True)
class Spike:
    scope: int
    start: int  # hour index
    length: int
    size: float


@dataclass(frozen=True)
class Scenario:
    series: np.ndarray  # scopes x hours
    spikes: tuple[Spike, ...]


def make_scenario(
    rng: np.random.Generator, scopes: int, hours: int, spikes_per_week: float
) -> Scenario:
    t = np.arange(hours)
    hour_of_day = t % 24
    weekend = ((t // 24) % 7) >= 5
    series = np.empty((scopes, hours))
    spikes: list[Spike] = []
    for s in range(scopes):
        level = float(np.exp(rng.uniform(np.log(5), np.log(200))))
        peak = rng.uniform(11, 16)
        depth = rng.uniform(0.3, 0.8)
        bump = np.exp(-(((hour_of_day - peak) / 4.0) ** 2))
        daily = (1 - depth) + depth * 2 * bump
        weekly = np.where(weekend, rng.uniform(0.3, 0.9), 1.0)
        trend = 1 + rng.uniform(-0.3, 0.4) * t / hours
        sigma = rng.uniform(0.10, 0.20)
        noise = rng.lognormal(-(sigma**2) / 2, sigma, hours)
        spike = np.ones(hours)
        n = rng.poisson(spikes_per_week * hours / 168)
        for start in np.sort(rng.choice(hours - 4, size=n, replace=False)):
            length = int(rng.integers(1, 5))
            size = float(rng.uniform(2, 6))
            spike[start : start + length] = np.maximum(spike[start : start + length], size)
            spikes.append(Spike(s, int(start), length, size))
        series[s] = level * trend * daily * weekly * noise * spike
    return Scenario(series, tuple(spikes))


@dataclass
class Score:
    alerts: int = 0
    true_alerts: int = 0
    spikes: int = 0
    detected: int = 0
    missed_sizes: list[float] = field(default_factory=list)
    scope_weeks: float = 0.0

    @property
    def precision(self) -> float:
        return self.true_alerts / self.alerts if self.alerts else 1.0

    @property
    def recall(self) -> float:
        return self.detected / self.spikes if self.spikes else 1.0

    @property
    def false_per_scope_week(self) -> float:
        return (self.alerts - self.true_alerts) / self.scope_weeks


def run(
    seed: int,
    *,
    scopes: int,
    weeks: int,
    warmup_weeks: int,
    spikes_per_week: float,
    rule: AlertRule,
    min_baseline: float,
    baseline: str = "same-hour",
) -> Score:
    rng = np.random.default_rng(seed)
    hours = (warmup_weeks + weeks) * 168
    scenario = make_scenario(rng, scopes, hours, spikes_per_week)
    first = warmup_weeks * 168
    keys = [scope_key({"app": f"app-{s:03d}"}) for s in range(scopes)]
    index = [
        {START + h * HOUR: float(v) for h, v in enumerate(scenario.series[s])}
        for s in range(scopes)
    ]
    open_alerts: dict[str, OpenAlert] = {}
    fired: list[tuple[int, int]] = []  # (scope, tick hour index)
    firing: list[set[int]] = [set() for _ in range(scopes)]  # tick hours with a firing alert
    for h in range(first, hours):
        at = START + (h + 1) * HOUR  # the hour h is complete
        observations = []
        for s in range(scopes):
            spend = float(scenario.series[s, h])
            if baseline == "flat":  # the contrast: the mean of the trailing week
                value = spend / max(float(scenario.series[s, h - 168 : h].mean()), min_baseline)
            else:
                base = same_hour_of_week_baseline(index[s], START + h * HOUR, weeks=DEFAULT_WEEKS)
                value = (
                    None
                    if base.n_weeks < DEFAULT_MIN_WEEKS
                    else spike_ratio(spend, base, min_baseline=min_baseline)
                )
            observations.append(Observation(keys[s], value))
        for tr in evaluate(rule, open_alerts, observations, at):
            s = keys.index(tr.scope_key)
            if tr.event == "firing" and tr.alert.fired_at == at:
                fired.append((s, h + 1))
            if is_open(tr.alert):
                open_alerts[tr.scope_key] = tr.alert
            else:
                open_alerts.pop(tr.scope_key, None)
        for key, alert in open_alerts.items():
            if alert.state == "firing":
                firing[keys.index(key)].add(h + 1)
    score = Score(scope_weeks=scopes * weeks)
    windows: dict[int, list[tuple[int, int]]] = {}
    for spike in scenario.spikes:
        window = (spike.start, spike.start + spike.length + 1)  # tick hours, inclusive
        windows.setdefault(spike.scope, []).append(window)
        if spike.start < first:
            continue
        score.spikes += 1
        if any(t in firing[spike.scope] for t in range(window[0], window[1] + 1)):
            score.detected += 1
        else:
            score.missed_sizes.append(spike.size)
    score.alerts = len(fired)
    score.true_alerts = sum(
        any(lo <= tick <= hi for lo, hi in windows.get(s, ())) for s, tick in fired
    )
    return score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102, 103, 104])
    parser.add_argument("--scopes", type=int, default=50)
    parser.add_argument("--weeks", type=int, default=8)
    parser.add_argument("--warmup-weeks", type=int, default=DEFAULT_WEEKS)
    parser.add_argument("--spikes-per-week", type=float, default=1.0)
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    parser.add_argument("--resolve-threshold", type=float, default=DEFAULT_RESOLVE_THRESHOLD)
    parser.add_argument("--pending-s", type=int, default=DEFAULT_PENDING_S)
    parser.add_argument("--resolve-s", type=int, default=DEFAULT_RESOLVE_S)
    parser.add_argument("--min-baseline", type=float, default=DEFAULT_MIN_BASELINE)
    parser.add_argument(
        "--baseline",
        choices=("same-hour", "flat"),
        default="same-hour",
        help="flat: the contrast, the ratio to the trailing week's mean hourly spend",
    )
    args = parser.parse_args()
    rule = AlertRule(
        name="spend spike",
        kind="spend_spike",
        owner="bench",
        window_s=3600,
        threshold=args.threshold,
        resolve_threshold=args.resolve_threshold,
        group_by=("app",),
        pending_s=args.pending_s,
        resolve_s=args.resolve_s,
    )
    print(
        f"threshold {args.threshold} resolve {args.resolve_threshold} pending_s "
        f"{args.pending_s} resolve_s {args.resolve_s} min_baseline {args.min_baseline}, "
        f"baseline {args.baseline}; "
        f"{args.scopes} scopes x {args.weeks} weeks (+{args.warmup_weeks} warm-up), "
        f"{args.spikes_per_week} spikes/scope/week"
    )
    print(
        f"{'seed':>5} {'spikes':>7} {'alerts':>7} {'precision':>9} {'recall':>7} "
        f"{'false/scope/wk':>14} {'missed sizes':>14} {'s':>6}"
    )
    total = Score()
    for seed in args.seeds:
        t0 = time.perf_counter()
        score = run(
            seed,
            scopes=args.scopes,
            weeks=args.weeks,
            warmup_weeks=args.warmup_weeks,
            spikes_per_week=args.spikes_per_week,
            rule=rule,
            min_baseline=args.min_baseline,
            baseline=args.baseline,
        )
        missed = score.missed_sizes
        print(
            f"{seed:>5} {score.spikes:>7} {score.alerts:>7} {score.precision:>9.3f} "
            f"{score.recall:>7.3f} {score.false_per_scope_week:>14.3f} "
            f"{(f'{min(missed):.1f}-{max(missed):.1f}x' if missed else '-'):>14} "
            f"{time.perf_counter() - t0:>6.1f}"
        )
        total.alerts += score.alerts
        total.true_alerts += score.true_alerts
        total.spikes += score.spikes
        total.detected += score.detected
        total.scope_weeks += score.scope_weeks
        total.missed_sizes.extend(missed)
    print(
        f"{'all':>5} {total.spikes:>7} {total.alerts:>7} {total.precision:>9.3f} "
        f"{total.recall:>7.3f} {total.false_per_scope_week:>14.3f}"
    )
    ok = total.precision >= 0.9 and total.recall >= 0.9 and total.false_per_scope_week <= 1
    verdict = "met" if ok else "MISSED"
    print(f"target (precision, recall >= 0.9; <= 1 false alert/scope/week): {verdict}")


if __name__ == "__main__":
    main()
