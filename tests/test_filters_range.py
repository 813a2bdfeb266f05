"""The URL's time range is clamped and validated in one place (app.filters.clamp_window).

Issue #17: `/?range=custom&start=2026-01-01&end=9999-12-31` overflowed datetime and failed
every chart callback with a 500."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from app.filters import EARLIEST, MAX_SPAN, clamp_window, filters_from, parse

NOW = datetime(2026, 12, 1, 20, 45, tzinfo=UTC)
LATEST = datetime(2026, 12, 2, 21, 0, tzinfo=UTC)  # the end of NOW's hour, plus a day
CRAFTED = "?range=custom&start=2026-01-01&end=9999-12-31"


def test_an_end_in_year_9999_is_clamped_and_named() -> None:
    state = parse(CRAFTED, NOW)
    assert state.range == "custom"
    assert state.problems == (
        "custom range 2026-01-01 to 9999-12-31: end moved back to 2026-12-02 21:00 UTC",
    )
    # the normalised state says what is drawn, so the date pickers and links agree
    assert (state.start, state.end) == ("2026-01-01", "2026-12-02T21:00")
    filters = filters_from(CRAFTED, NOW)
    assert (filters.start, filters.end) == (datetime(2026, 1, 1, tzinfo=UTC), LATEST)
    assert parse(state.query_string(), NOW).problems == ()  # clamping twice changes nothing


@pytest.mark.parametrize(
    ("start", "end", "expected", "notes"),
    [
        # an ordinary range, through today (its end is tomorrow's midnight): untouched
        ("2026-11-01", "2026-12-01", ("2026-11-01", "2026-12-02"), ()),
        # a start before the floor moves forward, then the span is cut to MAX_SPAN
        (
            "0001-01-01",
            "2026-11-01",
            ("2025-09-28", "2026-11-02"),
            ("start moved forward to 2000-01-01", "shortened to the last 400 days"),
        ),
        ("2000-01-01", "2000-01-31", ("2000-01-01", "2000-02-01"), ()),
        # datetimes with an offset are read as the moments they name, in UTC
        ("2026-11-01T00:00-05:00", "2026-11-02", ("2026-11-01T05:00", "2026-11-03"), ()),
    ],
)
def test_clamped_windows(start: str, end: str, expected: tuple[str, str], notes: Any) -> None:
    state = parse(f"?range=custom&start={start}&end={end}".replace("+", "%2B"), NOW)
    filters = state.filters(NOW)
    as_text = [
        f"{m:%Y-%m-%d}" if m.time() == datetime.min.time() else f"{m:%Y-%m-%dT%H:%M}"
        for m in (filters.start, filters.end)
    ]
    assert tuple(as_text) == expected
    assert all(n in "; ".join(state.problems) for n in notes)
    assert bool(state.problems) == bool(notes)
    assert EARLIEST <= filters.start < filters.end <= LATEST
    assert filters.end - filters.start <= MAX_SPAN


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("start=2026-11-05&end=2026-11-01", "end 2026-11-01 is not after start 2026-11-05"),
        ("start=9000-01-01&end=9999-12-30", "the range holds no time between 2000 and now"),
        ("start=1000-01-01&end=1999-12-01", "the range holds no time between 2000 and now"),
        ("start=2026-13-01&end=2026-12-01", "month must be in 1..12"),
        ("start=0001-01-01T00:00%2B05:00&end=2026-11-02", "out of range"),
        ("start=2026-11-01", "a custom range needs start and end"),
        ("start=yesterday&end=today", "Invalid isoformat string"),
    ],
)
def test_unusable_ranges_fall_back_to_the_default_with_a_notice(query: str, why: str) -> None:
    state = parse("?range=custom&" + query, NOW)
    assert state.range == "7d" and state.start is None and state.end is None
    assert len(state.problems) == 1
    assert why in state.problems[0] and "showing the last 7 days" in state.problems[0]
    filters = state.filters(NOW)
    assert filters.end - filters.start == timedelta(days=7)


def test_clamp_window_directly() -> None:
    start, end, notes = clamp_window(
        datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC), NOW
    )
    assert (start, end) == (LATEST - MAX_SPAN, LATEST)
    assert len(notes) == 3
    with pytest.raises(ValueError, match="not after start"):
        clamp_window(NOW, NOW, NOW)


# ---------------------------------------------------------------- end to end


def _outputs(spec: str) -> list[dict[str, str]] | dict[str, str]:
    """Dash's output string ("a.b" or "..a.b...c.d..") as the request's `outputs`."""
    parts = spec.strip(".").split("...") if spec.startswith("..") else [spec]
    found = [dict(zip(("id", "property"), p.rsplit(".", 1), strict=True)) for p in parts]
    return found if spec.startswith("..") else found[0]


def test_every_chart_callback_answers_the_crafted_url(live) -> None:
    """Every callback that draws from the URL answers 200 for the crafted range, and so do
    the layout and the page router (all were 500s: OverflowError in parse)."""
    url = live.url
    deps = requests.get(url + "/_dash-dependencies", timeout=10).json()
    drawn = [
        d
        for d in deps
        if [(i["id"], i["property"]) for i in d["inputs"]] == [("url", "search")]
        and not d["state"]
        and not d["output"].startswith("{")
    ]
    assert len(drawn) >= 20, len(drawn)
    failed = []
    for dep in drawn:
        body = {
            "output": dep["output"],
            "outputs": _outputs(dep["output"]),
            "inputs": [{"id": "url", "property": "search", "value": CRAFTED}],
            "changedPropIds": ["url.search"],
            "state": [],
        }
        resp = requests.post(url + "/_dash-update-component", json=body, timeout=30)
        if resp.status_code != 200:
            failed.append((dep["output"], resp.status_code))
    assert failed == [], f"{len(failed)} of {len(drawn)} callbacks failed: {failed}"
    layout = requests.get(url + "/_dash-layout", headers={"Referer": url + "/" + CRAFTED})
    assert layout.status_code == 200
    assert "end moved back to" in layout.text  # the notice above the pages
