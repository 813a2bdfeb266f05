"""Budgets, editing (admins only): create a budget with every field, pick one to edit, archive
or restore it, and the audit trail of every change (config_changes), a page at a time.

The Budgets page (/budgets) shows the budgets to everyone; this page changes them. Keeping
the editing callbacks in an admin page's module means the sign-in guard answers a forged call
from a viewer 403 before it runs (app/auth/guard.py), and a viewer's /budgets carries no
editing control at all. Budgets from the alerts file (source "file") are listed but not
editable here: the file owns them (docs/budgets.md).

Every form goes through models.alert_config.budget_from_mapping, the validator the alerts file
uses, so the UI and the YAML give the same messages; nothing is written on an error.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dash
from dash import Input, Output, State, callback, ctx, dcc, html

from app import context
from app.auth import RoleRequiredError
from app.components import (
    config_changes_table,
    form_fields,
    ids,
    pager,
    pager_state,
    turned_offset,
)
from app.pages.alerts_forms import BUDGET_FORM as FORM
from app.pages.alerts_forms import WEEKDAYS, budget_values, form_mapping
from ledger import budgets
from models.alert_config import (
    DIMENSIONS,
    IDLE_POLICIES,
    PERIODS,
    ConfigError,
    budget_from_mapping,
)

dash.register_page(
    __name__,
    path="/admin/budgets",
    name="Edit budgets",
    title="Edit budgets · InferLedger",
    order=103,
    min_role="admin",
)

ID = ids("admin-budgets")
PAGE_SIZE = 20


_field, _text = form_fields(ID)


def _form() -> html.Div:
    return html.Div(
        [
            _text("name", "Name"),
            *(_text(f"scope-{d}", f"Scope: {d} (empty = any)") for d in DIMENSIONS),
            _field(
                "Period",
                dcc.Dropdown(id=ID("period"), options=list(PERIODS), value="monthly",
                             clearable=False),
                "period",
            ),
            _field(
                "Week starts (weekly)",
                dcc.Dropdown(
                    id=ID("week-start"),
                    options=[{"label": d, "value": i} for i, d in enumerate(WEEKDAYS)],
                    value=0,
                    clearable=False,
                ),
                "week-start",
            ),
            _field(
                "Reset day (monthly, quarterly: 1-28)",
                dcc.Input(id=ID("reset-day"), type="number", min=1, max=28, step=1, value=1),
                "reset-day",
            ),
            _text("custom-start", "Custom start (YYYY-MM-DD, custom only)"),
            _text("custom-end", "Custom end (YYYY-MM-DD, excluded)"),
            _text("timezone", "Time zone (resets at 00:00 there)", value="UTC"),
            _field(
                "Amount",
                dcc.Input(id=ID("amount"), type="number", step="any"),
                "amount",
            ),
            _text("currency", "Currency", value="USD"),
            _text("thresholds", "Alert thresholds (% of amount)", value="50,80,100"),
            _field(
                "Forecast alert",
                dcc.Checklist(
                    id=ID("forecast-alert"),
                    options=[{"label": " alert when the forecast exceeds the amount",
                              "value": "on"}],
                    value=["on"],
                ),
                "forecast-alert",
            ),
            _field(
                "Idle cost (empty: each deployment's policy)",
                dcc.Dropdown(id=ID("idle-policy"), options=list(IDLE_POLICIES), value=None),
                "idle-policy",
            ),
            _text("owner", "Owner (who answers for it)"),
            _text("channels", "Channels (comma-separated names)"),
            _text("note", "Note"),
        ],
        className="admin-grid",
    )  # fmt: skip


def layout(budget: str | None = None, **_kwargs: object) -> html.Div:
    return html.Div(
        [
            html.H1("Edit budgets"),
            html.P(
                [
                    "Budgets from the alerts file are listed on ",
                    dcc.Link("Budgets", href="/budgets"),
                    " but edited in the file. A budget's period resets at 00:00 in its time "
                    "zone; its spend is the ledger's cost of its scope (docs/budgets.md).",
                ],
                className="admin-intro",
            ),
            html.Div(id=ID("message"), role="status", **{"aria-live": "polite"}),
            html.Section(
                [
                    html.H2("Create or edit a budget", className="card-title"),
                    _field(
                        "Edit budget",
                        dcc.Dropdown(
                            id=ID("pick"),
                            # the URL's choice (no data: the callback brings the list)
                            options=[budget] if budget else [],
                            value=budget,
                            placeholder="New budget (or choose one to edit)",
                        ),
                        "pick",
                    ),
                    _form(),
                    html.Button("Save budget", id=ID("save"), n_clicks=0, className="button"),
                    html.Button("Archive", id=ID("archive"), n_clicks=0, className="button"),
                ],
                className="card admin-card",
                **{"aria-label": "Create or edit a budget"},
            ),
            html.Section(
                [
                    html.H2("Archived budgets", className="card-title"),
                    html.Div(id=ID("archived"), className="admin-table-wrap"),
                    html.Div(
                        [
                            dcc.Dropdown(id=ID("restore-pick"), options=[], placeholder="Choose"),
                            html.Button(
                                "Restore", id=ID("restore"), n_clicks=0, className="button"
                            ),
                        ],
                        className="admin-grid",
                    ),
                ],
                className="card admin-card",
                **{"aria-label": "Archived budgets"},
            ),
            html.Section(
                [
                    html.H2("Changes", className="card-title"),
                    html.Div(id=ID("changes"), className="admin-table-wrap"),
                    pager(ID),
                ],
                className="card admin-card",
                **{"aria-label": "Budget changes"},
            ),
            dcc.Store(id=ID("version"), data=0),
            dcc.Store(id=ID("offset"), data=0),
        ],
        className="admin-page",
    )


def _who(admin: Any) -> str:
    return admin.name if admin else "anonymous (sign-in off)"


def _error(exc: Exception) -> html.P:
    return html.P(str(exc), className="auth-error", role="alert")


def _when(value: datetime | None) -> str:
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if value else "–"


@callback(
    Output(ID("pick"), "options"),
    Output(ID("archived"), "children"),
    Output(ID("restore-pick"), "options"),
    Input(ID("version"), "data"),
)
def _show(_version: int) -> tuple[list[dict[str, Any]], Any, list[str]]:
    try:
        context.require_role("admin")
    except RoleRequiredError as exc:
        return [], _error(exc), []
    every = budgets.list_budgets(context.storage(), include_archived=True)
    live = [b for b in every if b.archived_at is None]
    options = [
        {
            "label": b.name + (" (from the alerts file: edit the file)" if b.source == "file"
                               else ""),
            "value": b.name,
            "disabled": b.source == "file",
        }
        for b in live
    ]  # fmt: skip
    archived = [b for b in every if b.archived_at is not None]
    if not archived:
        return options, html.P("No archived budget.", className="empty-state"), []
    head = ["Budget", "Owner", "Amount", "Archived"]
    table = html.Table(
        [
            html.Thead(html.Tr([html.Th(h, scope="col") for h in head])),
            html.Tbody(
                [
                    html.Tr(
                        [
                            html.Td(b.name),
                            html.Td(b.owner),
                            html.Td(f"{b.amount:,.2f} {b.currency}"),
                            html.Td(_when(b.archived_at)),
                        ]
                    )
                    for b in archived
                ]
            ),
        ],
        className="table admin-table",
    )
    return options, table, [b.name for b in archived]


@callback(
    *(Output(ID(name), "value") for name in FORM),
    Input(ID("pick"), "value"),
)
def _pick(name: str | None) -> tuple[Any, ...]:
    """Fill the form from the chosen budget (an empty form for a new one)."""
    try:
        context.require_role("admin")
    except RoleRequiredError:
        return (dash.no_update,) * len(FORM)
    chosen = budgets.get_budget(context.storage(), name) if name else None
    if chosen is None:
        return (dash.no_update,) * len(FORM)
    return budget_values(chosen)


@callback(
    Output(ID("changes"), "children"),
    Output(ID("page-info"), "children"),
    Output(ID("newer"), "disabled"),
    Output(ID("older"), "disabled"),
    Input(ID("version"), "data"),
    Input(ID("offset"), "data"),
)
def _changes(_version: int, offset: int | None) -> tuple[Any, str, bool, bool]:
    """One page of the budgets' audit trail, newest first, read on the server."""
    try:
        context.require_role("admin")
    except RoleRequiredError as exc:
        return _error(exc), "", True, True
    page = budgets.budget_changes(context.storage(), offset=offset or 0, limit=PAGE_SIZE)
    if not page.changes:
        return html.P("No changes yet.", className="empty-state"), "", True, True
    return (
        config_changes_table(page.changes),
        *pager_state(page.offset, len(page.changes), page.total),
    )


