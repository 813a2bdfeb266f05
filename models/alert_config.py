"""Budgets, alert rules and channels as values (issue #12): the shapes every entry point shares
(the YAML file `alerts.file`, the UI's forms, the CLI) and the stores write
(ledger/budgets.py, ledger/alert_rules.py). Pure: parsing and validation only, no I/O.

Scopes are ``{dimension: value}`` over :data:`DIMENSIONS` (an empty scope is the whole
organisation). A rule's alerts are one per distinct combination of its ``group_by``
dimensions' values; :func:`scope_key` is that combination's canonical text.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from inferledger.core.yaml_files import parse_yaml
from models.config_fields import (
    DIMENSIONS,
    ConfigError,
    bool_value,
    check_keys,
    email_address,
    env_name,
    fail,
    instant_value,
    integer_value,
    name_list,
    number_value,
    params_value,
    parse_duration,
    parse_thresholds,
    text_value,
    timezone_name,
    url_value,
    validate_name,
    validate_scope,
    week_start_value,
)

PERIODS: tuple[str, ...] = ("daily", "weekly", "monthly", "quarterly", "custom")
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")
#: The eleven kinds of alert (docs/alerts.md defines each kind's value).
KINDS: tuple[str, ...] = (
    "budget_threshold",
    "budget_forecast",
    "spend_spike",
    "long_context",
    "failure_rate",
    "slo_burn",
    "prefix_cache_regression",
    "kv_pressure",
    "false_economy",
    "coverage_gap",
    "unpriced_usage",
)
BUDGET_KINDS: tuple[str, ...] = ("budget_threshold", "budget_forecast")
CHANNEL_KINDS: tuple[str, ...] = ("webhook", "slack", "email")
SOURCES: tuple[str, ...] = ("ui", "file", "cli")
IDLE_POLICIES: tuple[str, ...] = ("separate", "usage", "even")


def scope_key(labels: Mapping[str, str | None]) -> str:
    """The canonical text of a scope or group: JSON with sorted keys, no spaces:
    ``scope_key({}) == "{}"``; ``{"team": "a", "app": "b"}`` gives ``{"app":"b","team":"a"}``."""
    return json.dumps(dict(sorted(labels.items())), separators=(",", ":"), ensure_ascii=False)


def parse_scope_key(key: str) -> dict[str, str | None]:
    """The labels of a :func:`scope_key` text."""
    value = json.loads(key)
    if not isinstance(value, dict):
        raise ConfigError(f"a scope key is a JSON object, got {key!r}")
    return value


def scope_contains(outer: Mapping[str, str | None], inner: Mapping[str, str | None]) -> bool:
    """True when every label of ``outer`` is in ``inner`` with the same value: a silence or a
    budget scoped by ``outer`` covers a slice labelled ``inner``."""
    return all(k in inner and inner[k] == v for k, v in outer.items())


@dataclass(frozen=True)
class Budget:
    """One budget. ``thresholds`` are percents of ``amount``, ascending (50, 80, 100).
    ``idle_policy`` None: each deployment's configured idle policy. ``channels`` name
    :class:`Channel` entries; the owner is the contact who answers for the budget."""

    name: str
    amount: float
    period: str
    owner: str
    scope: Mapping[str, str] = field(default_factory=dict)
    timezone: str = "UTC"
    week_start: int = 0  # 0 = Monday … 6 = Sunday (weekly)
    reset_day: int = 1  # 1-28 (monthly, quarterly)
    custom_start: datetime | None = None
    custom_end: datetime | None = None
    currency: str = "USD"
    thresholds: tuple[float, ...] = (50.0, 80.0, 100.0)
    forecast_alert: bool = True
    idle_policy: str | None = None
    channels: tuple[str, ...] = ()
    note: str | None = None
    source: str = "ui"
    budget_id: int | None = None  # set once stored
    archived_at: datetime | None = None


@dataclass(frozen=True)
class AlertRule:
    """One alert rule. The condition holds while the kind's value >= ``threshold``; it must
    hold ``pending_s`` before the alert fires, and the alert resolves once the value has
    stayed below ``resolve_threshold`` (<= threshold) for ``resolve_s``. A firing alert is
    notified again only when its severity rises or ``repeat_s`` has passed."""

    name: str
    kind: str
    owner: str
    window_s: int
    threshold: float
    resolve_threshold: float
    scope: Mapping[str, str] = field(default_factory=dict)
    group_by: tuple[str, ...] = ()
    budget_name: str | None = None  # the two budget kinds only
    params: Mapping[str, Any] = field(default_factory=dict)
    pending_s: int = 0
    resolve_s: int = 300
    repeat_s: int = 86400
    severity: str = "warning"
    channels: tuple[str, ...] = ()
    enabled: bool = True
    note: str | None = None
    source: str = "ui"
    rule_id: int | None = None  # set once stored
    archived_at: datetime | None = None

    @property
    def key(self) -> str:
        """The rule's identity in alert state: ``rule:<rule_id>`` (stored rules only)."""
        if self.rule_id is None:
            raise ConfigError(f"rule {self.name!r} has no id yet (not stored)")
        return f"rule:{self.rule_id}"


