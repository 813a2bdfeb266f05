"""The storage gateway: migrations, the single writer with group commit, reads with limits."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from inferledger.core.errors import (
    ConstraintError,
    QueryError,
    QueryTimeoutError,
    QueueFullError,
    SchemaTooNewError,
)
from inferledger.core.storage import Storage, load_migrations


def test_fresh_file_is_migrated_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "a.duckdb"
    with Storage(path) as st:
        latest = load_migrations()[-1].version
        assert st.schema_version == latest
        assert st.scalar("select count(*) from spans") == 0
        versions = [r[0] for r in st.fetchall("select version from schema_migrations order by 1")]
        assert versions == list(range(1, latest + 1))
    with Storage(path) as st:  # reopening applies nothing twice
        assert st.scalar("select count(*) from schema_migrations") == latest


def test_older_file_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    first = load_migrations()[0]
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR NOT NULL,"
        " applied_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp)"
    )
    con.execute(first.sql)
    con.execute("INSERT INTO schema_migrations (version, name) VALUES (1, ?)", [first.name])
    con.close()
    with Storage(path) as st:
        assert st.schema_version == load_migrations()[-1].version


def test_newer_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.duckdb"
    with Storage(path) as st:
        st.execute_write("INSERT INTO schema_migrations (version, name) VALUES (999, 'future')")
    with pytest.raises(SchemaTooNewError, match="schema version 999, newer than this"):
        Storage(path).open()


def test_group_commit_isolates_a_failing_write(storage: Storage) -> None:
    storage.execute_write("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    futures = [
        storage.submit(lambda cur, i=i: cur.execute("INSERT INTO t VALUES (?)", [i]))
        for i in range(50)
    ]
    bad = storage.submit(lambda cur: cur.execute("INSERT INTO t VALUES (1)"))  # duplicate key
    futures += [
        storage.submit(lambda cur, i=i: cur.execute("INSERT INTO t VALUES (?)", [i]))
        for i in range(50, 60)
    ]
    for f in futures:
        f.result(10)
    with pytest.raises(ConstraintError, match="Constraint Error"):
        bad.result(10)
    assert storage.scalar("select count(*) from t") == 60
    assert storage.queue_depth == 0


def test_queue_is_bounded(tmp_path: Path) -> None:
    st = Storage(tmp_path / "q.duckdb", queue_max_units=100).open()
    gate = threading.Event()
    try:
        blocker = st.submit(lambda cur: gate.wait(10), units=60)
        st.submit(lambda cur: None, units=40)
        with pytest.raises(QueueFullError, match="write queue is full"):
            st.submit(lambda cur: None, units=1)
        gate.set()
        blocker.result(10)
    finally:
        gate.set()
        st.close()
    assert st.queue_depth == 0


def test_reads_are_time_limited(storage: Storage) -> None:
    with pytest.raises(QueryTimeoutError, match=r"longer than 0\.2 s"):
        storage.fetchall("select count(*) from range(10000000000)", timeout_s=0.2)
    assert storage.scalar("select 42") == 42  # the cursor is usable afterwards


def test_readers_in_threads_while_writing(storage: Storage) -> None:
    storage.execute_write("CREATE TABLE c (x INTEGER)")
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(100):
                storage.scalar("select count(*) from c")
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(100):
        storage.execute_write("INSERT INTO c VALUES (?)", [i])
    for t in threads:
        t.join()
    assert not errors
    assert storage.scalar("select count(*) from c") == 100


def test_close_flushes_queued_writes(tmp_path: Path) -> None:
    path = tmp_path / "flush.duckdb"
    st = Storage(path).open()
    st.execute_write("CREATE TABLE f (x INTEGER)")
    for i in range(200):
        st.submit(lambda cur, i=i: cur.execute("INSERT INTO f VALUES (?)", [i]))
    st.close()
    with Storage(path) as again:
        assert again.scalar("select count(*) from f") == 200


def test_views_of_an_older_version_are_replaced_even_when_columns_changed(tmp_path):
    """An older version's view lacking a column that another view now reads must not stop the
    next start: every view is dropped and recreated."""
    db = tmp_path / "old.duckdb"
    with Storage(db) as st:
        st.execute_write(
            "CREATE OR REPLACE VIEW spend_hourly AS "
            "SELECT hour, stage, requests, cost_separate AS cost FROM mart_spend_hourly"
        )
    with Storage(db) as st:  # spend_daily reads spend_hourly.failed_requests
        assert st.scalar("select count(*) from spend_daily") == 0
        cols = {r[0] for r in st.fetchall("describe spend_hourly")}
        assert "failed_requests" in cols


def test_with_on_an_opened_storage_does_not_open_it_again(tmp_path: Path) -> None:
    # open_for_command returns an opened Storage that commands use in a `with`; opening it a
    # second time started a second writer on the same queue, and close() then waited 30 s
    # whenever the wrong writer took the stop signal (found while hardening `refresh`, #17).
    def writers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "storage-writer" and t.is_alive()}

    before = writers()  # other tests' storages may still be open in this process
    st = Storage(tmp_path / "a.duckdb").open()
    with st as same:
        assert same is st
        ours = writers() - before
        assert len(ours) == 1
        same.write(lambda cur: cur.execute("create table t (x int)"))
    assert not any(t.is_alive() for t in ours)


def test_the_write_interface_moves_arrow_batches_and_names_engine_errors(
    storage: Storage,
) -> None:
    import pyarrow as pa

    storage.execute_write("CREATE TABLE batch_t (k INTEGER PRIMARY KEY, v VARCHAR)")
    batch = pa.table({"v": ["a", "b"], "k": [1, 2]})  # columns matched by name, not position

    def op(tx):
        assert tx.append_arrow("batch_t", batch) == 2
        tx.insert_arrow("INSERT INTO batch_t SELECT k + 10, v FROM more", {"more": batch})
        # a read inside the transaction sees its own writes, as Arrow
        return tx.arrow("SELECT count(*) AS n FROM batch_t").column("n").to_pylist()

    assert storage.write(op) == [4]
    # the batch's name is gone once the statement ran: nothing leaks into the next write
    with pytest.raises(QueryError, match="more"):
        storage.write(lambda tx: tx.execute("SELECT * FROM more"))
    # engine errors come out as the interface's errors, reads and writes alike
    with pytest.raises(ConstraintError):
        storage.write(lambda tx: tx.append_arrow("batch_t", batch))
    with pytest.raises(QueryError, match="no_such_table"):
        storage.query("SELECT * FROM no_such_table")
    assert not isinstance(QueryError("x"), duckdb.Error)
    # the failed writes rolled back whole: still the four rows of the first one
    assert storage.scalar("SELECT count(*) FROM batch_t") == 4