@callback(
    Output(ID("offset"), "data"),
    Input(ID("newer"), "n_clicks"),
    Input(ID("older"), "n_clicks"),
    State(ID("offset"), "data"),
    prevent_initial_call=True,
)
def _turn(_newer: int, _older: int, offset: int | None) -> int:
    return turned_offset(ctx.triggered_id == ID("older"), offset, PAGE_SIZE)


@callback(
    Output(ID("message"), "children"),
    Output(ID("version"), "data"),
    Output(ID("offset"), "data", allow_duplicate=True),
    Input(ID("save"), "n_clicks"),
    State(ID("pick"), "value"),
    *(State(ID(name), "value") for name in FORM),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _save(_clicks: int, picked: str | None, *form: Any) -> tuple[Any, int, Any]:
    """Validate the form as the alerts file would, then save it (a new budget, or the picked
    one, renamed if its name changed); the audit trail goes back to its newest page."""
    *values, version = form
    try:
        admin = context.require_role("admin")
        budget = budget_from_mapping(form_mapping(dict(zip(FORM, values, strict=True))))
        saved = budgets.save_budget(
            context.storage(),
            budget,
            by=_who(admin),
            replace=picked or None,
        )
    except (RoleRequiredError, ConfigError) as exc:
        return _error(exc), version, dash.no_update
    verb = "Saved" if picked else "Created"
    done = [
        f"{verb} budget {saved.name}: {saved.amount:,.2f} {saved.currency} {saved.period}. ",
        dcc.Link("See it on Budgets", href=f"/budgets?budget={saved.name}"),
    ]
    return html.P(done, className="admin-ok", role="status"), (version or 0) + 1, 0


@callback(
    Output(ID("message"), "children", allow_duplicate=True),
    Output(ID("version"), "data", allow_duplicate=True),
    Output(ID("offset"), "data", allow_duplicate=True),
    Output(ID("pick"), "value"),
    Input(ID("archive"), "n_clicks"),
    Input(ID("restore"), "n_clicks"),
    State(ID("pick"), "value"),
    State(ID("restore-pick"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _archive(
    _archive: int, _restore: int, picked: str | None, restore: str | None, version: int
) -> tuple[Any, int, Any, Any]:
    """Archive the picked budget (its alerts stop; its history stays) or restore one."""
    try:
        who = _who(context.require_role("admin"))
        storage = context.storage()
        if ctx.triggered_id == ID("restore"):
            if not restore:
                raise ConfigError("Choose an archived budget to restore.")
            budgets.restore_budget(storage, restore, by=who)
            done, pick = f"Restored budget {restore}.", restore
        else:
            if not picked:
                raise ConfigError("Choose a budget to archive.")
            budgets.archive_budget(storage, picked, by=who)
            done, pick = f"Archived budget {picked}.", None
    except (RoleRequiredError, ConfigError) as exc:
        return _error(exc), version, dash.no_update, dash.no_update
    return html.P(done, className="admin-ok", role="status"), (version or 0) + 1, 0, pick
