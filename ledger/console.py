"""The SQL console (issue #14): saved queries, each user's history, and the console itself
(the sandbox's worker pool over the consistent snapshot).

Saved queries belong to the user who saved them (a name is unique per owner; saving under the
same name replaces its SQL). Each carries a random ``share_id``: /sql?q=<share_id> opens it for
any analyst. History keeps the last ``history_size`` queries each user ran, with what the
sandbox answered. Queries run only in inferledger.core.sql_sandbox's workers, against the
snapshot file kept by ledger.snapshot.SnapshotKeeper, never against the live database.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from inferledger.core.errors import BadInputError
from inferledger.core.sql_sandbox import SandboxLimits, SandboxPool, SandboxResult
from inferledger.core.storage import Storage, Transaction
from ledger.schema import console_history, console_queries
from ledger.snapshot import SnapshotKeeper

MAX_NAME = 100
#: seconds a console snapshot build may take
SNAPSHOT_TIMEOUT_S = 1800.0
_SHARE_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")


class ConsoleError(BadInputError):
    """A saved-query change that cannot be made; nothing was written."""


@dataclass(frozen=True)
class SavedQuery:
    query_id: int
    owner: str
    name: str
    sql: str
    share_id: str
    updated_at: datetime


@dataclass(frozen=True)
class HistoryEntry:
    run_id: int
    ran_at: datetime
    sql: str
    outcome: str
    rows: int
    elapsed_ms: float
    reason: str | None


def save_query(storage: Storage, owner: str, name: str, sql: str) -> SavedQuery:
    """Save `sql` under `name` for `owner` (replacing the SQL of a query of that name); the
    share link of an existing query stays the same."""
    name = " ".join(name.split())
    if not owner:
        raise ConsoleError("sign in to save queries")
    if not name or len(name) > MAX_NAME:
        raise ConsoleError(f"a saved query needs a name of 1 to {MAX_NAME} characters")
    if not sql.strip():
        raise ConsoleError("there is no SQL to save")
    now = datetime.now(UTC)
    t = console_queries

    def op(tx: Transaction) -> Any:
        tx.run(
            insert(t)
            .values(
                owner=owner,
                name=name,
                sql=sql,
                share_id=secrets.token_urlsafe(16),
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_update(
                index_elements=["owner", "name"], set_={"sql": sql, "updated_at": now}
            )
        )
        return tx.run(sa.select(t).where(t.c.owner == owner, t.c.name == name)).fetchone()

    row = storage.write(op)
    return SavedQuery(row[0], row[1], row[2], row[3], row[4], row[6])


def _select_saved() -> sa.Select:
    t = console_queries
    return sa.select(t.c.query_id, t.c.owner, t.c.name, t.c.sql, t.c.share_id, t.c.updated_at)


def saved_queries(storage: Storage, owner: str) -> list[SavedQuery]:
    """`owner`'s saved queries, newest change first."""
    t = console_queries
    stmt = _select_saved().where(t.c.owner == owner).order_by(t.c.updated_at.desc(), t.c.name)
    return [SavedQuery(*row) for row in storage.select(stmt)]


def shared_query(storage: Storage, share_id: str) -> SavedQuery | None:
    """The saved query a share link names, or None (also for a malformed id)."""
    if not _SHARE_ID.fullmatch(share_id or ""):
        return None
    rows = storage.select(_select_saved().where(console_queries.c.share_id == share_id))
    return SavedQuery(*rows[0]) if rows else None


def delete_query(storage: Storage, owner: str, query_id: int) -> bool:
    """Delete one of `owner`'s saved queries; False when there was none."""
    t = console_queries

    def op(tx: Transaction) -> bool:
        gone = tx.run(
            sa.delete(t).where(t.c.owner == owner, t.c.query_id == query_id).returning(t.c.query_id)
        ).fetchall()
        return bool(gone)

    return storage.write(op)


def record_run(storage: Storage, user: str, sql: str, result: SandboxResult, keep: int) -> None:
    """Add a run to `user`'s history, keeping their last `keep` runs. Queued without waiting:
    history must never slow the answer down."""
    t = console_history
    values = {
        "user_name": user,
        "ran_at": datetime.now(UTC),
        "sql": sql[:100_000],
        "outcome": result.kind,
        "rows": result.rows,
        "elapsed_ms": round(result.elapsed_s * 1000, 3),
        "reason": result.reason or None,
    }

    def op(tx: Transaction) -> None:
        tx.run(sa.insert(t).values(**values))
        newest = (
            sa.select(t.c.run_id)
            .where(t.c.user_name == user)
            .order_by(t.c.run_id.desc())
            .limit(keep)
        )
        tx.run(sa.delete(t).where(t.c.user_name == user, t.c.run_id.not_in(newest)))

    storage.submit(op)


def history(storage: Storage, user: str, limit: int = 50) -> list[HistoryEntry]:
    """`user`'s most recent runs, newest first."""
    t = console_history
    stmt = (
        sa.select(
            t.c.run_id, t.c.ran_at, t.c.sql, t.c.outcome, t.c.rows, t.c.elapsed_ms, t.c.reason
        )
        .where(t.c.user_name == user)
        .order_by(t.c.run_id.desc())
        .limit(limit)
    )
    return [HistoryEntry(*row) for row in storage.select(stmt)]


class Console:
    """The console of one service: a snapshot keeper and a pool of sandbox workers."""

    def __init__(
        self,
        storage: Storage,
        snapshot_path: str | Path,
        *,
        limits: SandboxLimits | None = None,
        workers: int = 2,
        snapshot_max_age_s: float = 300.0,
        history_size: int = 100,
    ) -> None:
        self.storage = storage
        # a big ledger's snapshot takes longer than an ordinary read's time limit
        self.keeper = SnapshotKeeper(
            storage, snapshot_path, max_age_s=snapshot_max_age_s, timeout_s=SNAPSHOT_TIMEOUT_S
        )
        self.pool = SandboxPool(self.keeper.current, limits, workers)
        self.history_size = history_size

    @property
    def limits(self) -> SandboxLimits:
        return self.pool.limits

    def run(self, sql: str, user: str | None = None) -> SandboxResult:
        """Run one statement in the sandbox; with a user, the run goes to their history."""
        result = self.pool.run(sql)
        if result.kind == "error" and self.keeper.last_error and "no snapshot" in result.reason:
            result = replace(
                result, reason=f"{result.reason} (last build: {self.keeper.last_error})"
            )
        if user:
            record_run(self.storage, user, sql, result, self.history_size)
        return result

    def close(self) -> None:
        self.pool.close()


def console_from_settings(storage: Storage, settings: Any) -> Console:
    """The console that settings console.* describe."""
    path = settings["console.snapshot_path"] or _default_snapshot_path(storage.path)
    limits = SandboxLimits(
        timeout_s=settings["console.timeout_s"],
        max_rows=settings["console.max_rows"],
        max_result_bytes=settings["console.max_result_mb"] << 20,
        memory_limit=settings["console.memory_limit"],
        queue_wait_s=settings["console.queue_wait_s"],
    )
    return Console(
        storage,
        path,
        limits=limits,
        workers=settings["console.workers"],
        snapshot_max_age_s=settings["console.snapshot_max_age_s"],
        history_size=settings["console.history_size"],
    )


def _default_snapshot_path(db: str) -> str:
    if db == ":memory:":
        import tempfile

        return str(Path(tempfile.mkdtemp(prefix="inferledger-console-")) / "snapshot.duckdb")
    return f"{db}.snapshot.duckdb"
