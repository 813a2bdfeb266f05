"""The URL's time range is clamped and validated in one place (app.filters.clamp_window).

Issue #17: `/?range=custom&start=2026-01-01&end=9999-12-31` overflowed datetime and failed
every chart callback with a 500."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from app.filters import (
    EARLIEST,
    FILTER_KEYS,
    MAX_SPAN,
    PRESETS,
    clamp_window,
    filters_from,
    parse,
    preset_window,
    zoomed,
)

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


# ---------------------------------------------------------------- calendar presets (issue #10)
def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        # a Wednesday afternoon in the middle of a month
        (
            _utc(2026, 11, 25, 14, 30),
            {
                "today": (_utc(2026, 11, 25), _utc(2026, 11, 25, 15)),
                "yesterday": (_utc(2026, 11, 24), _utc(2026, 11, 25)),
                "wtd": (_utc(2026, 11, 23), _utc(2026, 11, 25, 15)),
                "lastweek": (_utc(2026, 11, 16), _utc(2026, 11, 23)),
                "mtd": (_utc(2026, 11, 1), _utc(2026, 11, 25, 15)),
                "lastmonth": (_utc(2026, 10, 1), _utc(2026, 11, 1)),
            },
        ),
        # Monday 00:00 exactly: the week (and the day) has just begun
        (
            _utc(2026, 11, 30),
            {
                "today": (_utc(2026, 11, 30), _utc(2026, 11, 30, 1)),
                "yesterday": (_utc(2026, 11, 29), _utc(2026, 11, 30)),
                "wtd": (_utc(2026, 11, 30), _utc(2026, 11, 30, 1)),
                "lastweek": (_utc(2026, 11, 23), _utc(2026, 11, 30)),
                "mtd": (_utc(2026, 11, 1), _utc(2026, 11, 30, 1)),
                "lastmonth": (_utc(2026, 10, 1), _utc(2026, 11, 1)),
            },
        ),
        # the 1st of a month, a Tuesday: month to date is today so far, last month is whole
        (
            _utc(2026, 12, 1, 0, 5),
            {
                "today": (_utc(2026, 12, 1), _utc(2026, 12, 1, 1)),
                "yesterday": (_utc(2026, 11, 30), _utc(2026, 12, 1)),
                "wtd": (_utc(2026, 11, 30), _utc(2026, 12, 1, 1)),
                "lastweek": (_utc(2026, 11, 23), _utc(2026, 11, 30)),
                "mtd": (_utc(2026, 12, 1), _utc(2026, 12, 1, 1)),
                "lastmonth": (_utc(2026, 11, 1), _utc(2026, 12, 1)),
            },
        ),
        # New Year's Day 2027, a Friday: yesterday, last week and last month lie in 2026
        (
            _utc(2027, 1, 1, 9, 59, 59),
            {
                "today": (_utc(2027, 1, 1), _utc(2027, 1, 1, 10)),
                "yesterday": (_utc(2026, 12, 31), _utc(2027, 1, 1)),
                "wtd": (_utc(2026, 12, 28), _utc(2027, 1, 1, 10)),
                "lastweek": (_utc(2026, 12, 21), _utc(2026, 12, 28)),
                "mtd": (_utc(2027, 1, 1), _utc(2027, 1, 1, 10)),
                "lastmonth": (_utc(2026, 12, 1), _utc(2027, 1, 1)),
            },
        ),
        # a Sunday at 23:30 in a leap-year March: the week to date is seven days less 30 min
        (
            _utc(2028, 3, 5, 23, 30),
            {
                "today": (_utc(2028, 3, 5), _utc(2028, 3, 6)),
                "yesterday": (_utc(2028, 3, 4), _utc(2028, 3, 5)),
                "wtd": (_utc(2028, 2, 28), _utc(2028, 3, 6)),
                "lastweek": (_utc(2028, 2, 21), _utc(2028, 2, 28)),
                "mtd": (_utc(2028, 3, 1), _utc(2028, 3, 6)),
                "lastmonth": (_utc(2028, 2, 1), _utc(2028, 3, 1)),
            },
        ),
    ],
)
def test_calendar_presets_at_their_edges(now: datetime, expected: dict[str, Any]) -> None:
    for range_, window in expected.items():
        assert preset_window(range_, now) == window, range_
        state = parse(f"?range={range_}&team=finance-ops", now)
        assert state.range == range_ and state.problems == ()
        filters = state.filters(now)
        assert (filters.start, filters.end) == window, range_
        assert filters.team == "finance-ops"
        assert f"range={range_}" in state.query_string()


def test_a_preset_read_in_another_time_zone_is_the_same_utc_window() -> None:
    from datetime import timezone

    tokyo = timezone(timedelta(hours=9))
    # 2026-12-01 03:00 in Tokyo is still November 30 in UTC
    assert preset_window("mtd", datetime(2026, 12, 1, 3, tzinfo=tokyo)) == (
        _utc(2026, 11, 1),
        _utc(2026, 11, 30, 19),
    )


def test_every_preset_has_a_label_and_the_filter_bar_offers_it() -> None:
    assert list(PRESETS) == [
        "24h", "7d", "30d", "today", "yesterday", "wtd", "lastweek", "mtd", "lastmonth",
    ]  # fmt: skip
    assert parse("?range=lastyear", NOW).problems == (
        "unknown time range 'lastyear': showing the last 7 days",
    )


# ---------------------------------------------------------------- absolute links, zoom, URL keys
def test_an_absolute_link_fixes_the_preset_to_datetimes() -> None:
    state = parse("?range=lastweek&team=finance-ops&idle=usage&by=route&refresh=60", NOW)
    fixed = state.absolute(NOW)
    assert fixed.query_string() == (
        "?range=custom&start=2026-11-23T00:00&end=2026-11-30T00:00"
        "&team=finance-ops&idle=usage&by=route"
    )  # the page choice stays, auto-refresh does not: the window no longer moves
    later = NOW + timedelta(days=4)
    again = parse(fixed.query_string(), later)
    assert again.problems == ()
    assert again.filters(later) == state.filters(NOW)  # Friday shows Monday's numbers
    rolling = parse("?range=24h", NOW).absolute(NOW)
    assert (rolling.start, rolling.end) == ("2026-11-30T21:00", "2026-12-01T21:00")


@pytest.mark.parametrize(
    ("x0", "x1", "expected"),
    [
        # plotly's date strings; a zoom of hours snaps outwards to whole hours
        ("2026-11-25 03:12:33.1234", "2026-11-26 05:00", ("2026-11-25T03:00", "2026-11-26T05:00")),
        ("2026-11-26 04:59:59", "2026-11-25 03:01", ("2026-11-25T03:00", "2026-11-26T05:00")),
        # under three hours: whole minutes
        ("2026-11-25 03:12:33.5", "2026-11-25 04:40:10", ("2026-11-25T03:12", "2026-11-25T04:41")),
        ("2026-11-25 03:12:10", "2026-11-25 03:12:20", ("2026-11-25T03:12", "2026-11-25T03:13")),
        # a zoom past the clamp keeps what may be queried
        ("2026-11-30 12:00", "2030-01-01 00:00", ("2026-11-30T12:00", "2026-12-02T21:00")),
    ],
)
def test_a_zoom_becomes_a_custom_range(x0: str, x1: str, expected: tuple[str, str]) -> None:
    state = zoomed(parse("?range=7d&team=platform&by=stage", NOW), x0, x1, NOW)
    assert (state.range, state.start, state.end) == ("custom", *expected)
    assert state.values["team"] == "platform" and state.page == {"by": "stage"}
    assert parse(state.query_string(), NOW).problems == ()


@pytest.mark.parametrize(("x0", "x1"), [("0.5", "3.2"), ("a", "b"), ("2030-01-01", "2031-01-01")])
def test_a_zoom_on_a_non_time_axis_or_in_the_future_is_refused(x0: str, x1: str) -> None:
    with pytest.raises(ValueError):
        zoomed(parse("", NOW), x0, x1, NOW)


def test_page_choices_and_refresh_ride_in_the_url() -> None:
    state = parse("?range=24h&by=route&refresh=60", NOW)
    assert state.page == {"by": "route"} and state.refresh == 60
    assert state.choice("by", ("team", "route"), "team") == "route"
    assert state.choice("by", ("team", "app"), "team") == "team"  # another page's value
    assert state.with_choice("by", "model").query_string() == "?range=24h&by=model&refresh=60"
    assert state.with_choice("by", None).query_string() == "?range=24h&refresh=60"
    with pytest.raises(ValueError, match="not a page-level URL key"):
        state.with_choice("team", "x")
    bad = parse("?by=%3Cscript%3E&refresh=5", NOW)
    assert bad.page == {} and bad.refresh is None
    assert bad.problems == (
        "bad by '<script>': using the page's default",
        "bad refresh '5': auto-refresh is every 10 to 3600 s",
    )
    assert parse("?refresh=off", NOW).refresh is None
    assert parse("?refresh=0", NOW).problems == ()


def test_the_models_cards_workflow_has_its_own_key_beside_by() -> None:
    """Unit economics' workflow is `models_of`, not `workflow` (a global filter's name one
    day); it rides beside Spend's `by`, and names from the data (spaces, other scripts) pass."""
    state = parse("?range=24h&by=route&models_of=answer-ticket", NOW)
    assert state.page == {"by": "route", "models_of": "answer-ticket"}
    assert "workflow" not in FILTER_KEYS and "models_of" not in FILTER_KEYS
    picked = state.with_choice("models_of", "Réclamations client")
    again = parse(picked.query_string(), NOW)
    assert again.page["models_of"] == "Réclamations client" and again.problems == ()
    assert parse(state.with_choice("models_of", None).query_string(), NOW).page == {"by": "route"}
    bad = parse("?models_of=%3Cb%3E", NOW)
    assert bad.page == {} and bad.problems == ("bad models_of '<b>': using the page's default",)


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
        if [(i["id"], i["property"]) for i in d["inputs"]]
        in ([("url", "search")], [("url", "search"), ("refresh-tick", "data")])
        and not d["state"]
        and not d["output"].startswith("{")
    ]
    assert len(drawn) >= 20, len(drawn)
    failed = []
    for dep in drawn:
        body = {
            "output": dep["output"],
            "outputs": _outputs(dep["output"]),
            "inputs": [{"id": "url", "property": "search", "value": CRAFTED}]
            + [{"id": "refresh-tick", "property": "data", "value": 0}] * (len(dep["inputs"]) - 1),
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
