"""Every CSV the dashboard hands out says what it holds (issue #10): its file name and its
comment lines name the range, the filters and the idle policy, and the rows read back."""

from __future__ import annotations

import base64
import io
from datetime import UTC, datetime

import polars as pl
import pyarrow as pa

from app.exports import csv_download, csv_name, header_lines, table_csv
from ledger.queries import Filters

START, END = datetime(2026, 11, 23, tzinfo=UTC), datetime(2026, 11, 30, 6, 30, tzinfo=UTC)


def test_the_file_name_states_range_filters_and_policy() -> None:
    plain = Filters(START, END)
    assert csv_name("spend-tree", plain) == (
        "inferledger-spend-tree_2026-11-23T0000_2026-11-30T0630_configured.csv"
    )
    narrowed = Filters(START, END, team="finance ops", route="/extract", policy="usage")
    # unsafe characters (space, slash) become "-": the name is valid on every file system
    assert csv_name("spend-by-route", narrowed) == (
        "inferledger-spend-by-route_2026-11-23T0000_2026-11-30T0630"
        "_team-finance-ops_route--extract_usage.csv"
    )


def test_the_comment_lines_state_range_filters_and_policy() -> None:
    filters = Filters(START, END, environment="prod", model="llama-3.1-8b", policy="separate")
    assert header_lines("spend-idle-by-team", filters, 3) == [
        "# InferLedger export: spend-idle-by-team",
        "# range: 2026-11-23 00:00 to 2026-11-30 06:30 UTC",
        "# filters: environment=prod, model=llama-3.1-8b",
        "# idle policy: separate (Separate line: idle GPU time is its own line, charged to no "
        "team)",
        "# rows: 3",
    ]
    assert header_lines("x", Filters(START, END))[2] == "# filters: none"


def test_the_table_reads_back_with_its_comment_lines_skipped() -> None:
    table = pa.table(
        {
            "team": ["finance-ops", None, 'quote "x", comma'],
            "cost": [1234.5678, 0.001, 0.0],
            "requests": [10, 0, 3],
        }
    )
    filters = Filters(START, END, team="finance-ops")
    text = table_csv(table, "t", filters)
    lines = text.splitlines()
    assert lines[:5] == header_lines("t", filters, 3)
    assert lines[5] == "team,cost,requests"
    back = pl.read_csv(io.StringIO(text), comment_prefix="#")
    assert back.columns == ["team", "cost", "requests"]
    assert back["team"].to_list() == ["finance-ops", None, 'quote "x", comma']
    assert back["cost"].to_list() == [1234.5678, 0.001, 0.0]  # full precision, not rounded
    assert back["requests"].to_list() == [10, 0, 3]


def test_the_download_carries_the_name_and_the_text() -> None:
    table = pa.table({"a": [1]})
    filters = Filters(START, END)
    sent = csv_download(table, "one", filters)
    assert sent["filename"] == csv_name("one", filters)
    content = sent["content"]
    text = base64.b64decode(content).decode() if sent.get("base64") else content
    assert text == table_csv(table, "one", filters)
