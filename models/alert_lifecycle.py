"""The alert lifecycle (issue #12): one rule's open alerts moved one evaluation tick forward.
Pure: no clock, no I/O; ``ledger/alert_engine.py`` reads the open alerts, calls
:func:`evaluate` and writes what it returns (alert rows, events, outbox rows) in one
transaction. docs/alert-lifecycle.md states the same rules with examples.

One alert per rule × scope (``scope_key``) is open at a time, in state ``pending`` or
``firing``. Per tick, for each scope that has an open alert or an observation:

- **Breach**: ``value >= rule.threshold``. No open alert + breach → a new alert ``pending``
  (no notification), ``pending_since = at``; with ``rule.pending_s == 0`` it goes straight to
  ``firing`` (notify). No open alert and no breach → nothing.
- **pending**: still breaching and ``at - pending_since >= pending_s`` → ``firing`` (notify).
  Below ``threshold`` → ``cancelled`` (no notification; the alert closes). Otherwise
  ``update``.
- **firing, clearing** (hysteresis in value and time): ``value < resolve_threshold`` starts
  ``clear_since`` (event ``update``); once clear has held ``>= rule.resolve_s`` → ``resolved``
  (notify, when the alert was ever notified — a receiver is not told that something it never
  heard of is over). A value back ``>= resolve_threshold`` forgets ``clear_since``. No
  notification other than ``resolved`` is sent while clearing.
- **firing, not clearing**, the first that applies:
  ``notified_severity`` is None (firing was never notified, e.g. it fired while silenced)
  → ``firing`` again (notify); severity above ``notified_severity`` → ``escalated`` (notify);
  ``at - last_notified_at >= rule.repeat_s`` → ``repeat`` (notify); else ``update``. The
  severity is the observation's (when given) else the rule's; order info < warning <
  critical. A falling severity never notifies, and rising back to a severity already
  notified does not either.
- **No observation** for an open alert's scope this tick: the condition is treated as clear
  (value below ``resolve_threshold``): the group vanished from the data (a route stopped
  sending traffic), so its alert cancels or resolves after the usual hysteresis.
- **value None** ("no data"): the alert is held exactly as it is — no transition at all, not
  even ``update``. A scrape outage or a late ledger refresh is not evidence that the problem
  is over (a KV-pressure alert must not resolve because vLLM's /metrics stopped answering),
  nor that it started; the ``coverage_gap`` kind reports the outage itself.
- **Silenced** (``silenced(scope_key)`` is True): the same transitions happen, each with
  ``notify=False``, and those that would have notified with ``silenced=True`` (the engine
  records a ``silenced`` event); the notification bookkeeping
  (``last_notified_at``, ``notified_severity``, ``notifications``) is left untouched, so what
  was due stays due: when the silence ends while the alert still fires, the next tick
  notifies once (``firing`` if it was never notified, ``escalated`` if it rose meanwhile, or
  ``repeat`` if the repeat interval passed). While silenced, ``repeat`` is never emitted and
  ``escalated`` only when the severity rises above the previous tick's, so a long silence does
  not fill the history with one event per tick.

Flapping: a new alert starts firing only after ``pending_s`` of continuous breach counted from
a tick after the previous alert resolved, and a firing alert resolves only after ``resolve_s``
of continuous clear counted from a tick after it fired. So two alerts of one scope start
firing (and two resolve) always more than ``pending_s + resolve_s`` apart: at most one alert
and one resolve per hysteresis window, whatever the metric does
(tests/test_alert_lifecycle.py, bench/alert_flapping.py). A ``pending`` alert that cancels
notifies nobody; it is still a row in the history.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from models.alert_config import SEVERITIES, AlertRule

#: Open states (an alert in one of them holds its rule × scope's ``alert_open`` row).
OPEN_STATES: tuple[str, ...] = ("pending", "firing")
#: The events :func:`evaluate` emits.
EVENTS: tuple[str, ...] = (
    "pending",
    "firing",
    "escalated",
    "repeat",
    "resolved",
    "cancelled",
    "update",
)
#: Events after which the alert is closed (its ``alert_open`` row goes).
CLOSING_EVENTS: frozenset[str] = frozenset({"resolved", "cancelled"})

_RANK = {name: i for i, name in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Observation:
    """One scope's value of a rule's kind at one tick. ``value`` None: no data (hold state).
    ``severity`` None: the rule's severity. ``threshold``, ``summary`` and ``labels`` (the
    group's dimension values) are carried to the alert and its notification."""

    scope_key: str
    value: float | None
    severity: str | None = None
    threshold: float | None = None
    summary: str = ""
    labels: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class OpenAlert:
    """An open (``pending`` or ``firing``) alert, or the closed state it reached this tick
    (``resolved``/``cancelled``) in a :class:`Transition`. ``alert_id`` is None until the
    engine stores a new alert. ``notified_severity`` is the highest severity notified so far
    (None: never notified)."""

    alert_id: int | None
    scope_key: str
    state: str
    severity: str
    pending_since: datetime
    fired_at: datetime | None = None
    clear_since: datetime | None = None
    last_notified_at: datetime | None = None
    notified_severity: str | None = None
    value: float | None = None
    peak_value: float | None = None
    notifications: int = 0
    summary: str = ""


