"""Saved capacity plans (issue #13): save a plan's result, list, reopen, decide, archive.

A plan is saved whole: the result mapping that models/capacity/plan.py's ``run_plan`` returned
(its fully resolved inputs, the planner and model versions, every pool's ranked candidates,
the forecast), as JSON text, so reopening a plan shows exactly what was run, even after the
planner or its calibration changed. Beside it: a small summary for the list (totals and each
pool's recommendation), and the decision record's fields: a named owner, a decision (advance,
revise or stop), its note, who decided and when. Plans are archived, never deleted.

Every change is written with a ``capacity_plan_changes`` row (who, what, when) in the same
transaction. Numbers must be finite: JSON has no NaN or infinity, and a plan holding one
could not be reopened by the page or the CLI's ``--json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from inferledger.core.errors import BadInputError
from ledger.schema import capacity_plan_changes, capacity_plans

if TYPE_CHECKING:
    from inferledger.core.storage import Storage, Transaction

#: the decision record's choices
DECISIONS = ("advance", "revise", "stop")
#: keys a result mapping must hold to be saved (common to every planner version so far)
REQUIRED_KEYS = ("planner_version", "model_version", "name", "inputs", "pools", "totals")
MAX_NAME = 200
MAX_NOTE = 4000


class PlanStoreError(BadInputError):
    """A plan that cannot be saved or changed; nothing was written."""


class UnknownPlanError(PlanStoreError):
    """No saved plan has that id."""

    http_status = 404


@dataclass(frozen=True)
class PoolChoice:
    """A pool's recommendation as the list shows it (label None: nothing meets the SLOs)."""

    pool: str
    label: str | None
    replicas: int | None
    gpus: int | None
    monthly_cost: float | None
    verified: bool


@dataclass(frozen=True)
class PlanSummary:
    """One saved plan in the list."""

    plan_id: int
    name: str
    created_by: str
    created_at: datetime
    planner_version: str
    model_version: str
    monthly_cost: float
    gpus: int
    best: tuple[PoolChoice, ...]
    owner: str | None
    decision: str | None
    decision_note: str | None
    decided_by: str | None
    decided_at: datetime | None
    archived_at: datetime | None


@dataclass(frozen=True)
class PlanChange:
    change_id: int
    changed_at: datetime
    changed_by: str
    plan_id: int
    action: str
    detail: dict[str, Any] | None


# ---------------------------------------------------------------------------- checks


def first_non_finite(value: Any, path: str) -> str | None:
    """The path of the first NaN or infinite number in a JSON-like value, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = first_non_finite(v, f"{path}.{k}")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = first_non_finite(v, f"{path}[{i}]")
            if found:
                return found
    return None


def _text(value: Any, field: str, *, limit: int = MAX_NAME, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise PlanStoreError(f"{field}: needs a non-empty text")
    if len(value) > limit:
        raise PlanStoreError(f"{field}: at most {limit} characters, got {len(value)}")
    return value.strip()


def _dumps(value: Any, where: str) -> str:
    bad = first_non_finite(value, where)
    if bad:
        raise PlanStoreError(f"{bad}: not a finite number (JSON has no NaN or infinity)")
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PlanStoreError(f"{where}: cannot be saved as JSON ({exc})") from None


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanStoreError(f"{field}: needs a number, got {value!r}")
    return float(value)


def checked_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """The result mapping as saved, after checking it holds what a saved plan needs."""
    if not isinstance(result, Mapping):
        raise PlanStoreError("plan: needs a result mapping (what run_plan returns)")
    missing = [k for k in REQUIRED_KEYS if k not in result]
    if missing:
        raise PlanStoreError(f"plan: missing {', '.join(missing)} (not a run_plan result?)")
    for key in ("planner_version", "model_version"):
        _text(result[key], f"plan.{key}")
    if not isinstance(result["inputs"], Mapping):
        raise PlanStoreError("plan.inputs: needs a mapping")
    if not isinstance(result["pools"], list):
        raise PlanStoreError("plan.pools: needs a list")
    for i, pool in enumerate(result["pools"]):
        where = f"plan.pools[{i}]"
        if not isinstance(pool, Mapping) or not isinstance(pool.get("name"), str):
            raise PlanStoreError(f"{where}: needs a mapping with a name")
        candidates = pool.get("candidates")
        if not isinstance(candidates, list):
            raise PlanStoreError(f"{where}.candidates: needs a list")
        best = pool.get("best")
        if best is not None and (
            isinstance(best, bool) or not isinstance(best, int) or not 0 <= best < len(candidates)
        ):
            raise PlanStoreError(f"{where}.best: {best!r} is not an index into its candidates")
    totals = result["totals"]
    if not isinstance(totals, Mapping):
        raise PlanStoreError("plan.totals: needs a mapping")
    _number(totals.get("monthly_cost"), "plan.totals.monthly_cost")
    _number(totals.get("gpus"), "plan.totals.gpus")
    return dict(result)


def plan_summary_mapping(result: Mapping[str, Any]) -> dict[str, Any]:
    """What the list shows of a plan: its totals and each pool's recommendation."""
    best = []
    for pool in result["pools"]:
        i = pool.get("best")
        c = pool["candidates"][i] if i is not None else None
        best.append(
            {
                "pool": pool["name"],
                "label": c.get("label") if c else None,
                "replicas": c.get("replicas") if c else None,
                "gpus": c.get("gpus") if c else None,
                "monthly_cost": c.get("monthly_cost") if c else None,
                "verified": bool(c.get("verified")) if c else False,
            }
        )
    totals = result["totals"]
    return {
        "monthly_cost": float(totals["monthly_cost"]),
        "gpus": int(totals["gpus"]),
        "best": best,
    }


