"""The `inferledger` command line. Errors the user can fix print one line and exit 2."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from inferledger import __version__
from inferledger.core.errors import InferLedgerError, SettingsError
from inferledger.demo import add_parser as add_demo_parser
from inferledger.demo import run as run_demo
from inferledger.settings import SETTINGS, load_settings, settings_markdown

#: Commands for analysts (issue #14), and migrate-ledger (#15): command → the module with its
#: add_parser and run.
ANALYST_COMMANDS = {
    "export": "inferledger.export_cli",
    "snapshot": "inferledger.snapshot_cli",
    "export-focus": "inferledger.focus_cli",
    "export-sql": "inferledger.export_sql_cli",
    "migrate-ledger": "inferledger.clickhouse_cli",
}

#: Settings whose values `inferledger settings` does not print.
SECRET_SETTINGS = frozenset({"ingest.keys", "auth.session_secret", "auth.oidc_client_secret"})


def _add_setting_flags(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="YAML config file (default: $INFERLEDGER_CONFIG when set)",
    )
    for setting in SETTINGS:
        if setting.name in names and setting.cli_flag:
            parser.add_argument(
                setting.cli_flag,
                dest=setting.name,
                metavar=setting.metavar,
                help=f"{setting.help} [default: {setting.default}]",
            )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inferledger",
        description="Cost-and-capacity analytics for teams that serve LLMs.",
    )
    parser.add_argument("--version", action="version", version=f"inferledger {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the dashboard, ingest endpoints and scheduler")
    _add_setting_flags(serve, ["db", "host", "port", "otlp_port", "threads", "log_level"])

    settings = sub.add_parser("settings", help="show the effective settings or their docs")
    _add_setting_flags(settings, [s.name for s in SETTINGS])
    settings.add_argument(
        "--markdown", action="store_true", help="print the settings table of the docs"
    )
    refresh = sub.add_parser(
        "refresh", help="bring the cost marts up to date now (a server does it on a schedule)"
    )
    _add_setting_flags(refresh, ["db", "log_level"])
    refresh.add_argument(
        "--full", action="store_true", help="recompute every hour, not only the changed ones"
    )
    steptime = sub.add_parser(
        "steptime", help="predict one engine step's time for a model, GPU and batch"
    )
    steptime.add_argument("--model", required=True, help="e.g. llama-3.1-8b, llama-3.1-70b")
    steptime.add_argument("--gpu", required=True, help="A100-80GB, H100, H200, L40S or B200")
    steptime.add_argument("--dtype", default="bf16", help="weights: bf16 or fp8 [bf16]")
    steptime.add_argument("--kv-cache-dtype", default=None, help="bf16 or fp8 [bf16]")
    steptime.add_argument("--tensor-parallel-size", "--tp", type=int, default=1, dest="tp")
    steptime.add_argument("--batch", type=int, required=True, help="decode sequences")
    steptime.add_argument("--context", type=int, required=True, help="tokens in each one's KV")
    steptime.add_argument("--prefill-tokens", type=int, default=0, help="prompt tokens this step")
    steptime.add_argument(
        "--prefill-seqs",
        type=int,
        default=1,
        help="prompts the prefill tokens are split over evenly (attention is per prompt) [1]",
    )
    steptime.add_argument(
        "--enforce-eager", action="store_true", help="no CUDA graphs, as vLLM's --enforce-eager"
    )
    steptime.add_argument(
        "--json", action="store_true", help="print one JSON object (ms, gpu_ms, engine_ms, ...)"
    )

    calibrate = sub.add_parser(
        "calibrate",
        help="refit the step-time model to operator and/or whole-step timings (CSV)",
    )
    calibrate.add_argument(
        "csv",
        nargs="+",
        metavar="CSV",
        help="operator timings (format of h200-llama-ops.csv) and/or whole steps "
        "(format of h200-llama-steps.csv), told apart by their columns",
    )
    calibrate.add_argument("--gpu", default="h200", help="GPU the timings were measured on")
    calibrate.add_argument("--output", "-o", default=None, help="write coefficients JSON here")
    calibrate.add_argument(
        "--held-out",
        choices=("auto", "none"),
        default="auto",
        help="whole steps kept out of the fit: auto = the longest-context decode steps and "
        "the largest prefills; none = fit them all [auto]",
    )

    from inferledger.simulate import add_parser as add_simulate_parser

    add_simulate_parser(sub)

    add_demo_parser(sub)

    from inferledger.outcomes_cli import add_parser as add_outcomes_parser

    add_outcomes_parser(sub)

    from inferledger.prices_cli import add_parser as add_prices_parser

    add_prices_parser(sub)

    from inferledger.users_cli import add_parser as add_users_parser

    add_users_parser(sub)

    from inferledger.alerts_cli import add_parser as add_alerts_parser

    add_alerts_parser(sub)

    from inferledger.plan_cli import add_parser as add_plan_parser

    add_plan_parser(sub)

    # The analysts' commands (issue #14), each module with add_parser(sub) and run(args).
    for module in ANALYST_COMMANDS.values():
        importlib.import_module(module).add_parser(sub)

    # `inferledger trace export`: a replay trace from the ledger's requests (ledger/traces.py)
    trace = sub.add_parser("trace", help="replay traces from the ledger's observed requests")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    export = trace_sub.add_parser(
        "export",
        help="write a window's requests as a JSONL trace for `simulate --trace`",
        description="Write the requests the ledger observed in [--from, --to) as a JSONL "
        "trace (arrival, prompt and output tokens, prefix-cache group, app, route) that "
        "`inferledger simulate --trace FILE` replays. The file is written whole or not at all.",
    )
    export.add_argument("--db", metavar="PATH", required=True, help="the ledger database file")
    export.add_argument("--from", dest="start", metavar="TIME", required=True, help="ISO 8601")
    export.add_argument("--to", dest="end", metavar="TIME", required=True, help="ISO 8601")
    for name in ("environment", "app", "route", "model"):
        export.add_argument(f"--{name}", metavar=name.upper(), help=f"only this {name}")
    export.add_argument("--out", "-o", metavar="FILE", required=True, help="trace to write")
    return parser


def _load(args: argparse.Namespace):
    config = args.config or os.environ.get("INFERLEDGER_CONFIG")
    cli = {s.name: getattr(args, s.name, None) for s in SETTINGS}
    return load_settings(config, cli)


def report_errors(command: Callable[[], int]) -> int:
    """Run a command; an error the user can fix prints one line and exits 2."""
    try:
        return command()
    except SettingsError as exc:
        print(f"inferledger: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except InferLedgerError as exc:
        print(f"inferledger: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return report_errors(lambda: _dispatch(args))


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "serve":
        settings = _load(args)
        from inferledger.server import serve

        return serve(settings)
    if args.command == "settings":
        if args.markdown:
            sys.stdout.write(settings_markdown())
            return 0
        loaded = _load(args)
        for setting in SETTINGS:
            value = loaded[setting.name]
            if setting.name in SECRET_SETTINGS and value:
                value = "<redacted>"  # keys and secrets never go to a terminal or a log
            print(f"{setting.name} = {value!r}  ({loaded.sources[setting.name]})")
        return 0
    if args.command == "refresh":
        return _refresh(_load(args), full=args.full)
    if args.command == "steptime":
        from models.steptime import steptime_command

        print(
            steptime_command(
                args.model,
                args.gpu,
                args.dtype,
                args.batch,
                args.context,
                prefill_tokens=args.prefill_tokens,
                tp=args.tp,
                kv_dtype=args.kv_cache_dtype,
                prefill_seqs=args.prefill_seqs,
                enforce_eager=args.enforce_eager,
                as_json=args.json,
            )
        )
        return 0
    if args.command == "calibrate":
        from models.calibration import calibrate_command

        print(calibrate_command(args.csv, args.output, gpu=args.gpu, held_out=args.held_out))
        return 0
    if args.command == "demo":
        return run_demo(args)
    if args.command == "simulate":
        from inferledger.simulate import run as run_simulate

        return run_simulate(args)
    if args.command == "outcomes":
        from inferledger.outcomes_cli import run as run_outcomes

        return run_outcomes(args)
    if args.command == "prices":
        from inferledger.prices_cli import run as run_prices

        return run_prices(args)
    if args.command == "users":
        from inferledger.users_cli import run as run_users

        return run_users(args)
    if args.command in ("budgets", "alerts", "tokens"):
        from inferledger.alerts_cli import run as run_alerts

        return run_alerts(args)
    if args.command == "plan":
        from inferledger.plan_cli import run as run_plan_command

        return run_plan_command(args)
    if args.command == "trace":
        return _trace_export(args)
    if args.command in ANALYST_COMMANDS:
        return importlib.import_module(ANALYST_COMMANDS[args.command]).run(args)
    return 1


def _trace_export(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime
    from pathlib import Path

    from inferledger.core.errors import BadInputError, StorageError
    from inferledger.core.storage import Storage
    from ledger.traces import TraceWindow, export_trace

    def when(flag: str, text: str) -> datetime:
        try:
            value = datetime.fromisoformat(text.strip())
        except ValueError:
            raise BadInputError(f"{flag}: not an ISO 8601 time, got {text!r}") from None
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

    window = TraceWindow(
        when("--from", args.start),
        when("--to", args.end),
        environment=args.environment,
        app=args.app,
        route=args.route,
        model=args.model,
    )
    db = Path(args.db)
    if not db.exists():
        raise StorageError(f"no database at {str(db)!r} (give --db PATH)")
    with Storage(db) as storage:
        result = export_trace(storage, window, Path(args.out))
    left_out = f" ({result.skipped:,} failed or without token counts left out)"
    print(
        f"wrote {result.written:,} requests to {result.path}" + (left_out if result.skipped else "")
    )
    return 0


def _refresh(settings, *, full: bool) -> int:
    from inferledger.core.storage import open_for_command
    from inferledger.server import prepare_reference_data
    from ledger.marts import Refresher

    with open_for_command(settings) as storage:
        prepare_reference_data(storage, settings)
        result = Refresher(
            storage,
            max_scrape_gap_ns=settings["ledger.max_scrape_gap_s"] * 1_000_000_000,
            log_failures=False,  # reported below, in one line
        ).refresh(full=full, trigger="cli")
    what = ", ".join(result.reasons) or "nothing changed"
    print(
        f"refreshed {result.hours} h in {result.windows} windows ({result.requests:,} requests) "
        f"in {result.seconds:.2f} s: {what}"
    )
    if result.failed:
        # One line, never a traceback (issue #17), and a non-zero exit for scripts and cron.
        first = result.failed[0]
        more = len(result.failed) - 1
        retried = any(item.retried for item in result.failed)
        print(
            f"inferledger: refresh failed for {len(result.failed)} h (the other hours were "
            f"refreshed): {first.when}: {first.error}"
            + (f" (and {more} more hour{'s' if more > 1 else ''})" if more else "")
            + ("; failed hours are retried on the next run" if retried else ""),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
