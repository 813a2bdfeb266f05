"""ledger/alert_rules.py and ledger/silences.py on a real DuckDB."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from ledger import alert_rules, budgets
from models.alert_config import (
    Channel,
    ConfigError,
    budget_from_mapping,
    channel_from_mapping,
    rule_from_mapping,
)

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _rule(name: str = "spike", **kw: object):
    return rule_from_mapping({"name": name, "kind": "spend_spike", "owner": "ops", **kw})


def _hook(name: str = "hook", **cfg: object) -> Channel:
    config = {"url": "https://example.com/h", **cfg}
    return channel_from_mapping({"name": name, "kind": "webhook", "config": config})


def test_rule_round_trip_keeps_every_field(storage) -> None:
    alert_rules.save_channel(storage, _hook(), by="a")
    rule = _rule(
        scope={"environment": "prod"},
        group_by=["team", "app"],
        params={"weeks": 4, "min_baseline": 0.5},
        window="2h",
        threshold=4,
        resolve_threshold=2.5,
        pending="5m",
        resolve_after="10m",
        repeat="1d",
        severity="critical",
        channels=["hook"],
        enabled=False,
        note="n",
    )
    stored = alert_rules.save_rule(storage, rule, by="a")
    assert stored.rule_id is not None and stored.key == f"rule:{stored.rule_id}"
    got = alert_rules.get_rule(storage, "spike")
    assert got == stored
    assert (got.group_by, got.window_s, got.pending_s, got.resolve_s, got.repeat_s) == (
        ("team", "app"),
        7200,
        300,
        600,
        86400,
    )
    assert got.params == {"weeks": 4, "min_baseline": 0.5} and got.enabled is False
    assert alert_rules.get_rule_by_key(storage, stored.key) == stored
    assert alert_rules.get_rule_by_key(storage, "rule:999") is None
    assert alert_rules.list_rules(storage, enabled_only=True) == []


def test_rules_need_their_budget_and_channels(storage) -> None:
    r = rule_from_mapping(
        {"name": "b", "kind": "budget_forecast", "owner": "o", "budget_name": "ghost"}
    )
    with pytest.raises(ConfigError, match="unknown budget 'ghost'"):
        alert_rules.save_rule(storage, r, by="a")
    with pytest.raises(ConfigError, match="unknown channel 'nope'"):
        alert_rules.save_rule(storage, _rule(channels=["nope"]), by="a")
    budgets.save_budget(
        storage,
        budget_from_mapping({"name": "ghost", "amount": 5, "period": "daily", "owner": "o"}),
        by="a",
    )
    alert_rules.save_rule(storage, r, by="a")
    budgets.archive_budget(storage, "ghost", by="a")
    with pytest.raises(ConfigError, match="budget 'ghost' is archived"):
        alert_rules.save_rule(
            storage, _rule("b2", kind="budget_threshold", budget_name="ghost"), by="a"
        )
    assert [x.name for x in alert_rules.list_rules(storage)] == ["b"]


def test_rule_edit_keeps_id_archive_restore_and_audit(storage) -> None:
    first = alert_rules.save_rule(storage, _rule(), by="a")
    changed = alert_rules.save_rule(storage, _rule("spike2", threshold=5), by="b", replace="spike")
    assert changed.rule_id == first.rule_id and changed.threshold == 5
    with pytest.raises(ConfigError, match="already exists"):
        alert_rules.save_rule(storage, _rule("spike2"), by="a")
    alert_rules.archive_rule(storage, "spike2", by="c")
    assert alert_rules.list_rules(storage) == []
    alert_rules.restore_rule(storage, "spike2", by="c")
    page = alert_rules.rule_changes(storage, name="spike2")
    assert [c.action for c in page.changes] == ["restored", "archived", "changed"]
    assert json.loads(page.changes[2].old_values)["threshold"] == 2.0  # spend_spike's default


def test_channels_keep_secrets_out_of_the_audit_and_cannot_be_renamed(storage) -> None:
    alert_rules.save_channel(storage, _hook(secret="s3cret"), by="a")
    assert alert_rules.get_channel(storage, "hook").config["secret"] == "s3cret"
    page = alert_rules.rule_changes(storage)
    assert "s3cret" not in (page.changes[0].new_values or "")
    with pytest.raises(ConfigError, match="cannot be renamed"):
        alert_rules.save_channel(storage, _hook("hook2"), by="a", replace="hook")
    alert_rules.save_channel(storage, _hook(secret_env="HOOK_SECRET"), by="a", replace="hook")
    assert alert_rules.get_channel(storage, "hook").config == {
        "url": "https://example.com/h",
        "secret_env": "HOOK_SECRET",
    }
    alert_rules.save_rule(storage, _rule(channels=["hook"]), by="a")
    with pytest.raises(ConfigError, match="used by rule 'spike'"):
        alert_rules.archive_channel(storage, "hook", by="a")
    alert_rules.archive_rule(storage, "spike", by="a")
    alert_rules.archive_channel(storage, "hook", by="a")
    assert alert_rules.list_channels(storage) == []
    with pytest.raises(ConfigError, match="unknown channel 'hook'"):
        alert_rules.save_rule(storage, _rule("other", channels=["hook"]), by="a")


def test_silences_add_list_active_end(storage) -> None:
    rule = alert_rules.save_rule(storage, _rule(), by="a")
    sid = alert_rules.add_silence(
        storage,
        rule_key=rule.key,
        scope={"team": "a"},
        starts_at=T0,
        ends_at=T0 + timedelta(hours=2),
        reason="deploy",
        by="alice",
    )
    everywhere = alert_rules.add_silence(
        storage,
        rule_key=None,
        scope=None,
        starts_at=T0 + timedelta(hours=1),
        ends_at=T0 + timedelta(hours=3),
        reason="maintenance",
        by="bob",
    )
    assert [s.silence_id for s in alert_rules.active_silences(storage, T0)] == [sid]
    both = alert_rules.active_silences(storage, T0 + timedelta(minutes=90))
    assert [s.silence_id for s in both] == [sid, everywhere]
    s = both[0]
    assert s.covers(rule.key, {"team": "a", "app": "x"})
    assert not s.covers(rule.key, {"team": "b"}) and not s.covers("rule:999", {"team": "a"})
    alert_rules.end_silence(storage, sid, by="alice", at=T0 + timedelta(minutes=30))
    assert [
        x.silence_id for x in alert_rules.active_silences(storage, T0 + timedelta(minutes=45))
    ] == []
    assert [x.silence_id for x in alert_rules.list_silences(storage)] == [everywhere]
    assert len(alert_rules.list_silences(storage, include_ended=True)) == 2
    assert alert_rules.list_silences(storage, at=T0 + timedelta(hours=4)) == []
    with pytest.raises(ConfigError, match="already over"):
        alert_rules.end_silence(storage, sid, by="a", at=T0 + timedelta(hours=1))
    actions = [c.action for c in alert_rules.rule_changes(storage).changes[:3]]
    assert actions == ["expired", "added", "added"]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"ends_at": T0}, "end after it starts"),
        ({"ends_at": T0 + timedelta(days=200)}, "at most 100 days"),
        ({"reason": " "}, "needs a reason"),
        ({"rule_key": "spike"}, "rule:<id>"),
        ({"rule_key": "rule:42"}, "no rule 'rule:42'"),
        ({"scope": {"tem": "a"}}, "unknown dimension 'tem'"),
        ({"starts_at": datetime(2026, 11, 30)}, "time zone"),
    ],
)
def test_bad_silences_are_refused(storage, kw, message) -> None:
    args = {
        "rule_key": None,
        "scope": {},
        "starts_at": T0,
        "ends_at": T0 + timedelta(hours=1),
        "reason": "r",
        "by": "a",
        **kw,
    }
    with pytest.raises(ConfigError, match=message):
        alert_rules.add_silence(storage, **args)
    assert alert_rules.list_silences(storage, include_ended=True) == []
