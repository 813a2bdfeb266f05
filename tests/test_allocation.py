"""Cost allocation against hand-computed numbers (docs/cost-model.md, "Worked example"), and
conservation (allocated + idle = total, for every policy and slice) on random fleets.

Spans and scrapes go through the real ingest path (inferledger/ledger_fixtures.py); the marts
are computed by the real refresher."""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferledger.ledger_fixtures import S, SpanSet, store_scrapes, worked_example
from ledger.allocation import HOUR_NS
from ledger.deployments import set_idle_policy, sync_configured
from ledger.marts import Refresher, refresh, windows
from ledger.price_book import set_price
from models.deployment_config import Deployment
from models.idle_policy import IdlePolicy

HOUR0 = 494_444 * HOUR_NS  # 2026-05-28 20:00 UTC, an hour boundary
RATE = 0.001  # $3.60 per GPU-hour, in $ per second


def price(storage, kind, subject, unit, value, when="2026-01-01", deployment="", stage=None):
    set_price(
        storage, kind, subject, unit, value, when, deployment, changed_by="test",
        source="cli", stage=stage,
    )  # fmt: skip


def fleet(storage, *deployments: Deployment) -> None:
    sync_configured(storage, list(deployments))


def request_costs(storage) -> dict[str, tuple]:
    rows = storage.fetchall(
        "select app, prefill_cost, decode_cost, prefill_gpu_s, decode_gpu_s, idle_usage_cost,"
        " idle_even_cost, idle_configured_cost, hosting from request_costs order by app"
    )
    return {r[0]: r[1:] for r in rows}


def spend(storage, policy: str, by: str = "stage") -> dict:
    rows = storage.fetchall(
        f"select {by}, sum(cost) from spend_hourly where idle_policy = $p group by all",
        {"p": policy},
    )
    return {k: v for k, v in rows}


def two_overlapping(storage) -> None:
    """The worked example (inferledger.ledger_fixtures.worked_example), 100 s into an hour."""
    worked_example(storage, HOUR0 + 100 * S)


def test_worked_example_two_overlapping_requests(storage):
    two_overlapping(storage)
    refresh(storage)
    got = request_costs(storage)
    # [10,12) A prefills alone; [12,20) A decodes alone; [20,21) A decodes (weight 18/18 = 1)
    # beside B's prefill (100/1 = 100); [21,30) both decode (weight 1 each); [30,40) B alone.
    a_prefill, a_decode = 2 * RATE, 8 * RATE + RATE * 1 / 101 + 4.5 * RATE
    b_prefill, b_decode = RATE * 100 / 101, 4.5 * RATE + 10 * RATE
    assert got["a1"][:4] == pytest.approx((a_prefill, a_decode, 2.0, a_decode / RATE))
    assert got["a2"][:4] == pytest.approx((b_prefill, b_decode, b_prefill / RATE, b_decode / RATE))
    a, b = a_prefill + a_decode, b_prefill + b_decode
    assert a + b == pytest.approx(30 * RATE)
    idle = 70 * RATE
    # idle shares: by usage cost, and evenly per request; separate keeps it on its own line
    assert got["a1"][4:6] == pytest.approx((idle * a / (a + b), idle / 2))
    assert got["a2"][4:6] == pytest.approx((idle * b / (a + b), idle / 2))
    assert got["a1"][6] == 0 and got["a1"][7] == "self_hosted"

    (row,) = storage.fetchall(
        "select up_s, busy_s, total_cost, usage_cost, idle_cost, priced from mart_replica_hours"
    )
    assert row == pytest.approx((100.0, 30.0, 100 * RATE, 30 * RATE, idle, True))

    separate = spend(storage, "separate", "coalesce(app, '(idle)')")
    assert separate == pytest.approx({"a1": a, "a2": b, "(idle)": idle})
    usage = spend(storage, "usage", "coalesce(app, '(idle)')")
    assert usage["a1"] == pytest.approx(a + idle * a / (a + b))
    assert usage.get("(idle)", 0) == pytest.approx(0)
    by_stage = spend(storage, "even")
    assert by_stage == pytest.approx(
        {"prefill": a_prefill + b_prefill, "decode": a_decode + b_decode, "idle": idle}
    )
    (total,) = storage.fetchall("select sum(total) from spend_totals")[0]
    assert total == pytest.approx(100 * RATE)


