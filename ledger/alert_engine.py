"""The alert evaluator (issue #12): every tick, each rule's observations go through the
lifecycle (models.alert_lifecycle) and what changed is written in one transaction: the alert
rows, the open-alert index, the history events, the notifications to send (the outbox,
ledger/outbox.py) and the rule's cursor. Restart-safe by construction: the state and the
outbox live in the database and are written together, so a crash either loses the whole tick
(it is evaluated again) or none of it.

Rules: every enabled, non-archived stored rule (key ``rule:<id>``), plus two implicit rules per
non-archived budget (:func:`budget_rules`): ``budget:<id>:threshold`` and, when the budget asks
for it, ``budget:<id>:forecast``. docs/alerts.md describes both.

Catch-up: on its first evaluation the engine evaluates, for each rule whose cursor is more than
one interval old, the instants it missed (one per interval from max(cursor, now −
catch_up_s), at most :data:`MAX_CATCH_UP` of them, evenly spaced), oldest first, then now; an
alert that fired and resolved while the server was down is still notified, fired then
resolved. Reads for the UI live in ledger/alert_history.py.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from inferledger.core.errors import one_line
from inferledger.core.storage import Storage, Transaction
from inferledger.core.times import as_utc
from ledger.alert_rules import list_rules
from ledger.alert_signals import signal_observations
from ledger.alert_transitions import Applied, EngineRule, apply_tick
from ledger.budget_status import budget_observations
from ledger.budgets import list_budgets
from ledger.schema import alert_cursor, alert_events, alert_open, alerts, silences
from models.alert_config import (
    BUDGET_KINDS,
    AlertRule,
    Budget,
    parse_scope_key,
    scope_contains,
)
from models.alert_lifecycle import Observation

log = logging.getLogger(__name__)

#: At most this many missed instants are evaluated per rule after a restart.
MAX_CATCH_UP = 60
#: Implicit budget rules: a firing threshold alert is repeated weekly; the forecast alert
#: must hold an hour first, so a morning's noise in the forecast does not page anyone.
BUDGET_REPEAT_S = 7 * 86400
BUDGET_FORECAST_PENDING_S = 3600
#: Resolve hysteresis of the implicit budget rules, in percentage points of the amount.
BUDGET_RESOLVE_MARGIN = 5.0


#: observe(rule, budget, at, cache) -> observations: the engine's seam between "what is the
#: value" and "what to do about it". The default dispatches to the budget and signal readers.
Observe = Callable[[AlertRule, Budget | None, datetime, dict], Iterable[Observation]]


@dataclass
class EvalSummary:
    """What one :meth:`AlertEngine.evaluate` did."""

    at: datetime
    rules: int = 0
    instants: int = 0
    transitions: Counter = field(default_factory=Counter)
    notifications: int = 0
    silenced: int = 0
    seconds: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)
    skipped: bool = False


def default_observe(storage: Storage, base_url: str = "") -> Observe:
    """The observation source of production: budget kinds from ledger.budget_status, the nine
    others from ledger.alert_signals."""

    def observe(
        rule: AlertRule, budget: Budget | None, at: datetime, cache: dict
    ) -> list[Observation]:
        if rule.kind in BUDGET_KINDS:
            if budget is None:
                raise ValueError(f"rule {rule.name!r}: budget {rule.budget_name!r} not found")
            return list(
                budget_observations(storage, rule, budget, at, base_url=base_url, cache=cache)
            )
        return list(signal_observations(storage, rule, at, cache=cache))

    return observe


def budget_rules(budget: Budget) -> list[EngineRule]:
    """The implicit rules of one stored budget (docs/alerts.md, "Budget alerts")."""
    if budget.budget_id is None:
        return []
    lowest = min(budget.thresholds) if budget.thresholds else 100.0
    common: dict[str, Any] = {
        "owner": budget.owner,
        "scope": dict(budget.scope),
        "budget_name": budget.name,
        "window_s": 3600,
        "repeat_s": BUDGET_REPEAT_S,
        "channels": tuple(budget.channels),
        "source": budget.source,
    }
    out = [
        EngineRule(
            key=f"budget:{budget.budget_id}:threshold",
            rule=AlertRule(
                name=f"budget {budget.name}: threshold",
                kind="budget_threshold",
                threshold=lowest,
                resolve_threshold=max(0.0, lowest - BUDGET_RESOLVE_MARGIN),
                pending_s=0,
                resolve_s=0,
                severity="warning",
                **common,
            ),
            budget=budget,
        )
    ]
    if budget.forecast_alert:
        out.append(
            EngineRule(
                key=f"budget:{budget.budget_id}:forecast",
                rule=AlertRule(
                    name=f"budget {budget.name}: forecast",
                    kind="budget_forecast",
                    threshold=100.0,
                    resolve_threshold=100.0 - BUDGET_RESOLVE_MARGIN,
                    pending_s=BUDGET_FORECAST_PENDING_S,
                    resolve_s=BUDGET_FORECAST_PENDING_S,
                    severity="warning",
                    **common,
                ),
                budget=budget,
            )
        )
    return out


def active_rules(storage: Storage) -> list[EngineRule]:
    """Every rule the engine evaluates now: enabled stored rules and the budgets' rules."""
    every_budget = list_budgets(storage, include_archived=True)
    budgets = [b for b in every_budget if b.archived_at is None]
    # A stored budget rule naming an archived budget gets no observation (its alerts close).
    by_name = {b.name: b for b in every_budget}
    out: list[EngineRule] = []
    for rule in list_rules(storage, enabled_only=True):
        if not rule.enabled or rule.archived_at is not None or rule.rule_id is None:
            continue
        out.append(EngineRule(rule.key, rule, by_name.get(rule.budget_name or "")))
    for budget in budgets:
        out.extend(budget_rules(budget))
    return out