@dataclass(frozen=True)
class Channel:
    """Where notifications go. ``config`` holds the kind's fields (docs/alerts.md): webhook
    ``url``, ``secret`` or ``secret_env`` (HMAC-SHA256), ``headers``; slack ``url``; email
    ``host``, ``port``, ``starttls``, ``username``, ``password`` or ``password_env``,
    ``sender``, ``to`` (a list)."""

    name: str
    kind: str
    config: Mapping[str, Any] = field(default_factory=dict)
    source: str = "ui"
    archived_at: datetime | None = None


@dataclass(frozen=True)
class AlertsConfig:
    """What an alerts file holds."""

    budgets: tuple[Budget, ...] = ()
    rules: tuple[AlertRule, ...] = ()
    channels: tuple[Channel, ...] = ()


# ------------------------------------------------------------------------------ validation
#
# One validator for every entry point (the alerts file, the UI's forms, the CLI), so all of
# them give the same messages. Each function takes a plain mapping (what YAML or a form gives)
# and returns the frozen dataclass, or raises ConfigError naming the entry and the field.

_CURRENCY = re.compile(r"[A-Z]{3}")
#: The share of the threshold below which a firing alert resolves when a rule gives no
#: resolve_threshold: resolve = threshold - HYSTERESIS * |threshold| (90 % of a positive one).
HYSTERESIS = 0.1


@dataclass(frozen=True)
class KindDefaults:
    """What a rule of a kind gets when it leaves window_s or threshold out; `unit` names the
    kind's value (docs/alert-kinds.md defines each precisely)."""

    window_s: int
    threshold: float
    unit: str


KIND_DEFAULTS: dict[str, KindDefaults] = {
    "budget_threshold": KindDefaults(3600, 50.0, "% of the budget spent"),
    "budget_forecast": KindDefaults(3600, 100.0, "% of the budget, P50 forecast at period end"),
    "spend_spike": KindDefaults(3600, 2.0, "x the same hour of the week's baseline"),
    "long_context": KindDefaults(3600, 1.5, "x the route's usual p99 prompt tokens (p95 now)"),
    "failure_rate": KindDefaults(900, 5.0, "percentage points of failures above baseline"),
    "slo_burn": KindDefaults(3600, 14.4, "x error-budget burn rate (min of long, short window)"),
    "prefix_cache_regression": KindDefaults(3600, 20.0, "percentage points of hit rate lost"),
    "kv_pressure": KindDefaults(900, 50.0, "% of scrape instants with KV pressure"),
    "false_economy": KindDefaults(86400, 20.0, "% rise in cost per accepted outcome"),
    "coverage_gap": KindDefaults(900, 10.0, "% of expected replica-seconds not scraped"),
    "unpriced_usage": KindDefaults(3600, 1.0, "unpriced requests in the window"),
}

