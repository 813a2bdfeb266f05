"""Trace view: the spans of one trace as a waterfall, the selected span's every attribute, what
the trace's LLM calls cost, and the business task it belongs to.

The spans are read from stg_spans by trace id *and* a start_ns window taken from the ledger
(sql/queries/trace_window.sql), so DuckDB prunes the spans table instead of scanning it; a
trace the ledger does not know falls back to a lookup by trace id alone, with a note that it
may be slow. A malformed id is refused before any query. The tree itself (order, depth,
orphans, critical path, engine stages) comes from models/trace_tree.py.
"""

from __future__ import annotations

from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, callback, dcc, html

from app import context
from app.components import URL_ID, ids, money, number, seconds, stat
from app.filters import filters_from
from models.ledger_queries import Filters, run
from models.trace_tree import Category, Node, Span, TraceTree, build_tree, parse_trace_id

dash.register_page(
    __name__,
    path_template="/trace/<trace_id>",
    name="Trace",
    title="Trace · InferLedger",
    nav=False,
    min_role="analyst",
)

ID = ids("trace")
MAX_SPANS = 1000
LABEL_CHARS = 36  # the label column's width, in characters of its font
LABEL_DOMAIN = 0.36  # the share of the figure's width that the label column takes
INDENT = 0.018  # per depth level, in the figure's width
TASK_TRACES = 50
#: The whole start_ns range: the fallback lookup by trace id alone (strings: a browser's
#: numbers cannot hold 64-bit nanoseconds).
WHOLE_RANGE = {"from_ns": str(-(2**63)), "to_ns": str(2**63 - 1)}
COLORS = {
    Category.SERVER.value: "#6b7280",
    Category.LLM_CALL.value: "#0b5cad",
    Category.ENGINE.value: "#7c3aed",
    "queue": "#b7791f",
    "prefill": "#c2410c",
    "decode": "#15803d",
    Category.RETRIEVAL.value: "#0e7490",
    Category.TOOLS.value: "#a21caf",
    Category.OTHER.value: "#9ca3af",
}
_LEGEND = {
    Category.SERVER.value: "server span",
    Category.LLM_CALL.value: "LLM call (app)",
    Category.ENGINE.value: "engine span",
    "queue": "engine: queue",
    "prefill": "engine: prefill",
    "decode": "engine: decode",
    Category.RETRIEVAL.value: "retrieval",
    Category.TOOLS.value: "tools",
    Category.OTHER.value: "other",
}
_POLICY_LABEL = {
    "configured": "each deployment's idle policy",
    "separate": "idle as a separate line",
    "usage": "idle shared by usage",
    "even": "idle shared evenly",
}


def _usd(value: float | None) -> str:
    """Money with enough digits for one request's fraction of a cent."""
    if value == 0:
        return "$0"
    return money(value, 4 if value is not None and abs(value) < 1 else 2)


def _loading(child: Any) -> dcc.Loading:
    return dcc.Loading(child, type="dot", delay_show=150)


def layout(trace_id: str | None = None, **_query: Any) -> html.Div:
    # No data here: Dash renders every layout once to check ids (and sign-in may refuse it).
    parsed = parse_trace_id(trace_id)
    invalid = trace_id is not None and parsed is None
    shown = (trace_id or "")[:80]
    return html.Div(
        [
            html.Div(
                [
                    html.H1(["Trace ", html.Code(parsed or shown, className="trace-id")]),
                    dcc.Link("← All requests", href="/requests", id=ID("back"), className="back"),
                ],
                className="trace-head",
            ),
            html.Div(
                f"“{shown}” is not a trace id: a trace id is 32 hexadecimal characters "
                "(0–9, a–f), as in /trace/4bf92f3577b34da6a3ce929d0e0e4736."
                if invalid
                else "",
                id=ID("message"),
                className="trace-message" + (" trace-error" if invalid else ""),
                role="status",
            ),
            dcc.Store(id=ID("trace"), data=parsed),
            dcc.Store(id=ID("window"), data=None),
            html.Div(
                [
                    _loading(html.Div(id=ID("stats"), className="stats")),
                    html.Div(
                        [
                            html.Section(
                                [
                                    html.H2("Spans", className="card-title"),
                                    html.P(
                                        "Click a bar for its attributes. Outlined bars are the "
                                        "critical path; engine spans show their queue, prefill "
                                        "and decode.",
                                        className="card-note",
                                    ),
                                    _loading(
                                        dcc.Graph(
                                            id=ID("waterfall"),
                                            config={"displaylogo": False, "responsive": True},
                                        )
                                    ),
                                ],
                                className="card trace-waterfall",
                                **{"aria-label": "Span waterfall"},
                            ),
                            html.Aside(
                                [
                                    html.Label(
                                        "Span (or click a bar)",
                                        htmlFor=ID("span"),
                                        className="filter-label",
                                    ),
                                    dcc.Dropdown(
                                        id=ID("span"),
                                        options=[],
                                        value=None,
                                        clearable=False,
                                        placeholder="Pick a span",
                                        className="trace-span-select",
                                    ),
                                    # its own indicator: picking a span leaves the rest in view
                                    _loading(html.Div(id=ID("details"))),
                                ],
                                className="card trace-details",
                                **{"aria-label": "Selected span"},
                            ),
                        ],
                        className="trace-grid",
                    ),
                    _loading(html.Section(id=ID("calls"), className="card trace-calls")),
                    _loading(html.Section(id=ID("task"), className="card trace-task")),
                ],
                hidden=invalid,
                className="trace-body",
            ),
        ],
        className="trace-page",
    )


