"""Pure helpers of the budget and alert editing forms (app/pages/admin_budgets.py,
app/pages/admin_alerts.py): a form's values to and from the alerts file's mapping
(models.alert_config validates it), scopes typed as ``team=search, app=chat``, durations as
the file writes them, channel secrets masked on the way to the browser, and the "send test"
message. No Dash callbacks here and no page of its own (Dash skips this module): the admin
pages' modules hold every callback, so the sign-in guard's admin role applies to them."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from models.alert_config import (
    DIMENSIONS,
    AlertRule,
    Budget,
    Channel,
    ConfigError,
    validate_scope,
)

#: The week-start choices (0 = Monday, as Budget.week_start).
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
#: The budget form's fields (component id suffixes), in the order of the callbacks.
BUDGET_FORM = (
    "name",
    *(f"scope-{d}" for d in DIMENSIONS),
    "period",
    "week-start",
    "reset-day",
    "custom-start",
    "custom-end",
    "timezone",
    "amount",
    "currency",
    "thresholds",
    "forecast-alert",
    "idle-policy",
    "owner",
    "channels",
    "note",
)


#: The rule form's fields (component id suffix), in the order of the callbacks.
RULE_FORM = (
    "rule-name",
    "rule-kind",
    *(f"rule-scope-{d}" for d in DIMENSIONS),
    "rule-group-by",
    "rule-budget",
    "rule-window",
    "rule-threshold",
    "rule-resolve-threshold",
    "rule-pending",
    "rule-resolve",
    "rule-repeat",
    "rule-severity",
    "rule-owner",
    "rule-channels",
    "rule-enabled",
    "rule-params",
    "rule-note",
)

#: What the settings box suggests for each channel kind.
CHANNEL_EXAMPLES = {
    "webhook": '{"url": "https://hooks.example.com/inferledger", "secret_env": "HOOK_SECRET"}',
    "slack": '{"url": "https://hooks.slack.com/services/T000/B000/XXXX"}',
    "email": '{"host": "smtp.example.com", "port": 587, "sender": "alerts@example.com", '
    '"to": ["oncall@example.com"], "username": "alerts", "password_env": "SMTP_PASSWORD"}',
}
#: Stored secrets are never sent back to the browser: the form shows this instead, and a save
#: that still holds it keeps the stored value (:func:`unmasked`).
MASK = "********"
SECRET_KEYS = ("secret", "password")


def masked(config: Any) -> dict[str, Any]:
    return {k: MASK if k in SECRET_KEYS and v else v for k, v in dict(config).items()}


def unmasked(config: dict[str, Any], stored: Channel | None) -> dict[str, Any]:
    """The form's settings with each masked secret put back from the stored channel."""
    out = dict(config)
    for key in SECRET_KEYS:
        if out.get(key) == MASK:
            if stored is None or not stored.config.get(key):
                raise ConfigError(f"channel: {key} is the mask {MASK}: type the real value")
            out[key] = stored.config[key]
    return out


def json_object(text: str | None, what: str) -> dict[str, Any]:
    """A JSON object from a form's text area; ConfigError saying what is wrong."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what}: not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{what}: must be a JSON object {{...}}, got {type(value).__name__}")
    return value


def parse_scope_text(text: str | None) -> dict[str, str]:
    """``team=search, app=chat`` as a validated scope (models.alert_config.validate_scope)."""
    pairs: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ConfigError(f"silence: scope {part.strip()!r} is not dimension=value")
        pairs[key.strip()] = value.strip()
    return validate_scope(pairs, "silence")


def duration_text(seconds: int) -> str:
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s" if seconds else "0"


def rule_mapping(values: dict[str, Any]) -> dict[str, Any]:
    """The rule form (component suffix -> value) as the alerts file's mapping."""

    def text(key: str) -> str:
        value = values.get(key)
        return "" if value is None else str(value).strip()

    out: dict[str, Any] = {
        "name": text("rule-name"),
        "kind": values.get("rule-kind"),
        "scope": {d: text(f"rule-scope-{d}") for d in DIMENSIONS if text(f"rule-scope-{d}")},
        "group_by": list(values.get("rule-group-by") or []),
        "severity": values.get("rule-severity"),
        "owner": text("rule-owner"),
        "channels": list(values.get("rule-channels") or []),
        "enabled": "on" in (values.get("rule-enabled") or []),
        "params": json_object(values.get("rule-params"), f"rule {text('rule-name')!r}: params"),
    }
    if values.get("rule-budget"):
        out["budget_name"] = values["rule-budget"]
    for key, field in (
        ("rule-window", "window_s"),
        ("rule-threshold", "threshold"),
        ("rule-resolve-threshold", "resolve_threshold"),
        ("rule-pending", "pending_s"),
        ("rule-resolve", "resolve_s"),
        ("rule-repeat", "repeat_s"),
        ("rule-note", "note"),
    ):
        if text(key):
            out[field] = text(key)
    return out


