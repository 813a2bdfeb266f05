"""Spend: where the money went over time, by team, app, route, model, stage or environment;
the team → app → route breakdown with a drill-down that narrows the global filters; the idle
cost, shown under the idle policy chosen in the filter bar; and per team, the idle it would
carry if idle were shared by usage, whatever the policy (issue #10: finance asks for it).

The breakdown dimension is a page-level choice kept in the URL (`by=route`, app.filters
.PAGE_KEYS), so a reload, the navigation and a copied link keep it.

Drill-down: a click on a treemap node sets the filter bar's team/app/route dropdowns; the shell
then writes the URL (so the link is shareable and the dropdowns show the drill) and every chart
re-reads it. "See these requests" opens the request explorer with the same query string.
"""

from __future__ import annotations

from typing import Any

import dash
import dash_ag_grid as dag
import plotly.graph_objects as go
from dash import Input, Output, State, callback, ctx, dcc, html
from dash.exceptions import PreventUpdate

from app import context, palette
from app.components import (
    TICK_ID,
    URL_ID,
    chart,
    chart_card,
    choice_in_url,
    ids,
    money,
    number,
    stat,
    why_empty,
    zoom_to_range,
)
from app.exports import csv_download
from app.figures import empty_figure, style
from app.filters import FILTER_ID, filters_from, parse
from app.formats import coverage_marks
from ledger import overview as ov
from ledger import spend as sp
from ledger.queries import Filters, run
from models import idle_policy

dash.register_page(__name__, path="/spend", name="Spend", title="Spend · InferLedger", order=10)

_id = ids("spend")
REQUESTS_PATH = "/requests"
#: The breakdown dimension's URL key (app.filters.PAGE_KEYS) and its default.
DIM_KEY, DIM_DEFAULT = "by", "team"


def _dim(search: str | None) -> str:
    return parse(search).choice(DIM_KEY, sp.SPEND_DIMENSIONS, DIM_DEFAULT)


# --------------------------------------------------------------------------- spend over time
def _area_figure(table: Any, filters: Filters, dim: str) -> go.Figure:
    per = ov.bucket_for(filters)
    keys = list(dict.fromkeys(table.column("key").to_pylist()))
    rows = table.to_pylist()
    fig = go.Figure()
    for i, key in enumerate(keys):
        mine = [r for r in rows if r["key"] == key]
        grey = key in ("(idle)", sp.OTHER)
        fig.add_trace(
            go.Scatter(
                x=[r["bucket"] for r in mine],
                y=[r["cost"] for r in mine],
                name=key,
                stackgroup="spend",
                mode="lines",
                line={
                    "width": 0.5,
                    "color": palette.NOT_A_KEY if grey else palette.cycle(palette.SERIES, i),
                },
                customdata=[r["requests"] for r in mine],
                hovertemplate=f"{dim} %{{fullData.name}}: $%{{y:,.4f}} per {per}, "
                "%{customdata:,} requests<extra></extra>",
            )
        )
    style(fig, money_axis=True)
    fig.update_layout(
        hovermode="x unified",
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        margin={"t": 36},
    )
    fig.update_yaxes(title_text=f"spend ($ per {per})")
    fig.update_xaxes(title_text=f"{per} (UTC)")
    return fig


# --------------------------------------------------------------------------- treemap
def _tree_figure(table: Any, _filters: Filters) -> go.Figure:
    nodes = sp.tree_nodes(table)
    teams = list(dict.fromkeys(table.column("team").to_pylist()))
    color = {
        t: palette.NOT_A_KEY if t in sp.NOT_DRILLABLE else palette.cycle(palette.SERIES, i)
        for i, t in enumerate(teams)
    }
    ids_ = nodes.column("id").to_pylist()
    fig = go.Figure(
        go.Treemap(
            ids=ids_,
            parents=nodes.column("parent").to_pylist(),
            labels=nodes.column("label").to_pylist(),
            values=nodes.column("cost").to_pylist(),
            customdata=list(
                zip(
                    nodes.column("level").to_pylist(),
                    nodes.column("requests").to_pylist(),
                    strict=True,
                )
            ),
            branchvalues="total",
            maxdepth=3,
            texttemplate="%{label}<br>$%{value:,.2f}",
            hovertemplate="%{customdata[0]} %{label}<br>$%{value:,.4f} "
            "(%{percentRoot:.1%} of spend)<br>%{customdata[1]:,} requests<extra></extra>",
            marker={
                "colors": [color[i.split(sp.NODE_SEP)[0]] for i in ids_],
                "line": {"color": palette.WHITE, "width": 2},
            },
            textfont={"color": palette.WHITE},
            pathbar={"visible": False},
            root={"color": palette.TRANSPARENT},
        )
    )
    style(fig, legend=False)
    fig.update_layout(margin={"l": 4, "r": 4, "t": 4, "b": 4})
    return fig


TREE = chart(
    _id,
    "tree",
    "Spend by team → app → route",
    lambda filters: sp.spend_tree(context.storage(), filters),
    _tree_figure,
    height=420,
    note="Click a team, then an app, then a route to narrow every chart to it.",
)


