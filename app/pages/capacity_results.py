"""The Capacity page's results (app/pages/capacity.py): a plan's result mapping
(models/capacity/plan.run_plan, or a saved plan from ledger.capacity_plans) drawn as the model's
measured error up front, totals, and per pool the ranked candidates, the recommended one's
latency-vs-load curve with the knee and the SLO lines, its replicas over time, and what each app
pays; and two or three saved plans side by side. Plain functions of the mapping: no callbacks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import plotly.graph_objects as go
from dash import dcc, html
from plotly.subplots import make_subplots

from app import palette
from app.components import stat
from app.figures import legend_on_top, style
from app.formats import money, number
from models.capacity.compare import compare_table

#: (LoadPoint key, SLO key, label) of the three latency panels.
LATENCY = (
    ("ttft_p95_s", "ttft_p95_ms", "TTFT p95"),
    ("itl_p95_s", "itl_p95_ms", "ITL p95"),
    ("e2e_p95_s", "e2e_p95_ms", "E2E p95"),
)
#: How many ranked candidates a pool's table lists (the rest are in the saved plan).
RANKED_SHOWN = 15


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f} %"


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:,.0f}"


def model_error_line(result: Mapping[str, Any]) -> str:
    """ "The serving model's measured median error: E2E 13 %, ITL 8 %, TTFT 17 %, ..."."""
    e = result.get("model_error") or {}
    return (
        f"The serving model's measured median error: E2E {_pct(e.get('e2e'))}, "
        f"ITL {_pct(e.get('itl'))}, TTFT {_pct(e.get('ttft'))}, throughput "
        f"{_pct(e.get('throughput'))} ({e.get('source') or 'docs/fidelity.md'}). Replica and "
        "cost bands below carry it."
    )


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]], **extra: Any) -> html.Table:
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h, scope="col") for h in head])),
            html.Tbody([html.Tr([html.Td(c) for c in row]) for row in rows]),
        ],
        className="table admin-table",
        **extra,
    )


def _band(low: Any, mid: Any, high: Any, fmt: Callable[[Any], str]) -> str:
    return fmt(mid) if low == mid == high else f"{fmt(mid)} ({fmt(low)}–{fmt(high)})"


def ranked_rows(pool: Mapping[str, Any]) -> list[list[Any]]:
    """The ranked table's cells (the recommendation is rank 1 when there is one)."""
    rows = []
    for r in pool["candidates"][:RANKED_SHOWN]:
        at = r.get("at_peak") or {}
        knee = r.get("knee_rate") if r.get("verified") else r.get("analytic_knee_rate")
        rows.append(
            [
                r["rank"],
                r["label"],
                _band(r["replicas_low"], r["replicas"], r["replicas_high"], str),
                r["gpus"],
                _band(r["monthly_cost_low"], r["monthly_cost"], r["monthly_cost_high"], money),
                "–" if knee is None else f"{knee:.2f}",
                _ms(at.get("ttft_p95_s")),
                _ms(at.get("itl_p95_s")),
                _ms(at.get("e2e_p95_s")),
                ("✓" if at.get("meets_slo") else "✗ misses SLO") if r.get("verified") else "",
                r.get("binding") or "",
            ]
        )
    return rows


RANKED_HEAD = (
    "Rank",
    "Candidate",
    "Replicas (band)",
    "GPUs",
    "Monthly cost (band)",
    "Knee req/s/replica",
    "TTFT p95 ms",
    "ITL p95 ms",
    "E2E p95 ms",
    "Verified",
    "Binding",
)


