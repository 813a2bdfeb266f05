"""Overview: what the fleet cost in the chosen range, where this month is heading, how fast and
reliable it was, what moved most and why, and what data InferLedger holds.

Numbers come from ledger/overview.py over the marts (the same queries as the Spend and Unit
economics pages, so they agree); this module lays them out.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, callback, dcc, html

from app import context, palette
from app.components import (
    TICK_ID,
    URL_ID,
    amount,
    badge,
    chart,
    choice_in_url,
    ids,
    may,
    money,
    number,
    seconds,
    stat,
    why_empty,
)
from app.exports import csv_download
from app.figures import Axis, Panel, panels
from app.filters import PRESETS, filters_from, parse
from app.formats import coverage_marks
from ledger import overview as ov
from ledger.budget_status import BudgetStatus
from ledger.queries import Filters
from models import idle_policy

dash.register_page(__name__, path="/", name="Overview", title="InferLedger", order=0)

_id = ids("overview")
_BUDGETS_HREF = "/budgets"
_EDIT_BUDGETS_HREF = "/admin/budgets"


def _range_label(search: str | None, filters: Filters) -> str:
    state = parse(search)
    if state.range in PRESETS:
        return PRESETS[state.range].lower()
    return f"{filters.start:%Y-%m-%d %H:%M} – {filters.end:%Y-%m-%d %H:%M} UTC"


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


# --------------------------------------------------------------------------- trend chart
def _trend_figure(table: Any, filters: Filters) -> go.Figure:
    per = "hour" if ov.bucket_for(filters) == "hour" else "day"
    when = "%{x|%Y-%m-%d %H:%M} UTC<br>"
    return panels(
        table,
        "bucket",
        [
            Panel(
                "spend",
                "Spend",
                palette.TREND_SPEND,
                hover=f"{when}$%{{y:,.2f}} per {per}<extra>Spend</extra>",
                y=Axis(f"$ / {per}", prefix="$"),
            ),
            Panel(
                "requests",
                "Requests",
                palette.TREND_REQUESTS,
                hover=f"{when}%{{y:,}} requests per {per}<extra>Requests</extra>",
                y=Axis(f"req / {per}"),
            ),
            Panel(
                "ttft_p95_ms",
                "p95 TTFT",
                palette.TREND_TTFT,
                hover=f"{when}p95 %{{y:,.0f}} ms<extra>TTFT</extra>",
                y=Axis("TTFT p95 (ms)", from_zero=True),
                line=True,
            ),
        ],
        x_axis=Axis("UTC"),
    )


TREND = chart(
    _id,
    "trend",
    "Trend: spend, requests, p95 time to first token",
    lambda filters: ov.trend(context.storage(), filters),
    _trend_figure,
    height=380,
    note="By hour for ranges up to 7 days, else by day (UTC).",
)


# --------------------------------------------------------------------------- layout
MOVERS_KEY, MOVERS_DEFAULT = "by", "route"  # the movers' "By" choice, kept in the URL


def _movers_dim(search: str | None) -> str:
    return parse(search).choice(MOVERS_KEY, ov.MOVER_DIMENSIONS, MOVERS_DEFAULT)


def layout(**kwargs: object) -> html.Div:
    by = kwargs.get(MOVERS_KEY)
    movers_by = by if by in ov.MOVER_DIMENSIONS else MOVERS_DEFAULT
    return html.Div(
        [
            html.Div(
                [
                    html.H1("Overview"),
                    html.P(id=_id("subtitle"), className="page-subtitle"),
                ],
                className="page-head",
            ),
            dcc.Loading(
                html.Div(id=_id("kpis"), className="stats overview-kpis"),
                type="dot",
                delay_show=150,
            ),
            html.Details(
                [
                    html.Summary("How the forecast works"),
                    html.P(ov.FORECAST_METHOD, id=_id("method")),
                ],
                className="overview-method",
            ),
            html.Div(
                [
                    TREND,
                    html.Section(
                        [
                            html.Div(
                                [
                                    html.H2("Top movers", className="card-title"),
                                    html.Button(
                                        "Download CSV",
                                        id=_id("movers-csv-button"),
                                        className="button small",
                                        title="Download the top movers as CSV",
                                    ),
                                ],
                                className="card-head",
                            ),
                            html.P(id=_id("movers-note"), className="card-note"),
                            html.Div(
                                [
                                    html.Span("By", className="filter-label", id=_id("dim-label")),
                                    dcc.RadioItems(
                                        id=_id("movers-dim"),
                                        options=[
                                            {"label": d.title(), "value": d}
                                            for d in ov.MOVER_DIMENSIONS
                                        ],
                                        value=movers_by,
                                        inline=True,
                                        className="radio-row",
                                    ),
                                ],
                                className="overview-dim",
                                role="radiogroup",
                                **{"aria-labelledby": _id("dim-label")},
                            ),
                            dcc.Loading(
                                html.Div(id=_id("movers"), className="overview-movers"),
                                type="dot",
                                delay_show=150,
                            ),
                            dcc.Download(id=_id("movers-csv")),
                        ],
                        className="card",
                        **{"aria-label": "Top movers"},
                    ),
                ],
                className="overview-grid",
            ),
            html.Section(
                [html.H2("Data", className="card-title"), html.Div(id=_id("data"))],
                className="card overview-data",
                **{"aria-label": "Data"},
            ),
        ],
        className="page overview-page",
    )


# --------------------------------------------------------------------------- KPI tiles
def budget_tile(statuses: list[BudgetStatus]) -> html.Div:
    """The budgets the filters fall under (ledger.overview.budget_tile, most urgent first):
    the first one's status, spent share and forecast, and "+N more" to the Budgets page; or
    "No budget set" with a link to create one (admins)."""
    if not statuses:
        hint: list[Any] = ["No budget covers this selection."]
        if may("admin"):
            hint += [" ", dcc.Link("Create one", href=_EDIT_BUDGETS_HREF, id=_id("budget-create"))]
        else:
            hint += [" ", dcc.Link("Budgets", href=_BUDGETS_HREF)]
        return html.Div(
            [
                html.Div("Budget", className="stat-label"),
                html.Div("No budget set", className="stat-value", id=_id("kpi-budget")),
                html.Div(hint, className="stat-hint"),
            ],
            className="stat",
        )
    s = statuses[0]
    b = s.budget
    more = len(statuses) - 1
    forecast = s.forecast.p50
    spent = "–" if s.spent_pct is None else f"{s.spent_pct:.0f} %"
    ahead = "–" if s.forecast_pct is None else f"{s.forecast_pct:.0f} %"
    return html.Div(
        [
            html.Div(
                [
                    "Budget: ",
                    dcc.Link(b.name, href=_BUDGETS_HREF + "?budget=" + quote(b.name, safe="")),
                ],
                className="stat-label",
            ),
            html.Div(
                [f"{spent} spent ", badge(s.status)],
                className="stat-value",
                id=_id("kpi-budget"),
            ),
            html.Div(
                [
                    f"{amount(s.spent, s.currency)} of {amount(b.amount, s.currency)} "
                    f"{b.period}; forecast {amount(forecast, s.currency)} ({ahead})",
                    *(
                        [
                            " · ",
                            dcc.Link(f"+{more} more", href=_BUDGETS_HREF, id=_id("budget-more")),
                        ]
                        if more
                        else []
                    ),
                ],
                className="stat-hint",
                id=_id("kpi-budget-hint"),
            ),
        ],
        className="stat",
    )


def _tiles(
    k: ov.OverviewKpis, label: str, policy: str, budgets: list[BudgetStatus]
) -> list[html.Div]:
    f = k.forecast
    forecast_hint = (
        f"run rate {money(f.run_rate_per_hour)}/h over {f.rate_hours} h"
        if f.run_rate_per_hour is not None
        else "not enough history (under one complete hour)"
    )
    if f.excluded_hours:
        forecast_hint += f"; {f.excluded_hours} h with incomplete data left out"
    spend_hint = f"idle {money(k.idle_cost)} ({idle_policy.LABEL[policy].lower()})"
    spend_hint += coverage_marks(k.estimated_cost, k.unpriced_requests)
    budget = budget_tile(budgets)
    return [
        stat(
            f"Spend, {label}",
            money(k.spend),
            hint=spend_hint,
            id=_id("kpi-spend"),
        ),
        stat(
            f"Month to date ({f.month_start:%B})",
            money(f.month_to_date),
            hint="UTC month, whatever the range",
            id=_id("kpi-mtd"),
        ),
        stat(
            "Forecast to month end",
            money(f.forecast),
            hint=forecast_hint,
            id=_id("kpi-forecast"),
        ),
        budget,
        stat(
            "Requests",
            number(k.requests),
            # LLM calls; a failed attempt (a guardrail block) usually has successful calls, so
            # failures are counted per attempt and task on their own tile, not here
            hint=f"LLM calls; {number(k.failed)} returned an error",
            id=_id("kpi-requests"),
        ),
        stat(
            "Tokens in / out",
            f"{number(k.input_tokens)} / {number(k.output_tokens)}",
            id=_id("kpi-tokens"),
        ),
        stat(
            "Failed attempts / tasks",
            f"{_share(k.attempt_failure_rate)} / {_share(k.task_failure_rate)}",
            hint=(
                f"{number(k.failed_attempts)} of {number(k.attempts)} attempts (traces) failed; "
                f"{number(k.failed_tasks)} of {number(k.tasks)} tasks ended without a "
                f"successful attempt; {number(k.failed)} LLM calls failed"
            ),
            id=_id("kpi-failures"),
        ),
        stat(
            "TTFT p50 / p95",
            f"{seconds(k.ttft_p50_s)} / {seconds(k.ttft_p95_s)}",
            hint="time to first token",
            id=_id("kpi-ttft"),
        ),
        stat(
            "End-to-end p50 / p95",
            f"{seconds(k.e2e_p50_s)} / {seconds(k.e2e_p95_s)}",
            hint="one LLM call",
            id=_id("kpi-e2e"),
        ),
        stat(
            "GPU utilization",
            _share(k.gpu_util),
            hint=f"DCGM; busy {_share(k.busy_share)} of GPU time (ledger)",
            id=_id("kpi-gpu"),
        ),
        stat(
            "Cost per accepted outcome",
            money(k.cost_per_accepted, 4),
            hint=f"{number(k.accepted_outcomes)} accepted; tasks cost {money(k.outcome_cost)}",
            id=_id("kpi-cpao"),
        ),
    ]


@callback(
    Output(_id("kpis"), "children"),
    Output(_id("subtitle"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),  # auto-refresh: the tiles move with the charts
)
def _kpis(search: str | None, _tick: int | None) -> tuple[list[html.Div], str]:
    filters = filters_from(search)
    storage = context.storage()
    k = ov.overview_kpis(storage, filters)
    budgets = ov.budget_tile(storage, filters, datetime.now(UTC))
    label = _range_label(search, filters)
    subtitle = (
        f"{filters.start:%Y-%m-%d %H:%M} – {filters.end:%Y-%m-%d %H:%M} UTC · idle cost: "
        f"{idle_policy.LABEL[filters.policy].lower()}"
    )
    return _tiles(k, label, filters.policy, budgets), subtitle


# --------------------------------------------------------------------------- movers
def _movers_table(found: list[ov.Mover]) -> html.Table:
    head = ("", "Before", "Now", "Change", "Traffic", "Unit cost", "Why")
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h, scope="col") for h in head])),
            html.Tbody(
                [
                    html.Tr(
                        [
                            html.Th(m.key, scope="row"),
                            html.Td(money(m.before.cost), className="num"),
                            html.Td(money(m.after.cost), className="num"),
                            html.Td(
                                money(m.delta),
                                className="num " + ("up" if m.delta > 0 else "down"),
                            ),
                            html.Td(money(m.traffic), className="num"),
                            html.Td(money(m.unit_cost), className="num"),
                            html.Td(m.reason, className="reason"),
                        ]
                    )
                    for m in found
                ]
            ),
        ],
        className="table movers-table",
    )


@callback(
    Output(_id("movers"), "children"),
    Output(_id("movers-note"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),
)
def _movers(search: str | None, _tick: int | None) -> tuple[Any, str]:
    filters = filters_from(search)
    dim = _movers_dim(search)
    before = filters.start - (filters.end - filters.start)
    note = (
        f"Spend change against the previous period of the same length "
        f"({before:%Y-%m-%d %H:%M} – {filters.start:%Y-%m-%d %H:%M} UTC), split into traffic "
        f"(requests) and unit cost (context length, retries, cost per token or a price change)."
    )
    found, comparison = ov.comparable_movers(context.storage(), filters, dim)
    flag = comparison.reason()
    if comparison.previous.first_hour is None:  # the ledger holds nothing yet: say why
        return html.P(why_empty(filters), className="empty-state", role="status"), note
    if flag is not None:
        # a half-loaded baseline reads as growth: say so instead of showing its artefacts
        return html.P(
            f"{flag} Top movers are not shown until it is complete.",
            className="empty-state movers-incomplete",
            id=_id("movers-incomplete"),
            role="status",
        ), note
    if not found:
        return html.P(why_empty(filters), className="empty-state", role="status"), note
    return _movers_table(found), note


@callback(
    Output(_id("movers-csv"), "data"),
    Input(_id("movers-csv-button"), "n_clicks"),
    State(URL_ID, "search"),
    prevent_initial_call=True,
)
def _movers_csv(_clicks: int | None, search: str | None) -> dict[str, Any]:
    filters = filters_from(search)
    dim = _movers_dim(search)
    found, _ = ov.comparable_movers(context.storage(), filters, dim)
    return csv_download(ov.movers_table(found), f"top-movers-by-{dim}", filters)


choice_in_url(_id("movers-dim"), MOVERS_KEY, MOVERS_DEFAULT)


# --------------------------------------------------------------------------- data panel
@callback(
    Output(_id("data"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),  # auto-refresh: span count, newest span, last ledger refresh
)
def _data_panel(search: str | None, _tick: int | None) -> Any:
    d = ov.data_status(context.storage(), filters_from(search))
    if not d["spans"]:
        return html.P(
            "No spans yet. Point an OpenTelemetry exporter at POST /v1/traces "
            "(OTLP/HTTP, protobuf or JSON), or run `inferledger demo`.",
            className="empty-state",
            role="status",
        )
    ledger = (
        f"{d['first_hour']:%Y-%m-%d %H:%M} – {d['last_hour']:%Y-%m-%d %H:%M} UTC"
        if d["first_hour"]
        else "not computed yet"
    )
    refresh = f"{d['last_refresh_at']:%Y-%m-%d %H:%M:%S} UTC" if d["last_refresh_at"] else "not yet"
    if d["last_work_at"]:
        refresh += (
            f" (last recompute {d['last_work_at']:%H:%M:%S}: {d['last_work_hours']} h "
            f"in {d['last_work_s']:.2f} s)"
        )
    return html.Dl(
        [
            html.Dt("Spans"),
            html.Dd(f"{d['spans']:,}", id=_id("data-spans")),
            html.Dt("Newest span"),
            html.Dd(f"{d['last_span_at']:%Y-%m-%d %H:%M:%S} UTC", id=_id("data-newest")),
            html.Dt("Cost ledger hours"),
            html.Dd(ledger, id=_id("data-ledger")),
            html.Dt("Last ledger refresh"),
            html.Dd(refresh, id=_id("data-refresh")),
        ],
        className="data-list",
    )
