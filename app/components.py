"""Building blocks every page uses: namespaced ids, a chart card (loading indicator, empty
state that says why, CSV download of exactly the plotted numbers), stat tiles, money format.

`chart(...)` lays out a card and registers its callbacks: the URL's filters (and the
auto-refresh tick) -> the data function -> the figure (or an empty state that says why); the
CSV button -> the same data function -> the file (app/exports.py: its name and first lines say
the range, filters and idle policy); and a drag-to-zoom on a time axis -> the URL's custom
range (:func:`zoom_to_range`). The browser never holds the data; the CSV is re-queried on the
server from the same function, so it always matches the chart.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC
from typing import TYPE_CHECKING, Any

import flask
from dash import Input, Output, State, callback, clientside_callback, dcc, html
from dash.exceptions import PreventUpdate

from app import context, palette
from app.exports import csv_download
from app.figures import FigureFn, empty_figure
from app.filters import FILTER_ID, filters_from, parse, zoomed
from app.formats import money as money  # re-exported: pages format with it
from app.formats import number as number
from app.formats import seconds as seconds
from ledger.queries import Filters, run

if TYPE_CHECKING:
    import pyarrow as pa

URL_ID = "url"  # the shell's dcc.Location: pages read the filters from its `search`
#: The shell's auto-refresh tick (a dcc.Store bumped by its dcc.Interval while the tab is
#: visible): callbacks that take it as an Input re-run on every tick.
TICK_ID = "refresh-tick"


def ids(page: str) -> Callable[[str], str]:
    """A function making this page's component ids: ids("spend")("by-team") -> "spend-by-team"."""

    def make(name: str) -> str:
        return f"{page}-{name}"

    return make


def form_fields(
    id_of: Callable[[str], str],
) -> tuple[Callable[[str, Any, str], html.Div], Callable[..., html.Div]]:
    """An admin form's two field builders for one page's ids: `field(label, control, name)`
    labels a control whose id is id_of(name); `text(name, label, **input_props)` is a labelled
    text input."""

    def field(label: str, control: Any, name: str) -> html.Div:
        return html.Div(
            [html.Label(label, htmlFor=id_of(name), className="admin-label"), control],
            className="admin-field",
        )

    def text(name: str, label: str, **extra: Any) -> html.Div:
        return field(label, dcc.Input(id=id_of(name), type="text", **extra), name)

    return field, text


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
            dcc.Store(id=make_id(f"{name}-zoom")),  # a time-axis zoom, for zoom_to_range
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

    @callback(*outputs, Input(URL_ID, "search"), Input(TICK_ID, "data"))
    def _draw(search: str | None, _tick: int | None) -> tuple[Any, ...]:
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
        filters = filters_from(search)
        return csv_download(data(filters), make_id(name), filters)

    zoom_to_range(make_id(name))
    return chart_card(
        make_id, name, title, height=height, note=note, dynamic_note=note_fn is not None
    )


#: Passes on only a zoom of the x axis with string (date) ends: plotly reports every resize and
#: autorange too, which need no request to the server.
_ZOOM_JS = r"""function(r) {
    // any panel's x axis: a chart with subplots reports xaxis2, xaxis3, ...
    const key = r && Object.keys(r).find(k => /^xaxis\d*\.range\[0\]$/.test(k));
    const x0 = key && r[key], x1 = key && r[key.replace("[0]", "[1]")];
    if (typeof x0 !== "string" || typeof x1 !== "string") {
        return window.dash_clientside.no_update;
    }
    return [x0, x1];
}"""


def zoom_to_range(graph_id: str) -> None:
    """Drag-to-zoom on a time axis narrows the page's range: the graph's zoomed x range becomes
    the URL's custom range (whole hours, or minutes for spans under three hours; clamped by
    app.filters.clamp_window), and the filter bar shows it. A double-click (autorange) resets
    nothing: the URL is the state. Charts whose x axis is not time are left alone (their
    range is numbers, not dates). The graph must sit in a :func:`chart_card` (its zoom store)."""
    store = f"{graph_id}-zoom"
    clientside_callback(
        _ZOOM_JS, Output(store, "data"), Input(graph_id, "relayoutData"), prevent_initial_call=True
    )

    @callback(
        Output(URL_ID, "search", allow_duplicate=True),
        Output(f"{FILTER_ID}-range", "value", allow_duplicate=True),
        Output(f"{FILTER_ID}-dates", "start_date", allow_duplicate=True),
        Output(f"{FILTER_ID}-dates", "end_date", allow_duplicate=True),
        Input(store, "data"),
        State(URL_ID, "search"),
        prevent_initial_call=True,
    )
    def _zoom(span: list[str] | None, search: str | None) -> tuple[str, str, str, str]:
        if not span or len(span) != 2:
            raise PreventUpdate
        try:
            state = zoomed(parse(search), str(span[0]), str(span[1]))
        except ValueError:
            raise PreventUpdate from None  # not a time axis, or nothing left to show
        start, end = state.start or "", state.end or ""
        return state.query_string(), "custom", start[:10], end[:10]


