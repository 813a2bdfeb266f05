"""Alert rules, notification channels and silences in the database (issue #12).

Rules and channels follow ledger/budgets.py's rules: unique names, every change recorded in
``config_changes`` in the same transaction, archive keeps the row (archived rules are not
evaluated), and entries from the alerts file (source 'file') are not edited, archived or
restored from the UI or the CLI. A rule must watch a budget that exists (the two budget
kinds) and name channels that exist; a channel in use cannot be archived. Channels cannot be
renamed (rules and budgets name them): add a new one and move the users over.

Silences live in ledger/silences.py and are re-exported here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.alert_signals_base import check_signal_rule
from ledger.budgets import (
    ConfigChangePage,
    StoredKind,
    changes_page,
    check_channels,
    set_archived_by_name,
    tx_archive_row,
    tx_get_budget,
    tx_save_named,
)
from ledger.schema import alert_channels, alert_rules
from ledger.schema import budgets as budgets_table

# Silences are their own module; these names are re-exported (the module map names them here).
from ledger.silences import (  # noqa: F401
    MAX_SILENCE,
    Silence,
    active_silences,
    add_silence,
    end_silence,
    list_silences,
    rule_id_of,
)
from models.alert_config import (
    BUDGET_KINDS,
    AlertRule,
    Channel,
    ConfigError,
    channel_from_mapping,
    rule_from_mapping,
)

if TYPE_CHECKING:
    from inferledger.core.storage import Storage, Transaction

_RULE_COLUMNS = (
    "rule_id",
    "name",
    "kind",
    "scope",
    "group_by",
    "budget_name",
    "params",
    "window_s",
    "threshold",
    "resolve_threshold",
    "pending_s",
    "resolve_s",
    "repeat_s",
    "severity",
    "owner",
    "channels",
    "enabled",
    "note",
    "source",
    "archived_at",
)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# ---------------------------------------------------------------------------- rules


def rule_to_mapping(r: AlertRule) -> dict[str, Any]:
    """A rule as the alerts file would write it (what the audit trail records)."""
    return {
        "name": r.name,
        "kind": r.kind,
        "owner": r.owner,
        "budget_name": r.budget_name,
        "scope": dict(r.scope),
        "group_by": list(r.group_by),
        "params": dict(r.params),
        "window_s": r.window_s,
        "threshold": r.threshold,
        "resolve_threshold": r.resolve_threshold,
        "pending_s": r.pending_s,
        "resolve_s": r.resolve_s,
        "repeat_s": r.repeat_s,
        "severity": r.severity,
        "channels": list(r.channels),
        "enabled": r.enabled,
        "note": r.note,
    }


def _rule_values(r: AlertRule) -> dict[str, Any]:
    return {
        "name": r.name,
        "kind": r.kind,
        "scope": _dumps(dict(r.scope)),
        "group_by": ",".join(r.group_by),
        "budget_name": r.budget_name,
        "params": _dumps(dict(r.params)),
        "window_s": r.window_s,
        "threshold": r.threshold,
        "resolve_threshold": r.resolve_threshold,
        "pending_s": r.pending_s,
        "resolve_s": r.resolve_s,
        "repeat_s": r.repeat_s,
        "severity": r.severity,
        "owner": r.owner,
        "channels": ",".join(r.channels),
        "enabled": r.enabled,
        "note": r.note,
        "source": r.source,
    }


def _rule(row: Sequence[Any]) -> AlertRule:
    r = dict(zip(_RULE_COLUMNS, row, strict=True))
    return AlertRule(
        name=r["name"],
        kind=r["kind"],
        owner=r["owner"],
        window_s=int(r["window_s"]),
        threshold=float(r["threshold"]),
        resolve_threshold=float(r["resolve_threshold"]),
        scope=json.loads(r["scope"] or "{}"),
        group_by=tuple(g for g in r["group_by"].split(",") if g),
        budget_name=r["budget_name"],
        params=json.loads(r["params"] or "{}"),
        pending_s=int(r["pending_s"]),
        resolve_s=int(r["resolve_s"]),
        repeat_s=int(r["repeat_s"]),
        severity=r["severity"],
        channels=tuple(c for c in r["channels"].split(",") if c),
        enabled=bool(r["enabled"]),
        note=r["note"],
        source=r["source"],
        rule_id=int(r["rule_id"]),
        archived_at=r["archived_at"],
    )


def checked_rule(r: AlertRule) -> AlertRule:
    """The rule validated again as the file and the forms are (ConfigError otherwise)."""
    again = rule_from_mapping(rule_to_mapping(r), source=r.source, where=f"rule {r.name!r}")
    if again.kind not in BUDGET_KINDS:
        check_signal_rule(again)  # params and dimensions the kind's data carries (issue #12)
    return replace(again, rule_id=r.rule_id, archived_at=r.archived_at)


def _rule_select() -> sa.Select[Any]:
    return sa.select(*(alert_rules.c[c] for c in _RULE_COLUMNS))


def list_rules(
    storage: Storage, *, include_archived: bool = False, enabled_only: bool = False
) -> list[AlertRule]:
    """The rules by name; archived ones only when asked, disabled ones unless enabled_only."""
    c = alert_rules.c
    stmt = _rule_select().order_by(c.name)
    if not include_archived:
        stmt = stmt.where(c.archived_at.is_(None))
    if enabled_only:
        stmt = stmt.where(c.enabled)
    return [_rule(r) for r in storage.select(stmt)]


def get_rule(storage: Storage, name: str) -> AlertRule | None:
    rows = storage.select(_rule_select().where(alert_rules.c.name == name))
    return _rule(rows[0]) if rows else None


def get_rule_by_key(storage: Storage, rule_key: str) -> AlertRule | None:
    """The rule of an alert's ``rule:<rule_id>`` key (archived or not), or None."""
    rule_id = rule_id_of(rule_key)
    if rule_id is None:
        return None
    rows = storage.select(_rule_select().where(alert_rules.c.rule_id == rule_id))
    return _rule(rows[0]) if rows else None


