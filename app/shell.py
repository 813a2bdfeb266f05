"""The frame around every page: brand, navigation, the global filter bar and its URL state.

The filter bar writes the URL's query string (dcc.Location `url`, no page reload); pages read
their filters from `url.search`, so every view is a shareable link and reloading it restores
the same controls (the layout is built per request from the query string). Page-level choices
(app.filters.PAGE_KEYS) ride in the same query string and survive filter changes. "Copy link"
copies the view with its range made absolute; the auto-refresh toggle (`refresh=60`) drives a
dcc.Interval that bumps the tick store (components.TICK_ID) that every callback showing data
(charts, KPI tiles, tables, the request explorer's totals) listens to.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import dash
import flask
from dash import ALL, Input, Output, State, callback, clientside_callback, dcc, html
from dash.exceptions import PreventUpdate

from app import context, coverage
from app.components import TICK_ID, URL_ID
from app.filters import (
    FILTER_ID,
    FILTER_KEYS,
    FILTER_LABELS,
    PRESETS,
    REFRESH_SECONDS,
    UrlState,
    parse,
)
from inferledger import __version__
from ledger import page_data
from ledger.load_status import load_status
from ledger.queries import Filters, run
from models import idle_policy

REFRESH_INTERVAL_ID = "refresh-interval"
#: The copy-link button's script: the clipboard, with a visible confirmation, and the link in a
#: selected text field when the browser refuses the clipboard (no permission, plain http).
_COPY_JS = """async function(path) {
    const nu = window.dash_clientside.no_update;
    if (!path) { return [nu, nu, nu]; }
    const url = window.location.origin + path;
    try {
        await navigator.clipboard.writeText(url);
        return [url, "Copied: the range is fixed to the dates shown", "filter-link"];
    } catch (err) {
        setTimeout(() => {
            const field = document.getElementById("filter-link");
            if (field) { field.focus(); field.select(); }
        }, 0);
        return [url, "Copy this link (the clipboard was refused):", "filter-link shown"];
    }
}"""
#: Auto-refresh ticks only while the tab is visible: a hidden tab fetches nothing.
_TICK_JS = """function(n) {
    if (!n || document.hidden) { return window.dash_clientside.no_update; }
    return n;
}"""
#: Pages that arrive with later issues keep their place in the navigation (none left).
COMING: tuple[tuple[str, str], ...] = ()


def filter_options(filters: Filters) -> dict[str, list[str]]:
    """Values to offer in each filter: what the spend mart holds (small, aggregated; the
    query reads no filter, `run` just wants one)."""
    out: dict[str, list[str]] = {key: [] for key in FILTER_KEYS}
    for row in run(context.storage(), "filter_options", filters).to_pylist():
        out[page_data.FILTER_KEYS[row["field"]]].append(row["value"])
    return out


def _dropdown(key: str, value: str | None, options: list[str]) -> html.Div:
    if value and value not in options:
        options = [value, *options]
    return html.Div(
        [
            html.Label(FILTER_LABELS[key], htmlFor=f"{FILTER_ID}-{key}", className="filter-label"),
            dcc.Dropdown(
                id=f"{FILTER_ID}-{key}",
                options=[{"label": o, "value": o} for o in options],
                value=value,
                placeholder="All",
                clearable=True,
                className="filter-dropdown",
            ),
        ],
        className="filter",
    )


def filter_bar(state: UrlState) -> html.Div:
    # Dash builds the layout once outside any request to check it: no database then.
    options = (
        filter_options(state.filters())
        if flask.has_request_context()
        else {k: [] for k in FILTER_KEYS}
    )
    return html.Div(
        [
            html.Div(
                [
                    html.Label(
                        "Time range", htmlFor=f"{FILTER_ID}-range", className="filter-label"
                    ),
                    dcc.Dropdown(
                        id=f"{FILTER_ID}-range",
                        options=[{"label": v, "value": k} for k, v in PRESETS.items()]
                        + [{"label": "Custom…", "value": "custom"}],
                        value=state.range,
                        clearable=False,
                        className="filter-dropdown",
                    ),
                ],
                className="filter",
            ),
            html.Div(
                [
                    html.Label("From – to (UTC)", className="filter-label"),
                    dcc.DatePickerRange(
                        id=f"{FILTER_ID}-dates",
                        start_date=state.start[:10] if state.start else None,
                        end_date=state.end[:10] if state.end else None,
                        display_format="YYYY-MM-DD",
                        minimum_nights=0,
                        clearable=True,
                    ),
                ],
                className="filter filter-dates",
            ),
            *(_dropdown(k, state.values.get(k), options[k]) for k in FILTER_KEYS),
            html.Div(
                [
                    html.Label("Idle cost", htmlFor=f"{FILTER_ID}-idle", className="filter-label"),
                    dcc.Dropdown(
                        id=f"{FILTER_ID}-idle",
                        options=idle_policy.choice_options(),
                        value=state.policy,
                        clearable=False,
                        className="filter-dropdown",
                    ),
                ],
                className="filter",
            ),
            html.Div(
                [
                    html.Span(
                        "Auto-refresh", className="filter-label", id=f"{FILTER_ID}-refresh-label"
                    ),
                    dcc.Checklist(
                        id=f"{FILTER_ID}-refresh",
                        options=[
                            {"label": f" every {state.refresh or REFRESH_SECONDS} s", "value": "on"}
                        ],
                        value=["on"] if state.refresh else [],
                        className="filter-refresh",
                        inputClassName="filter-refresh-box",
                    ),
                    dcc.Interval(
                        id=REFRESH_INTERVAL_ID,
                        interval=(state.refresh or REFRESH_SECONDS) * 1000,
                        disabled=not state.refresh,
                    ),
                    dcc.Store(id=TICK_ID, data=0),
                ],
                className="filter filter-small",
                role="group",
                **{"aria-labelledby": f"{FILTER_ID}-refresh-label"},
            ),
            html.Div(
                [
                    html.Button(
                        "Copy link",
                        id=f"{FILTER_ID}-copy",
                        className="button small",
                        title="Copy a link to this view with the time range fixed to its dates, "
                        "so it shows the same numbers later",
                    ),
                    html.Span(id=f"{FILTER_ID}-copied", className="filter-copied", role="status"),
                    html.Label(
                        "Link to this view", htmlFor=f"{FILTER_ID}-link", className="sr-only"
                    ),
                    dcc.Input(
                        id=f"{FILTER_ID}-link", type="text", readOnly=True, className="filter-link"
                    ),
                    dcc.Store(id=f"{FILTER_ID}-link-path"),
                ],
                className="filter filter-copy",
            ),
            html.Div(
                "; ".join(state.problems),
                id=f"{FILTER_ID}-problems",
                className="filter-problems",
                role="alert",
            ),
        ],
        className="filter-bar",
        role="search",
        **{"aria-label": "Filters"},
    )


def nav() -> html.Nav:
    links = [
        dcc.Link(
            page["name"],
            href=page["relative_path"],
            id={"type": "nav-link", "path": page["relative_path"]},
            className="nav-link",
        )
        for page in dash.page_registry.values()
        if page.get("nav", True) and (not flask.has_request_context() or context.allowed(page))
    ]
    links += [
        html.Span(name, className="nav-link nav-soon", title=f"{name}: coming with its own issue")
        for name, _ in COMING
    ]
    return html.Nav(links, className="nav", **{"aria-label": "Main"})


def _page_query() -> str:
    """The page's query string. Dash fetches the layout from /_dash-layout, whose own query is
    empty: there it comes from the Referer, the page being loaded."""
    if flask.request.path.endswith("/_dash-layout"):
        return urlsplit(flask.request.referrer or "").query
    return flask.request.query_string.decode()


def layout() -> html.Div:
    """Built per request, from the request's query string."""
    has_request = flask.has_request_context()
    search = "?" + _page_query() if has_request else ""
    state = parse(search)
    return html.Div(
        [
            dcc.Location(id=URL_ID, refresh="callback-nav"),
            html.A("Skip to content", href="#content", className="skip-link"),
            html.Header(
                [
                    html.A("InferLedger", href="/" + state.query_string(), className="brand"),
                    nav(),
                    context.user_badge() if has_request else html.Span(className="user-badge"),
                    html.Span(f"v{__version__}", className="version"),
                ],
                className="topbar",
            ),
            filter_bar(state),
            coverage.banner(),
            html.Main(dash.page_container, className="content", id="content"),
        ],
        className="shell",
    )


