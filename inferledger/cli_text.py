"""What the commands that open the ledger (users, prices, budgets and alerts, plan, the analysts'
exports) share: the --db and --config flags and the settings they make, and when they print,
an aligned text table, a UTC time to the minute, and who is running the command."""

from __future__ import annotations

import argparse
import getpass
import os
from collections.abc import Collection
from datetime import UTC, datetime

from inferledger.core.settings import Settings
from inferledger.settings import load_settings


def add_ledger_flags(parser: argparse.ArgumentParser) -> None:
    """--db PATH and --config FILE, read by :func:`command_settings`."""
    parser.add_argument(
        "--db", metavar="PATH", help="DuckDB database file [default: the db setting]"
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="YAML config file (default: $INFERLEDGER_CONFIG when set)",
    )


def command_settings(args: argparse.Namespace) -> Settings:
    """The settings a command runs with: --config FILE, else $INFERLEDGER_CONFIG when set, and
    --db over the db setting."""
    config = args.config or os.environ.get("INFERLEDGER_CONFIG")
    return load_settings(config, {"db": args.db})


def login_name() -> str | None:
    """The operating system's login name, or None where there is none (some containers)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None


def cli_user() -> str:
    """Who a change made from the command line is recorded as: 'cli:<login>' ('cli' alone
    without a login name)."""
    name = login_name()
    return f"cli:{name}" if name else "cli"


def utc_minute(value: datetime | None) -> str:
    """'2026-12-07 15:04Z', or '' for no time."""
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M}Z" if value else ""


def format_rows(head: list[str], rows: list[list[str]], right: Collection[str] = ()) -> str:
    """A plain-text table: the header, a rule, then the rows, columns padded to their widest
    cell; the columns named in `right` are right-aligned (numbers)."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        parts = [
            c.rjust(w) if h in right else c.ljust(w)
            for c, w, h in zip(cells, widths, head, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])
