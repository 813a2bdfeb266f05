"""The demo's alerts file (models/data/demo-alerts.yaml, issue #12): it parses as an alerts
file, every data-driven rule is one the signals accept, and the shipped rules' values cross
their thresholds where and when the demo plants a problem (docs/demo.md, "What the demo
plants"), and stay below them elsewhere.

The ledger is test_demo_story's: the shipped scenario at full rate, Wednesday 12:00-16:00 UTC,
through the real ingest path, which holds the 70B's KV-bound peak and /summarize's move to the
8B at 14:00. (The session's `demo_ledger` runs at half rate: its 70B never fills its cache.)
"""

from __future__ import annotations

from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest

from inferledger.core.storage import Storage
from ledger.alert_signals import SIGNAL_KINDS, check_signal_rule, signal_observations
from models.alert_config import AlertRule, AlertsConfig, parse_alerts_yaml, scope_key

KV_BOUND = scope_key({"deployment": "llama-3.1-70b-fp8-h200"})
SUMMARIZE = scope_key({"route": "/summarize"})


def demo_alerts() -> AlertsConfig:
    path = resources.files("models").joinpath("data", "demo-alerts.yaml")
    return parse_alerts_yaml(path.read_text("utf-8"), origin="demo-alerts.yaml")


def shipped(name: str) -> AlertRule:
    return next(r for r in demo_alerts().rules if r.name == name)


def test_the_demo_alerts_file_parses_and_its_rules_are_evaluable():
    config = demo_alerts()
    assert {b.name for b in config.budgets} == {"org-monthly", "cx-weekly"}
    assert config.channels == ()  # no receiver in a demo: see the file's header
    assert set(SIGNAL_KINDS) <= {r.kind for r in config.rules}  # every kind has a demo rule
    for rule in config.rules:
        if rule.kind in SIGNAL_KINDS:
            check_signal_rule(rule)  # raises on a parameter or dimension the kind refuses


@pytest.fixture(scope="module")
def ledger(story) -> tuple[Storage, datetime]:
    db, end = story
    with Storage(Path(db), read_timeout_s=120) as storage:
        yield storage, end


def values(ledger, name: str, at: datetime) -> dict[str, float | None]:
    storage, _ = ledger
    return {o.scope_key: o.value for o in signal_observations(storage, shipped(name), at)}


@pytest.mark.slow
def test_kv_pressure_fires_on_the_kv_bound_70b_only(ledger):
    """At 14:00, summaries still on the 70B, its cache is full with requests waiting; the 8B
    pools, under the same traffic, are the near miss. (Whether the 70B's last quarter-hour
    before 16:00 still preempts varies from one build of the ledger to another: not checked.)"""
    end = ledger[1]
    rule = shipped("kv-pressure")
    peak = values(ledger, "kv-pressure", end - timedelta(hours=2))  # 14:00, summaries on the 70B
    assert peak[KV_BOUND] >= rule.threshold, peak
    assert all(v is not None and v < rule.threshold for k, v in peak.items() if k != KV_BOUND)
    later = values(ledger, "kv-pressure", end)
    assert all(v is not None and v < rule.threshold for k, v in later.items() if k != KV_BOUND)


@pytest.mark.slow
def test_slo_burn_fires_on_summaries_served_by_the_kv_bound_70b(ledger):
    rule = shipped("slo-burn")
    peak = values(ledger, "slo-burn", ledger[1] - timedelta(hours=2))
    assert peak[SUMMARIZE] >= rule.threshold, peak
    assert max(v or 0 for k, v in peak.items() if k != SUMMARIZE) < rule.threshold


@pytest.mark.slow
def test_the_switch_to_the_8b_fires_false_economy_and_failure_rate(ledger):
    end = ledger[1]
    economy = values(ledger, "false-economy", end)  # 14:00-16:00 against 12:00-14:00
    assert economy[SUMMARIZE] >= shipped("false-economy").threshold, economy
    assert all(v is None or v < 20 for k, v in economy.items() if k != SUMMARIZE)
    failures = values(ledger, "failure-rate", end - timedelta(hours=1))
    assert failures[SUMMARIZE] >= shipped("failure-rate").threshold, failures
    # before the switch: the same rules are silent on /summarize
    before = end - timedelta(hours=2, minutes=15)
    assert (values(ledger, "failure-rate", before)[SUMMARIZE] or 0) < 5
    assert (values(ledger, "false-economy", before).get(SUMMARIZE) or 0) < 20


@pytest.mark.slow
def test_the_healthy_parts_of_the_demo_stay_silent(ledger):
    end = ledger[1]
    for name in ("scrape-coverage", "unpriced-usage", "long-context", "prefix-cache-regression"):
        rule = shipped(name)
        found = values(ledger, name, end)
        assert found, name
        assert all(v is None or v < rule.threshold for v in found.values()), (name, found)