# --------------------------------------------------------------------------- idle per team
def teams_table(filters: Filters) -> Any:
    """Per team: spend and the idle charged under the chosen policy, and the idle it would
    carry if idle were shared by usage (sql/queries/spend_by_team.sql)."""
    return run(context.storage(), "spend_by_team", filters)


_MONEY = {"function": "d3.format('$,.2f')(params.value)"}
TEAM_COLUMNS = [
    {"field": "team", "headerName": "Team", "minWidth": 130},
    {"field": "cost", "headerName": "Spend", "valueFormatter": _MONEY, "type": "numericColumn"},
    {
        "field": "idle_cost",
        "headerName": "Idle charged (policy)",
        "headerTooltip": "The idle GPU cost the chosen idle policy charges this team",
        "valueFormatter": _MONEY,
        "type": "numericColumn",
    },
    {
        "field": "usage_idle",
        "headerName": "Idle share by usage",
        "headerTooltip": "What this team would carry if idle were shared by usage, "
        "whatever the chosen policy",
        "valueFormatter": _MONEY,
        "type": "numericColumn",
    },
    {
        "field": "usage_idle_share",
        "headerName": "Share of idle",
        "valueFormatter": {
            "function": "params.value == null ? '' : d3.format('.1%')(params.value)"
        },
        "type": "numericColumn",
    },
    {
        "field": "requests",
        "headerName": "Requests",
        "valueFormatter": {"function": "d3.format(',')(params.value)"},
        "type": "numericColumn",
    },
]


def _teams_card() -> html.Section:
    return html.Section(
        [
            html.Div(
                [
                    html.H2("Idle share per team", className="card-title"),
                    html.Button(
                        "Download CSV",
                        id=_id("teams-csv-button"),
                        className="button small",
                        title="Download the per-team spend and idle shares as CSV",
                    ),
                ],
                className="card-head",
            ),
            html.P(id=_id("teams-note"), className="card-note"),
            dag.AgGrid(
                id=_id("teams"),
                columnDefs=TEAM_COLUMNS,
                rowData=[],
                # Fit the card's width (every column, the cost included, visible without a
                # scroll bar); the first click on a header sorts descending: the biggest first.
                columnSize="responsiveSizeToFit",
                defaultColDef={
                    "sortable": True,
                    "resizable": True,
                    "sortingOrder": ["desc", "asc", None],
                },
                dashGridOptions={"domLayout": "autoHeight", "animateRows": False},
                className="spend-teams",
            ),
            dcc.Download(id=_id("teams-csv")),
        ],
        className="card",
        **{"aria-label": "Idle share per team"},
    )


# --------------------------------------------------------------------------- layout
def layout(**kwargs: object) -> html.Div:
    by = kwargs.get(DIM_KEY)
    dim = by if by in sp.SPEND_DIMENSIONS else DIM_DEFAULT
    return html.Div(
        [
            html.Div(
                [html.H1("Spend"), html.P(id=_id("subtitle"), className="page-subtitle")],
                className="page-head",
            ),
            dcc.Loading(html.Div(id=_id("kpis"), className="stats"), type="dot", delay_show=150),
            html.P(id=_id("idle-line"), className="idle-line", role="note"),
            html.Div(
                [
                    html.Span("Spend over time by", className="filter-label", id=_id("dim-label")),
                    dcc.RadioItems(
                        id=_id("dim"),
                        options=[{"label": d.title(), "value": d} for d in sp.SPEND_DIMENSIONS],
                        value=dim,
                        inline=True,
                        className="radio-row",
                    ),
                ],
                className="spend-dim",
                role="radiogroup",
                **{"aria-labelledby": _id("dim-label")},
            ),
            chart_card(
                _id,
                "over-time",
                "Spend over time",
                height=360,
                note="Stacked by the chosen dimension; by hour up to 7 days, else by day. The "
                "8 largest keys are shown, the rest summed as (other).",
            ),
            html.Div(
                [
                    html.Nav(
                        id=_id("crumbs"), className="spend-crumbs", **{"aria-label": "Drill-down"}
                    ),
                    html.Button(
                        "Up one level",
                        id=_id("up"),
                        className="button small",
                        title="Clear the deepest of the route, app and team filters",
                    ),
                    dcc.Link(
                        "See these requests →",
                        id=_id("requests-link"),
                        href=REQUESTS_PATH,
                        className="button small spend-requests-link",
                    ),
                ],
                className="spend-drill",
            ),
            TREE,
            _teams_card(),
        ],
        className="page spend-page",
    )


def _spend_hint(s: sp.SpendSummary) -> str:
    return f"{number(s.requests)} requests" + coverage_marks(s.estimated_cost, s.unpriced_requests)


