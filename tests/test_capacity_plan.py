"""A whole capacity plan (models/capacity/plan.py, issue #13): the recommendation is the
cheapest verified candidate, it meets every SLO at the peak and one replica fewer does not, the
apps' costs add up to the pool's, moved and unplanned traffic is accounted for, and bad plans
are refused with one line. Real simulator runs, kept small."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from inferledger.core.errors import BadInputError
from models.capacity import plan, search
from models.capacity.plan import plan_from_mapping, plan_to_mapping, run_plan
from models.capacity.pools import make_pools, pool_peak_rate

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)


def _data(**over: object) -> dict:
    data = {
        "name": "test plan",
        "profile": {
            "apps": [
                {
                    "app": "chat",
                    "model": "llama-3.1-8b",
                    "requests_per_hour": 250000,
                    "prompt_tokens": 600,
                    "output_tokens": 120,
                    "prefix_len": 300,
                    "prefix_hit_rate": 0.4,
                    "acceptance_rate": 0.8,
                    "requests_per_task": 1.25,
                },
                {
                    "app": "notes",
                    "model": "llama-3.1-8b",
                    "requests_per_hour": 6000,
                    "prompt_tokens": 1500,
                    "output_tokens": 200,
                },
                {
                    "app": "vendor",
                    "model": "gpt-4o-mini",
                    "requests_per_hour": 100,
                    "prompt_tokens": 500,
                    "output_tokens": 100,
                },
            ]
        },
        "slos": {"interactive": {"ttft_p95_ms": 400, "itl_p95_ms": 40}},
        "candidates": {
            "gpus": ["H100"],
            "tensor_parallel_sizes": [1],
            "dtypes": ["auto"],
            "kv_cache_dtypes": ["auto"],
            "prices": {"H100": 3.0},
        },
        "verify_top": 1,
    }
    data.update(over)
    return data


@pytest.fixture(scope="module")
def result() -> dict:
    return run_plan(plan_from_mapping(_data()), now=NOW)


def test_the_recommendation_meets_the_slo_and_one_replica_fewer_does_not(result) -> None:
    (pool,) = result["pools"]
    best = pool["candidates"][pool["best"]]
    assert best["verified"] and best["at_peak"]["meets_slo"]
    assert best["replicas"] >= 2
    assert best["at_peak"]["rate"] == pytest.approx(pool["peak_rate"])
    assert pool["peak_rate"] == pytest.approx((250000 + 6000) / 3600)
    inputs = plan_from_mapping(_data())
    (p,), _ = make_pools(inputs.profile, inputs.slos)
    fewer = search.simulate_point(
        p, plan.row_candidate(best), pool_peak_rate(p), replicas=best["replicas"] - 1
    )
    assert not fewer.meets_slo
    # the band holds the answer; cost is replicas x GPUs x price x hours
    assert best["replicas_low"] <= best["replicas"] <= best["replicas_high"]
    assert best["monthly_cost"] == pytest.approx(best["replicas"] * 1 * 3.0 * 730)
    assert best["knee_rate"] * best["replicas"] >= pool["peak_rate"] * 0.9


def test_apps_costs_add_up_and_unplanned_traffic_is_listed(result) -> None:
    (pool,) = result["pools"]
    best = pool["candidates"][pool["best"]]
    rows = {r["app"]: r for r in pool["apps_cost"]}
    assert set(rows) == {"chat", "notes"}
    assert sum(r["monthly_cost"] for r in rows.values()) == pytest.approx(best["monthly_cost"])
    chat = rows["chat"]
    assert chat["requests_per_month"] == pytest.approx(250000 * 730)
    parts = (
        chat["usd_per_1m_input"] * chat["input_tokens_per_month"] / 1e6
        + chat["usd_per_1m_output"] * chat["output_tokens_per_month"] / 1e6
    )
    assert parts == pytest.approx(chat["monthly_cost"])
    assert chat["usd_per_request"] == pytest.approx(chat["monthly_cost"] / (250000 * 730))
    accepted = 250000 * 730 / 1.25 * 0.8
    assert chat["usd_per_accepted_outcome"] == pytest.approx(chat["monthly_cost"] / accepted)
    assert rows["notes"]["usd_per_accepted_outcome"] is None  # its acceptance is unknown
    # a longer prompt costs more per request
    assert rows["notes"]["usd_per_request"] > chat["usd_per_request"]
    assert result["unplanned"] == [
        {"app": "vendor", "reason": "model 'gpt-4o-mini' is not in the model catalog"}
    ]
    assert result["totals"]["monthly_cost"] == pytest.approx(best["monthly_cost"])


def test_the_result_is_plain_data_with_versions_and_a_schedule(result) -> None:
    text = json.dumps(result, allow_nan=False)
    assert json.loads(text)["planner_version"] == plan.PLANNER_VERSION
    assert len(result["model_version"]) == 12
    assert result["model_error"]["throughput"] > 0
    (pool,) = result["pools"]
    sched = pool["schedule"]
    assert sched["hours"] == 13 * 168
    assert sched["autoscaler"]["monthly_cost"]["p50"] <= sched["static"]["monthly_cost"] + 1e-6
    assert set(result["forecast"]) == {"chat", "notes", "vendor"}  # every app, planned or not
    assert plan_from_mapping(result["inputs"]) == plan_from_mapping(_data())


def test_a_share_moved_to_a_hosted_api_is_priced_per_token() -> None:
    data = _data(
        knobs={"moves": [{"app": "notes", "share": 0.5, "hosted": "gpt-4o-mini"}]},
        hosted_prices={"gpt-4o-mini": [0.15, 0.60]},
    )
    out = run_plan(plan_from_mapping(data), now=NOW)
    (moved,) = out["hosted"]
    month = 3000 * 730
    assert moved["requests_per_month"] == pytest.approx(month)
    expected = month * 1500 / 1e6 * 0.15 + month * 200 / 1e6 * 0.60
    assert moved["monthly_cost"] == pytest.approx(expected)
    (pool,) = out["pools"]
    assert pool["peak_rate"] == pytest.approx((250000 + 3000) / 3600)


def test_cancel_stops_the_plan() -> None:
    with pytest.raises(search.PlanCancelled):
        run_plan(plan_from_mapping(_data()), cancelled=lambda: True, now=NOW)


def test_inputs_round_trip() -> None:
    inputs = plan_from_mapping(_data(growth_per_month=0.1, seed=3))
    assert plan_from_mapping(plan_to_mapping(inputs)) == inputs


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"colour": 1}, "unknown field(s) colour"),
        ({"profile": {"from_ledger": {}}}, "profile.from_ledger needs a database"),
        ({"profile": None}, "a profile is required"),
        ({"verify_top": 0}, "verify_top must be 1..200"),
        ({"verify_top": "3"}, "verify_top must be an integer"),
        ({"growth_per_month": 9}, "growth_per_month must be in"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"hosted_prices": {"x": [1]}}, "hosted_prices['x'] must be"),
        ({"name": " "}, "name must not be empty"),
    ],
)
def test_bad_plans_are_refused_with_one_line(over: dict, message: str) -> None:
    with pytest.raises(BadInputError, match=None) as err:
        plan_from_mapping(_data(**over))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_workers_give_the_same_answer() -> None:
    data = _data(
        candidates={
            "gpus": ["H100"],
            "tensor_parallel_sizes": [1, 2],
            "dtypes": ["auto"],
            "kv_cache_dtypes": ["auto"],
            "prices": {"H100": 3.0},
        },
        verify_top=2,
    )
    one = run_plan(plan_from_mapping(data), now=NOW)
    two = run_plan(plan_from_mapping(data), now=NOW, workers=2)
    for r in (one, two):
        r.pop("duration_s")
    assert one == two
    with pytest.raises(BadInputError, match="workers must be an integer >= 1"):
        run_plan(plan_from_mapping(data), workers=0)
