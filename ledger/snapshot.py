"""The consistent snapshot (issue #14): the analyst views as tables in a standalone DuckDB file.

Copying the live database file (with its WAL) while the service writes is not a safe snapshot.
This reads every analyst view (ledger.catalog.ANALYST_VIEWS) inside ONE read transaction of the
service's own database (Storage.read_into_file: the new file is attached to a reader cursor and
each view copied with CREATE TABLE ... AS SELECT), so all views describe the same moment even
while ingest commits meanwhile. The file is written under a temporary name and renamed into
place, so a reader sees the old snapshot or the new one, never a half-written one. A table
``snapshot_views`` says when it was built, from which database, and each view's row count.

The SQL console reads this file (ledger/console.py); :class:`SnapshotKeeper` rebuilds it in the
background when it is older than console.snapshot_max_age_s or on demand.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inferledger import __version__
from inferledger.core.errors import BadInputError, StorageError
from inferledger.core.storage import Storage, quote_ident
from ledger.catalog import ANALYST_VIEWS, describe_view, load_catalog, time_bounds

log = logging.getLogger(__name__)

#: The metadata table in every snapshot: one row per view.
META_TABLE = "snapshot_views"


@dataclass(frozen=True)
class SnapshotInfo:
    """A built snapshot: where, when (UTC), how long it took, each view's rows."""

    path: str
    built_at: datetime
    seconds: float
    rows: dict[str, int] = field(default_factory=dict)
    time_columns: dict[str, str | None] = field(default_factory=dict)


def view_columns(storage: Storage, views: Sequence[str] = ANALYST_VIEWS) -> dict[str, list[str]]:
    """Each view's column names, in order (the console's completion list)."""
    rows = storage.fetchall(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name IN (SELECT unnest(?::VARCHAR[])) "
        "ORDER BY table_name, ordinal_position",
        [list(views)],
    )
    out: dict[str, list[str]] = {}
    for table, column in rows:
        out.setdefault(table, []).append(column)
    return out


def _temp_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")


def _remove(path: Path) -> None:
    for p in (path, Path(str(path) + ".wal")):
        with contextlib.suppress(OSError):
            p.unlink()


def build_snapshot(
    storage: Storage,
    path: str | os.PathLike[str],
    *,
    views: Sequence[str] = ANALYST_VIEWS,
    start: datetime | None = None,
    end: datetime | None = None,
    timeout_s: float | None = None,
) -> SnapshotInfo:
    """Write `views` as tables into a new DuckDB file at `path` (replacing one there), all
    read at one moment. `start`/`end` (UTC) keep rows whose time column (the catalog's, as the
    exports and the API filter it) lies in [start, end); views without one are copied whole.
    Nothing is left behind on failure."""
    unknown = [v for v in views if v not in ANALYST_VIEWS]
    if unknown:
        raise BadInputError(f"not an analyst view: {', '.join(unknown)}")
    if start is not None and end is not None and start >= end:
        raise BadInputError("--from must be before --to")
    target = Path(path).resolve()
    if not target.parent.is_dir():
        raise BadInputError(f"no folder {str(target.parent)!r} for the snapshot")
    columns = view_columns(storage, views)
    missing = [v for v in views if v not in columns]
    if missing:
        raise StorageError(f"views missing from the database: {', '.join(missing)}")
    catalog = load_catalog()
    time_columns = {v: catalog.view(v).time_column for v in views}
    windows = {v: _window(storage, v, time_columns[v], start, end) for v in views}
    tmp = _temp_path(target)
    alias = "snapshot_" + secrets.token_hex(4)
    started = time.perf_counter()
    built_at = datetime.now(UTC)
    rows: dict[str, int] = {}
    try:
        with storage.read_into_file(tmp, alias, timeout_s=timeout_s) as tx:
            for view in views:
                where, params = windows[view]
                table = f"{alias}.{quote_ident(view)}"
                tx.execute(
                    f"CREATE TABLE {table} AS SELECT * FROM {quote_ident(view)}{where}", params
                )
                counted = tx.execute(f"SELECT count(*) FROM {table}").fetchone()
                rows[view] = int(counted[0]) if counted else 0
            tx.execute(
                f"CREATE TABLE {alias}.{META_TABLE} (view_name VARCHAR PRIMARY KEY, "
                "row_count BIGINT NOT NULL, built_at TIMESTAMPTZ NOT NULL, source_db VARCHAR "
                "NOT NULL, schema_version INTEGER NOT NULL, time_column VARCHAR, range_from "
                "TIMESTAMP, range_to TIMESTAMP, inferledger_version VARCHAR NOT NULL)"
            )
            tx.executemany(
                f"INSERT INTO {alias}.{META_TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    [
                        view,
                        rows[view],
                        built_at,
                        storage.path,
                        storage.schema_version,
                        time_columns[view],
                        _naive_utc(start) if start and time_columns[view] else None,
                        _naive_utc(end) if end and time_columns[view] else None,
                        __version__,
                    ]
                    for view in views
                ],
            )
        os.replace(tmp, target)
    finally:
        _remove(tmp)
    return SnapshotInfo(
        str(target), built_at, time.perf_counter() - started, rows, dict(time_columns)
    )


