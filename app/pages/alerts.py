"""Alerts: the open alerts (state, severity, rule, scope, value against threshold, since, owner,
a link to the dashboard filtered to it) with an acknowledge control for analysts and admins;
the history, a page at a time, every alert with its events and who acknowledged it; the rules;
the silences (active and ended); the channels; and the delivery log.

Numbers: ledger.alert_history (written by the evaluator, ledger/alert_engine.py),
ledger.alert_rules, ledger.outbox (docs/alerts.md). Rules, silences and channels are edited on
the admin page /admin/alerts (app/pages/admin_alerts.py).

Acknowledging needs the analyst role: whoever is on call takes an alert on (it stops the
repeat notifications, never an escalation or the resolve; docs/alerts.md). A viewer sees the
alerts but no acknowledge control, and the callback refuses one on the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import dash
from dash import Input, Output, State, callback, ctx, dcc, html

from app import context
from app.auth import RoleRequiredError
from app.components import TICK_ID, URL_ID, badge, ids, may, pager, pager_state, turned_offset, when
from app.pages.alerts_forms import duration_text
from inferledger.core.errors import InferLedgerError
from ledger import alert_history, alert_rules, outbox
from models.alert_config import DIMENSIONS, AlertRule, Channel

dash.register_page(__name__, path="/alerts", name="Alerts", title="Alerts · InferLedger", order=51)

ID = ids("alerts")
EDIT_PATH = "/admin/alerts"
HISTORY_PAGE = 20
DELIVERIES_SHOWN = 50
#: Who may acknowledge an alert (see the module docstring).
ACK_ROLE = "analyst"


def scope_text(scope: Mapping[str, Any]) -> str:
    parts = [f"{d}={scope[d]}" for d in DIMENSIONS if scope.get(d)]
    parts += [f"{k}={v}" for k, v in scope.items() if k not in DIMENSIONS and v]
    return ", ".join(parts) or "whole organisation"


def number_text(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"


def table(head: list[str], rows: list[list[Any]], empty: str, **extra: Any) -> Any:
    if not rows:
        return html.P(empty, className="empty-state", role="status")
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h, scope="col") for h in head])),
            html.Tbody([html.Tr([html.Td(c) for c in row]) for row in rows]),
        ],
        className="table admin-table",
        **extra,
    )


def _section(title: str, *children: Any) -> html.Section:
    return html.Section(
        [html.H2(title, className="card-title"), *children],
        className="card admin-card",
        **{"aria-label": title},
    )


def _ack_controls() -> html.Div:
    """Hidden from those who may not acknowledge (its callbacks check the role too)."""
    return html.Div(
        [
            html.Label("Acknowledge alert", htmlFor=ID("ack-pick"), className="admin-label"),
            dcc.Dropdown(id=ID("ack-pick"), options=[], placeholder="Choose an open alert"),
            dcc.Input(id=ID("ack-note"), type="text", placeholder="Note (optional)"),
            html.Button("Acknowledge", id=ID("ack"), n_clicks=0, className="button"),
        ],
        className="admin-grid",
        id=ID("ack-controls"),
        hidden=not may(ACK_ROLE),
    )


def layout(**_kwargs: object) -> html.Div:
    return html.Div(
        [
            html.Div(
                [
                    html.H1("Alerts"),
                    html.P(
                        [
                            "Alerts move pending → firing → resolved; one open alert per rule "
                            "and scope. Evaluated every minute and after each ledger refresh.",
                            *(
                                [" ", dcc.Link("Edit rules, silences and channels",
                                               href=EDIT_PATH, id=ID("edit"))]
                                if may("admin")
                                else []
                            ),
                        ],
                        className="page-lead",
                    ),
                ],
                className="page-head",
            ),
            html.Div(id=ID("message"), role="status", **{"aria-live": "polite"}),
            dcc.Tabs(
                [
                    dcc.Tab([_section(title, *body)], label=label, value=value,
                            id=ID(f"tab-{value}"))
                    for value, label, title, body in (
                        ("open", "Open", "Open alerts", (_ack_controls(), html.Div(id=ID("open")))),
                        ("history", "History", "History", (html.Div(id=ID("history")), pager(ID))),
                        ("rules", "Rules", "Rules", (html.Div(id=ID("rules")),)),
                        ("silences", "Silences", "Silences", (html.Div(id=ID("silences")),)),
                        ("channels", "Channels", "Channels", (html.Div(id=ID("channels")),)),
                        ("deliveries", "Deliveries", "Delivery log",
                         (html.Div(id=ID("deliveries")),)),
                    )
                ],
                id=ID("tabs"),
                value="open",
            ),
            dcc.Store(id=ID("version"), data=0),
            dcc.Store(id=ID("offset"), data=0),
        ],
        className="page alerts-page",
    )  # fmt: skip


def value_text(a: alert_history.AlertRecord) -> str:
    unit = " %" if a.kind in ("budget_threshold", "budget_forecast") else ""
    text = f"{number_text(a.value)}{unit} vs {number_text(a.threshold)}{unit}"
    if a.peak_value is not None and a.peak_value != a.value:
        text += f" (peak {number_text(a.peak_value)}{unit})"
    return text


def _open_rows(found: list[alert_history.AlertRecord]) -> list[list[Any]]:
    return [
        [
            f"#{a.alert_id}",
            badge(a.state),
            badge(a.severity),
            a.rule_name,
            scope_text(a.scope),
            value_text(a),
            when(a.fired_at or a.pending_since),
            a.owner,
            html.A("View", href=a.link) if a.link else "–",
            f"{a.acknowledged_by} at {when(a.acknowledged_at)}" if a.acknowledged_by else "–",
        ]
        for a in found
    ]


@callback(
    Output(ID("open"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),
    Input(ID("version"), "data"),
)
def _open(_search: str | None, _tick: int | None, _version: int) -> Any:
    found = alert_history.open_alerts(context.storage())
    head = ["#", "State", "Severity", "Rule", "Scope", "Value vs threshold", "Since", "Owner",
            "Link", "Acknowledged"]  # fmt: skip
    return table(head, _open_rows(found), "No open alerts.", id=ID("open-table"))


@callback(
    Output(ID("ack-pick"), "options"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),
    Input(ID("version"), "data"),
)
def _ack_options(_search: str | None, _tick: int | None, _version: int) -> list[dict]:
    try:
        context.require_role(ACK_ROLE)
    except RoleRequiredError:
        return []
    return [
        {"label": f"#{a.alert_id} {a.rule_name} ({scope_text(a.scope)})", "value": a.alert_id}
        for a in alert_history.open_alerts(context.storage())
        if not a.acknowledged_by
    ]


@callback(
    Output(ID("message"), "children"),
    Output(ID("version"), "data"),
    Input(ID("ack"), "n_clicks"),
    State(ID("ack-pick"), "value"),
    State(ID("ack-note"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _acknowledge(_clicks: int, alert_id: int | None, note: str | None, version: int) -> Any:
    """Record who took the alert on (ledger.alert_history.acknowledge: open alerts, once)."""
    try:
        user = context.require_role(ACK_ROLE)
        if alert_id is None:
            raise RoleRequiredError("Choose an open alert to acknowledge.")
        who = user.name if user else "anonymous (sign-in off)"
        a = alert_history.acknowledge(
            context.storage(), int(alert_id), by=who, note=(note or "").strip()
        )
    except (RoleRequiredError, InferLedgerError) as exc:
        return html.P(str(exc), className="auth-error", role="alert"), version
    done = f"Acknowledged alert #{a.alert_id} ({a.rule_name}) as {who}."
    return html.P(done, className="admin-ok", role="status"), (version or 0) + 1


def _event_text(e: alert_history.AlertEvent) -> str:
    who = "" if e.actor in ("evaluator", "dispatcher") else f" by {e.actor}"
    note = f" ({e.detail['note']})" if e.detail.get("note") else ""
    channel = f" via {e.detail['channel']}" if e.detail.get("channel") else ""
    return f"{e.event_at.astimezone(UTC):%m-%d %H:%M} {e.event}{who}{channel}{note}"


@callback(
    Output(ID("history"), "children"),
    Output(ID("page-info"), "children"),
    Output(ID("newer"), "disabled"),
    Output(ID("older"), "disabled"),
    Input(ID("offset"), "data"),
    Input(TICK_ID, "data"),
    Input(ID("version"), "data"),
)
def _history(offset: int | None, _tick: int | None, _version: int) -> tuple[Any, str, bool, bool]:
    """A page of alerts, newest first, each with its events (read on the server)."""
    storage = context.storage()
    total = alert_history.count_alerts(storage)
    start = min(offset or 0, max(0, total - 1))
    found = alert_history.alert_history(storage, offset=start, limit=HISTORY_PAGE)
    rows = [
        [
            f"#{a.alert_id}",
            badge(a.state),
            badge(a.severity),
            a.rule_name,
            scope_text(a.scope),
            f"peak {number_text(a.peak_value)}",
            html.Ul([html.Li(_event_text(e)) for e in a.events], className="alert-events"),
        ]
        for a in found
    ]
    head = ["#", "State", "Severity", "Rule", "Scope", "Value", "Events (who acknowledged)"]
    info, newer, older = pager_state(start, len(found), total)
    return (
        table(head, rows, "No alerts yet.", id=ID("history-table")),
        info.replace("Changes", "Alerts"),
        newer,
        older,
    )


@callback(
    Output(ID("offset"), "data"),
    Input(ID("newer"), "n_clicks"),
    Input(ID("older"), "n_clicks"),
    State(ID("offset"), "data"),
    prevent_initial_call=True,
)
def _turn(_newer: int, _older: int, offset: int | None) -> int:
    return turned_offset(ctx.triggered_id == ID("older"), offset, HISTORY_PAGE)


def rule_rows(rules: list[AlertRule]) -> list[list[Any]]:
    return [
        [
            r.name,
            r.kind,
            scope_text(r.scope),
            ", ".join(r.group_by) or "–",
            r.budget_name or "–",
            duration_text(r.window_s),
            f"{number_text(r.threshold)} / {number_text(r.resolve_threshold)}",
            f"{duration_text(r.pending_s)} / {duration_text(r.resolve_s)} / "
            f"{duration_text(r.repeat_s)}",
            badge(r.severity),
            r.owner,
            ", ".join(r.channels) or "–",
            "yes" if r.enabled else "no",
            "alerts file" if r.source == "file" else r.source,
        ]
        for r in rules
    ]


RULE_HEAD = [
    *("Rule", "Kind", "Scope", "Group by", "Budget", "Window", "Fire / resolve at"),
    *("Pending / resolve / repeat", "Severity", "Owner", "Channels", "Enabled", "Source"),
]


def channel_target(c: Channel) -> str:
    """Where a channel sends, without its secrets: the URL's host, or the addresses."""
    cfg = c.config
    if c.kind == "email":
        return f"{', '.join(cfg.get('to', []))} via {cfg.get('host')}:{cfg.get('port', 587)}"
    if cfg.get("url"):
        host = urlsplit(str(cfg["url"])).netloc
        return f"{host} (signed)" if cfg.get("secret") or cfg.get("secret_env") else host
    return f"URL from ${cfg['url_env']}" if cfg.get("url_env") else "–"