def curve_figure(pool: Mapping[str, Any], row: Mapping[str, Any]) -> go.Figure:
    """p95 TTFT, ITL and E2E against the rate per replica, the knee (dotted) and each SLO
    target (dashed): one panel per metric."""
    curve = sorted(row.get("curve") or [], key=lambda p: p["rate"])
    fig = make_subplots(rows=1, cols=3, subplot_titles=[label for _, _, label in LATENCY])
    slo = pool.get("slo") or {}
    knee = row.get("knee_rate")
    for i, (key, slo_key, label) in enumerate(LATENCY, start=1):
        fig.add_trace(
            go.Scatter(
                x=[p["rate"] for p in curve],
                y=[p[key] * 1000 for p in curve],
                mode="lines+markers",
                name=label,
                marker={
                    "color": [palette.BLUE if p["meets_slo"] else palette.VERMILION for p in curve]
                },
                line={"color": palette.BRAND},
                showlegend=False,
                hovertemplate="%{x:.2f} req/s/replica: %{y:,.0f} ms<extra>" + label + "</extra>",
            ),
            row=1,
            col=i,
        )
        target = slo.get(slo_key)
        if target:
            fig.add_hline(
                y=target,
                line_dash="dash",
                line_color=palette.VERMILION,
                row=1,
                col=i,
                annotation_text="SLO",
                annotation_position="top left",
            )
        if knee:
            fig.add_vline(
                x=knee,
                line_dash="dot",
                line_color=palette.INK,
                row=1,
                col=i,
                annotation_text="knee",
                annotation_position="bottom right",
            )
        fig.update_xaxes(title_text="req/s per replica", row=1, col=i)
        fig.update_yaxes(title_text="ms" if i == 1 else None, rangemode="tozero", row=1, col=i)
    style(fig, legend=False)
    fig.update_layout(margin={"t": 36})
    return fig


def schedule_figure(schedule: Mapping[str, Any]) -> go.Figure:
    """Hourly replicas a perfect autoscaler runs for the P50 forecast, beside the static plan."""
    replicas = list(schedule.get("replicas") or [])
    start = schedule.get("start")
    if start is not None:
        t0 = datetime.fromtimestamp(float(start), UTC)
        x: list[Any] = [t0 + timedelta(hours=h) for h in range(len(replicas))]
    else:
        x = list(range(len(replicas)))
    static = (schedule.get("static") or {}).get("replicas")
    fig = go.Figure(
        [
            go.Scatter(
                x=x,
                y=replicas,
                mode="lines",
                line={"shape": "hv", "color": palette.BLUE},
                name="Autoscaler, P50 traffic",
            ),
            go.Scatter(
                x=[x[0], x[-1]] if x else [],
                y=[static, static] if x else [],
                mode="lines",
                line={"dash": "dash", "color": palette.VERMILION},
                name=f"Static plan ({static} replicas)",
            ),
        ]
    )
    fig.update_yaxes(title_text="Replicas", rangemode="tozero")
    style(fig)
    return legend_on_top(fig)


def _cost_stats(pool: Mapping[str, Any], row: Mapping[str, Any]) -> list[html.Div]:
    sched = pool.get("schedule") or {}
    auto = (sched.get("autoscaler") or {}).get("monthly_cost") or {}
    static = sched.get("static") or {}
    return [
        stat("Recommended", row["label"]),
        stat(
            "Replicas at peak",
            _band(row["replicas_low"], row["replicas"], row["replicas_high"], str),
            hint=f"{row['gpus']} GPUs; peak {pool['peak_rate']:.2f} req/s",
        ),
        stat(
            "Monthly cost (static)",
            money(row["monthly_cost"]),
            hint=f"band {money(row['monthly_cost_low'])}–{money(row['monthly_cost_high'])}",
        ),
        stat(
            "Autoscaled monthly cost P50",
            money(auto.get("p50")),
            hint=f"P10 {money(auto.get('p10'))} · P90 {money(auto.get('p90'))} · static "
            f"{money(static.get('monthly_cost'))}",
        ),
    ]


def _apps_cost(pool: Mapping[str, Any]) -> html.Table | html.P:
    rows = [
        [
            c["app"],
            number(c.get("requests_per_month")),
            money(c.get("monthly_cost")),
            money(c.get("usd_per_1m_input"), 4),
            money(c.get("usd_per_1m_output"), 4),
            money(c.get("usd_per_request"), 5),
            money(c.get("usd_per_accepted_outcome"), 4),
        ]
        for c in pool.get("apps_cost") or []
    ]
    if not rows:
        return html.P("No recommendation, so no per-app cost.", className="empty-state")
    head = (
        "App",
        "Requests / month",
        "Monthly cost",
        "$ / 1M input",
        "$ / 1M output",
        "$ / request",
        "$ / accepted outcome",
    )
    return _table(head, rows)


