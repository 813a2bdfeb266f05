"""ledger/budgets.py on a real DuckDB: save, rename, archive, restore, audit, file ownership."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import sqlalchemy as sa

from ledger import alert_rules, budgets
from ledger.schema import config_changes
from models.alert_config import Channel, ConfigError, budget_from_mapping, rule_from_mapping


def _budget(name: str = "team-a", **kw: object):
    d = {"name": name, "amount": 1000, "period": "monthly", "owner": "ops@x", **kw}
    return budget_from_mapping(d)


def test_save_read_round_trip_and_audit(storage) -> None:
    b = _budget(
        scope={"team": "a", "environment": "prod"},
        thresholds=[25, 50, 100],
        timezone="Europe/Paris",
        reset_day=5,
        idle_policy="usage",
        note="n",
    )
    stored = budgets.save_budget(storage, b, by="alice")
    assert stored.budget_id is not None and stored.archived_at is None
    got = budgets.get_budget(storage, "team-a")
    assert got == stored
    assert (got.scope, got.thresholds, got.timezone, got.reset_day, got.idle_policy) == (
        {"environment": "prod", "team": "a"},
        (25.0, 50.0, 100.0),
        "Europe/Paris",
        5,
        "usage",
    )
    page = budgets.budget_changes(storage)
    assert page.total == 1
    change = page.changes[0]
    assert (change.changed_by, change.action, change.object_name) == ("alice", "added", "team-a")
    assert change.old_values is None and json.loads(change.new_values)["amount"] == 1000


def test_custom_period_round_trips(storage) -> None:
    b = _budget(
        period="custom", custom_start="2026-11-01", custom_end="2026-12-01", timezone="Asia/Tokyo"
    )
    stored = budgets.save_budget(storage, b, by="a")
    assert stored.custom_start == b.custom_start and stored.custom_end == b.custom_end
    assert stored.custom_start.utcoffset() is not None


def test_name_clash_and_unknown_channel_write_nothing(storage) -> None:
    budgets.save_budget(storage, _budget(), by="a")
    with pytest.raises(ConfigError, match="already exists"):
        budgets.save_budget(storage, _budget(), by="a")
    with pytest.raises(ConfigError, match="unknown channel 'pager'"):
        budgets.save_budget(storage, _budget("b2", channels=["pager"]), by="a")
    assert [b.name for b in budgets.list_budgets(storage)] == ["team-a"]
    assert budgets.budget_changes(storage).total == 1


def test_change_and_rename_moves_the_rules_along(storage) -> None:
    budgets.save_budget(storage, _budget(), by="a")
    rule = rule_from_mapping(
        {"name": "r", "kind": "budget_threshold", "owner": "o", "budget_name": "team-a"}
    )
    alert_rules.save_rule(storage, rule, by="a")
    renamed = budgets.save_budget(
        storage, _budget("team-b", amount=2000), by="bob", replace="team-a"
    )
    assert renamed.amount == 2000 and budgets.get_budget(storage, "team-a") is None
    assert alert_rules.get_rule(storage, "r").budget_name == "team-b"
    last = budgets.budget_changes(storage).changes[0]
    assert last.action == "changed" and json.loads(last.old_values)["name"] == "team-a"
    # An unchanged save writes no audit row.
    budgets.save_budget(storage, _budget("team-b", amount=2000), by="bob", replace="team-b")
    assert budgets.budget_changes(storage).total == 2
    with pytest.raises(ConfigError, match="no budget named 'nope'"):
        budgets.save_budget(storage, _budget("x"), by="a", replace="nope")


def test_archive_and_restore(storage) -> None:
    budgets.save_budget(storage, _budget(), by="a")
    archived = budgets.archive_budget(storage, "team-a", by="a")
    assert archived.archived_at is not None
    assert budgets.list_budgets(storage) == []
    assert [b.name for b in budgets.list_budgets(storage, include_archived=True)] == ["team-a"]
    with pytest.raises(ConfigError, match="already archived"):
        budgets.archive_budget(storage, "team-a", by="a")
    with pytest.raises(ConfigError, match="archived: restore it"):
        budgets.save_budget(storage, _budget(), by="a")
    budgets.restore_budget(storage, "team-a", by="a")
    assert budgets.get_budget(storage, "team-a").archived_at is None
    actions = [c.action for c in budgets.budget_changes(storage).changes]
    assert actions == ["restored", "archived", "added"]
    with pytest.raises(ConfigError, match="no budget named"):
        budgets.archive_budget(storage, "ghost", by="a")


def test_file_budgets_are_not_edited_from_the_ui(storage) -> None:
    file_budget = replace(_budget("from-file"), source="file")
    with pytest.raises(ConfigError, match="only the alerts file"):
        budgets.save_budget(storage, file_budget, by="a")
    storage.write(
        lambda tx: budgets.tx_save_budget(
            tx, file_budget, by="file", replace_name=None, allow_file=True
        )
    )
    with pytest.raises(ConfigError, match=r"comes from the alerts file.*edit the file"):
        budgets.save_budget(storage, _budget("from-file", amount=5), by="a", replace="from-file")
    with pytest.raises(ConfigError, match="comes from the alerts file"):
        budgets.archive_budget(storage, "from-file", by="a")
    assert budgets.get_budget(storage, "from-file").amount == 1000


def test_a_hand_built_invalid_budget_is_refused(storage) -> None:
    bad = replace(_budget(), amount=float("nan"))
    with pytest.raises(ConfigError, match="amount"):
        budgets.save_budget(storage, bad, by="a")
    with pytest.raises(ConfigError, match="who made it"):
        budgets.save_budget(storage, _budget(), by=" ")
    assert storage.select(sa.select(sa.func.count()).select_from(config_changes))[0][0] == 0


def test_budget_channels_must_exist_and_paging(storage) -> None:
    alert_rules.save_channel(
        storage, Channel("ops", "slack", {"url": "https://hooks.example.com/x"}), by="a"
    )
    for i in range(5):
        budgets.save_budget(storage, _budget(f"b{i}", channels=["ops"]), by="a")
    page = budgets.budget_changes(storage, offset=2, limit=2)
    assert (page.offset, page.total, [c.object_name for c in page.changes]) == (2, 5, ["b2", "b1"])
    assert budgets.budget_changes(storage, name="b3").total == 1
    with pytest.raises(ConfigError, match="used by budget 'b0'"):
        alert_rules.archive_channel(storage, "ops", by="a")
