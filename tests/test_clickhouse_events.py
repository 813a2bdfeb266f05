"""The ClickHouse event store (inferledger/core/clickhouse.py) and `inferledger migrate-ledger`,
on the real ClickHouse engine in this process (chdb, through clickhouse-connect's chdb://
backend): no mocks.

chDB hosts one engine per process on one data folder, so this module opens ONE folder (a
module-scoped fixture) and gives each test its own database in it. Module-scoped rather than
session-scoped: tests/test_export_sql.py opens chdb on a folder of its own, which it can only do
once every client of ours is closed, i.e. when this module is done.
"""

from __future__ import annotations

import io
import itertools
import socket
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from inferledger.cli import main
from inferledger.clickhouse_cli import (
    EVENT_TABLES,
    day_batches,
    migrate_ledger,
    verify_report,
)
from inferledger.core.clickhouse import ClickHouseEvents, parse_dsn
from inferledger.core.errors import (
    QueryError,
    QueryTimeoutError,
    SchemaTooNewError,
    SettingsError,
    StorageError,
)
from inferledger.core.storage import Storage
from inferledger.fixtures import BASE_NS, make_export_request
from inferledger.ledger_fixtures import worked_example
from ingest.outcome_parse import parse_outcomes_json
from ingest.outcome_writer import store_outcomes
from ingest.span_writer import decode_for_storage, insert_spans

DAY_NS = 86_400 * 10**9
_names = itertools.count()


@pytest.fixture(scope="module")
def chdb_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"chdb://{tmp_path_factory.mktemp('chdb-events')}"


@pytest.fixture
def store(chdb_dsn: str) -> Iterator[ClickHouseEvents]:
    """A store on its own, fresh database of the module's engine."""
    with ClickHouseEvents(chdb_dsn, database=f"t{next(_names)}") as s:
        yield s


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped DuckDB ledger with events on three UTC days: docs/cost-model.md's worked
    example (spans, scrapes, metric samples), 2,500 vLLM spans on the next two days through the
    receiver's decoder and INSERT, and three outcomes."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.duckdb"
    with Storage(path) as storage:
        worked_example(storage, BASE_NS)
        for day, n in ((1, 1500), (2, 1000)):
            request = make_export_request(n, seed=day, start_ns=BASE_NS + day * DAY_NS,
                                          id_offset=day * 100_000)  # fmt: skip
            decoded = decode_for_storage(request.SerializeToString())
            assert not decoded.errors
            storage.write(lambda tx, d=decoded: insert_spans(tx, d))
        outcomes = parse_outcomes_json(
            b'{"outcomes": ['
            b'{"id": "o1", "task_id": "t1", "outcome": "accepted", "review_seconds": 12.5},'
            b'{"id": "o2", "task_id": "t2", "outcome": "rejected", "score": 0.25},'
            b'{"id": "o3", "task_id": "t3", "outcome": "corrected", "reviewer": "ann"}]}'
        )
        store_outcomes(storage, outcomes)
    return path


# ----- the store -----


def test_migrations_are_recorded_idempotent_and_refused_when_newer(chdb_dsn: str) -> None:
    database = f"t{next(_names)}"
    with ClickHouseEvents(chdb_dsn, database=database) as s:
        assert s.schema_version == 1
        tables = {r[0] for r in s.fetchall("SHOW TABLES")}
        assert {"spans", "metric_samples", "scrapes", "outcomes", "schema_migrations"} <= tables
    with ClickHouseEvents(chdb_dsn, database=database) as s:  # again: nothing applied twice
        assert s.fetchall("SELECT version, name FROM schema_migrations FINAL") == [(1, "events")]
        assert s.fetchall("SELECT count() FROM schema_migrations") == [(1,)]
        s.command("INSERT INTO schema_migrations (version, name) VALUES (99, 'future')")
    with pytest.raises(SchemaTooNewError, match="schema version 99, newer"):
        ClickHouseEvents(chdb_dsn, database=database).open()


