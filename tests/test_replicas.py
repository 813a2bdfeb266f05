"""Per replica, over time and right-sizing (the GPU & cache page, issue #10): a ledger built
through the real scraper, OTLP and cost-refresher paths, read by ledger/efficiency.py's replica
views and ledger/rightsizing.py. The page builders are tests/test_efficiency.py's."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from inferledger.core.settings import ScrapeTarget
from inferledger.core.storage import Storage
from ingest.scraper import Scraper
from tests.test_efficiency import H11, H12, H13, HOUR, MODEL, scrape, vllm_page


@pytest.fixture
def scraper(storage: Storage) -> Scraper:
    return Scraper(storage, None, max_bytes=1 << 20)


# ---------------------------------------------------------------- per replica, right-sizing
# A ledger through the real ingest paths (Scraper.ingest_text for scrapes, the OTLP decode and
# insert for spans) and the real cost refresher: deployment `dep` (2 x H200 per replica at
# $3.60/GPU-hour) with replicas r0 and r1 scraped every 15 s over [12:00, 13:00).
# r0 runs one request at every other scrape (busy share 1/2), KV 0.4 / 0.2 alternating (mean
# 0.3, peak 0.4); r1 never runs one (busy 0), KV 0. A dcgm series labelled pod="r0" maps its
# GPUs to r0 (utilisation 50 % and 70 %: 60 %); r1 has no mapping (busy share instead).
R_SCRAPE_S = 15


def replica_ledger(
    storage: Storage,
    scraper: Scraper,
    *,
    saturate: bool = False,
    model: str = MODEL,
    scrape_s: int = R_SCRAPE_S,
    waits: dict[int, int] | None = None,
) -> None:
    """The ledger above; ``model`` configures the deployment's model (one the catalog does not
    know: no step-time model), ``scrape_s`` the scrape interval and ``waits`` requests waiting
    on r1 at given scrapes (index: waiting). r0 generates 1,500 tokens and finishes one
    request in each interval that ends a scrape after a busy one (counters)."""
    from inferledger.ledger_fixtures import SpanSet
    from ledger.deployments import sync_configured
    from ledger.marts import refresh
    from ledger.price_book import set_price
    from models.deployment_config import Deployment

    set_price(storage, "gpu", "H200", "gpu_hour", 3.60, "2026-01-01", changed_by="test",
              source="cli")  # fmt: skip
    sync_configured(storage, [Deployment("dep", model=model, gpu_type="H200", gpus_per_replica=2)])
    targets = {
        r: ScrapeTarget(r, f"http://{r}:8000/metrics", scrape_s, 10, "vllm", "dep")
        for r in ("r0", "r1")
    }
    dcgm = ScrapeTarget("dcgm-x", "http://x:9400/metrics", scrape_s, 10, "dcgm", "dep")
    pod_page = (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{Hostname="x",gpu="0",pod="r0"} 50\n'
        'DCGM_FI_DEV_GPU_UTIL{Hostname="x",gpu="1",pod="r0"} 70\n'
    )
    generated = finished = 0
    for i in range(3600 // scrape_s):
        ts = H12 + timedelta(seconds=i * scrape_s)
        busy = i % 2 == 0
        if i % 2 == 1:  # the request of the busy scrape before finished
            generated, finished = generated + 1500, finished + 1
        scrape(
            scraper,
            targets["r0"],
            ts,
            vllm_page(
                kv=0.4 if busy else 0.2, running=int(busy), generation=generated, stop=finished
            ),
        )
        # saturated: two requests wait on r1 from 12:30 for two minutes, 0.8 on average over
        # the 5-min window 12:30-12:35 (above models/rightsizing.WAITING_THRESHOLD); a single
        # scrape with a request waiting (12:40) is a burst, not saturation
        waiting = 2 if saturate and 120 <= i < 128 else 0
        waiting = 1 if saturate and i == 160 else waiting
        waiting = (waits or {}).get(i, waiting)
        scrape(scraper, targets["r1"], ts, vllm_page(kv=0.0, waiting=waiting))
        scrape(scraper, dcgm, ts, pod_page)
    spans = SpanSet(int(H12.timestamp() * 1e9))
    for n, queue_s in enumerate((0.1, 0.2, 0.3)):
        start = 60.0 + 600 * n
        trace = spans.new_trace()
        root = spans.root(trace, start - 0.5, start + 3, app="a", route="/r", team="t")
        call = spans.llm_call(
            trace, root, start - 0.1, start + 2.5, model=MODEL, input_tokens=100,
            output_tokens=10,
        )  # fmt: skip
        spans.engine(
            trace, call, start, start + 2.4, replica="r0", queue_s=queue_s, ttft_s=queue_s + 0.5,
            prompt_tokens=100, completion_tokens=10,
        )  # fmt: skip
    spans.store(storage)
    refresh(storage, full=True)


def replica_filters() -> Any:
    from ledger.queries import Filters

    return Filters(start=H12, end=H13)


def test_replica_table(storage, scraper):
    from ledger.efficiency import replica_table

    replica_ledger(storage, scraper)
    rows = {r["replica"]: r for r in replica_table(storage, replica_filters()).to_pylist()}
    r0, r1 = rows["r0"], rows["r1"]
    # r0: DCGM mapped by its pod label, (50 + 70) / 2 %; its busy share 120 of 240 samples
    assert r0["utilization_source"] == "DCGM" and math.isclose(r0["utilization"], 0.6)
    assert math.isclose(r0["busy_share"], 0.5)
    assert r1["utilization_source"] == "busy" and r1["utilization"] == 0.0
    # the deployment's mean is (0.6 + 0) / 2; r0 is twice it: hot, and listed first
    assert [r["replica"] for r in rows.values()] == ["r0", "r1"]
    assert math.isclose(r0["deployment_mean"], 0.3) and math.isclose(r0["vs_deployment"], 2.0)
    assert r0["hot"] and not r1["hot"]
    assert math.isclose(r0["kv_mean"], 0.3) and math.isclose(r0["kv_max"], 0.4)
    assert r0["waiting_max"] == 0 and r0["preemptions"] == 0
    # three requests on r0, queue p95 by nearest rank: the 3rd of 0.1, 0.2, 0.3
    assert r0["requests"] == 3 and math.isclose(r0["queue_p95_s"], 0.3, rel_tol=1e-9)
    assert r1["requests"] == 0 and r1["queue_p95_s"] is None
    # each replica up the whole hour: 2 GPUs x $3.60
    for r in (r0, r1):
        assert math.isclose(r["total_cost"], 7.2, rel_tol=1e-9)
        assert math.isclose(r["covered_hours"], 1.0)


def test_replica_over_time(storage, scraper):
    from ledger.efficiency import replica_over_time, series_window_s

    replica_ledger(storage, scraper)
    filters = replica_filters()
    # one hour of 15 s scrapes: 240 points per series, under the 360 limit: per scrape
    assert series_window_s(storage, filters) == R_SCRAPE_S
    rows = replica_over_time(storage, filters).to_pylist()
    assert {r["window_s"] for r in rows} == {R_SCRAPE_S}
    r0 = [r for r in rows if r["replica"] == "r0"]
    dep = [r for r in rows if r["replica"] is None]
    assert len(r0) == len(dep) == 240
    assert [r["kv_mean"] for r in r0[:4]] == [0.4, 0.2, 0.4, 0.2]
    # the deployment's KV usage is its replicas' mean; busy replicas and waiting are summed
    assert [r["kv_mean"] for r in dep[:2]] == [0.2, 0.1]
    assert [r["busy_replicas"] for r in dep[:2]] == [1.0, 0.0]
    assert all(r["replicas_up"] == 2 for r in dep)
    # the first request (queue 0.1 s) starts when its client span does, 12:00:59.9: in the
    # window [12:00:45, 12:01:00)
    (first,) = [r for r in dep if r["requests"]][:1]
    assert first["window_start"] == H12 + timedelta(seconds=45)
    assert math.isclose(first["queue_p95_s"], 0.1)


@pytest.mark.parametrize("known", [True, False], ids=["compute", "busy"])
def test_rightsizing_findings_cut(storage, scraper, known):
    from ledger.rightsizing import rightsizing_findings

    replica_ledger(storage, scraper, model=MODEL if known else "acme/house-model-7b")
    (f,) = rightsizing_findings(storage, replica_filters()).to_pylist()
    # every 5-min window: busy replicas 0.5 (r0) + 0, KV replicas 0.3 + 0: need
    # ceil(0.5 / 0.8) = 1 of the 2 replicas held; idle 1 - 1800 / 7200 replica-seconds
    assert f["verdict"] == "cut"
    assert f["replicas_held"] == 2 and f["peak_need_replicas"] == 1
    assert f["gpus_per_replica"] == 2 and f["gpus_to_cut"] == 2
    assert math.isclose(f["idle_share"], 0.75)
    assert math.isclose(f["price_per_gpu_hour"], 3.6, rel_tol=1e-9)
    assert math.isclose(f["saving_per_week"], 2 * 3.6 * 168, rel_tol=1e-9)
    assert f["windows"] == 12 and f["saturated_windows"] == 0
    assert f["message"].startswith("dep was 75% idle; 2 fewer GPUs (2 → 1 replicas")
    if known:
        # Llama-3.1-8B on 2 H200s (TP 2: gpus_per_replica implies it) from the counters:
        # ~10 x 1,500 tokens a window at ~750 tokens of context cost well under a hundredth
        # of a replica at capacity batch; the KV cache (0.3) binds
        assert f["basis"] == "compute" and f["binding"] == "kv"
        assert 0 < f["peak_compute_replicas"] < 0.01
        assert f["step_model"] == "Llama-3.1-8B bf16 on 2× H200"
        assert "replicas' worth of engine steps at full batch" in f["message"]
    else:
        assert f["basis"] == "busy" and f["binding"] == "busy"
        assert f["peak_compute_replicas"] is None and f["step_model"] is None
        assert (
            "Sized on busy time (model acme/house-model-7b or GPU H200 is not in" in (f["message"])
        )


@pytest.mark.parametrize(
    ("waits", "saturated"),
    [({10: 2}, False), ({10: 2, 11: 2}, True), ({10: 2, 12: 2}, False)],
    ids=["lone", "held", "two-lone"],
)
def test_rightsizing_judges_waiting_at_the_scrape_resolution(storage, scraper, waits, saturated):
    """Scraped every 120 s, one sample with 2 requests waiting once stood for 120 of the
    window 12:20-12:25's 360 covered seconds of r1: a mean of 0.67, above the 0.5 threshold,
    so an idle deployment read "add capacity". A queue seen at one scrape only now stands for
    at most 15 s (0.67 x 15 / 120 = 0.08); one still there at the next scrape counts whole
    (0.67 held + 0.08 lone = 0.75)."""
    from ledger.rightsizing import rightsizing_findings

    replica_ledger(storage, scraper, scrape_s=120, waits=waits)
    (f,) = rightsizing_findings(storage, replica_filters()).to_pylist()
    if saturated:
        assert f["verdict"] == "add_capacity" and f["saturated_windows"] == 1
        assert f["first_saturated"] == H12 + timedelta(minutes=20)
    else:
        assert f["verdict"] == "cut" and f["saturated_windows"] == 0
        assert f["gpus_to_cut"] == 2


def test_rightsizing_never_cuts_a_saturated_deployment(storage, scraper):
    from ledger.rightsizing import rightsizing_findings

    replica_ledger(storage, scraper, saturate=True)
    (f,) = rightsizing_findings(storage, replica_filters()).to_pylist()
    assert f["verdict"] == "add_capacity" and f["gpus_to_cut"] == 0
    assert f["saturated_windows"] == 1
    assert f["first_saturated"] == H12 + timedelta(minutes=30)
    assert "add capacity" in f["message"]


def test_replica_views_only_count_scraped_time(storage, scraper):
    """Requests outside any scrape add no window and no busy time: the shares are over
    covered time, never above 100 %."""
    from ledger.efficiency import replica_over_time, replica_table
    from ledger.queries import Filters
    from ledger.rightsizing import rightsizing_findings

    replica_ledger(storage, scraper)
    wide = Filters(start=H11, end=H13 + HOUR)  # two hours of it unscraped
    for r in replica_table(storage, wide).to_pylist():
        assert 0 <= r["utilization"] <= 1 and 0 <= r["busy_share"] <= 1
        assert math.isclose(r["covered_hours"], 1.0)
    for r in replica_over_time(storage, wide).to_pylist():
        assert H12 <= r["window_start"] < H13
        assert r["busy_s"] <= r["covered_s"] + 1e-9
    (f,) = rightsizing_findings(storage, wide).to_pylist()
    assert math.isclose(f["idle_share"], 0.75) and math.isclose(f["covered_hours"], 2.0)