def test_configured_idle_policy_follows_the_deployment(storage):
    two_overlapping(storage)
    refresh(storage)
    assert spend(storage, "configured") == spend(storage, "separate")
    set_idle_policy(storage, "dep", IdlePolicy.EVEN)
    result = refresh(storage)
    assert result.hours == 1 and "deployments" in " ".join(result.reasons)
    assert spend(storage, "configured", "coalesce(app, '-')") == pytest.approx(
        spend(storage, "even", "coalesce(app, '-')")
    )


def test_a_price_change_reprices_from_its_effective_time_only(storage):
    """A request decoding across an hour boundary, [H-20 s, H+20 s), on a replica up
    [H-60 s, H+60 s); then the deployment's GPU price doubles at H+10 s."""
    price(storage, "gpu", "H200", "gpu_hour", 3.60)
    fleet(storage, Deployment("dep", model="m", gpu_type="H200"))
    base = HOUR0 + HOUR_NS  # H
    store_scrapes(storage, "r0", "dep", base, [float(t) for t in range(-60, 60, 10)])
    spans = SpanSet(base)
    trace = spans.new_trace()
    spans.engine(
        trace, None, -20, 20, replica="r0", queue_s=0.0, ttft_s=0.0, prompt_tokens=10,
        completion_tokens=41,
    )  # fmt: skip
    spans.store(storage)
    refresher = Refresher(storage)
    first = refresher.refresh()
    assert first.hours == 2
    hourly = dict(storage.fetchall("select epoch_ns(hour), total_cost from mart_replica_hours"))
    assert hourly == pytest.approx({HOUR0: 60 * RATE, HOUR0 + HOUR_NS: 60 * RATE})
    (cost,) = storage.fetchall("select decode_cost from request_costs")[0]
    assert cost == pytest.approx(40 * RATE)

    when = datetime.fromtimestamp((base + 10 * S) / S, UTC)
    price(storage, "gpu", "H200", "gpu_hour", 7.20, when=when, deployment="dep")
    second = refresher.refresh()
    assert second.hours == 1, second  # only the hour from the change on
    hourly = dict(storage.fetchall("select epoch_ns(hour), total_cost from mart_replica_hours"))
    assert hourly == pytest.approx({HOUR0: 60 * RATE, HOUR0 + HOUR_NS: 10 * RATE + 50 * 2 * RATE})
    pieces = dict(storage.fetchall("select epoch_ns(hour), cost from mart_request_pieces"))
    assert pieces == pytest.approx({HOUR0: 20 * RATE, HOUR0 + HOUR_NS: 10 * RATE + 10 * 2 * RATE})
    (cost,) = storage.fetchall("select decode_cost from request_costs")[0]
    assert cost == pytest.approx(50 * RATE)


def test_a_failed_scrape_ends_up_time_and_a_gap_is_capped(storage):
    price(storage, "gpu", "H200", "gpu_hour", 3.60)
    fleet(storage, Deployment("dep", gpu_type="H200", gpus_per_replica=2))
    # up at 0 and 10; down at 20; up again 30..40; then silence: the last scrape covers one
    # median interval (10 s). With gap cap 300 s a 1,000 s hole would count only 300 s.
    store_scrapes(storage, "r0", "dep", HOUR0, [0, 10, 30, 40, 1040], down_at_s=[20])
    refresh(storage)
    ((up_s, cost),) = storage.fetchall("select sum(up_s), sum(total_cost) from mart_replica_hours")
    assert up_s == pytest.approx(20 + 10 + 300 + 10)
    assert cost == pytest.approx(2 * RATE * up_s)


def test_hosted_and_unpriced_calls_are_priced_by_tokens(storage):
    price(storage, "model", "hosted-m", "input_mtok", 0.40)
    price(storage, "model", "hosted-m", "cached_input_mtok", 0.10)
    price(storage, "model", "hosted-m", "output_mtok", 1.60)
    spans = SpanSet(HOUR0)
    for app, model in (("a1", "hosted-m"), ("a2", "mystery-m")):
        trace = spans.new_trace()
        root = spans.root(trace, 0, 5, app=app, route="/r")
        spans.llm_call(
            trace, root, 1, 4, model=model, provider="openai", input_tokens=10_000,
            cached_tokens=2_000, output_tokens=1_000,
        )  # fmt: skip
    spans.store(storage)
    refresh(storage)
    got = request_costs(storage)
    assert got["a1"][:2] == pytest.approx(((8000 * 0.40 + 2000 * 0.10) / 1e6, 1000 * 1.60 / 1e6))
    assert got["a1"][7] == "hosted"
    assert got["a2"][:2] == (0, 0) and got["a2"][7] == "unpriced"
    (row,) = storage.fetchall("select reason, model, requests from unpriced_requests")
    assert row == ("no token price for the model", "mystery-m", 1)
    assert spend(storage, "separate") == pytest.approx(
        {"prefill": (8000 * 0.40 + 2000 * 0.10) / 1e6, "decode": 1000 * 1.60 / 1e6}
    )


