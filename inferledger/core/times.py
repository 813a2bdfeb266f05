"""Times in UTC. The ledger keeps naive timestamps that mean UTC (DuckDB TIMESTAMP columns),
and people type times with or without an offset; everything above reads them through
:func:`as_utc`."""

from __future__ import annotations

from datetime import UTC, datetime

from inferledger.core.errors import BadInputError


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC: an aware time converted, a naive one read as UTC."""
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_utc(text: str, what: str = "time") -> datetime:
    """An ISO 8601 date or date-time a person typed (``2026-11-30``, ``2026-11-30T12:00Z``,
    ``...+01:00``; no offset means UTC) as an aware UTC time; BadInputError naming `what`."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInputError(
            f"{what}: not an ISO 8601 date or time, got {text[:80]!r} (e.g. 2026-11-30 or "
            "2026-11-30T12:00Z)"
        ) from None
    return as_utc(value)
