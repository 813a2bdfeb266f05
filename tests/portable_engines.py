"""Engines for tests/test_export_sql.py: load a ledger's base tables into PostgreSQL (a real
server, tests/pg_server.py) or ClickHouse (the embedded chdb engine), create the views that
`inferledger export-sql` writes, read them back, and compare each view with DuckDB's answer.

Comparison per column, on the whole view: the row count; for numbers and booleans the count
of non-NULL values and the sum (to the cent, and 1e-9 relative); for times the sorted
instants (to the millisecond); for text the sorted values; for lists the count and the sum of
their numbers; for maps the count. A NULL that became 0 or '' changes the non-NULL count.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from models.portable_sql import Export

Columns = dict[str, list[Any]]


# ----- loading and reading -----


def load_postgres(conn: Any, export: Export, tables: Mapping[str, pa.Table]) -> dict[str, str]:
    """Create the export's tables, COPY the rows in, create its ported views; returns the
    views the server refused, with its error."""
    from psycopg.types.json import Jsonb

    with conn.cursor() as cur:
        for st in export.statements:
            if st.kind != "table":
                continue
            cur.execute(st.sql)
            data = tables[st.name]
            names = data.column_names
            maps = [i for i, f in enumerate(data.schema) if pa.types.is_map(f.type)]
            cols = ", ".join(f'"{n}"' for n in names)
            with cur.copy(f"COPY {st.name} ({cols}) FROM STDIN") as copy:
                for row in data.to_pylist():
                    values = [row[n] for n in names]
                    for i in maps:
                        if values[i] is not None:
                            values[i] = Jsonb(dict(values[i]))
                    copy.write_row(values)
    conn.commit()
    refused: dict[str, str] = {}
    for st in export.statements:
        if st.kind == "view" and st.ported:
            try:
                conn.execute(st.sql)
                conn.commit()
            except Exception as exc:  # the server's refusal is the result
                conn.rollback()
                refused[st.name] = str(exc).strip().splitlines()[0]
    return refused


def read_postgres(conn: Any, view: str) -> Columns:
    try:
        with conn.cursor() as cur:
            cur.execute(f"select * from {view}")
            names = [d.name for d in cur.description]
            rows = cur.fetchall()
    finally:
        conn.rollback()
    return {n: [r[i] for r in rows] for i, n in enumerate(names)}


def load_clickhouse(
    sess: Any, export: Export, tables: Mapping[str, pa.Table], folder: Path
) -> dict[str, str]:
    """Create the export's tables, insert the rows from Parquet files, create its ported
    views; returns the views the engine refused, with its error."""
    for st in export.statements:
        if st.kind != "table":
            continue
        sess.query(st.sql)
        path = folder / f"{st.name}.parquet"
        pq.write_table(tables[st.name], path)
        cols = ", ".join(f"`{n}`" for n in tables[st.name].column_names)
        sess.query(f"INSERT INTO {st.name} ({cols}) SELECT {cols} FROM file('{path}', Parquet)")
    refused: dict[str, str] = {}
    for st in export.statements:
        if st.kind == "view" and st.ported:
            try:
                sess.query(st.sql)
            except Exception as exc:  # the engine's refusal is the result
                refused[st.name] = str(exc).strip().splitlines()[0][:300]
    return refused


def read_clickhouse(sess: Any, view: str) -> Columns:
    table = sess.query(f"SELECT * FROM {view}", "ArrowTable")
    return table.to_pydict()


def arrow_columns(table: pa.Table) -> Columns:
    return table.to_pydict()


# ----- comparison -----


def _instant(v: Any) -> float:
    if isinstance(v, datetime):
        return (v if v.tzinfo else v.replace(tzinfo=UTC)).timestamp()
    return datetime(v.year, v.month, v.day, tzinfo=UTC).timestamp()


def _kind(values: Iterable[Any]) -> str:
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool | int | float | Decimal):
            return "number"
        if isinstance(v, datetime | date):
            return "time"
        if isinstance(v, str):
            return "text"
        if isinstance(v, dict) or (isinstance(v, list) and v and isinstance(v[0], tuple)):
            return "map"
        if isinstance(v, list):
            return "list"
        return "other"
    return "empty"


def _num(v: Any) -> float:
    return float(v) if not isinstance(v, str) else float(json.loads(v))


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 0.01 + 1e-9 * max(abs(a), abs(b))


def compare(expected: Columns, got: Columns) -> list[str]:
    """The differences between DuckDB's columns (expected) and another engine's (got)."""
    problems: list[str] = []
    rows = len(next(iter(expected.values()), []))
    got_rows = len(next(iter(got.values()), []))
    if rows != got_rows:
        return [f"{got_rows} rows, DuckDB has {rows}"]
    missing = sorted(set(expected) - set(got))
    if missing:
        return [f"columns missing: {missing}"]
    for name, want in expected.items():
        have = got[name]
        w = [v for v in want if v is not None]
        h = [v for v in have if v is not None]
        if len(w) != len(h):
            problems.append(f"{name}: {len(h)} non-NULL values, DuckDB has {len(w)}")
            continue
        kind = _kind(w)
        if kind == "number":
            a, b = sum(_num(v) for v in w), sum(_num(v) for v in h)
            if not _close(a, b):
                problems.append(f"{name}: sum {b!r}, DuckDB has {a!r}")
        elif kind == "time":
            a_s, b_s = sorted(_instant(v) for v in w), sorted(_instant(v) for v in h)
            bad = [(x, y) for x, y in zip(a_s, b_s, strict=True) if abs(x - y) > 1e-3]
            if bad:
                problems.append(f"{name}: {len(bad)} instants differ, e.g. {bad[0]}")
        elif kind == "text":
            if sorted(w) != sorted(str(v) for v in h):
                diff = sorted(set(w) ^ {str(v) for v in h})[:3]
                problems.append(f"{name}: text values differ, e.g. {diff}")
        elif kind == "list":
            a = sum(sum(float(x) for x in v if x is not None) for v in w)
            b = sum(sum(float(x) for x in v if x is not None) for v in h)
            if not _close(a, b):
                problems.append(f"{name}: list sum {b!r}, DuckDB has {a!r}")
    return problems


def compare_all(
    views: Sequence[str], duck: Mapping[str, Columns], read: Any
) -> dict[str, list[str]]:
    """view -> differences (empty when it matches), for every view `read` can answer."""
    out: dict[str, list[str]] = {}
    for view in views:
        try:
            got = read(view)
        except Exception as exc:  # the engine's own error, reported as a difference
            out[view] = [f"error: {str(exc).strip().splitlines()[0][:300]}"]
            continue
        out[view] = compare(duck[view], got)
    return out
