"""ledger/budget_status.py over a real DuckDB whose marts hold hand-made hourly spend."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest

from app import filters as url_filters
from ledger import budget_status as bs
from models.alert_config import budget_from_mapping, rule_from_mapping, scope_key

AT = datetime(2026, 11, 20, 12, 30, tzinfo=UTC)  # a Friday
HOUR = timedelta(hours=1)


_SLICES = """
    insert into mart_spend_hourly (hour, environment, app, team, route, workflow, model,
        deployment, stage, requests, input_tokens, output_tokens, cost_separate, cost_usage,
        cost_even, cost_configured)
    select h, 'prod', app, team, '/chat', null, 'm', dep, stage, 1, 1, 1, s, u, e, c
    from range($start::timestamptz, $end::timestamptz, interval 1 hour) as t(h)
    cross join (values
        ('chat', 'a', 'd1', 'decode', 1.0, 1.0, 1.0, 1.0),
        ('search', 'b', 'd2', 'decode', 2.0, 2.0, 2.0, 2.0),
        (null, null, 'd1', 'idle', 0.5, 0.0, 0.0, 0.5),
        ('chat', 'a', 'd1', 'idle', 0.0, 0.5, 0.5, 0.0)
    ) as v(app, team, dep, stage, s, u, e, c)
"""
_COVERAGE = """
    insert into mart_coverage_hourly
    select h, dep, 1, 3600.0,
        case when dep = 'd2' and h = $bad::timestamptz then 1800.0 else 3600.0 end,
        3600.0, 0, 0, 1, 0, 0, 0
    from range($start::timestamptz, $end::timestamptz, interval 1 hour) as t(h)
    cross join (values ('d1'), ('d2')) as v(dep)