@dataclass(frozen=True)
class Transition:
    """What happened to one scope's alert at this tick. ``alert`` is its new state (a new
    object; for ``resolved``/``cancelled`` the closed alert). ``notify``: the engine writes
    one outbox row per channel. ``silenced``: this transition would have notified but its
    scope is silenced (the engine records a ``silenced`` event). ``observation`` is None
    when the scope had none this tick.

    ``event == "firing"`` with ``alert.fired_at`` earlier than the tick is not a new alert
    but the first notification of one that fired while silenced."""

    scope_key: str
    event: str
    alert: OpenAlert
    notify: bool
    observation: Observation | None
    silenced: bool = False


def _never_silenced(_scope_key: str) -> bool:
    return False


def _utc(at: datetime, name: str) -> datetime:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got naive {at.isoformat()}")
    return at.astimezone(UTC)


def _rank(severity: str, where: str) -> int:
    if severity not in _RANK:
        raise ValueError(f"{where}: unknown severity {severity!r} (one of {', '.join(SEVERITIES)})")
    return _RANK[severity]


def _held(since: datetime | None, at: datetime, seconds: float) -> bool:
    return since is not None and (at - since) >= timedelta(seconds=seconds)


def _check_rule(rule: AlertRule) -> None:
    if not (math.isfinite(rule.threshold) and math.isfinite(rule.resolve_threshold)):
        raise ValueError(f"rule {rule.name!r}: threshold and resolve_threshold must be finite")
    if rule.resolve_threshold > rule.threshold:
        raise ValueError(
            f"rule {rule.name!r}: resolve_threshold {rule.resolve_threshold} is above "
            f"threshold {rule.threshold} (it must be <= threshold)"
        )
    for name in ("pending_s", "resolve_s"):
        if getattr(rule, name) < 0:
            raise ValueError(f"rule {rule.name!r}: {name} must be >= 0")
    if rule.repeat_s <= 0:
        raise ValueError(f"rule {rule.name!r}: repeat_s must be > 0")
    _rank(rule.severity, f"rule {rule.name!r}")


def _index(observations: Iterable[Observation], rule: AlertRule) -> dict[str, Observation]:
    out: dict[str, Observation] = {}
    for obs in observations:
        if obs.scope_key in out:
            raise ValueError(
                f"rule {rule.name!r}: two observations for scope {obs.scope_key} in one tick"
            )
        if obs.value is not None and math.isnan(obs.value):
            raise ValueError(
                f"rule {rule.name!r}: scope {obs.scope_key} has value NaN (use None for no data)"
            )
        if obs.severity is not None:
            _rank(obs.severity, f"rule {rule.name!r}, scope {obs.scope_key}")
        out[obs.scope_key] = obs
    return out


def _notified(alert: OpenAlert, at: datetime) -> OpenAlert:
    """The alert with one more notification at ``at`` at its current severity."""
    top = alert.severity
    if alert.notified_severity is not None and _RANK[alert.notified_severity] > _RANK[top]:
        top = alert.notified_severity
    return replace(
        alert,
        last_notified_at=at,
        notified_severity=top,
        notifications=alert.notifications + 1,
    )