def test_services_per_call_and_per_hour(storage):
    price(storage, "service", "kb", "hour", 3.60, stage="retrieval")
    price(storage, "service", "lookup", "call", 0.01, stage="tools")
    spans = SpanSet(HOUR0)
    trace = spans.new_trace()
    root = spans.root(trace, 0, 10, app="a1", route="/r", task_id="t1")
    spans.service_call(trace, root, 1, 2, stage="retrieval", key="kb")
    spans.service_call(trace, root, 3, 6, stage="retrieval", key="kb")
    spans.service_call(trace, root, 7, 8, stage="tools", key="lookup")
    # the next hour has data (a scrape) but no call of kb: its hour is unattributed
    store_scrapes(storage, "r0", "dep", HOUR0 + HOUR_NS, [0])
    spans.store(storage)
    refresh(storage)
    calls = storage.fetchall("select service, duration_s, cost from mart_service_calls order by 2")
    assert calls == [
        ("kb", pytest.approx(1.0), pytest.approx(0.9)),
        ("lookup", pytest.approx(1.0), pytest.approx(0.01)),
        ("kb", pytest.approx(3.0), pytest.approx(2.7)),
    ]
    rows = storage.fetchall(
        "select epoch_ns(hour), app, stage, cost from spend_hourly"
        " where idle_policy = 'separate' order by 1, 3"
    )
    assert rows == [
        (HOUR0, "a1", "retrieval", pytest.approx(3.6)),
        (HOUR0, "a1", "tools", pytest.approx(0.01)),
        (HOUR0 + HOUR_NS, None, "retrieval", pytest.approx(3.6)),
    ]


def test_review_from_spans_then_a_posted_outcome(storage):
    from ingest.outcome_parse import parse_outcomes_json
    from ingest.outcome_writer import store_outcomes

    price(storage, "reviewer", "*", "hour", 40.0)
    price(storage, "reviewer", "ann", "hour", 60.0)
    spans = SpanSet(HOUR0)
    trace = spans.new_trace()
    spans.root(trace, 0, 10, app="a1", route="/r", task_id="t1", outcome="accepted", review_s=90)
    spans.store(storage)
    refresher = Refresher(storage)
    refresher.refresh()
    assert storage.fetchall("select source, review_s, cost from mart_reviews") == [
        ("span", 90.0, pytest.approx(1.0))
    ]
    store_outcomes(
        storage,
        parse_outcomes_json(
            b'{"task_id": "t1", "outcome": "corrected", "review_seconds": 180, "reviewer": "ann"}'
        ),
    )
    result = refresher.refresh()
    assert result.hours == 1 and "outcomes" in " ".join(result.reasons)
    assert storage.fetchall("select source, review_s, cost from mart_reviews") == [
        ("outcome", 180.0, pytest.approx(3.0))
    ]
    assert spend(storage, "separate") == pytest.approx({"review": 3.0})


def test_incremental_refresh_touches_only_new_hours(storage):
    two_overlapping(storage)
    refresher = Refresher(storage)
    assert refresher.refresh().hours == 1
    assert refresher.refresh().hours == 0  # nothing new
    spans = SpanSet(HOUR0 + 5 * HOUR_NS)
    trace = spans.new_trace()
    spans.root(trace, 0, 1, app="a3", route="/r")
    spans.store(storage)
    again = refresher.refresh()
    assert again.hours == 1 and again.windows == 1
    assert storage.scalar("select count(*) from mart_refresh_log") == 3


