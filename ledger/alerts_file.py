"""Budgets, rules and channels as code (issue #12): the alerts file (setting ``alerts.file``)
is the truth for every entry of source 'file'. :func:`sync_alerts_file` makes the database
equal to it at every start and from ``inferledger alerts sync``: entries in the file are added
or changed (an archived one is restored), file entries no longer in it are archived (their
history stays), all in one transaction. A bad file changes nothing and raises ConfigError in
one line; an entry whose name belongs to a UI or CLI entry is refused, naming the clash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger import alert_rules as rules_store
from ledger import budgets as budgets_store
from ledger.alert_signals_base import check_signal_rule
from ledger.schema import alert_channels, alert_rules
from ledger.schema import budgets as budgets_table
from models.alert_config import BUDGET_KINDS, AlertsConfig, ConfigError, parse_alerts_yaml

if TYPE_CHECKING:
    from inferledger.core.storage import Storage, Transaction

#: Who the audit trail says made a change the file brought.
SYNC_ACTOR = "alerts file"


@dataclass
class SyncReport:
    """What a sync did, as "budget 'x'" / "rule 'y'" / "channel 'z'" lines."""

    path: str
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [
            f"{len(v)} {k}"
            for k, v in (
                ("added", self.added),
                ("changed", self.changed),
                ("restored", self.restored),
                ("archived", self.archived),
                ("unchanged", self.unchanged),
            )
            if v
        ]
        return f"alerts file {self.path}: " + (", ".join(parts) if parts else "empty")


def read_alerts_file(path: str | Path) -> AlertsConfig:
    """Parse and validate the alerts file (ConfigError in one line naming it otherwise)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"alerts file {path}: {exc.strerror or exc}") from None
    config = parse_alerts_yaml(text, origin=str(path))
    for rule in config.rules:
        if rule.kind not in BUDGET_KINDS:
            try:
                check_signal_rule(rule)  # its params and dimensions, as evaluation reads them
            except ConfigError as exc:
                raise ConfigError(f"alerts file {path}: {exc}") from None
    return config


def _clash(kind: str, name: str, source: str, path: str) -> ConfigError:
    return ConfigError(
        f"alerts file {path}: {kind} {name!r} already exists with source {source!r} "
        f"(made in the UI or CLI); rename one of them, or archive the {source} one first"
    )


def _file_names(tx: Transaction, table: sa.Table) -> list[str]:
    rows = tx.run(
        sa.select(table.c.name).where(table.c.source == "file", table.c.archived_at.is_(None))
    ).fetchall()
    return [r[0] for r in rows]


@dataclass(frozen=True)
class _Kind:
    """One kind of alerts-file entry and its store's transaction-level verbs."""

    kind: str
    entries: Sequence[Any]
    table: sa.Table
    get: Callable[..., Any]
    save: Callable[..., Any]
    set_archived: Callable[..., Any]
    to_mapping: Callable[[Any], Mapping[str, Any]]


def apply_config(tx: Transaction, config: AlertsConfig, path: str) -> SyncReport:
    """Make the file entries of the database equal `config`, in the caller's transaction."""
    report = SyncReport(path=path)
    by = f"{SYNC_ACTOR} {path}"[:200]

    def note(kind: str, name: str, before: object, after: object, restored: bool) -> None:
        label = f"{kind} {name!r}"
        if before is None:
            report.added.append(label)
        elif restored:
            report.restored.append(label)
        elif before != after:
            report.changed.append(label)
        else:
            report.unchanged.append(label)

    # Channels first (budgets and rules name them), then budgets (rules watch them); archiving
    # goes the other way round: rules, budgets, then channels.
    kinds = (
        _Kind("channel", config.channels, alert_channels, rules_store.tx_get_channel,
              rules_store.tx_save_channel, rules_store.tx_set_channel_archived,
              rules_store.channel_to_mapping),
        _Kind("budget", config.budgets, budgets_table, budgets_store.tx_get_budget,
              budgets_store.tx_save_budget, budgets_store.tx_set_budget_archived,
              budgets_store.budget_to_mapping),
        _Kind("rule", config.rules, alert_rules, rules_store.tx_get_rule,
              rules_store.tx_save_rule, rules_store.tx_set_rule_archived,
              rules_store.rule_to_mapping),
    )  # fmt: skip
    for k in kinds:
        for entry in k.entries:
            old = k.get(tx, entry.name)
            if old is not None and old.source != "file":
                raise _clash(k.kind, entry.name, old.source, path)
            restored = old is not None and old.archived_at is not None
            if restored:
                k.set_archived(tx, old, by=by, archive=False)
            new = k.save(
                tx, entry, by=by, replace_name=None if old is None else entry.name, allow_file=True
            )
            before = None if old is None else k.to_mapping(old)
            note(k.kind, entry.name, before, k.to_mapping(new), restored)
    # Gone from the file: archived (a channel still named by a UI entry is refused).
    for k in reversed(kinds):
        keep = {e.name for e in k.entries}
        for name in _file_names(tx, k.table):
            if name in keep:
                continue
            old = k.get(tx, name)
            assert old is not None
            try:
                k.set_archived(tx, old, by=by, archive=True)
            except ConfigError as exc:
                raise ConfigError(f"alerts file {path}: {exc}") from None
            report.archived.append(f"{k.kind} {name!r}")
    return report


def sync_alerts_file(storage: Storage, path: str | Path) -> SyncReport:
    """Read, validate and apply the alerts file in one transaction; ConfigError (nothing
    written) when the file is unreadable, invalid, or clashes with UI/CLI entries."""
    config = read_alerts_file(path)
    return storage.write(lambda tx: apply_config(tx, config, str(path)))
