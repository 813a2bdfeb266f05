"""CSV downloads that say what they hold: every file the dashboard hands out names its range,
filters and idle policy in its file name and in comment lines above the header row, so a file
found in a download folder a month later still says what it is (issue #10).

    # InferLedger export: spend-over-time
    # range: 2026-11-23 00:00 to 2026-11-30 00:00 UTC
    # filters: team=finance-ops
    # idle policy: separate
    # rows: 168
    hour,team,cost
    ...

The comment lines start with "#": pandas reads them with ``comment="#"``, polars with
``comment_prefix="#"``, and spreadsheet users see them as the first rows.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dash import dcc

from ledger.queries import Filters
from models import idle_policy

if TYPE_CHECKING:
    import pyarrow as pa

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")


def _filters_text(filters: Filters) -> str:
    active = [
        f"{k}={v}" for k, v in filters.params().items() if k not in ("start", "end", "policy") and v
    ]
    return ", ".join(active) if active else "none"


def _policy_text(policy: str) -> str:
    return f"{idle_policy.LABEL.get(policy, policy)}: {idle_policy.DESCRIPTION.get(policy, '')}"


def csv_name(name: str, filters: Filters) -> str:
    """`inferledger-<name>_<start>_<end>[_<filters>]_<policy>.csv`, safe on every file system:
    e.g. inferledger-spend-over-time_2026-11-23T0000_2026-11-30T0000_team-finance-ops_separate.csv
    """
    parts = [
        f"inferledger-{name}",
        filters.start.strftime("%Y-%m-%dT%H%M"),
        filters.end.strftime("%Y-%m-%dT%H%M"),
    ]
    parts += [
        f"{k}-{v}" for k, v in filters.params().items() if k not in ("start", "end", "policy") and v
    ]
    parts.append(filters.policy)
    return _UNSAFE.sub("-", "_".join(parts)) + ".csv"


def header_lines(name: str, filters: Filters, rows: int | None = None) -> list[str]:
    """The comment lines above the header row (without the newline)."""
    lines = [
        f"# InferLedger export: {name}",
        f"# range: {_when(filters.start)} to {_when(filters.end)} UTC",
        f"# filters: {_filters_text(filters)}",
        f"# idle policy: {filters.policy} ({_policy_text(filters.policy)})",
    ]
    if rows is not None:
        lines.append(f"# rows: {rows}")
    return lines


def _cell(value: Any) -> Any:
    return "" if value is None else value


def write_rows(
    buf: io.StringIO | Any, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> int:
    """Write the header row and `rows` with the csv module; returns how many rows."""
    writer = csv.writer(buf)
    writer.writerow(columns)
    n = 0
    for row in rows:
        writer.writerow([_cell(v) for v in row])
        n += 1
    return n


def table_csv(table: pa.Table, name: str, filters: Filters) -> str:
    """The whole table as CSV text, with the comment lines that say what it holds."""
    buf = io.StringIO()
    buf.write("\n".join(header_lines(name, filters, table.num_rows)) + "\n")
    columns = [table.column(c).to_pylist() for c in table.column_names]
    write_rows(buf, table.column_names, zip(*columns, strict=True))
    return buf.getvalue()


def csv_download(table: pa.Table, name: str, filters: Filters) -> dict[str, Any]:
    """A dcc.Download `data` value: the table as a CSV file named after what it holds."""
    return dcc.send_string(table_csv(table, name, filters), csv_name(name, filters))