# --- the waterfall ---------------------------------------------------------------------------


def _label(node: Node) -> str:
    """The span's name, shortened to fit its indented place in the label column."""
    room = max(LABEL_CHARS - 2 * node.depth, 12)
    name = node.span.name if len(node.span.name) <= room else node.span.name[: room - 1] + "…"
    return ("✖ " if node.span.failed else "") + name


def _hover_lines(node: Node) -> str:
    span = node.span
    lines = [f"service {span.service or '–'}"]
    if span.model:
        lines.append(f"model {span.model}")
    if span.input_tokens is not None or span.output_tokens is not None:
        lines.append(f"tokens {number(span.input_tokens)} in → {number(span.output_tokens)} out")
    for seg in node.segments:
        lines.append(f"{seg.stage} {seg.duration_ms:,.1f} ms")
    if span.failed:
        lines.append("status: error")
    if node.orphan:
        lines.append("parent span not found: shown as a root")
    if node.critical:
        lines.append("on the critical path")
    return "<br>".join(lines)


def waterfall_figure(tree: TraceTree) -> dict[str, Any]:
    """One row per span (depth-first, indented), bars from the trace's start; engine spans as
    their queue / prefill / decode stretches. A plotly figure as a dict."""
    bars: dict[str, dict[str, list[Any]]] = {}

    def add(group: str, row: int, node: Node, base: float, width: float) -> None:
        b = bars.setdefault(
            group, {"y": [], "base": [], "x": [], "custom": [], "line": [], "lw": []}
        )
        b["y"].append(row)
        b["base"].append(base)
        b["x"].append(width)
        b["custom"].append(
            [
                node.span.span_id,
                node.span.name,
                node.duration_ms,
                node.offset_ms,
                _hover_lines(node),
            ]
        )
        b["line"].append("#111827" if node.critical else COLORS.get(group, "#9ca3af"))
        b["lw"].append(2 if node.critical else 1)

    for row, node in enumerate(tree.nodes):
        if node.segments:
            for seg in node.segments:
                add(seg.stage, row, node, seg.offset_ms, seg.duration_ms)
        else:
            add(node.category.value, row, node, node.offset_ms, node.duration_ms)

    traces = [
        {
            "type": "bar",
            "name": _LEGEND[group],
            "orientation": "h",
            "y": bars[group]["y"],
            "base": bars[group]["base"],
            "x": bars[group]["x"],
            "customdata": bars[group]["custom"],
            "marker": {
                "color": COLORS[group],
                "line": {"color": bars[group]["line"], "width": bars[group]["lw"]},
            },
            "width": 0.62,
            "hovertemplate": (
                "<b>%{customdata[1]}</b><br>%{customdata[2]:,.1f} ms, starting at "
                "+%{customdata[3]:,.1f} ms<br>%{customdata[4]}<extra>%{fullData.name}</extra>"
            ),
        }
        for group in COLORS
        if group in bars
    ]
    rows = len(tree.nodes)
    grid = "#e4e7eb"
    layout = {
        # app.components.style's house style, written out: a plain dict skips plotly's
        # validation, which cost ~100 ms a trace (callbacks have 300 ms)
        "font": {"family": "Inter, system-ui, sans-serif", "size": 13, "color": "#1f2933"},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "#ffffff",
        "hoverlabel": {"font": {"size": 13}},
        "barmode": "overlay",
        "height": max(240, 110 + 24 * rows),
        "margin": {"l": 8, "r": 16, "t": 36, "b": 40},
        "legend": {
            "orientation": "h",
            "yref": "container",
            "y": 1,
            "yanchor": "top",
            "x": 0,
            "font": {"size": 12},
        },
        "clickmode": "event",
        # the span names, indented by depth (tick labels are right-aligned: no indent there)
        "annotations": [
            {
                "x": INDENT * node.depth,
                "y": row,
                "xref": "paper",
                "yref": "y",
                "xanchor": "left",
                "text": _label(node),
                "hovertext": node.span.name,
                "showarrow": False,
                "font": {"size": 11, "color": "#b91c1c" if node.span.failed else "#1f2933"},
            }
            for row, node in enumerate(tree.nodes)
        ],
        "yaxis": {
            "tickvals": list(range(rows)),
            "showticklabels": False,
            "autorange": "reversed",
            "fixedrange": True,
            "showgrid": False,
        },
        "xaxis": {
            "domain": [LABEL_DOMAIN, 1],
            "title": {"text": "ms from the trace's start"},
            "rangemode": "tozero",
            "zeroline": False,
            "gridcolor": grid,
        },
    }
    return {"data": traces, "layout": layout}


