"""ledger/alerts_file.py: the alerts file is the truth for source 'file' entries."""

from __future__ import annotations

import textwrap

import pytest

from ledger import alert_rules, budgets
from ledger.alerts_file import read_alerts_file, sync_alerts_file
from models.alert_config import ConfigError, budget_from_mapping

FILE = """
channels:
  - name: ops-slack
    kind: slack
    config: {url: "https://hooks.slack.example/T1"}
budgets:
  - name: team-a
    amount: 1000
    period: monthly
    owner: a-lead@example.com
    scope: {team: a}
    channels: [ops-slack]
  - name: org-daily
    amount: 300
    period: daily
    timezone: Europe/Paris
    owner: finops
rules:
  - name: a-threshold
    kind: budget_threshold
    budget: team-a
    owner: a-lead@example.com
    threshold: 80
    channels: [ops-slack]
  - name: spikes
    kind: spend_spike
    owner: platform
    group_by: [team]
    window: 1h
    pending: 10m
"""


def _write(tmp_path, text: str, name: str = "alerts.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _names(storage):
    return (
        [b.name for b in budgets.list_budgets(storage)],
        [r.name for r in alert_rules.list_rules(storage)],
        [c.name for c in alert_rules.list_channels(storage)],
    )


def test_sync_adds_then_is_idempotent(storage, tmp_path) -> None:
    path = _write(tmp_path, FILE)
    report = sync_alerts_file(storage, path)
    assert len(report.added) == 5 and not report.changed and not report.archived
    assert _names(storage) == (["org-daily", "team-a"], ["a-threshold", "spikes"], ["ops-slack"])
    assert all(b.source == "file" for b in budgets.list_budgets(storage))
    assert alert_rules.get_rule(storage, "spikes").pending_s == 600
    changes = budgets.budget_changes(storage).total
    again = sync_alerts_file(storage, path)
    assert (again.added, again.changed, len(again.unchanged)) == ([], [], 5)
    assert budgets.budget_changes(storage).total == changes  # nothing new in the audit
    assert "5 unchanged" in again.summary()


def test_sync_changes_archives_and_restores(storage, tmp_path) -> None:
    path = _write(tmp_path, FILE)
    sync_alerts_file(storage, path)
    rule_id = alert_rules.get_rule(storage, "spikes").rule_id
    smaller = FILE.replace("amount: 1000", "amount: 1500").split("  - name: org-daily")[0]
    smaller += "rules:\n  - name: spikes\n    kind: spend_spike\n    owner: platform\n"
    report = sync_alerts_file(storage, _write(tmp_path, smaller, "smaller.yaml"))
    assert report.changed == ["budget 'team-a'", "rule 'spikes'"]
    assert sorted(report.archived) == ["budget 'org-daily'", "rule 'a-threshold'"]
    assert budgets.get_budget(storage, "team-a").amount == 1500
    assert alert_rules.get_rule(storage, "spikes").rule_id == rule_id  # its alerts stay its own
    assert budgets.get_budget(storage, "org-daily").archived_at is not None
    back = sync_alerts_file(storage, path)
    assert sorted(back.restored) == ["budget 'org-daily'", "rule 'a-threshold'"]
    assert budgets.get_budget(storage, "org-daily").archived_at is None


def test_bad_file_changes_nothing(storage, tmp_path) -> None:
    sync_alerts_file(storage, _write(tmp_path, FILE))
    before = _names(storage)
    bad = FILE.replace("amount: 300", "amount: -3")
    with pytest.raises(ConfigError, match=r"alerts file .*: budget #2 \(org-daily\): amount"):
        sync_alerts_file(storage, _write(tmp_path, bad, "bad.yaml"))
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        sync_alerts_file(storage, _write(tmp_path, "budgets: [\n", "broken.yaml"))
    with pytest.raises(ConfigError, match="No such file"):
        sync_alerts_file(storage, tmp_path / "missing.yaml")
    assert _names(storage) == before


def test_names_of_ui_entries_clash(storage, tmp_path) -> None:
    budgets.save_budget(
        storage,
        budget_from_mapping({"name": "team-a", "amount": 5, "period": "daily", "owner": "ui"}),
        by="alice",
    )
    with pytest.raises(ConfigError, match="budget 'team-a' already exists with source 'ui'"):
        sync_alerts_file(storage, _write(tmp_path, FILE))
    assert alert_rules.list_channels(storage) == []  # the channel before it was rolled back
    assert budgets.get_budget(storage, "team-a").amount == 5


def test_file_entries_are_read_only_elsewhere(storage, tmp_path) -> None:
    sync_alerts_file(storage, _write(tmp_path, FILE))
    with pytest.raises(ConfigError, match="comes from the alerts file"):
        alert_rules.archive_rule(storage, "spikes", by="alice")
    with pytest.raises(ConfigError, match="comes from the alerts file"):
        budgets.archive_budget(storage, "team-a", by="alice")


def test_a_file_channel_used_by_a_ui_rule_is_not_pulled_away(storage, tmp_path) -> None:
    from models.alert_config import rule_from_mapping

    sync_alerts_file(storage, _write(tmp_path, FILE))
    rule = rule_from_mapping(
        {"name": "mine", "kind": "failure_rate", "owner": "me", "channels": ["ops-slack"]}
    )
    alert_rules.save_rule(storage, rule, by="me")
    with pytest.raises(ConfigError, match="channel 'ops-slack' is used by rule 'mine'"):
        sync_alerts_file(storage, _write(tmp_path, "budgets: []\n", "empty.yaml"))
    assert len(alert_rules.list_rules(storage)) == 3


def test_read_alerts_file_parses_without_a_database(tmp_path) -> None:
    config = read_alerts_file(_write(tmp_path, FILE))
    assert [b.name for b in config.budgets] == ["team-a", "org-daily"]
    assert config.rules[0].budget_name == "team-a" and config.rules[0].threshold == 80


def test_cli_validate_sync_and_budgets(tmp_path, capsys) -> None:
    from inferledger.cli import main
    from inferledger.core.storage import Storage

    good, bad = _write(tmp_path, FILE), _write(tmp_path, "rules: [{name: x}]\n", "bad.yaml")
    assert main(["alerts", "validate", str(good)]) == 0
    assert "valid (2 budgets, 2 rules, 1 channels)" in capsys.readouterr().out
    assert main(["alerts", "validate", str(bad)]) == 2
    assert "rule #1 (x): kind must be one of" in capsys.readouterr().err
    db = tmp_path / "cli.duckdb"
    Storage(db).open().close()
    assert main(["alerts", "sync", str(good), "--db", str(db)]) == 0
    assert "5 added" in capsys.readouterr().out
    assert main(["budgets", "list", "--db", str(db), "--at", "2026-11-20T12:00Z"]) == 0
    out = capsys.readouterr().out
    assert "team-a" in out and "org-daily" in out and "a-lead@example.com" in out
    assert main(["budgets", "show", "nope", "--db", str(db)]) == 2
    assert main(["budgets", "list", "--db", str(db), "--at", "soon"]) == 2
