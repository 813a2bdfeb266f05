"""The alert lifecycle (models/alert_lifecycle.py): every transition, pending cancellation,
escalation, repeat, silences, no-data holds, hysteresis in value and time, and the flapping
bound (at most one alert and one resolve per pending_s + resolve_s)."""

from __future__ import annotations

import itertools
import random
from dataclasses import FrozenInstanceError, replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from models.alert_config import AlertRule
from models.alert_lifecycle import (
    EVENTS,
    Observation,
    OpenAlert,
    Transition,
    evaluate,
    is_open,
)

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
S = '{"app":"chat"}'


def rule(**kw) -> AlertRule:
    base = dict(
        name="kv",
        kind="kv_pressure",
        owner="platform",
        window_s=300,
        threshold=80.0,
        resolve_threshold=70.0,
        pending_s=300,
        resolve_s=600,
        repeat_s=3600,
        severity="warning",
    )
    base.update(kw)
    return AlertRule(**base)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


class Runner:
    """Feeds one scope's values tick by tick and keeps the open alerts as the engine would."""

    def __init__(self, r: AlertRule) -> None:
        self.rule = r
        self.open: dict[str, OpenAlert] = {}
        self.log: list[tuple[float, str, bool]] = []

    def tick(
        self,
        minute: float,
        value: float | str | None = "absent",
        *,
        severity: str | None = None,
        silenced: bool = False,
        scope: str = S,
    ) -> list[Transition]:
        obs = [] if value == "absent" else [Observation(scope, value, severity=severity)]
        out = evaluate(self.rule, self.open, obs, at(minute), silenced=lambda _k: silenced)
        for tr in out:
            self.log.append((minute, tr.event, tr.notify))
            if is_open(tr.alert):
                self.open[tr.scope_key] = tr.alert
            else:
                self.open.pop(tr.scope_key)
        return out

    def events(self) -> list[tuple[float, str, bool]]:
        return [e for e in self.log if e[1] != "update"]


def only(transitions: list[Transition]) -> Transition:
    assert len(transitions) == 1, transitions
    return transitions[0]


def test_quiet_scope_gives_nothing_and_breach_opens_pending_without_notifying():
    run = Runner(rule())
    assert run.tick(0, 79.9) == []
    tr = only(run.tick(1, 80.0))
    assert (tr.event, tr.notify, tr.alert.state) == ("pending", False, "pending")
    assert tr.alert.alert_id is None and tr.alert.pending_since == at(1)
    assert tr.alert.value == tr.alert.peak_value == 80.0
    assert tr.observation is not None and tr.observation.value == 80.0


def test_pending_fires_after_pending_s_of_breach_and_notifies_once():
    run = Runner(rule())
    run.tick(0, 85)
    for m in range(1, 5):
        assert only(run.tick(m, 90)).event == "update"
    tr = only(run.tick(5, 88))
    assert (tr.event, tr.notify, tr.alert.state) == ("firing", True, "firing")
    assert tr.alert.fired_at == at(5) and tr.alert.pending_since == at(0)
    assert tr.alert.notifications == 1 and tr.alert.notified_severity == "warning"
    assert tr.alert.last_notified_at == at(5) and tr.alert.peak_value == 90
    assert only(run.tick(6, 86)).event == "update"


def test_pending_s_zero_fires_at_once():
    run = Runner(rule(pending_s=0))
    tr = only(run.tick(0, 81))
    assert (tr.event, tr.notify, tr.alert.state) == ("firing", True, "firing")
    assert tr.alert.pending_since == tr.alert.fired_at == at(0)


def test_pending_cancels_when_value_drops_below_threshold_not_resolve_threshold():
    run = Runner(rule())
    run.tick(0, 85)
    tr = only(run.tick(2, 79))  # above resolve_threshold 70, but below threshold 80
    assert (tr.event, tr.notify, tr.alert.state) == ("cancelled", False, "cancelled")
    assert run.open == {}
    assert only(run.tick(3, 81)).event == "pending"  # a new alert starts over
    assert run.open[S].pending_since == at(3)