# --- panels ----------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[Any]], class_name: str = "table") -> html.Table:
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h, scope="col") for h in headers])),
            html.Tbody([html.Tr([html.Td(c) for c in r]) for r in rows]),
        ],
        className=class_name,
    )


def _details(trace_id: str, span_id: str, window: dict[str, Any]) -> list[Any]:
    """Every field, attribute and resource attribute of one span."""
    fields = run(
        context.storage(),
        "trace_span_detail",
        _no_filters(),
        trace_id=trace_id,
        span_id=span_id,
        from_ns=int(window["from_ns"]),
        to_ns=int(window["to_ns"]),
    ).to_pylist()
    if not fields:
        return [html.H2("Span details", className="card-title"), html.P("Span not found.")]
    name = next(f["value"] for f in fields if f["section"] == "span" and f["key"] == "name")
    sections: list[Any] = [html.H2(["Span ", html.Code(name)], className="card-title")]
    for section, title in (("span", "Span"), ("attribute", "Attributes"), ("resource", "Resource")):
        rows = [[f["key"], f["value"]] for f in fields if f["section"] == section]
        if rows:
            sections += [
                html.H3(title, className="details-section"),
                _table(["Key", "Value"], rows, "table details-table"),
            ]
    return sections


def _no_filters() -> Filters:
    """The trace queries take no global filter; `run` still wants a Filters."""
    return filters_from(None)


def _calls_panel(calls: list[dict[str, Any]], filters: Filters) -> list[Any]:
    title = html.H2("LLM calls and their cost", className="card-title")
    if not calls:
        return [
            title,
            html.P(
                "The cost ledger holds no LLM call of this trace (none was made, or the "
                "ledger has not been refreshed since it arrived).",
                className="empty-state",
            ),
        ]
    rows = []
    for c in calls:
        flags = [f for f, on in (("failed", c["failed"]), ("fallback", c["fallback"])) if on]
        idle_title = (
            f"idle share: by usage {_usd(c['idle_usage_cost'])} · evenly "
            f"{_usd(c['idle_even_cost'])} · per deployment {_usd(c['idle_configured_cost'])}"
        )
        rows.append(
            [
                c["start_time"],
                html.Span(c["model"] or "–", title=c["model"] or ""),
                f"{c['hosting']}" + (f" ({c['replica']})" if c["replica"] else ""),
                f"{number(c['input_tokens'])} / {number(c['cached_input_tokens'])} / "
                f"{number(c['output_tokens'])}",
                seconds(c["queue_s"]),
                seconds(c["prefill_s"]),
                seconds(c["decode_s"]),
                seconds(c["ttft_s"]),
                seconds(c["e2e_s"]),
                f"{c['gpu_s']:,.3f}",
                _usd(c["prefill_cost"]),
                _usd(c["decode_cost"]),
                html.Span(_usd(c["idle_cost"]), title=idle_title),
                html.Strong(_usd(c["cost"])),
                ", ".join(flags) or "ok",
            ]
        )
    return [
        title,
        html.P(
            f"{len(calls)} call{'s' if len(calls) != 1 else ''}, "
            f"{_usd(calls[0]['trace_cost'])} with {_POLICY_LABEL[filters.policy]} "
            f"(hover an idle share for the other policies); "
            f"{calls[0]['trace_gpu_s']:,.3f} GPU-seconds.",
            className="card-note",
        ),
        html.Div(
            _table(
                [
                    "Start (UTC)",
                    "Model",
                    "Hosting",
                    "Tokens in / cached / out",
                    "Queue",
                    "Prefill",
                    "Decode",
                    "TTFT",
                    "E2E",
                    "GPU-s",
                    "Prefill $",
                    "Decode $",
                    "Idle $",
                    "Cost $",
                    "Status",
                ],
                rows,
                "table calls-table",
            ),
            className="table-scroll",
        ),
    ]


