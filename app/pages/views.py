"""Views: the analyst view catalog (issue #14) as a page, for analysts and admins.

Every analyst view of ledger/catalog.py, grouped by the catalog's sections: its grain, what it
is for, its columns with their real types (DESCRIBE through the storage gateway), units and
meanings, its example queries (each with a copy button) and download links for CSV, Parquet
and JSON Lines over the days picked at the top. The links point at
``/download/views/<name>?from=&to=&format=`` (app/downloads.py makes the URL and streams
the file); a view with no time column links without a range. The same catalog is docs/views.md and
``GET /api/v1/views`` (docs/api.md). No SQL runs here but the catalog's DESCRIBEs.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

import dash
from dash import ALL, Input, Output, callback, ctx, dcc, html

from app import context
from app.components import ids
from app.downloads import download_url, focus_url
from ledger.catalog import Column, ViewDoc, load_catalog, view_columns

dash.register_page(
    __name__,
    path="/views",
    name="Views",
    title="Views · InferLedger",
    order=65,
    min_role="analyst",
)

ID = ids("views")
#: Download formats: query value -> link text.
FORMATS = {"csv": "CSV", "parquet": "Parquet", "jsonl": "JSON Lines"}
#: Days the range covers when the page opens: the last DEFAULT_DAYS whole UTC days and today.
DEFAULT_DAYS = 7
LINK = {"type": ID("download"), "view": ALL, "format": ALL}
#: The FOCUS cost exports linked beside the views: (link key, FOCUS version, format, text).
FOCUS_LINKS = (
    ("focus-1.3", "1.3", "csv", "FOCUS 1.3 CSV"),
    ("focus-1.3", "1.3", "parquet", "FOCUS 1.3 Parquet"),
    ("focus-1.2", "1.2", "csv", "FOCUS 1.2 CSV"),
    ("focus-1.2", "1.2", "parquet", "FOCUS 1.2 Parquet"),
)
_MD_LINK = re.compile(r"\[([^\]]+)\]\([^)]+\)")


def download_href(name: str, fmt: str, start: datetime | None, end: datetime | None) -> str:
    """The download link of one view in one format (app/downloads.py's URL); start/end only
    for views with a time column (None leaves the range out)."""
    if start is None or end is None:
        return download_url(name, fmt)
    return download_url(name, fmt, _iso(start), _iso(end))


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def plain_text(markdown: str) -> str:
    """The catalog's short Markdown (code spans, links to other docs pages) as plain text:
    the docs' relative links mean nothing inside the app."""
    return _MD_LINK.sub(r"\1", markdown).replace("`", "").replace("\n", " ")


def day_range(first: str | None, last: str | None) -> tuple[datetime, datetime] | str:
    """[first day 00:00 UTC, the day after last) from the date pickers' ISO days, or a message
    saying what is wrong."""
    try:
        lo = date.fromisoformat(first or "")
        hi = date.fromisoformat(last or "")
    except ValueError:
        return "Pick both days (YYYY-MM-DD)."
    if hi < lo:
        return "The last day is before the first: pick a last day on or after the first."
    start = datetime(lo.year, lo.month, lo.day, tzinfo=UTC)
    return start, datetime(hi.year, hi.month, hi.day, tzinfo=UTC) + timedelta(days=1)


def _columns_table(columns: list[Column]) -> html.Div:
    head = html.Thead(html.Tr([html.Th(t) for t in ("Column", "Type", "Unit", "Meaning")]))
    body = html.Tbody(
        [
            html.Tr(
                [
                    html.Td(html.Code(c.name)),
                    html.Td(html.Code(c.type)),
                    html.Td(c.unit),
                    html.Td(c.meaning),
                ]
            )
            for c in columns
        ]
    )
    return html.Div(html.Table([head, body], className="table admin-table"),
                    className="admin-table-wrap")  # fmt: skip


def _examples(doc: ViewDoc) -> list[Any]:
    out: list[Any] = [html.H4("Example queries")]
    for i, example in enumerate(doc.examples):
        pre_id = ID(f"example-{doc.name}-{i}")
        out.append(
            html.Div(
                [
                    html.Div(
                        [
                            html.Span(example.title, className="views-example-title"),
                            dcc.Clipboard(
                                target_id=pre_id,
                                title="Copy this query",
                                className="views-copy",
                            ),
                        ],
                        className="views-example-head",
                    ),
                    html.Pre(example.sql + ";", id=pre_id, className="views-sql"),
                ],
                className="views-example",
            )
        )
    return out


def _downloads(doc: ViewDoc, start: datetime, end: datetime) -> html.Div:
    timed = doc.time_column is not None
    links = [
        html.A(
            text,
            id={"type": ID("download"), "view": doc.name, "format": fmt},
            href=download_href(doc.name, fmt, start if timed else None, end if timed else None),
            className="admin-button views-download",
        )
        for fmt, text in FORMATS.items()
    ]
    note = (
        f"Rows whose {doc.time_column} is in the days picked above."
        if timed
        else "Every row (this view has no time column)."
    )
    return html.Div(
        [html.Span("Download: ", className="admin-label"), *links, html.Span(note)],
        className="views-downloads",
    )


def _focus_card(start: datetime, end: datetime) -> html.Div:
    links = [
        html.A(
            text,
            id={"type": ID("download"), "view": key, "format": fmt},
            href=focus_url(version, fmt, _iso(start), _iso(end)),
            className="admin-button views-download",
        )
        for key, version, fmt, text in FOCUS_LINKS
    ]
    return html.Div(
        [
            html.H2("FOCUS cost export"),
            html.P(
                "The spend of the whole hours in the days picked as a FinOps FOCUS file: token "
                "meters of hosted models, GPU-hours of self-hosted replicas split across apps "
                "and teams (1.3: Allocated* columns), services and review (docs/focus.md).",
                className="admin-intro",
            ),
            html.Div([html.Span("Download: ", className="admin-label"), *links]),
        ],
        className="admin-card views-focus",
    )


def _view(doc: ViewDoc, columns: list[Column], start: datetime, end: datetime) -> html.Details:
    time = doc.time_column or "none"
    return html.Details(
        [
            html.Summary([html.Code(doc.name), " — ", doc.grain]),
            html.P(plain_text(doc.what_for)),
            html.P(
                [
                    "Time column: ",
                    html.Code(time),
                    ". Key order: ",
                    html.Code(", ".join(doc.order_by)),
                    ". API: ",
                    html.Code(f"GET /api/v1/views/{doc.name}"),
                    ".",
                ],
                className="admin-intro",
            ),
            _downloads(doc, start, end),
            _columns_table(columns),
            *_examples(doc),
        ],
        id=ID(f"view-{doc.name}"),
        className="admin-card views-view",
    )


def _day_field(name: str, label: str, day: date) -> html.Div:
    return html.Div(
        [
            html.Label(label, htmlFor=ID(name), className="admin-label"),
            dcc.Input(id=ID(name), type="date", value=day.isoformat(), className="views-day"),
        ],
        className="views-field",
    )


def layout(**_kwargs: object) -> html.Div:
    storage = context.storage()
    today = datetime.now(UTC).date()
    first = today - timedelta(days=DEFAULT_DAYS)
    span = day_range(first.isoformat(), today.isoformat())
    assert not isinstance(span, str)
    start, end = span
    catalog = load_catalog()
    sections: list[Any] = []
    for section in catalog.sections:
        sections.append(html.H2(section.title))
        if section.intro:
            sections.append(html.P(plain_text(section.intro), className="admin-intro"))
        sections += [
            _view(doc, view_columns(storage, doc.name), start, end) for doc in section.views
        ]
    return html.Div(
        [
            html.H1("Views"),
            html.P(
                [
                    "The SQL views analysts read: query them in DuckDB on a snapshot, fetch "
                    "them with ",
                    html.Code("GET /api/v1/views/NAME"),
                    " and an API token (",
                    html.A("your tokens", href="/account"),
                    "), or download them below, or all of them at one moment as a DuckDB file: ",
                    html.A("every view (.duckdb)", href="/download/snapshot", id=ID("snapshot")),
                    ". Money is in the price book's currency; times are UTC. The same "
                    "catalog is docs/views.md.",
                ],
                className="admin-intro",
            ),
            html.Div(
                [
                    _day_field("from", "First day (UTC)", first),
                    _day_field("to", "Last day (UTC)", today),
                    html.Span(id=ID("range-note"), role="status", className="views-range-note"),
                ],
                className="views-range",
            ),
            _focus_card(start, end),
            *sections,
        ],
        className="views-page",
    )


@callback(
    Output(LINK, "href"),
    Output(ID("range-note"), "children"),
    Input(ID("from"), "value"),
    Input(ID("to"), "value"),
)
def update_links(first: str | None, last: str | None) -> tuple[list[str | None], str]:
    """Every download link for the days picked; no link while the days do not make a range
    (an export of every row is never one mistyped day away)."""
    span = day_range(first, last)
    timed = {doc.name: doc.time_column is not None for doc in load_catalog().views}
    hrefs: list[str | None] = []
    focus = {(key, fmt): version for key, version, fmt, _ in FOCUS_LINKS}
    for out in ctx.outputs_list[0]:
        name, fmt = out["id"]["view"], out["id"]["format"]
        if (name, fmt) in focus:
            if isinstance(span, str):
                hrefs.append(None)
            else:
                hrefs.append(focus_url(focus[name, fmt], fmt, _iso(span[0]), _iso(span[1])))
        elif not timed.get(name):
            hrefs.append(download_href(name, fmt, None, None))
        elif isinstance(span, str):
            hrefs.append(None)
        else:
            hrefs.append(download_href(name, fmt, *span))
    if isinstance(span, str):
        return hrefs, span
    days = (span[1] - span[0]).days
    return hrefs, f"{days} day{'s' if days != 1 else ''}: {_iso(span[0])} to {_iso(span[1])}"
