"""models/alert_config.py: validation and YAML parsing of budgets, rules and channels."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from models.alert_config import (
    KIND_DEFAULTS,
    KINDS,
    ConfigError,
    budget_from_mapping,
    channel_from_mapping,
    parse_alerts_yaml,
    rule_from_mapping,
)
from models.config_fields import parse_duration

BUDGET = {"name": "team-a", "amount": 1000, "period": "monthly", "owner": "lead@x"}
RULE = {"name": "spikes", "kind": "spend_spike", "owner": "platform"}


def test_budget_defaults_and_normalising() -> None:
    b = budget_from_mapping(
        {**BUDGET, "currency": "eur", "thresholds": "80, 50".replace("80, 50", "50,80"),
         "week_start": "sunday", "scope": {"team": "a", "app": 7}, "idle_policy": "configured"}
    )  # fmt: skip
    assert (b.currency, b.thresholds, b.week_start, b.idle_policy) == ("EUR", (50, 80), 6, None)
    assert list(b.scope) == ["team", "app"] and b.scope["app"] == "7"
    assert budget_from_mapping(BUDGET).thresholds == (50, 80, 100)
    assert budget_from_mapping(BUDGET).source == "ui"


def test_custom_periods_take_the_budget_time_zone() -> None:
    b = budget_from_mapping(
        {**BUDGET, "period": "custom", "timezone": "Asia/Tokyo",
         "custom_start": "2026-11-01", "custom_end": "2026-11-15T12:00"}
    )  # fmt: skip
    assert b.custom_start == datetime(2026, 10, 31, 15, tzinfo=UTC)
    assert b.custom_end == datetime(2026, 11, 15, 3, tzinfo=UTC)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"amount": 0}, "amount must be above 0"),
        ({"amount": float("inf")}, "finite"),
        ({"amount": "lots"}, "amount must be a number"),
        ({"amount": True}, "amount must be a number"),
        ({"name": ""}, "name is required"),
        ({"name": "a,b"}, "may hold letters"),
        ({"owner": None}, "owner is required"),
        ({"currency": "EURO"}, "3-letter"),
        ({"period": "yearly"}, "period must be one of"),
        ({"timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
        ({"reset_day": 31}, "reset_day must be a whole number from 1 to 28"),
        ({"week_start": 7}, "week_start"),
        ({"thresholds": [80, 50]}, "ascending"),
        ({"thresholds": [50, 50]}, "ascending"),
        ({"thresholds": [0, 50]}, "above 0 and at most 1000"),
        ({"thresholds": [50, 1001]}, "above 0 and at most 1000"),
        ({"scope": {"tem": "a"}}, "unknown dimension 'tem' \\(did you mean 'team'\\?\\)"),
        ({"scope": {"team": ""}}, "scope team must be a non-empty text"),
        ({"scope": ["team"]}, "scope must be a mapping"),
        ({"idle_policy": "share"}, "idle_policy must be one of"),
        ({"channels": ["a", "a"]}, "twice"),
        ({"custom_start": "2026-01-01"}, "apply only to a custom period"),
        ({"period": "custom", "custom_start": "2026-01-02", "custom_end": "2026-01-01"}, "after"),
        ({"period": "custom", "custom_start": "2026-01-02"}, "custom_end is required"),
        ({"period": "custom", "custom_start": "x", "custom_end": "2026-01-03"}, "ISO"),
        ({"treshold": 1}, "unknown field 'treshold' \\(did you mean 'thresholds'\\?\\)"),
        ({"forecast_alert": "maybe"}, "true or false"),
    ],
)
def test_bad_budgets_say_what_is_wrong(change, message) -> None:
    with pytest.raises(ConfigError, match=message):
        budget_from_mapping({**BUDGET, **change})


def test_rule_defaults_per_kind() -> None:
    for kind in KINDS:
        extra = {"budget_name": "b"} if kind.startswith("budget") else {}
        r = rule_from_mapping({**RULE, "kind": kind, **extra})
        d = KIND_DEFAULTS[kind]
        assert (r.window_s, r.threshold) == (d.window_s, d.threshold)
        assert r.resolve_threshold == pytest.approx(0.9 * d.threshold)
    r = rule_from_mapping({**RULE, "threshold": -2})
    assert r.resolve_threshold == pytest.approx(-2.2)  # below the threshold, whatever its sign
    r = rule_from_mapping({**RULE, "group_by": "model,team", "repeat": "2d", "window_s": 600})
    assert (r.group_by, r.repeat_s, r.window_s) == (("team", "model"), 172800, 600)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "spend_spik"}, "did you mean 'spend_spike'"),
        ({"kind": "budget_threshold"}, "budget_name \\(the budget it watches\\) is required"),
        ({"budget_name": "b"}, "budget_name applies only to"),
        ({"threshold": 3, "resolve_threshold": 4}, "resolve_threshold 4 must be at most"),
        ({"window": "0s"}, "window_s must be above 0"),
        ({"window": "5 minutes"}, "duration like 5m"),
        ({"window": "1h", "window_s": 60}, "not both"),
        ({"repeat": 0}, "repeat_s must be above 0"),
        ({"pending": -1}, "from 0 to 400 days"),
        ({"severity": "page"}, "severity must be one of"),
        ({"group_by": ["team", "region"]}, "unknown dimension 'region'"),
        ({"params": {"weeks": float("nan")}}, "finite"),
        ({"params": {"x": {"y": 1}}}, "number, text"),
        ({"treshold": 3}, "unknown field 'treshold' \\(did you mean 'threshold'\\?\\)"),
        ({"enabled": "nope"}, "true or false"),
    ],
)
def test_bad_rules_say_what_is_wrong(change, message) -> None:
    with pytest.raises(ConfigError, match=message):
        rule_from_mapping({**RULE, **change})


def test_durations() -> None:
    assert [parse_duration(v, "w", "d") for v in (90, "90", "5m", "1h", "2d", "1w", "1.5h")] == [
        90, 90, 300, 3600, 172800, 604800, 5400,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"kind": "webhook", "config": {"url": "ftp://x"}}, "http\\(s\\) URL"),
        ({"kind": "webhook", "config": {}}, "url is required"),
        (
            {"kind": "webhook", "config": {"url": "https://x", "secret": "a", "secret_env": "B"}},
            "not both",
        ),
        (
            {"kind": "webhook", "config": {"url": "https://x", "secret_env": "1BAD"}},
            "environment variable",
        ),
        ({"kind": "webhook", "config": {"url": "https://x", "headers": {"X A": "b"}}}, "headers"),
        (
            {"kind": "slack", "config": {"url": "https://x", "channel": "#a"}},
            "unknown field 'channel'",
        ),
        ({"kind": "email", "config": {"host": "h", "sender": "a@b.c", "to": []}}, "one or more"),
        (
            {"kind": "email", "config": {"host": "h", "sender": "nope", "to": ["a@b.c"]}},
            "not an email address",
        ),
        (
            {"kind": "email", "config": {"host": "h", "sender": "a@b.c", "to": "x@y.z", "port": 0}},
            "port",
        ),
        ({"kind": "pager", "config": {}}, "kind must be one of"),
        (
            {
                "kind": "email",
                "config": {
                    "host": "h",
                    "sender": "a@b.c",
                    "to": "x@y.z",
                    "ssl": True,
                    "starttls": True,
                },
            },
            "ssl \\(implicit TLS\\) or starttls, not both",
        ),
    ],
)
def test_bad_channels(mapping, message) -> None:
    with pytest.raises(ConfigError, match=message):
        channel_from_mapping({"name": "c", **mapping})


def test_good_channels() -> None:
    email = channel_from_mapping(
        {"name": "mail", "kind": "email",
         "config": {"host": "smtp.x", "sender": "il@x.org", "to": "a@x.org, b@x.org",
                    "password_env": "SMTP_PASSWORD", "username": "il"}}
    )  # fmt: skip
    assert email.config["port"] == 587 and email.config["starttls"] is True
    assert email.config["to"] == ["a@x.org", "b@x.org"]
    tls = channel_from_mapping(
        {"name": "tls", "kind": "email",
         "config": {"host": "smtp.x", "sender": "il@x.org", "to": "a@x.org", "ssl": True,
                    "ca_file": "/etc/il/ca.pem"}}
    )  # fmt: skip
    assert tls.config["port"] == 465 and tls.config["starttls"] is False
    assert (tls.config["ssl"], tls.config["ca_file"]) == (True, "/etc/il/ca.pem")
    hook = channel_from_mapping(
        {"name": "h", "kind": "webhook",
         "config": {"url": "https://x/y", "secret_env": "HOOK", "headers": {"X-Team": "a"}}}
    )  # fmt: skip
    assert hook.config == {"url": "https://x/y", "secret_env": "HOOK", "headers": {"X-Team": "a"}}


def test_yaml_messages_name_the_file_the_entry_and_the_field() -> None:
    text = """
