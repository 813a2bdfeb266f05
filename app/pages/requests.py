"""Request explorer: every LLM request of the cost ledger (mart_requests), with its stages and
costs, filterable and sortable, one page at a time.

Paging, sorting and filtering run on the server (sql/queries/requests_explorer*.sql): only the
page's rows reach the browser. A sort is one of a few allowlisted keys (SORT_KEYS), handed to
the query as a bound parameter that a CASE expression maps to a column, never as SQL. Each row
links to its trace (/trace/<trace_id>), keeping the global filters.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import dash
from dash import Input, Output, State, callback, dash_table, dcc, html
from dash.dash_table.Format import Format, Scheme, Symbol

from app import context, palette
from app.components import URL_ID, ids, money, to_csv, why_empty
from app.filters import filters_from
from ledger.queries import Filters, run
from models import idle_policy

dash.register_page(
    __name__,
    path="/requests",
    name="Requests",
    title="Requests · InferLedger",
    order=60,
    min_role="analyst",
)

ID = ids("requests")
PAGE_SIZE = 25
CSV_MAX_ROWS = 100_000
#: Table column -> the query's sort key (sql/queries/requests_explorer.sql). Nothing else sorts.
SORT_KEYS = {
    "start_time": "start",
    "cost": "cost",
    "tokens": "tokens",
    "e2e_s": "e2e",
    "ttft_s": "ttft",
}
DEFAULT_SORT = [{"column_id": "start_time", "direction": "desc"}]
HOSTING = {
    "self_hosted": "Self-hosted",
    "hosted": "Hosted API",
    "unpriced": "Unpriced",
}
_SECONDS = Format(precision=3, scheme=Scheme.fixed)
_USD = Format(precision=5, scheme=Scheme.fixed, symbol=Symbol.yes, symbol_prefix="$")
COLUMNS: list[dict[str, Any]] = [
    {"id": "trace", "name": "Trace", "presentation": "markdown", "type": "text"},
    {"id": "start_time", "name": "Start (UTC)", "type": "text"},
    {"id": "app", "name": "App", "type": "text"},
    {"id": "route", "name": "Route", "type": "text"},
    {"id": "model", "name": "Model", "type": "text"},
    {"id": "hosting", "name": "Hosting", "type": "text"},
    {"id": "status", "name": "Status", "type": "text"},
    {"id": "tokens", "name": "Tokens in / out", "type": "text"},
    {"id": "queue_s", "name": "Queue (s)", "type": "numeric", "format": _SECONDS},
    {"id": "prefill_s", "name": "Prefill (s)", "type": "numeric", "format": _SECONDS},
    {"id": "decode_s", "name": "Decode (s)", "type": "numeric", "format": _SECONDS},
    {"id": "ttft_s", "name": "TTFT (s)", "type": "numeric", "format": _SECONDS},
    {"id": "e2e_s", "name": "E2E (s)", "type": "numeric", "format": _SECONDS},
    {"id": "prefill_cost", "name": "Prefill ($)", "type": "numeric", "format": _USD},
    {"id": "decode_cost", "name": "Decode ($)", "type": "numeric", "format": _USD},
    {"id": "idle_cost", "name": "Idle share ($)", "type": "numeric", "format": _USD},
    {"id": "cost", "name": "Cost ($)", "type": "numeric", "format": _USD},
]


def _controls() -> html.Div:
    return html.Div(
        [
            html.Div(
                [
                    html.Label("Hosting", htmlFor=ID("hosting"), className="filter-label"),
                    dcc.Dropdown(
                        id=ID("hosting"),
                        options=[{"label": v, "value": k} for k, v in HOSTING.items()],
                        placeholder="All",
                        clearable=True,
                        className="filter-dropdown",
                    ),
                ],
                className="filter",
            ),
            html.Div(
                [
                    html.Label("Model contains", htmlFor=ID("model"), className="filter-label"),
                    dcc.Input(
                        id=ID("model"),
                        type="search",
                        placeholder="e.g. 70B, gpt",
                        debounce=True,
                        maxLength=100,
                        className="requests-input",
                    ),
                ],
                className="filter",
            ),
            html.Div(
                [
                    html.Label("Min cost ($)", htmlFor=ID("min-cost"), className="filter-label"),
                    dcc.Input(
                        id=ID("min-cost"),
                        type="number",
                        min=0,
                        step="any",
                        placeholder="0.01",
                        debounce=True,
                        className="requests-input",
                    ),
                ],
                className="filter",
            ),
            html.Div(
                dcc.Checklist(
                    id=ID("failed"),
                    options=[{"label": " Failed only", "value": "failed"}],
                    value=[],
                    className="requests-check",
                ),
                className="filter requests-failed",
            ),
            html.Button(
                "Download CSV",
                id=ID("csv-button"),
                className="button small",
                title=f"Download the matching requests (up to {CSV_MAX_ROWS:,}) as CSV",
            ),
            dcc.Download(id=ID("csv")),
        ],
        className="requests-controls",
        role="group",
        **{"aria-label": "Request filters"},
    )


def layout(**_query: Any) -> html.Div:
    # No data here: Dash renders every layout once to check ids (and sign-in may refuse it).
    return html.Div(
        [
            html.H1("Requests"),
            html.P(
                "Every LLM call in the selected range with its stages and what it cost. "
                "Sort by start, tokens, TTFT, E2E or cost; open a trace for its spans.",
                className="page-note",
            ),
            _controls(),
            html.Div(id=ID("total"), className="requests-total", role="status"),
            html.Div(id=ID("empty"), className="empty-state", role="status"),
            dcc.Loading(
                dash_table.DataTable(
                    id=ID("table"),
                    columns=COLUMNS,
                    data=[],
                    page_action="custom",
                    page_current=0,
                    page_size=PAGE_SIZE,
                    page_count=1,
                    sort_action="custom",
                    sort_mode="single",
                    sort_by=DEFAULT_SORT,
                    markdown_options={"link_target": "_self"},
                    cell_selectable=False,
                    style_as_list_view=True,
                    style_table={"overflowX": "auto"},
                    style_cell={
                        "fontFamily": 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif',
                        "fontSize": "0.85rem",
                        "padding": "0.3rem 0.5rem",
                        "maxWidth": "14rem",
                        "overflow": "hidden",
                        "textOverflow": "ellipsis",
                        "whiteSpace": "nowrap",
                    },
                    style_header={"fontWeight": 600, "backgroundColor": palette.HEADER_FILL},
                    style_cell_conditional=[
                        {"if": {"column_type": "text"}, "textAlign": "left"},
                        {"if": {"column_id": "tokens"}, "textAlign": "right"},
                        {"if": {"column_id": "trace"}, "minWidth": "8.5rem"},
                    ],
                    style_data_conditional=[
                        {
                            "if": {"filter_query": '{status} = "failed"'},
                            "backgroundColor": palette.FAILED_ROW_FILL,
                        }
                    ],
                    tooltip_delay=300,
                    tooltip_duration=None,
                    css=[
                        {"selector": ".dash-spreadsheet-menu", "rule": "display: none"},
                        {"selector": "td.dash-cell a", "rule": f"color: {palette.BRAND}"},
                        {"selector": "td.dash-cell p", "rule": "margin: 0"},
                    ],
                ),
                type="dot",
                delay_show=150,
            ),
        ],
        className="requests-page",
    )


def _explorer_args(
    hosting: str | None,
    failed: list[str] | None,
    model_like: str | None,
    min_cost: float | str | None,
    sort_by: list[dict[str, str]] | None,
) -> tuple[dict[str, Any], list[str]]:
    """The query's explorer parameters from the controls, and what was ignored (said to the
    user): an unknown hosting or sort column, a negative or non-numeric minimum cost."""
    ignored: list[str] = []
    if hosting not in HOSTING:
        if hosting:
            ignored.append(f"hosting {hosting!r}")
        hosting = None
    like = (model_like or "").strip()[:100] or None
    try:
        minimum = float(min_cost) if min_cost not in (None, "") else None
    except (TypeError, ValueError):
        minimum = None
    if minimum is not None and not minimum >= 0:  # also rejects NaN
        ignored.append(f"minimum cost {min_cost}")
        minimum = None
    sort = (sort_by or DEFAULT_SORT)[0]
    key = SORT_KEYS.get(sort.get("column_id", ""))
    if key is None:
        ignored.append(
            f"sorting by {sort.get('column_id')} (sort by start, tokens, TTFT, E2E or cost)"
        )
        key, descending = "start", True
    else:
        descending = sort.get("direction") != "asc"
    args = {
        "hosting": hosting,
        "failed_only": bool(failed),
        "model_like": like,
        "min_cost": minimum,
        "sort": key,
        "descending": descending,
    }
    return args, ignored


def _page_query(args: dict[str, Any]) -> str:
    """The query for a page: newest first (the default) has its own, faster file."""
    if args["sort"] == "start" and args["descending"]:
        return "requests_explorer_newest"
    return "requests_explorer"


def _row(r: dict[str, Any], search: str) -> dict[str, Any]:
    """A table row: the trace link (keeping the filters), status and tokens as text."""
    # the query string as typed may hold ")" or spaces, which would end the markdown link
    search = quote(search, safe="?&=%+/:,.-_~")
    tokens_in = f"{r['input_tokens']:,}" if r["input_tokens"] is not None else "–"
    tokens_out = f"{r['output_tokens']:,}" if r["output_tokens"] is not None else "–"
    return {
        **{c["id"]: r.get(c["id"]) for c in COLUMNS},
        "trace": f"[{r['trace_id'][:12]}…](/trace/{r['trace_id']}{search})",
        "hosting": HOSTING.get(r["hosting"], r["hosting"]),
        "status": "failed" if r["failed"] else "ok",
        "tokens": f"{tokens_in} / {tokens_out}",
    }


def _tooltips(r: dict[str, Any]) -> dict[str, Any]:
    """The whole text of the cells an ellipsis may cut, and the row's trace id."""
    tips = {
        "trace": r["trace_id"],
        "model": r["model"],
        "route": r["route"],
        "app": r["app"],
        "tokens": f"cached input tokens: {r['cached_input_tokens']:,}"
        if r["cached_input_tokens"] is not None
        else None,
    }
    return {k: {"value": v, "type": "text"} for k, v in tips.items() if v}