def test_pending_without_observation_cancels():
    run = Runner(rule())
    run.tick(0, 85)
    assert only(run.tick(1)).event == "cancelled"


def test_firing_resolves_after_resolve_s_below_resolve_threshold():
    run = Runner(rule(pending_s=0))
    run.tick(0, 90)
    tr = only(run.tick(1, 69))
    assert (tr.event, tr.notify) == ("update", False)
    assert tr.alert.state == "firing" and tr.alert.clear_since == at(1)
    for m in range(2, 11):
        assert only(run.tick(m, 60)).event == "update"
    tr = only(run.tick(11, 60))
    assert (tr.event, tr.notify, tr.alert.state) == ("resolved", True, "resolved")
    assert tr.alert.notifications == 2 and run.open == {}


def test_value_hysteresis_between_resolve_threshold_and_threshold_keeps_firing():
    run = Runner(rule(pending_s=0, resolve_s=0))
    run.tick(0, 90)
    for m in range(1, 30):
        assert only(run.tick(m, 75)).event == "update"  # below 80, not below 70
    assert only(run.tick(30, 69.9)).event == "resolved"  # resolve_s 0: at once


def test_time_hysteresis_value_back_above_resolve_threshold_forgets_clear_since():
    run = Runner(rule(pending_s=0))
    run.tick(0, 90)
    run.tick(1, 60)
    run.tick(9, 60)
    tr = only(run.tick(10, 70))  # back at resolve_threshold: not clear
    assert tr.event == "update" and tr.alert.clear_since is None
    run.tick(11, 60)
    assert run.open[S].clear_since == at(11)
    assert only(run.tick(20, 60)).event == "update"  # 9 min clear < 10
    assert only(run.tick(21, 60)).event == "resolved"


def test_firing_without_observation_counts_as_clear():
    run = Runner(rule(pending_s=0, resolve_s=120))
    run.tick(0, 90)
    assert only(run.tick(1)).alert.clear_since == at(1)
    assert only(run.tick(2)).event == "update"
    tr = only(run.tick(3))
    assert tr.event == "resolved" and tr.notify and tr.observation is None
    assert tr.alert.value == 90  # the last value seen stays


def test_no_data_holds_state_exactly_without_any_transition():
    run = Runner(rule(pending_s=0, resolve_s=60))
    run.tick(0, 90)
    before = run.open[S]
    for m in range(1, 120):
        assert run.tick(m, None) == []  # an outage of two hours resolves nothing
    assert run.open[S] is before
    run.tick(120, 60)
    assert only(run.tick(121, 60)).event == "resolved"
    # no data never opens an alert, and holds a pending one
    run2 = Runner(rule())
    assert run2.tick(0, None) == []
    run2.tick(1, 85)
    assert run2.tick(2, None) == [] and run2.open[S].state == "pending"
    # a hold does not reset the pending clock: the breach resumes and fires on time
    assert only(run2.tick(6, 85)).event == "firing"


def test_escalation_notifies_once_and_falling_severity_never_does():
    run = Runner(rule(pending_s=0))
    run.tick(0, 90, severity="warning")
    tr = only(run.tick(1, 95, severity="critical"))
    assert (tr.event, tr.notify, tr.alert.severity) == ("escalated", True, "critical")
    assert tr.alert.notified_severity == "critical" and tr.alert.notifications == 2
    assert only(run.tick(2, 95, severity="critical")).event == "update"
    tr = only(run.tick(3, 85, severity="warning"))
    assert (tr.event, tr.notify, tr.alert.severity) == ("update", False, "warning")
    assert tr.alert.notified_severity == "critical"
    # rising back to a severity already notified is not news
    assert only(run.tick(4, 95, severity="critical")).event == "update"


def test_severity_defaults_to_rule_and_info_to_warning_escalates():
    run = Runner(rule(pending_s=0, severity="info"))
    assert only(run.tick(0, 90)).alert.severity == "info"
    assert only(run.tick(1, 90, severity="warning")).event == "escalated"