def _task_panel(trace_id: str, task_key: str | None, filters: Filters, search: str) -> list[Any]:
    title = html.H2("Task", className="card-title")
    if not task_key:
        return [
            title,
            html.P("No task: the ledger has no call of this trace.", className="empty-state"),
        ]
    storage = context.storage()
    found = run(storage, "trace_task", filters, task_key=task_key).to_pylist()
    own = task_key.startswith("trace:")
    name = "this trace (it carries no inferledger.task.id)" if own else task_key
    if not found:
        return [
            title,
            html.P(
                f"Task {name}: its outcome is not computed yet (the ledger refreshes it "
                "within a minute of its last call).",
                className="empty-state",
            ),
        ]
    t = found[0]
    parts = [
        f"LLM {_usd(t['llm_cost'])}",
        f"retrieval {_usd(t['retrieval_cost'])}",
        f"tools {_usd(t['tools_cost'])}",
        f"review {_usd(t['review_cost'])}",
    ]
    body: list[Any] = [
        title,
        html.Div(
            [
                stat("Outcome", t["outcome"], hint=f"from {t['outcome_source'] or 'its calls'}"),
                stat(
                    "Task cost",
                    _usd(t["cost"]),
                    hint=f"with {_POLICY_LABEL[filters.policy]}",
                ),
                stat("Waste", _usd(t["waste_cost"])),
                stat(
                    "Attempts",
                    number(t["attempts"]),
                    hint=f"{t['traces']} trace(s), {t['llm_calls']} LLM call(s)",
                ),
            ],
            className="stats",
        ),
        html.P(
            f"Task {name}. Without idle: {', '.join(parts)}. Workflow {t['workflow'] or '–'}, "
            f"app {t['app'] or '–'}, route {t['route'] or '–'}; "
            f"{t['failed_calls']} failed and {t['fallback_calls']} fallback call(s).",
            className="card-note",
        ),
    ]
    if not own and t["traces"] > 1:
        traces = run(
            storage,
            "trace_task_traces",
            filters,
            task_key=task_key,
            from_ns=t["first_start_ns"],
            to_ns=t["last_end_ns"],
            limit=TASK_TRACES,
        ).to_pylist()
        items = [
            html.Li(
                [
                    html.Span("this trace", className="current")
                    if tr["trace_id"] == trace_id
                    else dcc.Link(
                        tr["trace_id"][:12] + "…", href=f"/trace/{tr['trace_id']}{search}"
                    ),
                    f" — attempt {tr['attempt'] or '–'}, {tr['start_time']} UTC, "
                    f"{tr['llm_calls']} call(s), {_usd(tr['cost'])}"
                    + (f", {tr['failed_calls']} failed" if tr["failed_calls"] else ""),
                ]
            )
            for tr in traces
        ]
        body += [html.H3("Traces of this task", className="details-section"), html.Ul(items)]
    return body


def _span_options(tree: TraceTree) -> list[dict[str, str]]:
    """The span picker: every span, indented by depth, in the waterfall's order."""
    return [
        {
            "label": "\u00a0\u00a0" * n.depth
            + ("✖ " if n.span.failed else "")
            + f"{n.span.name} ({seconds(n.duration_s)})",
            "value": n.span.span_id,
        }
        for n in tree.nodes
    ]


