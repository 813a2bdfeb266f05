"""Alerts, editing (admins only): create, edit and archive alert rules with every field;
create and end silences (rule or any, scope, expiry, a reason that is required); create,
edit and archive channels (webhook, Slack, email) and send a test message through one, which
the delivery log records. The Alerts page (/alerts) shows all of it to everyone.

As on /admin/budgets, the callbacks live in an admin page's module, so the sign-in guard
refuses a viewer's forged call (403) before it runs. Rules and channels go through
models.alert_config's validators (rule_from_mapping, channel_from_mapping), the alerts file's
own, so the UI and the YAML say the same thing; nothing is written on an error. Entries from
the alerts file are listed but not editable here.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import dash
from dash import Input, Output, State, callback, ctx, dcc, html

from app import context
from app.auth import RoleRequiredError
from app.components import config_changes_table, form_fields, ids
from app.pages.alerts_forms import (
    CHANNEL_EXAMPLES,
    RULE_FORM,
    duration_text,
    json_object,
    masked,
    parse_scope_text,
    rule_mapping,
    rule_values,
    test_message,
    unmasked,
)
from inferledger.core import notify
from inferledger.core.errors import InferLedgerError
from ledger import alert_rules, budgets, outbox
from models.alert_config import (
    CHANNEL_KINDS,
    DIMENSIONS,
    KIND_DEFAULTS,
    KINDS,
    SEVERITIES,
    ConfigError,
    channel_from_mapping,
    rule_from_mapping,
)

dash.register_page(
    __name__,
    path="/admin/alerts",
    name="Edit alerts",
    title="Edit alerts · InferLedger",
    order=104,
    min_role="admin",
)

ID = ids("admin-alerts")
#: How many of the latest rule, silence and channel changes the page lists.
CHANGES_SHOWN = 20
#: How long a "send test" waits for the channel.
TEST_TIMEOUT_S = 10.0


_field, _text = form_fields(ID)


def _rules_card() -> html.Section:
    return html.Section(
        [
            html.H2("Create or edit a rule", className="card-title"),
            _field("Edit rule", dcc.Dropdown(id=ID("rule-pick"), options=[],
                   placeholder="New rule (or choose one to edit)"), "rule-pick"),
            html.Div(
                [
                    _text("rule-name", "Name"),
                    _field("Kind", dcc.Dropdown(id=ID("rule-kind"), options=list(KINDS),
                           value="spend_spike", clearable=False), "rule-kind"),
                    *(_text(f"rule-scope-{d}", f"Scope: {d} (empty = any)") for d in DIMENSIONS),
                    _field("Group by (one alert per value)", dcc.Dropdown(
                        id=ID("rule-group-by"), options=list(DIMENSIONS), multi=True, value=[]),
                        "rule-group-by"),
                    _field("Budget (budget kinds)", dcc.Dropdown(id=ID("rule-budget"),
                           options=[]), "rule-budget"),
                    _text("rule-window", "Window (e.g. 1h, 15m; empty: the kind's default)"),
                    _text("rule-threshold", "Threshold (empty: the kind's default)"),
                    _text("rule-resolve-threshold", "Resolve below (empty: 10 % under)"),
                    _text("rule-pending", "Pending for (e.g. 5m)", value="0"),
                    _text("rule-resolve", "Resolve after (e.g. 5m)", value="5m"),
                    _text("rule-repeat", "Repeat every (e.g. 1d)", value="1d"),
                    _field("Severity", dcc.Dropdown(id=ID("rule-severity"),
                           options=list(SEVERITIES), value="warning", clearable=False),
                           "rule-severity"),
                    _text("rule-owner", "Owner (who answers for it)"),
                    _field("Channels", dcc.Dropdown(id=ID("rule-channels"), options=[],
                           multi=True, value=[]), "rule-channels"),
                    _field("Enabled", dcc.Checklist(id=ID("rule-enabled"),
                           options=[{"label": " evaluate this rule", "value": "on"}],
                           value=["on"]), "rule-enabled"),
                    _field("Parameters (JSON object)", dcc.Textarea(id=ID("rule-params"),
                           value="{}", rows=2), "rule-params"),
                    _text("rule-note", "Note"),
                ],
                className="admin-grid",
            ),
            html.P(id=ID("rule-unit"), className="admin-intro"),
            html.Button("Save rule", id=ID("rule-save"), n_clicks=0, className="button"),
            html.Button("Archive rule", id=ID("rule-archive"), n_clicks=0, className="button"),
        ],
        className="card admin-card",
        **{"aria-label": "Create or edit a rule"},
    )  # fmt: skip


def _silences_card() -> html.Section:
    return html.Section(
        [
            html.H2("Silences", className="card-title"),
            html.P(
                "A silence stops notifications (alerts still change state, and the history "
                "says they were silenced) for one rule or any, in a scope, until it expires.",
                className="admin-intro",
            ),
            html.Div(
                [
                    _field("Rule", dcc.Dropdown(id=ID("silence-rule"), options=[],
                           placeholder="Any rule"), "silence-rule"),
                    _text("silence-scope", "Scope (team=search, app=chat; empty = all)"),
                    _field("For (hours)", dcc.Input(id=ID("silence-hours"), type="number",
                           min=0, step="any", value=2), "silence-hours"),
                    _text("silence-reason", "Reason (required)"),
                ],
                className="admin-grid",
            ),
            html.Button("Add silence", id=ID("silence-add"), n_clicks=0, className="button"),
            html.Div(
                [
                    _field("Active silence", dcc.Dropdown(id=ID("silence-pick"), options=[],
                           placeholder="Choose"), "silence-pick"),
                ],
                className="admin-grid",
            ),
            html.Button("End it now", id=ID("silence-end"), n_clicks=0, className="button"),
        ],
        className="card admin-card",
        **{"aria-label": "Silences"},
    )  # fmt: skip


def _channels_card() -> html.Section:
    return html.Section(
        [
            html.H2("Channels", className="card-title"),
            html.P(
                "Webhook: JSON body, HMAC-SHA256 signature header with a secret (give "
                "secret_env to keep it out of the database). Slack: an incoming-webhook URL. "
                "Email: SMTP with STARTTLS and sign-in (docs/alerts.md).",
                className="admin-intro",
            ),
            _field("Edit channel", dcc.Dropdown(id=ID("channel-pick"), options=[],
                   placeholder="New channel (or choose one to edit)"), "channel-pick"),
            html.Div(
                [
                    _text("channel-name", "Name"),
                    _field("Kind", dcc.Dropdown(id=ID("channel-kind"),
                           options=list(CHANNEL_KINDS), value="webhook", clearable=False),
                           "channel-kind"),
                    _field("Settings (JSON object)", dcc.Textarea(id=ID("channel-config"),
                           placeholder=CHANNEL_EXAMPLES["webhook"], rows=3), "channel-config"),
                ],
                className="admin-grid",
            ),
            html.Button("Save channel", id=ID("channel-save"), n_clicks=0, className="button"),
            html.Button("Archive channel", id=ID("channel-archive"), n_clicks=0,
                        className="button"),
            html.Button("Send test", id=ID("channel-test"), n_clicks=0, className="button"),
            html.Div(id=ID("test-result"), role="status", **{"aria-live": "polite"}),
        ],
        className="card admin-card",
        **{"aria-label": "Channels"},
    )  # fmt: skip


def layout(**_kwargs: object) -> html.Div:
    return html.Div(
        [
            html.H1("Edit alerts"),
            html.P(
                [
                    "Rules, silences and channels; what they produce is on ",
                    dcc.Link("Alerts", href="/alerts"),
                    ". A rule fires once its value has held at or above the threshold for the "
                    "pending time and resolves once it has stayed below the resolve threshold "
                    "for the resolve time (docs/alert-kinds.md defines each kind's value).",
                ],
                className="admin-intro",
            ),
            html.Div(id=ID("message"), role="status", **{"aria-live": "polite"}),
            _rules_card(),
            _silences_card(),
            _channels_card(),
            html.Section(
                [
                    html.H2("Changes", className="card-title"),
                    html.P(
                        f"The latest {CHANGES_SHOWN} changes to rules, silences and channels "
                        "(budgets': on Edit budgets).",
                        className="admin-intro",
                    ),
                    html.Div(id=ID("changes"), className="admin-table-wrap"),
                ],
                className="card admin-card",
                **{"aria-label": "Changes"},
            ),
            dcc.Store(id=ID("version"), data=0),
        ],
        className="admin-page",
    )


def _who(admin: Any) -> str:
    return admin.name if admin else "anonymous (sign-in off)"


def _error(exc: Exception) -> html.P:
    return html.P(str(exc), className="auth-error", role="alert")


def _ok(text: str) -> html.P:
    return html.P(text, className="admin-ok", role="status")


def _options(items: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "label": i.name + (" (from the alerts file: edit the file)" if i.source == "file"
                               else ""),
            "value": i.name,
            "disabled": i.source == "file",
        }
        for i in items
    ]  # fmt: skip


@callback(
    Output(ID("rule-pick"), "options"),
    Output(ID("rule-budget"), "options"),
    Output(ID("rule-channels"), "options"),
    Output(ID("silence-rule"), "options"),
    Output(ID("silence-pick"), "options"),
    Output(ID("channel-pick"), "options"),
    Input(ID("version"), "data"),
)
def _show(_version: int) -> tuple[Any, ...]:
    try:
        context.require_role("admin")
    except RoleRequiredError:
        return [], [], [], [], [], []
    storage = context.storage()
    rules = alert_rules.list_rules(storage)
    channels = alert_rules.list_channels(storage)
    now = datetime.now(UTC)
    active = alert_rules.list_silences(storage, at=now)
    names = {r.key: r.name for r in alert_rules.list_rules(storage, include_archived=True)}
    return (
        _options(rules),
        [b.name for b in budgets.list_budgets(storage)],
        [c.name for c in channels],
        [{"label": r.name, "value": r.key} for r in rules],
        [
            {
                "label": f"#{s.silence_id} {names.get(s.rule_key, 'any rule')}: {s.reason} "
                f"(until {s.ends_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC)",
                "value": s.silence_id,
            }
            for s in active
        ],
        _options(channels),
    )


@callback(Output(ID("changes"), "children"), Input(ID("version"), "data"))
def _changes(_version: int) -> Any:
    """The latest changes to rules, silences and channels (config_changes), newest first."""
    try:
        context.require_role("admin")
    except RoleRequiredError as exc:
        return _error(exc)
    page = budgets.changes_page(
        context.storage(), ("rule", "silence", "channel"), limit=CHANGES_SHOWN
    )
    if not page.changes:
        return html.P("No changes yet.", className="empty-state")
    return config_changes_table(page.changes, kinds=True)


@callback(Output(ID("rule-unit"), "children"), Input(ID("rule-kind"), "value"))
def _unit(kind: str | None) -> str:
    d = KIND_DEFAULTS.get(kind or "")
    if d is None:
        return ""
    return (
        f"{kind}: the value is {d.unit}; by default over {duration_text(d.window_s)}, "
        f"firing at {d.threshold:g}."
    )


@callback(
    *(Output(ID(name), "value") for name in RULE_FORM),
    Input(ID("rule-pick"), "value"),
    prevent_initial_call=True,
)
def _rule_pick(name: str | None) -> tuple[Any, ...]:
    try:
        context.require_role("admin")
    except RoleRequiredError:
        return (dash.no_update,) * len(RULE_FORM)
    chosen = alert_rules.get_rule(context.storage(), name) if name else None
    if chosen is None:
        return (dash.no_update,) * len(RULE_FORM)
    return rule_values(chosen)


@callback(
    Output(ID("message"), "children"),
    Output(ID("version"), "data"),
    Input(ID("rule-save"), "n_clicks"),
    Input(ID("rule-archive"), "n_clicks"),
    State(ID("rule-pick"), "value"),
    *(State(ID(name), "value") for name in RULE_FORM),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _rule_change(_save: int, _archive: int, picked: str | None, *form: Any) -> tuple[Any, int]:
    """Save the rule form (validated as the alerts file is) or archive the picked rule."""
    *values, version = form
    try:
        who = _who(context.require_role("admin"))
        storage = context.storage()
        if ctx.triggered_id == ID("rule-archive"):
            if not picked:
                raise ConfigError("Choose a rule to archive.")
            alert_rules.archive_rule(storage, picked, by=who)
            done = f"Archived rule {picked}: its open alerts stop being evaluated."
        else:
            rule = rule_from_mapping(rule_mapping(dict(zip(RULE_FORM, values, strict=True))))
            saved = alert_rules.save_rule(storage, rule, by=who, replace=picked or None)
            done = f"{'Saved' if picked else 'Created'} rule {saved.name} ({saved.kind})."
    except (RoleRequiredError, InferLedgerError, ValueError) as exc:
        return _error(exc), version
    return _ok(done), (version or 0) + 1


@callback(
    Output(ID("message"), "children", allow_duplicate=True),
    Output(ID("version"), "data", allow_duplicate=True),
    Input(ID("silence-add"), "n_clicks"),
    Input(ID("silence-end"), "n_clicks"),
    State(ID("silence-rule"), "value"),
    State(ID("silence-scope"), "value"),
    State(ID("silence-hours"), "value"),
    State(ID("silence-reason"), "value"),
    State(ID("silence-pick"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _silence(_add: int, _end: int, *form: Any) -> tuple[Any, int]:
    """Add a silence from now for the given hours, or end the picked one now."""
    rule_key, scope, hours, reason, picked, version = form
    try:
        who = _who(context.require_role("admin"))
        storage = context.storage()
        if ctx.triggered_id == ID("silence-end"):
            if picked is None:
                raise ConfigError("Choose an active silence to end.")
            alert_rules.end_silence(storage, int(picked), by=who)
            done = f"Ended silence #{picked}."
        else:
            if hours is None or not 0 < float(hours) <= 24 * 90:
                raise ConfigError("silence: for how long: more than 0 and at most 2160 hours")
            now = datetime.now(UTC)
            silence_id = alert_rules.add_silence(
                storage,
                rule_key=rule_key or None,
                scope=parse_scope_text(scope),
                starts_at=now,
                ends_at=now + timedelta(hours=float(hours)),
                reason=reason or "",  # the store refuses a blank one
                by=who,
            )
            done = f"Added silence #{silence_id} for {float(hours):g} h."
    except (RoleRequiredError, InferLedgerError, ValueError) as exc:
        return _error(exc), version
    return _ok(done), (version or 0) + 1


@callback(
    Output(ID("channel-name"), "value"),
    Output(ID("channel-kind"), "value"),
    Output(ID("channel-config"), "value"),
    Input(ID("channel-pick"), "value"),
    prevent_initial_call=True,
)
def _channel_pick(name: str | None) -> tuple[Any, ...]:
    try:
        context.require_role("admin")
    except RoleRequiredError:
        return (dash.no_update,) * 3
    chosen = alert_rules.get_channel(context.storage(), name) if name else None
    if chosen is None:
        return (dash.no_update,) * 3
    return chosen.name, chosen.kind, json.dumps(masked(chosen.config))


@callback(
    Output(ID("channel-config"), "placeholder"),
    Input(ID("channel-kind"), "value"),
)
def _channel_example(kind: str | None) -> str:
    return CHANNEL_EXAMPLES.get(kind or "", "")


@callback(
    Output(ID("message"), "children", allow_duplicate=True),
    Output(ID("version"), "data", allow_duplicate=True),
    Input(ID("channel-save"), "n_clicks"),
    Input(ID("channel-archive"), "n_clicks"),
    State(ID("channel-pick"), "value"),
    State(ID("channel-name"), "value"),
    State(ID("channel-kind"), "value"),
    State(ID("channel-config"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _channel_change(_save: int, _archive: int, *form: Any) -> tuple[Any, int]:
    picked, name, kind, config, version = form
    try:
        who = _who(context.require_role("admin"))
        storage = context.storage()
        if ctx.triggered_id == ID("channel-archive"):
            if not picked:
                raise ConfigError("Choose a channel to archive.")
            alert_rules.archive_channel(storage, picked, by=who)
            done = f"Archived channel {picked}."
        else:
            where = f"channel {(name or '').strip()!r}"
            stored = alert_rules.get_channel(storage, picked) if picked else None
            settings = unmasked(json_object(config, f"{where}: settings"), stored)
            channel = channel_from_mapping(
                {"name": (name or "").strip(), "kind": kind, "config": settings}
            )
            saved = alert_rules.save_channel(storage, channel, by=who, replace=picked or None)
            done = f"{'Saved' if picked else 'Created'} channel {saved.name} ({saved.kind})."
    except (RoleRequiredError, InferLedgerError, ValueError) as exc:
        return _error(exc), version
    return _ok(done), (version or 0) + 1


@callback(
    Output(ID("test-result"), "children"),
    Output(ID("version"), "data", allow_duplicate=True),
    Input(ID("channel-test"), "n_clicks"),
    State(ID("channel-pick"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _send_test(_clicks: int, picked: str | None, version: int) -> tuple[Any, int]:
    """Send a test message through the picked (saved) channel and log the attempt."""
    try:
        who = _who(context.require_role("admin"))
        if not picked:
            raise ConfigError("Choose a saved channel to test.")
        storage = context.storage()
        channel = alert_rules.get_channel(storage, picked)
        if channel is None:
            raise ConfigError(f"no channel named {picked!r}")
        at = datetime.now(UTC)
        result = notify.send(
            channel.kind,
            channel.config,
            test_message(channel, who, at, context.current().settings["auth.public_url"]),
            idempotency_key=f"test-{uuid.uuid4()}",
            timeout_s=TEST_TIMEOUT_S,
        )
        outbox.record_delivery(
            storage, notification_id=None, channel=channel.name, result=result, attempted_at=at
        )
    except (RoleRequiredError, InferLedgerError, ValueError) as exc:
        return _error(exc), version
    if result.ok:
        text = f"Sent: {picked} accepted the test message (status {result.status_code})."
        return _ok(text), (version or 0) + 1
    failed = html.P(f"Failed: {picked}: {result.error}", className="auth-error", role="alert")
    return failed, (version or 0) + 1