def test_a_long_rebuild_goes_a_day_at_a_time(storage):
    """More dirty hours than backfill_window_hours: longer windows (fewer fixed costs); a
    short run keeps max_window_hours, so ingest never waits long behind a routine refresh."""
    spans = SpanSet(HOUR0)
    for h in range(30):
        spans.root(spans.new_trace(), h * 3600 + 10, h * 3600 + 20, app="a", route="/r")
    spans.store(storage)
    refresher = Refresher(storage, max_window_hours=6, backfill_window_hours=24)
    first = refresher.refresh()
    assert (first.hours, first.windows) == (30, 2)  # 24 + 6, not 5 x 6
    spans = SpanSet(HOUR0 + 40 * HOUR_NS)
    for h in range(10):
        spans.root(spans.new_trace(), h * 3600 + 10, h * 3600 + 20, app="a", route="/r")
    spans.store(storage)
    again = refresher.refresh()
    assert (again.hours, again.windows) == (10, 2)  # 6 + 4: a routine run keeps 6-h windows


def test_windows_split_runs_of_hours():
    h = HOUR_NS
    assert windows([0, h, 2 * h, 5 * h], 2) == [(0, 2 * h), (2 * h, 3 * h), (5 * h, 6 * h)]
    assert windows([], 6) == []


# ----------------------------------------------------------------- conservation (property)

POLICIES = ("separate", "usage", "even", "configured")
SLICES = ("app", "team", "route", "workflow", "model", "deployment", "stage", "environment")


@st.composite
def fleets(draw):
    n_deps = draw(st.integers(1, 3))
    deps = []
    for d in range(n_deps):
        deps.append(
            {
                "name": f"dep{d}",
                "gpus": draw(st.integers(1, 8)),
                "policy": draw(st.sampled_from(["separate", "usage", "even"])),
                "replicas": draw(st.integers(1, 3)),
                "override": draw(st.none() | st.floats(0.5, 12, allow_nan=False)),
            }
        )
    requests = draw(
        st.lists(
            st.tuples(
                st.integers(0, 5),  # app
                st.integers(0, n_deps),  # deployment (n_deps = hosted)
                st.integers(0, 2),  # replica
                st.floats(0, 7000),  # arrival, s from the base (crosses hours)
                st.floats(0, 3),  # queue
                st.floats(0, 5),  # prefill
                st.floats(0, 60),  # decode
                st.integers(1, 9000),  # prompt
                st.integers(1, 2000),  # completion
            ),
            min_size=1,
            max_size=25,
        )
    )
    down = draw(st.lists(st.integers(0, 120), max_size=5))
    price_change_s = draw(st.none() | st.floats(0, 7200))
    reviews = draw(st.lists(st.floats(1, 600), max_size=3))
    return deps, requests, down, price_change_s, reviews