"""


@pytest.fixture
def ledger(storage):
    """Four weeks of steady spend up to AT: team a pays 1/h on d1, team b 2/h on d2, and each
    hour has 0.5 of idle on d1 that `separate` leaves unshared (app/team NULL) and `usage`
    gives to team a. Coverage complete except d2 at 2026-11-10 03:00."""
    start = (AT - timedelta(weeks=4)).replace(minute=0)
    bad = datetime(2026, 11, 10, 3, tzinfo=UTC)

    def write(tx) -> None:
        tx.execute(_SLICES, {"start": start, "end": AT})
        tx.execute(_COVERAGE, {"start": start, "end": AT, "bad": bad})

    storage.write(write)
    return storage


def _budget(**kw):
    return budget_from_mapping(
        {"name": "b", "amount": 1000, "period": "monthly", "owner": "o", **kw}
    )


def test_spent_is_the_scope_in_its_own_period(ledger) -> None:
    hours = (AT - datetime(2026, 11, 1, tzinfo=UTC)) // HOUR + 1  # the partial hour counts
    team_a = bs.budget_status(ledger, _budget(scope={"team": "a"}), AT)
    assert team_a.period_start == datetime(2026, 11, 1, tzinfo=UTC)
    assert team_a.period_end == datetime(2026, 12, 1, tzinfo=UTC)
    assert team_a.spent == pytest.approx(hours * 1.0)  # configured/separate: no idle
    usage = bs.budget_status(ledger, _budget(scope={"team": "a"}, idle_policy="usage"), AT)
    assert usage.spent == pytest.approx(hours * 1.5)  # its share of the idle
    everyone = bs.budget_status(ledger, _budget(), AT)
    assert everyone.spent == pytest.approx(hours * 3.5)  # conservation: all of it
    paris = bs.budget_status(ledger, _budget(scope={"team": "a"}, timezone="Europe/Paris"), AT)
    assert paris.period_start == datetime(2026, 10, 31, 23, tzinfo=UTC)
    assert paris.spent == pytest.approx((hours + 1) * 1.0)
    assert team_a.spent_pct == pytest.approx(100 * team_a.spent / 1000)


def test_status_thresholds_and_forecast(ledger) -> None:
    hours = (AT - datetime(2026, 11, 1, tzinfo=UTC)) // HOUR + 1
    spent = hours * 1.0  # 469
    ok = bs.budget_status(ledger, _budget(scope={"team": "a"}, amount=5000), AT)
    assert (ok.status, ok.threshold_crossed) == ("ok", None)
    # 469 spent (67 %); a steady 24/day for the 10.5 days left lands near 720 (103 %):
    # at risk beats warning.
    warn = bs.budget_status(ledger, _budget(scope={"team": "a"}, amount=700), AT)
    assert warn.threshold_crossed == 50 and warn.status == "at_risk"
    assert warn.forecast.p50 == pytest.approx(720, rel=0.05)
    assert warn.forecast.p10 <= warn.forecast.p50 <= warn.forecast.p90
    assert warn.burn_rate_per_day == pytest.approx(24, rel=0.05)
    safe = bs.budget_status(ledger, _budget(scope={"team": "a"}, amount=800), AT)
    assert (safe.status, safe.threshold_crossed) == ("warning", 50)
    over = bs.budget_status(ledger, _budget(scope={"team": "a"}, amount=spent * 0.9), AT)
    assert (over.status, over.threshold_crossed) == ("over", 100)
    assert over.days_to_exhaustion is None or over.days_to_exhaustion <= 0


def test_coverage_counts_only_the_scope_deployments(ledger) -> None:
    a = bs.budget_status(ledger, _budget(scope={"team": "a"}), AT)
    assert a.coverage_complete and a.coverage_pct == pytest.approx(100)
    b = bs.budget_status(ledger, _budget(scope={"team": "b"}), AT)
    assert not b.coverage_complete
    assert b.incomplete_hours == (datetime(2026, 11, 10, 3, tzinfo=UTC),)
    assert b.coverage_pct < 100
    org = bs.budget_status(ledger, _budget(), AT)
    assert org.incomplete_hours == b.incomplete_hours
    daily = bs.budget_status(ledger, _budget(scope={"team": "b"}, period="daily"), AT)
    assert daily.coverage_complete  # the bad hour is before today


def test_link_opens_the_spend_page_on_the_scope_and_period(ledger) -> None:
    s = bs.budget_status(
        ledger,
        _budget(scope={"team": "a", "environment": "prod"}, idle_policy="even"),
        AT,
        base_url="https://il.example.com",
    )
    parts = urlsplit(s.link)
    assert (parts.netloc, parts.path) == ("il.example.com", "/spend")
    f = url_filters.parse("?" + parts.query, AT).filters(AT)
    assert (f.start, f.end) == (s.period_start, datetime(2026, 11, 20, 13, tzinfo=UTC))
    assert (f.team, f.environment, f.policy) == ("a", "prod", "even")


def test_batch_equals_one_by_one_and_is_fast(ledger) -> None:
    budgets = [
        _budget(
            name=f"b{i}", scope={"team": "ab"[i % 2]}, period=("daily", "weekly", "monthly")[i % 3]
        )
        for i in range(50)
    ]
    t0 = time.perf_counter()
    batch = bs.budget_statuses(ledger, AT, budgets=budgets)
    elapsed = time.perf_counter() - t0
    for one, b in zip(batch, budgets[:3], strict=False):
        assert one.spent == pytest.approx(bs.budget_status(ledger, b, AT).spent)
    assert [s.budget.name for s in batch] == [b.name for b in budgets]
    print(f"50 budget statuses: {elapsed:.3f} s")


def test_series_is_cumulative_to_now(ledger) -> None:
    series = bs.budget_series(ledger, _budget(scope={"team": "b"}, period="daily"), AT)
    assert series.actual[0] == (datetime(2026, 11, 20, tzinfo=UTC), 2.0)
    assert series.actual[-1] == (datetime(2026, 11, 20, 12, tzinfo=UTC), 26.0)
    assert series.limit == 1000 and series.threshold_amounts == (500, 800, 1000)
    assert series.band and series.band[-1][0] <= series.period_end


def test_observations_carry_value_severity_and_scope(ledger) -> None:
    hours = (AT - datetime(2026, 11, 1, tzinfo=UTC)) // HOUR + 1
    budget = _budget(scope={"team": "a"}, amount=hours / 0.85)  # 85 % spent
    rule = rule_from_mapping(
        {"name": "r", "kind": "budget_threshold", "owner": "o", "budget_name": "b", "threshold": 50}
    )
    cache: dict = {}
    (obs,) = bs.budget_observations(ledger, rule, budget, AT, cache=cache)
    assert obs.value == pytest.approx(85)
    assert (obs.severity, obs.threshold) == ("warning", 50)
    assert obs.scope_key == scope_key({"team": "a"}) and obs.labels == {"team": "a"}
    assert "budget b" in obs.summary and "85 %" in obs.summary
    forecast_rule = rule_from_mapping(
        {"name": "f", "kind": "budget_forecast", "owner": "o", "budget_name": "b"}
    )
    (fobs,) = bs.budget_observations(ledger, forecast_rule, budget, AT, cache=cache)
    assert fobs.value > 100 and "forecast" in fobs.summary
    assert bs.threshold_severity(None) is None
    assert [bs.threshold_severity(t) for t in (50, 80, 99.9, 100, 150)] == [
        "info",
        "warning",
        "warning",
        "critical",
        "critical",
    ]


def test_empty_ledger_and_bad_input(storage) -> None:
    s = bs.budget_status(storage, _budget(), AT)
    assert (s.spent, s.status, s.coverage_pct, s.coverage_complete) == (0, "ok", None, True)
    with pytest.raises(ValueError, match="time zone"):
        bs.budget_status(storage, _budget(), datetime(2026, 11, 20))
    assert bs.budget_statuses(storage, AT, budgets=[]) == []


def test_custom_periods_before_during_and_after(ledger) -> None:
    custom = {"period": "custom", "custom_start": "2026-11-10", "custom_end": "2026-11-15"}
    after = bs.budget_status(ledger, _budget(scope={"team": "b"}, **custom), AT)
    assert after.spent == pytest.approx(5 * 24 * 2.0)  # the whole period, over
    assert after.forecast.p50 == pytest.approx(after.spent)
    assert not after.coverage_complete  # 2026-11-10 03:00 on d2
    before = bs.budget_status(
        ledger, _budget(scope={"team": "b"}, **custom), datetime(2026, 11, 5, tzinfo=UTC)
    )
    assert (before.spent, before.status) == (0, "ok")
    just = bs.budget_status(ledger, _budget(period="daily"), datetime(2026, 11, 20, tzinfo=UTC))
    assert just.spent == 0 and just.forecast.p50 > 0  # the day ahead, from the history