# ---------------------------------------------------------------------------- writes


def _change(
    tx: Transaction, plan_id: int, action: str, by: str, detail: Mapping[str, Any] | None
) -> None:
    tx.run(
        sa.insert(capacity_plan_changes).values(
            changed_by=by,
            plan_id=plan_id,
            action=action,
            detail=None if detail is None else _dumps(dict(detail), "detail"),
        )
    )


def save_plan(
    storage: Storage, result: Mapping[str, Any], *, created_by: str, name: str | None = None
) -> int:
    """Save a plan's result mapping whole; returns its plan_id. `name` replaces the result's
    own name (in the saved result too). PlanStoreError (nothing written) when the mapping
    lacks what a saved plan needs or holds a number JSON cannot carry."""
    by = _text(created_by, "created_by")
    saved = checked_result(result)
    if name is not None:
        saved["name"] = name
    plan_name = _text(saved["name"], "plan.name")
    saved["name"] = plan_name
    result_json = _dumps(saved, "plan")
    values = {
        "name": plan_name,
        "created_by": by,
        "planner_version": str(saved["planner_version"]),
        "model_version": str(saved["model_version"]),
        "inputs": _dumps(saved["inputs"], "plan.inputs"),
        "result": result_json,
        "summary": _dumps(plan_summary_mapping(saved), "plan.summary"),
    }

    def write(tx: Transaction) -> int:
        t = capacity_plans
        row = tx.run(sa.insert(t).values(**values).returning(t.c.plan_id)).fetchone()
        assert row is not None  # RETURNING gives the inserted row
        plan_id = int(row[0])
        _change(tx, plan_id, "saved", by, {"name": plan_name})
        return plan_id

    return storage.write(write)


def _plan_id(plan_id: Any) -> int:
    if isinstance(plan_id, bool) or not isinstance(plan_id, int) or plan_id < 1:
        raise UnknownPlanError(f"plan_id: {plan_id!r} is not a saved plan's id")
    return plan_id


def _tx_state(tx: Transaction, plan_id: int) -> tuple[str | None, datetime | None]:
    """(owner, archived_at) of the plan, UnknownPlanError when there is none."""
    t = capacity_plans.c
    row = tx.run(sa.select(t.owner, t.archived_at).where(t.plan_id == plan_id)).fetchone()
    if row is None:
        raise UnknownPlanError(f"no saved plan with id {plan_id}")
    return row[0], row[1]


def set_decision(
    storage: Storage,
    plan_id: int,
    decision: str | None,
    note: str | None = None,
    *,
    by: str,
    owner: str | None = None,
) -> PlanSummary:
    """Record the decision record's fields: `decision` (advance / revise / stop; None clears
    it), its note, and the plan's owner when given (kept otherwise). A decision needs a named
    owner: the plan's, or `owner`. An archived plan is not decided on (restore it first)."""
    pid = _plan_id(plan_id)
    who = _text(by, "by")
    if decision is not None and decision not in DECISIONS:
        raise PlanStoreError(f"decision: one of {', '.join(DECISIONS)}, got {decision!r}")
    new_owner = _text(owner, "owner", required=False)
    clean_note = None if note is None or not note.strip() else note.strip()
    if clean_note is not None and len(clean_note) > MAX_NOTE:
        raise PlanStoreError(f"note: at most {MAX_NOTE} characters, got {len(clean_note)}")

    def write(tx: Transaction) -> None:
        old_owner, archived_at = _tx_state(tx, pid)
        if archived_at is not None:
            raise PlanStoreError(f"plan {pid} is archived; restore it before deciding")
        final_owner = new_owner or old_owner
        if decision is not None and not final_owner:
            raise PlanStoreError(f"plan {pid} has no owner: name one (owner) with the decision")
        decided = decision is not None
        tx.run(
            sa.update(capacity_plans)
            .where(capacity_plans.c.plan_id == pid)
            .values(
                owner=final_owner,
                decision=decision,
                decision_note=clean_note,
                decided_by=who if decided else None,
                decided_at=sa.func.now() if decided else None,
            )
        )
        _change(
            tx,
            pid,
            "decided",
            who,
            {"decision": decision, "note": clean_note, "owner": final_owner},
        )

    storage.write(write)
    return _summary_of(storage, pid)


