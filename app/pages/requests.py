"""Request explorer: every LLM request of the cost ledger (mart_requests), with its stages and
costs, filterable and sortable, in a grid that loads rows from the server as it scrolls.

The grid (dash-ag-grid, infinite row model) asks for blocks of rows with `getRowsRequest`; the
server answers `getRowsResponse` from sql/queries/requests_explorer*.sql, so paging, sorting and
filtering run in SQL and only the block's rows reach the browser. A sort is one of a few
allowlisted keys (SORT_KEYS), handed to the query as a bound parameter that a CASE expression
maps to a column, never as SQL. Each row links to its trace (/trace/<trace_id>), keeping the
global filters.

The summary reconciles with Spend (issue #10, §3): it states the Spend page's total for the
same global filters, split into LLM calls, idle, human review, retrieval, tools and hourly
services (sql/queries/requests_explorer_spend.sql reads the rows Spend reads), and says what
the table's rows sum: LLM calls with their idle share.
"""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import quote

import dash
import dash_ag_grid as dag
from dash import Input, Output, State, callback, clientside_callback, dcc, html

from app import context
from app.components import TICK_ID, URL_ID, ids, money, why_empty
from app.exports import csv_name, header_lines, write_rows
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
GRID_ID = ID("grid")
#: Rows the grid asks for at once (one SQL page).
BLOCK_SIZE = 100
#: Grid column -> the query's sort key (sql/queries/requests_explorer.sql). Nothing else sorts.
SORT_KEYS = {
    "start_time": "start",
    "cost": "cost",
    "tokens": "tokens",
    "e2e_s": "e2e",
    "ttft_s": "ttft",
}
DEFAULT_SORT = [{"colId": "start_time", "sort": "desc"}]
HOSTING = {
    "self_hosted": "Self-hosted",
    "hosted": "Hosted API",
    "unpriced": "Unpriced",
}
#: The spend parts of requests_explorer_spend.sql, in the order the summary lists them.
SPEND_PARTS = {
    "llm": "LLM calls",
    "idle_shared": "idle shared to calls",
    "idle_unshared": "idle nobody shares",
    "review": "human review",
    "retrieval": "retrieval",
    "tools": "tools",
    "hourly_services": "hourly services with no call",
    "other": "other",
}
_SECONDS = {"function": "d3.format('.3f')(params.value)"}
_USD = {"function": "params.value == null ? '–' : '$' + d3.format(',.5f')(params.value)"}


def _num(field: str, name: str, fmt: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "field": field,
        "headerName": name,
        "valueFormatter": fmt,
        "type": "rightAligned",
        "sortable": field in SORT_KEYS,
        "minWidth": 60,
        **extra,
    }


COLUMNS: list[dict[str, Any]] = [
    {
        "field": "trace",
        "headerName": "Trace",
        "cellRenderer": "markdown",
        "linkTarget": "_self",
        "minWidth": 100,
        # keyboard access: the grid lets Enter through to the focused link (Tab reaches it)
        "suppressKeyboardEvent": {"function": "params.event.key === 'Enter'"},
        "tooltipField": "trace_id",
    },
    {"field": "start_time", "headerName": "Start (UTC)", "sortable": True, "minWidth": 140},
    {"field": "app", "headerName": "App", "tooltipField": "app", "minWidth": 70},
    {"field": "route", "headerName": "Route", "tooltipField": "route", "minWidth": 70},
    {"field": "model", "headerName": "Model", "tooltipField": "model", "minWidth": 100},
    {"field": "hosting", "headerName": "Hosting", "minWidth": 80},
    {"field": "status", "headerName": "Status", "minWidth": 70, "tooltipField": "status_note"},
    # the cost early: visible without a scroll bar at 1280 px (columns fit the grid's width)
    {
        "field": "cost",
        "headerName": "Cost ($)",
        "valueFormatter": {
            "function": "params.value == null ? '–' : '$' + d3.format(',.5f')(params.value)"
            " + (params.data && params.data.cost_mark ? ' ' + params.data.cost_mark : '')"
        },
        "type": "rightAligned",
        "sortable": True,
        "minWidth": 110,
        "tooltipField": "cost_note",
        "cellClassRules": {"cost-marked": "params.data && !!params.data.cost_mark"},
    },
    {
        "field": "tokens",
        "headerName": "Tokens in / out",
        "type": "rightAligned",
        "sortable": True,
        "minWidth": 100,
        "tooltipField": "tokens_note",
    },
    _num("ttft_s", "TTFT (s)", _SECONDS),
    _num("e2e_s", "E2E (s)", _SECONDS),
    _num("prefill_cost", "Prefill ($)", _USD),
    _num("decode_cost", "Decode ($)", _USD),
    _num("idle_cost", "Idle share ($)", _USD),
]
#: The CSV's columns: every column of the query (stages in seconds too), in its order.
CSV_EXCLUDE = ("start_ns",)


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
                title="Calls that failed, and every call of a failed attempt (its trace's root "
                "span has an error status: a guardrail block, a schema failure)",
            ),
            html.Button(
                "Download CSV",
                id=ID("csv-button"),
                className="button small",
                title="Download every matching request as CSV (no row limit)",
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
                "Sort by start, tokens, TTFT, E2E or cost (first click: largest first); "
                "open a trace for its spans.",
                className="page-note",
            ),
            _controls(),
            html.Div(id=ID("total"), className="requests-total", role="status"),
            html.Div(id=ID("breakdown"), className="requests-breakdown", role="status"),
            html.Div(id=ID("empty"), className="empty-state", role="status"),
            dag.AgGrid(
                id=GRID_ID,
                columnDefs=COLUMNS,
                rowModelType="infinite",
                columnSize="responsiveSizeToFit",
                defaultColDef={
                    "sortable": False,
                    "resizable": True,
                    "sortingOrder": ["desc", "asc", None],
                    "suppressHeaderMenuButton": True,
                },
                dashGridOptions={
                    "cacheBlockSize": BLOCK_SIZE,
                    "maxBlocksInCache": 20,
                    "infiniteInitialRowCount": 1,
                    "rowBuffer": 0,
                    "tooltipShowDelay": 300,
                    "animateRows": False,
                    "ensureDomOrder": True,
                    "rowClassRules": {"request-failed": "params.data && params.data.failed_row"},
                },
                getRowId="params.data.row_id",
                style={"height": "640px", "width": "100%"},
                className="ag-theme-quartz requests-grid",
            ),
            dcc.Store(id=ID("purged")),
        ],
        className="requests-page",
    )