rules:
  - {name: a, kind: spend_spike, owner: o}
  - {name: b, kind: spend_spike, owner: o}
  - {name: kv-hot, kind: kv_pressure, owner: o, treshold: 3}
"""
    with pytest.raises(ConfigError) as exc:
        parse_alerts_yaml(text, origin="x.yaml")
    assert str(exc.value) == (
        "alerts file x.yaml: rule #3 (kv-hot): unknown field 'treshold' (did you mean 'threshold'?)"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("budget: []", "unknown field 'budget' \\(did you mean 'budgets'\\?\\)"),
        ("- a", "expected a mapping"),
        ("rules: {a: 1}", "rules must be a list"),
        ("rules: [3]", "rule #1: expected a mapping"),
        (
            "rules:\n- {name: a, kind: budget_forecast, owner: o, budget: nope}",
            "unknown budget 'nope'",
        ),
        ("rules:\n- {name: a, kind: failure_rate, owner: o, channels: [c]}", "unknown channel 'c'"),
        (
            "budgets:\n- {name: a, amount: 1, period: daily, owner: o}\n"
            "- {name: a, amount: 2, period: daily, owner: o}",
            "budget 'a' is defined twice",
        ),
        ("rules: [", "not valid YAML"),
    ],
)
def test_bad_files(text, message) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_alerts_yaml(text, origin="f.yaml")


def test_empty_file_and_sources() -> None:
    assert parse_alerts_yaml("", origin="e.yaml").budgets == ()
    config = parse_alerts_yaml(
        "budgets:\n- {name: a, amount: 1, period: daily, owner: o}\n", origin="f.yaml"
    )
    assert config.budgets[0].source == "file"