def silence_state(s: Any, now: datetime) -> str:
    if s.ended_at is not None:
        return f"ended {when(s.ended_at)}"
    if s.ends_at <= now:
        return "expired"
    return "active" if s.starts_at <= now else "scheduled"


def silence_rows(silences: list[Any], names: Mapping[str, str], now: datetime) -> list[list[Any]]:
    return [
        [
            f"#{s.silence_id}",
            names.get(s.rule_key, s.rule_key) if s.rule_key else "any rule",
            scope_text(s.scope),
            when(s.starts_at),
            when(s.ends_at),
            s.reason,
            s.created_by,
            silence_state(s, now),
        ]
        for s in silences
    ]


SILENCE_HEAD = ["#", "Rule", "Scope", "From", "Until", "Reason", "By", "State"]


@callback(
    Output(ID("rules"), "children"),
    Output(ID("silences"), "children"),
    Output(ID("channels"), "children"),
    Output(ID("deliveries"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),
    Input(ID("version"), "data"),
)
def _config(_search: str | None, _tick: int | None, _version: int) -> tuple[Any, ...]:
    storage = context.storage()
    now = datetime.now(UTC)
    rules = alert_rules.list_rules(storage)
    names = {r.key: r.name for r in alert_rules.list_rules(storage, include_archived=True)}
    silences = alert_rules.list_silences(storage, include_ended=True)
    channels = alert_rules.list_channels(storage)
    deliveries = outbox.delivery_log(storage, limit=DELIVERIES_SHOWN)
    return (
        table(RULE_HEAD, rule_rows(rules), "No rules yet.", id=ID("rules-table")),
        table(SILENCE_HEAD, silence_rows(silences, names, now), "No silences.",
              id=ID("silences-table")),
        table(
            ["Channel", "Kind", "Sends to", "Source"],
            [[c.name, c.kind, channel_target(c),
              "alerts file" if c.source == "file" else c.source] for c in channels],
            "No channels yet.",
            id=ID("channels-table"),
        ),
        table(
            ["When", "Channel", "Notification", "Result", "Status", "Error", "Took"],
            [
                [when(d.attempted_at), d.channel,
                 "test" if d.notification_id is None else f"#{d.notification_id}",
                 "ok" if d.ok else "failed", "–" if d.status_code is None else str(d.status_code),
                 d.error or "", f"{d.duration_s:.2f} s"]
                for d in deliveries
            ],
            "No delivery attempts yet.",
            id=ID("deliveries-table"),
        ),
    )  # fmt: skip
