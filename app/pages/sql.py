"""SQL console (issue #14): analysts query the analyst views with their own SQL, safely.

Queries never touch the live database: they run in the sandbox's worker processes
(inferledger/core/sql_sandbox.py) over a read-only snapshot of the analyst views
(ledger/snapshot.py), one statement at a time, time-, memory- and row-limited. Every refusal
comes back with its reason, shown above the grid. The editor is a textarea that
assets/sql_editor.js highlights and completes with the snapshot's view and column names (handed
over by a clientside callback from a dcc.Store). Results: a paginated grid, a quick chart (pick
x and y), downloads (CSV, Parquet, JSON Lines; the same rows, capped like the grid). Saved
queries are per user, shared by link (/sql?q=<share id> opens one for any analyst); the history
lists the user's last runs. Stores hold the SQL, never rows: the chart and downloads run the
SQL again in the sandbox. docs/sql-console.md.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import threading
import weakref
from atexit import register as at_exit  # (an attribute named register reads as DuckDB's)
from typing import Any

import dash
import dash_ag_grid as dag
import flask
import plotly.graph_objects as go
import polars as pl
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from dash import (
    ALL,
    ClientsideFunction,
    Input,
    Output,
    State,
    callback,
    clientside_callback,
    ctx,
    dcc,
    html,
    no_update,
)
from dash.exceptions import PreventUpdate

from app import context, figures, palette
from app.components import ids
from app.context import CONSOLE_KEY
from inferledger.core.errors import InferLedgerError
from inferledger.core.sql_sandbox import SandboxResult
from ledger import console as store
from ledger.snapshot import view_columns

dash.register_page(
    __name__,
    path="/sql",
    name="SQL",
    title="SQL · InferLedger",
    order=66,
    min_role="analyst",
)

ID = ids("sql")
EDITOR_ID = "sql-editor"  # assets/sql_editor.js finds the editor and the run button by these
RUN_ID = "sql-run"
EXAMPLE = (
    "select day, app, sum(cost) as cost\nfrom spend_daily\ngroup by all\n"
    "order by day desc, cost desc\nlimit 100"
)
HISTORY_SHOWN = 25
FORMATS = {
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
    "jsonl": "application/x-ndjson",
}
_CONSOLE_LOCK = threading.Lock()


def console() -> store.Console:
    """This app's console (made at its first use: workers start only when someone queries)."""
    app = flask.current_app._get_current_object()  # type: ignore[attr-defined]
    found = app.extensions.get(CONSOLE_KEY)
    if found is None:
        with _CONSOLE_LOCK:
            found = app.extensions.get(CONSOLE_KEY)
            if found is None:
                ctx_ = context.current()
                found = store.console_from_settings(ctx_.storage, ctx_.settings)
                app.extensions[CONSOLE_KEY] = found
                # workers end with the app or the process (they also exit when their pipe
                # closes, should this process die without cleaning up)
                weakref.finalize(app, found.close)
                at_exit(found.close)
    return found


def _user() -> str:
    user = context.current_user()
    return user.name if user is not None else "local"