def test_repeat_after_repeat_s_only():
    run = Runner(rule(pending_s=0, repeat_s=3600))
    run.tick(0, 90)
    for m in range(1, 60):
        assert only(run.tick(m, 90)).event == "update"
    tr = only(run.tick(60, 90))
    assert (tr.event, tr.notify) == ("repeat", True)
    assert tr.alert.last_notified_at == at(60) and tr.alert.notifications == 2
    assert only(run.tick(61, 90)).event == "update"
    assert only(run.tick(120, 90)).event == "repeat"


def test_no_repeat_or_escalation_while_clearing():
    run = Runner(rule(pending_s=0, repeat_s=60, resolve_s=600))
    run.tick(0, 90)
    tr = only(run.tick(2, 50, severity="critical"))
    assert (tr.event, tr.notify) == ("update", False)


def test_silenced_transitions_happen_without_notifying_and_fire_once_when_silence_ends():
    run = Runner(rule(pending_s=0))
    tr = only(run.tick(0, 90, silenced=True))
    assert (tr.event, tr.notify, tr.alert.state) == ("firing", False, "firing")
    assert tr.silenced  # the engine records that a notification was held back
    assert tr.alert.notified_severity is None and tr.alert.notifications == 0
    for m in range(1, 180):  # no repeat event while silenced, even past repeat_s
        tr = only(run.tick(m, 90, silenced=True))
        assert (tr.event, tr.silenced) == ("update", False)
    tr = only(run.tick(180, 90))  # the silence ended, still firing: notify once
    assert (tr.event, tr.notify, tr.silenced) == ("firing", True, False)
    assert tr.alert.fired_at == at(0) and tr.alert.notifications == 1
    assert only(run.tick(181, 90)).event == "update"


def test_silenced_escalation_is_recorded_once_and_notified_when_silence_ends():
    run = Runner(rule(pending_s=0))
    run.tick(0, 90)
    tr = only(run.tick(1, 99, severity="critical", silenced=True))
    assert (tr.event, tr.notify, tr.silenced) == ("escalated", False, True)
    assert tr.alert.notified_severity == "warning"
    assert only(run.tick(2, 99, severity="critical", silenced=True)).event == "update"
    tr = only(run.tick(3, 99, severity="critical"))
    assert (tr.event, tr.notify, tr.alert.notified_severity) == ("escalated", True, "critical")


def test_silenced_repeat_comes_due_when_silence_ends():
    run = Runner(rule(pending_s=0, repeat_s=3600))
    run.tick(0, 90)
    run.tick(30, 90, silenced=True)
    assert only(run.tick(90, 90, silenced=True)).event == "update"
    assert only(run.tick(91, 90)).event == "repeat"


def test_silenced_resolve_is_not_notified_and_never_notified_alert_resolves_silently():
    run = Runner(rule(pending_s=0, resolve_s=0))
    run.tick(0, 90)
    tr = only(run.tick(1, 10, silenced=True))
    assert (tr.event, tr.notify, tr.silenced) == ("resolved", False, True)
    run2 = Runner(rule(pending_s=0, resolve_s=0))
    run2.tick(0, 90, silenced=True)
    tr = only(run2.tick(1, 10))  # silence over, but nobody ever heard of this alert
    assert (tr.event, tr.notify, tr.silenced) == ("resolved", False, False)
    run3 = Runner(rule(resolve_s=0))  # a silenced pending or cancel holds nothing back
    assert not only(run3.tick(0, 90, silenced=True)).silenced
    assert not only(run3.tick(1, 10, silenced=True)).silenced


def test_silence_is_per_scope():
    r = rule(pending_s=0)
    a, b = '{"app":"a"}', '{"app":"b"}'
    out = evaluate(r, {}, [Observation(b, 90), Observation(a, 90)], T0, silenced=lambda k: k == a)
    assert [(t.scope_key, t.event, t.notify) for t in out] == [
        (a, "firing", False),
        (b, "firing", True),
    ]