def _set_archived(storage: Storage, plan_id: int, *, by: str, archive: bool) -> PlanSummary:
    pid = _plan_id(plan_id)
    who = _text(by, "by")

    def write(tx: Transaction) -> None:
        _, archived_at = _tx_state(tx, pid)
        if archive and archived_at is not None:
            raise PlanStoreError(f"plan {pid} is already archived")
        if not archive and archived_at is None:
            raise PlanStoreError(f"plan {pid} is not archived")
        tx.run(
            sa.update(capacity_plans)
            .where(capacity_plans.c.plan_id == pid)
            .values(archived_at=sa.func.now() if archive else None)
        )
        _change(tx, pid, "archived" if archive else "restored", who, None)

    storage.write(write)
    return _summary_of(storage, pid)


def archive_plan(storage: Storage, plan_id: int, *, by: str) -> PlanSummary:
    """Archive a plan: it leaves the list (include_archived shows it) and keeps its row."""
    return _set_archived(storage, plan_id, by=by, archive=True)


def restore_plan(storage: Storage, plan_id: int, *, by: str) -> PlanSummary:
    """Bring an archived plan back to the list."""
    return _set_archived(storage, plan_id, by=by, archive=False)


# ---------------------------------------------------------------------------- reads

_SUMMARY_COLUMNS = (
    "plan_id",
    "name",
    "created_by",
    "created_at",
    "planner_version",
    "model_version",
    "summary",
    "owner",
    "decision",
    "decision_note",
    "decided_by",
    "decided_at",
    "archived_at",
)


def _summary(row: Sequence[Any]) -> PlanSummary:
    r = dict(zip(_SUMMARY_COLUMNS, row, strict=True))
    s = json.loads(r.pop("summary") or "{}")
    best = tuple(
        PoolChoice(
            pool=b["pool"],
            label=b.get("label"),
            replicas=b.get("replicas"),
            gpus=b.get("gpus"),
            monthly_cost=b.get("monthly_cost"),
            verified=bool(b.get("verified")),
        )
        for b in s.get("best", [])
    )
    return PlanSummary(
        **r,
        monthly_cost=float(s.get("monthly_cost", 0.0)),
        gpus=int(s.get("gpus", 0)),
        best=best,
    )


def _summary_select() -> sa.Select[Any]:
    return sa.select(*(capacity_plans.c[c] for c in _SUMMARY_COLUMNS))


def _summary_of(storage: Storage, plan_id: int) -> PlanSummary:
    rows = storage.select(_summary_select().where(capacity_plans.c.plan_id == plan_id))
    if not rows:
        raise UnknownPlanError(f"no saved plan with id {plan_id}")
    return _summary(rows[0])


def list_plans(storage: Storage, include_archived: bool = False) -> list[PlanSummary]:
    """The saved plans, newest first; archived ones only when asked."""
    stmt = _summary_select().order_by(capacity_plans.c.plan_id.desc())
    if not include_archived:
        stmt = stmt.where(capacity_plans.c.archived_at.is_(None))
    return [_summary(r) for r in storage.select(stmt)]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def get_plan(storage: Storage, plan_id: int) -> dict[str, Any]:
    """The saved result mapping, as run_plan returned it, plus the saved plan's fields:
    plan_id, saved_by, saved_at, owner, decision, decision_note, decided_by, decided_at,
    archived_at (times as ISO 8601 text, so the whole mapping stays JSON-safe).
    UnknownPlanError when no plan has that id."""
    pid = _plan_id(plan_id)
    t = capacity_plans.c
    rows = storage.select(
        sa.select(
            t.result,
            t.created_by,
            t.created_at,
            t.owner,
            t.decision,
            t.decision_note,
            t.decided_by,
            t.decided_at,
            t.archived_at,
        ).where(t.plan_id == pid)
    )
    if not rows:
        raise UnknownPlanError(f"no saved plan with id {pid}")
    result, by, at, owner, decision, note, decided_by, decided_at, archived_at = rows[0]
    plan: dict[str, Any] = json.loads(result)
    plan.update(
        plan_id=pid,
        saved_by=by,
        saved_at=_iso(at),
        owner=owner,
        decision=decision,
        decision_note=note,
        decided_by=decided_by,
        decided_at=_iso(decided_at),
        archived_at=_iso(archived_at),
    )
    return plan


def plan_changes(storage: Storage, plan_id: int | None = None) -> list[PlanChange]:
    """The plans' audit trail (or one plan's), newest first."""
    c = capacity_plan_changes.c
    stmt = sa.select(c.change_id, c.changed_at, c.changed_by, c.plan_id, c.action, c.detail)
    if plan_id is not None:
        stmt = stmt.where(c.plan_id == _plan_id(plan_id))
    rows = storage.select(stmt.order_by(c.change_id.desc()))
    return [PlanChange(*r[:5], json.loads(r[5]) if r[5] else None) for r in rows]