def _explorer_args(
    hosting: str | None,
    failed: list[str] | None,
    model_like: str | None,
    min_cost: float | str | None,
    sort_model: list[dict[str, str]] | None,
) -> tuple[dict[str, Any], list[str]]:
    """The query's explorer parameters from the controls and the grid's sort, and what was
    ignored (said to the user): an unknown hosting or sort column, a negative or non-numeric
    minimum cost."""
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
    sort = (sort_model or DEFAULT_SORT)[0]
    key = SORT_KEYS.get(sort.get("colId", ""))
    if key is None:
        ignored.append(f"sorting by {sort.get('colId')} (sort by start, tokens, TTFT, E2E or cost)")
        key, descending = "start", True
    else:
        descending = sort.get("sort") != "asc"
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


def _cost_mark(r: dict[str, Any]) -> tuple[str, str | None]:
    """The mark beside a cost that is not all measured, and its tooltip: `unpriced` (no price
    found: the cost shown is only what could be priced), `est.` (some GPU time ran with no
    scrape: costed from the deployment's size x GPU price; cost_basis, estimated_cost from
    sql/migrations/0012_coverage.sql)."""
    if r["hosting"] == "unpriced" or r.get("cost_basis") == "unpriced":
        return "unpriced", "No price found for part of this call: its cost is incomplete."
    if r.get("cost_basis") == "estimated" or (r.get("estimated_cost") or 0) > 0:
        return "est.", (
            f"Estimated: {money(r.get('estimated_cost') or 0, 5)} of it ran with no GPU "
            "metrics scraped, costed from the deployment's size and GPU price."
        )
    return "", None


def _row(r: dict[str, Any], search: str) -> dict[str, Any]:
    """A grid row: the trace link (keeping the filters), status, tokens and the cost's mark."""
    # the query string as typed may hold ")" or spaces, which would end the markdown link
    search = quote(search, safe="?&=%+/:,.-_~")
    tokens_in = f"{r['input_tokens']:,}" if r["input_tokens"] is not None else "–"
    tokens_out = f"{r['output_tokens']:,}" if r["output_tokens"] is not None else "–"
    if r["failed"]:
        status, note = "failed", "The LLM call returned an error."
    elif r["root_failed"]:
        status, note = (
            "attempt failed",
            (
                "The call succeeded but its attempt failed: the trace's root span has an error "
                "status (e.g. a guardrail block or a schema failure)."
            ),
        )
    else:
        status, note = "ok", None
    mark, cost_note = _cost_mark(r)
    return {
        "row_id": f"{r['trace_id']}:{r['span_id']}",
        "trace_id": r["trace_id"],
        "trace": f"[{r['trace_id'][:12]}…](/trace/{r['trace_id']}{search})",
        "trace_href": f"/trace/{r['trace_id']}{search}",
        "start_time": r["start_time"],
        "app": r["app"],
        "route": r["route"],
        "model": r["model"],
        "hosting": HOSTING.get(r["hosting"], r["hosting"]),
        "status": status,
        "status_note": note,
        "failed_row": status != "ok",
        "tokens": f"{tokens_in} / {tokens_out}",
        "tokens_note": f"cached input tokens: {r['cached_input_tokens']:,}"
        if r["cached_input_tokens"] is not None
        else None,
        "ttft_s": r["ttft_s"],
        "e2e_s": r["e2e_s"],
        "prefill_cost": r["prefill_cost"],
        "decode_cost": r["decode_cost"],
        "idle_cost": r["idle_cost"],
        "cost": r["cost"],
        "cost_mark": mark,
        "cost_note": cost_note,
    }


