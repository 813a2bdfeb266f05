"""Budgets in the database (issue #12): list, read, save, archive and restore them, each change
recorded in ``config_changes`` (who, what, the values before and after as JSON) in the same
transaction.

Budgets come from the UI, the CLI or the alerts file (``source``). A budget from the file is
the file's: the UI and the CLI may not edit, archive or restore it (ledger/alerts_file.py
syncs it from the file at every start). Names are unique, archived budgets included: an
archived budget keeps its row and history and comes back with :func:`restore_budget`.

Every budget written goes through :func:`models.alert_config.budget_from_mapping` again, so
a hand-built :class:`Budget` meets the same rules as the file and the forms.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.schema import alert_channels, alert_rules, config_changes
from ledger.schema import budgets as budgets_table
from models.alert_config import Budget, ConfigError, budget_from_mapping

if TYPE_CHECKING:
    from inferledger.core.storage import Storage, Transaction

_COLUMNS = (
    "budget_id",
    "name",
    "scope",
    "period",
    "week_start",
    "reset_day",
    "custom_start",
    "custom_end",
    "timezone",
    "amount",
    "currency",
    "thresholds",
    "forecast_alert",
    "idle_policy",
    "owner",
    "channels",
    "note",
    "source",
    "archived_at",
)


class UnknownConfigError(ConfigError):
    """A budget, rule, channel or silence that does not exist."""

    http_status = 404


@dataclass(frozen=True)
class ConfigChange:
    change_id: int
    changed_at: datetime
    changed_by: str
    object_kind: str
    object_name: str
    action: str
    old_values: str | None
    new_values: str | None


@dataclass(frozen=True)
class ConfigChangePage:
    """One page of config_changes, newest first: ``total`` rows in all, these from ``offset``."""

    changes: list[ConfigChange]
    offset: int
    limit: int
    total: int


# ---------------------------------------------------------------------------- values


def budget_to_mapping(b: Budget) -> dict[str, Any]:
    """A budget as the alerts file would write it (what the audit trail records)."""
    out: dict[str, Any] = {
        "name": b.name,
        "amount": b.amount,
        "currency": b.currency,
        "period": b.period,
        "timezone": b.timezone,
        "owner": b.owner,
        "scope": dict(b.scope),
        "thresholds": list(b.thresholds),
        "forecast_alert": b.forecast_alert,
        "idle_policy": b.idle_policy,
        "channels": list(b.channels),
        "note": b.note,
    }
    if b.period == "weekly":
        out["week_start"] = b.week_start
    if b.period in ("monthly", "quarterly"):
        out["reset_day"] = b.reset_day
    if b.period == "custom" and b.custom_start and b.custom_end:
        out["custom_start"] = b.custom_start.isoformat()
        out["custom_end"] = b.custom_end.isoformat()
    return out


def _row_values(b: Budget) -> dict[str, Any]:
    return {
        "name": b.name,
        "scope": json.dumps(dict(b.scope), sort_keys=True, separators=(",", ":")),
        "period": b.period,
        "week_start": b.week_start,
        "reset_day": b.reset_day,
        "custom_start": b.custom_start if b.period == "custom" else None,
        "custom_end": b.custom_end if b.period == "custom" else None,
        "timezone": b.timezone,
        "amount": b.amount,
        "currency": b.currency,
        "thresholds": ",".join(f"{t:.12g}" for t in b.thresholds),
        "forecast_alert": b.forecast_alert,
        "idle_policy": b.idle_policy,
        "owner": b.owner,
        "channels": ",".join(b.channels),
        "note": b.note,
        "source": b.source,
    }


def _budget(row: Sequence[Any]) -> Budget:
    r = dict(zip(_COLUMNS, row, strict=True))
    return Budget(
        name=r["name"],
        amount=float(r["amount"]),
        period=r["period"],
        owner=r["owner"],
        scope=json.loads(r["scope"] or "{}"),
        timezone=r["timezone"],
        week_start=int(r["week_start"]),
        reset_day=int(r["reset_day"]),
        custom_start=r["custom_start"],
        custom_end=r["custom_end"],
        currency=r["currency"],
        thresholds=tuple(float(t) for t in r["thresholds"].split(",") if t),
        forecast_alert=bool(r["forecast_alert"]),
        idle_policy=r["idle_policy"],
        channels=tuple(c for c in r["channels"].split(",") if c),
        note=r["note"],
        source=r["source"],
        budget_id=int(r["budget_id"]),
        archived_at=r["archived_at"],
    )


def checked_budget(b: Budget) -> Budget:
    """The budget validated again as the file and the forms are (ConfigError otherwise)."""
    again = budget_from_mapping(budget_to_mapping(b), source=b.source, where=f"budget {b.name!r}")
    return replace(again, budget_id=b.budget_id, archived_at=b.archived_at)


def _json(values: Mapping[str, Any] | None) -> str | None:
    return None if values is None else json.dumps(values, sort_keys=True, default=str)


def record_change(
    tx: Transaction,
    *,
    by: str,
    kind: str,
    name: str,
    action: str,
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
) -> None:
    """One config_changes row, in the caller's transaction."""
    if not isinstance(by, str) or not by.strip():
        raise ConfigError("a change needs who made it (by)")
    tx.run(
        sa.insert(config_changes).values(
            changed_by=by.strip(),
            object_kind=kind,
            object_name=name,
            action=action,
            old_values=_json(old),
            new_values=_json(new),
        )
    )


