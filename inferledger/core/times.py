"""Times in UTC. The ledger keeps naive timestamps that mean UTC (DuckDB TIMESTAMP columns),
and people type times with or without an offset; everything above reads them through
:func:`as_utc`."""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC: an aware time converted, a naive one read as UTC."""
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
