"""`inferledger budgets`, `inferledger alerts` and `inferledger tokens` (issue #12).

- ``budgets list [--at ISO]``: every budget's status as a table; ``budgets show NAME``: one.
- ``alerts validate FILE``: parse and check an alerts file without a database (exit 2 with the
  message on an error); ``alerts sync FILE``: make the database's file entries equal it.
- ``tokens create --user U --label L`` prints a new API token once; ``tokens list``;
  ``tokens revoke ID``.

Like `inferledger users`, the commands that read or write the database open it themselves
(--db, else the `db` setting) and need `inferledger serve` stopped (DuckDB lets one process
open the file). Errors print one line and exit 2 (inferledger/cli.py's report_errors).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from inferledger.cli_text import cli_user, command_settings, format_rows, utc_minute
from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage, open_for_command
from ledger import api_tokens
from ledger.alerts_file import read_alerts_file, sync_alerts_file
from ledger.budget_status import BudgetStatus, budget_status, budget_statuses
from ledger.budgets import get_budget

COMMANDS = ("budgets", "alerts", "tokens")


def add_parser(subparsers: Any) -> None:
    """Add `budgets`, `alerts` and `tokens` to the CLI's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db", metavar="PATH", help="DuckDB database file [default: the db setting]"
    )
    common.add_argument(
        "--config", metavar="FILE", help="YAML config file (default: $INFERLEDGER_CONFIG)"
    )
    at = argparse.ArgumentParser(add_help=False)
    at.add_argument("--at", metavar="ISO", help="as of this instant (ISO 8601) [now]")

    budgets = subparsers.add_parser(
        "budgets",
        help="budget status: spend to date, forecast, coverage",
        description="Where each budget stands (docs/budgets.md). Stop `inferledger serve` "
        "first: DuckDB lets one process open the database.",
    )
    bsub = budgets.add_subparsers(dest="budgets_command", required=True, metavar="ACTION")
    bsub.add_parser("list", parents=[common, at], help="every budget's status (a table)")
    show = bsub.add_parser("show", parents=[common, at], help="one budget in detail")
    show.add_argument("name", metavar="NAME")

    alerts = subparsers.add_parser(
        "alerts",
        help="check or apply an alerts file (budgets, rules, channels as code)",
        description="The alerts file (setting alerts.file) holds budgets, rules and channels "
        "(docs/budgets.md, 'The alerts file'). The server syncs it at every start.",
    )
    asub = alerts.add_subparsers(dest="alerts_command", required=True, metavar="ACTION")
    validate = asub.add_parser("validate", help="parse and check a file (no database)")
    validate.add_argument("file", metavar="FILE")
    sync = asub.add_parser(
        "sync", parents=[common], help="make the database's file entries equal it"
    )
    sync.add_argument("file", metavar="FILE")

    tokens = subparsers.add_parser(
        "tokens",
        help="API tokens for GET /api/v1/budgets",
        description="Per-user bearer tokens for the read-only API (docs/api.md).",
    )
    tsub = tokens.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    create = tsub.add_parser("create", parents=[common], help="make a token (printed once)")
    create.add_argument("--user", required=True, metavar="USER", help="the user it acts for")
    create.add_argument("--label", required=True, metavar="LABEL", help="what uses it")
    listing = tsub.add_parser("list", parents=[common], help="the tokens (never their value)")
    listing.add_argument("--user", metavar="USER", help="only this user's")
    revoke = tsub.add_parser("revoke", parents=[common], help="revoke a token at once")
    revoke.add_argument("token_id", type=int, metavar="ID")


def _open(args: argparse.Namespace) -> Storage:
    return open_for_command(command_settings(args), must_exist=True)


def _at(text: str | None) -> datetime:
    if not text:
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadInputError(f"--at {text!r} is not an ISO 8601 instant") from None
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def run(args: argparse.Namespace) -> int:
    if args.command == "alerts" and args.alerts_command == "validate":
        config = read_alerts_file(args.file)
        print(
            f"alerts file {args.file}: valid ({len(config.budgets)} budgets, "
            f"{len(config.rules)} rules, {len(config.channels)} channels)"
        )
        return 0
    when = _at(getattr(args, "at", None))  # checked before the database is opened
    storage = _open(args)
    try:
        if args.command == "alerts":
            print(sync_alerts_file(storage, args.file).summary())
        elif args.command == "budgets":
            return _budgets(storage, args, when)
        elif args.command == "tokens":
            return _tokens(storage, args)
    finally:
        storage.close()
    return 0