def pool_section(pool: Mapping[str, Any], index: int, id_of: Callable[[str], str]) -> html.Section:
    slo = pool.get("slo") or {}
    targets = ", ".join(
        f"{label} ≤ {slo[key]:,.0f} ms" for _, key, label in LATENCY if slo.get(key)
    )
    head = [
        html.H2(pool["name"], className="card-title"),
        html.P(
            f"Apps: {', '.join(pool['apps'])} · SLO {targets or 'none'} · peak "
            f"{pool['peak_rate']:.2f} req/s · {pool['screened']} candidates screened, "
            f"{len(pool.get('infeasible') or [])} infeasible",
            className="card-note",
        ),
    ]
    best = pool.get("best")
    body: list[Any] = [_table(RANKED_HEAD, ranked_rows(pool), id=id_of(f"ranked-{index}"))]
    if not pool["candidates"]:
        reasons = sorted({i["reason"] for i in pool.get("infeasible") or []})
        body = [
            html.P(
                "No candidate can serve this pool: add larger tensor-parallel sizes, fp8 "
                "weights or GPUs with more memory.",
                className="auth-error",
                role="alert",
            ),
            html.Ul([html.Li(r) for r in reasons[:5]], className="card-note"),
        ]
    elif best is None:
        body.insert(
            0,
            html.P(
                "No candidate met every SLO at the peak: widen the candidates or relax the SLO.",
                className="auth-error",
                role="alert",
            ),
        )
    else:
        row = pool["candidates"][best]
        body = [
            html.Div(_cost_stats(pool, row), className="stats"),
            *body,
            html.H3("Latency vs load: the recommended candidate"),
            dcc.Graph(
                id=id_of(f"curve-{index}"),
                figure=curve_figure(pool, row),
                config={"displaylogo": False},
                style={"height": "320px"},
            ),
        ]
        if pool.get("schedule"):
            body += [
                html.H3("Replicas over the forecast (P50 traffic) vs the static plan"),
                dcc.Graph(
                    id=id_of(f"schedule-{index}"),
                    figure=schedule_figure(pool["schedule"]),
                    config={"displaylogo": False},
                    style={"height": "300px"},
                ),
            ]
        body += [html.H3("What each app pays"), _apps_cost(pool)]
    return html.Section([*head, *body], className="card", **{"aria-label": pool["name"]})


def result_view(result: Mapping[str, Any], id_of: Callable[[str], str]) -> list[Any]:
    """The whole result: model error, totals, notes on unplanned and hosted apps, the pools."""
    totals = result.get("totals") or {}
    out: list[Any] = [
        html.P(model_error_line(result), className="coverage-banner", id=id_of("model-error")),
        html.Div(
            [
                stat("Plan", str(result.get("name", ""))),
                stat("Monthly cost", money(totals.get("monthly_cost")), id=id_of("total-cost")),
                stat("GPUs", str(totals.get("gpus", "–"))),
                stat(
                    "Planner / model version",
                    f"{result.get('planner_version')} / {result.get('model_version')}",
                    hint=f"took {result.get('duration_s', 0):.1f} s",
                ),
            ],
            className="stats",
        ),
    ]
    notes = [f"{u['app']}: not planned ({u['reason']})" for u in result.get("unplanned") or []]
    notes += [
        f"{h['app']}: {_pct(h['share'])} moved to {h['hosted']} "
        f"({money(h.get('monthly_cost'))} / month)"
        for h in result.get("hosted") or []
    ]
    if notes:
        out.append(html.Ul([html.Li(n) for n in notes], className="card-note"))
    out += [pool_section(p, i, id_of) for i, p in enumerate(result.get("pools") or [])]
    return out


def comparison(plans: Sequence[Mapping[str, Any]]) -> html.Table:
    """Saved plans side by side, as the decision record compares them
    (models.capacity.compare): one column per plan, costs relative to the first, and the
    knobs, candidates and SLOs that differ."""
    table = compare_table(plans)
    return _table(table.head, table.rows)
