"""docs/fidelity.md's tables from bench/fidelity.py's JSON: the per-row results (seed 0, and the
mean and range of a --seeds N run beside it) and the summary beside the anchor and the target.

    .venv/bin/python bench/fidelity.py --json /tmp/seed0.json
    .venv/bin/python bench/fidelity.py --seeds 10 --json /tmp/seeds10.json
    .venv/bin/python bench/fidelity_tables.py /tmp/seed0.json /tmp/seeds10.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

#: Rows that report many metrics show these (the families' first metrics and the tail).
_SHOWN_WHEN_MANY = (
    "request_throughput",
    "median_ttft_ms",
    "median_tpot_ms",
    "median_itl_ms",
    "p99_ttft_ms",
)
_FAMILIES = ("e2e", "itl", "ttft", "throughput", "tail_p99")


def _num(x: float) -> str:
    if abs(x) >= 10_000:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def _pct(x: float) -> str:
    return f"{x:+.1f} %".replace("-", "−")


def _seeds_cell(m: dict[str, Any] | None) -> str:
    if m is None:
        return ""
    low, high = m.get("predicted_low"), m.get("predicted_high")
    if low is None or high is None or low == high:
        return "same"
    spread = f"{_num(m['predicted'])} ({_num(low)}–{_num(high)})"
    return f"{spread}, {_pct(m['error_pct'])}" if m["scored"] else spread


def results_table(seed0: dict[str, Any], seeds: dict[str, Any] | None) -> list[str]:
    by_id = {r["id"]: r for r in (seeds or {}).get("rows", [])}
    lines = [
        "| row | split | engine | hardware | metric | truth | predicted | error | "
        "N seeds: mean (range), error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in seed0["rows"]:
        metrics = row["metrics"]
        if len(metrics) > 4:
            metrics = [m for m in metrics if m["metric"] in _SHOWN_WHEN_MANY]
        other = {m["metric"]: m for m in by_id.get(row["id"], {}).get("metrics", [])}
        for i, m in enumerate(metrics):
            head = (
                [f"`{row['id']}`", row["split"], row["era"], row["hardware"]]
                if i == 0
                else ["", "", "", ""]
            )
            error = _pct(m["error_pct"]) if m["scored"] else "not scored"
            cells = [m["metric"], _num(m["truth"]), _num(m["predicted"]), error]
            cells.append(_seeds_cell(other.get(m["metric"])))
            lines.append("| " + " | ".join(head + cells) + " |")
    return lines


def summary_table(report: dict[str, Any]) -> list[str]:
    lines = [
        "| group / split | E2E | ITL/TPOT | TTFT | throughput | P99 tail |",
        "|---|---|---|---|---|---|",
    ]
    for group, families in report["summary"].items():
        cells = []
        for fam in _FAMILIES:
            f = families[fam]
            pct = f["median_abs_pct"]
            cells.append("—" if pct is None else f"{pct:.1f} % ({f['rows']})")
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed0", help="bench/fidelity.py --json output of one seed")
    parser.add_argument("seeds", nargs="?", help="the same with --seeds N (optional)")
    args = parser.parse_args(argv)
    seed0 = json.loads(Path(args.seed0).read_text())
    seeds = json.loads(Path(args.seeds).read_text()) if args.seeds else None
    print("\n".join(results_table(seed0, seeds)))
    print()
    print("Seed 0:\n")
    print("\n".join(summary_table(seed0)))
    if seeds is not None:
        print("\nWith the seeds' means:\n")
        print("\n".join(summary_table(seeds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
