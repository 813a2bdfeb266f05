"""models/dashboard_links.py restates app/filters.py's query format; parse every link with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import urlsplit

import pytest

from app import filters as url_filters
from ledger import page_data
from models.dashboard_links import PAGES, URL_KEYS, dashboard_link, unlinked_dimensions
from models.idle_policy import IDLE_CHOICES

NOW = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)


def _parsed(url: str):
    query = urlsplit(url).query
    state = url_filters.parse("?" + query, NOW)
    return state, state.filters(NOW)


def test_scope_and_range_round_trip_through_the_dashboard_parser() -> None:
    start, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 30, 13, tzinfo=UTC)
    scope = {"team": "finance-ops", "environment": "prod", "app": "chat bot/α", "model": "m:1"}
    url = dashboard_link("https://il.example.com/", "/spend", scope=scope, start=start, end=end)
    assert url.startswith("https://il.example.com/spend?range=custom&")
    state, f = _parsed(url)
    assert state.problems == ()
    assert (f.start, f.end) == (start, end)
    assert (f.team, f.environment, f.app, f.model, f.route) == (
        "finance-ops",
        "prod",
        "chat bot/α",
        "m:1",
        None,
    )
    # The dashboard writes the same query string back (a shared link is stable).
    assert "?" + urlsplit(url).query == state.query_string()


def test_url_keys_match_the_filter_bar() -> None:
    assert URL_KEYS == page_data.FILTER_KEYS


def test_aware_non_utc_times_are_converted_and_partial_minutes_widen() -> None:
    paris = timezone(timedelta(hours=1))
    start = datetime(2026, 11, 1, 0, 0, 30, tzinfo=paris)  # 2026-10-31 23:00:30 UTC
    end = datetime(2026, 11, 30, 10, 15, 1, tzinfo=paris)  # 09:15:01 UTC
    _, f = _parsed(dashboard_link("", "/requests", scope={}, start=start, end=end))
    assert f.start == datetime(2026, 10, 31, 23, 0, tzinfo=UTC)
    assert f.end == datetime(2026, 11, 30, 9, 16, tzinfo=UTC)


def test_extra_keys_and_idle_policy() -> None:
    start, end = NOW - timedelta(days=2), NOW
    url = dashboard_link(
        "http://h:8050",
        "/spend",
        scope={"route": "/v1/chat"},
        start=start,
        end=end,
        extra={"idle": "usage", "by": "team"},
    )
    state, f = _parsed(url)
    assert state.problems == ()
    assert f.policy == "usage" and f.route == "/v1/chat"
    assert state.choice("by", ("team", "app"), "app") == "team"
    for policy in IDLE_CHOICES:
        link = dashboard_link("", "/gpu", scope={}, start=start, end=end, extra={"idle": policy})
        assert _parsed(link)[1].policy == policy


def test_dimensions_without_a_url_filter_are_left_out_and_named() -> None:
    scope = {"workflow": "triage", "deployment": "d1", "team": "t"}
    url = dashboard_link("", "/spend", scope=scope, start=NOW - timedelta(hours=1), end=NOW)
    assert "workflow" not in url and "deployment" not in url
    assert _parsed(url)[1].team == "t"
    assert unlinked_dimensions(scope) == ("workflow", "deployment")
    assert unlinked_dimensions({"team": "t", "deployment": None}) == ()


def test_every_page_is_a_path_and_bad_input_is_refused() -> None:
    for page in PAGES:
        url = dashboard_link("https://x/", page, scope={}, start=NOW - timedelta(hours=1), end=NOW)
        assert urlsplit(url).path == page
    with pytest.raises(ValueError, match="unknown dashboard page"):
        dashboard_link("", "/nope", scope={}, start=NOW - timedelta(hours=1), end=NOW)
    with pytest.raises(ValueError, match="not after its start"):
        dashboard_link("", "/spend", scope={}, start=NOW, end=NOW)
    with pytest.raises(ValueError, match="unknown link key 'refresh'"):
        dashboard_link(
            "", "/spend", scope={}, start=NOW - timedelta(hours=1), end=NOW, extra={"refresh": "60"}
        )
    with pytest.raises(ValueError, match="unknown idle policy"):
        dashboard_link(
            "", "/spend", scope={}, start=NOW - timedelta(hours=1), end=NOW, extra={"idle": "x"}
        )