def _build(storage, deps, requests, down, price_change_s, reviews) -> None:
    price(storage, "gpu", "H200", "gpu_hour", 3.95)
    price(storage, "model", "hosted", "input_mtok", 2.0)
    price(storage, "model", "hosted", "output_mtok", 8.0)
    price(storage, "service", "kb", "hour", 1.3, stage="retrieval")
    price(storage, "reviewer", "*", "hour", 45.0)
    fleet(
        storage,
        *(
            Deployment(
                d["name"],
                model=f"m{i}",
                gpu_type="H200",
                gpus_per_replica=d["gpus"],
                idle_policy=IdlePolicy(d["policy"]),
            )
            for i, d in enumerate(deps)
        ),
    )
    if price_change_s is not None:
        for d in deps:
            if d["override"] is not None:
                when = datetime.fromtimestamp((HOUR0 + price_change_s * S) / S, UTC)
                price(storage, "gpu", "H200", "gpu_hour", d["override"], when, d["name"])
    for d in deps:
        for r in range(d["replicas"]):
            times = [60.0 * i for i in range(0, 7300 // 60)]
            down_at = [60.0 * i + 30 for i in down if (i + r) % 2 == 0]
            store_scrapes(storage, f"{d['name']}-{r}", d["name"], HOUR0, times, down_at_s=down_at)
    spans = SpanSet(HOUR0)
    for i, (app, dep, rep, arrival, queue, prefill, decode, prompt, completion) in enumerate(
        requests
    ):
        trace = spans.new_trace()
        end = arrival + queue + prefill + decode
        root = spans.root(
            trace, arrival - 1, end + 1, app=f"app{app}", team=f"team{app % 3}",
            route=f"/r{app % 2}", workflow=f"w{app}", task_id=f"task{i % 7}",
            review_s=reviews[i % len(reviews)] if reviews and i < len(reviews) else None,
        )  # fmt: skip
        spans.service_call(trace, root, arrival - 0.5, arrival, stage="retrieval", key="kb")
        if dep == len(deps):
            spans.llm_call(
                trace,
                root,
                arrival,
                end,
                model="hosted",
                provider="openai",
                input_tokens=prompt,
                output_tokens=completion,
            )
            continue
        d = deps[dep]
        call = spans.llm_call(
            trace, root, arrival, end, model=f"m{dep}", input_tokens=prompt,
            output_tokens=completion,
        )  # fmt: skip
        spans.engine(
            trace, call, arrival, end, replica=f"{d['name']}-{rep % d['replicas']}",
            queue_s=queue, ttft_s=queue + prefill, prompt_tokens=prompt,
            completion_tokens=completion,
        )  # fmt: skip
    spans.store(storage)


_RESET = (
    "spans",
    "scrapes",
    "metric_samples",
    "price_book",
    "price_book_changes",
    "deployments",
    "replicas",
    "outcomes",
    "mart_requests",
    "mart_request_pieces",
    "mart_replica_hours",
    "mart_service_calls",
    "mart_service_hours",
    "mart_reviews",
    "mart_spend_hourly",
    "mart_refresh_state",
    "mart_refresh_log",
)


@settings(
    max_examples=int(os.environ.get("LEDGER_EXAMPLES", "20")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=fleets())
def test_allocated_plus_idle_is_total_for_every_policy_and_slice(storage, case):
    storage.write(lambda cur: [cur.execute(f"delete from {t}") for t in _RESET])
    _build(storage, *case)
    refresh(storage)
    (total,) = storage.fetchall("select coalesce(sum(total), 0) from spend_totals")[0]
    gpu = storage.scalar("select coalesce(sum(total_cost), 0) from mart_replica_hours")
    usage = storage.scalar("select coalesce(sum(cost), 0) from mart_request_pieces")
    idle = storage.scalar("select coalesce(sum(idle_cost), 0) from mart_replica_hours")
    assert math.isclose(usage + idle, gpu, rel_tol=1e-9, abs_tol=1e-9)
    for policy in POLICIES:
        for by in SLICES:
            rows = storage.fetchall(
                f"select {by}, sum(cost) from spend_hourly where idle_policy = $p group by all",
                {"p": policy},
            )
            allocated = sum(c for k, c in rows if not (by == "stage" and k == "idle"))
            idle_line = sum(c for k, c in rows if by == "stage" and k == "idle")
            # Within half a cent, not "the same when rounded to cents": two sums of the same
            # doubles taken in another order (DuckDB's threads) can straddle a rounding edge.
            assert abs(allocated + idle_line - total) < 0.005, (policy, by)
        # and per hour: every hour's slices add up to that hour's total
        per_hour = storage.fetchall(
            """
            select t.hour, t.total, coalesce(s.cost, 0)
            from spend_totals as t
            left join (
                select hour, sum(cost) as cost from spend_hourly
                where idle_policy = $p group by hour
            ) as s on s.hour = t.hour
            """,
            {"p": policy},
        )
        for hour, want, got in per_hour:
            assert abs(want - got) < 0.005, (policy, hour)
    # requests: usage + idle shares add up per deployment-hour under `usage` and `even`
    shares = storage.fetchall(
        """
        select sum(idle_usage_cost), sum(idle_even_cost), sum(prefill_cost + decode_cost)
        from request_costs where hosting = 'self_hosted'
        """
    )[0]
    assert all(v is None or v >= -1e-12 for v in shares)


def test_refresh_command(tmp_path, capsys):
    from inferledger.cli import main
    from inferledger.core.storage import Storage

    db = tmp_path / "ledger.duckdb"
    with Storage(db) as storage:
        two_overlapping(storage)
    assert main(["refresh", "--db", str(db)]) == 0
    assert "refreshed 1 h in 1 windows (2 requests)" in capsys.readouterr().out
    assert main(["refresh", "--db", str(db)]) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert main(["refresh", "--db", str(tmp_path / "missing.duckdb")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"inferledger: no database at {str(tmp_path / 'missing.duckdb')!r} (give --db PATH)"
    )
    assert not (tmp_path / "missing.duckdb").exists()
