"""`inferledger migrate-ledger` (issue #15): copy a DuckDB ledger's event tables into ClickHouse,
then verify the copy.

    inferledger migrate-ledger --to chdb:///var/lib/inferledger/ch --db ledger.duckdb
    inferledger migrate-ledger --to http://inferledger@ch:8123/inferledger --tables spans

Stop `inferledger serve` first (DuckDB lets one process open the file). Each table is copied one
UTC day at a time, in Arrow record batches of --batch-rows rows read as they are sent (memory
stays bounded), every batch the same on every run with a deduplication token made of (table, day,
batch size, batch number): a rerun after a crash sends the unfinished day again and ClickHouse
drops the batches it already has. A day whose row count already matches is skipped.

Then every table is verified, DuckDB against ClickHouse (ReplacingMergeTree tables read with
FINAL): the row count; per column the non-NULL count; the sum of every integer column
(exactly), of every float column (to the cent and 1e-9 relative), of every time (in
microseconds), the number of list and map entries; and an order-independent hash of the key
text columns (the sum of the first 60 bits of each row's MD5). Exit 0 when every table matches,
1 naming those that differ. See docs/clickhouse.md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa

from inferledger.cli_text import add_ledger_flags, command_settings, format_rows
from inferledger.core.errors import BadInputError, StorageError
from inferledger.core.storage import Storage, quote_ident

if TYPE_CHECKING:  # imported when the command runs: the CLI starts without clickhouse-connect
    from inferledger.core.clickhouse import ClickHouseEvents

DAY_NS = 86_400 * 10**9
DAY_US = 86_400 * 10**6


@dataclass(frozen=True)
class EventTable:
    """How one event table is copied and checked: its UTC day in each dialect, its key text
    columns, and whether ClickHouse reads it with FINAL (ReplacingMergeTree)."""

    name: str
    day_duckdb: str
    day_clickhouse: str
    keys: tuple[str, ...]
    final: bool

    @property
    def clickhouse_source(self) -> str:
        """The table as ClickHouse reads it exactly: with FINAL for a ReplacingMergeTree."""
        return f"{self.name} FINAL" if self.final else self.name


EVENT_TABLES: dict[str, EventTable] = {
    t.name: t
    for t in (
        EventTable("spans", f"start_ns // {DAY_NS}", f"intDiv(start_ns, {DAY_NS})",
                   ("trace_id", "span_id"), final=True),
        EventTable("metric_samples", f"epoch_us(ts) // {DAY_US}",
                   f"intDiv(toUnixTimestamp64Micro(ts), {DAY_US})",
                   ("target", "metric", "series_key"), final=False),
        EventTable("scrapes", f"epoch_us(ts) // {DAY_US}",
                   f"intDiv(toUnixTimestamp64Micro(ts), {DAY_US})", ("target",), final=True),
        EventTable("outcomes", f"epoch_us(decided_at) // {DAY_US}",
                   f"intDiv(toUnixTimestamp64Micro(decided_at), {DAY_US})",
                   ("outcome_id", "outcome"), final=True),
    )
}  # fmt: skip


def batch_token(table: str, day: int, batch_rows: int, index: int) -> str:
    """The deduplication token of one batch: the same batch on every run, another otherwise."""
    return f"inferledger-migrate:{table}:day{day}:rows{batch_rows}:batch{index}"


def day_batches(
    storage: Storage, table: EventTable, day: int, batch_rows: int
) -> Iterator[tuple[str, pa.Table]]:
    """(token, batch) for each batch of one table's UTC day: exactly `batch_rows` rows each
    (the last fewer), re-cut from DuckDB's record batches, whose sizes may vary between runs.
    No ORDER BY: DuckDB returns a table's rows in insertion order (preserve_insertion_order,
    on by default), so a stopped ledger gives the same batches, and tokens, on every run,
    without sorting a whole day (which held ~0.8 GB for 1M spans)."""
    sql = f"SELECT * FROM {quote_ident(table.name)} WHERE {table.day_duckdb} = ?"
    pending: list[pa.RecordBatch] = []
    held = index = 0
    for batch in storage.iter_arrow(sql, [day], batch_rows=batch_rows, timeout_s=3600):
        pending.append(batch)
        held += batch.num_rows
        while held >= batch_rows:
            rows = pa.Table.from_batches(pending)
            yield batch_token(table.name, day, batch_rows, index), rows.slice(0, batch_rows)
            index += 1
            rest = rows.slice(batch_rows)
            pending, held = rest.to_batches(), rest.num_rows
    if held:
        yield batch_token(table.name, day, batch_rows, index), pa.Table.from_batches(pending)


def _day_counts(rows: list[tuple[Any, ...]]) -> dict[int, int]:
    return {int(day): int(n) for day, n in rows}


@dataclass
class CopyResult:
    table: str
    days: int = 0
    days_skipped: int = 0
    batches: int = 0
    rows_sent: int = 0
    seconds: float = 0.0


def copy_table(
    storage: Storage, store: ClickHouseEvents, table: EventTable, batch_rows: int
) -> CopyResult:
    """Copy one table day by day; days whose ClickHouse row count already equals DuckDB's
    are skipped, the others sent whole (ClickHouse drops batches it has by their tokens)."""
    started = time.perf_counter()
    name = quote_ident(table.name)
    source = _day_counts(
        storage.fetchall(
            f"SELECT {table.day_duckdb} AS day, count(*) FROM {name} GROUP BY day ORDER BY day",
            timeout_s=3600,
        )
    )
    target = _day_counts(
        store.fetchall(
            f"SELECT {table.day_clickhouse} AS day, count() FROM {table.clickhouse_source} "
            "GROUP BY day",
            timeout_s=3600,
        )
    )
    result = CopyResult(table.name)
    for day, count in source.items():
        result.days += 1
        if target.get(day) == count:
            result.days_skipped += 1
            continue
        for token, batch in day_batches(storage, table, day, batch_rows):
            store.insert_arrow(table.name, batch, token)
            result.batches += 1
            result.rows_sent += batch.num_rows
    result.seconds = time.perf_counter() - started
    return result


# ----- verification -----


@dataclass(frozen=True)
class Check:
    """One compared figure: its label, the SQL in each dialect, and how values compare."""

    label: str
    duckdb: str
    clickhouse: str
    kind: str  # "exact" or "float"


def _key_concat(keys: Sequence[str], dialect: str) -> str:
    parts = [f"coalesce({quote_ident(k)}, '')" for k in keys]
    if len(parts) == 1:
        return parts[0]
    sep = "chr(31)" if dialect == "duckdb" else "char(31)"
    return f"concat({f', {sep}, '.join(parts)})"


def table_checks(storage: Storage, table: EventTable) -> list[Check]:
    """The figures compared for one table, from its DuckDB column types."""
    columns = storage.fetchall(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name = ? ORDER BY ordinal_position",
        [table.name],
    )
    checks = [Check("rows", "count(*)", "count()", "exact")]
    for column, data_type in columns:
        c = quote_ident(column)
        kind = str(data_type).upper()
        checks.append(Check(f"{column}: non-NULL", f"count({c})", f"count({c})", "exact"))
        if kind in ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT"):
            checks.append(Check(f"{column}: sum", f"sum({c}::HUGEINT)", f"sum(toInt128({c}))",
                                "exact"))  # fmt: skip
        elif kind in ("DOUBLE", "FLOAT", "REAL") or kind.startswith("DECIMAL"):
            checks.append(Check(f"{column}: sum", f"sum({c})", f"sum({c})", "float"))
        elif kind == "BOOLEAN":
            checks.append(Check(f"{column}: true", f"count_if({c})", f"countIf({c})", "exact"))
        elif kind.startswith("TIMESTAMP"):
            ch_sum = f"sum(toInt128(toUnixTimestamp64Micro({c})))"
            checks.append(Check(f"{column}: sum of us", f"sum(epoch_us({c}))::HUGEINT", ch_sum,
                                "exact"))  # fmt: skip
        elif kind.endswith("[]"):
            checks.append(Check(f"{column}: entries", f"sum(len({c}))::HUGEINT",
                                f"sum(toInt128(length({c})))", "exact"))  # fmt: skip
        elif kind.startswith("MAP"):
            checks.append(Check(f"{column}: entries", f"sum(cardinality({c}))::HUGEINT",
                                f"sum(toInt128(length({c})))", "exact"))  # fmt: skip
    duck_key = _key_concat(table.keys, "duckdb")
    ch_key = _key_concat(table.keys, "clickhouse")
    checks.append(Check(
        f"hash({', '.join(table.keys)})",
        f"coalesce(sum(('0x' || left(md5({duck_key}), 15))::BIGINT::HUGEINT), 0)",
        f"sum(toInt128(reinterpretAsUInt64(reverse(unhex(concat('0', "
        f"left(hex(MD5({ch_key})), 15)))))))",
        "exact",
    ))  # fmt: skip
    return checks


def _same(a: Any, b: Any, kind: str) -> bool:
    if a is None or b is None:
        return (a is None or a == 0) and (b is None or b == 0)
    if kind == "float":
        a, b = float(a), float(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.005)
    return int(a) == int(b)


@dataclass
class Verification:
    table: str
    duckdb_rows: int
    clickhouse_rows: int
    checks: int
    differing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differing


def verify_table(storage: Storage, store: ClickHouseEvents, table: EventTable) -> Verification:
    """Compare one table's figures (:func:`table_checks`) in both engines."""
    checks = table_checks(storage, table)
    duck = storage.fetchall(
        f"SELECT {', '.join(c.duckdb for c in checks)} FROM {quote_ident(table.name)}",
        timeout_s=3600,
    )[0]
    ch = store.fetchall(
        f"SELECT {', '.join(c.clickhouse for c in checks)} FROM {table.clickhouse_source}",
        timeout_s=3600,
    )[0]
    differing = [
        f"{c.label} ({a} vs {b})"
        for c, a, b in zip(checks, duck, ch, strict=True)
        if not _same(a, b, c.kind)
    ]
    return Verification(table.name, int(duck[0]), int(ch[0]), len(checks), differing)


