"""Latency & stages: where a request's time goes (queue, retrieval, prefill, first token,
decode, per-token pace, tools, end to end) per route at p50/p95/p99, whether the latency
objectives were met, and how first-token latency moves with each deployment's load.

Numbers: sql/queries/latency_*.sql over mart_latency_buckets (merged histograms, within 2.4 %),
slo_attainment_between with slo_targets, and mart_requests / kv_cache_hourly for the load
(docs/efficiency.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dash
import plotly.graph_objects as go
from dash import Input, Output, callback, html

from app import context, palette
from app.components import URL_ID, chart, ids
from app.figures import SHARE, col, legend_on_top, style
from app.filters import filters_from
from ledger import page_data
from ledger.queries import Filters, run

if TYPE_CHECKING:
    import pyarrow as pa

dash.register_page(
    __name__,
    path="/latency",
    name="Latency & stages",
    title="Latency & stages · InferLedger",
    order=30,
)

ID = ids("latency")
STAGE_LABELS = {
    "queue": "Queue",
    "retrieval": "Retrieval",
    "prefill": "Prefill",
    "ttft": "Time to first token",
    "decode": "Decode",
    "tpot": "Time per output token",
    "tools": "Tools",
    "e2e": "End to end (LLM call)",
}
PERCENTILES = (
    ("p50_s", "p50", "circle", palette.SKY_BLUE),
    ("p95_s", "p95", "diamond", palette.BLUE),
    ("p99_s", "p99", "x", palette.VERMILION),
)
#: Which global filters each card applies (the others are named in its scope note).
STAGES_APPLY = ("environment", "app", "route", "model")
SLO_APPLY = ("route",)


def _stages_data(filters: Filters) -> pa.Table:
    return run(context.storage(), "latency_stage_percentiles", filters)


def _stages_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    routes = col(table, "route")
    stages = [STAGE_LABELS.get(s, s) for s in col(table, "stage")]
    counts = col(table, "count")
    fig = go.Figure(
        [
            go.Scatter(
                name=name,
                x=col(table, column),
                y=[routes, stages],
                mode="markers",
                marker={"symbol": symbol, "size": 10, "color": colour},
                customdata=counts,
                hovertemplate=(
                    f"<b>%{{y}}</b><br>{name}: %{{x:.3s}}s<br>"
                    "Observations: %{customdata:,}<extra></extra>"
                ),
            )
            for column, name, symbol, colour in PERCENTILES
        ]
    )
    fig.update_xaxes(title_text="Latency (seconds, log scale)", type="log", ticksuffix="s")
    fig.update_yaxes(autorange="reversed", title_text="Route · stage")
    style(fig)
    fig.update_layout(margin={"l": 200})
    return legend_on_top(fig)


def _slo_data(filters: Filters) -> pa.Table:
    return run(context.storage(), "latency_slo", filters)


def _slo_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    labels = col(table, "label")
    met = col(table, "met")
    fig = go.Figure(
        [
            go.Bar(
                name="Within target",
                y=labels,
                x=col(table, "attained_share"),
                orientation="h",
                marker_color=[palette.BLUISH_GREEN if m else palette.VERMILION for m in met],
                customdata=list(
                    zip(
                        col(table, "stage"),
                        col(table, "target_s"),
                        col(table, "requests"),
                        col(table, "days_met"),
                        col(table, "days"),
                        ["met" if m else "missed" for m in met],
                        strict=True,
                    )
                ),
                hovertemplate=(
                    "<b>%{y}</b><br>%{customdata[5]}: %{x:.2%} of %{customdata[2]:,} "
                    "within %{customdata[1]:.3s}s (%{customdata[0]})<br>"
                    "Days met: %{customdata[3]} of %{customdata[4]}<extra></extra>"
                ),
            ),
            go.Scatter(
                name="Objective (share required)",
                y=labels,
                x=col(table, "percentile"),
                mode="markers",
                marker={
                    "symbol": "line-ns-open",
                    "size": 18,
                    "color": palette.INK,
                    "line": {"width": 2},
                },
                hovertemplate="<b>%{y}</b><br>Objective: %{x:.0%} within target<extra></extra>",
            ),
        ]
    )
    fig.update_xaxes(title_text="Requests within target (%)", tickformat=SHARE, range=[0, 1.02])
    fig.update_yaxes(autorange="reversed", title_text="Objective · route")
    style(fig)
    fig.update_layout(margin={"l": 220})
    return fig


def _load_data(filters: Filters) -> pa.Table:
    return run(context.storage(), "latency_vs_load", filters)


def _load_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    groups = page_data.rows_by(table.to_pylist(), "deployment")
    traces = []
    for i, (deployment, rows) in enumerate(groups.items()):
        traces.append(
            go.Scatter(
                name=deployment,
                x=[r["requests"] for r in rows],
                y=[r["ttft_p95_s"] for r in rows],
                mode="markers",
                marker={"size": 10, "color": palette.cycle(palette.DEPLOYMENTS, i)},
                customdata=[
                    [
                        f"{r['hour']:%Y-%m-%d %H:00}",
                        r["measured_requests"],
                        r["running_mean"],
                        r["waiting_mean"],
                        r["kv_usage_mean"],
                        r["replicas"],
                    ]
                    for r in rows
                ],
                hovertemplate=(
                    f"<b>{deployment}</b>, %{{customdata[0]}} UTC<br>"
                    "TTFT p95: %{y:.3s}s (of %{customdata[1]:,} requests)<br>"
                    "Requests that hour: %{x:,}<br>"
                    "Running: %{customdata[2]:.2f}, waiting: %{customdata[3]:.2f} "
                    "(mean over %{customdata[5]} replicas)<br>"
                    "KV-cache usage: %{customdata[4]:.1%}<extra></extra>"
                ),
            )
        )
    fig = go.Figure(traces)
    fig.update_xaxes(title_text="LLM requests started in the hour (deployment, all apps)")
    fig.update_yaxes(title_text="Time to first token, p95 (seconds)", ticksuffix="s")
    return style(fig)


STAGES = chart(
    ID,
    "stages",
    "Latency by stage and route: p50, p95, p99",
    _stages_data,
    _stages_figure,
    height=720,
    note=(
        "Successful requests and service calls in the range, merged from hourly histograms "
        "(within 2.4 %). Log scale: a percentile of 0 s (no queueing) is not drawn; the CSV "
        "has it. Retrieval and tool calls have no model, so a model filter leaves them out."
    ),
)
SLO = chart(
    ID,
    "slo",
    "Latency objectives: share of requests within target",
    _slo_data,
    _slo_figure,
    height=420,
    note=(
        "Targets from the slo_targets table; each hour is judged by the objective in effect "
        "then. Green: the share reached the objective's percentile over the range."
    ),
)
LOAD = chart(
    ID,
    "load",
    "First-token latency vs load, per deployment-hour",
    _load_data,
    _load_figure,
    height=380,
    note=(
        "One point per deployment and hour. The load is the deployment's (every app); the "
        "TTFT p95 is of the requests the filters select."
    ),
)


def layout(**_kwargs: object) -> html.Div:
    return html.Div(
        [
            html.H1("Latency & stages"),
            html.P(
                "Where each request's time goes, whether the latency objectives hold, and how "
                "first-token latency grows with load.",
                className="page-lead",
            ),
            html.P(id=ID("stages-scope"), className="scope-note", role="note"),
            STAGES,
            html.Div(
                [
                    html.Div(
                        [html.P(id=ID("slo-scope"), className="scope-note", role="note"), SLO]
                    ),
                    LOAD,
                ],
                className="latency-grid",
            ),
        ],
        className="latency-page",
    )


@callback(
    Output(ID("stages-scope"), "children"),
    Output(ID("slo-scope"), "children"),
    Input(URL_ID, "search"),
)
def _scope_notes(search: str | None) -> tuple[str, str]:
    # No auto-refresh tick: which filters a chart applies follows from the URL, not the data.
    filters = filters_from(search)
    return (
        page_data.scope_note(
            filters, STAGES_APPLY, "the latency histograms have no team (filter by app)."
        ),
        page_data.scope_note(
            filters, SLO_APPLY, "each objective names its own app and environment."
        ),
    )