def test_silence_is_looked_up_only_for_scopes_with_something_to_say():
    asked = []

    def silenced(key: str) -> bool:
        asked.append(key)
        return False

    quiet = [Observation(f'{{"app":"q{i}"}}', 1.0) for i in range(50)]
    evaluate(
        rule(), {}, [*quiet, Observation(S, 90), Observation("{}", None)], T0, silenced=silenced
    )
    assert asked == [S]


def test_several_scopes_one_alert_each_and_values_summary_refresh():
    r = rule(pending_s=0)
    out = evaluate(r, {}, [Observation(S, 90, summary="90 % KV")], T0)
    alert = out[0].alert
    assert alert.summary == "90 % KV"
    out = evaluate(r, {S: replace(alert, alert_id=7)}, [Observation(S, 95, summary="")], at(1))
    tr = only(out)
    assert tr.alert.alert_id == 7 and tr.alert.value == 95 and tr.alert.peak_value == 95
    assert tr.alert.summary == "90 % KV"  # an empty summary keeps the last one
    tr = only(evaluate(r, {S: tr.alert}, [Observation(S, 85, summary="85 %")], at(2)))
    assert tr.alert.peak_value == 95 and tr.alert.value == 85 and tr.alert.summary == "85 %"


def test_returned_alerts_are_new_frozen_objects_and_inputs_untouched():
    r = rule(pending_s=0)
    first = only(evaluate(r, {}, [Observation(S, 90)], T0)).alert
    snapshot = replace(first)
    second = only(evaluate(r, {S: first}, [Observation(S, 91)], at(1))).alert
    assert second is not first and first == snapshot
    with pytest.raises(FrozenInstanceError):
        second.value = 1.0  # type: ignore[misc]


def test_deterministic_and_ordered_by_scope_key():
    r = rule(pending_s=0)
    obs = [Observation(f'{{"app":"{c}"}}', 90) for c in "dbca"]
    one = evaluate(r, {}, obs, T0)
    two = evaluate(r, {}, list(reversed(obs)), T0)
    assert one == two
    assert [t.scope_key for t in one] == sorted(o.scope_key for o in obs)


def test_other_time_zones_are_normalised_and_naive_times_rejected():
    r = rule(pending_s=0)
    cet = timezone(timedelta(hours=1))
    tr = only(evaluate(r, {}, [Observation(S, 90)], T0.astimezone(cet)))
    assert tr.alert.fired_at == T0 and tr.alert.fired_at.tzinfo == UTC
    with pytest.raises(ValueError, match="timezone-aware"):
        evaluate(r, {}, [Observation(S, 90)], datetime(2026, 3, 2, 12))
    naive = replace(tr.alert, pending_since=datetime(2026, 3, 2, 12))
    with pytest.raises(ValueError, match="pending_since"):
        evaluate(r, {S: naive}, [], at(1))


@pytest.mark.parametrize(
    ("observations", "message"),
    [
        ([Observation(S, float("nan"))], "NaN"),
        ([Observation(S, 1.0), Observation(S, 2.0)], "two observations"),
        ([Observation(S, 90.0, severity="fatal")], "unknown severity"),
    ],
)
def test_bad_observations_are_rejected_with_a_clear_message(observations, message):
    with pytest.raises(ValueError, match=message):
        evaluate(rule(), {}, observations, T0)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"resolve_threshold": 90.0}, "above threshold"),
        ({"threshold": float("inf")}, "finite"),
        ({"pending_s": -1}, "pending_s"),
        ({"repeat_s": 0}, "repeat_s"),
        ({"severity": "page"}, "unknown severity"),
    ],
)
def test_bad_rules_are_rejected(kw, message):
    with pytest.raises(ValueError, match=message):
        evaluate(rule(**kw), {}, [], T0)