# --------------------------------------------------------------------------- callbacks
@callback(
    Output(_id("kpis"), "children"),
    Output(_id("idle-line"), "children"),
    Output(_id("subtitle"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),
)
def _kpis(search: str | None, _tick: int | None) -> tuple[list[html.Div], str, str]:
    filters = filters_from(search)
    s = sp.spend_summary(context.storage(), filters)
    tiles = [
        stat("Spend", money(s.spend), hint=_spend_hint(s), id=_id("kpi-spend")),
        stat(
            "Charged to requests",
            money(s.allocated),
            hint="requests, services and review",
            id=_id("kpi-allocated"),
        ),
        stat("Idle, all", money(s.idle_cost), hint="shared + unshared", id=_id("kpi-idle")),
        stat(
            "Idle, unshared",
            money(s.unshared_idle_cost),
            hint="the '(idle)' line",
            id=_id("kpi-unshared"),
        ),
    ]
    subtitle = f"{filters.start:%Y-%m-%d %H:%M} – {filters.end:%Y-%m-%d %H:%M} UTC"
    return tiles, s.explanation, subtitle


@callback(
    Output(_id("over-time"), "figure"),
    Output(_id("over-time-empty"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),
)
def _over_time(search: str | None, _tick: int | None) -> tuple[go.Figure, str]:
    filters = filters_from(search)
    dim = _dim(search)
    table = sp.spend_over_time(context.storage(), filters, dim)
    if table.num_rows == 0:
        return empty_figure(), why_empty(filters)
    return _area_figure(table, filters, dim), ""


@callback(
    Output(_id("over-time-csv"), "data"),
    Input(_id("over-time-csv-button"), "n_clicks"),
    State(URL_ID, "search"),
    prevent_initial_call=True,
)
def _over_time_csv(_clicks: int | None, search: str | None) -> dict[str, Any]:
    filters, dim = filters_from(search), _dim(search)
    table = sp.spend_over_time(context.storage(), filters, dim)
    return csv_download(table, f"spend-by-{dim}", filters)


choice_in_url(_id("dim"), DIM_KEY, DIM_DEFAULT)
zoom_to_range(_id("over-time"))


@callback(
    Output(_id("teams"), "rowData"),
    Output(_id("teams-note"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),
)
def _teams(search: str | None, _tick: int | None) -> tuple[list[dict[str, Any]], str]:
    filters = filters_from(search)
    label = idle_policy.LABEL.get(filters.policy, filters.policy)
    note = (
        f"Spend and idle charged under the idle policy in use: {label} "
        f"({idle_policy.DESCRIPTION.get(filters.policy, '')}). 'Idle share by usage' is what each "
        "team would carry if idle were shared by usage, whatever that policy."
    )
    return teams_table(filters).to_pylist(), note


@callback(
    Output(_id("teams-csv"), "data"),
    Input(_id("teams-csv-button"), "n_clicks"),
    State(URL_ID, "search"),
    prevent_initial_call=True,
)
def _teams_csv(_clicks: int | None, search: str | None) -> dict[str, Any]:
    filters = filters_from(search)
    return csv_download(teams_table(filters), "spend-idle-by-team", filters)


@callback(
    Output(_id("crumbs"), "children"),
    Output(_id("requests-link"), "href"),
    Output(_id("up"), "disabled"),
    Input(URL_ID, "search"),
)
def _crumbs(search: str | None) -> tuple[list[Any], str, bool]:
    # No auto-refresh tick: the crumbs and the link are the URL's filters, not data.
    values = parse(search).values
    path = [(level, values.get(level)) for level in sp.DRILL_LEVELS if values.get(level)]
    crumbs: list[Any] = [html.Span("All teams", className="crumb")]
    for level, value in path:
        crumbs += [html.Span("›", className="crumb-sep", **{"aria-hidden": "true"})]
        crumbs += [html.Span(f"{level} {value}", className="crumb")]
    return crumbs, REQUESTS_PATH + (search or ""), not path


@callback(
    Output(f"{FILTER_ID}-team", "value", allow_duplicate=True),
    Output(f"{FILTER_ID}-app", "value", allow_duplicate=True),
    Output(f"{FILTER_ID}-route", "value", allow_duplicate=True),
    Input(_id("tree"), "clickData"),
    Input(_id("up"), "n_clicks"),
    State(URL_ID, "search"),
    prevent_initial_call=True,
)
def _drill(
    click: dict[str, Any] | None, _up: int | None, search: str | None
) -> tuple[str | None, str | None, str | None]:
    """Narrow (a treemap click) or widen (Up one level) the global team/app/route filters."""
    # Dash calls this whenever the page is re-rendered (its inputs are new components), with
    # both inputs "changed" and empty: only a real click or press counts.
    fired = {t["prop_id"].split(".")[0] for t in ctx.triggered if t.get("value")}
    if _id("up") in fired:
        target = sp.drill_up(parse(search).values)
    elif _id("tree") in fired and click:
        points = click.get("points") or [{}]
        found = sp.drill_target(points[0].get("id"))
        if found is None:
            raise PreventUpdate
        target = {level: found.get(level) for level in sp.DRILL_LEVELS}
    else:
        raise PreventUpdate
    return target["team"], target["app"], target["route"]