def tx_archive_row(
    tx: Transaction,
    table: sa.Table,
    where: sa.ColumnElement[bool],
    *,
    kind: str,
    name: str,
    archived_at: datetime | None,
    archive: bool,
    by: str,
    values: Mapping[str, Any],
    guard: Callable[[], None] | None = None,
) -> None:
    """Archive (or restore) one budget, rule or channel row in the caller's transaction and
    audit it. ConfigError when it already is; `guard` runs its own checks (a channel still in
    use, a rule's budget gone) after that one, before anything is written."""
    if archive and archived_at is not None:
        raise ConfigError(f"{kind} {name!r} is already archived")
    if not archive and archived_at is None:
        raise ConfigError(f"{kind} {name!r} is not archived")
    if guard is not None:
        guard()
    tx.run(
        sa.update(table)
        .where(where)
        .values(archived_at=sa.func.now() if archive else None, updated_at=sa.func.now())
    )
    record_change(
        tx,
        by=by,
        kind=kind,
        name=name,
        action="archived" if archive else "restored",
        old=values,
        new=None if archive else values,
    )


def changes_page(
    storage: Storage,
    kind: str | Sequence[str],
    *,
    name: str | None = None,
    offset: int = 0,
    limit: int = 20,
) -> ConfigChangePage:
    """A page of the config_changes of `kind` (one or several object kinds), newest first,
    optionally of one object. An offset past the end gives the last page."""
    if limit < 1:
        raise ConfigError(f"a page holds at least one change, got limit {limit}")
    c = config_changes.c
    kinds = [kind] if isinstance(kind, str) else list(kind)
    where = [c.object_kind.in_(kinds)]
    if name is not None:
        where.append(c.object_name == name)
    total_rows = storage.select(
        sa.select(sa.func.count()).select_from(config_changes).where(*where)
    )
    total = int(total_rows[0][0] or 0) if total_rows else 0
    start = max(0, min(int(offset), max(0, total - 1) // limit * limit))
    rows = storage.select(
        sa.select(
            c.change_id,
            c.changed_at,
            c.changed_by,
            c.object_kind,
            c.object_name,
            c.action,
            c.old_values,
            c.new_values,
        )
        .where(*where)
        .order_by(c.change_id.desc())
        .limit(limit)
        .offset(start)
    )
    return ConfigChangePage([ConfigChange(*r) for r in rows], start, limit, total)


# ---------------------------------------------------------------------------- reads


def _select() -> sa.Select[Any]:
    return sa.select(*(budgets_table.c[c] for c in _COLUMNS))


def list_budgets(storage: Storage, *, include_archived: bool = False) -> list[Budget]:
    """The budgets by name; archived ones only when asked."""
    stmt = _select().order_by(budgets_table.c.name)
    if not include_archived:
        stmt = stmt.where(budgets_table.c.archived_at.is_(None))
    return [_budget(r) for r in storage.select(stmt)]


def get_budget(storage: Storage, name: str) -> Budget | None:
    """The budget of that name (archived or not), or None."""
    rows = storage.select(_select().where(budgets_table.c.name == name))
    return _budget(rows[0]) if rows else None


def budget_changes(
    storage: Storage, *, name: str | None = None, offset: int = 0, limit: int = 20
) -> ConfigChangePage:
    """The budgets' audit trail (or one budget's), a page at a time, newest first."""
    return changes_page(storage, "budget", name=name, offset=offset, limit=limit)


# ---------------------------------------------------------------------------- writes


def tx_get_budget(tx: Transaction, name: str) -> Budget | None:
    row = tx.run(_select().where(budgets_table.c.name == name)).fetchone()
    return _budget(row) if row else None


def _file_owned(kind: str, name: str) -> ConfigError:
    return ConfigError(
        f"{kind} {name!r} comes from the alerts file (alerts.file); edit the file, "
        "it is synced at every start and by `inferledger alerts sync`"
    )


def check_channels(tx: Transaction, names: Sequence[str], where: str) -> None:
    """Every named channel exists and is not archived (ConfigError otherwise)."""
    if not names:
        return
    c = alert_channels.c
    rows = tx.run(
        sa.select(c.name).where(c.name.in_(list(names)), c.archived_at.is_(None))
    ).fetchall()
    known = {r[0] for r in rows}
    for name in names:
        if name not in known:
            raise ConfigError(f"{where}: unknown channel {name!r} (add it first, or fix the name)")


@dataclass(frozen=True)
class StoredKind:
    """How one kind of named configuration (budget, rule, channel) is kept: its table, the
    column an update matches on, how a transaction reads one by name, its row values, what
    the audit trail records of it and what counts as a change."""

    kind: str
    table: sa.Table
    key: str
    get: Callable[[Transaction, str], Any]
    values: Callable[[Any], dict[str, Any]]
    audit: Callable[[Any], dict[str, Any]]
    compared: Callable[[Any], dict[str, Any]]


def tx_save_named(
    tx: Transaction,
    how: StoredKind,
    item: Any,
    *,
    by: str,
    replace_name: str | None,
    allow_file: bool,
    after_update: Callable[[Any], None] | None = None,
) -> Any:
    """Add `item` (replace_name None) or change the entry named replace_name into it, with
    its audit row, in the caller's transaction; returns the stored entry. ConfigError when
    the name is taken or the entry to change belongs to the alerts file and allow_file is
    off, UnknownConfigError when there is nothing to change; a change that
    changes nothing writes nothing (the save_* functions refuse an item of source 'file'
    before they write). after_update(old) runs after an update (a rename's
    follow-ups)."""
    kind, t, name = how.kind, how.table, item.name
    clash = how.get(tx, name)
    if replace_name is None:
        if clash is not None:
            state = " (archived: restore it, or pick another name)" if clash.archived_at else ""
            raise ConfigError(f"a {kind} named {name!r} already exists{state}")
        tx.run(sa.insert(t).values(**how.values(item)))
        record_change(
            tx, by=by, kind=kind, name=name, action="added", old=None, new=how.audit(item)
        )
    else:
        old = how.get(tx, replace_name)
        if old is None:
            raise UnknownConfigError(f"no {kind} named {replace_name!r} to change")
        if old.source == "file" and not allow_file:
            raise _file_owned(kind, old.name)
        key = getattr(old, how.key)
        if clash is not None and getattr(clash, how.key) != key:
            raise ConfigError(f"a {kind} named {name!r} already exists")
        if how.compared(old) == how.compared(item) and old.source == item.source:
            return old
        tx.run(
            sa.update(t)
            .where(t.c[how.key] == key)
            .values(**how.values(item), updated_at=sa.func.now())
        )
        if after_update is not None:
            after_update(old)
        record_change(
            tx, by=by, kind=kind, name=name, action="changed", old=how.audit(old),
            new=how.audit(item),
        )  # fmt: skip
    stored = how.get(tx, name)
    assert stored is not None  # just written in this transaction
    return stored


BUDGETS = StoredKind(
    "budget", budgets_table, "budget_id", tx_get_budget, _row_values, budget_to_mapping,
    budget_to_mapping,
)  # fmt: skip


def tx_save_budget(
    tx: Transaction, budget: Budget, *, by: str, replace_name: str | None, allow_file: bool
) -> Budget:
    """save_budget inside a transaction (the alerts file's sync runs several in one)."""
    check_channels(tx, budget.channels, f"budget {budget.name!r}")

    def renamed(old: Budget) -> None:  # the rules watching it follow
        if old.name != budget.name:
            r = alert_rules.c
            tx.run(
                sa.update(alert_rules)
                .where(r.budget_name == old.name)
                .values(budget_name=budget.name, updated_at=sa.func.now())
            )

    return tx_save_named(
        tx, BUDGETS, budget, by=by, replace_name=replace_name, allow_file=allow_file,
        after_update=renamed,
    )  # fmt: skip


def save_budget(storage: Storage, budget: Budget, *, by: str, replace: str | None = None) -> Budget:
    """Add `budget` (replace None) or change the budget named `replace` into it (a rename
    when the names differ: rules watching it follow). Raises ConfigError when the budget is
    invalid, its name is taken, a channel it names is unknown, or the budget to change comes
    from the alerts file; nothing is written then. Returns the stored budget."""
    budget = checked_budget(budget)
    if budget.source == "file":
        raise ConfigError(f"budget {budget.name!r}: only the alerts file writes source 'file'")
    return storage.write(
        lambda tx: tx_save_budget(tx, budget, by=by, replace_name=replace, allow_file=False)
    )


def set_archived_by_name(
    storage: Storage,
    kind: str,
    name: str,
    *,
    get: Callable[[Transaction, str], Any],
    set_archived: Callable[..., Any],
    by: str,
    archive: bool,
) -> Any:
    """Archive (or restore) the budget, rule or channel named `name` from the UI or CLI:
    UnknownConfigError when there is none, ConfigError when the alerts file owns it."""

    def write(tx: Transaction) -> Any:
        old = get(tx, name)
        if old is None:
            raise UnknownConfigError(f"no {kind} named {name!r}")
        if old.source == "file":
            raise _file_owned(kind, name)
        return set_archived(tx, old, by=by, archive=archive)

    return storage.write(write)


def _set_archived(storage: Storage, name: str, *, by: str, archive: bool) -> Budget:
    return set_archived_by_name(
        storage, "budget", name, get=tx_get_budget, set_archived=tx_set_budget_archived,
        by=by, archive=archive,
    )  # fmt: skip


def tx_set_budget_archived(tx: Transaction, old: Budget, *, by: str, archive: bool) -> Budget:
    """Archive (or restore) a budget in the caller's transaction."""
    t = budgets_table
    tx_archive_row(
        tx, t, t.c.budget_id == old.budget_id, kind="budget", name=old.name,
        archived_at=old.archived_at, archive=archive, by=by, values=budget_to_mapping(old),
    )  # fmt: skip
    stored = tx_get_budget(tx, old.name)
    assert stored is not None
    return stored


def archive_budget(storage: Storage, name: str, *, by: str) -> Budget:
    """Archive a budget: it keeps its row and history, leaves the lists and its alerts stop.
    ConfigError when unknown, already archived, or from the alerts file."""
    return _set_archived(storage, name, by=by, archive=True)


def restore_budget(storage: Storage, name: str, *, by: str) -> Budget:
    """Bring an archived budget back. ConfigError when unknown, not archived or from the file."""
    return _set_archived(storage, name, by=by, archive=False)
