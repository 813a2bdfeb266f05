"""The demo's planted findings (docs/demo.md, "What the demo plants, and where the product finds
it"), found by the product itself: a real demo ledger built through the real ingest path (traces
POSTed as OTLP, metrics through the scraper), its marts refreshed, then read through the views and
the pages' named queries only, never through the simulator.

One ledger, four hours of a Wednesday afternoon at full rate (12:00-16:00 UTC): the busiest
hours of the week, which hold the route switch at 14:00 and the 70B's KV-bound peak.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from inferledger.core.storage import Storage
from ledger.queries import Filters, run
from tests.conftest import STORY_HOURS as HOURS

pytestmark = pytest.mark.slow

SWITCH_HOUR = 14  # the /summarize route's weekly move to the 8B (models/data/workload.yaml)
MODEL_70B = "meta-llama/Llama-3.1-70B-Instruct"
MODEL_8B = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def storage(story) -> Storage:
    with Storage(story[0], read_timeout_s=120) as s:
        yield s


def page_filters(end: datetime) -> Filters:
    return Filters(end - timedelta(hours=HOURS), end)


def test_the_false_economy_finder_finds_the_switch_to_the_8b(story, storage) -> None:
    """/summarize moves from the 70B to the 8B at 14:00: each request costs less, each accepted
    summary more; the finder compares the route before and after the switch."""
    _, end = story
    switch = end.replace(hour=SWITCH_HOUR)
    rows = storage.query(
        "select * from false_economy_findings where route = '/summarize'"
    ).to_dicts()
    assert len(rows) == 1, rows
    f = rows[0]
    assert (f["kind"], f["compared"], f["scope"]) == ("model_route", "switch", "route")
    assert f["switched_at"] == switch
    assert (f["model_before"], f["model_after"]) == (MODEL_70B, MODEL_8B)
    assert f["workflow"] == "summarize-ticket" and f["app"] == "support-assistant"
    # both sides hold two hours of summaries (~500 an hour at full rate)
    assert f["decided_before"] > 500 and f["decided_after"] > 500
    assert f["cost_per_request_change_pct"] <= -20
    assert f["cost_per_accepted_change_pct"] >= 100
    assert f["accepted_rate_after"] < f["accepted_rate_before"] - 0.1
    assert "switch at " + switch.strftime("%Y-%m-%d %H:00 UTC") in f["explanation"]
    # the Unit economics page lists it for the demo's range, and under the route filter
    page = run(storage, "economics_false_economy", page_filters(end)).to_pylist()
    assert [(r["route"], r["kind"]) for r in page] == [("/summarize", "model_route")]
    other = run(storage, "economics_false_economy", page_filters(end).with_(route="/answer"))
    assert other.num_rows == 0


def test_the_70b_runs_out_of_kv_cache_at_the_peak(story, storage) -> None:
    """At the afternoon peak the 70B's cache (gpu_memory_utilization 0.6) fills: KV above 90 %,
    requests waiting for blocks, preemptions; the 8B pool never comes close."""
    hours = storage.query(
        "select * from kv_cache_hourly where deployment = 'llama-3.1-70b-fp8-h200' order by hour"
    ).to_dicts()
    full = [h for h in hours if h["kv_usage_max"] > 0.9 and h["preemptions"] > 0]
    assert len(full) >= 2, hours
    assert all(h["waiting_s"] > 0 and h["kv_high_s"] > 0 for h in full)
    assert sum(h["preemptions"] for h in hours) >= 10
    assert sum(h["kv_bound_s"] for h in hours) > 0
    pool = storage.scalar(
        "select max(kv_usage_max) from kv_cache_hourly where deployment = 'llama-3.1-8b-h200'"
    )
    assert pool < 0.2
    gpu = {
        r["deployment"]: r
        for r in run(storage, "gpu_by_deployment", page_filters(story[1])).to_pylist()
    }
    big = gpu["llama-3.1-70b-fp8-h200"]
    assert big["kv_usage_max"] > 0.9 and big["preemptions"] >= 10
    assert big["kv_usage_p90"] >= 0.5


def test_one_8b_replica_runs_far_hotter_than_its_siblings(storage) -> None:
    """Prefix-affinity routing sends every completion of the monorepo to one replica."""
    usage = dict(
        storage.fetchall(
            """
            select replica, sum(usage_gpu_s) / sum(gpu_s)
            from mart_replica_hours
            where deployment = 'llama-3.1-8b-h200'
            group by replica
            """
        )
    )
    assert len(usage) == 4, usage
    hottest = max(usage, key=usage.get)
    siblings = [v for k, v in usage.items() if k != hottest]
    assert usage[hottest] > 1.5 * max(siblings), usage
    assert usage[hottest] > 1.8 * sum(siblings) / len(siblings), usage
    # the Deployments page lists every replica of the pool
    replicas = run(storage, "deployment_replicas", Filters.last(7)).to_pylist()
    assert sum(r["deployment"] == "llama-3.1-8b-h200" for r in replicas) == 4


def test_the_batch_deployment_is_mostly_idle(story, storage) -> None:
    """The nightly extraction batch's two GPUs sit idle through the day."""
    gpu = {
        r["deployment"]: r
        for r in run(storage, "gpu_by_deployment", page_filters(story[1])).to_pylist()
    }
    batch = gpu["llama-3.1-8b-batch-h200"]
    assert batch["gpu_hours"] == pytest.approx(2 * HOURS, rel=0.05)
    assert batch["usage_share"] < 0.05
    assert batch["gpu_util"] < 0.05
    assert batch["idle_cost"] > 0.9 * batch["total_cost"]
    # the 70B next to it is busy all afternoon
    assert gpu["llama-3.1-70b-fp8-h200"]["usage_share"] > 0.9
    # the GPU page's right-sizing finding: one replica would have met the batch's peak (the
    # step-time model sizes the pool by its engine steps at full batch, not its busy time),
    # while the 70B, preempting at its KV-bound peak, must never be cut
    from ledger.rightsizing import rightsizing_findings

    findings = {
        f["deployment"]: f
        for f in rightsizing_findings(storage, page_filters(story[1])).to_pylist()
    }
    f = findings["llama-3.1-8b-batch-h200"]
    assert (f["verdict"], f["basis"]) == ("cut", "compute"), f["message"]
    assert (f["replicas_held"], f["peak_need_replicas"], f["gpus_to_cut"]) == (2, 1, 1)
    assert f["saturated_windows"] == 0 and f["peak_compute_replicas"] < 0.8
    assert f["saving_per_week"] == pytest.approx(4.0 * 168, rel=0.01)
    assert (
        "1 fewer GPU (2 → 1 replicas of 1 GPU) would have met the observed peak" in (f["message"])
    )
    assert findings["llama-3.1-70b-fp8-h200"]["verdict"] == "add_capacity"


def test_self_hosted_gpus_are_a_major_share_of_the_bill(storage) -> None:
    """GPUs (7 H200s at $4 an hour) are over 40 % of the bill even in the week's busiest hours,
    when human review peaks too (over a whole week they are most of it)."""
    gpu, review, total = storage.fetchall(
        "select sum(gpu_cost), sum(review_cost), sum(total) from spend_totals"
    )[0]
    assert gpu == pytest.approx(7 * 4.0 * HOURS, rel=0.05)
    assert gpu / total > 0.4, (gpu, review, total)
    assert review / total < 0.55, (gpu, review, total)