def tx_get_rule(tx: Transaction, name: str) -> AlertRule | None:
    row = tx.run(_rule_select().where(alert_rules.c.name == name)).fetchone()
    return _rule(row) if row else None


def _file_owned(kind: str, name: str) -> ConfigError:
    return ConfigError(
        f"{kind} {name!r} comes from the alerts file (alerts.file); edit the file, "
        "it is synced at every start and by `inferledger alerts sync`"
    )


def _check_budget(tx: Transaction, rule: AlertRule, where: str) -> None:
    if rule.budget_name is None:
        return
    budget = tx_get_budget(tx, rule.budget_name)
    if budget is None:
        raise ConfigError(f"{where}: unknown budget {rule.budget_name!r}")
    if budget.archived_at is not None:
        raise ConfigError(f"{where}: budget {rule.budget_name!r} is archived")


RULES = StoredKind(
    "rule", alert_rules, "rule_id", tx_get_rule, _rule_values,
    rule_to_mapping, rule_to_mapping,
)  # fmt: skip


def tx_save_rule(
    tx: Transaction, rule: AlertRule, *, by: str, replace_name: str | None, allow_file: bool
) -> AlertRule:
    """save_rule inside a transaction (the alerts file's sync runs several in one)."""
    where = f"rule {rule.name!r}"
    check_channels(tx, rule.channels, where)
    _check_budget(tx, rule, where)
    return tx_save_named(tx, RULES, rule, by=by, replace_name=replace_name, allow_file=allow_file)


def save_rule(
    storage: Storage, rule: AlertRule, *, by: str, replace: str | None = None
) -> AlertRule:
    """Add `rule` (replace None) or change the rule named `replace` into it (its rule_id, and
    so its alerts, stay). ConfigError when invalid, the name is taken, the budget or a channel
    is unknown, or the rule comes from the alerts file; nothing is written then."""
    rule = checked_rule(rule)
    if rule.source == "file":
        raise ConfigError(f"rule {rule.name!r}: only the alerts file writes source 'file'")
    return storage.write(
        lambda tx: tx_save_rule(tx, rule, by=by, replace_name=replace, allow_file=False)
    )


def tx_set_rule_archived(tx: Transaction, old: AlertRule, *, by: str, archive: bool) -> AlertRule:
    t = alert_rules
    tx_archive_row(
        tx, t, t.c.rule_id == old.rule_id, kind="rule", name=old.name,
        archived_at=old.archived_at, archive=archive, by=by, values=rule_to_mapping(old),
        guard=None if archive else lambda: _check_budget(tx, old, f"rule {old.name!r}"),
    )  # fmt: skip
    stored = tx_get_rule(tx, old.name)
    assert stored is not None
    return stored


def _set_rule_archived(storage: Storage, name: str, *, by: str, archive: bool) -> AlertRule:
    return set_archived_by_name(
        storage, "rule", name, get=tx_get_rule, set_archived=tx_set_rule_archived,
        by=by, archive=archive,
    )  # fmt: skip


def archive_rule(storage: Storage, name: str, *, by: str) -> AlertRule:
    """Archive a rule: no longer evaluated; its row, alerts and history stay."""
    return _set_rule_archived(storage, name, by=by, archive=True)


def restore_rule(storage: Storage, name: str, *, by: str) -> AlertRule:
    return _set_rule_archived(storage, name, by=by, archive=False)


def rule_changes(
    storage: Storage, *, name: str | None = None, offset: int = 0, limit: int = 20
) -> ConfigChangePage:
    """The audit trail of rules, channels and silences, a page at a time, newest first."""
    kinds = ("rule",) if name is not None else ("rule", "channel", "silence")
    return changes_page(storage, kinds, name=name, offset=offset, limit=limit)


# ---------------------------------------------------------------------------- channels

