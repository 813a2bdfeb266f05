"""ledger/overview.py and ledger/spend.py: the month-end forecast, the budgets the filters
fall under, the top movers' decomposition and the shapes of the spend chart and treemap, each
against numbers worked by hand; and the overview_* queries on real DuckDB marts (rows written
into the mart tables, so every expected number is a short sum)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import overview as ov
from ledger import spend as sp
from ledger.overview import PeriodSpend, PriceChange, decompose, forecast_month_end
from ledger.price_book import set_price
from ledger.queries import Filters, QueryError, run
from models.alert_config import Budget

H = timedelta(hours=1)


def hours(start: datetime, count: int, cost: float) -> list[tuple[datetime, float]]:
    return [(start + i * H, cost) for i in range(count)]


# ------------------------------------------------------------------------------ forecast
def test_forecast_is_month_to_date_plus_a_weeks_run_rate_times_hours_left() -> None:
    now = datetime(2026, 11, 20, 12, 30, tzinfo=UTC)
    month = datetime(2026, 11, 1, tzinfo=UTC)
    # $2 every complete hour since Nov 1, $1 so far in the current hour (12:00)
    rows = [*hours(month, 19 * 24 + 12, 2.0), (datetime(2026, 11, 20, 12, tzinfo=UTC), 1.0)]
    f = forecast_month_end(rows, now)
    assert f.month_start == month and f.month_end == datetime(2026, 12, 1, tzinfo=UTC)
    assert f.month_to_date == pytest.approx(2 * 468 + 1)  # 468 complete hours + the partial one
    assert f.rate_hours == 168 and f.run_rate_per_hour == pytest.approx(2.0)
    assert f.hours_left == pytest.approx(10 * 24 + 11.5)  # to Dec 1 00:00
    assert f.forecast == pytest.approx(937 + 2 * 251.5)  # 1,440


def test_a_young_ledger_averages_the_hours_since_its_first_hour() -> None:
    now = datetime(2026, 11, 20, 12, 30, tzinfo=UTC)
    nine = datetime(2026, 11, 20, 9, tzinfo=UTC)
    rows = [(nine, 3.0), (nine + H, 6.0), (nine + 2 * H, 9.0), (nine + 3 * H, 5.0)]
    f = forecast_month_end(rows, now)
    assert f.rate_hours == 3 and f.run_rate_per_hour == pytest.approx(6.0)  # (3 + 6 + 9) / 3
    assert f.month_to_date == pytest.approx(23.0)
    assert f.forecast == pytest.approx(23 + 6 * 251.5)


def test_the_run_rate_window_reaches_into_the_previous_month() -> None:
    now = datetime(2026, 12, 2, 0, 30, tzinfo=UTC)
    dec1 = datetime(2026, 12, 1, tzinfo=UTC)
    rows = (
        hours(datetime(2026, 11, 1, tzinfo=UTC), 30 * 24, 1.0)  # all of November at $1
        + hours(dec1, 24, 4.0)  # Dec 1 at $4
        + [(datetime(2026, 12, 2, tzinfo=UTC), 2.0)]  # the current hour so far
        + [(datetime(2026, 12, 2, 5, tzinfo=UTC), 99.0)]  # after now: ignored
    )
    f = forecast_month_end(rows, now)
    assert f.month_to_date == pytest.approx(24 * 4 + 2)
    assert f.run_rate_per_hour == pytest.approx((24 * 4 + 144 * 1) / 168)
    assert f.hours_left == pytest.approx(29 * 24 + 23.5)
    assert f.forecast == pytest.approx(98 + 240 / 168 * 719.5)


def test_no_complete_hour_means_no_forecast() -> None:
    now = datetime(2026, 11, 20, 12, 30, tzinfo=UTC)
    f = forecast_month_end([(datetime(2026, 11, 20, 12, tzinfo=UTC), 4.0)], now)
    assert f.month_to_date == 4.0 and f.forecast is None and f.run_rate_per_hour is None
    assert forecast_month_end([], now).forecast is None


def test_the_budgets_a_selection_falls_under() -> None:
    """A budget applies when the filters' selection holds its whole scope (issue #12)."""
    org = Budget(name="org", amount=1, period="monthly", owner="o")
    search = Budget(name="search", amount=1, period="monthly", owner="o", scope={"team": "search"})
    chat = Budget(
        name="chat", amount=1, period="monthly", owner="o", scope={"team": "search", "app": "chat"}
    )
    prod = Budget(name="prod", amount=1, period="monthly", owner="o", scope={"environment": "prod"})
    every = [org, search, chat, prod]

    def names(**filters: str) -> list[str]:
        return [b.name for b in ov.budgets_for(Filters.last(7, **filters), every)]

    assert names() == ["org"]
    assert names(team="search") == ["org", "search"]
    assert names(team="search", app="chat") == ["org", "search", "chat"]
    assert names(team="ads", app="chat") == ["org"]
    assert names(environment="prod", team="search", route="/q") == ["org", "search", "prod"]
    assert ov.filter_scope(Filters.last(7, team="search", model="m")) == {
        "team": "search",
        "model": "m",
    }