_BUDGET_FIELDS = (
    "name",
    "amount",
    "period",
    "owner",
    "scope",
    "timezone",
    "week_start",
    "reset_day",
    "custom_start",
    "custom_end",
    "currency",
    "thresholds",
    "forecast_alert",
    "idle_policy",
    "channels",
    "note",
)
_RULE_FIELDS = (
    "name",
    "kind",
    "owner",
    "window_s",
    "threshold",
    "resolve_threshold",
    "scope",
    "group_by",
    "budget_name",
    "params",
    "pending_s",
    "resolve_s",
    "repeat_s",
    "severity",
    "channels",
    "enabled",
    "note",
)
#: Friendlier spellings a rule may use instead (a duration reads better without "_s").
_RULE_ALIASES = {
    "window": "window_s",
    "pending": "pending_s",
    "resolve_after": "resolve_s",
    "repeat": "repeat_s",
    "budget": "budget_name",
}
_CHANNEL_FIELDS = ("name", "kind", "config")
#: Each channel kind's config fields: required, optional.
_CHANNEL_CONFIG: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "webhook": (("url",), ("secret", "secret_env", "headers", "timeout_s")),
    "slack": (("url",), ("timeout_s",)),
    "email": (
        ("host", "sender", "to"),
        (
            "port",
            "starttls",
            "ssl",
            "ca_file",
            "username",
            "password",
            "password_env",
            "timeout_s",
        ),
    ),
}


def _where(kind: str, d: Any, where: str | None) -> str:
    if where:
        return where
    name = d.get("name") if isinstance(d, Mapping) else None
    return f"{kind} {name!r}" if isinstance(name, str) and name else kind


def budget_from_mapping(
    d: Mapping[str, Any], *, source: str = "ui", where: str | None = None
) -> Budget:
    """A validated :class:`Budget` from a plain mapping (a YAML entry, a form). `source` is
    the stored origin ('ui', 'file', 'cli'); `where` prefixes messages (default "budget 'x'")."""
    where = _where("budget", d, where)
    check_keys(d, _BUDGET_FIELDS, where)
    if source not in SOURCES:
        raise fail(where, f"source must be one of {', '.join(SOURCES)}")
    name = validate_name(d.get("name"), where)
    if "amount" not in d or d.get("amount") in (None, ""):
        raise fail(where, "amount is required (a number above 0)")
    amount = number_value(d["amount"], where, "amount")
    if amount <= 0:
        raise fail(where, f"amount must be above 0, got {amount:g}")
    period = d.get("period")
    if period not in PERIODS:
        raise fail(where, f"period must be one of {', '.join(PERIODS)}, got {period!r}")
    tz = timezone_name(d.get("timezone"), where)
    custom_start = custom_end = None
    if period == "custom":
        custom_start = instant_value(d.get("custom_start"), tz, where, "custom_start")
        custom_end = instant_value(d.get("custom_end"), tz, where, "custom_end")
        if custom_end <= custom_start:
            raise fail(where, "custom_end must be after custom_start")
        if custom_end - custom_start > timedelta(days=400):
            raise fail(where, "a custom period may be at most 400 days long")
    elif d.get("custom_start") not in (None, "") or d.get("custom_end") not in (None, ""):
        raise fail(where, f"custom_start/custom_end apply only to a custom period, not {period}")
    currency = (text_value(d.get("currency"), where, "currency", required=False) or "USD").upper()
    if not _CURRENCY.fullmatch(currency):
        raise fail(where, f"currency must be a 3-letter code like USD, got {currency!r}")
    idle = d.get("idle_policy")
    if idle in (None, "", "configured"):
        idle = None
    elif idle not in IDLE_POLICIES:
        raise fail(
            where,
            f"idle_policy must be one of {', '.join(IDLE_POLICIES)} or configured, got {idle!r}",
        )
    thresholds = (
        parse_thresholds(d["thresholds"], where) if "thresholds" in d else (50.0, 80.0, 100.0)
    )
    budget = Budget(
        name=name,
        amount=amount,
        period=period,
        owner=text_value(d.get("owner"), where, "owner") or "",
        scope=validate_scope(d.get("scope"), where),
        timezone=tz,
        week_start=week_start_value(d["week_start"], where)
        if d.get("week_start") is not None
        else 0,
        reset_day=(
            integer_value(d["reset_day"], where, "reset_day", 1, 28)
            if d.get("reset_day") is not None
            else 1
        ),
        custom_start=custom_start,
        custom_end=custom_end,
        currency=currency,
        thresholds=thresholds,
        forecast_alert=(
            bool_value(d["forecast_alert"], where, "forecast_alert")
            if d.get("forecast_alert") is not None
            else True
        ),
        idle_policy=idle,
        channels=name_list(d.get("channels"), where, "channels"),
        note=text_value(d.get("note"), where, "note", required=False),
        source=source,
    )
    return budget