def _step(
    rule: AlertRule,
    scope: str,
    alert: OpenAlert | None,
    obs: Observation | None,
    at: datetime,
    silenced: bool,
) -> Transition | None:
    if obs is not None and obs.value is None:
        return None  # no data: hold the state exactly as it is (module docstring)
    value = obs.value if obs is not None else None
    severity = (obs.severity if obs is not None else None) or (
        alert.severity if alert is not None and obs is None else rule.severity
    )
    summary = obs.summary if obs is not None and obs.summary else None

    def move(event: str, new: OpenAlert, notify: bool) -> Transition:
        if notify and not silenced:
            return Transition(scope, event, _notified(new, at), True, obs)
        return Transition(scope, event, new, False, obs, silenced=notify and silenced)

    breach = value is not None and value >= rule.threshold
    if alert is None:
        if not breach:
            return None
        new = OpenAlert(
            alert_id=None,
            scope_key=scope,
            state="pending",
            severity=severity,
            pending_since=at,
            value=value,
            peak_value=value,
            summary=summary or "",
        )
        if rule.pending_s == 0:
            return move("firing", replace(new, state="firing", fired_at=at), True)
        return move("pending", new, False)

    if alert.state not in OPEN_STATES:
        raise ValueError(f"alert {alert.alert_id} for scope {scope} is {alert.state}, not open")
    peak = alert.peak_value
    if value is not None:
        peak = value if peak is None else max(peak, value)
    refreshed = replace(
        alert,
        value=value if value is not None else alert.value,
        peak_value=peak,
        severity=severity,
        summary=summary if summary is not None else alert.summary,
    )

    if alert.state == "pending":
        if not breach:
            return move("cancelled", replace(refreshed, state="cancelled"), False)
        if _held(alert.pending_since, at, rule.pending_s):
            return move("firing", replace(refreshed, state="firing", fired_at=at), True)
        return move("update", refreshed, False)

    # firing
    if value is None or value < rule.resolve_threshold:
        clear_since = alert.clear_since or at
        cleared = replace(refreshed, clear_since=clear_since)
        if _held(clear_since, at, rule.resolve_s):
            return move("resolved", replace(cleared, state="resolved"), alert.notifications > 0)
        return move("update", cleared, False)
    refreshed = replace(refreshed, clear_since=None)
    if silenced:
        if _RANK[severity] > _RANK[alert.severity]:
            return move("escalated", refreshed, True)  # suppressed by move()
        return move("update", refreshed, False)
    if alert.notified_severity is None:
        return move("firing", refreshed, True)
    if _RANK[severity] > _RANK[alert.notified_severity]:
        return move("escalated", refreshed, True)
    if alert.last_notified_at is None or _held(alert.last_notified_at, at, rule.repeat_s):
        return move("repeat", refreshed, True)
    return move("update", refreshed, False)


def evaluate(
    rule: AlertRule,
    open_alerts: Mapping[str, OpenAlert],
    observations: Iterable[Observation],
    at: datetime,
    *,
    silenced: Callable[[str], bool] = _never_silenced,
) -> list[Transition]:
    """One tick of ``rule`` at ``at`` (timezone-aware): the transitions of its open alerts
    (by scope key) and of scopes whose observation breaches, ordered by scope key. Scopes
    with nothing to say (no open alert and no breach, or value None) give no transition.
    ``silenced(scope_key)`` True: the same transitions, none notified (it is asked only for
    scopes with an open alert or a breach, once each). Raises ValueError on
    a naive ``at``, a NaN value, two observations of one scope, an unknown severity or a
    rule whose thresholds or durations are out of range."""
    at = _utc(at, "evaluation time")
    _check_rule(rule)
    by_scope = _index(observations, rule)
    for key, alert in open_alerts.items():
        if alert.scope_key != key:
            raise ValueError(
                f"open alert {alert.alert_id} is keyed {key} but is for {alert.scope_key}"
            )
        for name in ("pending_since", "fired_at", "clear_since", "last_notified_at"):
            stamp = getattr(alert, name)
            if stamp is not None:
                _utc(stamp, f"alert {alert.alert_id} {name}")
        _rank(alert.severity, f"alert {alert.alert_id}")
        if alert.notified_severity is not None:
            _rank(alert.notified_severity, f"alert {alert.alert_id} notified_severity")
    out = []
    for key in sorted(set(by_scope) | set(open_alerts)):
        alert, obs = open_alerts.get(key), by_scope.get(key)
        if alert is None and (obs is None or obs.value is None or obs.value < rule.threshold):
            continue  # a quiet scope: nothing to say, and no silence to look up
        transition = _step(rule, key, alert, obs, at, bool(silenced(key)))
        if transition is not None:
            out.append(transition)
    return out


def is_open(alert: OpenAlert) -> bool:
    """True while the alert holds its rule × scope (pending or firing)."""
    return alert.state in OPEN_STATES