# ------------------------------------------------------------------------------ movers
def amounts(mover: ov.Mover) -> dict[str, float]:
    return {e.name: e.amount for e in mover.effects}


def test_traffic_alone() -> None:
    m = decompose("/a", PeriodSpend(1.0, 100, 100_000), PeriodSpend(2.0, 200, 200_000))
    assert amounts(m) == pytest.approx(
        {"traffic": 1.0, "context": 0.0, "retries": 0.0, "per_token": 0.0}
    )
    assert m.traffic == pytest.approx(1.0) and m.unit_cost == pytest.approx(0.0)
    assert m.reason == "traffic +100% (100 → 200 requests) +$1.00"


def test_traffic_and_longer_prompts_share_the_change_by_their_logs() -> None:
    # requests double, prompts grow from 1,000 to 1,500 tokens, $1 per 1M tokens throughout:
    # S 0.1 -> 0.3, L = 0.2 / ln 3; traffic = L ln 2, context = L ln 1.5
    m = decompose("/a", PeriodSpend(0.1, 100, 100_000), PeriodSpend(0.3, 200, 300_000))
    got = amounts(m)
    assert got["traffic"] == pytest.approx(0.2 * math.log(2) / math.log(3))  # 0.126186
    assert got["traffic"] == pytest.approx(0.126186, abs=1e-6)
    assert got["context"] == pytest.approx(0.073814, abs=1e-6)
    assert got["per_token"] == pytest.approx(0.0, abs=1e-12)
    assert m.reason.startswith("traffic +100% (100 → 200 requests) +$0.1262; longer prompts +50%")


def test_traffic_and_unit_cost_doubling_split_evenly() -> None:
    # 100 -> 200 requests, $1 -> $2 per request (same prompts): S 100 -> 400,
    # L = 300 / ln 4, each factor ln 2: $150 each
    m = decompose("/a", PeriodSpend(100.0, 100, 10_000), PeriodSpend(400.0, 200, 20_000))
    assert m.traffic == pytest.approx(150.0) and m.unit_cost == pytest.approx(150.0)
    assert m.effect("per_token") == pytest.approx(150.0)


def test_retries_explain_spend_on_attempts_after_the_first() -> None:
    # same traffic and prompts; $25 of retries appear: first-attempt spend is unchanged
    m = decompose("/a", PeriodSpend(100.0, 10, 1000, 0.0), PeriodSpend(125.0, 10, 1000, 25.0))
    assert amounts(m) == pytest.approx(
        {"traffic": 0.0, "context": 0.0, "retries": 25.0, "per_token": 0.0}, abs=1e-9
    )
    assert m.reason == "retries 0.0% → 20.0% of spend +$25.00"


def test_a_price_change_is_named_with_the_per_token_effect() -> None:
    change = PriceChange(
        "model", "gpt-4.1", "input_mtok", 2.0, 2.4, datetime(2026, 11, 30, 1, tzinfo=UTC)
    )
    m = decompose(
        "gpt-4.1", PeriodSpend(10.0, 50, 5_000_000), PeriodSpend(12.0, 50, 5_000_000), [change]
    )
    assert m.effect("per_token") == pytest.approx(2.0)
    assert m.reason == (
        "price change (gpt-4.1 input /1M $2.00 → $2.40 from 11-30 01:00); "
        "cost per 1M input tokens +20% ($2.00 → $2.40) +$2.00"
    )


