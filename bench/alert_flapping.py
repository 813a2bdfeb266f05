"""A flapping metric through the alert lifecycle (issue #12: at most one alert and one resolve
per hysteresis window).

A metric crosses a rule's threshold back and forth — square and sine waves of several
periods, with and without Gaussian noise, and pure noise centred on the threshold — and goes
through ``models.alert_lifecycle.evaluate`` at 1-minute ticks for ``--days`` days, under
several rules (pending_s, resolve_s, and a resolve_threshold below threshold). For each run
it counts alerts (an alert starting to fire), resolves, cancelled pendings (no
notification) and notifications, and the most alerts and the most resolves in any window
of ``pending_s + resolve_s`` (the hysteresis window; sliding, half-open). Both must be <= 1.

The last rule, "no hysteresis" (pending 0, resolve 0, resolve_threshold = threshold), is
the contrast: what the same metric does to a rule without it (its window is one tick, so
compare the last column, the most alerts in any hour).

    .venv/bin/python bench/alert_flapping.py
    .venv/bin/python bench/alert_flapping.py --days 7 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.alert_config import AlertRule
from models.alert_lifecycle import Observation, OpenAlert, evaluate, is_open

START = datetime(2026, 3, 2, tzinfo=UTC)
TICK = timedelta(minutes=1)
THRESHOLD = 80.0
SCOPE = "{}"


@dataclass(frozen=True)
class Count:
    alerts: int
    resolves: int
    cancelled: int
    notifications: int
    max_alerts_per_window: int
    max_resolves_per_window: int
    max_alerts_per_hour: int


def max_in_window(times: list[datetime], window: timedelta) -> int:
    """The most event times in any half-open window [t, t + window)."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def run(rule: AlertRule, values: np.ndarray) -> Count:
    open_alerts: dict[str, OpenAlert] = {}
    fired: list[datetime] = []
    resolved: list[datetime] = []
    cancelled = notifications = 0
    for i, value in enumerate(values):
        at = START + i * TICK
        for tr in evaluate(rule, open_alerts, [Observation(SCOPE, float(value))], at):
            notifications += tr.notify
            if tr.event == "firing" and tr.alert.fired_at == at:
                fired.append(at)
            elif tr.event == "resolved":
                resolved.append(at)
            elif tr.event == "cancelled":
                cancelled += 1
            if is_open(tr.alert):
                open_alerts[tr.scope_key] = tr.alert
            else:
                open_alerts.pop(tr.scope_key, None)
    window = timedelta(seconds=max(rule.pending_s + rule.resolve_s, 60))
    return Count(
        len(fired),
        len(resolved),
        cancelled,
        notifications,
        max_in_window(fired, window),
        max_in_window(resolved, window),
        max_in_window(fired, timedelta(hours=1)),
    )


def waveforms(minutes: int, rng: np.random.Generator) -> list[tuple[str, Callable[[], np.ndarray]]]:
    t = np.arange(minutes, dtype=float)
    out: list[tuple[str, Callable[[], np.ndarray]]] = []
    for period in (2, 4, 7, 10, 15, 20, 30, 45, 60, 120):
        out.append(
            (
                f"square {period:>3} min",
                lambda p=period: np.where((t % p) < p / 2, THRESHOLD + 10, THRESHOLD - 15),
            )
        )
        for sigma in (0.0, 5.0):
            out.append(
                (
                    f"sine   {period:>3} min noise {sigma:g}",
                    lambda p=period, s=sigma: (
                        THRESHOLD - 2 + 15 * np.sin(2 * math.pi * t / p) + rng.normal(0, s, minutes)
                    ),
                )
            )
    for sigma in (3.0, 10.0, 25.0):
        out.append((f"noise sigma {sigma:g}", lambda s=sigma: rng.normal(THRESHOLD, s, minutes)))
    out.append(
        (
            "random walk",
            lambda: THRESHOLD + np.clip(np.cumsum(rng.normal(0, 2, minutes)), -30, 30),
        )
    )
    return out


def rules() -> list[AlertRule]:
    def rule(name: str, pending_s: int, resolve_s: int, resolve_threshold: float) -> AlertRule:
        return AlertRule(
            name=name,
            kind="kv_pressure",
            owner="bench",
            window_s=300,
            threshold=THRESHOLD,
            resolve_threshold=resolve_threshold,
            pending_s=pending_s,
            resolve_s=resolve_s,
            repeat_s=4 * 3600,
        )

    return [
        rule("pending 5m, resolve 10m, 70", 300, 600, 70.0),
        rule("pending 0, resolve 15m, 75", 0, 900, 75.0),
        rule("pending 15m, resolve 0, 80", 900, 0, THRESHOLD),
        rule("pending 2m, resolve 3m, 80", 120, 180, THRESHOLD),
        rule("no hysteresis", 0, 0, THRESHOLD),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    minutes = int(args.days * 1440)
    print(f"1-minute ticks over {args.days:g} days; threshold {THRESHOLD:g}")
    worst: dict[str, tuple[int, int, int]] = {}
    for r in rules():
        window_min = max(r.pending_s + r.resolve_s, 60) / 60
        print(f"\nrule: {r.name} (hysteresis window {window_min:g} min)")
        print(
            f"  {'metric':<26} {'alerts':>6} {'resolves':>8} {'cancelled':>9} "
            f"{'notified':>8} {'max alerts/win':>14} {'max resolves/win':>16} {'max alerts/h':>12}"
        )
        for seed in args.seeds:
            rng = np.random.default_rng(seed)
            for name, make in waveforms(minutes, rng):
                c = run(r, make())
                a, b, h = worst.get(r.name, (0, 0, 0))
                worst[r.name] = (
                    max(a, c.max_alerts_per_window),
                    max(b, c.max_resolves_per_window),
                    max(h, c.max_alerts_per_hour),
                )
                print(
                    f"  {name:<26} {c.alerts:>6} {c.resolves:>8} {c.cancelled:>9} "
                    f"{c.notifications:>8} {c.max_alerts_per_window:>14} "
                    f"{c.max_resolves_per_window:>16} {c.max_alerts_per_hour:>12}"
                )
    print("\nworst case per rule (max alerts, max resolves per hysteresis window; max alerts/h):")
    ok = True
    for name, (a, b, h) in worst.items():
        print(f"  {name:<32} {a} {b}; {h}")
        if name != "no hysteresis":
            ok = ok and a <= 1 and b <= 1
    print("target (<= 1 alert and <= 1 resolve per window):", "met" if ok else "MISSED")


if __name__ == "__main__":
    main()
