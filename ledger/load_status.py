"""How far a background load of history has got: what the coverage banner says while the demo
(or any loader) is still filling the past ("history loading: data complete back to <time>").

One row per loader in ``load_status`` (sql/migrations/0013_load_status.sql). The loader writes
it as each stretch of history is stored (:func:`set_load_status`) and clears the flag when done
(:func:`finish_load`); pages read it with :func:`load_status`. Until a loader has written a
row, or when none ever ran (a production ledger fed by real exporters), there is nothing to say
and :func:`load_status` returns None.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from inferledger.core.errors import BadInputError

if TYPE_CHECKING:
    from inferledger.core.storage import Storage, Transaction

DEMO_LOADER = "demo-history"

_UPSERT = """
insert or replace into load_status
    (name, loading, history_start, complete_from, detail, updated_at)
values ($name, $loading, $history_start, $complete_from, $detail, current_timestamp)
"""


@dataclass(frozen=True, slots=True)
class LoadStatus:
    """One loader's progress. While ``loading``, data from ``complete_from`` (None: nothing
    yet) up to now is complete and the time from ``history_start`` to it is still arriving."""

    name: str
    loading: bool
    history_start: datetime
    complete_from: datetime | None
    detail: str
    updated_at: datetime

    def message(self) -> str:
        """The banner's sentence (empty once the load is done)."""
        if not self.loading:
            return ""
        if self.complete_from is None:
            return "history loading: no complete data yet" + _detail(self.detail)
        if self.complete_from <= self.history_start:
            return "history loaded; the cost ledger is catching up" + _detail(self.detail)
        when = self.complete_from.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        return f"history loading: data complete back to {when}" + _detail(self.detail)


def _detail(detail: str) -> str:
    return f" ({detail})" if detail else ""


def _utc(moment: datetime, what: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise BadInputError(f"{what} must be timezone-aware, got {moment!r}")
    return moment.astimezone(UTC)


def set_load_status(
    storage: Storage,
    *,
    loading: bool,
    history_start: datetime,
    complete_from: datetime | None,
    detail: str = "",
    name: str = DEMO_LOADER,
) -> None:
    """Record a loader's progress (one write; replaces its previous row)."""
    params = {
        "name": name,
        "loading": loading,
        "history_start": _utc(history_start, "history_start"),
        "complete_from": None if complete_from is None else _utc(complete_from, "complete_from"),
        "detail": " ".join(detail.split()),
    }
    if params["complete_from"] is not None and params["complete_from"] < params["history_start"]:
        raise BadInputError("complete_from must not be before history_start")

    def write(tx: Transaction) -> None:
        tx.execute(_UPSERT, params)

    storage.write(write)


def finish_load(storage: Storage, *, name: str = DEMO_LOADER, detail: str = "") -> None:
    """Clear a loader's `loading` flag: everything from history_start on is stored."""

    def write(tx: Transaction) -> None:
        tx.execute(
            """
            update load_status
            set loading = false, complete_from = history_start, detail = $detail,
                updated_at = current_timestamp
            where name = $name
            """,
            {"name": name, "detail": " ".join(detail.split())},
        )

    storage.write(write)


def load_status(storage: Storage, name: str = DEMO_LOADER) -> LoadStatus | None:
    """The loader's progress, or None when it never wrote any."""
    rows = storage.fetchall(
        "select name, loading, history_start, complete_from, detail, updated_at "
        "from load_status where name = ?",
        [name],
    )
    if not rows:
        return None
    n, loading, start, complete, detail, updated = rows[0]
    return LoadStatus(
        name=n,
        loading=bool(loading),
        history_start=start.astimezone(UTC),
        complete_from=None if complete is None else complete.astimezone(UTC),
        detail=detail,
        updated_at=updated.astimezone(UTC),
    )
