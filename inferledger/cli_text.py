"""What the admin commands (users, prices, budgets and alerts, plan) share when they print:
an aligned text table, a UTC time to the minute, and who is running the command."""

from __future__ import annotations

import getpass
from collections.abc import Collection
from datetime import UTC, datetime


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