def history_notice() -> str | None:
    """The demo's "history loading: data complete back to T" while its history loads (the
    coverage banner shows it above every page); None once loaded, or when no loader ran."""
    status = load_status(context.storage())
    return (status.message() or None) if status is not None else None


def register_callbacks() -> None:
    """The shell's callbacks; the factory calls this for every new app (Dash keeps callbacks
    in a module-level registry that it resets between apps)."""
    coverage.register_callbacks(history_notice)

    @callback(
        Output(URL_ID, "search"),
        Input(f"{FILTER_ID}-range", "value"),
        Input(f"{FILTER_ID}-dates", "start_date"),
        Input(f"{FILTER_ID}-dates", "end_date"),
        *(Input(f"{FILTER_ID}-{k}", "value") for k in FILTER_KEYS),
        Input(f"{FILTER_ID}-idle", "value"),
        Input(f"{FILTER_ID}-refresh", "value"),
        State(URL_ID, "search"),
        prevent_initial_call=True,
    )
    def _write_url(range_: str, start: str | None, end: str | None, *rest: Any) -> str:
        *values, policy, refresh, current = rest
        if start and end and range_ != "custom" and dash.ctx.triggered_id == f"{FILTER_ID}-dates":
            range_ = "custom"  # picking dates means a custom range
        before = parse(current)
        if (
            range_ == "custom"
            and before.range == "custom"
            and (before.start or "")[:10] == start
            and (before.end or "")[:10] == end
        ):
            # keep the times of a custom range (a zoom, a copied link) while the pickers, which
            # show dates only, still show its dates
            start, end = before.start, before.end
        state = UrlState(
            range=range_,
            start=start if range_ == "custom" else None,
            end=end if range_ == "custom" else None,
            values=dict(zip(FILTER_KEYS, values, strict=True)),
            policy=policy,
            page=before.page,  # page-level choices survive filter changes
            refresh=(before.refresh or REFRESH_SECONDS) if refresh else None,
        )
        if range_ == "custom" and not (start and end):
            return current or ""  # wait until both dates are picked
        search = state.query_string()
        if search == (current or ""):
            raise PreventUpdate  # e.g. a zoom that already wrote the URL and set the bar
        return search

    @callback(
        Output({"type": "nav-link", "path": ALL}, "href"),
        Input(URL_ID, "search"),
        State({"type": "nav-link", "path": ALL}, "id"),
    )
    def _keep_filters_in_links(search: str | None, link_ids: list[dict[str, str]]) -> list[str]:
        """Navigation keeps the filters: every link carries the current query string."""
        return [link["path"] + (search or "") for link in link_ids]

    @callback(
        Output(REFRESH_INTERVAL_ID, "disabled"),
        Output(REFRESH_INTERVAL_ID, "interval"),
        Input(URL_ID, "search"),
    )
    def _refresh_interval(search: str | None) -> tuple[bool, int]:
        refresh = parse(search).refresh
        return refresh is None, (refresh or REFRESH_SECONDS) * 1000

    clientside_callback(
        _TICK_JS,
        Output(TICK_ID, "data"),
        Input(REFRESH_INTERVAL_ID, "n_intervals"),
        prevent_initial_call=True,
    )

    @callback(
        Output(f"{FILTER_ID}-link-path", "data"),
        Input(f"{FILTER_ID}-copy", "n_clicks"),
        State(URL_ID, "pathname"),
        State(URL_ID, "search"),
        prevent_initial_call=True,
    )
    def _absolute_link(_clicks: int | None, path: str | None, search: str | None) -> str:
        """The page's link with its range made absolute (app.filters.UrlState.absolute)."""
        return (path or "/") + parse(search).absolute().query_string()

    clientside_callback(
        _COPY_JS,
        Output(f"{FILTER_ID}-link", "value"),
        Output(f"{FILTER_ID}-copied", "children"),
        Output(f"{FILTER_ID}-link", "className"),
        Input(f"{FILTER_ID}-link-path", "data"),
        prevent_initial_call=True,
    )
