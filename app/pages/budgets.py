"""Budgets: every budget's spend in its own period, its forecast to the period's end (P10-P90),
status, owner and whether the period's data is complete; a sparkline of cumulative spend
against the limit per budget; and a detail view (``/budgets?budget=NAME``): actual spend vs
the forecast band vs the limit, burn rate, days to exhaustion, thresholds, the coverage of its
data, a link to the Spend page filtered to it, and its change history.

Numbers: ledger.budget_status (spend of the budget's scope in mart_spend_hourly, the forecast
of models.spend_forecast; docs/budgets.md). Editing is on the admin page /admin/budgets
(app/pages/admin_budgets.py): a viewer's page carries no editing control.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, quote
from zoneinfo import ZoneInfo

import dash
import dash_ag_grid as dag
from dash import Input, Output, callback, dcc, html

from app import context
from app.components import (
    STATUS_WORDS,
    TICK_ID,
    URL_ID,
    amount,
    badge,
    config_changes_table,
    ids,
    may,
    stat,
)
from app.figures import budget_figure, empty_figure, sparkline
from ledger import budget_status, budgets
from ledger.budget_status import BudgetSeries, BudgetStatus
from models.alert_config import DIMENSIONS, Budget

dash.register_page(
    __name__, path="/budgets", name="Budgets", title="Budgets · InferLedger", order=50
)

ID = ids("budgets")
EDIT_PATH = "/admin/budgets"
#: How many of a budget's latest changes the detail view lists.
CHANGES_SHOWN = 20
#: The status column's colours: components.badge's, by the word the cell shows.
STATUS_STYLES = [
    {
        "condition": f"params.value === '{STATUS_WORDS[s][0]}'",
        "style": {"color": STATUS_WORDS[s][1], "backgroundColor": STATUS_WORDS[s][2]},
    }
    for s in ("over", "at_risk", "warning", "ok")
]
COLUMNS: list[dict[str, Any]] = [
    {"field": "name", "headerName": "Budget", "cellRenderer": "markdown", "minWidth": 110},
    {"field": "scope", "headerName": "Scope", "minWidth": 130},
    {"field": "period", "headerName": "Period", "minWidth": 170},
    {"field": "amount", "headerName": "Amount", "type": "numericColumn", "minWidth": 100},
    {"field": "spent", "headerName": "Spent", "type": "numericColumn", "minWidth": 125},
    {"field": "forecast", "headerName": "Forecast P50 (P10–P90)", "minWidth": 180},
    {
        "field": "status",
        "headerName": "Status",
        "cellStyle": {"styleConditions": STATUS_STYLES},
        "minWidth": 95,
    },
    {"field": "owner", "headerName": "Owner", "minWidth": 120},
    {"field": "coverage", "headerName": "Coverage", "minWidth": 100},
    {"field": "source", "headerName": "Source", "minWidth": 90},
]


def selected(search: str | None) -> str | None:
    """The budget the URL asks for (``?budget=NAME``), if any."""
    values = parse_qs((search or "").lstrip("?")).get("budget")
    return values[0] if values else None


def detail_href(name: str) -> str:
    return f"/budgets?budget={quote(name, safe='')}"


def scope_text(scope: Any) -> str:
    """``team=search, env=prod`` in DIMENSIONS' order, or "whole organisation"."""
    parts = [f"{d}={scope[d]}" for d in DIMENSIONS if scope.get(d)]
    return ", ".join(parts) or "whole organisation"


def period_text(b: Budget, start: datetime, end: datetime) -> str:
    """The period and its dates in the budget's time zone: "monthly 2026-12-01 – 2026-12-31
    (Europe/Paris)" (the last day shown is the one before `end`, which is excluded)."""
    try:
        zone: Any = ZoneInfo(b.timezone)
    except (KeyError, ValueError):
        zone = UTC
    first = start.astimezone(zone)
    last = (end - timedelta(microseconds=1)).astimezone(zone)
    return f"{b.period} {first:%Y-%m-%d} – {last:%Y-%m-%d} ({b.timezone})"


def coverage_text(s: BudgetStatus) -> str:
    if s.coverage_complete:
        return "complete"
    n = len(s.incomplete_hours)
    return f"incomplete: {n} hour{'s' if n != 1 else ''}"


def forecast_text(s: BudgetStatus) -> str:
    f, cur = s.forecast, s.currency
    return f"{amount(f.p50, cur)} ({amount(f.p10, cur)}–{amount(f.p90, cur)})"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} %"


def drawn_actual(series: BudgetSeries, now: datetime) -> list[tuple[datetime, float]]:
    """The cumulative spend to draw: from 0 at the period's start, each hour's total at the
    end of that hour, held flat to now (hours without spend have no row)."""
    until = min(max(now, series.period_start), series.period_end)
    points = [(series.period_start, 0.0)]
    points += [(min(hour + timedelta(hours=1), until), total) for hour, total in series.actual]
    if points[-1][0] < until:
        points.append((until, points[-1][1]))
    return points