def resolve_default(threshold: float) -> float:
    """The resolve threshold a rule gets when it names none: :data:`HYSTERESIS` below it."""
    return threshold - HYSTERESIS * abs(threshold)


def rule_from_mapping(
    d: Mapping[str, Any], *, source: str = "ui", where: str | None = None
) -> AlertRule:
    """A validated :class:`AlertRule` from a plain mapping; kind defaults fill window_s,
    threshold and resolve_threshold (:data:`KIND_DEFAULTS`, :func:`resolve_default`). The
    spellings of :data:`_RULE_ALIASES` (window: 1h ...) are accepted too."""
    where = _where("rule", d, where)
    check_keys(d, (*_RULE_FIELDS, *_RULE_ALIASES), where)
    d = dict(d)
    for alias, field_name in _RULE_ALIASES.items():
        if alias in d:
            if field_name in d:
                raise fail(where, f"give {alias!r} or {field_name!r}, not both")
            d[field_name] = d.pop(alias)
    if source not in SOURCES:
        raise fail(where, f"source must be one of {', '.join(SOURCES)}")
    name = validate_name(d.get("name"), where)
    kind = d.get("kind")
    if kind not in KINDS:
        hint = difflib.get_close_matches(str(kind), KINDS, n=1)
        tip = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise fail(where, f"kind must be one of {', '.join(KINDS)}, got {kind!r}{tip}")
    defaults = KIND_DEFAULTS[kind]
    budget_name = d.get("budget_name")
    if kind in BUDGET_KINDS:
        budget_name = validate_name(budget_name, where, "budget_name (the budget it watches)")
    elif budget_name not in (None, ""):
        raise fail(where, f"budget_name applies only to {' and '.join(BUDGET_KINDS)} rules")
    else:
        budget_name = None
    window_s = (
        parse_duration(d["window_s"], where, "window_s")
        if d.get("window_s") not in (None, "")
        else defaults.window_s
    )
    if window_s <= 0:
        raise fail(where, "window_s must be above 0")
    threshold = (
        number_value(d["threshold"], where, "threshold")
        if d.get("threshold") not in (None, "")
        else defaults.threshold
    )
    if d.get("resolve_threshold") not in (None, ""):
        resolve = number_value(d["resolve_threshold"], where, "resolve_threshold")
        if resolve > threshold:
            raise fail(
                where,
                f"resolve_threshold {resolve:g} must be at most threshold {threshold:g} "
                "(the alert resolves once the value falls below it)",
            )
    else:
        resolve = resolve_default(threshold)
    group_by = name_list(d.get("group_by"), where, "group_by")
    for dim in group_by:
        if dim not in DIMENSIONS:
            raise fail(
                where, f"group_by has unknown dimension {dim!r}; use {', '.join(DIMENSIONS)}"
            )
    group_by = tuple(dim for dim in DIMENSIONS if dim in group_by)
    severity = d.get("severity") or "warning"
    if severity not in SEVERITIES:
        raise fail(where, f"severity must be one of {', '.join(SEVERITIES)}, got {severity!r}")

    def seconds(key: str, default: int) -> int:
        return parse_duration(d[key], where, key) if d.get(key) not in (None, "") else default

    repeat_s = seconds("repeat_s", 86400)
    if repeat_s <= 0:
        raise fail(where, "repeat_s must be above 0")
    return AlertRule(
        name=name,
        kind=kind,
        owner=text_value(d.get("owner"), where, "owner") or "",
        window_s=window_s,
        threshold=threshold,
        resolve_threshold=resolve,
        scope=validate_scope(d.get("scope"), where),
        group_by=group_by,
        budget_name=budget_name,
        params=params_value(d.get("params"), where),
        pending_s=seconds("pending_s", 0),
        resolve_s=seconds("resolve_s", 300),
        repeat_s=repeat_s,
        severity=severity,
        channels=name_list(d.get("channels"), where, "channels"),
        enabled=bool_value(d["enabled"], where, "enabled")
        if d.get("enabled") is not None
        else True,
        note=text_value(d.get("note"), where, "note", required=False),
        source=source,
    )