def _narrowed(args: dict[str, Any]) -> list[str]:
    """The explorer's own filters that are set (Spend knows only the global ones)."""
    return [
        label
        for label, on in (
            (f"hosting {args['hosting']}", args["hosting"]),
            ("failed only", args["failed_only"]),
            (f"model contains {args['model_like']!r}", args["model_like"]),
            (f"cost ≥ ${args['min_cost']}", args["min_cost"] is not None),
        )
        if on
    ]


def _summary(total: dict[str, Any], filters: Filters) -> str:
    requests = total["requests"]
    noun = "request" if requests == 1 else "requests"
    parts = [
        f"{requests:,} {noun}",
        f"rows sum {money(total['cost'], 2)}: LLM calls {money(total['llm_cost'], 2)} + "
        f"idle share {money(total['idle_cost'], 2)} ({idle_policy.LABEL[filters.policy].lower()})",
        f"{total['failed']:,} calls failed, {total['failed_attempts']:,} failed attempts",
    ]
    return " · ".join(parts)


def _breakdown(parts: dict[str, float], narrowed: list[str]) -> list[Any]:
    """Spend's total for the global filters, split into its parts: what the rows do not hold
    (review, retrieval, tools, unshared idle, hourly services) stated beside what they do."""
    total = sum(parts.values())
    items = [
        html.Li([html.Span(SPEND_PARTS.get(k, k) + " "), html.Strong(money(v, 2))])
        for k, v in sorted(parts.items(), key=lambda kv: list(SPEND_PARTS).index(kv[0]))
        if abs(v) >= 0.005
    ]
    scope = (
        f"for the global filters (this table also filters by {', '.join(narrowed)})"
        if narrowed
        else "for these filters"
    )
    return [
        html.Span(f"Spend {scope}: "),
        html.Strong(money(total, 2), id=ID("spend-total")),
        html.Span(" = "),
        html.Ul(items, className="breakdown-parts"),
        html.Span(
            " The rows are LLM calls with their idle share; review, retrieval and tools are "
            "per task, and unshared idle and hourly services per hour, so no row holds them.",
            className="breakdown-note",
        ),
    ]


@callback(
    Output(ID("total"), "children"),
    Output(ID("breakdown"), "children"),
    Output(ID("empty"), "children"),
    Input(URL_ID, "search"),
    Input(ID("hosting"), "value"),
    Input(ID("failed"), "value"),
    Input(ID("model"), "value"),
    Input(ID("min-cost"), "value"),
    Input(TICK_ID, "data"),  # auto-refresh: the total follows new requests wherever the grid is
)
def _show_summary(
    search: str | None,
    hosting: str | None,
    failed: list[str] | None,
    model_like: str | None,
    min_cost: float | None,
    _tick: int | None,
) -> tuple[str, list[Any], str]:
    filters = filters_from(search)
    args, ignored = _explorer_args(hosting, failed, model_like, min_cost, None)
    storage = context.storage()
    total = run(
        storage, "requests_explorer_summary", filters, page_size=BLOCK_SIZE, **args
    ).to_pylist()[0]
    parts = {
        r["part"]: r["cost"] for r in run(storage, "requests_explorer_spend", filters).to_pylist()
    }
    summary = _summary(total, filters)
    if ignored:
        summary += " · ignored: " + "; ".join(ignored)
    narrowed = _narrowed(args)
    empty = ""
    if not total["requests"]:
        empty = (
            f"No request matches {', '.join(narrowed)} in this range: widen those filters."
            if narrowed
            else why_empty(filters)
        )
    return summary, _breakdown(parts, narrowed), empty