def _summary(total: dict[str, Any], filters: Filters, page: int) -> str:
    requests = total["requests"]
    noun = "request" if requests == 1 else "requests"
    parts = [
        f"{requests:,} {noun}",
        f"{money(total['cost'], 2)} with {idle_policy.COST_WITH[filters.policy]}",
        f"{total['failed']:,} failed",
    ]
    if requests:
        parts.append(f"page {page + 1:,} of {max(total['pages'], 1):,}")
    return " · ".join(parts)


@callback(
    Output(ID("table"), "data"),
    Output(ID("table"), "tooltip_data"),
    Output(ID("table"), "page_count"),
    Output(ID("table"), "page_current"),
    Output(ID("total"), "children"),
    Output(ID("empty"), "children"),
    Input(URL_ID, "search"),
    Input(ID("table"), "page_current"),
    Input(ID("table"), "sort_by"),
    Input(ID("hosting"), "value"),
    Input(ID("failed"), "value"),
    Input(ID("model"), "value"),
    Input(ID("min-cost"), "value"),
)
def _show_page(
    search: str | None,
    page_current: int | None,
    sort_by: list[dict[str, str]] | None,
    hosting: str | None,
    failed: list[str] | None,
    model_like: str | None,
    min_cost: float | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, int, str, str]:
    filters = filters_from(search)
    args, ignored = _explorer_args(hosting, failed, model_like, min_cost, sort_by)
    # Anything but paging shows the first page: the old page number means nothing any more.
    paging_only = set(dash.ctx.triggered_prop_ids) == {f"{ID('table')}.page_current"}
    page = max(page_current or 0, 0) if paging_only else 0
    storage = context.storage()
    total = run(
        storage, "requests_explorer_summary", filters, page_size=PAGE_SIZE, **args
    ).to_pylist()[0]
    if total["requests"] and page >= total["pages"]:
        page = total["pages"] - 1
    rows = run(
        storage,
        _page_query(args),
        filters,
        limit=PAGE_SIZE,
        offset=page * PAGE_SIZE,
        **args,
    ).to_pylist()
    summary = _summary(total, filters, page)
    if ignored:
        summary += " · ignored: " + "; ".join(ignored)
    empty = ""
    if not total["requests"]:
        narrowed = [
            label
            for label, on in (
                (f"hosting {args['hosting']}", args["hosting"]),
                ("failed only", args["failed_only"]),
                (f"model contains {args['model_like']!r}", args["model_like"]),
                (f"cost ≥ ${args['min_cost']}", args["min_cost"] is not None),
            )
            if on
        ]
        empty = (
            f"No request matches {', '.join(narrowed)} in this range: widen those filters."
            if narrowed
            else why_empty(filters)
        )
    search = search or ""
    return (
        [_row(r, search) for r in rows],
        [_tooltips(r) for r in rows],
        max(total["pages"], 1),
        page,
        summary,
        empty,
    )


@callback(
    Output(ID("csv"), "data"),
    Input(ID("csv-button"), "n_clicks"),
    State(URL_ID, "search"),
    State(ID("table"), "sort_by"),
    State(ID("hosting"), "value"),
    State(ID("failed"), "value"),
    State(ID("model"), "value"),
    State(ID("min-cost"), "value"),
    prevent_initial_call=True,
)
def _csv(
    _clicks: int | None,
    search: str | None,
    sort_by: list[dict[str, str]] | None,
    hosting: str | None,
    failed: list[str] | None,
    model_like: str | None,
    min_cost: float | None,
) -> dict[str, Any]:
    args, _ignored = _explorer_args(hosting, failed, model_like, min_cost, sort_by)
    table = run(
        context.storage(),
        _page_query(args),
        filters_from(search),
        limit=CSV_MAX_ROWS,
        offset=0,
        **args,
    )
    return dcc.send_string(to_csv(table), "inferledger-requests.csv")
