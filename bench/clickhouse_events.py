"""Spans into DuckDB and into ClickHouse (chdb, in-process) from the same payloads (issue #15):
spans/s inserted and bytes per span on disk.

    .venv/bin/python bench/clickhouse_events.py [--spans 1000000] [--batch 10000] [--dir DIR]

1. `--spans` vLLM spans (inferledger.fixtures.make_export_request, `--batch` per OTLP request,
   each span its own trace) are decoded by the receiver's decoder (untimed) and stored through
   the real ingest INSERT (ingest/span_writer.insert_spans) into a new DuckDB ledger: DuckDB's
   ingest path, timed per write.
2. The stored rows are read back as Arrow batches of `--batch` rows (untimed): the flattened
   span rows both engines then take as they are:
   a. DuckDB: Storage's Transaction.append_arrow into a second new ledger (one transaction per
      batch, as the writer commits);
   b. ClickHouse: ClickHouseEvents.insert_arrow (one insert, one token per batch) into a new
      chdb folder.
3. Bytes on disk: each DuckDB file (+ WAL) after close (CHECKPOINT), divided by the spans;
   ClickHouse's system.parts bytes_on_disk of `spans` after OPTIMIZE TABLE spans FINAL.

What a real server changes: the insert goes over HTTP (Arrow bytes on the wire, compressed,
and a network round trip per batch) and the server parses and merges on its own cores, not in
this process, so spans/s per client drops by the transfer and rises with the server's cores;
bytes on disk stay the same (same engine, same MergeTree parts and codecs). chdb's inserts go
through a temporary file (clickhouse-connect's chdb backend writes the Native payload and
ingests it with INSERT ... FROM INFILE). On a shared 2-core machine, numbers are noisy: run
twice.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from inferledger.core.clickhouse import ClickHouseEvents  # noqa: E402
from inferledger.core.storage import Storage  # noqa: E402
from inferledger.fixtures import make_export_request  # noqa: E402
from ingest.span_writer import decode_for_storage, insert_spans  # noqa: E402


def ingest_duckdb(path: Path, spans: int, batch: int) -> float:
    """Seconds spent in insert_spans writes (decoding excluded)."""
    spent = 0.0
    with Storage(path, read_timeout_s=600) as storage:
        for i in range(0, spans, batch):
            n = min(batch, spans - i)
            payload = make_export_request(n, seed=7, id_offset=i).SerializeToString()
            decoded = decode_for_storage(payload)
            started = time.perf_counter()
            written = storage.write(lambda tx, d=decoded: insert_spans(tx, d))
            spent += time.perf_counter() - started
            assert written == n, (written, n)
    return spent


def size_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}.wal")) if p.exists())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp)")
    args = parser.parse_args(argv)
    work = args.dir or Path(tempfile.mkdtemp(prefix="ch-events-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    n, batch = args.spans, args.batch

    ingest_db = work / "ingest.duckdb"
    ingest_s = ingest_duckdb(ingest_db, n, batch)
    per_span = size_bytes(ingest_db) / n
    print(f"DuckDB ingest path (insert_spans): {n:,} spans in {ingest_s:.2f} s = "
          f"{n / ingest_s:,.0f} spans/s; file {per_span:.1f} bytes/span")  # fmt: skip

    arrow_db = work / "arrow.duckdb"
    duck_s = ch_s = 0.0
    source = Storage(ingest_db, read_timeout_s=3600).open()
    target = Storage(arrow_db, read_timeout_s=600).open()
    store = ClickHouseEvents(f"chdb://{work / 'chdb'}", database="bench", read_timeout_s=600)
    store.open()
    try:
        reader = source.iter_arrow(
            "SELECT * FROM spans ORDER BY start_ns", batch_rows=batch, timeout_s=3600
        )
        for index, record_batch in enumerate(reader):
            table = pa.Table.from_batches([record_batch])
            started = time.perf_counter()
            target.write(lambda tx, t=table: tx.append_arrow("spans", t))
            duck_s += time.perf_counter() - started
            started = time.perf_counter()
            store.insert_arrow("spans", table, f"bench:{index}")
            ch_s += time.perf_counter() - started
        source.close()
        target.close()
        started = time.perf_counter()
        store.command("OPTIMIZE TABLE spans FINAL")
        optimize_s = time.perf_counter() - started
        rows = store.fetchall("SELECT count() FROM spans")[0][0]
        assert rows == n, (rows, n)
        ch_bytes = store.disk_bytes("spans")
        columns = store.fetchall(
            "SELECT name, sum(data_compressed_bytes) AS b FROM system.columns "
            "WHERE database = 'bench' AND table = 'spans' GROUP BY name ORDER BY b DESC LIMIT 5"
        )
    finally:
        store.close()
    print(f"DuckDB append_arrow (flat rows):   {n:,} spans in {duck_s:.2f} s = "
          f"{n / duck_s:,.0f} spans/s; file {size_bytes(arrow_db) / n:.1f} bytes/span")  # fmt: skip
    print(f"ClickHouse chdb insert_arrow:      {n:,} spans in {ch_s:.2f} s = "
          f"{n / ch_s:,.0f} spans/s; parts {ch_bytes / n:.1f} bytes/span after OPTIMIZE FINAL "
          f"({optimize_s:.1f} s)")  # fmt: skip
    print("ClickHouse's largest columns (compressed bytes/span): " + ", ".join(
        f"{name} {b / n:.1f}" for name, b in columns))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