def grid_row(s: BudgetStatus) -> dict[str, Any]:
    b = s.budget
    return {
        "name": f"[{b.name}]({detail_href(b.name)})",
        "scope": scope_text(b.scope),
        "period": period_text(b, s.period_start, s.period_end),
        "amount": amount(b.amount, s.currency),
        "spent": f"{amount(s.spent, s.currency)} · {pct(s.spent_pct)}",
        "forecast": forecast_text(s),
        "status": STATUS_WORDS[s.status][0],
        "owner": b.owner,
        "coverage": coverage_text(s),
        "source": "from alerts file" if b.source == "file" else b.source,
    }


def layout(**kwargs: object) -> html.Div:
    name = kwargs.get("budget")
    editing = may("admin")
    return html.Div(
        [
            html.Div(
                [
                    html.H1("Budgets"),
                    html.P(
                        [
                            "Each budget's spend in its own period (it resets at 00:00 in its "
                            "time zone), the forecast to the period's end with its P10–P90 band, "
                            "and whether the period's data is complete. Scripts read the same "
                            "numbers from GET /api/v1/budgets with ",
                            dcc.Link("an API token", href="/account", id=ID("tokens")),
                            ".",
                            *(
                                [
                                    " ",
                                    dcc.Link(
                                        "Create or edit budgets", href=EDIT_PATH, id=ID("edit")
                                    ),
                                ]
                                if editing
                                else []
                            ),
                        ],
                        className="page-lead",
                    ),
                ],
                className="page-head",
            ),
            html.Div(
                [
                    dag.AgGrid(
                        id=ID("grid"),
                        columnDefs=COLUMNS,
                        rowData=[],
                        columnSize="responsiveSizeToFit",
                        defaultColDef={
                            "sortable": True,
                            "resizable": True,
                            "wrapText": True,
                            "autoHeight": True,
                        },
                        dashGridOptions={"domLayout": "autoHeight", "animateRows": False},
                        className="budgets-grid",
                    ),
                    html.Div(id=ID("empty"), className="empty-state", role="status"),
                    html.Section(
                        [
                            html.H2("Spend so far against the limit", className="card-title"),
                            html.P(
                                "Cumulative spend in the current period (line) and the "
                                "budget's amount (dashed).",
                                className="card-note",
                            ),
                            html.Div(id=ID("sparklines"), className="budgets-sparklines"),
                        ],
                        className="card",
                        **{"aria-label": "Spend so far against the limit"},
                    ),
                ],
                id=ID("list"),
                hidden=bool(name),
            ),
            html.Div(
                [
                    dcc.Link("← All budgets", href="/budgets", className="button small"),
                    html.Div(id=ID("detail-head")),
                    html.Div(id=ID("detail-banner"), role="status"),
                    html.Div(id=ID("detail-stats"), className="stats"),
                    html.Section(
                        [
                            html.H2("Actual vs forecast vs limit", className="card-title"),
                            dcc.Graph(
                                id=ID("detail-chart"),
                                config={"displaylogo": False, "responsive": True},
                                style={"height": "380px"},
                            ),
                        ],
                        className="card",
                        **{"aria-label": "Actual vs forecast vs limit"},
                    ),
                    html.Section(
                        [
                            html.H2("Changes", className="card-title"),
                            html.Div(id=ID("detail-changes"), className="admin-table-wrap"),
                        ],
                        className="card",
                        **{"aria-label": "Changes"},
                    ),
                ],
                id=ID("detail"),
                hidden=not name,
            ),
        ],
        className="page budgets-page",
    )


def _sparkline_row(s: BudgetStatus, actual: Any) -> html.Div:
    b = s.budget
    return html.Div(
        [
            html.Div(
                [
                    dcc.Link(b.name, href=detail_href(b.name)),
                    " ",
                    badge(s.status),
                    html.Span(f" {pct(s.spent_pct)} of {amount(b.amount, s.currency)}"),
                ],
                className="budgets-sparkline-label",
                style={"width": "360px"},
            ),
            dcc.Graph(
                figure=sparkline(
                    actual,
                    b.amount,
                    over=s.status == "over",
                    period=(s.period_start, s.period_end),
                ),
                config={"staticPlot": True},
                style={"height": "48px", "width": "320px"},
                className="budgets-sparkline",
            ),
        ],
        className="budgets-sparkline-row",
        style={"display": "flex", "alignItems": "center", "gap": "1rem"},
    )


