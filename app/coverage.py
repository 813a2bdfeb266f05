"""The coverage banner: when the selected range's data is incomplete, every page says so, naming
the deployments and hours without GPU metrics and linking each stretch to the GPU page (issue
#10, §1). Missing data must never read as "free" or as a complete week.

``banner()`` is the layout placeholder the shell puts above every page; ``register_callbacks()``
fills it from the URL's ``search`` (and the refresh tick), with an optional extra notice from
outside (the demo's "history loading" line). ``banner_parts`` / ``banner_text`` are pure: they
turn a :class:`ledger.coverage.Coverage` into what is shown, for tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from dash import Input, Output, callback, dcc, html

from app import context
from app.components import TICK_ID, URL_ID
from app.filters import UrlState, parse
from app.formats import money, number
from ledger import coverage as cov

BANNER_ID = "coverage-banner"
#: At most this many stretches are listed; the rest are counted ("and 3 more").
MAX_LISTED = 5
GPU_PAGE = "/gpu"

Notice = Callable[[], str | None]


def banner() -> html.Div:
    """The placeholder the shell lays out above the page; hidden until a range is incomplete."""
    return html.Div(id=BANNER_ID, className="coverage-banner", role="status", hidden=True)


def _when(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M")


def stretch_label(s: cov.Stretch) -> str:
    """`dep 2026-05-28 20:00–23:00 UTC` (the end's date only when it differs)."""
    end = s.end.strftime("%H:%M") if s.end.date() == s.start.date() else _when(s.end)
    return f"{s.deployment} {_when(s.start)}–{end} UTC"


def stretch_detail(s: cov.Stretch) -> str:
    """What happened in a stretch: scraped share and the requests it affected."""
    parts = [f"{s.fraction:.0%} scraped" if s.fraction is not None else "not scraped"]
    if s.uncovered_requests:
        parts.append(f"{number(s.uncovered_requests)} requests without metrics")
    if s.estimated_cost > 0:
        parts.append(f"{money(s.estimated_cost)} estimated")
    if s.unpriced_requests:
        parts.append(f"{number(s.unpriced_requests)} unpriced")
    return ", ".join(parts)


def stretch_href(state: UrlState, s: cov.Stretch) -> str:
    """The GPU page over the stretch's hours, every other URL filter kept."""
    moved = replace(
        state,
        range="custom",
        start=s.start.strftime("%Y-%m-%dT%H:%M"),
        end=s.end.strftime("%Y-%m-%dT%H:%M"),
        problems=(),
        refresh=None,
    )
    return GPU_PAGE + moved.query_string()


def headline(c: cov.Coverage) -> str | None:
    """The banner's first sentence, or None when the range's data is complete."""
    if c.complete:
        return None
    share = f"{c.fraction:.1%}" if c.fraction is not None else "none"
    text = f"Data coverage {share} of GPU time in this range"
    notes = []
    if c.uncovered_requests:
        notes.append(f"{number(c.uncovered_requests)} requests ran without GPU metrics")
    if c.estimated_cost > 0:
        notes.append(f"{money(c.estimated_cost)} of the cost is estimated")
    if c.unpriced_requests:
        notes.append(f"unpriced: {number(c.unpriced_requests)} requests")
    return text + (": " + "; ".join(notes) if notes else "") + "."


def banner_text(c: cov.Coverage, extra: str | None = None) -> str | None:
    """The banner as plain text (what banner_parts shows, without links); None: hidden."""
    lines = [extra] if extra else []
    head = headline(c)
    if head is not None:
        lines.append(head)
        listed = c.stretches[:MAX_LISTED]
        more = len(c.stretches) - len(listed)
        named = "; ".join(f"{stretch_label(s)} ({stretch_detail(s)})" for s in listed)
        lines.append(f"Incomplete: {named}" + (f"; and {more} more" if more else "") + ".")
    return "\n".join(lines) if lines else None


def banner_parts(c: cov.Coverage, state: UrlState, extra: str | None = None) -> list[Any]:
    """The banner's children: the extra notice, the headline and the stretches as links."""
    parts: list[Any] = []
    if extra:
        parts.append(html.P(extra, className="coverage-notice"))
    head = headline(c)
    if head is None:
        return parts
    parts.append(html.P(head, className="coverage-headline"))
    listed = c.stretches[:MAX_LISTED]
    items: list[Any] = [
        html.Li(
            [
                dcc.Link(stretch_label(s), href=stretch_href(state, s)),
                f" — {stretch_detail(s)}",
            ]
        )
        for s in listed
    ]
    if len(c.stretches) > MAX_LISTED:
        items.append(html.Li(f"and {len(c.stretches) - MAX_LISTED} more"))
    parts.append(html.Ul(items, className="coverage-stretches"))
    return parts


def register_callbacks(notice: Notice | None = None) -> None:
    """Fill the banner for the URL's range; `notice` (called on every update) adds a line from
    outside, e.g. the demo's "history loading: complete back to T"."""

    @callback(
        Output(BANNER_ID, "children"),
        Output(BANNER_ID, "hidden"),
        Input(URL_ID, "search"),
        Input(TICK_ID, "data"),
    )
    def _fill(search: str | None, _tick: int | None) -> tuple[list[Any], bool]:
        state = parse(search)
        c = cov.coverage(context.storage(), state.filters())
        parts = banner_parts(c, state, notice() if notice is not None else None)
        return parts, not parts
