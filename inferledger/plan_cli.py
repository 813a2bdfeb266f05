"""`inferledger plan SCENARIO.yaml`: the capacity planner from the command line (issue #13).

SCENARIO.yaml holds what the Capacity page sets: name, profile (typed in, or
`from_ledger: {start, end, apps, routes, environment}` to measure it from the ledger),
knobs, slos, candidates, verify_top, growth_per_month, seed (docs/capacity-planner.md).
With a ledger (--db, --config, a from_ledger profile or --save), GPU and hosted-model prices
the file leaves out come from its price book.
The planner screens every candidate, checks the best on the simulator and prints each pool's
ranked candidates and each app's cost; --json prints the whole result, --csv one row per pool
and candidate. --save stores the plan in the ledger (the Capacity page lists it), --record
writes its decision record (Markdown or print-ready HTML). Progress goes to stderr; an error
prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inferledger.cli_text import cli_user, command_settings, format_rows
from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage, open_for_command
from inferledger.core.yaml_files import read_yaml_file
from ledger.capacity_profile import book_prices
from models.capacity.candidates import CandidateSpace
from models.capacity.plan import plan_from_mapping, run_plan
from models.capacity.profile import unknown
from models.capacity.record import (
    app_cost_table,
    candidate_table,
    decision_record_html,
    decision_record_markdown,
)
from models.capacity.record_format import usd
from models.capacity.search import LoadPoint
from models.capacity.types import WorkloadProfile
from models.gpu_catalog import get_gpu

#: the keys of `profile: {from_ledger: {...}}`
FROM_LEDGER_KEYS = ("start", "end", "apps", "routes", "environment")
#: columns of the default table, picked from the decision record's candidate table
_TABLE_COLUMNS = (
    "Rank",
    "Candidate",
    "Replicas (band)",
    "GPUs",
    "Monthly cost",
    "Knee req/s per replica",
    "p95 TTFT at peak",
    "p95 ITL at peak",
    "p95 E2E at peak",
    "Checked",
)
_AT_PEAK_KEYS = tuple(f.name for f in fields(LoadPoint) if f.name != "replicas")
_CANDIDATE_KEYS = (
    "rank",
    "label",
    "verified",
    "knee_rate",
    "analytic_knee_rate",
    "binding",
    "replicas",
    "replicas_low",
    "replicas_high",
    "gpus",
    "gpu_hours_per_month",
    "monthly_cost",
    "monthly_cost_low",
    "monthly_cost_high",
)
_DEPLOYMENT_KEYS = (
    "gpu",
    "tensor_parallel_size",
    "dtype",
    "kv_cache_dtype",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "price_per_gpu_hour",
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `plan` command to the CLI's subparsers."""
    parser = subparsers.add_parser(
        "plan",
        help="plan capacity: the cheapest deployment that meets the SLOs (what-if scenario)",
        description=" ".join(__doc__.split("\n\n")[1].split()),
    )
    parser.add_argument("scenario", metavar="SCENARIO.yaml", help="the scenario to plan")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the whole result as JSON")
    out.add_argument("--csv", action="store_true", help="print one CSV row per pool x candidate")
    parser.add_argument(
        "--db",
        metavar="PATH",
        help="ledger database for `from_ledger` profiles and --save [default: the db setting]",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="YAML config file (default: $INFERLEDGER_CONFIG)"
    )
    parser.add_argument("--save", action="store_true", help="save the plan in the ledger")
    parser.add_argument("--name", metavar="NAME", help="name to save it under [the scenario's]")
    parser.add_argument("--by", metavar="USER", help="who saves it [cli:<login>]")
    parser.add_argument(
        "--record",
        choices=("md", "html"),
        help="also write the decision record (Markdown or print-ready HTML) to --out",
    )
    parser.add_argument("--out", metavar="FILE", help="where --record writes")
    parser.add_argument(
        "--workers",
        type=_workers,
        default=1,
        metavar="N",
        help="processes that simulate candidates at once (the same answer, sooner); "
        "0 = one per CPU [1]",
    )
    return parser


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0 (0 = one per CPU)")
    return value or (os.cpu_count() or 1)


# ---------------------------------------------------------------------------- inputs


