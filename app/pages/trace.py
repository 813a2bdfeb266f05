"""Trace view: the spans of one trace as a waterfall, the selected span's every attribute, what
the trace's LLM calls cost, and the business task it belongs to.

The spans are read from stg_spans by trace id *and* a start_ns window taken from the ledger
(sql/queries/trace_window.sql), so DuckDB prunes the spans table instead of scanning it; a
trace the ledger does not know falls back to a lookup by trace id alone, with a note that it
may be slow. A malformed id is refused before any query. The tree itself (order, depth,
orphans, critical path, engine stages) comes from models/trace_tree.py.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, callback, dcc, html

from app import context
from app.components import URL_ID, ids, money, number, seconds, stat
from app.figures import waterfall
from app.filters import filters_from
from ledger.queries import Filters, run
from models import idle_policy
from models.trace_tree import Span, TraceTree, build_tree, parse_trace_id

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
TASK_TRACES = 50
#: The whole start_ns range: the fallback lookup by trace id alone (strings: a browser's
#: numbers cannot hold 64-bit nanoseconds).
WHOLE_RANGE = {"from_ns": str(-(2**63)), "to_ns": str(2**63 - 1)}


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
            f"{_usd(calls[0]['trace_cost'])} with {idle_policy.COST_WITH[filters.policy]} "
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
    # Each attempt (trace) with whether it failed: its root span has an error status or all its
    # LLM calls failed, the rule of the Overview's failed attempts and the explorer's "Failed
    # only" (sql/queries/trace_task_traces.sql), so the three agree.
    traces = run(
        storage,
        "trace_task_traces",
        filters,
        task_key=task_key,
        from_ns=t["first_start_ns"],
        to_ns=t["last_end_ns"],
        limit=TASK_TRACES,
    ).to_pylist()
    failed_attempts = sum(1 for tr in traces if tr["attempt_failed"])
    this = next((tr for tr in traces if tr["trace_id"] == trace_id), None)
    attempts_hint = (
        f"{failed_attempts} of {len(traces)} failed; {t['traces']} trace(s), "
        f"{t['llm_calls']} LLM call(s)"
    )
    body: list[Any] = [
        title,
        html.Div(
            [
                stat("Outcome", t["outcome"], hint=f"from {t['outcome_source'] or 'its calls'}"),
                stat(
                    "Task cost",
                    _usd(t["cost"]),
                    hint=f"with {idle_policy.COST_WITH[filters.policy]}",
                ),
                stat("Waste", _usd(t["waste_cost"])),
                stat("Attempts", number(t["attempts"]), hint=attempts_hint, id=ID("attempts")),
                stat(
                    "This attempt",
                    "failed" if this and this["attempt_failed"] else "ok",
                    hint="root span error or every LLM call failed",
                    id=ID("this-attempt"),
                ),
            ],
            className="stats",
        ),
        html.P(
            f"Task {name}. Without idle: {', '.join(parts)}. Workflow {t['workflow'] or '–'}, "
            f"app {t['app'] or '–'}, route {t['route'] or '–'}; "
            f"{failed_attempts} failed attempt(s), {t['failed_calls']} failed and "
            f"{t['fallback_calls']} fallback call(s).",
            className="card-note",
        ),
    ]
    if not own and len(traces) > 1:
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
                    + (", attempt failed" if tr["attempt_failed"] else "")
                    + (f", {tr['failed_calls']} call(s) failed" if tr["failed_calls"] else ""),
                ],
                className="attempt-failed" if tr["attempt_failed"] else None,
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
            hint=f"with {idle_policy.COST_WITH[filters.policy]}",
        ),
    ]


# --- callbacks -------------------------------------------------------------------------------


class TraceView(NamedTuple):
    """Everything :func:`_show_trace` sets, by name; :data:`_VIEW_OUTPUTS` pairs each field
    with its component (the callback's outputs follow the fields' order). A NamedTuple, not a
    dataclass: Dash imports pages under a module name it does not register, which dataclasses
    cannot resolve."""

    message: Any
    message_class: Any
    stats: list[Any]
    waterfall: Any
    waterfall_style: dict[str, str]
    span_options: list[dict[str, str]]
    span: str | None
    calls: list[Any]
    task: list[Any]
    back: str
    window: dict[str, Any] | None

    @classmethod
    def empty(cls, back: str, window: dict[str, Any] | None, **changes: Any) -> TraceView:
        """The page with nothing drawn (no stats, the waterfall hidden), but `changes`."""
        view = cls(
            message=dash.no_update,
            message_class=dash.no_update,
            stats=[],
            waterfall=go.Figure(),
            waterfall_style={"display": "none"},
            span_options=[],
            span=None,
            calls=[],
            task=[],
            back=back,
            window=window,
        )
        return view._replace(**changes)


#: TraceView field -> (component id, property): the one place the two are paired.
_VIEW_OUTPUTS = {
    "message": (ID("message"), "children"),
    "message_class": (ID("message"), "className"),
    "stats": (ID("stats"), "children"),
    "waterfall": (ID("waterfall"), "figure"),
    "waterfall_style": (ID("waterfall"), "style"),
    "span_options": (ID("span"), "options"),
    "span": (ID("span"), "value"),
    "calls": (ID("calls"), "children"),
    "task": (ID("task"), "children"),
    "back": (ID("back"), "href"),
    "window": (ID("window"), "data"),
}


@callback(
    *(Output(*_VIEW_OUTPUTS[name]) for name in TraceView._fields),
    Input(ID("trace"), "data"),
    Input(URL_ID, "search"),
)
def _show_trace(trace_id: str | None, search: str | None) -> TraceView:
    # No auto-refresh tick, on purpose: one trace's spans are final once its request ended,
    # and redrawing it every tick would reset the span picked in the waterfall and its
    # details while the reader studies them. A reload shows costs a later refresh changed.
    return _trace_view(trace_id, search or "")


def _trace_view(trace_id: str | None, search: str) -> TraceView:
    back = "/requests" + search
    if not trace_id:  # malformed: the layout said so, and nothing is queried
        return TraceView.empty(back, None)
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
        return TraceView.empty(
            back,
            window,
            message=(
                f"No spans for trace {trace_id} (it may not have been ingested, or is older "
                "than retention)."
            ),
            message_class="trace-message trace-error",
            calls=_calls_panel(calls, filters) if calls else [],
            task=task if calls else [],
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
    return TraceView(
        back=back,
        window=window,
        message=" ".join(notes),
        message_class="trace-message" + (" trace-note" if notes else ""),
        stats=_stats(tree, calls, filters),
        waterfall=waterfall(tree),
        waterfall_style={},
        span_options=_span_options(tree),
        span=tree.main_root_id,
        calls=_calls_panel(calls, filters),
        task=task,
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
