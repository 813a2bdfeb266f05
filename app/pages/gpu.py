"""GPU & cache: per deployment, how busy the GPUs were (DCGM) beside the useful work the ledger
attributes to requests, tokens per GPU-hour, KV-cache occupancy and preemptions, prefix-cache
hit rate and the prefill dollars it saved, cost per 1M prompt and generation tokens, idle cost;
and the apps whose requests share prefixes poorly. Per replica (issue #10): each vLLM replica's
utilisation beside its deployment's mean, KV occupancy, waiting requests and queue time over
time, and right-sizing findings.

Numbers: sql/queries/gpu_*.sql over cache_efficiency and cache_by_app_between
(formulas: docs/efficiency.md, docs/cost-model.md "Efficiency"); per replica and over time:
ledger/efficiency.py over sql/queries/replica_*.sql; findings: ledger/rightsizing.py over
models/rightsizing.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dash
import plotly.graph_objects as go
from dash import Input, Output, callback, html
from plotly.subplots import make_subplots

from app import context, palette
from app.components import TICK_ID, URL_ID, chart, ids
from app.figures import (
    SHARE,
    Axis,
    Column,
    Series,
    hbars_chart,
    legend_on_top,
    series_of,
    style,
    table_figure,
)
from app.filters import filters_from
from ledger import efficiency, page_data
from ledger.queries import Filters, run
from ledger.rightsizing import rightsizing_findings

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
#: Which global filters each group of cards applies (the others are named in its scope note).
DEPLOYMENT_APPLY = ("environment", "model")
APPS_APPLY = ("app", "route")
SUMMARY_COLUMNS = (
    Column("deployment", "Deployment", width=2.2),
    Column("gpu_hours", "GPU-hours", ",.1f"),
    Column("gpu_util", "GPU util. (DCGM)", ".1%"),
    Column("usage_share", "Usage share", ".1%"),
    Column("tokens_per_gpu_hour", "Tokens / GPU-hour", ",.0f"),
    Column("kv_usage_mean", "KV mean", ".1%"),
    Column("kv_usage_p90", "KV p90", ".0%"),
    Column("kv_usage_max", "KV max", ".1%"),
    Column("preemptions_per_1k", "Preemptions / 1k req.", ",.2f"),
    Column("prefix_hit_rate", "Prefix hit rate", ".1%"),
    Column("prefill_cost_saved", "Prefill saved", ",.2f", "$"),
    Column("cost_per_1m_prompt_tokens", "$ / 1M prompt tok.", ",.4f", "$"),
    Column("cost_per_1m_generation_tokens", "$ / 1M gen. tok.", ",.4f", "$"),
    Column("idle_cost", "Idle cost", ",.2f", "$"),
    Column("total_cost", "Total cost", ",.2f", "$"),
)
_HOURS_AND_TOKENS = ("gpu_hours", "tokens_per_gpu_hour")
UTILIZATION_SERIES = (
    Series(
        "gpu_util",
        "GPU utilization (DCGM)",
        palette.SKY_BLUE,
        hover="DCGM GPU utilization: %{x:.1%}<br>GPU-hours up: %{customdata[0]:,.1f}",
        custom=_HOURS_AND_TOKENS,
    ),
    Series(
        "usage_share",
        "Usage share (GPU time spent on requests)",
        palette.BLUE,
        hover=(
            "GPU time attributed to requests: %{x:.1%}<br>"
            "Tokens per GPU-hour: %{customdata[1]:,.0f}"
        ),
        custom=_HOURS_AND_TOKENS,
    ),
)
TOKEN_SERIES = series_of(
    (
        ("tokens_per_gpu_hour", "Prompt + generated tokens", palette.BLUE),
        ("generation_tokens_per_gpu_hour", "Generated tokens", palette.ORANGE),
    ),
    hover="{name}: %{x:,.0f} per GPU-hour",
)
UNIT_COST_SERIES = series_of(
    (
        ("cost_per_1m_prompt_tokens", "Prompt tokens (prefill)", palette.SKY_BLUE),
        ("cost_per_1m_generation_tokens", "Generated tokens (decode)", palette.VERMILION),
    ),
    hover="{name}: $%{x:,.4f} per 1M",
)
IDLE_SERIES = series_of(
    (
        ("usage_cost", "Usage (requests' prefill and decode)", palette.BLUE),
        ("idle_cost", "Idle (up, no request running)", palette.GREY),
    ),
    hover="{name}: $%{x:,.2f} of $%{customdata:,.2f}",
    custom="total_cost",
)
PREFIX_SERIES = Series(
    "prefix_hit_rate",
    None,
    palette.BLUISH_GREEN,
    hover=(
        "Prefix-cache hit rate: %{x:.1%} of prompt tokens looked up<br>"
        "Prefill cost saved: $%{customdata[0]:,.4f}<br>"
        "Preemptions: %{customdata[1]:,.2f} per 1k requests<br>"
        "KV-bound waiting: %{customdata[2]:,.2f} replica-hours"
    ),
    custom=("prefill_cost_saved", "preemptions_per_1k", "kv_bound_h"),
    text="prefill_cost_saved",
    texttemplate="%{x:.1%}, $%{text:,.2f} saved",
)
APPS_SERIES = Series(
    "hit_rate",
    None,
    palette.REDDISH_PURPLE,
    hover=(
        "Cached prompt tokens: %{x:.1%}<br>"
        "Share of all prompt tokens: %{customdata[1]:.1%}<br>"
        "Requests: %{customdata[2]:,}<br>"
        "Prefill cost saved: $%{customdata[3]:,.4f}"
    ),
    custom=("poor_sharing_rank", "input_token_share", "requests", "prefill_cost_saved"),
)
#: Room for the deployment names left of the bars.
_BY_DEPLOYMENT = {"l": 170}


def _deployments(filters: Filters) -> pa.Table:
    return run(context.storage(), "gpu_by_deployment", filters)


def _summary_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    return table_figure(table, SUMMARY_COLUMNS)


_utilization_figure = hbars_chart(
    "deployment",
    UTILIZATION_SERIES,
    x=Axis("Share of GPU time (%)", format=SHARE),
    margin=_BY_DEPLOYMENT,
)

_tokens_figure = hbars_chart(
    "deployment", TOKEN_SERIES, x=Axis("Tokens per GPU-hour up"), margin=_BY_DEPLOYMENT
)


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
                marker_color=palette.cycle(palette.DEPLOYMENTS, i),
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
    fig.update_xaxes(title_text="KV-cache usage (% of blocks, 1 % buckets)", tickformat=SHARE)
    fig.update_yaxes(title_text="Share of replica time (%)", tickformat=SHARE)
    return legend_on_top(style(fig))


_prefix_figure = hbars_chart(
    "deployment",
    [PREFIX_SERIES],
    x=Axis("Prefix-cache hit rate (% of tokens)", format=SHARE, range=(0, 1)),
    margin={"l": 170, "r": 150},
)

_unit_cost_figure = hbars_chart(
    "deployment",
    UNIT_COST_SERIES,
    x=Axis("USD per 1M tokens", prefix="$", from_zero=True),
    margin=_BY_DEPLOYMENT,
)

_idle_figure = hbars_chart(
    "deployment",
    IDLE_SERIES,
    x=Axis("GPU cost (USD)", prefix="$"),
    stacked=True,
    margin=_BY_DEPLOYMENT,
)


def _apps_data(filters: Filters) -> pa.Table:
    return run(context.storage(), "gpu_prefix_sharing", filters)


_apps_figure = hbars_chart(
    "label",
    [APPS_SERIES],
    x=Axis("Prefix-cache hit rate (% of prompt tokens)", format=SHARE, range=(0, 1)),
    y=Axis("App · route (worst first)"),
    hover_head="<b>%{y}</b> (rank %{customdata[0]})<br>",
    margin={"l": 230},
)

REPLICA_COLUMNS = (
    Column("deployment", "Deployment", width=2.2),
    Column("replica", "Replica", width=2),
    Column("utilization", "Utilization", ".1%"),
    Column("utilization_source", "From", width=0.8),
    Column("deployment_mean", "Deployment mean", ".1%"),
    Column("vs_deployment", "× mean", ".2f"),
    Column("kv_mean", "KV mean", ".1%"),
    Column("kv_max", "KV peak", ".1%"),
    Column("waiting_mean", "Waiting mean", ",.2f"),
    Column("waiting_max", "Waiting peak", ",.0f"),
    Column("queue_p95_s", "Queue p95 (s)", ",.3f"),
    Column("preemptions", "Preemptions", ",.0f"),
    Column("requests", "Requests", ",.0f"),
    Column("total_cost", "Cost", ",.2f", "$"),
)
FINDING_COLUMNS = (
    Column("deployment", "Deployment", width=2.2),
    Column("verdict_label", "Verdict", width=1.2),
    Column("idle_share", "Idle", ".0%"),
    Column("replicas_held", "Replicas", ",.0f"),
    Column("peak_need_replicas", "Peak need", ",.0f"),
    Column("peak_compute_replicas", "Peak compute", ",.2f"),
    Column("binding", "Set by", width=0.9),
    Column("gpus_to_cut", "GPUs to cut", ",.0f"),
    Column("saving_per_week", "Saving / week", ",.2f", "$"),
    Column("saturated_windows", "Saturated windows", ",.0f"),
)
#: The over-time panels: (column, y-axis title, tick format).
OVER_TIME_PANELS = (
    ("kv_mean", "KV-cache usage", SHARE),
    ("waiting_mean", "Waiting requests", ",.1f"),
    ("queue_p95_s", "Queue p95 (s)", ",.2~f"),
)


def _replicas(filters: Filters) -> pa.Table:
    return efficiency.replica_table(context.storage(), filters)


def _replicas_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    fig = table_figure(table, REPLICA_COLUMNS)
    fills = [
        palette.HOT_ROW_FILL if hot else palette.WHITE for hot in table.column("hot").to_pylist()
    ]
    fig.update_traces(cells_fill_color=[fills] * len(REPLICA_COLUMNS))
    return fig


def _over_time(filters: Filters) -> pa.Table:
    return efficiency.replica_over_time(context.storage(), filters)


def _over_time_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    """Three panels sharing the time axis; one line per deployment (solid), and per replica
    (dotted, hidden until picked in the legend)."""
    fig = make_subplots(
        rows=len(OVER_TIME_PANELS), cols=1, shared_xaxes=True, vertical_spacing=0.06
    )
    rows = table.to_pylist()
    deployments = list(dict.fromkeys(r["deployment"] for r in rows))
    series: dict[tuple[str, str | None], list[dict]] = {}
    for r in rows:
        series.setdefault((r["deployment"], r["replica"]), []).append(r)
    for (deployment, replica), points in series.items():
        colour = palette.cycle(palette.DEPLOYMENTS, deployments.index(deployment))
        name = deployment if replica is None else f"{replica}"
        for i, (column, title, _fmt) in enumerate(OVER_TIME_PANELS, start=1):
            fig.add_trace(
                go.Scatter(
                    x=[p["window_start"] for p in points],
                    y=[p[column] for p in points],
                    name=name,
                    legendgroup=name,
                    showlegend=i == 1,
                    visible=True if replica is None else "legendonly",
                    mode="lines",
                    connectgaps=False,
                    line={"color": colour, "dash": "solid" if replica is None else "dot"},
                    customdata=[[p["kv_max"], p["waiting_max"], p["requests"]] for p in points],
                    hovertemplate=(
                        f"<b>{name}</b>, %{{x|%Y-%m-%d %H:%M}} UTC<br>{title}: %{{y}}<br>"
                        "KV peak %{customdata[0]:.1%}, waiting peak %{customdata[1]:,.0f}, "
                        "requests %{customdata[2]:,}<extra></extra>"
                    ),
                ),
                row=i,
                col=1,
            )
    for i, (_column, title, fmt) in enumerate(OVER_TIME_PANELS, start=1):
        fig.update_yaxes(title_text=title, tickformat=fmt, rangemode="tozero", row=i, col=1)
    style(fig)
    return legend_on_top(fig)


def _over_time_note(filters: Filters) -> str:
    window_s = efficiency.series_window_s(context.storage(), filters)
    step = (
        f"{window_s // 3600} h"
        if window_s >= 3600
        else (f"{window_s // 60} min" if window_s >= 60 else f"{window_s} s")
    )
    return (
        f"One point per {step} window of scraped time (finer for shorter ranges). Deployments "
        "solid: KV usage is their replicas' mean, waiting the sum over replicas; replicas "
        "dotted (pick them in the legend). Queue p95 from the requests' engine spans."
    )


def _findings(filters: Filters) -> pa.Table:
    return rightsizing_findings(context.storage(), filters)


def _findings_figure(table: pa.Table, _filters: Filters) -> go.Figure:
    return table_figure(table, FINDING_COLUMNS)


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


REPLICAS = chart(
    ID,
    "replicas",
    "Per replica: utilization beside the deployment's mean",
    _replicas,
    _replicas_figure,
    height=260,
    note=(
        "Utilization: DCGM's for a replica whose GPUs are known (its own host or pod), else "
        "its busy share (scraped time with a request running). Hottest first; shaded: "
        f"{efficiency.HOT_REPLICA_RATIO:g}× its deployment's mean or more."
    ),
)
OVER_TIME = chart(
    ID,
    "over-time",
    "KV-cache usage, waiting requests and queue time over time",
    _over_time,
    _over_time_figure,
    height=520,
    note_fn=_over_time_note,
)
FINDINGS = chart(
    ID,
    "findings",
    "Right-sizing findings",
    _findings,
    _findings_figure,
    height=150,
    note=(
        "Peak need: the most replicas any 5-minute window of scraped time needed at 80 % "
        "of capacity or KV usage (20 % headroom). Capacity: engine-step time at full batch "
        "(peak compute, in replicas) where the model and GPU are known, else busy time. A "
        "window where requests were preempted or kept waiting needed every replica: then the "
        "finding is to add capacity, never to cut."
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
            html.H2("Replicas and right-sizing", className="section-title"),
            html.Ul(id=ID("findings-list"), className="findings", role="list"),
            FINDINGS,
            REPLICAS,
            OVER_TIME,
        ],
        className="gpu-page",
    )


@callback(Output(ID("findings-list"), "children"), Input(URL_ID, "search"), Input(TICK_ID, "data"))
def _findings_list(search: str | None, _tick: int | None) -> list[html.Li]:
    """Each finding's sentence, saturated deployments first (the table below has the numbers)."""
    table = _findings(filters_from(search))
    return [
        html.Li(message, className=f"finding finding-{verdict}")
        for message, verdict in zip(
            table.column("message").to_pylist(), table.column("verdict").to_pylist(), strict=True
        )
    ]


@callback(
    Output(ID("deployment-scope"), "children"),
    Output(ID("apps-scope"), "children"),
    Input(URL_ID, "search"),
)
def _scope_notes(search: str | None) -> tuple[str, str]:
    # No auto-refresh tick: which filters a chart applies follows from the URL, not the data.
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