def test_cheaper_requests_give_a_negative_unit_cost_effect() -> None:
    # same traffic, cost per token halves: the whole −$5 is unit cost
    m = decompose("/a", PeriodSpend(10.0, 100, 1000), PeriodSpend(5.0, 100, 1000))
    assert m.unit_cost == pytest.approx(-5.0) and m.traffic == pytest.approx(0.0)
    assert m.reason.endswith("−$5.00")


def test_without_tokens_the_residual_is_cost_per_request() -> None:
    m = decompose("/a", PeriodSpend(10.0, 10), PeriodSpend(30.0, 20))
    got = amounts(m)
    assert set(got) == {"traffic", "retries", "per_request"}
    # L = 20 / ln 3; traffic L ln 2, per request (1 -> 1.5) L ln 1.5
    assert got["traffic"] == pytest.approx(20 * math.log(2) / math.log(3))
    assert got["per_request"] == pytest.approx(20 * math.log(1.5) / math.log(3))


def test_new_gone_idle_and_still() -> None:
    new = decompose("/n", PeriodSpend(0.0), PeriodSpend(3.0, 7, 70))
    assert new.traffic == pytest.approx(3.0) and new.reason == "new: no requests before, 7 now"
    gone = decompose("/g", PeriodSpend(3.0, 7, 70), PeriodSpend(0.0))
    assert gone.traffic == pytest.approx(-3.0)
    assert gone.reason == "gone: 7 requests before, none now"
    idle = decompose("(idle)", PeriodSpend(4.0), PeriodSpend(1.0))
    assert idle.effect("other") == pytest.approx(-3.0) and idle.traffic == 0
    assert idle.reason.startswith("unshared idle capacity") and "($4.00 → $1.00)" in idle.reason
    assert decompose("/s", PeriodSpend(0.0), PeriodSpend(0.0)).effects == ()


money = st.floats(min_value=0.001, max_value=1e5)
count = st.integers(min_value=1, max_value=10**6)


@given(money, money, count, count, count, count, st.floats(0, 1), st.floats(0, 1))
def test_effects_always_add_up_to_the_change(s0, s1, r0, r1, t0, t1, q0, q1) -> None:
    m = decompose("/k", PeriodSpend(s0, r0, t0, q0 * s0), PeriodSpend(s1, r1, t1, q1 * s1))
    assert sum(e.amount for e in m.effects) == pytest.approx(s1 - s0, rel=1e-9, abs=1e-9)
    assert m.traffic + m.unit_cost == pytest.approx(s1 - s0, rel=1e-9, abs=1e-9)


def test_log_mean() -> None:
    assert ov.log_mean(4.0, 1.0) == pytest.approx(3 / math.log(4))
    assert ov.log_mean(2.0, 2.0) == 2.0
    with pytest.raises(ValueError):
        ov.log_mean(0.0, 1.0)


# ------------------------------------------------------------------------------ small helpers
def test_buckets_and_drill_down_helpers() -> None:
    end = datetime(2026, 11, 30, 3, tzinfo=UTC)
    assert ov.bucket_for(Filters(end - timedelta(days=7), end)) == "hour"
    assert ov.bucket_for(Filters(end - timedelta(days=30), end)) == "day"
    days = ov.bucket_starts(end - timedelta(days=2), end, "day")
    assert days == [datetime(2026, 11, d, tzinfo=UTC) for d in (28, 29, 30)]
    assert len(ov.bucket_starts(end - timedelta(days=1), end, "hour")) == 24

    sep = sp.NODE_SEP
    assert sp.drill_target("finance-ops") == {"team": "finance-ops"}
    assert sp.drill_target(f"t{sep}a{sep}/r") == {"team": "t", "app": "a", "route": "/r"}
    assert sp.drill_target("(idle)") is None
    assert sp.drill_target(f"t{sep}(no app)") is None
    assert sp.drill_target(None) is None
    assert sp.drill_up({"team": "t", "app": "a", "route": None}) == {
        "team": "t",
        "app": None,
        "route": None,
    }
    assert sp.drill_up({"team": None}) == {"team": None, "app": None, "route": None}


