"""Building blocks every page uses: namespaced ids, a chart card (loading indicator, empty
state that says why, CSV download of exactly the plotted numbers), stat tiles, money format.

`chart(...)` lays out a card and registers its two callbacks: the URL's filters -> the data
function -> the figure (or an empty state that says why); and the CSV button -> the same data
function -> the file. The browser never holds the data; the CSV is re-queried on the server
from the same function, so it always matches the chart.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dash import Input, Output, State, callback, dcc, html

from app import context
from app.figures import FigureFn, empty_figure
from app.filters import filters_from
from app.formats import money as money  # re-exported: pages format with it
from app.formats import number as number
from app.formats import seconds as seconds
from ledger.queries import Filters, run

if TYPE_CHECKING:
    import pyarrow as pa

URL_ID = "url"  # the shell's dcc.Location: pages read the filters from its `search`


def ids(page: str) -> Callable[[str], str]:
    """A function making this page's component ids: ids("spend")("by-team") -> "spend-by-team"."""

    def make(name: str) -> str:
        return f"{page}-{name}"

    return make


def stat(label: str, value: str, *, hint: str | None = None, id: str | None = None) -> html.Div:
    children: list[Any] = [
        html.Div(label, className="stat-label"),
        html.Div(value, className="stat-value", id=id)
        if id
        else html.Div(value, className="stat-value"),
    ]
    if hint:
        children.append(html.Div(hint, className="stat-hint"))
    return html.Div(children, className="stat")


def chart_card(
    make_id: Callable[[str], str],
    name: str,
    title: str,
    *,
    height: int = 320,
    note: str | None = None,
    dynamic_note: bool = False,
) -> html.Section:
    """A titled card: graph (inside a loading indicator), empty-state line, CSV button."""
    return html.Section(
        [
            html.Div(
                [
                    html.H2(title, className="card-title"),
                    html.Button(
                        "Download CSV",
                        id=make_id(f"{name}-csv-button"),
                        className="button small",
                        title=f"Download the numbers behind '{title}' as CSV",
                    ),
                ],
                className="card-head",
            ),
            html.P(note, id=make_id(f"{name}-note"), className="card-note")
            if note or dynamic_note
            else None,
            dcc.Loading(
                [
                    html.Div(id=make_id(f"{name}-empty"), className="empty-state", role="status"),
                    dcc.Graph(
                        id=make_id(name),
                        config={"displaylogo": False, "responsive": True},
                        style={"height": f"{height}px"},
                    ),
                ],
                type="dot",
                delay_show=150,
            ),
            dcc.Download(id=make_id(f"{name}-csv")),
        ],
        className="card",
        **{"aria-label": title},
    )


def to_csv(table: pa.Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(table.column_names)
    columns = [table.column(c).to_pylist() for c in table.column_names]
    for row in zip(*columns, strict=True):
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def why_empty(filters: Filters) -> str:
    """Why a chart has nothing to show, in the user's terms."""
    d = run(context.storage(), "data_presence", filters).to_pylist()[0]
    if not d["spans"]:
        return (
            "No data yet: nothing has been ingested. Point an OpenTelemetry exporter at "
            "POST /v1/traces, or run `inferledger demo`."
        )
    if not d["refreshes"]:
        return "The cost ledger has not been computed yet: the first refresh runs within a minute."
    where = f"{filters.start:%Y-%m-%d %H:%M} to {filters.end:%Y-%m-%d %H:%M} UTC"
    active = [
        f"{k}={v}" for k, v in filters.params().items() if k not in ("start", "end", "policy") and v
    ]
    held = (
        f"; the ledger holds {d['first_hour']:%Y-%m-%d %H:%M} to {d['last_hour']:%Y-%m-%d %H:%M}"
        if d["first_hour"]
        else ""
    )
    also = f" with {', '.join(active)}" if active else ""
    return f"Nothing in {where}{also}{held}."


DataFn = Callable[[Filters], "pa.Table"]


def chart(
    make_id: Callable[[str], str],
    name: str,
    title: str,
    data: DataFn,
    figure: FigureFn,
    *,
    height: int = 320,
    note: str | None = None,
    note_fn: Callable[[Filters], str] | None = None,
) -> html.Section:
    """A chart card and its callbacks (figure from the URL's filters; CSV of the same data).
    `note_fn`, when given, writes the card's note from the filters (e.g. what it cannot
    narrow)."""
    outputs = [Output(make_id(name), "figure"), Output(make_id(f"{name}-empty"), "children")]
    if note_fn is not None:
        outputs.append(Output(make_id(f"{name}-note"), "children"))

    @callback(*outputs, Input(URL_ID, "search"))
    def _draw(search: str | None) -> tuple[Any, ...]:
        filters = filters_from(search)
        table = data(filters)
        extra = (note_fn(filters),) if note_fn is not None else ()
        if table.num_rows == 0:
            return (empty_figure(), why_empty(filters), *extra)
        return (figure(table, filters), "", *extra)

    @callback(
        Output(make_id(f"{name}-csv"), "data"),
        Input(make_id(f"{name}-csv-button"), "n_clicks"),
        State(URL_ID, "search"),
        prevent_initial_call=True,
    )
    def _csv(_clicks: int | None, search: str | None) -> dict[str, Any]:
        return dcc.send_string(to_csv(data(filters_from(search))), f"inferledger-{name}.csv")

    return chart_card(
        make_id, name, title, height=height, note=note, dynamic_note=note_fn is not None
    )
