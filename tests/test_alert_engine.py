"""The alert engine over a real DuckDB with a simulated clock (issue #12): the rows each
transition writes, one open alert per rule x scope, catch-up after downtime, silences,
escalation, repeats and acknowledgements. Values come from an injected observation source
(the engine's seam between "what is the value" and "what to do about it"); the lifecycle,
the store and the outbox are the real ones."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from inferledger.core.errors import BadInputError, ConstraintError
from ledger.alert_engine import AlertEngine, EngineRule, budget_rules
from ledger.alert_history import acknowledge, alert_history, open_alerts
from ledger.outbox import notifications
from ledger.schema import alert_open, silences
from models.alert_config import AlertRule, Budget
from models.alert_lifecycle import Observation

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def make_rule(rule_id: int = 1, **overrides) -> AlertRule:
    fields = dict(
        name=f"failures-{rule_id}",
        kind="failure_rate",
        owner="ops@example.com",
        window_s=300,
        threshold=10.0,
        resolve_threshold=5.0,
        pending_s=120,
        resolve_s=120,
        repeat_s=3600,
        channels=("hook",),
        scope={"team": "search"},
        group_by=("route",),
        rule_id=rule_id,
    )
    fields.update(overrides)
    return AlertRule(**fields)


class Series:
    """value(at) per scope, set by the test: the simulated metric."""

    def __init__(self) -> None:
        self.points: list[tuple[datetime, str, float | None, str | None]] = []
        self.calls: list[datetime] = []

    def set(
        self,
        since: datetime,
        value: float | None,
        *,
        scope: str = '{"route":"/ask"}',
        severity: str | None = None,
    ) -> None:
        self.points.append((since, scope, value, severity))

    def observe(self, rule: AlertRule, budget, at: datetime, cache: dict) -> list[Observation]:
        self.calls.append(at)
        latest: dict[str, tuple[float | None, str | None]] = {}
        for since, scope, value, severity in sorted(self.points, key=lambda p: p[0]):
            if since <= at:
                latest[scope] = (value, severity)
        return [
            Observation(
                scope_key=scope,
                value=value,
                severity=severity,
                summary=f"failure rate {value}%",
                labels=json.loads(scope),
            )
            for scope, (value, severity) in latest.items()
        ]


def engine_for(storage, series: Series, *rules: AlertRule, **kw) -> AlertEngine:
    engine_rules = [EngineRule(r.key, r) for r in rules]
    return AlertEngine(
        storage,
        base_url="https://ledger.example.com",
        observe=series.observe,
        rules=lambda: engine_rules,
        interval_s=60,
        **kw,
    )


def events_of(storage, alert_id: int) -> list[str]:
    return [
        e
        for (e,) in storage.fetchall(
            "SELECT event FROM alert_events WHERE alert_id = ? ORDER BY event_id", [alert_id]
        )
    ]


def run(engine: AlertEngine, start: datetime, minutes: int) -> None:
    for i in range(minutes + 1):
        summary = engine.evaluate(start + i * MIN)
        assert not summary.errors, summary.errors


def test_pending_firing_resolved_writes_exactly_the_expected_rows(storage) -> None:
    series = Series()
    series.set(T0, 20.0)
    series.set(T0 + 4 * MIN, 2.0)
    engine = engine_for(storage, series, make_rule())

    engine.evaluate(T0)
    [alert] = open_alerts(storage)
    assert (alert.state, alert.scope, alert.pending_since) == ("pending", {"route": "/ask"}, T0)
    assert notifications(storage) == []

    run(engine, T0 + MIN, 1)  # T0+1, T0+2: pending held 2 min -> firing
    [alert] = open_alerts(storage)
    assert alert.state == "firing" and alert.fired_at == T0 + 2 * MIN
    [fired] = notifications(storage)
    assert fired.idempotency_key == f"{alert.alert_id}:firing:1:hook"
    assert fired.state == "pending" and fired.channel == "hook" and fired.created_at == T0 + 2 * MIN
    msg = fired.payload
    assert msg["event"] == "firing" and msg["rule"] == "failures-1"
    assert msg["scope"] == {"team": "search", "route": "/ask"}
    assert (msg["value"], msg["threshold"], msg["owner"]) == (20.0, 10.0, "ops@example.com")
    assert msg["since"] == (T0 + 2 * MIN).isoformat()
    assert msg["link"].startswith("https://ledger.example.com/requests?range=custom")
    assert "team=search" in msg["link"] and "route=%2Fask" in msg["link"]
    assert msg["idempotency_key"] == fired.idempotency_key

    # value drops at T0+4; clear must hold resolve_s = 2 min -> resolved at T0+6
    run(engine, T0 + 3 * MIN, 2)
    assert open_alerts(storage)[0].clear_since == T0 + 4 * MIN
    engine.evaluate(T0 + 6 * MIN)
    assert open_alerts(storage) == []
    assert storage.scalar("SELECT count(*) FROM alert_open") == 0
    [history] = alert_history(storage)
    assert history.state == "resolved" and history.resolved_at == T0 + 6 * MIN
    assert history.peak_value == 20.0 and history.notifications == 2
    assert [e.event for e in history.events] == ["pending", "firing", "resolved"]
    keys = sorted(n.idempotency_key for n in notifications(storage))
    assert keys == [f"{alert.alert_id}:firing:1:hook", f"{alert.alert_id}:resolved:2:hook"]
    assert storage.scalar("SELECT count(*) FROM alerts") == 1
    assert storage.scalar("SELECT evaluated_at FROM alert_cursor WHERE rule_key = 'rule:1'") == (
        T0 + 6 * MIN
    )


def test_one_open_alert_per_rule_and_scope_even_when_evaluated_twice(storage) -> None:
    series = Series()
    series.set(T0, 50.0)
    rule = make_rule(pending_s=0)
    first, second = engine_for(storage, series, rule), engine_for(storage, series, rule)
    first.evaluate(T0)
    second.evaluate(T0)  # the same instant again (a second evaluator): the cursor makes it a no-op
    first.evaluate(T0 - MIN)  # an older instant is never applied after a newer one
    assert storage.scalar("SELECT count(*) FROM alerts") == 1
    assert len(notifications(storage)) == 1
    # and the table itself refuses a second open alert of the same rule x scope
    alert_id = storage.scalar("SELECT alert_id FROM alert_open")
    with pytest.raises(ConstraintError):
        storage.write(
            lambda tx: tx.run(
                sa.insert(alert_open).values(
                    rule_key="rule:1", scope_key='{"route":"/ask"}', alert_id=alert_id + 1
                )
            )
        )


def test_catch_up_after_downtime_notifies_fired_then_resolved(storage) -> None:
    series = Series()
    series.set(T0, 1.0)
    series.set(T0 + 10 * MIN, 40.0)  # while the server is down
    series.set(T0 + 20 * MIN, 1.0)
    rule = make_rule(pending_s=0, resolve_s=60)
    engine_for(storage, series, rule).evaluate(T0)  # last evaluation before the crash

    restarted = engine_for(storage, series, rule, catch_up_s=3600)
    summary = restarted.evaluate(T0 + 45 * MIN)
    assert summary.instants == 45  # 44 missed minutes, then now
    assert series.calls[1] == T0 + MIN and series.calls[-1] == T0 + 45 * MIN
    sent = sorted(notifications(storage), key=lambda n: n.notification_id)
    assert [(n.event, n.created_at) for n in sent] == [
        ("firing", T0 + 10 * MIN),
        ("resolved", T0 + 21 * MIN),
    ]
    # the next tick is a plain one
    series.calls.clear()
    restarted.evaluate(T0 + 46 * MIN)
    assert series.calls == [T0 + 46 * MIN]


def test_catch_up_is_capped_and_bounded_by_catch_up_s(storage) -> None:
    series = Series()
    series.set(T0, 1.0)
    rule = make_rule()
    engine_for(storage, series, rule).evaluate(T0)
    restarted = engine_for(storage, series, rule, catch_up_s=3 * 3600)
    series.calls.clear()
    restarted.evaluate(T0 + 10 * 3600 * timedelta(seconds=1))
    assert len(series.calls) == 61  # 60 evenly spaced missed instants + now
    assert series.calls[0] >= T0 + 7 * 3600 * timedelta(seconds=1)
    assert series.calls == sorted(series.calls)


def test_silence_suppresses_the_notification_and_records_it(storage) -> None:
    storage.write(
        lambda tx: tx.run(
            sa.insert(silences).values(
                rule_key=None,
                scope='{"team":"search"}',
                starts_at=T0 - MIN,
                ends_at=T0 + 30 * MIN,
                reason="deploy",
                created_by="admin",
            )
        )
    )
    series = Series()
    series.set(T0, 50.0)
    engine = engine_for(storage, series, make_rule(pending_s=0))
    engine.evaluate(T0)
    [alert] = open_alerts(storage)
    assert alert.state == "firing"  # state still changes while silenced
    assert notifications(storage) == []
    assert events_of(storage, alert.alert_id) == ["firing", "silenced"]
    # when the silence ends while it still fires, it is notified once
    engine.evaluate(T0 + 31 * MIN)
    engine.evaluate(T0 + 32 * MIN)
    assert [n.event for n in notifications(storage)] == ["firing"]


def test_escalation_repeat_and_acknowledgement(storage) -> None:
    series = Series()
    series.set(T0, 20.0, severity="warning")
    series.set(T0 + 5 * MIN, 30.0, severity="critical")
    rule = make_rule(pending_s=0, repeat_s=600, channels=("hook", "mail"))
    engine = engine_for(storage, series, rule)
    run(engine, T0, 15)  # escalated at +5, repeat at +15
    events = [
        (n.event, n.channel)
        for n in sorted(notifications(storage), key=lambda n: n.notification_id)
    ]
    assert events == [
        ("firing", "hook"),
        ("firing", "mail"),
        ("escalated", "hook"),
        ("escalated", "mail"),
        ("repeat", "hook"),
        ("repeat", "mail"),
    ]
    keys = {n.idempotency_key for n in notifications(storage)}
    assert len(keys) == 6  # each logical notification x channel has its own key
    [alert] = open_alerts(storage)
    assert alert.severity == "critical" and alert.notifications == 3

    acked = acknowledge(storage, alert.alert_id, by="alice", at=T0 + 16 * MIN)
    assert acked.acknowledged_by == "alice" and acked.events[-1].event == "acknowledged"
    with pytest.raises(BadInputError, match="already acknowledged by alice"):
        acknowledge(storage, alert.alert_id, by="bob")
    run(engine, T0 + 16 * MIN, 10)  # the repeat due at +25 is held back
    assert len(notifications(storage)) == 6
    assert events_of(storage, alert.alert_id)[-1] == "silenced"
    # the resolve is still notified after an acknowledgement
    series.set(T0 + 27 * MIN, 0.0)
    run(engine, T0 + 27 * MIN, 3)
    assert [n.event for n in notifications(storage)][:2] == ["resolved", "resolved"]
    with pytest.raises(BadInputError, match="resolved"):
        acknowledge(storage, alert.alert_id, by="carol")


def test_one_failing_rule_does_not_stop_the_others(storage) -> None:
    series = Series()
    series.set(T0, 50.0)
    good, bad = make_rule(1, pending_s=0), make_rule(2, pending_s=0)

    def observe(rule: AlertRule, budget, at: datetime, cache: dict):
        if rule.rule_id == 2:
            raise RuntimeError("the signal query broke")
        return series.observe(rule, budget, at, cache)

    engine = AlertEngine(
        storage,
        observe=observe,
        rules=lambda: [EngineRule(bad.key, bad), EngineRule(good.key, good)],
    )
    summary = engine.evaluate(T0)
    assert summary.errors == {"rule:2": "the signal query broke"}
    assert summary.transitions["firing"] == 1 and summary.notifications == 1
    # the failed rule's cursor did not move: it is retried at the next tick
    assert storage.scalar("SELECT count(*) FROM alert_cursor WHERE rule_key = 'rule:2'") == 0


def test_rule_without_channels_still_records_events(storage) -> None:
    series = Series()
    series.set(T0, 50.0)
    engine = engine_for(storage, series, make_rule(pending_s=0, channels=()))
    engine.evaluate(T0)
    [alert] = open_alerts(storage)
    assert events_of(storage, alert.alert_id) == ["firing"]
    assert notifications(storage) == []


def test_budget_implicit_rules() -> None:
    budget = Budget(
        name="search",
        amount=1000.0,
        period="monthly",
        owner="lead@example.com",
        thresholds=(50.0, 80.0, 100.0),
        channels=("hook",),
        budget_id=7,
        scope={"team": "search"},
    )
    threshold, forecast = budget_rules(budget)
    assert threshold.key == "budget:7:threshold" and forecast.key == "budget:7:forecast"
    assert threshold.rule.threshold == 50.0 and threshold.rule.resolve_threshold == 45.0
    assert threshold.rule.repeat_s == 7 * 86400 and threshold.channels == ("hook",)
    assert forecast.rule.threshold == 100.0 and forecast.rule.pending_s == 3600
    assert forecast.rule.owner == "lead@example.com" and forecast.budget is budget
    no_forecast = Budget(
        name="x", amount=1.0, period="daily", owner="o", budget_id=8, forecast_alert=False
    )
    assert [r.key for r in budget_rules(no_forecast)] == ["budget:8:threshold"]


def test_evaluation_never_runs_twice_at_once(storage) -> None:
    import threading

    entered, release = threading.Event(), threading.Event()
    rule = make_rule()

    def slow(rule, budget, at, cache):
        entered.set()
        release.wait(10)
        return []

    engine = AlertEngine(storage, observe=slow, rules=lambda: [EngineRule(rule.key, rule)])
    worker = threading.Thread(target=engine.evaluate, args=(T0,))
    worker.start()
    assert entered.wait(10)
    assert engine.evaluate(T0 + MIN).skipped
    release.set()
    worker.join(10)
    assert not engine.evaluate(T0 + 2 * MIN).skipped


def test_end_to_end_with_the_stored_rules_and_real_signals(storage) -> None:
    """The real default: rules and channels from the stores, values from the ledger."""
    from inferledger.ledger_fixtures import S, unpriced_requests, watch_unpriced

    unpriced_requests(storage, int((T0 - 10 * MIN).timestamp()) * S)
    watch_unpriced(storage, "http://h", by="admin")
    engine = AlertEngine(storage, base_url="https://ledger.example.com")
    assert not engine.evaluate(T0 - 15 * MIN).transitions  # before the requests: silent
    summary = engine.evaluate(T0)
    assert not summary.errors and summary.transitions["firing"] == 1
    [sent] = notifications(storage)
    assert sent.payload["scope"] == {"model": "mystery-model"}
    assert sent.payload["value"] == 3.0 and "3 of 3 requests" in sent.payload["summary"]
    assert sent.payload["link"].startswith("https://ledger.example.com/spend?")


def test_end_to_end_budget_threshold_alert_from_real_spend(storage) -> None:
    """A stored budget's implicit threshold rule fires on the ledger's real spend, with the
    budget's owner and channels and the severity of the highest threshold crossed."""
    from inferledger.ledger_fixtures import S, worked_example
    from ledger.alert_rules import save_channel
    from ledger.budgets import save_budget
    from ledger.marts import refresh
    from models.alert_config import Channel

    worked_example(storage, int((T0 - 30 * MIN).timestamp()) * S)  # $0.10 of GPU time
    refresh(storage)
    save_channel(
        storage, Channel(name="finops", kind="webhook", config={"url": "http://h"}), by="admin"
    )
    budget = save_budget(
        storage,
        Budget(
            name="tiny",
            amount=0.05,
            period="daily",
            owner="finops@example.com",
            channels=("finops",),
            forecast_alert=False,
        ),
        by="admin",
    )
    summary = AlertEngine(storage, base_url="https://l.example.com").evaluate(T0)
    assert not summary.errors, summary.errors
    [alert] = open_alerts(storage)
    assert alert.rule_key == f"budget:{budget.budget_id}:threshold"
    assert (alert.state, alert.severity, alert.owner) == (
        "firing",
        "critical",
        "finops@example.com",
    )
    assert alert.value == pytest.approx(200.0, rel=0.01)
    [sent] = notifications(storage)
    assert sent.channel == "finops" and sent.payload["unit"] == "%"
    assert sent.payload["budget"] == "tiny" and "budget tiny" in sent.payload["summary"]
    assert sent.payload["link"].startswith("https://l.example.com/budgets?")


def test_alerts_of_a_removed_rule_close_without_notification(storage) -> None:
    series = Series()
    series.set(T0, 50.0)
    series.set(T0, 50.0, scope='{"route":"/b"}')
    kept, removed = make_rule(1, pending_s=0), make_rule(2, pending_s=600)
    rules = [EngineRule(kept.key, kept), EngineRule(removed.key, removed)]
    engine = AlertEngine(storage, observe=series.observe, rules=lambda: rules)
    engine.evaluate(T0)
    assert len(open_alerts(storage, rule_key="rule:2")) == 2  # pending
    rules.pop()  # rule 2 archived or disabled
    summary = engine.evaluate(T0 + MIN)
    assert summary.transitions["cancelled"] == 2
    assert open_alerts(storage, rule_key="rule:2") == []
    assert len(open_alerts(storage, rule_key="rule:1")) == 2
    closed = alert_history(storage, rule_key="rule:2")
    assert {a.state for a in closed} == {"cancelled"}
    assert closed[0].events[-1].detail == {"reason": "the rule is archived, disabled or removed"}
    assert {n.alert_id for n in notifications(storage)} == {
        a.alert_id for a in open_alerts(storage, rule_key="rule:1")
    }