def verify_report(results: Sequence[Verification]) -> str:
    """The verification as a text table, then one line per differing figure."""
    head = ["table", "duckdb rows", "clickhouse rows", "checks", "result"]
    rows = [
        [v.table, f"{v.duckdb_rows:,}", f"{v.clickhouse_rows:,}", str(v.checks),
         "ok" if v.ok else f"DIFFERS ({len(v.differing)})"]
        for v in results
    ]  # fmt: skip
    lines = [format_rows(head, rows, right={"duckdb rows", "clickhouse rows", "checks"})]
    for v in results:
        lines += [f"  {v.table}: {d}" for d in v.differing[:10]]
    return "\n".join(lines)


def parse_tables(text: str | None) -> list[EventTable]:
    """--tables: names from EVENT_TABLES, comma-separated (default: all)."""
    if not text:
        return list(EVENT_TABLES.values())
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in EVENT_TABLES]
    if unknown or not names:
        raise BadInputError(
            f"--tables: unknown table {', '.join(unknown) or '(none)'}; "
            f"choose from {', '.join(EVENT_TABLES)}"
        )
    return [EVENT_TABLES[n] for n in dict.fromkeys(names)]


def migrate_ledger(
    storage: Storage,
    store: ClickHouseEvents,
    tables: Sequence[EventTable],
    *,
    batch_rows: int = 100_000,
    out: IO[str] | None = None,
) -> list[Verification]:
    """Copy `tables` from the ledger to the store, then verify them; prints progress to `out`."""
    out = out or sys.stdout
    for table in tables:
        r = copy_table(storage, store, table, batch_rows)
        print(
            f"{r.table}: {r.rows_sent:,} rows in {r.batches} batches sent in {r.seconds:.1f} s "
            f"({r.days} days, {r.days_skipped} already complete)",
            file=out,
        )
    return [verify_table(storage, store, table) for table in tables]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the `migrate-ledger` command to the CLI."""
    parser = sub.add_parser(
        "migrate-ledger",
        help="copy the ledger's event tables into ClickHouse and verify the copy",
        description="Copy spans, metric samples, scrapes and outcomes from a stopped DuckDB "
        "ledger into ClickHouse (chdb:///abs/path, or http(s)://user@host:port/database with "
        "the password in $INFERLEDGER_CLICKHOUSE_PASSWORD), one day at a time in Arrow batches "
        "with deduplication tokens (a rerun never duplicates), then compare row counts, sums "
        "and key hashes per table. Exit 0 when all match, 1 when a table differs.",
    )
    add_ledger_flags(parser)
    parser.add_argument("--to", required=True, metavar="DSN", help="the ClickHouse DSN")
    parser.add_argument(
        "--tables", metavar="LIST", help=f"comma-separated (default: {','.join(EVENT_TABLES)})"
    )
    parser.add_argument(
        "--batch-rows", type=int, default=100_000, metavar="N", help="rows per insert [100000]"
    )


def run(args: argparse.Namespace) -> int:
    from inferledger.core.storage import open_for_command

    try:
        from inferledger.core.clickhouse import ClickHouseEvents
    except ImportError as exc:
        raise StorageError(
            f"migrate-ledger needs clickhouse-connect and chdb ({exc.name} is missing): "
            "pip install clickhouse-connect==1.6.0 chdb==4.4.0"
        ) from None
    tables = parse_tables(args.tables)
    if args.batch_rows < 1:
        raise BadInputError("--batch-rows must be at least 1")
    settings = command_settings(args)
    store = ClickHouseEvents(args.to)
    with open_for_command(settings) as storage, store.open():
        results = migrate_ledger(storage, store, tables, batch_rows=args.batch_rows)
    print(verify_report(results))
    bad = [v.table for v in results if not v.ok]
    if bad:
        print(f"verification failed: {', '.join(bad)} differ", file=sys.stderr)
        return 1
    print(f"verified: {len(results)} tables match")
    return 0