def _naive_utc(when: datetime) -> datetime:
    if when.tzinfo is None:
        return when
    return when.astimezone(UTC).replace(tzinfo=None)


def _window(
    storage: Storage, view: str, column: str | None, start: datetime | None, end: datetime | None
) -> tuple[str, list[Any]]:
    """The WHERE clause keeping [start, end) of the view's time column, bounded as
    ledger.catalog.time_bounds does for its type (the views' timestamps are naive UTC)."""
    if column is None or (start is None and end is None):
        return "", []
    kind = dict(describe_view(storage, view))[column]
    lo, hi = time_bounds(
        kind, _naive_utc(start) if start else None, _naive_utc(end) if end else None
    )
    parts, params = [], []
    if lo is not None:
        parts.append(f"{quote_ident(column)} >= ?")
        params.append(lo)
    if hi is not None:
        parts.append(f"{quote_ident(column)} < ?")
        params.append(hi)
    return " WHERE " + " AND ".join(parts), params


class SnapshotKeeper:
    """Keeps the console's snapshot fresh: rebuilt in a background thread when older than
    `max_age_s` (checked whenever the console asks for it) or on :meth:`refresh`. A rebuild
    renames the new file over the old one, so queries in flight finish on the file they opened
    and the next query opens the new one."""

    def __init__(
        self,
        storage: Storage,
        path: str | os.PathLike[str],
        *,
        max_age_s: float = 300.0,
        timeout_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.storage = storage
        self.path = str(Path(path).resolve())
        self.max_age_s = max_age_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.info: SnapshotInfo | None = None
        self.last_error: str | None = None

    def age_s(self) -> float | None:
        """Seconds since the snapshot file was written, or None when there is none."""
        try:
            return max(0.0, self._clock() - os.path.getmtime(self.path))
        except OSError:
            return None

    @property
    def building(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def current(self) -> str:
        """The snapshot's path for a query: built now (waiting) when there is none yet, and a
        background rebuild started when it is stale."""
        age = self.age_s()
        if age is None:
            self.refresh(wait=True)
        elif age > self.max_age_s:
            self.refresh()
        return self.path

    def refresh(self, wait: bool = False) -> bool:
        """Start a rebuild unless one is running; `wait` joins it. True if one started."""
        with self._lock:
            started = not self.building
            if started:
                self._thread = threading.Thread(
                    target=self._build, name="console-snapshot", daemon=True
                )
                self._thread.start()
            thread = self._thread
        if wait and thread is not None:
            thread.join()
        return started

    def _build(self) -> None:
        try:
            self.info = build_snapshot(self.storage, self.path, timeout_s=self.timeout_s)
            self.last_error = None
            log.info(
                "console snapshot rebuilt in %.2f s (%d rows)",
                self.info.seconds,
                sum(self.info.rows.values()),
            )
        except Exception as exc:  # logged and shown on the page; the old snapshot stays
            self.last_error = str(exc) or type(exc).__name__
            log.exception("console snapshot rebuild failed")