def _stats(tree: TraceTree, calls: list[dict[str, Any]], filters: Filters) -> list[Any]:
    services = sorted({n.span.service for n in tree.nodes if n.span.service})
    return [
        stat("Spans", number(len(tree.nodes))),
        stat("Duration", seconds(tree.duration_s)),
        stat("Services", number(len(services)), hint=", ".join(services)[:80]),
        stat("LLM calls", number(len(calls))),
        stat(
            "LLM cost",
            _usd(calls[0]["trace_cost"]) if calls else "–",
            hint=f"with {_POLICY_LABEL[filters.policy]}",
        ),
    ]


# --- callbacks -------------------------------------------------------------------------------


@callback(
    Output(ID("message"), "children"),
    Output(ID("message"), "className"),
    Output(ID("stats"), "children"),
    Output(ID("waterfall"), "figure"),
    Output(ID("waterfall"), "style"),
    Output(ID("span"), "options"),
    Output(ID("span"), "value"),
    Output(ID("calls"), "children"),
    Output(ID("task"), "children"),
    Output(ID("back"), "href"),
    Output(ID("window"), "data"),
    Input(ID("trace"), "data"),
    Input(URL_ID, "search"),
)
def _show_trace(trace_id: str | None, search: str | None) -> tuple[Any, ...]:
    search = search or ""
    back = "/requests" + search
    if not trace_id:  # malformed: the layout said so, and nothing is queried
        return (
            dash.no_update,
            dash.no_update,
            [],
            go.Figure(),
            {"display": "none"},
            [],
            None,
            [],
            [],
            back,
            None,
        )
    filters = filters_from(search)
    storage = context.storage()
    where = run(storage, "trace_window", filters, trace_id=trace_id).to_pylist()[0]
    notes: list[str] = []
    if where["calls"]:
        window = {"from_ns": str(where["from_ns"]), "to_ns": str(where["to_ns"])}
    else:
        window = WHOLE_RANGE
        notes.append(
            "This trace is not in the cost ledger (no LLM or service call of it has been "
            "costed), so its spans were looked up by trace id alone: that scans every span "
            "and may be slow."
        )
    rows = run(
        storage,
        "trace_spans",
        filters,
        trace_id=trace_id,
        from_ns=int(window["from_ns"]),
        to_ns=int(window["to_ns"]),
        limit=MAX_SPANS + 1,
    ).to_pylist()
    calls = run(
        storage,
        "trace_requests",
        filters,
        trace_id=trace_id,
        from_ns=int(window["from_ns"]),
        to_ns=int(window["to_ns"]),
    ).to_pylist()
    task = _task_panel(trace_id, where["task_key"], filters, search)
    if not rows:
        message = (
            f"No spans for trace {trace_id} (it may not have been ingested, or is older "
            "than retention)."
        )
        return (
            message,
            "trace-message trace-error",
            [],
            go.Figure(),
            {"display": "none"},
            [],
            None,
            _calls_panel(calls, filters) if calls else [],
            task if calls else [],
            back,
            window,
        )
    if len(rows) > MAX_SPANS:
        notes.append(f"Showing the first {MAX_SPANS:,} spans of this trace, by start time.")
        rows = rows[:MAX_SPANS]
    tree = build_tree(Span.from_row(r) for r in rows)
    if tree.orphans:
        notes.append(
            f"{tree.orphans} span(s) name a parent that is not here (not ingested, or outside "
            "the lookup window): they are shown as roots."
        )
    # the details come from the span picker's own callback: the main root's first
    return (
        " ".join(notes),
        "trace-message" + (" trace-note" if notes else ""),
        _stats(tree, calls, filters),
        waterfall_figure(tree),
        {},
        _span_options(tree),
        tree.main_root_id,
        _calls_panel(calls, filters),
        task,
        back,
        window,
    )


@callback(
    Output(ID("span"), "value", allow_duplicate=True),
    Input(ID("waterfall"), "clickData"),
    prevent_initial_call=True,
)
def _click_span(click: dict[str, Any] | None) -> Any:
    """A click on a bar picks its span."""
    points = (click or {}).get("points") or []
    if not points or not points[0].get("customdata"):
        return dash.no_update
    return str(points[0]["customdata"][0])


@callback(
    Output(ID("details"), "children"),
    Input(ID("span"), "value"),
    State(ID("trace"), "data"),
    State(ID("window"), "data"),
)
def _show_span(span_id: str | None, trace_id: str | None, window: dict[str, Any] | None) -> Any:
    if not span_id or not trace_id or not window:
        return []
    return _details(trace_id, span_id, window)