@callback(
    Output(ID("grid"), "rowData"),
    Output(ID("empty"), "children"),
    Output(ID("sparklines"), "children"),
    Output(ID("list"), "hidden"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),
)
def _list(search: str | None, _tick: int | None) -> tuple[list[dict[str, Any]], Any, Any, bool]:
    if selected(search):
        return dash.no_update, dash.no_update, dash.no_update, True
    storage = context.storage()
    now = datetime.now(UTC)
    cache: dict = {}  # one read of the marts for the statuses and every sparkline
    statuses = budget_status.budget_statuses(storage, now, cache=cache)
    if not statuses:
        empty = "No budgets yet." + (
            " Create one with “Create or edit budgets”." if may("admin") else ""
        )
        return [], empty, None, False
    lines = [
        _sparkline_row(
            s, drawn_actual(budget_status.budget_series(storage, s.budget, now, cache=cache), now)
        )
        for s in statuses
    ]
    return [grid_row(s) for s in statuses], "", lines, False


@callback(
    Output(ID("detail"), "hidden"),
    Output(ID("detail-head"), "children"),
    Output(ID("detail-banner"), "children"),
    Output(ID("detail-stats"), "children"),
    Output(ID("detail-chart"), "figure"),
    Output(ID("detail-changes"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),
)
def _detail(search: str | None, _tick: int | None) -> tuple[Any, ...]:
    name = selected(search)
    if not name:
        return True, None, None, None, empty_figure(), None
    storage = context.storage()
    b = budgets.get_budget(storage, name)
    if b is None:
        missing = html.P(f"No budget named {name!r}.", className="empty-state", role="status")
        return False, missing, None, None, empty_figure(), None
    now = datetime.now(UTC)
    cache: dict = {}
    s = budget_status.budget_status(storage, b, now, cache=cache)
    series = budget_status.budget_series(storage, b, now, cache=cache)
    head = html.Div(
        [
            html.H2([b.name, " ", badge(s.status, id=ID("detail-status"))]),
            html.P(
                [
                    f"{scope_text(b.scope)} · {period_text(b, s.period_start, s.period_end)} · "
                    f"owner {b.owner}"
                    + (" · from the alerts file" if b.source == "file" else "")
                    + (" · archived" if b.archived_at else "")
                    + " · ",
                    html.A("Spend for this scope and period", href=s.link, id=ID("spend-link")),
                    *(
                        [" · ", dcc.Link("Edit", href=f"{EDIT_PATH}?budget={quote(b.name)}")]
                        if may("admin") and b.source != "file"
                        else []
                    ),
                ],
                className="page-subtitle",
            ),
        ]
    )
    banner = (
        None
        if s.coverage_complete
        else html.P(
            f"Data for this period is {coverage_text(s)} without full scrapes "
            f"(coverage {pct(s.coverage_pct)}), so spent and forecast may read low.",
            className="coverage-banner",
            id=ID("coverage-banner"),
        )
    )
    stats = detail_stats(s)
    figure = budget_figure(
        drawn_actual(series, now),
        series.band,
        b.amount,
        currency=s.currency,
        period=(s.period_start, s.period_end),
        thresholds=list(zip(b.thresholds, series.threshold_amounts, strict=True)),
    )
    page = budgets.budget_changes(storage, name=b.name, offset=0, limit=CHANGES_SHOWN)
    changes = (
        config_changes_table(page.changes)
        if page.changes
        else html.P("No changes recorded.", className="empty-state")
    )
    return False, head, banner, stats, figure, changes


def detail_stats(s: BudgetStatus) -> list[html.Div]:
    f, cur, b = s.forecast, s.currency, s.budget
    exhaustion = (
        "not within the period"
        if f.exhaustion_at is None
        else f"{f.exhaustion_at.astimezone(UTC):%Y-%m-%d %H:00} UTC"
    )
    days = "–" if f.days_to_exhaustion is None else f"{f.days_to_exhaustion:.1f} days"
    crossed = "none" if s.threshold_crossed is None else f"{s.threshold_crossed:g} %"
    return [
        stat("Spent", amount(s.spent, cur), hint=f"{pct(s.spent_pct)} of the amount",
             id=ID("detail-spent")),
        stat("Amount", amount(b.amount, cur), id=ID("detail-amount")),
        stat("Forecast P50", amount(f.p50, cur),
             hint=f"P10–P90 {amount(f.p10, cur)}–{amount(f.p90, cur)}; "
             f"{pct(s.forecast_pct)} of the amount ({f.method})",
             id=ID("detail-forecast")),
        stat("Burn rate", f"{amount(f.burn_rate_per_day, cur)}/day", id=ID("detail-burn")),
        stat("Days to exhaustion", days, hint=f"at P50: {exhaustion}", id=ID("detail-days")),
        stat("Thresholds", ", ".join(f"{t:g} %" for t in b.thresholds),
             hint=f"highest crossed: {crossed}", id=ID("detail-thresholds")),
        stat("Coverage", coverage_text(s), id=ID("detail-coverage")),
    ]  # fmt: skip