def choice_in_url(
    control_id: str, key: str, default: str | None, *, set_by_page: str | None = None
) -> None:
    """Keep a page-level control (a radio, a dropdown) in the URL as `key` (one of
    app.filters.PAGE_KEYS): picking a value writes the query string, so a reload, the
    navigation and "Copy link" keep it. The page builds the control with the URL's value
    (its layout gets the query as keyword arguments) and its callbacks read the choice from
    the URL (:meth:`app.filters.UrlState.choice`), not from the control. The default is left
    out of the URL.

    A control whose choices come from the data (Unit economics' workflows) gets its value from
    a page callback instead: the URL's choice when the data has it, else a fallback. That
    callback also writes the value it set into the dcc.Store `set_by_page`; a value equal to
    it is the page's, not a user's pick, and stays out of the URL (a link keeps asking for
    what it asked for, and the page keeps saying why it shows something else)."""
    states = [State(URL_ID, "search")]
    if set_by_page is not None:
        states.append(State(set_by_page, "data"))

    @callback(
        Output(URL_ID, "search", allow_duplicate=True),
        Input(control_id, "value"),
        *states,
        prevent_initial_call=True,
    )
    def _choice_to_url(value: str | None, search: str | None, *page_set: str | None) -> str:
        if page_set and value == page_set[0]:
            raise PreventUpdate  # the page set it, from the URL or as its fallback
        state = parse(search)
        wanted = None if value in (None, default) else value
        if state.page.get(key) == wanted:
            raise PreventUpdate  # the page was drawn from this URL: nothing chosen
        return state.with_choice(key, wanted).query_string()


# --------------------------------------------------------------------------- audit-trail pages
def pager(make_id: Callable[[str], str]) -> html.Div:
    """Newer / Older buttons and "Changes a–b of N" under a paged table (the admin pages' audit
    trails, read a page at a time on the server). The page keeps its offset in a
    dcc.Store `offset` and registers its own callbacks (with its own role check), using
    :func:`pager_state` and :func:`turned_offset`."""
    return html.Div(
        [
            html.Button("← Newer", id=make_id("newer"), n_clicks=0, className="button"),
            html.Span(id=make_id("page-info"), className="admin-page-info"),
            html.Button("Older →", id=make_id("older"), n_clicks=0, className="button"),
        ],
        className="admin-pager",
    )


def pager_state(offset: int, shown: int, total: int) -> tuple[str, bool, bool]:
    """The pager's text and whether Newer and Older are disabled, for `shown` rows from
    `offset` of `total`, newest first."""
    if not total:
        return "", True, True
    last = offset + shown
    return f"Changes {offset + 1}–{last} of {total}, newest first", offset == 0, last >= total


def turned_offset(older: bool, offset: int | None, page_size: int) -> int:
    """The offset after Older (or Newer); the page reader keeps it within the last page."""
    return max(0, (offset or 0) + (page_size if older else -page_size))


# --------------------------------------------------------------------------- roles and badges
def may(role: str) -> bool:
    """Whether this request's user has `role` (everyone while sign-in is off): pages show
    editing controls only to those who may use them (their callbacks check again, and the
    sign-in guard refuses a forged call). False outside a request (Dash's layout check)."""
    if not flask.has_request_context():
        return False
    return context.allowed({"min_role": role})


#: Budget and alert states -> their words and badge colours (text, background; app/palette.py).
STATUS_WORDS = {
    "ok": ("OK", *palette.BADGE_GOOD),
    "warning": ("Warning", *palette.BADGE_CAUTION),
    "at_risk": ("At risk", *palette.BADGE_RISK),
    "over": ("Over", *palette.BADGE_BAD),
    "info": ("Info", *palette.BADGE_INFO),
    "critical": ("Critical", *palette.BADGE_BAD),
    "pending": ("Pending", *palette.BADGE_CAUTION),
    "firing": ("Firing", *palette.BADGE_BAD),
    "resolved": ("Resolved", *palette.BADGE_GOOD),
    "cancelled": ("Cancelled", *palette.BADGE_NEUTRAL),
}


def badge(status: str, *, id: str | None = None) -> html.Span:
    """A coloured word for a budget status, an alert state or a severity (inline colours: one
    place, here, names them)."""
    words, ink, fill = STATUS_WORDS.get(status, (status, *palette.BADGE_UNKNOWN))
    extra = {"id": id} if id else {}
    return html.Span(
        words,
        className=f"badge badge-{status}",
        style={
            "color": ink,
            "background": fill,
            "padding": "0.1rem 0.5rem",
            "borderRadius": "0.75rem",
            "fontSize": "0.85rem",
            "fontWeight": 600,
            "whiteSpace": "nowrap",
        },
        **extra,
    )


def amount(value: float | None, currency: str = "USD") -> str:
    """Money in a budget's currency: "$1,234.50" for USD, "1,234.50 EUR" otherwise."""
    if value is None:
        return "–"
    return money(value) if currency == "USD" else f"{value:,.2f} {currency}"


def when(value: Any) -> str:
    """An instant as "2026-12-02 14:05 UTC" ("–" for none)."""
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if value else "–"


def config_changes_table(changes: Any, *, what: str = "Name", kinds: bool = False) -> html.Table:
    """Rows of config_changes (budgets, rules, channels, silences: changed_at, changed_by,
    action, object_name, old_values, new_values) as a table, newest first as given; `kinds`
    prefixes each name with its kind ("rule spike")."""
    head = ["When", "By", "Action", what, "Before", "After"]
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h, scope="col") for h in head])),
            html.Tbody(
                [
                    html.Tr(
                        [
                            html.Td(when(c.changed_at)),
                            html.Td(c.changed_by),
                            html.Td(c.action),
                            html.Td(f"{c.object_kind} {c.object_name}" if kinds else c.object_name),
                            html.Td(c.old_values or "", className="config-values"),
                            html.Td(c.new_values or "", className="config-values"),
                        ]
                    )
                    for c in changes
                ]
            ),
        ],
        className="table admin-table",
    )