def layout(q: str | None = None, **_: Any) -> html.Div:
    limits = (
        "one SELECT (or WITH, VALUES, DESCRIBE, SHOW, SUMMARIZE) at a time, over a read-only "
        "snapshot of the analyst views; no files, network, settings or writes"
    )
    return html.Div(
        [
            html.H1("SQL"),
            html.P(
                [
                    "Query the analyst views (",
                    html.A("the view catalog", href="/views"),
                    f") with your own SQL: {limits}. Ctrl+Enter runs.",
                ],
                className="sql-intro",
            ),
            dcc.Store(id=ID("share"), data=q or ""),
            dcc.Store(id=ID("schema")),
            dcc.Store(id=ID("last-sql")),
            dcc.Store(id=ID("history-tick"), data=0),
            dcc.Store(id=ID("saved-tick"), data=0),
            html.Span(id=ID("schema-note"), hidden=True),
            html.Div(
                [
                    html.Div(
                        [
                            html.Div(
                                [
                                    html.Pre(className="sql-highlight", **{"aria-hidden": "true"}),
                                    dcc.Textarea(
                                        id=EDITOR_ID,
                                        value="",
                                        spellCheck="false",
                                        title="SQL query (Ctrl+Enter runs)",
                                        placeholder="select * from spend_daily limit 10",
                                    ),
                                    html.Ul(
                                        className="sql-complete",
                                        hidden=True,
                                        role="listbox",
                                        **{"aria-label": "Completions"},
                                    ),
                                ],
                                className="sql-editor-wrap",
                            ),
                            html.Div(
                                [
                                    html.Button("Run", id=RUN_ID, className="primary"),
                                    html.Button("Refresh snapshot", id=ID("refresh")),
                                    html.Span(id=ID("status"), className="sql-status"),
                                ],
                                className="sql-toolbar",
                            ),
                            html.Div(id=ID("message"), className="sql-message", role="status"),
                            dag.AgGrid(
                                id=ID("grid"),
                                rowData=[],
                                columnDefs=[],
                                defaultColDef={"sortable": True, "resizable": True, "filter": True},
                                dashGridOptions={"pagination": True, "paginationPageSize": 50},
                                style={"height": "28rem"},
                            ),
                            html.Div(
                                [
                                    html.Button("Download CSV", id=ID("csv")),
                                    html.Button("Download Parquet", id=ID("parquet")),
                                    html.Button("Download JSON Lines", id=ID("jsonl")),
                                    dcc.Download(id=ID("download")),
                                ],
                                className="sql-toolbar",
                            ),
                            html.H2("Quick chart"),
                            html.Div(
                                [
                                    _picker("x", "x axis"),
                                    _picker("y", "y axis"),
                                    _picker(
                                        "kind",
                                        "chart",
                                        [{"label": k.title(), "value": k} for k in _KINDS],
                                        "bar",
                                    ),
                                ],
                                className="sql-chart-controls",
                            ),
                            dcc.Graph(
                                id=ID("chart"),
                                figure=figures.empty_figure(),
                                config={"displaylogo": False},
                            ),
                        ],
                        className="sql-main",
                    ),
                    html.Aside(
                        [
                            html.H2("Saved queries"),
                            dcc.Input(id=ID("name"), placeholder="name", maxLength=100),
                            html.Div(
                                [
                                    html.Button("Save", id=ID("save")),
                                    html.Button("Delete", id=ID("delete")),
                                ],
                                className="sql-toolbar",
                            ),
                            dcc.Dropdown(id=ID("saved"), placeholder="open a saved query"),
                            html.Div(id=ID("share-link"), className="sql-share"),
                            html.H2("History"),
                            html.Ul(id=ID("history"), className="sql-history"),
                        ],
                        className="sql-side",
                    ),
                ],
                className="sql-layout",
            ),
        ],
        className="sql-page",
    )


_KINDS = ("bar", "line", "scatter")


def _picker(
    name: str, label: str, options: list[dict[str, str]] | None = None, value: str | None = None
) -> html.Div:
    return html.Div(
        [
            html.Label(label, htmlFor=ID(name)),
            dcc.Dropdown(id=ID(name), options=options or [], value=value, clearable=False),
        ]
    )


