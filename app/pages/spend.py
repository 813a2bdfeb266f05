"""Spend: where the money went over time, by team, app, route, model, stage or environment;
the team → app → route breakdown with a drill-down that narrows the global filters; and the
idle cost, shown under the idle policy chosen in the filter bar.

Drill-down: a click on a treemap node sets the filter bar's team/app/route dropdowns; the shell
then writes the URL (so the link is shareable and the dropdowns show the drill) and every chart
re-reads it. "See these requests" opens the request explorer with the same query string.
"""

from __future__ import annotations

from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, callback, ctx, dcc, html
from dash.exceptions import PreventUpdate

from app import context, palette
from app.components import (
    URL_ID,
    chart,
    chart_card,
    ids,
    money,
    number,
    stat,
    to_csv,
    why_empty,
)
from app.figures import empty_figure, style
from app.filters import filters_from, parse
from app.shell import FILTER_ID
from ledger import overview as ov
from ledger.queries import Filters

dash.register_page(__name__, path="/spend", name="Spend", title="Spend · InferLedger", order=10)

_id = ids("spend")
REQUESTS_PATH = "/requests"


# --------------------------------------------------------------------------- spend over time
def _area_figure(table: Any, filters: Filters, dim: str) -> go.Figure:
    per = ov.bucket_for(filters)
    keys = list(dict.fromkeys(table.column("key").to_pylist()))
    rows = table.to_pylist()
    fig = go.Figure()
    for i, key in enumerate(keys):
        mine = [r for r in rows if r["key"] == key]
        grey = key in ("(idle)", ov.OTHER)
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
    nodes = ov.tree_nodes(table)
    teams = list(dict.fromkeys(table.column("team").to_pylist()))
    color = {
        t: palette.NOT_A_KEY if t in ov.NOT_DRILLABLE else palette.cycle(palette.SERIES, i)
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
                "colors": [color[i.split(ov.NODE_SEP)[0]] for i in ids_],
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
    lambda filters: ov.spend_tree(context.storage(), filters),
    _tree_figure,
    height=420,
    note="Click a team, then an app, then a route to narrow every chart to it.",
)


# --------------------------------------------------------------------------- layout
def layout(**_kwargs: object) -> html.Div:
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
                        options=[{"label": d.title(), "value": d} for d in ov.SPEND_DIMENSIONS],
                        value="team",
                        inline=True,
                        persistence=True,
                        persistence_type="session",
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
        ],
        className="page spend-page",
    )


# --------------------------------------------------------------------------- callbacks
@callback(
    Output(_id("kpis"), "children"),
    Output(_id("idle-line"), "children"),
    Output(_id("subtitle"), "children"),
    Input(URL_ID, "search"),
)
def _kpis(search: str | None) -> tuple[list[html.Div], str, str]:
    filters = filters_from(search)
    s = ov.spend_summary(context.storage(), filters)
    tiles = [
        stat("Spend", money(s.spend), hint=f"{number(s.requests)} requests", id=_id("kpi-spend")),
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
    Input(_id("dim"), "value"),
)
def _over_time(search: str | None, dim: str | None) -> tuple[go.Figure, str]:
    filters = filters_from(search)
    dim = dim or "team"
    table = ov.spend_over_time(context.storage(), filters, dim)
    if table.num_rows == 0:
        return empty_figure(), why_empty(filters)
    return _area_figure(table, filters, dim), ""


@callback(
    Output(_id("over-time-csv"), "data"),
    Input(_id("over-time-csv-button"), "n_clicks"),
    State(URL_ID, "search"),
    State(_id("dim"), "value"),
    prevent_initial_call=True,
)
def _over_time_csv(_clicks: int | None, search: str | None, dim: str | None) -> dict[str, Any]:
    dim = dim or "team"
    table = ov.spend_over_time(context.storage(), filters_from(search), dim)
    return dcc.send_string(to_csv(table), f"inferledger-spend-by-{dim}.csv")


@callback(
    Output(_id("crumbs"), "children"),
    Output(_id("requests-link"), "href"),
    Output(_id("up"), "disabled"),
    Input(URL_ID, "search"),
)
def _crumbs(search: str | None) -> tuple[list[Any], str, bool]:
    values = parse(search).values
    path = [(level, values.get(level)) for level in ov.DRILL_LEVELS if values.get(level)]
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
        target = ov.drill_up(parse(search).values)
    elif _id("tree") in fired and click:
        points = click.get("points") or [{}]
        found = ov.drill_target(points[0].get("id"))
        if found is None:
            raise PreventUpdate
        target = {level: found.get(level) for level in ov.DRILL_LEVELS}
    else:
        raise PreventUpdate
    return target["team"], target["app"], target["route"]