def test_tree_nodes_sum_their_children() -> None:
    import pyarrow as pa

    leaves = pa.table(
        {
            "team": ["t1", "t1", "t2"],
            "app": ["a", "a", "b"],
            "route": ["/x", "/y", "/z"],
            "cost": [1.0, 2.0, 4.0],
            "requests": [1, 2, 3],
        }
    )
    nodes = {r["id"]: r for r in sp.tree_nodes(leaves).to_pylist()}
    sep = sp.NODE_SEP
    assert nodes["t1"]["cost"] == 3.0 and nodes["t1"]["parent"] == ""
    assert nodes[f"t1{sep}a"]["requests"] == 3 and nodes[f"t1{sep}a"]["parent"] == "t1"
    assert nodes[f"t2{sep}b{sep}/z"]["level"] == "route"
    assert len(nodes) == 7


# ------------------------------------------------------------------------------ queries
T0 = datetime(2026, 11, 30, 0, tzinfo=UTC)  # previous period [T0, T0+1h); current [T0+1h, T0+2h)


def spend_row(
    hour, app, route, stage, requests, tokens, cost, *, model="m", deployment=None, failed=0
):
    # hour, environment, app, team, route, workflow, model, deployment, stage, requests,
    # input_tokens, output_tokens, cost_separate, cost_usage, cost_even, cost_configured,
    # failed_requests
    return (hour, "prod", app, "team-" + app if app else None, route, None, model, deployment,
            stage, requests, tokens, 0, cost, cost, cost, cost, failed)  # fmt: skip


def request_row(n, hour, route, attempt, cost, failed=False):
    start_ns = int(hour.timestamp() * 1e9) + n
    return {
        "trace_id": f"t{n}", "span_id": f"s{n}", "start_ns": start_ns, "end_ns": start_ns + 1,
        "start_time": hour, "hour": hour, "environment": "prod", "app": "a", "team": "team-a",
        "route": route, "task_key": f"k{n}", "attempt": attempt, "fallback": False, "model": "m",
        "hosting": "hosted", "failed": failed, "prefill_gpu_s": 0.0, "decode_gpu_s": 0.0,
        "prefill_cost": cost, "decode_cost": 0.0, "idle_usage_cost": 0.0,
        "idle_even_cost": 0.0, "idle_configured_cost": 0.0,
    }  # fmt: skip


@pytest.fixture
def marts(storage):
    later = T0 + H
    spend = [
        spend_row(T0, "a", "/x", "decode", 10, 10_000, 1.0),
        spend_row(later, "a", "/x", "decode", 20, 20_000, 2.5, failed=1),  # traffic x2, retries
        spend_row(T0, "a", "/y", "decode", 5, 500, 1.0),
        spend_row(later, "a", "/y", "decode", 5, 500, 0.5),  # unit cost halves
        spend_row(later, "a", "/new", "prefill", 3, 30, 0.25),
        spend_row(T0, None, None, "idle", 0, 0, 2.0, model=None, deployment="dep"),
        spend_row(later, None, None, "idle", 0, 0, 1.0, model=None, deployment="dep"),
    ]
    reqs = [request_row(1, later, "/x", 2, 0.5), request_row(2, later, "/x", 1, 2.0, True)]
    reqs += [request_row(3, T0, "/x", 1, 1.0), request_row(4, later, "/y", None, 0.5)]

    def op(cur):
        cur.executemany(
            "insert into mart_spend_hourly (hour, environment, app, team, route, workflow, model,"
            " deployment, stage, requests, input_tokens, output_tokens, cost_separate,"
            f" cost_usage, cost_even, cost_configured, failed_requests)"
            f" values ({', '.join('?' * 17)})",
            spend,
        )
        cols = list(reqs[0])
        cur.executemany(
            f"insert into mart_requests ({', '.join(cols)}) values ({', '.join('?' * len(cols))})",
            [[r[c] for c in cols] for r in reqs],
        )

    storage.write(op)
    return storage


