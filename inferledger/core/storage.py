"""The storage gateway: the only module that opens DuckDB.

DuckDB allows one read-write process per file, and inside that process one connection object
must not be shared across threads. So (after datasette's ``Database``):

- one root connection is opened here and never queried directly;
- one writer thread owns a cursor and applies every write, fed by a bounded queue. Several
  queued writes are applied in one transaction (group commit) and each caller's future resolves
  only after COMMIT, so an acknowledgement means the rows are durable;
- every reader thread gets its own cursor; every read carries a time limit enforced by a
  watchdog that calls ``interrupt()`` (DuckDB has no statement timeout of its own);
- the schema is created and migrated at open from ``sql/migrations/NNNN_*.sql``; a file whose
  schema is newer than this code knows is refused.

A write is a callable ``op(tx) -> result``, run on the writer thread inside a transaction;
``tx`` is a :class:`Transaction`, the storage interface's write side: statements with bound
parameters, Arrow batches in (``append_arrow``, ``insert_arrow``), Arrow out. It must not COMMIT
or ROLLBACK itself. Reads (``query``, ``query_arrow``, ``fetchall``, ``scalar``) return Arrow,
polars or rows. Nothing above this module sees a DuckDB connection or cursor, and engine errors
come out as :class:`QueryError` (``ConstraintError`` for a broken key), so a second engine is a
second implementation of this interface (tests/test_layers.py checks the first half).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import duckdb_engine
import polars as pl
import pyarrow as pa
from sqlalchemy.sql.expression import Executable

from inferledger.core.errors import (
    ConstraintError,
    QueryError,
    QueryTimeoutError,
    QueueFullError,
    SchemaTooNewError,
    StorageError,
)
from inferledger.core.sql_files import load_macro_sql, load_migrations, load_view_sql

log = logging.getLogger(__name__)

T = TypeVar("T")

_GROUP_MAX_OPS = 64


def _create_in_dependency_order(
    cur: duckdb.DuckDBPyConnection, statements: list[tuple[str, str]]
) -> None:
    """Run CREATE statements (macros, views) so that each binds after its inputs exist: a
    statement that fails on a missing catalog entry is retried after the others, so files need
    no numeric prefixes. Fails on the first statement that never binds."""
    pending = list(statements)
    while pending:
        failed: list[tuple[str, str]] = []
        last_error: Exception | None = None
        for name, sql in pending:
            try:
                cur.execute(sql)
            except duckdb.CatalogException as exc:
                failed.append((name, sql))
                last_error = exc
            except duckdb.Error as exc:
                raise StorageError(f"{name} does not bind: {exc}") from None
        if len(failed) == len(pending):
            raise StorageError(f"{failed[0][0]} does not bind: {last_error}")
        pending = failed


def quote_ident(name: str) -> str:
    """Quote an SQL identifier (the one helper for identifiers; values are always bound)."""
    return '"' + name.replace('"', '""') + '"'


#: Storage.copy_to's formats: name -> COPY options (https://duckdb.org/docs/sql/statements/copy).
COPY_FORMATS: dict[str, str] = {
    "csv": "FORMAT csv, HEADER true",
    "parquet": "FORMAT parquet, COMPRESSION zstd",
    "jsonl": "FORMAT json",
}


def _sql_text(value: str) -> str:
    """A string literal where DuckDB binds no parameter (COPY's file and options): our text."""
    return "'" + value.replace("'", "''") + "'"


def _query_error(exc: duckdb.Error) -> QueryError:
    kind = ConstraintError if isinstance(exc, duckdb.ConstraintException) else QueryError
    return kind(str(exc))


Params = Sequence[Any] | Mapping[str, Any] | None

#: SQLAlchemy Core statements (the relational metadata's, built on ledger/schema.py) are
#: compiled with duckdb-engine's dialect, positional ``?`` parameters, and run on this module's
#: connections, so they share the single writer and its transactions with everything else.
_DIALECT = duckdb_engine.Dialect(paramstyle="qmark")


#: Compiled statements by SQLAlchemy cache key (its own compiled-cache mechanism): a store's
#: statements differ only in their values, so each shape is compiled once (~0.6 ms) and later
#: ones only extract their values (~0.1 ms). Bounded: shapes are code, not data, but an IN list
#: of a new length is a new shape, so statements with an expanding parameter are not cached.
_COMPILED: dict[Any, Any] = {}
_COMPILED_MAX = 2048


def compile_statement(stmt: Executable) -> tuple[str, list[Any]]:
    """A SQLAlchemy Core statement as (SQL, positional parameters) for this engine."""
    key = stmt._generate_cache_key()  # type: ignore[attr-defined]
    cacheable = key is not None and not any(b.expanding for b in key.bindparams)
    compiled = _COMPILED.get(key.key) if cacheable else None
    if compiled is None:
        compiled = stmt.compile(
            dialect=_DIALECT,
            cache_key=key if cacheable else None,
            compile_kwargs={"render_postcompile": True},
        )
        if cacheable and len(_COMPILED) < _COMPILED_MAX:
            _COMPILED[key.key] = compiled
        values = compiled.construct_params()
    else:
        values = compiled.construct_params(extracted_parameters=key.bindparams)
    return compiled.string, [values[name] for name in compiled.positiontup or ()]


class Transaction:
    """One open write transaction, as a write op sees it. Statements take bound parameters
    (``?`` or ``$name``); identifiers go through :func:`quote_ident`. Every engine error is
    raised as :class:`QueryError` and rolls the whole transaction back."""

    __slots__ = ("_cur",)

    def __init__(self, cur: duckdb.DuckDBPyConnection) -> None:
        self._cur = cur

    def execute(self, sql: str, params: Params = None) -> Transaction:
        """Run one statement; read its rows with :meth:`fetchall` or :meth:`fetchone`."""
        try:
            self._cur.execute(sql, params or [])
        except duckdb.Error as exc:
            raise _query_error(exc) from None
        return self

    def run(self, stmt: Executable) -> Transaction:
        """Run one SQLAlchemy Core statement (select, insert, update, delete, an upsert); read
        its rows with :meth:`fetchall` or :meth:`fetchone`."""
        return self.execute(*compile_statement(stmt))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row of parameters."""
        try:
            self._cur.executemany(sql, rows)
        except duckdb.Error as exc:
            raise _query_error(exc) from None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._cur.fetchall()

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._cur.fetchone()

    def arrow(self, sql: str, params: Params = None) -> pa.Table:
        """Run a query inside the transaction (it sees the transaction's own writes) and return
        its rows as Arrow."""
        try:
            rel = self._cur.sql(sql, params=params) if params else self._cur.sql(sql)
        except duckdb.Error as exc:
            raise _query_error(exc) from None
        if rel is None:
            raise StorageError("Transaction.arrow needs a statement that returns rows")
        return rel.to_arrow_table()

    @contextlib.contextmanager
    def arrow_inputs(self, inputs: Mapping[str, pa.Table]) -> Iterator[Transaction]:
        """Make each Arrow table of `inputs` readable under its name by the statements run in
        the block (an INSERT ... SELECT from sql/ingest, a check before it): the batch-shaped
        write path, with no copy."""
        names = []
        try:
            for name, table in inputs.items():
                try:
                    self._cur.register(name, table)
                except duckdb.Error as exc:
                    raise _query_error(exc) from None
                names.append(name)
            yield self
        finally:
            for name in names:
                with contextlib.suppress(duckdb.Error):
                    self._cur.unregister(name)

    def insert_arrow(
        self, sql: str, inputs: Mapping[str, pa.Table], params: Params = None
    ) -> Transaction:
        """Run `sql` with `inputs` readable under their names (see :meth:`arrow_inputs`)."""
        with self.arrow_inputs(inputs):
            return self.execute(sql, params)

    def append_arrow(self, table: str, data: pa.Table) -> int:
        """Append an Arrow table's rows to `table`, matching columns by name."""
        self.insert_arrow(
            f"INSERT INTO {quote_ident(table)} BY NAME SELECT * FROM _append_batch",
            {"_append_batch": data},
        )
        return data.num_rows


WriteOp = Callable[[Transaction], T]


class _Job:
    __slots__ = ("future", "op", "units")

    def __init__(self, op: WriteOp[Any], units: int) -> None:
        self.op = op
        self.units = units
        self.future: Future[Any] = Future()


_STOP = object()


class Storage:
    """Owns the DuckDB file: migrations, the single writer, per-thread readers."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_timeout_s: float = 30.0,
        queue_max_units: int = 500_000,
        memory_limit: str = "2GB",
        threads: int = 2,
        checkpoint_threshold: str = "256MB",
        on_commit: Callable[[int, float], None] | None = None,
    ) -> None:
        self.path = str(path)
        self.read_timeout_s = read_timeout_s
        self.queue_max_units = queue_max_units
        self._memory_limit = memory_limit
        self._threads = threads
        self._checkpoint_threshold = checkpoint_threshold
        self._on_commit = on_commit
        self._root: duckdb.DuckDBPyConnection | None = None
        self._queue: queue.Queue[Any] = queue.Queue()
        self._pending_units = 0
        self._pending_lock = threading.Lock()
        self._local = threading.local()
        self._cursor_lock = threading.Lock()
        self._writer: threading.Thread | None = None
        self._closed = threading.Event()
        self.schema_version = 0

    # ---------------------------------------------------------------- lifecycle
    def open(self) -> Storage:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._root = duckdb.connect(
                self.path,
                config={
                    "memory_limit": self._memory_limit,
                    "threads": self._threads,
                    "checkpoint_threshold": self._checkpoint_threshold,
                },
            )
        except duckdb.Error as exc:
            raise StorageError(f"cannot open database {self.path!r}: {exc}") from None
        writer = self._root.cursor()
        try:
            self._migrate(writer)
        except BaseException:
            writer.close()
            self._root.close()
            self._root = None
            raise
        self._writer = threading.Thread(
            target=self._write_loop, args=(writer,), name="storage-writer", daemon=True
        )
        self._writer.start()
        return self

    def close(self, timeout_s: float = 30.0) -> None:
        """Finish every queued write, checkpoint, close. Safe to call twice."""
        if self._root is None or self._closed.is_set():
            return
        self._closed.set()
        self._queue.put(_STOP)
        if self._writer is not None:
            self._writer.join(timeout_s)
        try:
            self._root.execute("CHECKPOINT")
        except duckdb.Error as exc:  # closing anyway; the WAL replays on next open
            log.warning("checkpoint at close failed: %s", exc)
        self._root.close()
        self._root = None

    def __enter__(self) -> Storage:
        # open_for_command hands back an opened Storage that callers use in a `with`: opening
        # it again would connect a second time and start a second writer on the same queue.
        return self if self._root is not None else self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- schema
    def _migrate(self, cur: duckdb.DuckDBPyConnection) -> None:
        migrations = load_migrations()
        latest = migrations[-1].version if migrations else 0
        cur.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp)"
        )
        row = cur.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
        current = int(row[0]) if row else 0
        if current > latest:
            raise SchemaTooNewError(
                f"database {self.path!r} has schema version {current}, newer than this "
                f"InferLedger supports ({latest}); upgrade InferLedger or use another --db"
            )
        for mig in migrations:
            if mig.version <= current:
                continue
            log.info("migrating %s to schema version %d (%s)", self.path, mig.version, mig.name)
            cur.execute("BEGIN")
            try:
                cur.execute(mig.sql)
                cur.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
                    [mig.version, mig.name],
                )
                cur.execute("COMMIT")
            except duckdb.Error as exc:
                cur.execute("ROLLBACK")
                raise StorageError(f"migration {mig.version} ({mig.name}) failed: {exc}") from None
        if current < latest:
            # Schema changes go into the database file at once, not only the WAL: DuckDB 2.0.1
            # replays some DDL from the WAL before its built-in extensions load (an ALTER of a
            # table whose CHECK calls isfinite() tried to download one), so a crash before the
            # next checkpoint could leave a file that will not open offline.
            cur.execute("CHECKPOINT")
        # Views and macros are code, not data: recreated at every start so they always match
        # this version. Each statement commits on its own: a failed statement would abort an
        # enclosing transaction, and out-of-order files are retried.
        # Every view is dropped first: a view of an older version binds against the views it
        # reads, so recreating them in place fails when a view gains a column another uses.
        for (name,) in cur.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'"
        ).fetchall():
            cur.execute(f"DROP VIEW IF EXISTS {quote_ident(name)}")
        statements = [(f"sql/macros/{name}", sql) for name, sql in load_macro_sql()]
        statements += [
            (f"sql/views/{name}.sql", f"CREATE OR REPLACE VIEW {quote_ident(name)} AS {sql}")
            for name, sql in load_view_sql()
        ]
        _create_in_dependency_order(cur, statements)
        self.schema_version = latest

    # ---------------------------------------------------------------- writes
    @property
    def queue_depth(self) -> int:
        """Units (e.g. spans) accepted but not yet committed."""
        return self._pending_units

    def submit(self, op: WriteOp[T], units: int = 1) -> Future[T]:
        """Queue a write; raises QueueFullError at once when the queue has no room."""
        if self._root is None or self._closed.is_set():
            raise StorageError("storage is closed")
        with self._pending_lock:
            # An op larger than the whole queue is still admitted when the queue is empty,
            # otherwise it could never run; memory stays bounded by max_body_bytes then.
            if self._pending_units and self._pending_units + units > self.queue_max_units:
                raise QueueFullError(
                    f"write queue is full ({self._pending_units} of {self.queue_max_units} "
                    "units pending)"
                )
            self._pending_units += units
        job = _Job(op, units)
        self._queue.put(job)
        return job.future

    def write(self, op: WriteOp[T], units: int = 1, timeout_s: float | None = None) -> T:
        """Queue a write and wait until it is committed; returns the op's result."""
        return self.submit(op, units).result(timeout_s)

    def execute_write(self, sql: str, params: Params = None) -> None:
        """Convenience: one parameterised statement as a write."""
        self.write(lambda tx: tx.execute(sql, params))

    def _write_loop(self, cur: duckdb.DuckDBPyConnection) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                break
            batch = [first]
            while len(batch) < _GROUP_MAX_OPS:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stopping = True
                    break
                batch.append(nxt)
            self._apply(cur, batch)
        # Drain whatever arrived after STOP was queued (submit refuses once closed).
        rest = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                rest.append(item)
        if rest:
            self._apply(cur, rest)
        cur.close()

    def _apply(self, cur: duckdb.DuckDBPyConnection, batch: list[_Job]) -> None:
        started = time.perf_counter()
        try:
            cur.execute("BEGIN")
            tx = Transaction(cur)
            results = [job.op(tx) for job in batch]
            cur.execute("COMMIT")
        except Exception as exc:
            # One bad op must not fail its neighbours: roll back, then apply one by one.
            # The failed statement may already have ended the transaction.
            with contextlib.suppress(duckdb.Error):
                cur.execute("ROLLBACK")
            if len(batch) > 1:
                for job in batch:
                    self._apply(cur, [job])
            else:
                self._release(batch[0].units)
                batch[0].future.set_exception(exc)
            return
        units = 0
        for job, result in zip(batch, results, strict=True):
            units += job.units
            self._release(job.units)
            job.future.set_result(result)
        if self._on_commit is not None:
            self._on_commit(units, time.perf_counter() - started)

    def _release(self, units: int) -> None:
        with self._pending_lock:
            self._pending_units -= units

    # ---------------------------------------------------------------- reads
    def _cursor(self) -> duckdb.DuckDBPyConnection:
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            if self._root is None:
                raise StorageError("storage is closed")
            with self._cursor_lock:
                cur = self._root.cursor()
            self._local.cursor = cur
        return cur

    def _run_read(
        self,
        fetch: Callable[[duckdb.DuckDBPyConnection], T],
        timeout_s: float | None,
    ) -> T:
        cur = self._cursor()
        with self._time_limit(cur, timeout_s):
            return fetch(cur)

    @contextlib.contextmanager
    def _time_limit(
        self, cur: duckdb.DuckDBPyConnection, timeout_s: float | None
    ) -> Iterator[None]:
        """Interrupt `cur` past the read limit (QueryTimeoutError); engine errors as QueryError."""
        limit = self.read_timeout_s if timeout_s is None else timeout_s
        timer = threading.Timer(limit, cur.interrupt)
        timer.daemon = True
        timer.start()
        try:
            yield
        except duckdb.InterruptException:
            raise QueryTimeoutError(f"query took longer than {limit:g} s and was stopped") from None
        except duckdb.Error as exc:
            raise _query_error(exc) from None
        finally:
            timer.cancel()

    def query_arrow(
        self,
        sql: str,
        params: Params = None,
        *,
        timeout_s: float | None = None,
    ) -> pa.Table:
        def fetch(cur: duckdb.DuckDBPyConnection) -> pa.Table:
            rel = cur.sql(sql, params=params) if params else cur.sql(sql)
            if rel is None:
                raise StorageError("query_arrow needs a statement that returns rows")
            return rel.to_arrow_table()

        return self._run_read(fetch, timeout_s)

    def iter_arrow(
        self,
        sql: str,
        params: Params = None,
        *,
        batch_rows: int = 100_000,
        timeout_s: float | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """A query's rows as Arrow record batches of at most `batch_rows` rows, read as they
        are consumed (bounded memory: bulk copies such as `inferledger migrate-ledger`). The
        time limit covers the whole iteration; read nothing else on this thread meanwhile."""
        cur = self._cursor()
        with self._time_limit(cur, timeout_s):
            rel = cur.sql(sql, params=params) if params else cur.sql(sql)
            if rel is None:
                raise StorageError("iter_arrow needs a statement that returns rows")
            yield from rel.to_arrow_reader(batch_rows)

    def query(
        self,
        sql: str,
        params: Params = None,
        *,
        timeout_s: float | None = None,
    ) -> pl.DataFrame:
        return pl.from_arrow(self.query_arrow(sql, params, timeout_s=timeout_s))  # type: ignore[return-value]

    def fetchall(
        self,
        sql: str,
        params: Params = None,
        *,
        timeout_s: float | None = None,
    ) -> list[tuple[Any, ...]]:
        return self._run_read(lambda cur: cur.execute(sql, params or []).fetchall(), timeout_s)

    def scalar(
        self,
        sql: str,
        params: Params = None,
        *,
        timeout_s: float | None = None,
    ) -> Any:
        rows = self.fetchall(sql, params, timeout_s=timeout_s)
        return rows[0][0] if rows else None

    def select(self, stmt: Executable, *, timeout_s: float | None = None) -> list[tuple[Any, ...]]:
        """The rows of one SQLAlchemy Core select, read like :meth:`fetchall`."""
        sql, params = compile_statement(stmt)
        return self.fetchall(sql, params, timeout_s=timeout_s)

    def copy_to(
        self,
        sql: str,
        params: Params,
        path: str | os.PathLike[str],
        fmt: str,
        *,
        metadata: Mapping[str, str] | None = None,
        ordered: bool = True,
        timeout_s: float | None = None,
    ) -> int:
        """Stream a query's rows with DuckDB's ``COPY (query) TO`` to `path` (absolute) as csv,
        parquet (`metadata`: key-value metadata) or jsonl; returns the row count. Written to a
        temporary file beside `path`, renamed when complete. ordered=False: rows as threads
        produce them (faster, no reorder buffer; bytes vary between runs)."""
        target = Path(path)
        if fmt not in COPY_FORMATS or not target.is_absolute():
            raise StorageError(f"cannot copy to {str(path)!r} as {fmt!r} (csv, parquet, jsonl)")
        options = [COPY_FORMATS[fmt]]
        if fmt == "parquet" and metadata:
            pairs = (f"{quote_ident(k)}: {_sql_text(v)}" for k, v in sorted(metadata.items()))
            options.append(f"KV_METADATA {{{', '.join(pairs)}}}")
        try:
            fd, tmp = tempfile.mkstemp(suffix=".tmp", prefix=f".{target.name}.", dir=target.parent)
            os.close(fd)
        except OSError as exc:
            raise StorageError(f"cannot write in {str(target.parent)!r}: {exc.strerror}") from None
        statement = f"COPY ({sql}) TO {_sql_text(tmp)} ({', '.join(options)})"

        def run(cur: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
            # SET SESSION holds for this cursor only; reset before it serves another read.
            cur.execute(f"SET SESSION preserve_insertion_order = {str(ordered).lower()}")
            try:
                return cur.execute(statement, params or []).fetchall()
            finally:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("RESET SESSION preserve_insertion_order")

        try:
            rows = self._run_read(run, timeout_s)
            os.replace(tmp, target)
        except OSError as exc:
            raise StorageError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return int(rows[0][0]) if rows else 0

    @contextlib.contextmanager
    def read_into_file(
        self, path: str | os.PathLike[str], alias: str, *, timeout_s: float | None = None
    ) -> Iterator[Transaction]:
        """Attach a new DuckDB file at `path` under `alias` and open ONE transaction on this
        thread's reader cursor: every statement in the block reads the ledger as of the same
        moment (DuckDB's MVCC snapshot; writes committed meanwhile stay invisible) and may
        write into ``alias`` (CREATE TABLE alias.x AS SELECT ...). Committed at the end of the
        block, rolled back on an error; the file is detached (and so checkpointed) either way.
        The consistent snapshot (ledger/snapshot.py) is built this way (issue #14)."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", alias):
            raise StorageError(f"bad alias {alias!r}")
        if "\x00" in str(path):
            raise StorageError("a file name with a NUL character")
        cur = self._cursor()
        limit = self.read_timeout_s if timeout_s is None else timeout_s
        timer = threading.Timer(limit, cur.interrupt)
        timer.daemon = True
        try:
            cur.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS {alias}")
        except duckdb.Error as exc:
            raise _query_error(exc) from None
        timer.start()
        try:
            cur.execute("BEGIN")
            try:
                yield Transaction(cur)
                cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                raise
        except duckdb.InterruptException:
            raise QueryTimeoutError(f"copy took longer than {limit:g} s and was stopped") from None
        except duckdb.Error as exc:
            raise _query_error(exc) from None
        finally:
            timer.cancel()
            with contextlib.suppress(duckdb.Error):
                cur.execute(f"DETACH {alias}")

    def size_bytes(self) -> int:
        """Bytes of the database file plus its WAL (0 for an in-memory database)."""
        if self.path == ":memory:":
            return 0
        total = 0
        for p in (self.path, self.path + ".wal"):
            with contextlib.suppress(OSError):
                total += os.path.getsize(p)
        return total


def open_for_command(settings: Any, *, must_exist: bool = True) -> Storage:
    """Open the settings' database for a one-shot CLI command (prices, users, refresh), with
    one-line errors for a missing file and for a file another process holds."""
    path = settings["db"]
    if must_exist and not Path(path).exists():
        raise StorageError(f"no database at {path!r} (give --db PATH)")
    storage = Storage(
        path,
        read_timeout_s=settings["storage.read_timeout_s"],
        memory_limit=settings["storage.memory_limit"],
        threads=settings["storage.threads"],
    )
    try:
        return storage.open()
    except StorageError as exc:
        if "lock" in str(exc).lower():
            raise StorageError(
                f"database {path!r} is in use by another process (a running `inferledger "
                "serve`?); stop it first: DuckDB lets one process open the file"
            ) from None
        raise
