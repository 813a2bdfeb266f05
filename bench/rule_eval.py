"""Alert rule evaluation benchmark (issue #12): how long one evaluation of 200 data-driven alert
rules' signals takes over a benchmark ledger (target: within one minute at 10M requests).

    .venv/bin/python bench/ledger_data.py --requests 10000000 --db /tmp/bench10m.duckdb
    .venv/bin/python bench/bench_marts.py --db /tmp/bench10m.duckdb --steps full
    .venv/bin/python bench/rule_eval.py --db /tmp/bench10m.duckdb

The rules are a fixed, seeded mix of the nine data-driven kinds (:data:`MIX`), each with a
window typical of its kind, a scope drawn from the ledger's own dimension values (or none) and
a group-by (or none), as a platform team would write them. One evaluation is what the engine's
tick does for them (ledger/alert_engine.py): every rule's ``signal_observations`` at the same
instant with one shared cache, so rules of one kind and window share their aggregate query.
Evaluated at the end of the ledger's last hour of requests (the marts must be refreshed first).

Prints the total, the per-kind time (a kind's first rule of each window pays for the shared
query), how many aggregate queries ran, and with ``--no-cache`` the same rules without the
shared cache (each rule its own query) for comparison. ``--rounds`` repeats the evaluation
(a fresh cache each time) and reports each round.

Measured on the shared 2-core development machine (2026-12-02, machine otherwise quiet), the
10M-request ledger (59 h, so every 7-day baseline reads all 10M requests): 200 rules in
2.89 s / 2.43 s (two rounds), 14 aggregate queries; without the shared cache 27.6 s (200
queries). The 1M ledger: 0.7-1.1 s.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "bench") not in sys.path:
    sys.path.append(str(ROOT / "bench"))

from bench_marts import opened  # noqa: E402

from inferledger.core.storage import Storage, quote_ident  # noqa: E402
from ledger.alert_signals import KIND_DIMENSIONS, signal_observations  # noqa: E402
from models.alert_config import AlertRule  # noqa: E402

TARGET_S = 60.0
RULES = 200
#: kind -> (share of the rules, windows to draw from, threshold, group-bys to draw from)
MIX: dict[str, tuple[int, tuple[int, ...], float, tuple[tuple[str, ...], ...]]] = {
    "spend_spike": (30, (3600, 7200), 3.0, ((), ("team",), ("app",), ("route",), ("model",))),
    "long_context": (20, (900, 3600), 1.5, (("route",), ("app", "route"))),
    "failure_rate": (25, (900, 1800), 5.0, ((), ("route",), ("model",), ("deployment",))),
    "slo_burn": (20, (3600,), 14.4, (("route",), ("app",))),
    "prefix_cache_regression": (15, (3600,), 20.0, (("app",), ("route",))),
    "kv_pressure": (20, (300, 900), 50.0, ((), ("deployment",))),
    "false_economy": (15, (86400,), 20.0, (("route",), ("workflow",), ("app", "route"))),
    "coverage_gap": (25, (900,), 10.0, ((), ("deployment",))),
    "unpriced_usage": (30, (3600,), 1.0, ((), ("model",), ("app",))),
}


def dimension_values(storage: Storage) -> dict[str, list[str]]:
    """Each dimension's values in the ledger's spend (what scopes are drawn from)."""
    out = {}
    for dim in ("environment", "team", "app", "route", "workflow", "model", "deployment"):
        col = quote_ident(dim)
        rows = storage.fetchall(
            f"select distinct {col} from mart_spend_hourly where {col} is not null order by 1"
        )
        out[dim] = [r[0] for r in rows]
    return out


def make_rules(values: dict[str, list[str]], seed: int = 12) -> list[AlertRule]:
    """RULES rules in the proportions of MIX; about a third scoped to one value of one of the
    kind's dimensions."""
    rng = random.Random(seed)
    rules = []
    for kind, (count, windows, threshold, group_bys) in MIX.items():
        for i in range(count):
            scope = {}
            if rng.random() < 0.35:
                dims = [d for d in KIND_DIMENSIONS[kind] if values.get(d)]
                if dims:
                    dim = rng.choice(dims)
                    scope = {dim: rng.choice(values[dim])}
            rules.append(
                AlertRule(
                    name=f"{kind}-{i}",
                    kind=kind,
                    owner="bench",
                    window_s=rng.choice(windows),
                    threshold=threshold,
                    resolve_threshold=threshold * 0.8,
                    scope=scope,
                    group_by=rng.choice(group_bys),
                )
            )
    assert len(rules) == RULES, len(rules)
    return rules


def evaluation_instant(storage: Storage) -> datetime:
    last = storage.scalar("select max(hour) from mart_requests")
    if last is None:
        raise SystemExit("no requests in mart_requests: refresh the marts first (bench_marts.py)")
    return last.astimezone(UTC) + timedelta(hours=1)


def evaluate(storage: Storage, rules: list[AlertRule], at: datetime, *, shared: bool) -> dict:
    per_kind: dict[str, float] = defaultdict(float)
    observations = firing = 0
    cache: dict = {}
    start = time.perf_counter()
    for rule in rules:
        t = time.perf_counter()
        obs = signal_observations(storage, rule, at, cache=cache if shared else {})
        per_kind[rule.kind] += time.perf_counter() - t
        observations += len(obs)
        firing += sum(1 for o in obs if o.value is not None and o.value >= rule.threshold)
    return {
        "total_s": time.perf_counter() - start,
        "per_kind": dict(per_kind),
        "queries": len(cache) if shared else len(rules),
        "observations": observations,
        "above": firing,
    }


def report(label: str, result: dict, rules: list[AlertRule]) -> None:
    counts: dict[str, int] = defaultdict(int)
    for rule in rules:
        counts[rule.kind] += 1
    verdict = "OK" if result["total_s"] <= TARGET_S else "OVER"
    print(
        f"{label}: {len(rules)} rules in {result['total_s']:.2f} s (target {TARGET_S:g} s: "
        f"{verdict}); {result['queries']} aggregate queries, {result['observations']} "
        f"observations, {result['above']} at or above threshold"
    )
    for kind, seconds in sorted(result["per_kind"].items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<24} {counts[kind]:>3} rules  {seconds:7.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", required=True, help="a refreshed bench/ledger_data.py database")
    parser.add_argument("--rounds", type=int, default=2, help="evaluations to time (2)")
    parser.add_argument("--no-cache", action="store_true", help="also time without sharing")
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args(argv)
    with opened(args.db) as storage:
        requests = storage.scalar("select count(*) from mart_requests")
        at = evaluation_instant(storage)
        rules = make_rules(dimension_values(storage), args.seed)
        print(f"{args.db}: {requests:,} requests in mart_requests; evaluating at {at.isoformat()}")
        for i in range(args.rounds):
            report(f"round {i + 1}, shared cache", evaluate(storage, rules, at, shared=True), rules)
        if args.no_cache:
            report("no shared cache", evaluate(storage, rules, at, shared=False), rules)
        # a minute later: the next tick (a fresh cache; the windows moved)
        next_tick = evaluate(storage, rules, at + timedelta(seconds=60), shared=True)
        report("next tick (+60 s)", next_tick, rules)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