class AlertEngine:
    """Evaluates every rule at an instant and writes what changed. ``evaluate`` never runs
    twice at once (a second caller gets a summary with ``skipped=True``)."""

    def __init__(
        self,
        storage: Storage,
        *,
        base_url: str = "",
        observe: Observe | None = None,
        rules: Callable[[], Sequence[EngineRule]] | None = None,
        clock: Callable[[], datetime] | None = None,
        interval_s: float = 60.0,
        catch_up_s: float = 3600.0,
    ) -> None:
        self.storage = storage
        self.base_url = base_url
        self.observe = observe if observe is not None else default_observe(storage, base_url)
        self._rules = rules or (lambda: active_rules(storage))
        self.clock = clock or (lambda: datetime.now(UTC))
        self.interval_s = float(interval_s)
        self.catch_up_s = float(catch_up_s)
        self._caught_up: set[str] = set()
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, at: datetime | None = None) -> EvalSummary:
        """Evaluate every rule at `at` (default: the clock), after the instants it missed."""
        now = as_utc(at or self.clock())
        summary = EvalSummary(at=now)
        if not self._lock.acquire(blocking=False):
            summary.skipped = True
            return summary
        started = time.perf_counter()
        try:
            try:
                rules = list(self._rules())
            except Exception as exc:
                log.exception("alert rules could not be read")
                summary.errors["*"] = one_line(exc)
                return summary
            cursors = self._cursors()
            cache: dict = {}
            silences_at: dict[datetime, list[tuple[str | None, dict[str, Any]]]] = {}
            failed: set[str] = set()
            queued: list[tuple[EngineRule, datetime, Future[Applied]]] = []
            # Values are read here; each rule x instant is then written in its own transaction,
            # all queued at once so the storage's group commit bundles them (one commit for
            # many rules, each still atomic: a failing one is rolled back alone).
            for engine_rule in rules:
                summary.rules += 1
                key = engine_rule.key
                for instant in self._instants(key, cursors.get(key), now):
                    if instant not in silences_at:
                        silences_at[instant] = self._silences(instant)
                    try:
                        observations = list(
                            self.observe(engine_rule.rule, engine_rule.budget, instant, cache)
                        )
                        future = self.storage.submit(
                            self._op(
                                engine_rule, observations, instant, silences_at[instant], failed
                            )
                        )
                    except Exception as exc:
                        # One rule's error never stops the others: logged, counted, retried
                        # at the next tick (its cursor did not move past the failed instant).
                        log.exception("alert rule %s failed at %s", key, instant)
                        summary.errors[key] = one_line(exc)
                        failed.add(key)
                        break
                    queued.append((engine_rule, instant, future))
                self._caught_up.add(key)
            for engine_rule, instant, future in queued:
                try:
                    result = future.result()
                except Exception as exc:
                    if engine_rule.key not in summary.errors:
                        log.error("alert rule %s failed at %s: %s", engine_rule.key, instant, exc)
                        summary.errors[engine_rule.key] = one_line(exc)
                    continue
                if result.applied:
                    summary.instants += 1
                summary.transitions.update(result.events)
                summary.notifications += result.notifications
                summary.silenced += result.silenced
            try:
                closed = close_orphans(self.storage, {r.key for r in rules}, now)
                summary.transitions.update(closed)
            except Exception as exc:
                log.exception("closing the alerts of removed rules failed")
                summary.errors["*"] = one_line(exc)
        finally:
            summary.seconds = time.perf_counter() - started
            self._lock.release()
        return summary

    def _instants(self, key: str, cursor: datetime | None, now: datetime) -> list[datetime]:
        """The instants to evaluate a rule at: now, preceded on the first evaluation after a
        start by those missed since its cursor (see the module docstring)."""
        if cursor is not None and cursor >= now:
            return []
        if key in self._caught_up or cursor is None or self.interval_s <= 0:
            return [now]
        if (now - cursor).total_seconds() <= self.interval_s:
            return [now]
        start = max(cursor, now - timedelta(seconds=self.catch_up_s))
        step = timedelta(seconds=self.interval_s)
        missed: list[datetime] = []
        t = start + step
        while t < now:
            missed.append(t)
            t += step
        if len(missed) > MAX_CATCH_UP:
            stride = len(missed) / MAX_CATCH_UP
            missed = [missed[int(i * stride)] for i in range(MAX_CATCH_UP)]
        return [*missed, now]

    def _cursors(self) -> dict[str, datetime]:
        rows = self.storage.select(sa.select(alert_cursor.c.rule_key, alert_cursor.c.evaluated_at))
        return {key: as_utc(at) for key, at in rows}

    def _op(
        self,
        engine_rule: EngineRule,
        observations: list[Observation],
        at: datetime,
        active: list[tuple[str | None, dict[str, Any]]],
        failed: set[str],
    ) -> Callable[[Transaction], Applied]:
        """The write of one rule at one instant. Once an instant of a rule failed, its later
        instants are not applied (they are evaluated again at the next tick)."""
        rule, key = engine_rule.rule, engine_rule.key

        def silenced(scope_key: str) -> bool:
            labels = {**rule.scope, **parse_scope_key(scope_key)}
            return any(
                (rk is None or rk == key) and scope_contains(scope, labels) for rk, scope in active
            )

        def op(tx: Transaction) -> Applied:
            if key in failed:
                return Applied()
            try:
                return apply_tick(tx, engine_rule, observations, at, silenced, self.base_url)
            except Exception:
                failed.add(key)
                raise

        return op

    def _silences(self, at: datetime) -> list[tuple[str | None, dict[str, Any]]]:
        rows = self.storage.select(
            sa.select(silences.c.rule_key, silences.c.scope)
            .where(silences.c.starts_at <= at)
            .where(silences.c.ends_at > at)
            .where(sa.or_(silences.c.ended_at.is_(None), silences.c.ended_at > at))
        )
        return [(rk, json.loads(scope or "{}")) for rk, scope in rows]