_CHANNEL_COLUMNS = ("name", "kind", "config", "source", "archived_at")


def channel_to_mapping(ch: Channel) -> dict[str, Any]:
    return {"name": ch.name, "kind": ch.kind, "config": dict(ch.config)}


def _redacted(ch: Channel) -> dict[str, Any]:
    """A channel for the audit trail: secrets given directly are not copied into it."""
    mapping = channel_to_mapping(ch)
    mapping["config"] = {
        k: ("***" if k in ("secret", "password") else v) for k, v in mapping["config"].items()
    }
    return mapping


def _channel(row: Sequence[Any]) -> Channel:
    r = dict(zip(_CHANNEL_COLUMNS, row, strict=True))
    return Channel(
        name=r["name"],
        kind=r["kind"],
        config=json.loads(r["config"] or "{}"),
        source=r["source"],
        archived_at=r["archived_at"],
    )


def _channel_select() -> sa.Select[Any]:
    return sa.select(*(alert_channels.c[c] for c in _CHANNEL_COLUMNS))


def list_channels(storage: Storage, *, include_archived: bool = False) -> list[Channel]:
    c = alert_channels.c
    stmt = _channel_select().order_by(c.name)
    if not include_archived:
        stmt = stmt.where(c.archived_at.is_(None))
    return [_channel(r) for r in storage.select(stmt)]


def get_channel(storage: Storage, name: str) -> Channel | None:
    rows = storage.select(_channel_select().where(alert_channels.c.name == name))
    return _channel(rows[0]) if rows else None


def tx_get_channel(tx: Transaction, name: str) -> Channel | None:
    row = tx.run(_channel_select().where(alert_channels.c.name == name)).fetchone()
    return _channel(row) if row else None


def _channel_values(ch: Channel) -> dict[str, Any]:
    return {
        "name": ch.name,
        "kind": ch.kind,
        "config": _dumps(dict(ch.config)),
        "source": ch.source,
    }


CHANNELS = StoredKind(
    "channel", alert_channels, "name", tx_get_channel,
    _channel_values, _redacted, channel_to_mapping,
)  # fmt: skip


def tx_save_channel(
    tx: Transaction, channel: Channel, *, by: str, replace_name: str | None, allow_file: bool
) -> Channel:
    if replace_name is not None and replace_name != channel.name:
        raise ConfigError(
            f"channel {replace_name!r} cannot be renamed (budgets and rules name it): "
            "add a new channel and point them at it"
        )
    return tx_save_named(
        tx, CHANNELS, channel, by=by, replace_name=replace_name, allow_file=allow_file
    )


def save_channel(
    storage: Storage, channel: Channel, *, by: str, replace: str | None = None
) -> Channel:
    """Add a channel (replace None) or change the one named `replace` (same name)."""
    channel = channel_from_mapping(
        channel_to_mapping(channel), source=channel.source, where=f"channel {channel.name!r}"
    )
    if channel.source == "file":
        raise ConfigError(f"channel {channel.name!r}: only the alerts file writes source 'file'")
    return storage.write(
        lambda tx: tx_save_channel(tx, channel, by=by, replace_name=replace, allow_file=False)
    )


def channel_users(tx: Transaction, name: str) -> list[str]:
    """The live budgets and rules that name channel `name` ("budget 'x'", "rule 'y'")."""
    users: list[str] = []
    for label, table in (("budget", budgets_table), ("rule", alert_rules)):
        rows = tx.run(
            sa.select(table.c.name, table.c.channels).where(table.c.archived_at.is_(None))
        ).fetchall()
        users += [f"{label} {n!r}" for n, chans in rows if name in chans.split(",")]
    return users


def tx_set_channel_archived(tx: Transaction, old: Channel, *, by: str, archive: bool) -> Channel:
    def not_in_use() -> None:
        users = channel_users(tx, old.name)
        if users:
            raise ConfigError(
                f"channel {old.name!r} is used by {', '.join(users[:5])}; remove it there first"
            )

    t = alert_channels
    tx_archive_row(
        tx, t, t.c.name == old.name, kind="channel", name=old.name,
        archived_at=old.archived_at, archive=archive, by=by, values=_redacted(old),
        guard=not_in_use if archive else None,
    )  # fmt: skip
    stored = tx_get_channel(tx, old.name)
    assert stored is not None
    return stored


def _set_channel_archived(storage: Storage, name: str, *, by: str, archive: bool) -> Channel:
    return set_archived_by_name(
        storage, "channel", name, get=tx_get_channel, set_archived=tx_set_channel_archived,
        by=by, archive=archive,
    )  # fmt: skip


def archive_channel(storage: Storage, name: str, *, by: str) -> Channel:
    """Archive a channel no live budget or rule names (ConfigError naming them otherwise)."""
    return _set_channel_archived(storage, name, by=by, archive=True)


def restore_channel(storage: Storage, name: str, *, by: str) -> Channel:
    return _set_channel_archived(storage, name, by=by, archive=False)
