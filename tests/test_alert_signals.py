"""The data-driven alert kinds over the request, task and spend marts (ledger/alert_signals.py,
issue #12): every kind fires on a crafted scenario and stays silent on a near miss, at a fixed
instant over a real DuckDB; scope, group-by, no-data and bad-rule cases. The marts' rows are
written as the refresher writes them (its columns, its grain); the fleet kinds, which read raw
scrapes, are in test_alert_signals_fleet.py through the real scraper and refresher."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import pyarrow as pa
import pytest

from ledger.alert_signals import SIGNAL_KINDS, signal_observations
from models.alert_config import AlertRule, ConfigError, scope_key

AT = datetime(2026, 3, 30, 12, 30, tzinfo=UTC)  # a Monday, half past noon
_ids = count()


def rule(kind: str, threshold: float, **kw: Any) -> AlertRule:
    return AlertRule(
        name=f"test {kind}",
        kind=kind,
        owner="ops",
        window_s=kw.pop("window_s", 3600),
        threshold=threshold,
        resolve_threshold=threshold,
        **kw,
    )


def by_scope(observations: Iterable[Any]) -> dict[str, float | None]:
    return {o.scope_key: o.value for o in observations}


def append(storage, table: str, rows: list[dict[str, Any]]) -> None:
    data = pa.Table.from_pylist(rows)
    storage.write(lambda tx: tx.append_arrow(table, data))


def add_requests(storage, n: int, start: datetime, end: datetime, **values: Any) -> None:
    """n requests spread evenly over [start, end), as mart_requests rows; `values` override the
    columns (a callable gets the request's index)."""
    rows = []
    step = (end - start) / n
    for i in range(n):
        t = start + step * i
        row: dict[str, Any] = {
            "trace_id": f"t{next(_ids)}",
            "span_id": f"s{i}",
            "start_ns": int(t.timestamp() * 1e9),
            "end_ns": int(t.timestamp() * 1e9) + 1_000_000_000,
            "start_time": t,
            "hour": t.replace(minute=0, second=0, microsecond=0),
            "environment": "prod",
            "app": "support",
            "team": "cx",
            "route": "/chat",
            "workflow": "help",
            "task_key": f"task{i}",
            "attempt": 1,
            "fallback": False,
            "model": "llama-70b",
            "deployment": "dep70",
            "hosting": "self_hosted",
            "cost_basis": "measured",
            "failed": False,
            "input_tokens": 1000,
            "cached_input_tokens": 500,
            "output_tokens": 100,
            "queue_s": 0.01,
            "ttft_s": 0.3,
            "e2e_s": 2.0,
            "prefill_gpu_s": 0.1,
            "decode_gpu_s": 1.0,
            "prefill_cost": 0.0001,
            "decode_cost": 0.001,
            "idle_usage_cost": 0.0,
            "idle_even_cost": 0.0,
            "idle_configured_cost": 0.0,
        }
        for key, value in values.items():
            row[key] = value(i) if callable(value) else value
        rows.append(row)
    append(storage, "mart_requests", rows)


# ---------------------------------------------------------------------------- spend_spike
def add_spend(storage, hour: datetime, cost: float, **dims: Any) -> None:
    row = {
        "hour": hour,
        "environment": "prod",
        "app": "support",
        "team": "cx",
        "route": "/chat",
        "workflow": "help",
        "model": "llama-70b",
        "deployment": "dep70",
        "stage": "decode",
        "requests": 10,
        "input_tokens": 1000,
        "output_tokens": 100,
        "cost_separate": cost,
        "cost_usage": cost,
        "cost_even": cost,
        "cost_configured": cost,
    } | dims
    append(storage, "mart_spend_hourly", [row])


def spend_history(storage, *, weeks: int = 4, usual: float = 10.0, **dims: Any) -> None:
    """`usual` dollars in the window's two hours (11:00, 12:00 on Mondays) of each past week,
    and $1 at every other hour of those weeks' Mondays: a flat average would be far lower."""
    for k in range(1, weeks + 1):
        day = (AT - timedelta(days=7 * k)).replace(hour=0, minute=0)
        for h in range(24):
            add_spend(storage, day + timedelta(hours=h), usual if h in (11, 12) else 1.0, **dims)


@pytest.mark.parametrize(("now_11", "now_12", "fires"), [(40.0, 20.0, True), (25.0, 15.0, False)])
def test_spend_spike_compares_the_same_hours_of_the_week(storage, now_11, now_12, fires):
    spend_history(storage)
    add_spend(storage, AT.replace(hour=11, minute=0), now_11)
    add_spend(storage, AT.replace(hour=12, minute=0), now_12)  # half of this hour has passed
    [obs] = signal_observations(storage, rule("spend_spike", 3.0), AT)
    # baseline: $10 for 11:00 + half of $10 for 12:00 = $15 (not the $1 of the other hours)
    assert obs.value == pytest.approx((now_11 + now_12) / 15.0)
    assert (obs.value >= 3.0) is fires
    assert obs.scope_key == "{}" and "x its usual $15.00" in obs.summary


def test_spend_spike_groups_floors_small_baselines_and_needs_history(storage):
    spend_history(storage, route="/chat")
    spend_history(storage, route="/tiny", usual=0.1)
    add_spend(storage, AT.replace(hour=11, minute=0), 40.0, route="/chat")
    add_spend(storage, AT.replace(hour=11, minute=0), 1.2, route="/tiny")  # 8x a tiny baseline
    add_spend(storage, AT.replace(hour=11, minute=0), 5.0, route="/new")  # no history at all
    r = rule("spend_spike", 3.0, group_by=("route",), params={"min_baseline": 1.0})
    values = by_scope(signal_observations(storage, r, AT))
    assert values[scope_key({"route": "/chat"})] == pytest.approx(40 / 15)
    # /tiny's usual $0.10 per hour is floored at min_baseline $1: 1.2 / 1.5, not 1.2 / 0.15
    assert values[scope_key({"route": "/tiny"})] == pytest.approx(1.2 / 1.5)
    # /new has no spend in past weeks, but the ledger does: its baseline is $0, floored
    assert values[scope_key({"route": "/new"})] == pytest.approx(5.0 / 1.5)
    empty = signal_observations(storage, rule("spend_spike", 3.0), AT - timedelta(days=60))
    assert [o.value for o in empty] == [None]  # no week of history before it


def test_spend_spike_median_of_weeks_and_min_weeks(storage):
    spend_history(storage, weeks=1)
    add_spend(storage, AT.replace(hour=11, minute=0), 60.0)
    # one week of history: below the default min_weeks (2), no value; with min_weeks 1, one
    [obs] = signal_observations(storage, rule("spend_spike", 3.0), AT)
    assert obs.value is None and "fewer than 2 weeks" in obs.summary
    one = rule("spend_spike", 3.0, params={"min_weeks": 1})
    assert signal_observations(storage, one, AT)[0].value == pytest.approx(60 / 15)
    # three more weeks, one of them a spike ($100 at 11:00 two weeks back): the median of
    # 10, 100, 10, 10 is still $10
    for k in (2, 3, 4):
        add_spend(
            storage,
            AT.replace(hour=11, minute=0) - timedelta(days=7 * k),
            100.0 if k == 2 else 10.0,
        )
        add_spend(storage, AT.replace(hour=12, minute=0) - timedelta(days=7 * k), 10.0)
    [obs] = signal_observations(storage, rule("spend_spike", 3.0), AT)
    assert obs.value == pytest.approx(60 / 15)


# ---------------------------------------------------------------------------- long_context
@pytest.mark.parametrize(("tokens", "fires"), [(2000, True), (1300, False)])
def test_long_context_window_p95_against_the_routes_baseline_p99(storage, tokens, fires):
    add_requests(storage, 300, AT - timedelta(days=7), AT - timedelta(hours=1), input_tokens=1000)
    add_requests(storage, 60, AT - timedelta(hours=1), AT, input_tokens=tokens)
    for start, end in (
        (AT - timedelta(days=7), AT - timedelta(hours=1)),
        (AT - timedelta(hours=1), AT),
    ):
        # another route, always long: its own baseline is long too
        add_requests(storage, 30, start, end, route="/summarize", input_tokens=20_000)
    r = rule("long_context", 1.5, group_by=("route",))
    values = by_scope(signal_observations(storage, r, AT))
    chat = values[scope_key({"route": "/chat"})]
    assert chat == pytest.approx(tokens / 1000, rel=0.05)  # 4.4 % wide buckets
    assert (chat >= 1.5) is fires
    assert values[scope_key({"route": "/summarize"})] == pytest.approx(1.0)


def test_long_context_needs_min_requests_on_both_sides(storage):
    add_requests(storage, 300, AT - timedelta(days=7), AT - timedelta(hours=1))
    add_requests(storage, 5, AT - timedelta(hours=1), AT, input_tokens=50_000)
    [obs] = signal_observations(storage, rule("long_context", 1.5), AT)
    assert obs.value is None and "5 requests" in obs.summary


# ---------------------------------------------------------------------------- failure_rate
@pytest.mark.parametrize(("failed_every", "fires"), [(8, True), (16, False)])
def test_failure_rate_points_above_the_baseline_share(storage, failed_every, fires):
    add_requests(  # 2 % failed over the week before
        storage, 1000, AT - timedelta(days=7), AT - timedelta(hours=1), failed=lambda i: i % 50 == 0
    )
    add_requests(  # a failure (or a retry: attempt 2) every `failed_every` requests
        storage,
        400,
        AT - timedelta(hours=1),
        AT,
        failed=lambda i: i % (2 * failed_every) == 0,
        attempt=lambda i: 2 if i % (2 * failed_every) == failed_every else 1,
    )
    [obs] = signal_observations(storage, rule("failure_rate", 5.0), AT)
    rate = 100 * (400 // failed_every) / 400
    assert obs.value == pytest.approx(rate - 2.0)
    assert (obs.value >= 5.0) is fires


# ---------------------------------------------------------------------------- slo_burn
def set_slo(storage, **target: Any) -> None:
    row = {
        "objective": "chat-ttft-p99",
        "route": "/chat",
        "stage": "ttft",
        "percentile": 0.99,
        "target_s": 1.0,
        "effective_from": datetime(2026, 1, 1, tzinfo=UTC),
    } | target
    storage.write(lambda tx: tx.execute("delete from slo_targets"))
    append(storage, "slo_targets", [row])


@pytest.mark.parametrize(
    ("slow_long", "slow_short", "expected"),
    [
        (30, 12, 15.0),  # long 15x, short 60x: min 15x >= 14.4
        (30, 0, 0.0),  # long 15x but the last 5 min are fine (it recovered): silent
        (20, 12, 10.0),  # short 60x but long only 10x (a blip): silent
    ],
)
def test_slo_burn_is_the_lower_of_the_long_and_short_burn(storage, slow_long, slow_short, expected):
    set_slo(storage)
    short = AT - timedelta(minutes=5)
    # 200 requests in the hour, 20 of them in its last 5 min; slow = ttft over the 1 s target
    add_requests(
        storage,
        180,
        AT - timedelta(hours=1),
        short,
        ttft_s=lambda i: 3.0 if i < slow_long - slow_short else 0.2,
    )
    add_requests(storage, 20, short, AT, ttft_s=lambda i: 3.0 if i < slow_short else 0.2)
    add_requests(storage, 200, AT - timedelta(hours=1), AT, route="/other", ttft_s=9.0)
    [obs] = signal_observations(storage, rule("slo_burn", 14.4), AT)
    assert obs.value == pytest.approx(expected)
    assert "chat-ttft-p99" in obs.summary


def test_slo_burn_without_a_matching_objective_or_requests_is_no_data(storage):
    set_slo(storage, route="/answer")
    add_requests(storage, 100, AT - timedelta(hours=1), AT, ttft_s=5.0)
    assert [o.value for o in signal_observations(storage, rule("slo_burn", 14.4), AT)] == [None]


# ---------------------------------------------------------------------------- prefix cache
@pytest.mark.parametrize(("cached", "fires"), [(300, True), (450, False)])
def test_prefix_cache_regression_points_below_the_baseline_hit_rate(storage, cached, fires):
    add_requests(
        storage, 500, AT - timedelta(days=7), AT - timedelta(hours=1), cached_input_tokens=600
    )
    add_requests(storage, 100, AT - timedelta(hours=1), AT, cached_input_tokens=cached)
    add_requests(  # hosted calls without a cache count are left out, not counted as misses
        storage, 100, AT - timedelta(hours=1), AT, cached_input_tokens=None, hosting="hosted"
    )
    [obs] = signal_observations(storage, rule("prefix_cache_regression", 20.0), AT)
    assert obs.value == pytest.approx(60.0 - cached / 10)
    assert (obs.value >= 20.0) is fires


# ---------------------------------------------------------------------------- unpriced
def test_unpriced_usage_counts_the_windows_unpriced_requests_per_group(storage):
    add_requests(
        storage,
        10,
        AT - timedelta(hours=3),
        AT - timedelta(hours=2),
        cost_basis="unpriced",
        model="new-model",
    )  # before the window
    add_requests(
        storage,
        4,
        AT - timedelta(minutes=30),
        AT,
        cost_basis="unpriced",
        model="new-model",
        hosting="unpriced",
    )
    add_requests(storage, 50, AT - timedelta(hours=1), AT)
    r = rule("unpriced_usage", 1.0, group_by=("model",))
    values = by_scope(signal_observations(storage, r, AT))
    assert values == {
        scope_key({"model": "llama-70b"}): 0.0,
        scope_key({"model": "new-model"}): 4.0,
    }


# ---------------------------------------------------------------------------- false_economy
def add_tasks(
    storage,
    n: int,
    start: datetime,
    end: datetime,
    *,
    accepted: int,
    llm_cost: float,
    total_cost: float,
    pending: int = 0,
    **dims: Any,
) -> None:
    rows = []
    step = (end - start) / n
    for i in range(n):
        t = start + step * i
        outcome = "accepted" if i < accepted else "pending" if i >= n - pending else "rejected"
        rows.append(
            {
                "task_key": f"k{next(_ids)}",
                "environment": "prod",
                "app": "support",
                "team": "cx",
                "route": "/summarize",
                "workflow": "digest",
                "first_model": "m",
                "final_model": "m",
                "day": t.date(),
                "first_start_ns": int(t.timestamp() * 1e9),
                "last_end_ns": int(t.timestamp() * 1e9) + 10**9,
                "first_start": t,
                "last_end": t,
                "traces": 1,
                "attempts": 1,
                "retried": False,
                "llm_calls": 1,
                "failed_calls": 0,
                "fallback_calls": 0,
                "unpriced_calls": 0,
                "service_calls": 0,
                "outcome": outcome,
                "review_s": 0.0,
                "llm_cost": llm_cost,
                "retrieval_cost": 0.0,
                "tools_cost": 0.0,
                "review_cost": total_cost - llm_cost,
                "total_cost": total_cost,
                "idle_usage": 0.0,
                "idle_even": 0.0,
                "idle_configured": 0.0,
                "retry_cost": 0.0,
                "fallback_cost": 0.0,
                "failed_cost": 0.0,
                "input_tokens": 1000,
                "cached_input_tokens": 0,
                "output_tokens": 100,
            }
            | dims
        )
    append(storage, "mart_tasks", rows)


@pytest.mark.parametrize(("accepted_after", "expected"), [(20, 31.25), (28, 0.0)])
def test_false_economy_cheaper_calls_dearer_accepted_outcomes(storage, accepted_after, expected):
    day = timedelta(days=1)
    # the day before: $1 calls, $1.20 per task, 45 of 50 accepted: $1.333 per accepted outcome
    add_tasks(storage, 50, AT - 2 * day, AT - day, accepted=45, llm_cost=1.0, total_cost=1.2)
    # the window: calls half the price, more review: $35 over `accepted_after` accepted
    add_tasks(
        storage, 52, AT - day, AT, accepted=accepted_after, llm_cost=0.5, total_cost=0.7, pending=2
    )  # pending tasks count on neither side
    [obs] = signal_observations(storage, rule("false_economy", 20.0, window_s=86400), AT)
    assert obs.value == pytest.approx(expected)
    if expected:
        assert "cost per request fell $1.00000 -> $0.50000" in obs.summary


def test_false_economy_is_zero_when_unit_cost_did_not_fall(storage):
    day = timedelta(days=1)
    add_tasks(storage, 50, AT - 2 * day, AT - day, accepted=45, llm_cost=1.0, total_cost=1.2)
    add_tasks(storage, 50, AT - day, AT, accepted=20, llm_cost=1.0, total_cost=1.2)
    [obs] = signal_observations(storage, rule("false_economy", 20.0, window_s=86400), AT)
    assert obs.value == 0.0  # dearer outcomes, but no false economy: calls did not get cheaper
    add_tasks(storage, 5, AT - day, AT, accepted=0, llm_cost=0.1, total_cost=0.1, route="/r2")
    r = rule("false_economy", 20.0, window_s=86400, group_by=("route",))
    assert by_scope(signal_observations(storage, r, AT))[scope_key({"route": "/r2"})] is None


# ---------------------------------------------------------------------------- scope, groups
def test_scope_filters_and_group_by_labels(storage):
    add_requests(storage, 100, AT - timedelta(hours=1), AT, cost_basis="unpriced")
    add_requests(
        storage,
        30,
        AT - timedelta(hours=1),
        AT,
        cost_basis="unpriced",
        team="ml",
        app="lab",
        route="/x",
    )
    r = rule("unpriced_usage", 1.0, scope={"team": "cx"}, group_by=("app", "route"))
    [obs] = signal_observations(storage, r, AT)
    assert obs.value == 100.0
    assert obs.labels == {"app": "support", "route": "/chat"}
    assert obs.scope_key == scope_key({"route": "/chat", "app": "support"})
    assert obs.summary.startswith("app support (route /chat): 100 of 100 requests")
    # a scope with no data: one no-data observation without a group-by, none with one
    none = rule("unpriced_usage", 1.0, scope={"team": "nobody"})
    assert [(o.scope_key, o.value) for o in signal_observations(storage, none, AT)] == [
        ("{}", None)
    ]
    grouped = rule("unpriced_usage", 1.0, scope={"team": "nobody"}, group_by=("route",))
    assert signal_observations(storage, grouped, AT) == []


def test_one_query_per_kind_and_window_is_shared_through_the_cache(storage):
    add_requests(storage, 100, AT - timedelta(hours=1), AT)
    cache: dict = {}
    for group_by in ((), ("route",), ("team", "model")):
        signal_observations(storage, rule("failure_rate", 5.0, group_by=group_by), AT, cache=cache)
        signal_observations(storage, rule("prefix_cache_regression", 5.0), AT, cache=cache)
    assert len(cache) == 1  # both kinds read the same aggregate of the same window
    signal_observations(storage, rule("failure_rate", 5.0, window_s=900), AT, cache=cache)
    assert len(cache) == 2


@pytest.mark.parametrize(
    ("kind", "kw", "message"),
    [
        ("budget_threshold", {}, "not one of the data-driven kinds"),
        ("failure_rate", {"params": {"weeks": 2}}, "has no parameter weeks"),
        ("failure_rate", {"params": {"min_requests": 0}}, "min_requests must be"),
        ("kv_pressure", {"group_by": ("route",)}, "cannot use route in its group_by"),
        ("false_economy", {"scope": {"model": "m"}}, "cannot use model in its scope"),
    ],
)
def test_bad_rules_are_refused_with_what_is_wrong(storage, kind, kw, message):
    with pytest.raises(ConfigError, match=message):
        signal_observations(storage, rule(kind, 1.0, **kw), AT)


def test_every_signal_kind_answers_on_an_empty_ledger(storage):
    for kind in SIGNAL_KINDS:
        [obs] = signal_observations(storage, rule(kind, 1.0), AT)
        assert obs.value in (None, 0.0), kind
        assert obs.threshold == 1.0 and obs.summary