def test_the_same_batch_twice_with_one_token_is_stored_once(store: ClickHouseEvents) -> None:
    """metric_samples is a plain MergeTree (no key to merge on), so count() is the raw row
    count: only the token stops the second copy."""
    batch = pa.table({
        "ts": pa.array([BASE_NS // 1000, BASE_NS // 1000 + 15_000_000], pa.timestamp("us", "UTC")),
        "target": ["r0", "r0"], "metric": ["m", "m"], "family": ["m", "m"],
        "type": ["gauge", "gauge"],
        "labels": pa.array([[("engine", "0")], []], pa.map_(pa.string(), pa.string())),
        "series_key": ['engine="0"', ""], "le": [None, None], "value": [1.5, 2.25],
    })  # fmt: skip
    for token in ("a", "a", "a"):
        store.insert_arrow("metric_samples", batch, token)
    assert store.fetchall("SELECT count(), sum(value) FROM metric_samples") == [(2, 3.75)]
    store.insert_arrow("metric_samples", batch, "b")
    assert store.fetchall("SELECT count() FROM metric_samples") == [(4,)]


def test_spans_dedup_by_token_and_merge_by_key(store: ClickHouseEvents, ledger: Path) -> None:
    """spans is a ReplacingMergeTree on (hour, trace_id, span_id): a token stops a replayed
    batch (count() without FINAL); a batch under another token is stored again until merged,
    and FINAL (or counting distinct keys) reads it once."""
    with Storage(ledger) as storage:
        table = EVENT_TABLES["spans"]
        day = BASE_NS // DAY_NS + 2
        [(token, batch)] = list(day_batches(storage, table, day, 10_000))
    store.insert_arrow("spans", batch, token)
    store.insert_arrow("spans", batch, token)
    assert store.fetchall("SELECT count() FROM spans") == [(1000,)]
    store.insert_arrow("spans", batch, token + "-other")
    assert store.fetchall("SELECT count() FROM spans") == [(2000,)]
    assert store.fetchall("SELECT count() FROM spans FINAL") == [(1000,)]
    assert store.fetchall("SELECT uniqExact(trace_id, span_id) FROM spans") == [(1000,)]


def test_a_query_past_its_time_limit_raises_query_timeout(store: ClickHouseEvents) -> None:
    with pytest.raises(QueryTimeoutError, match=r"longer than 0\.3 s"):
        store.query_arrow("SELECT sum(cityHash64(number)) FROM numbers(1000000000000)",
                          timeout_s=0.3)  # fmt: skip
    with pytest.raises(QueryError, match="UNKNOWN_IDENTIFIER") as err:
        store.query_arrow("SELECT no_such_column FROM spans")
    assert "\n" not in str(err.value)
    assert store.ping()
    assert store.query_arrow("SELECT {n:Int32} + 1 AS x", {"n": 41}).to_pylist() == [{"x": 42}]


def test_retention_sets_a_ttl_that_drops_old_rows(store: ClickHouseEvents, ledger: Path) -> None:
    with Storage(ledger) as storage:
        day = BASE_NS // DAY_NS + 1  # spans of May 2026: older than 30 days
        for token, batch in day_batches(storage, EVENT_TABLES["spans"], day, 10_000):
            store.insert_arrow("spans", batch, token)
    assert store.fetchall("SELECT count() FROM spans") == [(1500,)]
    store.set_retention("spans", 30)
    assert (
        "TTL toDateTime(intDiv(start_ns, 1000000000), 'UTC') + toIntervalDay(30)"
        in (store.fetchall("SHOW CREATE TABLE spans")[0][0])
    )
    store.command("OPTIMIZE TABLE spans FINAL")
    assert store.fetchall("SELECT count() FROM spans") == [(0,)]
    store.set_retention("spans", None)
    assert "TTL" not in store.fetchall("SHOW CREATE TABLE spans")[0][0]
    with pytest.raises(SettingsError, match="has no TTL"):
        store.set_retention("outcomes", 30)


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("http://ledger:s3cret@ch.example:8123/db", "holds a password"),
        ("postgres://ch.example/db", "scheme 'postgres' is not supported"),
        ("chdb://relative/path", "chdb:///absolute/path"),
    ],
)
def test_bad_dsns_are_refused_in_one_line(dsn: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message) as err:
        parse_dsn(dsn)
    assert "\n" not in str(err.value) and "s3cret" not in str(err.value)


def test_an_unreachable_server_is_one_line_naming_the_dsn() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"http://ledger@127.0.0.1:{port}/events"
    with pytest.raises(StorageError, match="cannot connect to ClickHouse at") as err:
        ClickHouseEvents(dsn, connect_timeout_s=2).open()
    assert dsn in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).endswith("Connection refused")


def test_a_second_engine_folder_in_one_process_is_refused(
    store: ClickHouseEvents, tmp_path: Path
) -> None:
    with pytest.raises(StorageError, match="one engine per process"):
        ClickHouseEvents(f"chdb://{tmp_path}").open()
    assert store.ping()


# ----- migrate-ledger -----


def _counts(store: ClickHouseEvents) -> dict[str, int]:
    return {t: store.fetchall(f"SELECT count() FROM {t}")[0][0] for t in EVENT_TABLES}