def current() -> Filters:
    return Filters(T0 + H, T0 + 2 * H)


def test_movers_query_and_decomposition(marts) -> None:
    rows = {r["key"]: r for r in run(marts, "overview_movers", current(), dim="route", limit=10)
            .to_pylist()}  # fmt: skip
    assert rows["/x"]["cost"] == 2.5 and rows["/x"]["cost_before"] == 1.0
    assert rows["/x"]["requests"] == 20 and rows["/x"]["retry_cost"] == 0.5
    assert rows["(idle)"]["delta"] == -1.0
    found = {m.key: m for m in ov.movers(marts, current(), "route")}
    assert next(iter(found)) == "/x"  # the largest change first
    x = found["/x"]
    # S 1 -> 2.5, R 10 -> 20, T/R 1000 -> 1000, retry share 0 -> 0.2, S'/T 1e-4 -> 1e-4
    weight = 1.5 / math.log(2.5)
    assert x.traffic == pytest.approx(weight * math.log(2))
    assert x.effect("retries") == pytest.approx(weight * math.log(1.25))
    assert x.effect("context") == pytest.approx(0.0, abs=1e-12)
    assert found["/y"].unit_cost == pytest.approx(-0.5)
    assert found["/new"].reason == "new: no requests before, 3 now"
    table = ov.movers_table(list(found.values()))
    assert table.column("change").to_pylist()[0] == pytest.approx(1.5)


def test_movers_name_a_price_change_of_their_model(marts) -> None:
    set_price(marts, "model", "m", "input_mtok", 1.0, "2026-01-01", changed_by="t", source="cli")
    set_price(marts, "model", "m", "input_mtok", 3.0, T0 + H + 600 * timedelta(seconds=1),
              changed_by="t", source="cli")  # fmt: skip
    set_price(marts, "model", "other", "input_mtok", 3.0, T0 + H, changed_by="t", source="cli")
    changes = run(marts, "overview_price_changes", current(), dim="route").to_pylist()
    assert {c["key"] for c in changes} == {"/x", "/y", "/new"}  # the routes that used model m
    assert {(c["old_price"], c["new_price"]) for c in changes} == {(1.0, 3.0)}
    y = next(m for m in ov.movers(marts, current(), "route") if m.key == "/y")
    assert "price change (m input /1M $1.00 → $3.00 from 11-30 01:10)" in y.reason


def test_failures_and_hourly_spend(marts) -> None:
    f = run(marts, "overview_failures", current()).to_pylist()[0]
    # the LLM-call level (attempts and tasks, added for issue #10, are H4's tests)
    calls = {k: f[k] for k in ("requests", "failed", "failure_rate")}
    assert calls == {"requests": 28, "failed": 1, "failure_rate": pytest.approx(1 / 28)}
    both = Filters(T0, T0 + 2 * H)
    hourly = run(marts, "overview_hourly_spend", both).to_pylist()
    assert [r["cost"] for r in hourly] == pytest.approx([4.0, 4.25])


def test_trend_has_every_bucket(marts) -> None:
    f = Filters(T0 - 2 * H, T0 + 2 * H)
    table = ov.trend(marts, f)
    assert table.column("spend").to_pylist() == pytest.approx([0.0, 0.0, 4.0, 4.25])
    assert table.column("requests").to_pylist() == [0, 0, 15, 28]


def test_spend_over_time_keeps_the_top_keys_and_sums_the_rest(marts) -> None:
    f = Filters(T0, T0 + 2 * H)
    table = sp.spend_over_time(marts, f, "route", top=2)
    keys = list(dict.fromkeys(table.column("key").to_pylist()))
    assert keys == ["/x", "(idle)", sp.OTHER]  # /x 3.5, (idle) 3.0; /y and /new summed
    rows = {(r["bucket"], r["key"]): r["cost"] for r in table.to_pylist()}
    assert rows[(T0 + H, sp.OTHER)] == pytest.approx(0.75)
    assert rows[(T0, sp.OTHER)] == pytest.approx(1.0)
    assert sum(rows.values()) == pytest.approx(8.25)
    with pytest.raises(QueryError):
        sp.spend_over_time(marts, f, "deployment; drop table x")
