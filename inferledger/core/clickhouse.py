"""The ClickHouse event store (issue #15, first slice): the only module that imports
clickhouse-connect.

:class:`ClickHouseEvents` holds the raw event tables (spans, metric samples, scrapes, outcomes)
in ClickHouse, through clickhouse-connect's one client API, on either of two DSNs:

- ``chdb:///abs/path``: the real ClickHouse engine in this process (the chdb package), a data
  folder on disk; what CI and ``bench/`` run;
- ``http://user@host:8123/database`` (or https): a ClickHouse server. The password comes only
  from ``$INFERLEDGER_CLICKHOUSE_PASSWORD``; a URL that holds one is refused.

open() applies ``sql/clickhouse/migrations/NNNN_*.sql`` in order, recorded in
``schema_migrations``, and refuses a database whose schema is newer than this code. Writes are
Arrow inserts carrying an ``insert_deduplication_token`` (the tables set
``non_replicated_deduplication_window``, so a batch sent again with its token is dropped);
reads carry a server-side ``max_execution_time``. Engine errors come out as the storage
interface's errors (:class:`QueryTimeoutError`, :class:`QueryError`, :class:`StorageError`).

chDB hosts ONE engine, on one data folder, per process. Stores on the same folder share it
(each with its own handle, so each may use its own database); opening a store on another folder
while one is open raises :class:`StorageError`; once every store on it is closed, the engine
may open elsewhere.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import clickhouse_connect
import pyarrow as pa
from clickhouse_connect.driver.exceptions import ClickHouseError, DatabaseError

from inferledger.core.errors import (
    QueryError,
    QueryTimeoutError,
    SchemaTooNewError,
    SettingsError,
    StorageError,
    one_line,
)
from inferledger.core.sql_files import load_migrations

log = logging.getLogger(__name__)

#: Where a server's password comes from (never from the URL).
PASSWORD_ENV = "INFERLEDGER_CLICKHOUSE_PASSWORD"

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_TIMEOUT_CODES = frozenset({159, 160})  # TIMEOUT_EXCEEDED, TOO_SLOW

#: Tables whose raw rows expire by TTL, and the time each row's age is measured from.
TTL_TIME = {
    "spans": "toDateTime(intDiv(start_ns, 1000000000), 'UTC')",
    "metric_samples": "toDateTime(ts)",
    "scrapes": "toDateTime(ts)",
}


def split_statements(sql: str) -> list[str]:
    """The statements of one migration file: '--' comments dropped, split at ';' ending a line
    (our files hold no semicolon inside a string or comment)."""
    lines = [line.split("--", 1)[0].rstrip() for line in sql.splitlines()]
    out, current = [], []
    for line in lines:
        if not line.strip():
            continue
        current.append(line)
        if line.endswith(";"):
            out.append("\n".join(current).rstrip(";").strip())
            current = []
    if current:
        out.append("\n".join(current).strip())
    return [s for s in out if s]


@dataclass(frozen=True)
class Dsn:
    """A parsed DSN: ``chdb`` with an absolute ``path``, or ``http``/``https`` with host, port,
    user and database. ``shown`` is the DSN as messages print it (never a password)."""

    scheme: str
    shown: str
    path: str = ""
    host: str = ""
    port: int = 0
    user: str = "default"
    database: str | None = None


def parse_dsn(dsn: str) -> Dsn:
    """Check a DSN: ``chdb:///abs/path`` or ``http(s)://user@host:port/database``. Raises
    SettingsError (one line) for another scheme, a relative path, or a password in the URL."""
    parts = urlsplit(dsn)
    scheme = parts.scheme.lower()
    if scheme == "chdb":
        path = parts.netloc + parts.path if parts.netloc else parts.path
        if parts.netloc or not path.startswith("/"):
            raise SettingsError(f"ClickHouse DSN {dsn!r}: write chdb:///absolute/path")
        return Dsn("chdb", f"chdb://{path}", path=os.path.realpath(path))
    if scheme not in ("http", "https"):
        raise SettingsError(
            f"ClickHouse DSN scheme {parts.scheme!r} is not supported: use chdb:///abs/path "
            "or http(s)://user@host:port/database"
        )
    host = parts.hostname or ""
    netloc = (f"{parts.username}@" if parts.username else "") + parts.netloc.rsplit("@", 1)[-1]
    shown = urlunsplit((scheme, netloc, parts.path, "", ""))
    if parts.password is not None:
        raise SettingsError(
            f"ClickHouse DSN {shown!r} holds a password: remove it from the URL and set "
            f"${PASSWORD_ENV} instead"
        )
    if not host:
        raise SettingsError(f"ClickHouse DSN {shown!r} names no host")
    try:
        port = parts.port or (8443 if scheme == "https" else 8123)
    except ValueError:
        raise SettingsError(f"ClickHouse DSN {shown!r} has a bad port") from None
    database = parts.path.strip("/") or None
    return Dsn(scheme, shown, host=host, port=port, user=parts.username or "default",
               database=database)  # fmt: skip


# chDB's one engine per process: the folder it is open on and how many stores use it.
_ENGINE_LOCK = threading.Lock()
_ENGINE: dict[str, Any] = {"path": None, "users": 0}


def _acquire_engine(path: str) -> None:
    with _ENGINE_LOCK:
        if _ENGINE["users"] and _ENGINE["path"] != path:
            raise StorageError(
                f"chDB runs one engine per process and it is open on {_ENGINE['path']!r}; "
                f"cannot also open {path!r} (close the other store, or use its folder)"
            )
        _ENGINE["path"] = path
        _ENGINE["users"] += 1


def _release_engine() -> None:
    with _ENGINE_LOCK:
        _ENGINE["users"] = max(0, _ENGINE["users"] - 1)


class ClickHouseEvents:
    """The raw event tables in ClickHouse. Use ``with ClickHouseEvents(dsn) as store:`` or
    open()/close(). ``database`` (default: the URL's, else ``inferledger``) is created when
    missing. ``retention_days`` maps a table of :data:`TTL_TIME` to the days its raw rows are
    kept (None: kept for ever); applied at open with ALTER TABLE ... MODIFY TTL."""

    def __init__(
        self,
        dsn: str,
        *,
        database: str | None = None,
        read_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        retention_days: Mapping[str, int | None] | None = None,
    ) -> None:
        self.dsn = parse_dsn(dsn)
        self.database = database or self.dsn.database or "inferledger"
        if not _NAME_RE.match(self.database):
            raise SettingsError(f"bad ClickHouse database name {self.database!r}")
        for table in retention_days or {}:
            if table not in TTL_TIME:
                raise SettingsError(
                    f"retention_days: {table!r} has no TTL (tables: {', '.join(TTL_TIME)})"
                )
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retention_days = dict(retention_days or {})
        self.schema_version = 0
        self._client: Any = None
        self._holds_engine = False

    # ---------------------------------------------------------------- lifecycle
    def open(self) -> ClickHouseEvents:
        if self._client is not None:
            return self
        self._client = self._connect()
        try:
            self._command(f"CREATE DATABASE IF NOT EXISTS {self.database}")
            self._client.database = self.database
            self._migrate()
            for table, days in self.retention_days.items():
                self.set_retention(table, days)
        except BaseException:
            self.close()
            raise
        return self

    def _connect(self) -> Any:
        d = self.dsn
        if d.scheme == "chdb":
            _acquire_engine(d.path)
            self._holds_engine = True
            try:
                return clickhouse_connect.get_client(
                    interface="chdb", path=d.path, settings={"session_timezone": "UTC"}
                )
            except (ClickHouseError, OSError, RuntimeError) as exc:
                self._holds_engine = False
                _release_engine()
                raise StorageError(
                    f"cannot open ClickHouse at {d.shown}: {one_line(exc)}"
                ) from None
        # The driver also logs a refused connection; the error below says it in one line.
        driver_log = logging.getLogger("clickhouse_connect")
        level = driver_log.level
        driver_log.setLevel(logging.CRITICAL)
        try:
            return clickhouse_connect.get_client(
                interface=d.scheme,
                host=d.host,
                port=d.port,
                username=d.user,
                password=os.environ.get(PASSWORD_ENV, ""),
                database="default",
                connect_timeout=self.connect_timeout_s,
                send_receive_timeout=max(60.0, self.read_timeout_s + 30.0),
                query_retries=0,
            )
        except (ClickHouseError, OSError) as exc:
            raise StorageError(
                f"cannot connect to ClickHouse at {d.shown}: {_short_error(exc)}"
            ) from None
        finally:
            driver_log.setLevel(level)

    def close(self) -> None:
        """Close the connection (and release chDB's engine when no other store uses it)."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except ClickHouseError as exc:  # closing anyway
                log.warning("closing ClickHouse client: %s", exc)
        if self._holds_engine:
            self._holds_engine = False
            _release_engine()

    def __enter__(self) -> ClickHouseEvents:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ping(self) -> bool:
        """True when the engine answers (readiness)."""
        if self._client is None:
            return False
        try:
            return bool(self._client.ping())
        except (ClickHouseError, OSError):
            return False

    # ---------------------------------------------------------------- schema
    def _migrate(self) -> None:
        migrations = load_migrations("clickhouse/migrations")
        latest = migrations[-1].version if migrations else 0
        self._command(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, name String,"
            " applied_at DateTime64(6, 'UTC') DEFAULT now64(6))"
            " ENGINE = ReplacingMergeTree ORDER BY version"
        )
        current = int(self._scalar("SELECT max(version) FROM schema_migrations") or 0)
        if current > latest:
            raise SchemaTooNewError(
                f"ClickHouse database {self.database!r} at {self.dsn.shown} has schema version "
                f"{current}, newer than this InferLedger supports ({latest}); upgrade InferLedger"
            )
        for mig in migrations:
            if mig.version <= current:
                continue
            log.info("migrating ClickHouse %s to version %d (%s)", self.database, mig.version,
                     mig.name)  # fmt: skip
            # No transactions: every statement is idempotent (IF NOT EXISTS), so a migration
            # that stopped half way is applied again whole.
            for statement in split_statements(mig.sql):
                self._command(statement)
            self._command(
                "INSERT INTO schema_migrations (version, name) VALUES "
                f"({mig.version}, '{mig.name}')"
            )
        self.schema_version = latest

    def set_retention(self, table: str, days: int | None) -> None:
        """Keep `table`'s raw rows `days` days (ALTER TABLE ... MODIFY TTL; None removes the
        TTL). Expired rows go when ClickHouse merges (at once for whole expired partitions
        with ttl_only_drop_parts); OPTIMIZE TABLE ... FINAL forces it."""
        if table not in TTL_TIME:
            raise SettingsError(f"{table!r} has no TTL (tables: {', '.join(TTL_TIME)})")
        if days is None:
            self._command(f"ALTER TABLE {table} REMOVE TTL")
            return
        if not isinstance(days, int) or days < 1:
            raise SettingsError(f"retention for {table} must be a whole number of days >= 1")
        self._command(f"ALTER TABLE {table} MODIFY TTL {TTL_TIME[table]} + INTERVAL {days} DAY")

    # ---------------------------------------------------------------- writes
    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str) -> int:
        """Insert an Arrow table's rows into `table` (columns by name). An insert whose
        `dedup_token` the table has seen in its last non_replicated_deduplication_window
        blocks is dropped by ClickHouse: send a batch again with the same token, never twice."""
        if not _NAME_RE.match(table):
            raise QueryError(f"bad table name {table!r}")
        if not dedup_token:
            raise QueryError("insert_arrow needs a deduplication token")
        try:
            self._live().insert_arrow(
                table, data, settings={"insert_deduplication_token": dedup_token}
            )
        except ClickHouseError as exc:
            raise self._error(exc) from None
        return data.num_rows

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        """Run one statement that returns no rows (DDL, ALTER, OPTIMIZE)."""
        self._command(sql, params)

    # ---------------------------------------------------------------- reads
    def query_arrow(
        self,
        sql: str,
        params: Mapping[str, Any] | Sequence[Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> pa.Table:
        """Run a query and return its rows as Arrow; the engine stops it after `timeout_s`
        (default read_timeout_s) with QueryTimeoutError. Parameters bind clickhouse-connect's
        way: ``{name:Type}`` placeholders with a mapping."""
        limit = self.read_timeout_s if timeout_s is None else timeout_s
        try:
            return self._live().query_arrow(
                sql, parameters=params, settings={"max_execution_time": limit}
            )
        except ClickHouseError as exc:
            raise self._error(exc, limit) from None

    def fetchall(
        self,
        sql: str,
        params: Mapping[str, Any] | Sequence[Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> list[tuple[Any, ...]]:
        """A query's rows as Python tuples (same limits as :meth:`query_arrow`)."""
        limit = self.read_timeout_s if timeout_s is None else timeout_s
        try:
            result = self._live().query(
                sql, parameters=params, settings={"max_execution_time": limit}
            )
        except ClickHouseError as exc:
            raise self._error(exc, limit) from None
        return [tuple(row) for row in result.result_rows]

    def _scalar(self, sql: str) -> Any:
        rows = self.fetchall(sql)
        return rows[0][0] if rows else None

    def disk_bytes(self, table: str) -> int:
        """Bytes on disk of `table`'s active parts (system.parts)."""
        return int(
            self.fetchall(
                "SELECT sum(bytes_on_disk) FROM system.parts WHERE active"
                " AND database = {db:String} AND table = {t:String}",
                {"db": self.database, "t": table},
            )[0][0]
            or 0
        )

    # ---------------------------------------------------------------- helpers
    def _live(self) -> Any:
        if self._client is None:
            raise StorageError(f"ClickHouse store {self.dsn.shown} is closed")
        return self._client

    def _command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        try:
            self._live().command(sql, parameters=params)
        except ClickHouseError as exc:
            raise self._error(exc) from None

    def _error(self, exc: ClickHouseError, limit: float | None = None) -> StorageError:
        code = getattr(exc, "code", None)
        if isinstance(exc, DatabaseError) and code in _TIMEOUT_CODES:
            shown = f" {limit:g} s" if limit is not None else " its time limit"
            return QueryTimeoutError(f"query took longer than{shown} and was stopped")
        if isinstance(exc, DatabaseError) and code is not None:
            return QueryError(_short_error(exc))
        return StorageError(f"ClickHouse at {self.dsn.shown}: {_short_error(exc)}")


def _short_error(exc: BaseException) -> str:
    """The engine's message on one line, without clickhouse-connect's stack-trace tail."""
    text = one_line(exc, 1000)
    errno = re.search(r"\[Errno -?\d+\] [^\"')]+", text)  # the OS's reason, not the pool's
    if errno:
        return errno.group(0).strip()
    text = re.split(r"\s*Stack trace:", text)[0]
    return text if len(text) <= 300 else text[:297] + "..."