def _money(value: float | None, currency: str = "") -> str:
    return "" if value is None else f"{value:,.2f}{' ' + currency if currency else ''}"


def _budgets(storage: Storage, args: argparse.Namespace, at: datetime) -> int:
    if args.budgets_command == "list":
        statuses = budget_statuses(storage, at)
        print(status_table(statuses) if statuses else "(no budgets)")
        return 0
    budget = get_budget(storage, args.name)
    if budget is None:
        raise BadInputError(f"no budget named {args.name!r}")
    print(status_detail(budget_status(storage, budget, at)))
    return 0


def status_table(statuses: list[BudgetStatus]) -> str:
    rows = [
        [
            s.budget.name,
            s.status,
            _money(s.spent),
            _money(s.budget.amount, s.currency),
            f"{s.spent_pct:.0f}%",
            _money(s.forecast.p50),
            "complete" if s.coverage_complete else f"{len(s.incomplete_hours)} h missing",
            s.budget.owner,
            s.budget.source,
        ]
        for s in statuses
    ]
    head = ["budget", "status", "spent", "amount", "used", "forecast", "coverage", "owner", "from"]
    return format_rows(head, rows)


def status_detail(s: BudgetStatus) -> str:
    b, f = s.budget, s.forecast
    scope = ", ".join(f"{k}={v}" for k, v in b.scope.items()) or "(the whole organisation)"
    days = "" if f.days_to_exhaustion is None else f"{f.days_to_exhaustion:.1f}"
    period = f"{utc_minute(s.period_start)} to {utc_minute(s.period_end)}"
    lines = [
        ("budget", b.name + (" (archived)" if b.archived_at else "")),
        ("scope", scope),
        ("period", f"{b.period} in {b.timezone}: {period}"),
        ("amount", _money(b.amount, s.currency)),
        ("spent", f"{_money(s.spent, s.currency)} ({s.spent_pct:.1f}%)"),
        ("forecast", f"P10 {_money(f.p10)}  P50 {_money(f.p50)}  P90 {_money(f.p90)} ({f.method})"),
        ("status", s.status + (f" (threshold {s.threshold_crossed:g}% crossed)"
                               if s.threshold_crossed is not None else "")),
        ("burn rate", f"{_money(f.burn_rate_per_day, s.currency)} a day"),
        ("exhausted", f"{utc_minute(f.exhaustion_at)} (in {days} days)" if f.exhaustion_at
         else "not in this period"),
        ("coverage", "complete" if s.coverage_complete
         else f"incomplete: {len(s.incomplete_hours)} h, "
              f"first {utc_minute(s.incomplete_hours[0])}"),
        ("owner", b.owner),
        ("from", b.source),
        ("link", s.link),
    ]  # fmt: skip
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in lines)


def _tokens(storage: Storage, args: argparse.Namespace) -> int:
    action = args.tokens_command
    if action == "create":
        token = api_tokens.create_token(storage, args.user, args.label, by=cli_user())
        print(token)
        print(
            "This is the only time the token is shown: store it now. Send it as "
            "'Authorization: Bearer <token>'.",
        )
    elif action == "list":
        tokens = api_tokens.list_tokens(storage, args.user)
        rows = [
            [
                str(t.token_id),
                t.user_name,
                t.label,
                t.prefix + "...",
                utc_minute(t.created_at),
                utc_minute(t.last_used_at),
                "revoked " + utc_minute(t.revoked_at) if t.revoked_at else "active",
            ]
            for t in tokens
        ]
        head = ["id", "user", "label", "token", "created", "last used", "state"]
        print(format_rows(head, rows) if rows else "(no tokens)")
    elif action == "revoke":
        revoked = api_tokens.revoke_token(storage, args.token_id, by=cli_user())
        print(f"revoked token #{revoked.token_id} ({revoked.prefix}...) of {revoked.user_name}")
    return 0
