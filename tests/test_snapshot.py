"""The consistent snapshot (ledger/snapshot.py, `inferledger snapshot`, issue #14): every analyst
view as a table of a standalone DuckDB file, read at one moment while ingest goes on, opened by
a plain DuckDB in another process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from inferledger.cli import main
from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage
from inferledger.fixtures import make_export_request
from inferledger.ledger_fixtures import worked_example
from ingest.span_writer import decode_for_storage, insert_spans
from ledger.catalog import ANALYST_VIEWS
from ledger.marts import Refresher
from ledger.snapshot import META_TABLE, SnapshotKeeper, build_snapshot

BASE = datetime(2026, 3, 2, 10, tzinfo=UTC)
BASE_NS = int(BASE.timestamp()) * 1_000_000_000

#: A plain DuckDB in its own process: open read-only, print {table: rows} and the metadata.
_READER = """
import duckdb, json, sys
con = duckdb.connect(sys.argv[1], read_only=True)
tables = [r[0] for r in con.execute("select table_name from duckdb_tables()").fetchall()]
counts = {t: con.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables}
meta = con.execute("select view_name, row_count from snapshot_views").fetchall()
pair = con.execute(
    "select (select sum(spans) from spans_by_service), (select spans from ingest_summary)"
).fetchone()
print(json.dumps({"counts": counts, "meta": dict(meta), "spans": list(pair)}))
"""


def read_elsewhere(path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _READER, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def test_every_analyst_view_becomes_a_table_with_its_rows(storage: Storage, tmp_path) -> None:
    worked_example(storage, BASE_NS)
    Refresher(storage).refresh(full=True)
    info = build_snapshot(storage, tmp_path / "views.duckdb")
    assert set(info.rows) == set(ANALYST_VIEWS)
    for view in ANALYST_VIEWS:
        assert info.rows[view] == storage.scalar(f'select count(*) from "{view}"'), view
    assert info.rows["request_costs"] == 2
    seen = read_elsewhere(tmp_path / "views.duckdb")
    assert seen["meta"] == info.rows
    assert {k: v for k, v in seen["counts"].items() if k != META_TABLE} == info.rows
    # only the snapshot is left: no temporary file, no WAL
    assert sorted(p.name for p in tmp_path.iterdir() if "views" in p.name) == ["views.duckdb"]


def test_a_snapshot_taken_during_ingest_is_one_moment(tmp_path) -> None:
    """Spans are committed in batches of 50 while the snapshot is built: every view of the
    snapshot must describe the same commit (two views over spans agree, and the count is one
    the writer committed), and a plain DuckDB in another process reads it while the service
    keeps writing."""
    with Storage(tmp_path / "live.duckdb") as storage:
        committed = [0]
        stop = threading.Event()

        def ingest() -> None:
            k = 0
            while not stop.is_set():
                payload = make_export_request(50, seed=k, start_ns=BASE_NS).SerializeToString()
                decoded = decode_for_storage(payload)
                storage.write(lambda tx, d=decoded: insert_spans(tx, d))
                committed.append(committed[-1] + 50)
                k += 1

        writer = threading.Thread(target=ingest, daemon=True)
        writer.start()
        try:
            while committed[-1] < 500:
                time.sleep(0.01)
            infos = [build_snapshot(storage, tmp_path / f"s{i}.duckdb") for i in range(3)]
            during = committed[-1]
            time.sleep(0.3)
            seen = [read_elsewhere(tmp_path / f"s{i}.duckdb") for i in range(3)]
            assert committed[-1] > during, "ingest stopped while snapshots were read"
        finally:
            stop.set()
            writer.join(30)
    for info, snap in zip(infos, seen, strict=True):
        total, summary = snap["spans"]
        assert total == summary, "two views of one snapshot saw different moments"
        assert total in committed and total % 50 == 0
        assert snap["meta"] == info.rows
    assert seen[0]["spans"][0] <= seen[1]["spans"][0] <= seen[2]["spans"][0]


def test_from_and_to_keep_rows_of_the_window(storage: Storage, tmp_path) -> None:
    worked_example(storage, BASE_NS)
    Refresher(storage).refresh(full=True)
    whole = build_snapshot(storage, tmp_path / "all.duckdb")
    day = timedelta(days=1)
    part = build_snapshot(storage, tmp_path / "part.duckdb", start=BASE - day, end=BASE + day)
    after = build_snapshot(storage, tmp_path / "after.duckdb", start=BASE + day)
    assert whole.rows["request_costs"] == part.rows["request_costs"] == 2
    assert after.rows["request_costs"] == 0 and after.rows["spend_hourly"] == 0
    assert whole.rows["spend_hourly"] > 0
    assert part.time_columns["request_costs"] == "start_time"
    assert part.time_columns["prices_effective"] is None
    assert part.rows["prices_effective"] == whole.rows["prices_effective"]


def test_bad_input_writes_nothing(storage: Storage, tmp_path) -> None:
    with pytest.raises(BadInputError, match="not an analyst view"):
        build_snapshot(storage, tmp_path / "x.duckdb", views=["spans"])
    with pytest.raises(BadInputError, match="before"):
        build_snapshot(storage, tmp_path / "x.duckdb", start=BASE, end=BASE)
    with pytest.raises(BadInputError, match="no folder"):
        build_snapshot(storage, tmp_path / "missing" / "x.duckdb")
    assert [p.name for p in tmp_path.iterdir() if "x.duckdb" in p.name] == []


def test_the_keeper_rebuilds_a_stale_snapshot_in_the_background(storage: Storage, tmp_path):
    now = [time.time()]
    keeper = SnapshotKeeper(storage, tmp_path / "c.duckdb", max_age_s=60, clock=lambda: now[0])
    path = keeper.current()  # none yet: built at once
    assert Path(path).exists() and keeper.info is not None
    first = os.stat(path).st_ino
    assert keeper.current() == path and not keeper.building  # fresh: no rebuild
    now[0] += 120
    keeper.current()  # stale: rebuilt in the background, renamed over the old one
    keeper._thread.join(30)  # wait for the background build
    assert os.stat(path).st_ino != first
    assert keeper.last_error is None


def test_the_cli_writes_a_snapshot(tmp_path, capsys) -> None:
    db = tmp_path / "ledger.duckdb"
    with Storage(db) as storage:
        worked_example(storage, BASE_NS)
    out = tmp_path / "views.duckdb"
    assert main(["snapshot", "--db", str(db), "--out", str(out)]) == 0
    assert f"to {out}" in capsys.readouterr().out
    assert read_elsewhere(out)["meta"]["request_costs"] >= 0
    assert main(["snapshot", "--db", str(db), "--out", str(out), "--from", "yesterday"]) == 2
    assert "--from: not an ISO 8601" in capsys.readouterr().err
    assert main(["snapshot", "--db", str(tmp_path / "none.duckdb"), "--out", str(out)]) == 2