def channel_from_mapping(
    d: Mapping[str, Any], *, source: str = "ui", where: str | None = None
) -> Channel:
    """A validated :class:`Channel`. webhook: url (http/https), secret or secret_env, headers
    (text to text), timeout_s; slack: url; email: host, port (default 587), sender,
    to (a list of addresses), starttls (default true), username, password or password_env."""
    where = _where("channel", d, where)
    check_keys(d, _CHANNEL_FIELDS, where)
    if source not in SOURCES:
        raise fail(where, f"source must be one of {', '.join(SOURCES)}")
    name = validate_name(d.get("name"), where)
    kind = d.get("kind")
    if kind not in CHANNEL_KINDS:
        raise fail(where, f"kind must be one of {', '.join(CHANNEL_KINDS)}, got {kind!r}")
    raw = d.get("config") or {}
    required, optional = _CHANNEL_CONFIG[kind]
    check_keys(raw, (*required, *optional), f"{where}: config")
    cfg: dict[str, Any] = {}
    if kind in ("webhook", "slack"):
        cfg["url"] = url_value(raw.get("url"), where, "url")
    if kind == "webhook":
        if raw.get("secret") and raw.get("secret_env"):
            raise fail(where, "give secret or secret_env, not both")
        if raw.get("secret"):
            cfg["secret"] = text_value(raw["secret"], where, "secret")
        if raw.get("secret_env"):
            cfg["secret_env"] = env_name(raw["secret_env"], where, "secret_env")
        headers = raw.get("headers") or {}
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9-]{1,100}", k) and isinstance(v, str)
            for k, v in headers.items()
        ):
            raise fail(where, "headers must map header names to text values")
        if headers:
            cfg["headers"] = dict(headers)
    if kind == "email":
        cfg["host"] = text_value(raw.get("host"), where, "host")
        # ssl: implicit TLS from the first byte (port 465); else STARTTLS on 587 by default
        ssl = bool_value(raw.get("ssl", False), where, "ssl")
        cfg["port"] = integer_value(raw.get("port", 465 if ssl else 587), where, "port", 1, 65535)
        cfg["starttls"] = bool_value(raw.get("starttls", not ssl), where, "starttls")
        if ssl and cfg["starttls"]:
            raise fail(where, "give ssl (implicit TLS) or starttls, not both")
        if ssl:
            cfg["ssl"] = True
        if raw.get("ca_file"):
            cfg["ca_file"] = text_value(raw["ca_file"], where, "ca_file")
        cfg["sender"] = email_address(raw.get("sender"), where, "sender")
        to = raw.get("to")
        if isinstance(to, str):
            to = [p for p in to.split(",") if p.strip()]
        if not isinstance(to, list | tuple) or not to:
            raise fail(where, "to must be a list of one or more addresses")
        cfg["to"] = [email_address(a, where, "to") for a in to]
        if raw.get("username"):
            cfg["username"] = text_value(raw["username"], where, "username")
        if raw.get("password") and raw.get("password_env"):
            raise fail(where, "give password or password_env, not both")
        if raw.get("password"):
            cfg["password"] = text_value(raw["password"], where, "password")
        if raw.get("password_env"):
            cfg["password_env"] = env_name(raw["password_env"], where, "password_env")
    if raw.get("timeout_s") is not None:
        timeout = number_value(raw["timeout_s"], where, "timeout_s")
        if not 0 < timeout <= 120:
            raise fail(where, "timeout_s must be above 0 and at most 120 seconds")
        cfg["timeout_s"] = timeout
    return Channel(name=name, kind=kind, config=cfg, source=source)