def close_orphans(storage: Storage, active: set[str], at: datetime) -> Counter:
    """Close the open alerts of rules no longer evaluated (archived, disabled, deleted, or a
    budget archived): firing ones resolve, pending ones cancel, with the reason in the history
    and no notification (nobody is told a rule they removed has stopped). Returns the events."""
    keys = {k for (k,) in storage.select(sa.select(alert_open.c.rule_key).distinct())}
    if not keys - active:
        return Counter()

    def op(tx: Transaction) -> Counter:
        done: Counter = Counter()
        rows = tx.run(
            sa.select(
                alert_open.c.rule_key, alert_open.c.scope_key, alerts.c.alert_id, alerts.c.state
            ).select_from(alert_open.join(alerts, alerts.c.alert_id == alert_open.c.alert_id))
        ).fetchall()
        for rule_key, scope_key, alert_id, state in rows:
            if rule_key in active:
                continue
            event = "resolved" if state == "firing" else "cancelled"
            tx.run(
                sa.update(alerts)
                .where(alerts.c.alert_id == alert_id)
                .values(
                    state=event,
                    resolved_at=at if event == "resolved" else None,
                    last_evaluated_at=at,
                )
            )
            tx.run(
                sa.insert(alert_events).values(
                    alert_id=alert_id,
                    event_at=at,
                    event=event,
                    detail=json.dumps({"reason": "the rule is archived, disabled or removed"}),
                )
            )
            tx.run(
                sa.delete(alert_open)
                .where(alert_open.c.rule_key == rule_key)
                .where(alert_open.c.scope_key == scope_key)
            )
            done[event] += 1
        return done

    return storage.write(op)