def _when(text: Any, field: str) -> datetime:
    if isinstance(text, datetime):
        moment = text
    else:
        try:
            moment = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
        except ValueError:
            raise BadInputError(f"{field}: not an ISO 8601 time, got {text!r}") from None
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def _names(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BadInputError(f"{field}: needs a list of names")
    return tuple(value)


def ledger_query(spec: Any, where: str = "profile.from_ledger") -> dict[str, Any]:
    """The checked `from_ledger` block: start, end (aware datetimes), apps, routes, environment."""
    if not isinstance(spec, Mapping):
        raise BadInputError(f"{where}: needs a mapping with start and end")
    unknown(where, spec, FROM_LEDGER_KEYS)
    for key in ("start", "end"):
        if spec.get(key) in (None, ""):
            raise BadInputError(f"{where}.{key}: required (ISO 8601 time)")
    start, end = _when(spec["start"], f"{where}.start"), _when(spec["end"], f"{where}.end")
    if end <= start:
        raise BadInputError(f"{where}: end must be after start")
    environment = spec.get("environment")
    if environment is not None and not isinstance(environment, str):
        raise BadInputError(f"{where}.environment: needs a name")
    return {
        "start": start,
        "end": end,
        "apps": _names(spec.get("apps"), f"{where}.apps"),
        "routes": _names(spec.get("routes"), f"{where}.routes"),
        "environment": environment,
    }


def read_scenario(path: str) -> dict[str, Any]:
    """The scenario file as a mapping (BadInputError naming the file otherwise)."""
    if not Path(path).is_file():
        raise BadInputError(f"scenario file {path!r}: no such file")
    data = read_yaml_file(path, f"scenario file {path!r}", BadInputError)
    if not isinstance(data, dict):
        raise BadInputError(
            f"scenario file {path!r}: needs a mapping of fields (name, profile, ...)"
        )
    return data


class _Ledger:
    """The ledger database, opened once and only when needed (from_ledger, --save)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._storage: Storage | None = None

    def get(self) -> Storage:
        if self._storage is None:
            settings = command_settings(self._args)
            self._storage = open_for_command(settings, must_exist=True)
        return self._storage

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()


def measured_profile(data: Mapping[str, Any], ledger: _Ledger) -> WorkloadProfile | None:
    """The profile `profile: {from_ledger: ...}` asks for, measured from the ledger (None when
    the scenario types its profile in)."""
    profile = data.get("profile")
    if not isinstance(profile, Mapping) or "from_ledger" not in profile:
        return None
    if set(profile) != {"from_ledger"}:
        extra = sorted(set(profile) - {"from_ledger"})[0]
        raise BadInputError(f"profile: {extra!r} cannot sit beside from_ledger")
    query = ledger_query(profile["from_ledger"])
    from ledger.capacity_profile import load_profile

    print(
        f"plan: measuring the profile from {query['start']:%Y-%m-%d %H:%M} to "
        f"{query['end']:%Y-%m-%d %H:%M} UTC",
        file=sys.stderr,
    )
    return load_profile(
        ledger.get(),
        query["start"],
        query["end"],
        apps=query["apps"],
        routes=query["routes"],
        environment=query["environment"],
    )


def _gpu_key(name: Any) -> str:
    try:
        return get_gpu(str(name)).name
    except BadInputError:
        return str(name)  # the candidate space names it in its own error


def with_book_prices(data: Mapping[str, Any], storage: Storage, at: datetime) -> dict[str, Any]:
    """The scenario with what it leaves out filled from the ledger's price book: the price per
    GPU-hour of each candidate GPU without one in `candidates.prices`, and `hosted_prices` of
    the hosted models shares are moved to (a price typed in the scenario wins)."""
    out = dict(data)
    candidates = dict(out.get("candidates") or {})
    typed = dict(candidates.get("prices") or {})
    priced = {_gpu_key(g) for g in typed}
    gpus = candidates.get("gpus") or list(CandidateSpace().gpus)
    missing = sorted({_gpu_key(g) for g in gpus} - priced)
    moves = (out.get("knobs") or {}).get("moves") or []
    hosted_typed = dict(out.get("hosted_prices") or {})
    hosted = sorted(
        {str(m["hosted"]) for m in moves if isinstance(m, Mapping) and m.get("hosted")}
        - set(hosted_typed)
    )
    book, pairs = book_prices(storage, missing, hosted, at)
    typed |= {gpu: price for gpu, price in book.items() if price is not None}
    if typed:
        out["candidates"] = candidates | {"prices": typed}
    if pairs:
        out["hosted_prices"] = hosted_typed | {m: list(p) for m, p in pairs.items()}
    return out


# ---------------------------------------------------------------------------- outputs


def _progress(fraction: float, message: str) -> None:
    print(f"plan: {fraction * 100:3.0f} % {message}", file=sys.stderr, flush=True)


def plan_json(result: Mapping[str, Any]) -> str:
    """The result as JSON (BadInputError when it holds a number JSON cannot carry)."""
    from ledger.capacity_plans import first_non_finite

    bad = first_non_finite(result, "plan")
    if bad:
        raise BadInputError(f"{bad}: not a finite number; the result cannot be written as JSON")
    return json.dumps(result, indent=2, sort_keys=False, allow_nan=False)


def plan_csv(result: Mapping[str, Any]) -> str:
    """One row per pool x candidate: the pool, the deployment, the ranking, the numbers at
    the peak (seconds, as LoadPoint holds them)."""
    head = [
        "pool",
        "slo_class",
        "model",
        "peak_rate",
        "best",
        *_DEPLOYMENT_KEYS,
        *_CANDIDATE_KEYS,
        *(f"at_peak_{k}" for k in _AT_PEAK_KEYS),
    ]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    for pool in result.get("pools") or []:
        for i, c in enumerate(pool.get("candidates") or []):
            deployment = c.get("candidate") or {}
            at = c.get("at_peak") or {}
            w.writerow(
                [
                    pool.get("name"),
                    pool.get("slo_class"),
                    pool.get("model"),
                    pool.get("peak_rate"),
                    i == pool.get("best"),
                    *(deployment.get(k) for k in _DEPLOYMENT_KEYS),
                    *(c.get(k) for k in _CANDIDATE_KEYS),
                    *(at.get(k) for k in _AT_PEAK_KEYS),
                ]
            )
    return buf.getvalue()


def plan_table(result: Mapping[str, Any]) -> str:
    """Each pool's ranked candidates and each app's cost, as text tables."""
    out: list[str] = [f"plan {result.get('name')!s}"]
    for pool in result.get("pools") or []:
        out.append("")
        out.append(
            f"pool {pool.get('name')}: apps {', '.join(pool.get('apps') or []) or '-'}; "
            f"peak {float(pool.get('peak_rate') or 0):.3g} req/s; "
            f"{pool.get('screened', 0)} screened, {len(pool.get('infeasible') or [])} do not fit"
        )
        table = candidate_table(pool)
        if table.rows:
            keep = [table.head.index(c) for c in _TABLE_COLUMNS]
            out.append(
                format_rows(
                    [table.head[i] for i in keep],
                    [[str(r[i]) for i in keep] for r in table.rows],
                )
            )
        else:
            out.append("(no candidate fits)")
        if pool.get("best") is None:
            out.append("no candidate meets the SLOs at the peak")
        costs = app_cost_table(pool)
        if costs.rows:
            out.append("")
            out.append(format_rows(costs.head, [[str(c) for c in r] for r in costs.rows]))
    for u in result.get("unplanned") or []:
        out.append(f"not planned: {u.get('app')} ({u.get('reason')})")
    totals = result.get("totals") or {}
    out.append("")
    out.append(
        f"total: {usd(totals.get('monthly_cost'))}/month on {totals.get('gpus', 0)} GPUs "
        "(★ = recommended; replicas band from the model's measured error)"
    )
    return "\n".join(out)


def write_record(result: Mapping[str, Any], kind: str, out: str) -> None:
    text = decision_record_html(result) if kind == "html" else decision_record_markdown(result)
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BadInputError(f"--out {out!r}: {exc.strerror or exc}") from None


# ---------------------------------------------------------------------------- command


def _check_flags(args: argparse.Namespace) -> None:
    if args.record and not args.out:
        raise BadInputError("--record needs --out FILE")
    if args.out and not args.record:
        raise BadInputError("--out needs --record md or --record html")
    if (args.name or args.by) and not args.save:
        raise BadInputError("--name and --by go with --save")
    if args.name is not None and not args.name.strip():
        raise BadInputError("--name: needs a non-empty name")


def run(args: argparse.Namespace) -> int:
    """Run `inferledger plan` (errors are raised as InferLedgerError: one line, exit 2)."""
    _check_flags(args)
    data = read_scenario(args.scenario)
    ledger = _Ledger(args)
    try:
        measured = measured_profile(data, ledger)
        if args.db or args.config or measured is not None or args.save:
            data = with_book_prices(data, ledger.get(), datetime.now(UTC))
        inputs = plan_from_mapping(data, f"scenario file {args.scenario!r}", measured)
        started = time.perf_counter()
        result = run_plan(inputs, progress=_progress, workers=args.workers)
        print(f"plan: done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        text = plan_json(result) if args.json else None  # checked before anything is written
        if args.save:
            from ledger.capacity_plans import save_plan

            by = args.by or cli_user()
            plan_id = save_plan(ledger.get(), result, created_by=by, name=args.name)
            print(f"plan: saved as plan #{plan_id}", file=sys.stderr)
        if args.record:
            write_record(result, args.record, args.out)
            print(f"plan: wrote the decision record to {args.out}", file=sys.stderr)
    finally:
        ledger.close()
    if text is not None:
        print(text)
    elif args.csv:
        sys.stdout.write(plan_csv(result))
    else:
        print(plan_table(result))
    return 0