def test_an_open_alert_keyed_under_another_scope_or_closed_is_rejected():
    alert = OpenAlert(None, S, "firing", "warning", T0, fired_at=T0)
    with pytest.raises(ValueError, match="keyed"):
        evaluate(rule(), {"{}": alert}, [], at(1))
    with pytest.raises(ValueError, match="not open"):
        evaluate(rule(), {S: replace(alert, state="resolved")}, [], at(1))
    with pytest.raises(ValueError, match="notified_severity: unknown severity"):
        evaluate(rule(), {S: replace(alert, notified_severity="loud")}, [], at(1))


def test_infinite_value_breaches():
    tr = only(evaluate(rule(pending_s=0), {}, [Observation(S, float("inf"))], T0))
    assert tr.event == "firing"


def test_events_are_the_documented_ones():
    run = Runner(rule(pending_s=60, resolve_s=60, repeat_s=120))
    values = [90, 90, 99, 99, 99, 99, 50, 50, 50, 85, 10]
    severities = [None, None, "critical", None, None, None, None, None, None, None, None]
    for m, (v, sev) in enumerate(zip(values, severities, strict=True)):
        run.tick(m, v, severity=sev)
    assert run.events() == [
        (0, "pending", False),
        (1, "firing", True),
        (2, "escalated", True),
        (4, "repeat", True),  # 3: severity fell back to the rule's, no news
        (7, "resolved", True),
        (9, "pending", False),
        (10, "cancelled", False),
    ]
    assert {e for _, e, _ in run.log} <= set(EVENTS)


def _fire_and_resolve_times(r: AlertRule, values: list[float], step_s: int):
    run = Runner(r)
    fired, resolved = [], []
    for i, v in enumerate(values):
        minute = i * step_s / 60
        for tr in run.tick(minute, v):
            if tr.event == "firing" and tr.alert.fired_at == at(minute):
                fired.append(minute * 60)
            elif tr.event == "resolved":
                resolved.append(minute * 60)
    return fired, resolved


@pytest.mark.parametrize("seed", range(12))
def test_flapping_gives_at_most_one_alert_and_one_resolve_per_hysteresis_window(seed):
    rnd = random.Random(seed)
    pending_s = rnd.choice([0, 60, 120, 300])
    resolve_s = rnd.choice([60, 180, 600])
    if pending_s == 0 and resolve_s == 60:
        resolve_s = 120
    window = pending_s + resolve_s
    step_s = 60
    r = rule(
        pending_s=pending_s,
        resolve_s=resolve_s,
        threshold=80.0,
        resolve_threshold=rnd.choice([80.0, 75.0]),
    )
    # runs above and below the threshold, each 1 tick to twice the window long (so both
    # flapping faster than the window and slower), with noise and random single-tick bursts
    values: list[float] = []
    high = True
    while len(values) < 2000:
        run_len = rnd.randint(1, 2 * window // step_s)
        values += [(90.0 if high else 60.0) + rnd.gauss(0, 8) for _ in range(run_len)]
        high = not high
    values = [rnd.choice([95.0, 50.0]) if rnd.random() < 0.05 else v for v in values]
    fired, resolved = _fire_and_resolve_times(r, values, step_s)
    assert fired, "the scenario must fire at least once to test anything"
    for times in (fired, resolved):
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(g > window for g in gaps), (window, gaps[:10])
    # and alternation: every resolve follows a firing
    assert len(resolved) in (len(fired), len(fired) - 1)


def test_flapping_faster_than_pending_never_fires_and_slower_than_resolve_never_resolves():
    r = rule(pending_s=300, resolve_s=300)
    # 4 min above, 4 min below: pending never holds 5 min
    values = [90.0 if (i % 8) < 4 else 60.0 for i in range(600)]
    fired, _ = _fire_and_resolve_times(r, values, 60)
    assert fired == []
    # firing, then 4 min clear / 4 min high: it never resolves, one alert
    values = [90.0] * 6 + [60.0 if (i % 8) < 4 else 90.0 for i in range(600)]
    fired, resolved = _fire_and_resolve_times(r, values, 60)
    assert len(fired) == 1 and resolved == []
