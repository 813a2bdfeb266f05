"""GPU & cache: per deployment, how busy the GPUs were (DCGM) beside the useful work the ledger
attributes to requests, tokens per GPU-hour, KV-cache occupancy and preemptions, prefix-cache
hit rate and the prefill dollars it saved, cost per 1M prompt and generation tokens, idle cost;
and the apps whose requests share prefixes poorly.

Numbers: sql/queries/gpu_*.sql over cache_efficiency and cache_by_app_between
(formulas: docs/efficiency.md, docs/cost-model.md "Efficiency").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, callback, html

from app import context
from app.components import URL_ID, chart, ids, style
from app.filters import filters_from
from models import page_data
from models.ledger_queries import Filters, run

if TYPE_CHECKING:
    import pyarrow as pa

dash.register_page(
    __name__,
    path="/gpu",
    name="GPU & cache",
    title="GPU & cache · InferLedger",
    order=40,
)

ID = ids("gpu")
DEPLOYMENT_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9")
#: Which global filters each group of cards applies (the others are named in its scope note).
DEPLOYMENT_APPLY = ("environment", "model")
APPS_APPLY = ("app", "route")
#: The summary table: column, header, d3 format, $ prefix, relative width.
SUMMARY_COLUMNS = (
    ("deployment", "Deployment", None, None, 2.2),
    ("gpu_hours", "GPU-hours", ",.1f", None, 1),
    ("gpu_util", "GPU util. (DCGM)", ".1%", None, 1),
    ("usage_share", "Usage share", ".1%", None, 1),
    ("tokens_per_gpu_hour", "Tokens / GPU-hour", ",.0f", None, 1),
    ("kv_usage_mean", "KV mean", ".1%", None, 1),
    ("kv_usage_p90", "KV p90", ".0%", None, 1),
    ("kv_usage_max", "KV max", ".1%", None, 1),
    ("preemptions_per_1k", "Preemptions / 1k req.", ",.2f", None, 1),
    ("prefix_hit_rate", "Prefix hit rate", ".1%", None, 1),
    ("prefill_cost_saved", "Prefill saved", ",.2f", "$", 1),
    ("cost_per_1m_prompt_tokens", "$ / 1M prompt tok.", ",.4f", "$", 1),
    ("cost_per_1m_generation_tokens", "$ / 1M gen. tok.", ",.4f", "$", 1),
    ("idle_cost", "Idle cost", ",.2f", "$", 1),
    ("total_cost", "Total cost", ",.2f", "$", 1),
)


def _col(table: pa.Table, name: str) -> list[Any]:
    return table.column(name).to_pylist()


def _legend_on_top(fig: go.Figure) -> go.Figure:
    """Legend above the plot: below it, it collides with the axis title in a short card."""
    fig.update_layout(
        legend={"orientation": "h", "x": 0, "y": 1.0, "xanchor": "left", "yanchor": "bottom"},
        margin={"t": 36},
    )
    return fig


def _deployments(filters: Filters) -> pa.Table:
    return run(context.storage(), "gpu_by_deployment", filters)


def _summary_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    fig = go.Figure(
        go.Table(
            header={
                "values": [f"<b>{header}</b>" for _, header, *_ in SUMMARY_COLUMNS],
                "fill_color": "#f6f8fa",
                "align": "left",
                "font": {"size": 12},
            },
            cells={
                "values": [_col(table, column) for column, *_ in SUMMARY_COLUMNS],
                "format": [fmt for _, _, fmt, _, _ in SUMMARY_COLUMNS],
                "prefix": [prefix for _, _, _, prefix, _ in SUMMARY_COLUMNS],
                "align": "left",
                "height": 28,
                "font": {"size": 12},
            },
            columnwidth=[width for *_, width in SUMMARY_COLUMNS],
        )
    )
    fig.update_layout(margin={"l": 0, "r": 0, "t": 0, "b": 0}, paper_bgcolor="rgba(0,0,0,0)")
    return fig


def _utilization_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    deployments = _col(table, "deployment")
    hover = list(zip(_col(table, "gpu_hours"), _col(table, "tokens_per_gpu_hour"), strict=True))
    fig = go.Figure(
        [
            go.Bar(
                name="GPU utilization (DCGM)",
                y=deployments,
                x=_col(table, "gpu_util"),
                orientation="h",
                marker_color="#56B4E9",
                customdata=hover,
                hovertemplate=(
                    "<b>%{y}</b><br>DCGM GPU utilization: %{x:.1%}<br>"
                    "GPU-hours up: %{customdata[0]:,.1f}<extra></extra>"
                ),
            ),
            go.Bar(
                name="Usage share (GPU time spent on requests)",
                y=deployments,
                x=_col(table, "usage_share"),
                orientation="h",
                marker_color="#0072B2",
                customdata=hover,
                hovertemplate=(
                    "<b>%{y}</b><br>GPU time attributed to requests: %{x:.1%}<br>"
                    "Tokens per GPU-hour: %{customdata[1]:,.0f}<extra></extra>"
                ),
            ),
        ]
    )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="Share of GPU time (%)", tickformat=".0%")
    fig.update_yaxes(autorange="reversed")
    style(fig)
    fig.update_layout(margin={"l": 170})
    return _legend_on_top(fig)


def _tokens_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    deployments = _col(table, "deployment")
    fig = go.Figure(
        [
            go.Bar(
                name=name,
                y=deployments,
                x=_col(table, column),
                orientation="h",
                marker_color=colour,
                hovertemplate=f"<b>%{{y}}</b><br>{name}: %{{x:,.0f}} per GPU-hour<extra></extra>",
            )
            for column, name, colour in (
                ("tokens_per_gpu_hour", "Prompt + generated tokens", "#0072B2"),
                ("generation_tokens_per_gpu_hour", "Generated tokens", "#E69F00"),
            )
        ]
    )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="Tokens per GPU-hour up")
    fig.update_yaxes(autorange="reversed")
    style(fig)
    fig.update_layout(margin={"l": 170})
    return _legend_on_top(fig)


def _kv_data(filters: Filters) -> pa.Table:
    return run(context.storage(), "gpu_kv_occupancy", filters)


def _kv_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    groups = page_data.rows_by(table.to_pylist(), "deployment")
    fig = go.Figure(
        [
            go.Bar(
                name=deployment,
                x=[r["kv_usage"] for r in rows],
                y=[r["time_share"] for r in rows],
                marker_color=DEPLOYMENT_COLOURS[i % len(DEPLOYMENT_COLOURS)],
                customdata=[[r["kv_usage_to"], r["seconds"]] for r in rows],
                hovertemplate=(
                    f"<b>{deployment}</b><br>KV-cache usage %{{x:.0%}} to %{{customdata[0]:.0%}}: "
                    "%{y:.1%} of replica time (%{customdata[1]:,.0f} replica-s)<extra></extra>"
                ),
            )
            for i, (deployment, rows) in enumerate(groups.items())
        ]
    )
    fig.update_layout(barmode="group", bargap=0.1)
    fig.update_xaxes(title_text="KV-cache usage (% of blocks, 1 % buckets)", tickformat=".0%")
    fig.update_yaxes(title_text="Share of replica time (%)", tickformat=".0%")
    return _legend_on_top(style(fig))


def _prefix_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    fig = go.Figure(
        go.Bar(
            y=_col(table, "deployment"),
            x=_col(table, "prefix_hit_rate"),
            orientation="h",
            marker_color="#009E73",
            text=_col(table, "prefill_cost_saved"),
            texttemplate="%{x:.1%}, $%{text:,.2f} saved",
            textposition="outside",
            cliponaxis=False,
            customdata=list(
                zip(
                    _col(table, "prefill_cost_saved"),
                    _col(table, "preemptions_per_1k"),
                    _col(table, "kv_bound_h"),
                    strict=True,
                )
            ),
            hovertemplate=(
                "<b>%{y}</b><br>Prefix-cache hit rate: %{x:.1%} of prompt tokens looked up<br>"
                "Prefill cost saved: $%{customdata[0]:,.4f}<br>"
                "Preemptions: %{customdata[1]:,.2f} per 1k requests<br>"
                "KV-bound waiting: %{customdata[2]:,.2f} replica-hours<extra></extra>"
            ),
        )
    )
    fig.update_xaxes(title_text="Prefix-cache hit rate (% of tokens)", tickformat=".0%")
    fig.update_xaxes(range=[0, 1])
    fig.update_yaxes(autorange="reversed")
    style(fig, legend=False)
    fig.update_layout(margin={"l": 170, "r": 150})
    return fig


def _unit_cost_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    deployments = _col(table, "deployment")
    fig = go.Figure(
        [
            go.Bar(
                name=name,
                y=deployments,
                x=_col(table, column),
                orientation="h",
                marker_color=colour,
                hovertemplate=f"<b>%{{y}}</b><br>{name}: $%{{x:,.4f}} per 1M<extra></extra>",
            )
            for column, name, colour in (
                ("cost_per_1m_prompt_tokens", "Prompt tokens (prefill)", "#56B4E9"),
                ("cost_per_1m_generation_tokens", "Generated tokens (decode)", "#D55E00"),
            )
        ]
    )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="USD per 1M tokens (log scale)", type="log", tickprefix="$")
    fig.update_yaxes(autorange="reversed")
    style(fig)
    fig.update_layout(margin={"l": 170})
    return _legend_on_top(fig)


def _idle_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    deployments = _col(table, "deployment")
    totals = _col(table, "total_cost")
    fig = go.Figure(
        [
            go.Bar(
                name=name,
                y=deployments,
                x=_col(table, column),
                orientation="h",
                marker_color=colour,
                customdata=totals,
                hovertemplate=(
                    f"<b>%{{y}}</b><br>{name}: $%{{x:,.2f}} of $%{{customdata:,.2f}}<extra></extra>"
                ),
            )
            for column, name, colour in (
                ("usage_cost", "Usage (requests' prefill and decode)", "#0072B2"),
                ("idle_cost", "Idle (up, no request running)", "#999999"),
            )
        ]
    )
    fig.update_layout(barmode="stack", legend_traceorder="normal")
    fig.update_xaxes(title_text="GPU cost (USD)", tickprefix="$")
    fig.update_yaxes(autorange="reversed")
    style(fig)
    fig.update_layout(margin={"l": 170})
    return _legend_on_top(fig)


def _apps_data(filters: Filters) -> pa.Table:
    return run(context.storage(), "gpu_prefix_sharing", filters)


def _apps_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    fig = go.Figure(
        go.Bar(
            y=_col(table, "label"),
            x=_col(table, "hit_rate"),
            orientation="h",
            marker_color="#CC79A7",
            customdata=list(
                zip(
                    _col(table, "poor_sharing_rank"),
                    _col(table, "input_token_share"),
                    _col(table, "requests"),
                    _col(table, "prefill_cost_saved"),
                    strict=True,
                )
            ),
            hovertemplate=(
                "<b>%{y}</b> (rank %{customdata[0]})<br>"
                "Cached prompt tokens: %{x:.1%}<br>"
                "Share of all prompt tokens: %{customdata[1]:.1%}<br>"
                "Requests: %{customdata[2]:,}<br>"
                "Prefill cost saved: $%{customdata[3]:,.4f}<extra></extra>"
            ),
        )
    )
    fig.update_xaxes(title_text="Prefix-cache hit rate (% of prompt tokens)", tickformat=".0%")
    fig.update_xaxes(range=[0, 1])
    fig.update_yaxes(autorange="reversed", title_text="App · route (worst first)")
    style(fig, legend=False)
    fig.update_layout(margin={"l": 230})
    return fig


SUMMARY = chart(
    ID,
    "summary",
    "Per deployment",
    _deployments,
    _summary_figure,
    height=150,
    note=(
        "Usage share: GPU time the ledger attributes to requests' prefill and decode; KV p90 "
        "rounded down to a whole percent."
    ),
)
UTILIZATION = chart(
    ID,
    "utilization",
    "GPU utilization beside useful work",
    _deployments,
    _utilization_figure,
    height=260,
    note="DCGM's utilization counts any kernel running; usage share counts requests' work.",
)
TOKENS = chart(ID, "tokens", "Useful tokens per GPU-hour", _deployments, _tokens_figure, height=260)
KV = chart(
    ID,
    "kv",
    "KV-cache occupancy distribution",
    _kv_data,
    _kv_figure,
    height=300,
    note="Share of each deployment's replica time at each 1 % of KV-cache usage (vLLM).",
)
PREFIX = chart(
    ID,
    "prefix",
    "Prefix-cache hit rate and prefill cost saved",
    _deployments,
    _prefix_figure,
    height=260,
    note="From vLLM's prefix-cache counters; savings priced at each hour's prefill cost.",
)
UNIT_COST = chart(
    ID,
    "unit-cost",
    "Cost per 1M prompt and generated tokens",
    _deployments,
    _unit_cost_figure,
    height=260,
)
IDLE = chart(ID, "idle", "Usage and idle GPU cost", _deployments, _idle_figure, height=260)
APPS = chart(
    ID,
    "apps",
    "Apps that share prefixes poorly",
    _apps_data,
    _apps_figure,
    height=300,
    note=(
        "From the requests' cached-token counts, worst first. Savings count self-hosted "
        "deployments only (hosted APIs price cached input themselves)."
    ),
)


def layout(**_kwargs: object) -> html.Div:
    return html.Div(
        [
            html.H1("GPU & cache"),
            html.P(
                "How busy each deployment's GPUs were and how much of that was useful work, "
                "how full the KV cache ran, what the prefix cache saved, and what a token cost.",
                className="page-lead",
            ),
            html.P(id=ID("deployment-scope"), className="scope-note", role="note"),
            SUMMARY,
            html.Div([UTILIZATION, TOKENS], className="gpu-grid"),
            html.Div([KV, PREFIX], className="gpu-grid"),
            html.Div([UNIT_COST, IDLE], className="gpu-grid"),
            html.P(id=ID("apps-scope"), className="scope-note", role="note"),
            APPS,
        ],
        className="gpu-page",
    )


@callback(
    Output(ID("deployment-scope"), "children"),
    Output(ID("apps-scope"), "children"),
    Input(URL_ID, "search"),
)
def _scope_notes(search: str | None) -> tuple[str, str]:
    filters = filters_from(search)
    return (
        page_data.scope_note(
            filters,
            DEPLOYMENT_APPLY,
            "the deployment charts are per deployment (GPU, KV cache and engine metrics have "
            "no team, app or route; environment and model select deployments).",
        ),
        page_data.scope_note(
            filters,
            APPS_APPLY,
            "prefix sharing is measured per app and route over every model and environment.",
        ),
    )
