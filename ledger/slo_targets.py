"""The SLO targets the admin Deployments page edits (:func:`save_slo_target`,
:func:`remove_slo_target`, :func:`restore_bundled_slo_targets`), shown by name and what they
judge, never by ``target_id``; every change is recorded in their audit trail
(``slo_target_changes``, read a page at a time by :func:`slo_changes_page`).

models/data/slo_targets.yaml seeds slo_targets on a database's first start
(ledger.efficiency.seed_slo_targets_if_empty, rows with source 'config'); after that the table
is the owner, and the admin page edits it here (rows with source 'ui'). Every write records its
change in slo_target_changes in the same transaction (who, when, the values before and after as
JSON text); a refused write leaves neither. The seed only runs while both tables are empty, so
a removed target stays removed; restore_bundled_slo_targets brings the seed file's objectives
back on request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.audit import audit_page
from ledger.efficiency import (
    SloTargetsError,
    bundled_slo_targets_file,
    load_slo_targets,
    parse_slo_target,
)
from ledger.schema import slo_target_changes, slo_targets

if TYPE_CHECKING:
    from pathlib import Path

    from inferledger.core.storage import Storage, Transaction


_latency_buckets = sa.table("mart_latency_buckets", sa.column("route", sa.String))

#: The columns of a version that an audit row's old_values / new_values hold (JSON text), as
#: ledger.efficiency.seed_slo_targets_if_empty writes them too.
_SLO_VALUE_COLUMNS = (
    "route", "app", "environment", "stage", "percentile", "target_s", "effective_from", "note",
    "source",
)  # fmt: skip


def _describe_slo(
    route: str,
    stage: str,
    percentile: float,
    target_s: float,
    app: str | None,
    environment: str | None,
) -> str:
    only = "".join(f" {w}={v}" for w, v in (("app", app), ("env", environment)) if v)
    return f"{route} {stage} p{percentile * 100:g} ≤ {target_s:g} s{only}"


@dataclass(frozen=True, slots=True)
class SloTargetRow:
    """The version of an objective in effect now (its latest), as the admin page shows it."""

    objective: str
    route: str
    stage: str
    percentile: float  # a share, 0 < p <= 1 (0.95 = p95), as stored
    target_s: float
    app: str | None
    environment: str | None
    effective_from: datetime
    note: str | None
    source: str  # 'config' (the seed file) or 'ui'
    versions: int  # how many versions the objective has

    def describe(self) -> str:
        """'/answer ttft p95 ≤ 0.5 s' (plus the app or environment when it is limited to one)."""
        return _describe_slo(
            self.route, self.stage, self.percentile, self.target_s, self.app, self.environment
        )


@dataclass(frozen=True, slots=True)
class SloTargetChange:
    """One row of the SLO targets' audit trail. ``old`` and ``new`` are the version's values
    (route, stage, percentile as a share, target_s, app, environment, effective_from as ISO
    text, note, source; a removal's ``old`` adds ``versions``), None where the action has none:
    no ``old`` for seeded and added, no ``new`` for removed."""

    change_id: int
    changed_at: datetime
    changed_by: str
    action: str  # 'seeded', 'added', 'changed' or 'removed'
    objective: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None

    @staticmethod
    def describe_values(values: dict[str, Any] | None) -> str:
        """'/answer ttft p95 ≤ 0.5 s (note)', or '' for no values."""
        if not values:
            return ""
        text = _describe_slo(
            values["route"], values["stage"], values["percentile"], values["target_s"],
            values.get("app"), values.get("environment"),
        )  # fmt: skip
        return text + (f" ({values['note']})" if values.get("note") else "")


@dataclass(frozen=True, slots=True)
class SloChangePage:
    """One page of the SLO audit trail, newest first: ``total`` rows in all, these from
    ``offset``."""

    changes: list[SloTargetChange]
    offset: int
    limit: int
    total: int


def _slo_values(row: Any) -> dict[str, Any]:
    """A version's audit values from a row (mapping) of slo_targets."""
    out = {name: row[name] for name in _SLO_VALUE_COLUMNS}
    out["effective_from"] = out["effective_from"].astimezone(UTC).isoformat()
    return out


def _record_slo_change(
    tx: Transaction,
    changed_by: str,
    action: str,
    objective: str,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
) -> None:
    tx.run(
        sa.insert(slo_target_changes).values(
            changed_by=changed_by,
            action=action,
            objective=objective,
            old_values=None if old is None else json.dumps(old, sort_keys=True),
            new_values=None if new is None else json.dumps(new, sort_keys=True),
        )
    )


def _who(changed_by: str) -> str:
    who = str(changed_by or "").strip()
    if not who:
        raise SloTargetsError("changed_by: say who makes the change (the admin's name)")
    return who


def _latest_version(tx: Transaction, objective: str) -> tuple[int, dict[str, Any], int] | None:
    """(target_id, audit values, number of versions) of an objective's latest version."""
    t = slo_targets
    stmt = (
        sa.select(
            t.c.target_id, *[t.c[name] for name in _SLO_VALUE_COLUMNS],
            sa.func.count().over().label("versions"),
        )
        .where(t.c.objective == objective)
        .order_by(t.c.effective_from.desc())
        .limit(1)
    )  # fmt: skip
    row = tx.run(stmt).fetchone()
    if row is None:
        return None
    values = _slo_values(dict(zip(("target_id", *_SLO_VALUE_COLUMNS), row, strict=False)))
    return int(row[0]), values, int(row[-1])


def list_slo_targets(storage: Storage) -> list[SloTargetRow]:
    """Each objective's latest version, by objective name."""
    t = slo_targets
    c = t.c
    versions = (
        sa.select(
            c.objective, c.route, c.stage, c.percentile, c.target_s, c.app, c.environment,
            c.effective_from, c.note, c.source,
            sa.func.row_number()
            .over(partition_by=c.objective, order_by=c.effective_from.desc())
            .label("newest"),
            sa.func.count().over(partition_by=c.objective).label("versions"),
        )
    ).subquery()  # fmt: skip
    v = versions.c
    rows = storage.select(
        sa.select(*[col for col in v if col.name != "newest"])
        .where(v.newest == 1)
        .order_by(v.objective)
    )
    return [SloTargetRow(*row[:10], int(row[10])) for row in rows]


def known_routes(storage: Storage) -> list[str]:
    """Routes with latency data (mart_latency_buckets) or a target already: what an SLO target
    may name without being confirmed as a new route."""
    t = slo_targets
    seen = storage.select(sa.select(_latency_buckets.c.route).distinct())
    targets = storage.select(sa.select(t.c.route).distinct())
    return sorted({r for (r,) in seen if r} | {r for (r,) in targets if r})


def save_slo_target(
    storage: Storage,
    *,
    objective: str,
    route: str,
    stage: str,
    percentile: float | str,
    target_s: float | str,
    changed_by: str,
    app: str | None = None,
    environment: str | None = None,
    note: str | None = None,
    new_route: bool = False,
) -> str:
    """Add an objective, or change its latest version in place (the page judges at query time,
    so a change applies to every hour that version covers); returns 'added', 'changed', or
    'unchanged' when the values are those stored already (nothing written, no audit row).

    ``percentile`` is a percent here, 0 < p <= 100 (95 = p95), as an admin types it; the table
    holds the share. ``route`` must be a route with latency data or a target already, a LIKE
    pattern ('/%'), or, with ``new_route``, a new route that starts with '/'. ``changed_by``
    (the signed-in admin's name) goes into the audit trail with the values before and after.
    Refused with a one-line SloTargetsError, nothing written, otherwise."""
    who = _who(changed_by)
    try:
        pct = _number(percentile, "percentile")
        if not 0 < pct <= 100:
            raise ValueError(f"percentile must be in (0, 100] (95 for p95), got {pct:g}")
        entry = {
            "objective": objective,
            "route": route,
            "stage": stage,
            "percentile": pct / 100,
            "target_s": _number(target_s, "target (seconds)"),
            "app": (app or "").strip() or None,
            "environment": (environment or "").strip() or None,
            "note": (note or "").strip() or None,
        }
        target = parse_slo_target(entry, datetime(2000, 1, 1, tzinfo=UTC))
    except ValueError as exc:
        raise SloTargetsError(f"SLO target {str(objective or '').strip()!r}: {exc}") from None
    if not target.route.startswith("/"):
        raise SloTargetsError(f"SLO target {target.objective!r}: a route starts with '/'")
    pattern = "%" in target.route or "_" in target.route
    if not pattern and not new_route and target.route not in known_routes(storage):
        raise SloTargetsError(
            f"SLO target {target.objective!r}: route {target.route} has no traffic or target "
            "yet; check the name, or confirm it as a new route"
        )
    t = slo_targets
    values = {
        "route": target.route,
        "stage": target.stage,
        "percentile": target.percentile,
        "target_s": target.target_s,
        "app": target.app,
        "environment": target.environment,
        "note": target.note,
        "source": "ui",
    }

    def op(tx: Transaction) -> str:
        latest = _latest_version(tx, target.objective)
        if latest is None:
            row = values | {"effective_from": target.effective_from}
            tx.run(sa.insert(t).values(objective=target.objective, **row))
            _record_slo_change(tx, who, "added", target.objective, None, _slo_values(row))
            return "added"
        target_id, old, _versions = latest
        new = old | {k: v for k, v in values.items() if k != "source"}
        if new == old:
            return "unchanged"
        new["source"] = "ui"
        tx.run(sa.update(t).where(t.c.target_id == target_id).values(**values))
        _record_slo_change(tx, who, "changed", target.objective, old, new)
        return "changed"

    return storage.write(op)


def remove_slo_target(storage: Storage, objective: str, *, changed_by: str) -> int:
    """Remove an objective (every version of it); returns the versions removed. The audit trail
    gets one 'removed' row with the latest version's values and how many versions went. An
    unknown name is refused, nothing written."""
    who = _who(changed_by)
    name = str(objective or "").strip()
    t = slo_targets

    def op(tx: Transaction) -> int:
        latest = _latest_version(tx, name)
        if latest is None:
            raise SloTargetsError(f"no SLO target named {name!r}")
        _target_id, old, count = latest
        tx.run(sa.delete(t).where(t.c.objective == name))
        _record_slo_change(tx, who, "removed", name, old | {"versions": count}, None)
        return count

    return storage.write(op)


def restore_bundled_slo_targets(
    storage: Storage, *, changed_by: str, path: str | Path | None = None
) -> int:
    """Put back the seed file's objectives (models/data/slo_targets.yaml unless ``path``) that
    the table lacks, every version of each, with source 'config'; returns the versions added
    (0 when every objective of the file is there). Objectives present are left as they are.
    Each version gets a 'seeded' audit row under ``changed_by``. The file is validated first."""
    who = _who(changed_by)
    targets = load_slo_targets(bundled_slo_targets_file() if path is None else path)
    t = slo_targets

    def op(tx: Transaction) -> int:
        present = {r[0] for r in tx.run(sa.select(t.c.objective).distinct()).fetchall()}
        missing = [x for x in targets if x.objective not in present]
        for x in missing:
            row = {
                "route": x.route, "app": x.app, "environment": x.environment, "stage": x.stage,
                "percentile": x.percentile, "target_s": x.target_s,
                "effective_from": x.effective_from, "note": x.note, "source": "config",
            }  # fmt: skip
            tx.run(sa.insert(t).values(objective=x.objective, **row))
            _record_slo_change(tx, who, "seeded", x.objective, None, _slo_values(row))
        return len(missing)

    return storage.write(op)


def slo_changes_page(storage: Storage, offset: int = 0, limit: int = 20) -> SloChangePage:
    """One page of the SLO targets' audit trail, newest change first, and the total number of
    changes (the admin page pages through it on the server). An offset past the end gives the
    last page."""
    c = slo_target_changes.c
    columns = (
        c.change_id, c.changed_at, c.changed_by, c.action, c.objective, c.old_values,
        c.new_values,
    )  # fmt: skip
    rows, start, total = audit_page(
        storage, slo_target_changes, columns, offset, limit, SloTargetsError
    )
    changes = [
        SloTargetChange(
            int(change_id), changed_at, changed_by, action, objective,
            None if old is None else json.loads(old),
            None if new is None else json.loads(new),
        )
        for change_id, changed_at, changed_by, action, objective, old, new in rows
    ]  # fmt: skip
    return SloChangePage(changes, start, limit, total)


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or value is None or value == "":
        raise ValueError(f"{field} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field} must be a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"{field} must be a finite number, got {value!r}")
    return number
