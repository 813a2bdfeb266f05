"""Silences (issue #12): mute notifications (not state changes) of alerts matching a rule key
(or every rule) and a scope, between two instants; :func:`end_silence` ends one early. Every
change is recorded in ``config_changes`` in the same transaction. Re-exported by
ledger/alert_rules.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.budgets import UnknownConfigError, record_change
from ledger.schema import alert_rules, silences
from models.alert_config import ConfigError, scope_contains, validate_scope

if TYPE_CHECKING:
    from inferledger.core.storage import Storage, Transaction

#: The longest silence: a quarter and a bit; longer ones are forgotten, not silences.
MAX_SILENCE = timedelta(days=100)


def rule_id_of(rule_key: str) -> int | None:
    """The rule_id of a ``rule:<rule_id>`` key, or None for another form."""
    prefix, _, number = rule_key.partition(":")
    return int(number) if prefix == "rule" and number.isdigit() else None


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Silence:
    silence_id: int
    rule_key: str | None
    scope: Mapping[str, str]
    starts_at: datetime
    ends_at: datetime
    reason: str
    created_by: str
    created_at: datetime
    ended_at: datetime | None

    def active(self, at: datetime) -> bool:
        """In force at `at`: started, not yet over, not ended early."""
        end = self.ends_at if self.ended_at is None else min(self.ends_at, self.ended_at)
        return self.starts_at <= at < end

    def covers(self, rule_key: str, labels: Mapping[str, str | None]) -> bool:
        """Whether it mutes an alert of `rule_key` whose group is labelled `labels`."""
        return (self.rule_key is None or self.rule_key == rule_key) and scope_contains(
            self.scope, labels
        )


_SILENCE_COLUMNS = (
    "silence_id",
    "rule_key",
    "scope",
    "starts_at",
    "ends_at",
    "reason",
    "created_by",
    "created_at",
    "ended_at",
)


def _silence(row: Sequence[Any]) -> Silence:
    r = dict(zip(_SILENCE_COLUMNS, row, strict=True))
    r["scope"] = json.loads(r["scope"] or "{}")
    return Silence(**r)


def _aware(moment: Any, what: str) -> datetime:
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise ConfigError(f"silence {what} must be a datetime with a time zone")
    return moment.astimezone(UTC)


def list_silences(
    storage: Storage, *, at: datetime | None = None, include_ended: bool = False
) -> list[Silence]:
    """Silences, newest first: without include_ended, those not ended early and (given `at`)
    not over by then."""
    c = silences.c
    stmt = sa.select(*(c[n] for n in _SILENCE_COLUMNS)).order_by(c.silence_id.desc())
    if not include_ended:
        stmt = stmt.where(c.ended_at.is_(None))
        if at is not None:
            stmt = stmt.where(c.ends_at > _aware(at, "at"))
    return [_silence(r) for r in storage.select(stmt)]


def active_silences(storage: Storage, at: datetime) -> list[Silence]:
    """The silences in force at `at`."""
    at = _aware(at, "at")
    c = silences.c
    stmt = sa.select(*(c[n] for n in _SILENCE_COLUMNS)).where(
        c.starts_at <= at,
        c.ends_at > at,
        sa.or_(c.ended_at.is_(None), c.ended_at > at),
    )
    return [_silence(r) for r in storage.select(stmt.order_by(c.silence_id))]


def add_silence(
    storage: Storage,
    *,
    rule_key: str | None,
    scope: Mapping[str, str] | None,
    starts_at: datetime,
    ends_at: datetime,
    reason: str,
    by: str,
) -> int:
    """Mute notifications of `rule_key`'s alerts (None: every rule) whose group lies in
    `scope`, from starts_at to ends_at (at most :data:`MAX_SILENCE`). Returns its id."""
    where = "silence"
    clean_scope = validate_scope(scope or {}, where)
    start, end = _aware(starts_at, "start"), _aware(ends_at, "end")
    if end <= start:
        raise ConfigError("a silence must end after it starts")
    if end - start > MAX_SILENCE:
        raise ConfigError(f"a silence may last at most {MAX_SILENCE.days} days")
    if not isinstance(reason, str) or not reason.strip():
        raise ConfigError("a silence needs a reason (who is on it, what it waits for)")
    if rule_key is not None and (rule_id_of(rule_key) is None):
        raise ConfigError(f"silence: rule key {rule_key!r} is not of the form rule:<id>")

    def write(tx: Transaction) -> int:
        if rule_key is not None:
            rid = rule_id_of(rule_key)
            found = tx.run(sa.select(alert_rules.c.name).where(alert_rules.c.rule_id == rid))
            if found.fetchone() is None:
                raise UnknownConfigError(f"silence: no rule {rule_key!r}")
        row = tx.run(
            sa.insert(silences)
            .values(
                rule_key=rule_key,
                scope=_dumps(clean_scope),
                starts_at=start,
                ends_at=end,
                reason=reason.strip(),
                created_by=by,
            )
            .returning(silences.c.silence_id)
        ).fetchone()
        assert row is not None
        silence_id = int(row[0])
        record_change(
            tx, by=by, kind="silence", name=f"silence #{silence_id}", action="added", old=None,
            new={"rule_key": rule_key, "scope": clean_scope, "starts_at": start.isoformat(),
                 "ends_at": end.isoformat(), "reason": reason.strip()},
        )  # fmt: skip
        return silence_id

    return storage.write(write)


def end_silence(storage: Storage, silence_id: int, *, by: str, at: datetime | None = None) -> None:
    """End a silence now (or at `at`); its row stays for the history."""
    when = _aware(at, "at") if at is not None else datetime.now(UTC)
    c = silences.c

    def write(tx: Transaction) -> None:
        row = tx.run(
            sa.select(*(c[n] for n in _SILENCE_COLUMNS)).where(c.silence_id == silence_id)
        ).fetchone()
        if row is None:
            raise UnknownConfigError(f"no silence #{silence_id}")
        old = _silence(row)
        if old.ended_at is not None or old.ends_at <= when:
            raise ConfigError(f"silence #{silence_id} is already over")
        tx.run(sa.update(silences).where(c.silence_id == silence_id).values(ended_at=when))
        record_change(
            tx, by=by, kind="silence", name=f"silence #{silence_id}", action="expired",
            old={"ends_at": old.ends_at.isoformat()}, new={"ended_at": when.isoformat()},
        )  # fmt: skip

    storage.write(write)