@callback(
    Output(GRID_ID, "getRowsResponse"),
    Input(GRID_ID, "getRowsRequest"),
    State(URL_ID, "search"),
    State(ID("hosting"), "value"),
    State(ID("failed"), "value"),
    State(ID("model"), "value"),
    State(ID("min-cost"), "value"),
    prevent_initial_call=True,
)
def _rows(
    request: dict[str, Any] | None,
    search: str | None,
    hosting: str | None,
    failed: list[str] | None,
    model_like: str | None,
    min_cost: float | None,
) -> dict[str, Any]:
    """One block of rows for the grid, sorted and filtered in SQL, and how many rows match."""
    request = request or {}
    start = max(int(request.get("startRow") or 0), 0)
    end = max(int(request.get("endRow") or start + BLOCK_SIZE), start)
    size = min(end - start, 5 * BLOCK_SIZE)
    filters = filters_from(search)
    args, _ignored = _explorer_args(hosting, failed, model_like, min_cost, request.get("sortModel"))
    storage = context.storage()
    count = run(storage, "requests_explorer_count", filters, **args).column(0)[0].as_py()
    rows = run(storage, _page_query(args), filters, limit=size, offset=start, **args).to_pylist()
    search = search or ""
    return {"rowData": [_row(r, search) for r in rows], "rowCount": int(count)}


# Filters changed outside the grid: drop its cached blocks so it asks again from row 0 (the
# server reads the new filters as State). Not on first load: the grid asks by itself then.
clientside_callback(
    """function() {
        const id = arguments[arguments.length - 1];
        if (window.dash_ag_grid && dash_ag_grid.getApiAsync) {
            dash_ag_grid.getApiAsync(id).then((api) => api.purgeInfiniteCache());
        }
        return Date.now();
    }""",
    Output(ID("purged"), "data"),
    Input(URL_ID, "search"),
    Input(ID("hosting"), "value"),
    Input(ID("failed"), "value"),
    Input(ID("model"), "value"),
    Input(ID("min-cost"), "value"),
    State(GRID_ID, "id"),
    prevent_initial_call=True,
)


# Auto-refresh: reload the grid's rows only while its first row is in view. A reader scrolled
# down to row 350 keeps the rows under their eyes (a purge would shift them by every new request
# when sorted newest first, and reload the blocks around them); the total above the grid says
# how many rows there are now, and scrolling back to the top shows the new ones at the next
# tick. At the top, newest first, new requests simply appear above the old. The purge asks the
# server for the first block again, nothing more.
clientside_callback(
    """function(tick, id) {
        const nu = window.dash_clientside.no_update;
        if (!tick || !window.dash_ag_grid || !dash_ag_grid.getApiAsync) { return nu; }
        dash_ag_grid.getApiAsync(id).then((api) => {
            if (api.getFirstDisplayedRowIndex() === 0) { api.purgeInfiniteCache(); }
        });
        return nu;
    }""",
    Output(ID("purged"), "data", allow_duplicate=True),
    Input(TICK_ID, "data"),
    State(GRID_ID, "id"),
    prevent_initial_call=True,
)


def csv_text(filters: Filters, args: dict[str, Any]) -> tuple[str, int]:
    """Every matching request as CSV, whatever the count (no cap): the header lines of
    app/exports.py, then the rows, written batch by batch from Arrow so no Python row list of
    the whole result is built. Returns the text and the row count."""
    table = run(context.storage(), _page_query(args), filters, limit=None, offset=0, **args)
    columns = [c for c in table.column_names if c not in CSV_EXCLUDE]
    table = table.select(columns)
    buf = io.StringIO()
    buf.write("\n".join(header_lines("requests", filters, table.num_rows)) + "\n")

    def rows() -> Any:
        for batch in table.to_batches(max_chunksize=10_000):
            yield from zip(*(col.to_pylist() for col in batch.columns), strict=True)

    n = write_rows(buf, columns, rows())
    return buf.getvalue(), n


@callback(
    Output(ID("csv"), "data"),
    Input(ID("csv-button"), "n_clicks"),
    State(URL_ID, "search"),
    State(GRID_ID, "getRowsRequest"),
    State(ID("hosting"), "value"),
    State(ID("failed"), "value"),
    State(ID("model"), "value"),
    State(ID("min-cost"), "value"),
    prevent_initial_call=True,
)
def _csv(
    _clicks: int | None,
    search: str | None,
    request: dict[str, Any] | None,
    hosting: str | None,
    failed: list[str] | None,
    model_like: str | None,
    min_cost: float | None,
) -> dict[str, Any]:
    sort = (request or {}).get("sortModel")
    args, _ignored = _explorer_args(hosting, failed, model_like, min_cost, sort)
    filters = filters_from(search)
    text, _rows_written = csv_text(filters, args)
    return dcc.send_string(text, csv_name("requests", filters))