def test_migrate_ledger_copies_verifies_and_reruns_without_duplicates(
    store: ClickHouseEvents, ledger: Path
) -> None:
    with Storage(ledger) as storage:
        expected = {t: storage.scalar(f"SELECT count(*) FROM {t}") for t in EVENT_TABLES}
        assert expected["spans"] > 2500 and expected["metric_samples"] > 0
        assert expected["scrapes"] == 10 and expected["outcomes"] == 3
        # A crash after the first batch of spans' busiest day: that batch is already there.
        day = BASE_NS // DAY_NS + 1
        batches = list(day_batches(storage, EVENT_TABLES["spans"], day, 400))
        assert [b.num_rows for _, b in batches] == [400, 400, 400, 300]
        again = list(day_batches(storage, EVENT_TABLES["spans"], day, 400))
        assert [t for t, _ in batches] == [t for t, _ in again]  # the same tokens, rows
        assert all(a.equals(b) for (_, a), (_, b) in zip(batches, again, strict=True))
        token, first = batches[0]
        store.insert_arrow("spans", first, token)

        out = io.StringIO()
        results = migrate_ledger(storage, store, list(EVENT_TABLES.values()), batch_rows=400,
                                 out=out)  # fmt: skip
        assert all(v.ok for v in results), verify_report(results)
        assert _counts(store) == expected  # raw counts, no FINAL: the replayed batch was dropped
        assert "spans: " in out.getvalue()

        again = io.StringIO()
        results = migrate_ledger(storage, store, list(EVENT_TABLES.values()), batch_rows=400,
                                 out=again)  # fmt: skip
        assert all(v.ok for v in results)
        assert _counts(store) == expected
        assert "0 rows in 0 batches" in again.getvalue()

        # A tampered row in ClickHouse: verification names the table and the figure.
        store.command(
            "ALTER TABLE outcomes UPDATE review_s = 13.5 WHERE outcome_id = 'o1' "
            "SETTINGS mutations_sync = 2"
        )
        results = migrate_ledger(storage, store, [EVENT_TABLES["outcomes"]], out=io.StringIO())
    [outcomes] = results
    assert not outcomes.ok and any(d.startswith("review_s: sum") for d in outcomes.differing)
    assert "outcomes" in verify_report(results) and "DIFFERS" in verify_report(results)


def test_migrate_ledger_command(
    chdb_dsn: str, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI on the module's engine (its store uses the database `inferledger`): exit 0 and
    the table; a rerun sends nothing; a tampered table exits 1 naming it."""
    argv = ["migrate-ledger", "--to", chdb_dsn, "--db", str(ledger), "--batch-rows", "700"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "verified: 4 tables match" in out and "clickhouse rows" in out
    assert main([*argv, "--tables", "spans,scrapes"]) == 0
    assert "0 rows in 0 batches" in capsys.readouterr().out
    # Rows deleted in ClickHouse are not sent again: their batches' tokens are remembered
    # (docs/clickhouse.md); verification says so. TRUNCATE (or DROP PARTITION) forgets them.
    with ClickHouseEvents(chdb_dsn) as s:
        s.command("ALTER TABLE scrapes DELETE WHERE samples > 0 SETTINGS mutations_sync = 2")
    assert main([*argv, "--tables", "scrapes"]) == 1
    assert "verification failed: scrapes differ" in capsys.readouterr().err
    with ClickHouseEvents(chdb_dsn) as s:
        s.command("TRUNCATE TABLE scrapes")
    assert main([*argv, "--tables", "scrapes"]) == 0
    assert "10 rows in 1 batches" in capsys.readouterr().out
    with ClickHouseEvents(chdb_dsn) as s:
        s.command(
            "ALTER TABLE spans UPDATE input_tokens = input_tokens + 1 WHERE "
            "input_tokens IS NOT NULL SETTINGS mutations_sync = 2"
        )
    assert main([*argv, "--tables", "spans,outcomes"]) == 1
    captured = capsys.readouterr()
    assert "verification failed: spans differ" in captured.err
    assert main([*argv, "--tables", "spanz"]) == 2
    assert "unknown table spanz" in capsys.readouterr().err


def test_the_event_tables_have_duckdbs_columns_and_nulls(store: ClickHouseEvents) -> None:
    """Every column of DuckDB's raw event tables, in its order, NULL-able exactly where
    DuckDB's is."""
    with Storage(":memory:") as storage:
        for table in EVENT_TABLES:
            duck = storage.fetchall(
                "SELECT column_name, is_nullable = 'YES' FROM information_schema.columns "
                "WHERE table_schema = 'main' AND table_name = ? ORDER BY ordinal_position",
                [table],
            )
            ch = store.fetchall(
                "SELECT name, type LIKE '%Nullable(%' FROM system.columns WHERE "
                "database = {db:String} AND table = {t:String} ORDER BY position",
                {"db": store.database, "t": table},
            )
            assert [(n, bool(x)) for n, x in ch] == [(n, bool(x)) for n, x in duck], table


def test_storage_iter_arrow_streams_bounded_batches_within_its_time_limit() -> None:
    """Storage.iter_arrow, which migrate-ledger reads through: batches of at most N rows, and
    the read stopped at its time limit; the cursor serves the next read."""
    with Storage(":memory:") as storage:
        sizes = [
            b.num_rows
            for b in storage.iter_arrow(
                "SELECT range AS x FROM range(25000) ORDER BY x", batch_rows=10_000
            )
        ]
        assert sum(sizes) == 25_000 and max(sizes) <= 10_000
        with pytest.raises(QueryTimeoutError):
            for _ in storage.iter_arrow(
                "SELECT sum(hash(a.range + b.range)) FROM range(100000) a, range(100000) b",
                timeout_s=0.3,
            ):
                pass
        assert storage.scalar("SELECT 42") == 42
