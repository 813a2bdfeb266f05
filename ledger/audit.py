"""Reading an audit trail a page at a time (the price book's, the users', the SLO targets'):
newest change first, with the total, so the admin pages page through it on the server instead
of sending the whole trail to the browser."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

if TYPE_CHECKING:
    from inferledger.core.storage import Storage


def audit_page(
    storage: Storage,
    table: sa.Table,
    columns: Sequence[Any],
    offset: int,
    limit: int,
    error: type[Exception],
) -> tuple[list[Any], int, int]:
    """(rows, start, total): `columns` of `table`'s changes from `start`, newest (highest
    change_id) first, at most `limit` of them. An offset past the end gives the last page; a
    limit below one raises `error`, the caller's one-line error type."""
    if limit < 1:
        raise error(f"a page holds at least one change, got limit {limit}")
    total_rows = storage.select(sa.select(sa.func.count()).select_from(table))
    total = int(total_rows[0][0] or 0) if total_rows else 0
    start = max(0, min(int(offset), max(0, total - 1) // limit * limit))
    rows = storage.select(
        sa.select(*columns).order_by(table.c.change_id.desc()).limit(limit).offset(start)
    )
    return list(rows), start, total