def parse_alerts_yaml(text: str, *, origin: str) -> AlertsConfig:
    """The alerts file's content (top-level `budgets:`, `rules:`, `channels:`, each a list) as
    a validated :class:`AlertsConfig` with source 'file'. Messages start with
    "alerts file <origin>: rule #3 (name): ..."; names must be unique per kind, and every
    budget or channel a rule or budget names must be in the file (the file is self-contained:
    a file entry never depends on a UI one)."""
    where = f"alerts file {origin}"
    data = parse_yaml(text, where, ConfigError)
    if data is None:
        return AlertsConfig()
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping with budgets, rules and channels")
    check_keys(data, ("budgets", "rules", "channels"), where)

    def entries(key: str) -> list[tuple[str, Mapping[str, Any]]]:
        items = data.get(key) or []
        if not isinstance(items, list):
            raise ConfigError(f"{where}: {key} must be a list")
        out = []
        for i, item in enumerate(items, 1):
            label = key[:-1]
            name = item.get("name") if isinstance(item, Mapping) else None
            shown = f" ({name})" if isinstance(name, str) and name else ""
            out.append((f"{where}: {label} #{i}{shown}", item))
        return out

    channels = tuple(
        channel_from_mapping(d, source="file", where=w) for w, d in entries("channels")
    )
    budgets = tuple(budget_from_mapping(d, source="file", where=w) for w, d in entries("budgets"))
    rules = tuple(rule_from_mapping(d, source="file", where=w) for w, d in entries("rules"))
    for label, items in (("channel", channels), ("budget", budgets), ("rule", rules)):
        names = [x.name for x in items]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"{where}: {label} {dupes[0]!r} is defined twice")
    check_references(AlertsConfig(budgets, rules, channels), where=where)
    return AlertsConfig(budgets=budgets, rules=rules, channels=channels)


def check_references(
    config: AlertsConfig,
    *,
    where: str,
    budgets: set[str] | frozenset[str] = frozenset(),
    channels: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Every channel a budget or rule names, and every budget a rule watches, exists in
    `config` or in the extra names given; ConfigError naming the first one missing."""
    known_channels = {c.name for c in config.channels} | set(channels)
    known_budgets = {b.name for b in config.budgets} | set(budgets)
    for b in config.budgets:
        for ch in b.channels:
            if ch not in known_channels:
                raise ConfigError(f"{where}: budget {b.name!r} names unknown channel {ch!r}")
    for r in config.rules:
        for ch in r.channels:
            if ch not in known_channels:
                raise ConfigError(f"{where}: rule {r.name!r} names unknown channel {ch!r}")
        if r.budget_name is not None and r.budget_name not in known_budgets:
            raise ConfigError(f"{where}: rule {r.name!r} watches unknown budget {r.budget_name!r}")