def rule_values(r: AlertRule) -> tuple[Any, ...]:
    """A stored rule as the form's values, in RULE_FORM order."""
    return (
        r.name,
        r.kind,
        *(r.scope.get(d, "") for d in DIMENSIONS),
        list(r.group_by),
        r.budget_name,
        duration_text(r.window_s),
        f"{r.threshold:g}",
        f"{r.resolve_threshold:g}",
        duration_text(r.pending_s),
        duration_text(r.resolve_s),
        duration_text(r.repeat_s),
        r.severity,
        r.owner,
        list(r.channels),
        ["on"] if r.enabled else [],
        json.dumps(dict(r.params)),
        r.note or "",
    )


def test_message(channel: Channel, who: str, at: datetime, base_url: str) -> dict[str, Any]:
    """The "send test" message: the shape of a real notification (docs/alerts.md)."""
    return {
        "event": "test",
        "rule": "InferLedger test message",
        "kind": "test",
        "severity": "info",
        "state": "test",
        "summary": f"A test of channel {channel.name} sent by {who}; no alert is firing.",
        "scope": {},
        "value": None,
        "threshold": None,
        "since": at.isoformat(),
        "at": at.isoformat(),
        "owner": who,
        "link": base_url.rstrip("/") + "/alerts",
    }


def form_mapping(values: dict[str, Any]) -> dict[str, Any]:
    """The form's values (component suffix -> value) as the alerts file's mapping, for
    budget_from_mapping: blanks left out (the validator's defaults apply), the scope as one
    mapping, the thresholds and channels as lists."""

    def text(key: str) -> str:
        value = values.get(key)
        return "" if value is None else str(value).strip()

    out: dict[str, Any] = {
        "name": text("name"),
        "scope": {d: text(f"scope-{d}") for d in DIMENSIONS if text(f"scope-{d}")},
        "period": values.get("period"),
        "owner": text("owner"),
        "forecast_alert": "on" in (values.get("forecast-alert") or []),
    }
    if values.get("amount") is not None:
        out["amount"] = values["amount"]
    period = values.get("period")
    if period == "weekly" and values.get("week-start") is not None:
        out["week_start"] = values["week-start"]
    if period in ("monthly", "quarterly") and values.get("reset-day") is not None:
        out["reset_day"] = values["reset-day"]
    if period == "custom":
        out["custom_start"] = text("custom-start")
        out["custom_end"] = text("custom-end")
    for key, field in (("timezone", "timezone"), ("currency", "currency"), ("note", "note")):
        if text(key):
            out[field] = text(key)
    if text("thresholds"):
        out["thresholds"] = [t.strip() for t in text("thresholds").split(",") if t.strip()]
    if values.get("idle-policy"):
        out["idle_policy"] = values["idle-policy"]
    out["channels"] = [c.strip() for c in text("channels").split(",") if c.strip()]
    return out


def budget_values(b: Budget) -> tuple[Any, ...]:
    """A stored budget as the form's values, in FORM order."""

    def day(value: datetime | None) -> str:
        return "" if value is None else value.isoformat()

    return (
        b.name,
        *(b.scope.get(d, "") for d in DIMENSIONS),
        b.period,
        b.week_start,
        b.reset_day,
        day(b.custom_start),
        day(b.custom_end),
        b.timezone,
        b.amount,
        b.currency,
        ",".join(f"{t:g}" for t in b.thresholds),
        ["on"] if b.forecast_alert else [],
        b.idle_policy,
        b.owner,
        ",".join(b.channels),
        b.note or "",
    )