# ---------------------------------------------------------------- results
def _cell(value: Any) -> Any:
    """A value the grid (JSON) can show."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    return json.dumps(value, default=str)


def grid_rows(table: pa.Table) -> list[dict[str, Any]]:
    return [{k: _cell(v) for k, v in row.items()} for row in table.to_pylist()]


def column_defs(table: pa.Table) -> list[dict[str, Any]]:
    out = []
    for f in table.schema:
        numeric = pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
        out.append(
            {
                "field": f.name,
                "headerName": f.name,
                "headerTooltip": str(f.type),
                **({"type": "rightAligned"} if numeric else {}),
            }
        )
    return out


def message(result: SandboxResult) -> tuple[str, str]:
    """The line above the grid and its class (the outcome)."""
    if result.ok:
        text = f"{result.rows:,} rows in {result.elapsed_s * 1000:,.0f} ms"
        if result.truncated:
            text += f" — {result.truncated_reason}"
        return text, "sql-message ok"
    title = {
        "refused": "Refused",
        "error": "Error",
        "timeout": "Stopped at the time limit",
        "memory": "Over the memory limit",
        "killed": "Stopped",
        "busy": "Busy",
    }.get(result.kind, "Error")
    return f"{title}: {result.reason}", f"sql-message {result.kind}"


def _status() -> str:
    keeper = console().keeper
    age = keeper.age_s()
    if keeper.building:
        return "snapshot: rebuilding…"
    if keeper.last_error:
        return f"snapshot: last rebuild failed ({keeper.last_error}); the previous one is used"
    if age is None:
        return "snapshot: built at the first query"
    return f"snapshot: {age:,.0f} s old (rebuilt after {keeper.max_age_s:,.0f} s)"


# ---------------------------------------------------------------- callbacks
@callback(
    Output(ID("schema"), "data"),
    Output(ID("status"), "children"),
    Input(ID("share"), "data"),
)
def _boot(_share: str) -> tuple[dict[str, list[str]], str]:
    return view_columns(context.storage()), _status()


clientside_callback(
    ClientsideFunction(namespace="sqlEditor", function_name="setSchema"),
    Output(ID("schema-note"), "children"),
    Input(ID("schema"), "data"),
)


@callback(
    Output(EDITOR_ID, "value"),
    Output(ID("share-link"), "children"),
    Input(ID("share"), "data"),
    Input(ID("saved"), "value"),
)
def _editor(share: str, saved: int | None) -> tuple[Any, Any]:
    storage = context.storage()
    if ctx.triggered_id == ID("saved"):
        if saved is None:
            raise PreventUpdate
        query = next(
            (s for s in store.saved_queries(storage, _user()) if s.query_id == saved), None
        )
        return (query.sql, _share_link(query)) if query else (no_update, no_update)
    if share:
        query = store.shared_query(storage, share)
        if query is None:
            return EXAMPLE, "This share link names no saved query (deleted?)."
        return query.sql, _share_link(query, shared=query.owner != _user())
    return EXAMPLE, ""


@callback(
    Output(EDITOR_ID, "value", allow_duplicate=True),
    Input({"type": ID("past"), "index": ALL}, "n_clicks"),
    prevent_initial_call=True,
)
def _from_history(_clicks: list[int | None]) -> str:
    """A click on a history entry puts its SQL in the editor (not the list being redrawn)."""
    trigger = ctx.triggered_id
    if not isinstance(trigger, dict) or not ctx.triggered[0].get("value"):
        raise PreventUpdate
    runs = store.history(context.storage(), _user(), HISTORY_SHOWN)
    found = next((r for r in runs if r.run_id == trigger["index"]), None)
    if found is None:
        raise PreventUpdate
    return found.sql


def _share_link(query: store.SavedQuery, shared: bool = False) -> Any:
    href = f"/sql?q={query.share_id}"
    note = f"“{query.name}” by {query.owner}. " if shared else f"“{query.name}”: share "
    return [note, html.A(href, href=href)]


@callback(
    Output(ID("grid"), "rowData"),
    Output(ID("grid"), "columnDefs"),
    Output(ID("message"), "children"),
    Output(ID("message"), "className"),
    Output(ID("x"), "options"),
    Output(ID("y"), "options"),
    Output(ID("x"), "value"),
    Output(ID("y"), "value"),
    Output(ID("last-sql"), "data"),
    Output(ID("history-tick"), "data"),
    Input(RUN_ID, "n_clicks"),
    State(EDITOR_ID, "value"),
    State(ID("history-tick"), "data"),
    prevent_initial_call=True,
    running=[(Output(RUN_ID, "disabled"), True, False)],
)
def _run(_n: int, sql: str | None, tick: int) -> tuple[Any, ...]:
    result = console().run(sql or "", user=_user())
    text, cls = message(result)
    if not result.ok or result.table is None:
        return [], [], text, cls, [], [], None, None, None, tick + 1
    table = result.table
    names = [{"label": n, "value": n} for n in table.column_names]
    numeric = [
        f.name for f in table.schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
    ]
    x = table.column_names[0] if table.num_columns else None
    y = next((n for n in numeric if n != x), None)
    return (
        grid_rows(table),
        column_defs(table),
        text,
        cls,
        names,
        names,
        x,
        y,
        sql,
        tick + 1,
    )


@callback(
    Output(ID("history"), "children"),
    Input(ID("history-tick"), "data"),
)
def _history(_tick: int) -> list[html.Li]:
    runs = store.history(context.storage(), _user(), HISTORY_SHOWN)
    if not runs:
        return [html.Li("Nothing run yet.", className="empty-state")]
    return [
        html.Li(
            html.Button(
                [
                    html.Span(f"{r.outcome} · {r.rows:,} rows · ", className="sql-outcome"),
                    " ".join(r.sql.split())[:200],
                ],
                id={"type": ID("past"), "index": r.run_id},
                title=(r.reason or r.sql)[:500],
            )
        )
        for r in runs
    ]


@callback(
    Output(ID("saved"), "options"),
    Output(ID("saved"), "value"),
    Output(ID("share-link"), "children", allow_duplicate=True),
    Input(ID("save"), "n_clicks"),
    Input(ID("delete"), "n_clicks"),
    Input(ID("saved-tick"), "data"),
    State(ID("name"), "value"),
    State(EDITOR_ID, "value"),
    State(ID("saved"), "value"),
    prevent_initial_call="initial_duplicate",
)
def _saved(_s: int, _d: int, _t: int, name: str, sql: str, chosen: int | None) -> tuple[Any, ...]:
    storage, user = context.storage(), _user()
    note: Any = no_update
    value: Any = no_update
    try:
        if ctx.triggered_id == ID("save"):
            saved = store.save_query(storage, user, name or "", sql or "")
            note, value = _share_link(saved), saved.query_id
        elif ctx.triggered_id == ID("delete"):
            if chosen is None:
                note = "Pick a saved query to delete."
            elif store.delete_query(storage, user, chosen):
                note, value = "Deleted.", None
    except InferLedgerError as exc:
        note = str(exc)
    options = [{"label": q.name, "value": q.query_id} for q in store.saved_queries(storage, user)]
    return options, value, note


@callback(
    Output(ID("status"), "children", allow_duplicate=True),
    Input(ID("refresh"), "n_clicks"),
    prevent_initial_call=True,
)
def _refresh(_n: int) -> str:
    started = console().keeper.refresh()
    return "snapshot: rebuilding…" if started else "snapshot: a rebuild is already running"


def _rerun(sql: str | None) -> pa.Table:
    if not sql:
        raise PreventUpdate
    result = console().run(sql)  # not recorded again: the grid's run is in the history
    if not result.ok or result.table is None:
        raise PreventUpdate
    return result.table


@callback(
    Output(ID("chart"), "figure"),
    Input(ID("x"), "value"),
    Input(ID("y"), "value"),
    Input(ID("kind"), "value"),
    State(ID("last-sql"), "data"),
    prevent_initial_call=True,
)
def _chart(x: str | None, y: str | None, kind: str, sql: str | None) -> go.Figure:
    if not x or not y:
        return figures.empty_figure()
    table = _rerun(sql)
    if x not in table.column_names or y not in table.column_names:
        return figures.empty_figure()
    return quick_chart(table, x, y, kind)


def quick_chart(table: pa.Table, x: str, y: str, kind: str) -> go.Figure:
    xs = [_cell(v) for v in table.column(x).to_pylist()]
    ys = [_cell(v) for v in table.column(y).to_pylist()]
    if kind == "bar":
        trace: Any = go.Bar(x=xs, y=ys, marker_color=palette.BRAND, name=y)
    else:
        mode = "lines+markers" if kind == "line" else "markers"
        trace = go.Scatter(x=xs, y=ys, mode=mode, marker_color=palette.BRAND, name=y)
    fig = go.Figure(trace)
    fig.update_xaxes(title_text=x)
    fig.update_yaxes(title_text=y)
    return figures.style(fig, legend=False)


@callback(
    Output(ID("download"), "data"),
    Input(ID("csv"), "n_clicks"),
    Input(ID("parquet"), "n_clicks"),
    Input(ID("jsonl"), "n_clicks"),
    State(ID("last-sql"), "data"),
    prevent_initial_call=True,
)
def _download(_c: int, _p: int, _j: int, sql: str | None) -> dict[str, Any]:
    fmt = str(ctx.triggered_id).removeprefix(ID(""))
    if fmt not in FORMATS:
        raise PreventUpdate
    table = _rerun(sql)
    return dcc.send_bytes(encode(table, fmt), f"query.{fmt}", type=FORMATS[fmt])


def encode(table: pa.Table, fmt: str) -> bytes:
    """A result as a file of `fmt` (csv, parquet, jsonl)."""
    sink = io.BytesIO()
    if fmt == "csv":
        pa_csv.write_csv(table, sink)
    elif fmt == "parquet":
        pq.write_table(table, sink, compression="zstd")
    else:
        pl.from_arrow(table).write_ndjson(sink)  # type: ignore[union-attr]
    return sink.getvalue()
