"""Efficiency and latency marts and views (docs/efficiency.md), on hand-computed cases.

Metric side: scrapes are replayed through Scraper.ingest_text (the parse-and-store path of a
live scrape) at chosen timestamps into a real DuckDB file, then refresh_cache_hours fills the
marts. Request side: rows are inserted into mart_requests and mart_service_calls directly; in
production the cost refresher (ledger/marts.py) fills them from spans, and refresh_latency_hours
runs after it. Every expected number is worked out in the comments.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from inferledger.core.settings import ScrapeTarget
from inferledger.core.storage import Storage
from ingest.scraper import Scraper
from ledger.efficiency import (
    HISTOGRAM_RELATIVE_ERROR,
    SloTargetsError,
    bucket_bounds,
    dirty_cache_hours,
    hour_runs,
    latency_bucket,
    load_slo_targets,
    refresh_cache_hours,
    refresh_latency_hours,
    seed_slo_targets_if_empty,
)

H11 = datetime(2026, 1, 5, 11, 0, tzinfo=UTC)
H12 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
H13 = datetime(2026, 1, 5, 13, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TEXT = "text/plain; version=0.0.4; charset=utf-8"
VLLM = ScrapeTarget("vllm-a", "http://127.0.0.1:8000/metrics", 60, 10, "vllm", "chat")
DCGM = ScrapeTarget("dcgm-n", "http://127.0.0.1:9400/metrics", 60, 10, "dcgm", "chat")


def at(hour: datetime, minutes: float) -> datetime:
    return hour + timedelta(minutes=minutes)


@pytest.fixture
def scraper(storage: Storage) -> Scraper:
    return Scraper(storage, None, max_bytes=1 << 20)


# ---------------------------------------------------------------- building scrapes
def vllm_page(
    *,
    queries: float = 0,
    hits: float = 0,
    preemptions: float = 0,
    stop: float = 0,
    length: float = 0,
    prompt: float = 0,
    generation: float = 0,
    kv: float | None = 0.0,
    waiting: float = 0,
    running: float = 0,
    engine: str = "0",
    old_names: bool = False,
) -> str:
    """One engine's vLLM /metrics page (the metrics the efficiency marts read)."""
    series = f'engine="{engine}",model_name="{MODEL}"'
    prefix = "vllm:gpu_prefix_cache" if old_names else "vllm:prefix_cache"
    kv_name = "vllm:gpu_cache_usage_perc" if old_names else "vllm:kv_cache_usage_perc"
    lines = []
    for family, value in (
        (f"{prefix}_queries", queries),
        (f"{prefix}_hits", hits),
        ("vllm:num_preemptions", preemptions),
        ("vllm:prompt_tokens", prompt),
        ("vllm:generation_tokens", generation),
    ):
        # the classic text format names the sample (..._total) on its TYPE line
        lines += [f"# TYPE {family}_total counter", f"{family}_total{{{series}}} {float(value)}"]
    lines.append("# TYPE vllm:request_success_total counter")
    for reason, value in (("stop", stop), ("length", length)):
        labels = f'engine="{engine}",finished_reason="{reason}",model_name="{MODEL}"'
        lines.append(f"vllm:request_success_total{{{labels}}} {float(value)}")
    gauges = [("vllm:num_requests_waiting", waiting), ("vllm:num_requests_running", running)]
    if kv is not None:
        gauges.append((kv_name, kv))
    for name, value in gauges:
        lines += [f"# TYPE {name} gauge", f"{name}{{{series}}} {float(value)}"]
    return "\n".join(lines) + "\n"


def dcgm_page(utils: Sequence[float]) -> str:
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for gpu, util in enumerate(utils):
        labels = f'Hostname="node-n",gpu="{gpu}",modelName="NVIDIA H200"'
        lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {float(util)}")
    return "\n".join(lines) + "\n"


def scrape(scraper: Scraper, target: ScrapeTarget, ts: datetime, text: str) -> None:
    assert scraper.ingest_text(target, text, TEXT, ts).up


def fail(scraper: Scraper, target: ScrapeTarget, ts: datetime) -> None:
    assert not scraper.ingest_text(target, "<html>bad gateway</html>", "text/html", ts).up


def refresh_cache(storage: Storage, hours: Sequence[datetime]) -> int:
    return storage.write(lambda cur: refresh_cache_hours(cur, hours))


def cache_row(storage: Storage, hour: datetime, replica: str = "vllm-a") -> dict[str, Any]:
    rows = storage.query(
        "select * from kv_cache_hourly where hour = ? and replica = ?", [hour, replica]
    ).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


# The replica vllm-a, one engine, scraped at 11:59 and 12:00 … 12:03, then (after a 7-minute
# gap) 12:10 and 12:11. vLLM restarted between 12:02 and 12:03: every counter dropped.
#            11:59  12:00  12:01  12:02  12:03  12:10  12:11
# queries      900   1000   1600   2000    300    900   1000
# hits         350    400    700    900    100    400    450
# preemptions    5      5      7      7      1      3      3
# stop          90    100    150    200     10     40     50
# length         0      0     10     10      0     10     10
# generation    45     50     80    100      5     25     30
# kv          0.30   0.50   0.95   0.92   0.20   0.90   0.10
# waiting        0      0      3      0      2      1      0
# running        4     10     20     30      5      8      2
FIXTURE = [
    (-1, dict(queries=900, hits=350, preemptions=5, stop=90, length=0, generation=45,
              kv=0.30, waiting=0, running=4)),
    (0, dict(queries=1000, hits=400, preemptions=5, stop=100, length=0, generation=50,
             kv=0.50, waiting=0, running=10)),
    (1, dict(queries=1600, hits=700, preemptions=7, stop=150, length=10, generation=80,
             kv=0.95, waiting=3, running=20)),
    (2, dict(queries=2000, hits=900, preemptions=7, stop=200, length=10, generation=100,
             kv=0.92, waiting=0, running=30)),
    (3, dict(queries=300, hits=100, preemptions=1, stop=10, length=0, generation=5,
             kv=0.20, waiting=2, running=5)),
    (10, dict(queries=900, hits=400, preemptions=3, stop=40, length=10, generation=25,
              kv=0.90, waiting=1, running=8)),
    (11, dict(queries=1000, hits=450, preemptions=3, stop=50, length=10, generation=30,
              kv=0.10, waiting=0, running=2)),
]  # fmt: skip


def load_fixture(scraper: Scraper) -> None:
    for minute, values in FIXTURE:
        scrape(scraper, VLLM, at(H12, minute), vllm_page(prompt=values["queries"], **values))
    # dcgm-n: two GPUs at 12:00 (50 %, 100 %) and 12:01 (0 %, 100 %)
    scrape(scraper, DCGM, H12, dcgm_page([50, 100]))
    scrape(scraper, DCGM, at(H12, 1), dcgm_page([0, 100]))


# ---------------------------------------------------------------- metric side
def test_counter_increases_across_a_reset_give_the_hit_rate(storage, scraper):
    load_fixture(scraper)
    refresh_cache(storage, [H11, H12])
    row = cache_row(storage, H12)
    # increases over the intervals ending 12:01, 12:02, 12:03 (restart: the new value),
    # 12:10, 12:11: queries 600 + 400 + 300 + 600 + 100 = 2000; hits 300 + 200 + 100 + 300
    # + 50 = 950. (Last minus first would say 1000 - 1000 = 0.)
    assert row["prefix_queries"] == 2000
    assert row["prefix_hits"] == 950
    assert row["prefix_hit_rate"] == pytest.approx(0.475)
    assert row["prompt_tokens"] == 2000
    assert row["generation_tokens"] == 30 + 20 + 5 + 20 + 5
    # preemptions 2 + 0 + 1 + 2 + 0 = 5; finished: stop 50 + 50 + 10 + 30 + 10 = 150,
    # length 10 + 0 + 0 (10 -> 0 is a reset to 0) + 10 + 0 = 20; 5 per 170 = 29.41 per 1k
    assert row["preemptions"] == 5
    assert row["requests_finished"] == 170
    assert row["preemptions_per_1k"] == pytest.approx(5000 / 170)
    assert row["deployment"] == "chat"
    # the interval (11:59, 12:00] ends on the hour: it belongs to 11:00
    early = cache_row(storage, H11)
    assert (early["prefix_queries"], early["prefix_hits"], early["requests_finished"]) == (
        100,
        50,
        10,
    )


def test_kv_occupancy_and_kv_bound_versus_compute_bound(storage, scraper):
    load_fixture(scraper)
    refresh_cache(storage, [H12])
    row = cache_row(storage, H12)
    # each sample stands until the next scrape, at most 300 s; the last (12:11) for the
    # median interval (60 s): 12:00 60 s, 12:01 60, 12:02 60, 12:03 300 (not 420), 12:10 60,
    # 12:11 60 -> 600 s covered
    assert row["samples"] == 6
    assert row["covered_s"] == pytest.approx(600)
    # mean: (0.5·60 + 0.95·60 + 0.92·60 + 0.2·300 + 0.9·60 + 0.1·60) / 600 = 262.2 / 600
    assert row["kv_usage_mean"] == pytest.approx(0.437)
    # by usage: 0.1 (60 s, cum 60), 0.2 (300, 360), 0.5 (420), 0.9 (480), 0.92 (540), 0.95
    # p50: first to reach 300 s -> 0.2; p90: first to reach 540 s -> 0.92
    assert row["kv_usage_p50"] == 0.2
    assert row["kv_usage_p90"] == 0.92
    assert row["kv_usage_max"] == 0.95
    # usage >= 0.9 at 12:01, 12:02, 12:10: 180 s; a request waited at 12:01 (KV 0.95),
    # 12:03 (KV 0.2) and 12:10 (KV 0.9): 420 s, of which KV-bound 12:01 + 12:10 = 120 s and
    # compute-bound 12:03 = 300 s
    assert row["kv_high_s"] == pytest.approx(180)
    assert row["waiting_s"] == pytest.approx(420)
    assert row["kv_bound_s"] == pytest.approx(120)
    assert row["compute_bound_s"] == pytest.approx(300)
    assert row["waiting_unclassified_s"] == pytest.approx(0)
    # running: (10·60 + 20·60 + 30·60 + 5·300 + 8·60 + 2·60) / 600 = 9.5; waiting 840 / 600
    assert row["running_mean"] == pytest.approx(9.5)
    assert row["waiting_mean"] == pytest.approx(1.4)
    hist = row["kv_usage_hist_s"]
    assert len(hist) == 100
    nonzero = {i: s for i, s in enumerate(hist) if s}
    assert nonzero == pytest.approx({10: 60, 20: 300, 50: 60, 90: 60, 92: 60, 95: 60})


def test_gpu_utilization_from_dcgm(storage, scraper):
    load_fixture(scraper)
    refresh_cache(storage, [H12])
    (row,) = storage.query("select * from mart_gpu_hourly").to_dicts()
    # two GPUs x two samples of 60 s (the last one: the median interval):
    # (0.5·60 + 1·60 + 0·60 + 1·60) / 240 = 0.625
    assert (row["target"], row["deployment"], row["gpus"]) == ("dcgm-n", "chat", 2)
    assert row["gpu_covered_s"] == pytest.approx(240)
    assert row["gpu_util_mean"] == pytest.approx(0.625)
    assert row["gpu_util_max"] == 1.0


def test_a_failed_scrape_ends_a_sample_and_a_long_gap_is_capped(storage, scraper):
    b = ScrapeTarget("vllm-b", "http://127.0.0.1:8001/metrics", 60, 10, "vllm", None)
    c = ScrapeTarget("vllm-c", "http://127.0.0.1:8002/metrics", 60, 10, "vllm", "chat")
    # vllm-b: 12:00 ok, 12:00:30 failed, 12:05 ok and the last: gaps 30 s and 270 s, median
    # 150 s. 12:00 stands for 30 s (up to the failed scrape), 12:05 for 150 s.
    scrape(scraper, b, H12, vllm_page(kv=0.5, waiting=1))
    fail(scraper, b, at(H12, 0.5))
    scrape(scraper, b, at(H12, 5), vllm_page(kv=0.95, waiting=0))
    # vllm-c: 12:50, then nothing until 13:30 -> 12:50 stands for 300 s, not its 40 minutes;
    # refreshing 12:00 alone must know that a later scrape exists
    scrape(scraper, c, at(H12, 50), vllm_page(kv=0.4))
    scrape(scraper, c, at(H13, 30), vllm_page(kv=0.4))
    refresh_cache(storage, [H12])
    row = cache_row(storage, H12, "vllm-b")
    assert row["covered_s"] == pytest.approx(180)
    assert row["kv_usage_mean"] == pytest.approx((0.5 * 30 + 0.95 * 150) / 180)
    assert row["compute_bound_s"] == pytest.approx(30)
    assert row["deployment"] == "vllm-b"  # no deployment named: the replica's own name
    assert cache_row(storage, H12, "vllm-c")["covered_s"] == pytest.approx(300)


def test_a_sample_is_split_at_the_hour(storage, scraper):
    # 12:59:30 (KV 0.4) stands until 13:00:30: 30 s in each hour; 13:00:30 (0.6) 60 s;
    # 13:01:30 (0.6, the last) the median 60 s
    for ts, kv in ((at(H12, 59.5), 0.4), (at(H13, 0.5), 0.6), (at(H13, 1.5), 0.6)):
        scrape(scraper, VLLM, ts, vllm_page(kv=kv))
    # vllm-e: 12:58 and 12:59, the last standing for 60 s: it ends on the hour, nothing in 13:00
    e = ScrapeTarget("vllm-e", "http://127.0.0.1:8003/metrics", 60, 10, "vllm", "chat")
    scrape(scraper, e, at(H12, 58), vllm_page(kv=0.4))
    scrape(scraper, e, at(H12, 59), vllm_page(kv=0.4))
    refresh_cache(storage, [H12, H13])
    assert storage.fetchall(
        "select hour, covered_s from mart_cache_hourly where replica = 'vllm-e'"
    ) == [(H12, 120)]
    first, second = cache_row(storage, H12), cache_row(storage, H13)
    assert (first["samples"], first["covered_s"], first["kv_usage_mean"]) == (1, 30, 0.4)
    # 13:00: (0.4·30 + 0.6·60 + 0.6·60) / 150 = 0.56, two samples taken in the hour
    assert (second["samples"], second["covered_s"]) == (2, 150)
    assert second["kv_usage_mean"] == pytest.approx(0.56)


def test_engines_of_one_replica(storage, scraper):
    # two data-parallel engines behind one target: engine 0 full but nobody waits there,
    # engine 1 half full with 2 waiting -> compute-bound; the replica's KV usage is the mean
    for minute in (0, 1):
        page = vllm_page(kv=0.95, waiting=0, running=7, engine="0") + vllm_page(
            kv=0.5, waiting=2, running=3, engine="1"
        ).replace("# TYPE", "# HELP")  # one TYPE line per family: the second page's become HELP
        scrape(scraper, VLLM, at(H12, minute), page)
    refresh_cache(storage, [H12])
    row = cache_row(storage, H12)
    assert row["kv_usage_mean"] == pytest.approx(0.725)
    assert row["waiting_mean"] == 2 and row["running_mean"] == 10
    assert (row["kv_bound_s"], row["compute_bound_s"], row["waiting_s"]) == (0, 120, 120)
    assert row["kv_high_s"] == 0  # the replica's mean usage, 0.725, is below 0.9


def test_old_vllm_metric_names(storage, scraper):
    # vLLM 0.8: gpu_prefix_cache_* and gpu_cache_usage_perc, mapped by metric_name_aliases
    scrape(scraper, VLLM, H12, vllm_page(queries=100, hits=10, kv=0.2, old_names=True))
    scrape(scraper, VLLM, at(H12, 1), vllm_page(queries=300, hits=110, kv=0.4, old_names=True))
    refresh_cache(storage, [H12])
    row = cache_row(storage, H12)
    assert (row["prefix_queries"], row["prefix_hits"]) == (200, 100)
    assert row["kv_usage_mean"] == pytest.approx(0.3)


def test_counters_agree_with_metric_counter_increases(storage, scraper):
    load_fixture(scraper)
    refresh_cache(storage, [H11, H12])
    mart = storage.fetchall(
        "select sum(prefix_queries), sum(prefix_hits), sum(preemptions), "
        "sum(requests_finished), sum(generation_tokens) from mart_cache_hourly"
    )
    view = storage.fetchall(
        "select "
        + ", ".join(
            f"sum(increase) filter (where metric = '{m}')"
            for m in (
                "vllm:prefix_cache_queries_total",
                "vllm:prefix_cache_hits_total",
                "vllm:num_preemptions_total",
                "vllm:request_success_total",
                "vllm:generation_tokens_total",
            )
        )
        + " from metric_counter_increases"
    )
    assert mart == view


def test_dirty_hours_and_idempotent_refresh(storage, scraper):
    load_fixture(scraper)
    # 11:59 -> 11:00; the interval ending 12:00 -> 11:00; the rest -> 12:00
    assert storage.write(lambda cur: dirty_cache_hours(cur, None)) == [H11, H12]
    refresh_cache(storage, [H11, H12])
    before = storage.query("select * from mart_cache_hourly order by hour, replica")
    # refreshing one hour alone, or twice, gives the same rows
    refresh_cache(storage, [H12])
    refresh_cache(storage, [H12, H11, at(H12, 30)])
    assert storage.query("select * from mart_cache_hourly order by hour, replica").equals(before)
    mark = storage.scalar("select max(received_at) from scrapes")
    # a scrape at 12:58: its sample reaches into 13:00, and it follows 12:11
    scrape(scraper, VLLM, at(H12, 58), vllm_page(kv=0.1))
    assert storage.write(lambda cur: dirty_cache_hours(cur, mark)) == [H12, H13]


def test_hour_runs():
    assert hour_runs([at(H12, 30), H11, H13, H12 + 5 * HOUR]) == [
        (H11, H13 + HOUR),
        (H12 + 5 * HOUR, H12 + 6 * HOUR),
    ]
    with pytest.raises(ValueError, match="timezone-aware"):
        hour_runs([datetime(2026, 1, 5, 12)])


# ---------------------------------------------------------------- request side
_REQUEST_DEFAULTS: dict[str, Any] = dict(
    engine_span_id=None, environment="prod", app="support-assistant", team="cx",
    route="/answer", workflow=None, attempt=1, fallback=False, service_name="support-assistant",
    operation="chat", provider="vllm", model=MODEL, deployment="chat", replica="vllm-a",
    hosting="self_hosted", failed=False, input_tokens=None, cached_input_tokens=None,
    output_tokens=None, queue_s=None, prefill_s=None, ttft_s=None, tpot_s=None, decode_s=None,
    e2e_s=None, prefill_gpu_s=0.0, decode_gpu_s=0.0, prefill_cost=0.0, decode_cost=0.0,
    idle_usage_cost=0.0, idle_even_cost=0.0, idle_configured_cost=0.0,
)  # fmt: skip


def insert_requests(storage: Storage, hour: datetime, rows: Sequence[dict[str, Any]]) -> None:
    """mart_requests rows starting at ``hour`` (the cost refresher's job in production)."""
    start = hour + timedelta(minutes=1)
    first = storage.scalar("select count(*) from mart_requests")  # ids unique across calls
    full = []
    for i, overrides in enumerate(rows, start=first):
        row = {**_REQUEST_DEFAULTS, **overrides}
        row.update(
            trace_id=f"{hour:%H}{i:030d}",
            span_id=f"{i:016x}",
            start_ns=int(start.timestamp() * 1e9),
            end_ns=int(start.timestamp() * 1e9) + 1,
            start_time=start,
            hour=hour,
            task_key=f"trace:{i}",
        )
        full.append(row)
    _insert(storage, "mart_requests", full)


def insert_calls(storage: Storage, hour: datetime, stage: str, durations: Sequence[float]) -> None:
    first = storage.scalar("select count(*) from mart_service_calls")
    rows = [
        dict(
            trace_id=f"{hour:%H}{i:030d}", span_id=f"c{i:015x}", start_ns=0, hour=hour,
            environment="prod", app="support-assistant", team="cx", route="/answer",
            workflow=None, task_key=f"trace:{i}", stage=stage, service="support-kb",
            duration_s=d, failed=False, cost=0.0,
        )
        for i, d in enumerate(durations, start=first)
    ]  # fmt: skip
    _insert(storage, "mart_service_calls", rows)


def _insert(storage: Storage, table: str, rows: list[dict[str, Any]]) -> None:
    # by name: a column the rows do not give (one a later migration added) takes its default
    columns = [r[1] for r in storage.fetchall(f"pragma table_info('{table}')")]
    given = [c for c in columns if c in rows[0]]
    batch = pa.Table.from_pylist([{c: r[c] for c in given} for r in rows])

    storage.write(lambda tx: tx.append_arrow(table, batch))


def refresh_requests(storage: Storage, hours: Sequence[datetime]) -> int:
    return storage.write(lambda cur: refresh_latency_hours(cur, hours))


def stage_row(storage: Storage, stage: str, hour: datetime = H12) -> dict[str, Any]:
    (row,) = storage.query(
        "select * from latency_stages where hour = ? and stage = ?", [hour, stage]
    ).to_dicts()
    return row


def load_latency_fixture(storage: Storage) -> None:
    # 12:00: ten /answer requests, TTFT 0.1 … 1.0 s, e2e 2 × TTFT, no queue; one failed
    # request (TTFT 100 s) that latency leaves out. 13:00: ten with TTFT 2.0 s.
    insert_requests(
        storage,
        H12,
        [dict(ttft_s=0.1 * i, e2e_s=0.2 * i, queue_s=0.0) for i in range(1, 11)]
        + [dict(ttft_s=100.0, e2e_s=100.0, failed=True)],
    )
    insert_requests(storage, H13, [dict(ttft_s=2.0, e2e_s=3.0, queue_s=0.0)] * 10)
    insert_calls(storage, H12, "retrieval", [0.04, 0.05, 0.06, 0.5])


def test_latency_percentiles_per_hour(storage):
    load_latency_fixture(storage)
    refresh_requests(storage, [H12, H13])
    ttft = stage_row(storage, "ttft")
    # nearest rank: p50 = the 5th of 10 = 0.5; p95 = the ceil(9.5) = 10th = 1.0; p99 = 1.0
    assert (ttft["count"], ttft["p50_s"], ttft["p95_s"], ttft["p99_s"]) == (
        10,
        pytest.approx(0.5),
        pytest.approx(1.0),
        pytest.approx(1.0),
    )
    assert ttft["mean_s"] == pytest.approx(0.55)
    assert (ttft["environment"], ttft["app"], ttft["route"]) == (
        "prod",
        "support-assistant",
        "/answer",
    )
    assert stage_row(storage, "e2e")["p95_s"] == pytest.approx(2.0)
    queue = stage_row(storage, "queue")
    assert (queue["count"], queue["p99_s"], queue["max_s"]) == (10, 0, 0)
    # retrieval calls 0.04, 0.05, 0.06, 0.5: p50 = 2nd = 0.05, p95 = 4th = 0.5
    retrieval = stage_row(storage, "retrieval")
    assert (retrieval["count"], retrieval["p50_s"], retrieval["p95_s"]) == (4, 0.05, 0.5)
    # stages without a value (prefill, decode, tpot here) have no row
    stages = {r[0] for r in storage.fetchall("select distinct stage from latency_stages")}
    assert stages == {"queue", "ttft", "e2e", "retrieval"}


def test_percentiles_over_a_range_merge_the_hours(storage):
    load_latency_fixture(storage)
    refresh_requests(storage, [H12, H13])
    rows = storage.query(
        "select * from latency_percentiles_over(?, ?) where stage = 'ttft'", [H12, H13 + HOUR]
    ).to_dicts()
    (row,) = rows
    # 20 values: 0.1 … 1.0 and ten 2.0. p50 = the 10th = 1.0, p95 = the 19th = 2.0. Both
    # lie alone in their bucket, so the bucket's min = max answers exactly.
    assert row["count"] == 20
    assert row["p50_s"] == pytest.approx(1.0)
    assert row["p95_s"] == pytest.approx(2.0)
    assert row["mean_s"] == pytest.approx((5.5 + 20) / 20)
    (only_12,) = storage.fetchall(
        "select count, p50_s from latency_percentiles_over(?, ?) where stage = 'ttft'",
        [H12, H13],
    )
    assert only_12 == (10, pytest.approx(0.5))
    # queue times of 0 sit in the underflow bucket, answered by its min: exactly 0
    assert (
        storage.scalar(
            "select p99_s from latency_percentiles_over(null, null) where stage = 'queue'"
        )
        == 0
    )


def nearest_rank(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1]


def test_histogram_percentiles_within_the_documented_bound(storage):
    rng = random.Random(20260105)
    values: dict[tuple[str, str], list[float]] = {}
    for app in ("a", "b"):
        for h in range(6):
            hour = H12 + h * HOUR
            ttft = [rng.lognormvariate(math.log(0.3), 1.2) for _ in range(rng.randint(1, 400))]
            tpot = [rng.uniform(0.004, 0.06) for _ in range(50)]
            insert_requests(
                storage,
                hour,
                [
                    dict(app=app, ttft_s=t, tpot_s=tpot[i] if i < len(tpot) else None)
                    for i, t in enumerate(ttft)
                ],
            )
            values.setdefault((app, "ttft"), []).extend(ttft)
            values.setdefault((app, "tpot"), []).extend(tpot[: len(ttft)])
    refresh_requests(storage, [H12 + h * HOUR for h in range(6)])
    got = {
        (r["app"], r["stage"]): r
        for r in storage.query(
            "select * from latency_percentiles_over(?, ?)", [H12, H12 + 6 * HOUR]
        ).to_dicts()
    }
    assert set(got) == set(values)
    assert 0.0239 < HISTOGRAM_RELATIVE_ERROR < 0.024
    for key, observed in values.items():
        row = got[key]
        assert row["count"] == len(observed)
        for q, column in ((0.5, "p50_s"), (0.95, "p95_s"), (0.99, "p99_s")):
            exact = nearest_rank(observed, q)
            assert abs(row[column] - exact) <= HISTOGRAM_RELATIVE_ERROR * exact + 1e-12, (
                key,
                q,
                row[column],
                exact,
            )
    # the exact hourly percentiles are DuckDB's quantile_disc, the same nearest rank
    hourly = storage.fetchall(
        "select hour, app, p50_s, p95_s, p99_s from mart_latency_hourly where stage = 'ttft'"
    )
    assert len(hourly) == 12
    for hour, app, *percentiles in hourly:
        ttft = [
            v
            for (v,) in storage.fetchall(
                "select ttft_s from mart_requests where hour = ? and app = ?", [hour, app]
            )
        ]
        assert percentiles == [nearest_rank(ttft, q) for q in (0.5, 0.95, 0.99)]


def test_bucket_edges_match_the_sql():
    for value in (0.0, 0.0009, 0.001, 0.0015, 0.3, 1.0, 2.0, 999.9, 1000.0, 5000.0):
        bucket = latency_bucket(value)
        lo, hi = bucket_bounds(bucket)
        assert lo <= value * (1 + 1e-12) and value < hi * (1 + 1e-12), (value, bucket)
    assert (latency_bucket(0.0), latency_bucket(1.0), latency_bucket(1000.0)) == (0, 145, 289)


def test_sql_buckets_match_python(storage):
    values = [0.0, 0.0004, 0.001, 0.0123, 0.7, 1.0, 1.02, 57.0, 999.0, 1500.0]
    insert_requests(storage, H12, [dict(e2e_s=v) for v in values])
    refresh_requests(storage, [H12])
    rows = storage.fetchall(
        "select bucket, count from mart_latency_buckets where stage = 'e2e' order by bucket"
    )
    expected: dict[int, int] = {}
    for v in values:
        expected[latency_bucket(v)] = expected.get(latency_bucket(v), 0) + 1
    assert dict(rows) == expected


# ---------------------------------------------------------------- SLO targets
def add_target(storage: Storage, **fields: Any) -> None:
    row = dict(app=None, environment=None, effective_from=datetime(2000, 1, 1, tzinfo=UTC))
    row.update(fields)
    storage.execute_write(
        "insert into slo_targets (objective, route, app, environment, stage, percentile, "
        "target_s, effective_from) values (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            row["objective"],
            row["route"],
            row["app"],
            row["environment"],
            row["stage"],
            row["percentile"],
            row["target_s"],
            row["effective_from"],
        ],
    )


def test_slo_attainment(storage):
    load_latency_fixture(storage)
    insert_requests(storage, H12, [dict(route="/extract", app="doc", e2e_s=4.0)])
    refresh_requests(storage, [H12, H13])
    # TTFT p95 0.75 s at 12:00, then 1.5 s from 13:00 (a second version of the objective)
    add_target(storage, objective="answer-ttft", route="/answer", stage="ttft", percentile=0.95,
               target_s=0.75)  # fmt: skip
    add_target(storage, objective="answer-ttft", route="/answer", stage="ttft", percentile=0.95,
               target_s=1.5, effective_from=H13)  # fmt: skip
    add_target(storage, objective="all-e2e", route="/%", stage="e2e", percentile=0.5,
               target_s=10)  # fmt: skip
    add_target(storage, objective="nobody", route="/answer", app="nobody", stage="e2e",
               percentile=0.5, target_s=1)  # fmt: skip
    rows = {
        (r["objective"], r["route"]): r
        for r in storage.query("select * from slo_attainment").to_dicts()
    }
    assert set(rows) == {
        ("answer-ttft", "/answer"),
        ("all-e2e", "/answer"),
        ("all-e2e", "/extract"),
    }
    ttft = rows[("answer-ttft", "/answer")]
    # 12:00: 0.1 … 0.7 within 0.75 s -> 7 of 10; 13:00: ten of 2.0 s, none within 1.5 s
    assert (ttft["requests"], ttft["within_target"]) == (20, 7)
    assert ttft["attained_share"] == pytest.approx(0.35)
    assert ttft["met"] is False
    assert (ttft["target_s"], ttft["percentile"]) == (1.5, 0.95)  # the version at day's end
    assert ttft["observed_s"] == pytest.approx(2.0)  # p95 of the day: 19th of 20
    assert ttft["day"] == H12.date()
    e2e = rows[("all-e2e", "/answer")]
    assert (e2e["requests"], e2e["attained_share"], e2e["met"]) == (20, 1.0, True)
    assert rows[("all-e2e", "/extract")]["requests"] == 1


def test_slo_target_inside_a_bucket_counts_pro_rata(storage):
    # 1.00, 1.02 and 1.04 s share one bucket [1.0, 1.049); a target of 1.03 s inside it counts
    # the bucket's 3 requests by where the target falls between its min and max:
    # 3 × (1.03 - 1.00) / (1.04 - 1.00) = 2.25 (exactly: 2)
    insert_requests(storage, H12, [dict(e2e_s=v) for v in (1.0, 1.02, 1.04)])
    refresh_requests(storage, [H12])
    add_target(storage, objective="e2e", route="/answer", stage="e2e", percentile=0.5,
               target_s=1.03)  # fmt: skip
    assert storage.scalar("select within_target from slo_attainment") == pytest.approx(2.25)


def test_seed_slo_targets(storage, tmp_path):
    assert seed_slo_targets_if_empty(storage) > 0
    assert seed_slo_targets_if_empty(storage) == 0  # not twice
    routes = {r[0] for r in storage.fetchall("select route from slo_targets")}
    assert {"/answer", "/summarize", "/extract", "/complete", "/chat"} <= routes
    bad = tmp_path / "slo.yaml"
    bad.write_text(
        "targets:\n"
        "  - {objective: a, route: /a, stage: ttft, percentile: 0.95, target_s: 1}\n"
        "  - {objective: b, route: /b, stage: latency, percentile: 0.95, target_s: 1}\n"
    )
    with pytest.raises(SloTargetsError) as err:
        load_slo_targets(bad)
    message = str(err.value)
    assert "\n" not in message
    assert "slo.yaml" in message and "target 2" in message and "stage must be one of" in message


def test_seed_slo_targets_writes_every_field(storage, tmp_path):
    path = tmp_path / "slo.yaml"
    path.write_text(
        "effective_from: 2026-01-01\n"
        "targets:\n"
        "  - {objective: a, route: /a, stage: ttft, percentile: 0.95, target_s: 1.5}\n"
        "  - {objective: b, route: /b%, app: rag, environment: prod, stage: e2e,\n"
        "     percentile: 0.5, target_s: 3, effective_from: '2026-02-01T06:00:00+02:00',\n"
        "     note: tighter}\n"
    )
    assert seed_slo_targets_if_empty(storage, path) == 2
    rows = storage.fetchall(
        "select objective, route, app, environment, stage, percentile, target_s, "
        "effective_from, note from slo_targets order by target_id"
    )
    assert rows == [
        ("a", "/a", None, None, "ttft", 0.95, 1.5, datetime(2026, 1, 1, tzinfo=UTC), None),
        (
            "b",
            "/b%",
            "rag",
            "prod",
            "e2e",
            0.5,
            3.0,
            datetime(2026, 2, 1, 4, tzinfo=UTC),
            "tighter",
        ),
    ]


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        ("{objective: a, route: /a, stage: ttft, percentile: 95, target_s: 1}", "percentile"),
        ("{objective: a, route: /a, stage: ttft, percentile: 0.9, target_s: -1}", "target_s"),
        ("{objective: a, route: /a, stage: ttft, percentile: 0.9}", "target_s is missing"),
        ("{objective: a, route: /a, stage: ttft, percentile: 0.9, target_s: 1, x: 1}", "'x'"),
        (
            "{objective: a, route: /a, stage: ttft, percentile: 0.9, target_s: 1, "
            "effective_from: soon}",
            "effective_from",
        ),
    ],
)
def test_bad_slo_target_entries(tmp_path, storage, entry, complaint):
    path = tmp_path / "slo.yaml"
    path.write_text(f"targets:\n  - {entry}\n")
    with pytest.raises(SloTargetsError, match=complaint):
        seed_slo_targets_if_empty(storage, path)
    assert storage.scalar("select count(*) from slo_targets") == 0  # nothing written


def test_duplicate_objective_version_is_refused(tmp_path):
    path = tmp_path / "slo.yaml"
    entry = "{objective: a, route: /a, stage: ttft, percentile: 0.9, target_s: 1}"
    path.write_text(f"targets:\n  - {entry}\n  - {entry}\n")
    with pytest.raises(SloTargetsError, match="already has a version"):
        load_slo_targets(path)


# ---------------------------------------------------------------- cache efficiency
def load_cost_fixture(storage: Storage) -> None:
    # deployment chat at 12:00: r1 1000 prompt tokens of which 600 cached, r2 500 prompt
    # tokens that report no cached count (uncached: all 500); a hosted request (no deployment)
    insert_requests(
        storage,
        H12,
        [
            dict(input_tokens=1000, cached_input_tokens=600, output_tokens=100,
                 prefill_cost=0.004, decode_cost=0.010, prefill_gpu_s=1.0, decode_gpu_s=3.0),
            dict(app="doc", route="/extract", input_tokens=500, output_tokens=50,
                 prefill_cost=0.002, decode_cost=0.005, prefill_gpu_s=0.5, decode_gpu_s=1.5),
            dict(app="doc", route="/extract", input_tokens=200, cached_input_tokens=20,
                 output_tokens=10, deployment=None, replica=None, hosting="hosted",
                 prefill_cost=0.0001),
        ],
    )  # fmt: skip
    rows = [
        dict(hour=H12, replica="vllm-a", deployment="chat", gpus=1, up_s=3600.0, busy_s=900.0,
             total_cost=4.0, usage_cost=1.0, idle_cost=3.0, gpu_s=3600.0, usage_gpu_s=900.0,
             priced=True),
    ]  # fmt: skip
    _insert(storage, "mart_replica_hours", rows)


def test_cache_efficiency(storage, scraper):
    load_fixture(scraper)
    load_cost_fixture(storage)
    refresh_cache(storage, [H12])
    refresh_requests(storage, [H12])
    (row,) = storage.query(
        "select * from cache_efficiency where hour = ? and deployment = 'chat'", [H12]
    ).to_dicts()
    assert row["replicas"] == 1
    assert row["prefix_hit_rate"] == pytest.approx(0.475)  # the counters, as above
    # spans: 600 cached of the 1000 tokens whose requests report a cached count
    assert row["span_hit_rate"] == pytest.approx(0.6)
    assert (row["input_tokens"], row["cached_input_tokens"], row["uncached_input_tokens"]) == (
        1500,
        600,
        900,
    )
    # prefill cost per uncached token 0.006 / 900; saved: 600 × that = 0.004
    assert row["prefill_cost_per_uncached_token"] == pytest.approx(0.006 / 900)
    assert row["prefill_cost_saved"] == pytest.approx(0.004)
    # per 1M: prompt 0.006 / 1500 × 1e6 = 4.00; generation 0.015 / 150 × 1e6 = 100.00
    assert row["cost_per_1m_prompt_tokens"] == pytest.approx(4.0)
    assert row["cost_per_1m_generation_tokens"] == pytest.approx(100.0)
    assert (row["prefill_gpu_s"], row["decode_gpu_s"]) == (1.5, 4.5)
    # counters: 2000 prompt + 80 generated tokens in one GPU-hour
    assert row["tokens_per_gpu_hour"] == pytest.approx(2080)
    assert row["generation_tokens_per_gpu_hour"] == pytest.approx(80)
    assert row["usage_share"] == pytest.approx(0.25)
    assert row["gpu_util_mean"] == pytest.approx(0.625)
    assert row["idle_cost"] == 3.0
    assert row["preemptions_per_1k"] == pytest.approx(5000 / 170)
    assert (row["kv_bound_s"], row["compute_bound_s"]) == (pytest.approx(120), pytest.approx(300))
    # one replica: the deployment's percentiles are the replica's rounded down to 1 %
    assert (row["kv_usage_p50"], row["kv_usage_p90"]) == (0.2, 0.92)
    assert row["kv_usage_mean"] == pytest.approx(0.437)


def test_cache_by_app_ranks_poor_sharers(storage):
    load_cost_fixture(storage)
    insert_requests(storage, H13, [dict(app="code", route="/complete", input_tokens=100)])
    refresh_requests(storage, [H12, H13])
    rows = {
        (r["app"], r["route"]): r for r in storage.query("select * from cache_by_app").to_dicts()
    }
    support = rows[("support-assistant", "/answer")]
    doc = rows[("doc", "/extract")]
    code = rows[("code", "/complete")]
    assert support["hit_rate"] == pytest.approx(0.6)
    # doc: only the hosted request reports cached tokens: 20 of 200
    assert doc["hit_rate"] == pytest.approx(0.1)
    assert (doc["poor_sharing_rank"], support["poor_sharing_rank"]) == (1, 2)
    assert code["hit_rate"] is None and code["poor_sharing_rank"] is None  # nothing reported
    # saved at chat 12:00's 0.006 / 900 per uncached token: support 600 × = 0.004; doc's
    # cached tokens were hosted: nothing counted
    assert support["prefill_cost_saved"] == pytest.approx(0.004)
    assert doc["prefill_cost_saved"] == 0
    assert doc["input_tokens"] == 700
    between = storage.fetchall(
        "select app from cache_by_app_between(?, ?) order by app", [H13, H13 + HOUR]
    )
    assert between == [("code",)]


# ---------------------------------------------------------------- contracts
def random_history(storage: Storage, scraper: Scraper, seed: int) -> list[datetime]:
    """Three hours of two replicas (one with two engines, restarts, failed scrapes, gaps), a
    dcgm node, and random requests and service calls."""
    rng = random.Random(seed)
    hours = [H11, H12, H13]
    targets = [
        ScrapeTarget("vllm-x", "http://127.0.0.1:1/metrics", 15, 10, "vllm", "dep-1"),
        ScrapeTarget("vllm-y", "http://127.0.0.1:2/metrics", 15, 10, "vllm", "dep-1"),
        ScrapeTarget("vllm-z", "http://127.0.0.1:3/metrics", 15, 10, "vllm", None),
    ]
    for target in targets:
        counters = {k: 0.0 for k in ("queries", "hits", "preemptions", "stop", "length")}
        ts = H11 + timedelta(seconds=rng.randint(0, 59))
        while ts < H13 + HOUR:
            if rng.random() < 0.05:  # restart
                counters = dict.fromkeys(counters, 0.0)
            q = rng.randint(0, 5000)
            counters["queries"] += q
            counters["hits"] += rng.randint(0, q)
            counters["preemptions"] += rng.choice([0, 0, 0, 1, 3])
            counters["stop"] += rng.randint(0, 20)
            counters["length"] += rng.randint(0, 2)
            if rng.random() < 0.05:
                fail(scraper, target, ts)
            else:
                pages = [
                    vllm_page(
                        **counters, prompt=counters["queries"], engine=str(e),
                        kv=rng.choice([0.0, rng.random(), 0.9, 0.95, 1.0]),
                        waiting=rng.choice([0, 0, 1, 4]), running=rng.randint(0, 30),
                    )
                    for e in range(2 if target.name == "vllm-y" else 1)
                ]  # fmt: skip
                text = pages[0] + "".join(p.replace("# TYPE", "# HELP") for p in pages[1:])
                scrape(scraper, target, ts, text)
            ts += timedelta(seconds=rng.choice([30, 60, 60, 60, 200, 400]))
    ts = H11
    while ts < H13 + HOUR:
        scrape(scraper, DCGM, ts, dcgm_page([rng.randint(0, 100) for _ in range(4)]))
        ts += timedelta(seconds=60)
    for hour in hours:
        requests = []
        for _ in range(rng.randint(50, 150)):
            inp = rng.randint(1, 9000)
            requests.append(
                dict(
                    environment=rng.choice(["prod", "staging", None]),
                    app=rng.choice(["a", "b", None]),
                    route=rng.choice(["/answer", "/chat", None]),
                    deployment=rng.choice(["dep-1", "vllm-z"]),
                    failed=rng.random() < 0.05,
                    input_tokens=inp,
                    cached_input_tokens=rng.choice([None, rng.randint(0, inp)]),
                    output_tokens=rng.randint(1, 500),
                    queue_s=rng.choice([0.0, rng.expovariate(10)]),
                    prefill_s=rng.expovariate(5),
                    ttft_s=rng.expovariate(3),
                    decode_s=rng.expovariate(0.2),
                    tpot_s=rng.uniform(0.004, 0.05),
                    e2e_s=rng.expovariate(0.1),
                    prefill_cost=rng.random() / 100,
                    decode_cost=rng.random() / 100,
                )
            )
        insert_requests(storage, hour, requests)
        insert_calls(storage, hour, "tools", [rng.expovariate(4) for _ in range(20)])
    return hours


def assert_unique(storage: Storage, view: str, keys: Sequence[str], not_null: Sequence[str]):
    cols = ", ".join(keys)
    assert storage.scalar(f"select count(*) from {view}") > 0, view
    duplicates = storage.scalar(
        f"select count(*) from (select {cols} from {view} group by all having count(*) > 1)"
    )
    assert duplicates == 0, view
    for key in not_null:
        assert storage.scalar(f"select count(*) from {view} where {key} is null") == 0, (view, key)


def test_view_contracts(storage, scraper):
    hours = random_history(storage, scraper, seed=11)
    refresh_cache(storage, storage.write(lambda cur: dirty_cache_hours(cur, None)))
    refresh_requests(storage, hours)
    seed_slo_targets_if_empty(storage)
    add_target(storage, objective="chat-e2e", route="/chat", stage="e2e", percentile=0.9,
               target_s=20)  # fmt: skip
    add_target(storage, objective="tools", route="/%", stage="tools", percentile=0.9,
               target_s=0.5)  # fmt: skip

    assert_unique(
        storage, "kv_cache_hourly", ["hour", "replica"], ["hour", "replica", "deployment"]
    )
    bad = storage.fetchall(
        """select hour, replica from kv_cache_hourly where not (
            prefix_hits <= prefix_queries
            and (prefix_hit_rate is null or prefix_hit_rate between 0 and 1)
            and kv_bound_s + compute_bound_s <= waiting_s + 1e-6
            and waiting_s <= covered_s + 1e-6
            and kv_high_s <= covered_s + 1e-6
            and covered_s <= 3600 + 1e-6
            and abs(list_sum(kv_usage_hist_s) - covered_s) < 1e-6
            and abs(list_sum(kv_usage_hist_s[91:100]) - kv_high_s) < 1e-6
            and (covered_s = 0 or (kv_usage_p50 <= kv_usage_p90 and kv_usage_p90 <= kv_usage_max
                                   and kv_usage_mean between 0 and 1))
            and preemptions >= 0 and requests_finished >= 0)"""
    )
    assert bad == []
    assert storage.scalar("select sum(kv_bound_s) from kv_cache_hourly") > 0
    assert storage.scalar("select sum(compute_bound_s) from kv_cache_hourly") > 0
    assert storage.scalar("select count(*) from kv_cache_hourly where deployment = 'vllm-z'") > 0

    assert_unique(storage, "cache_efficiency", ["hour", "deployment"], ["hour", "deployment"])
    sums = storage.fetchall(
        "select sum(prefix_queries), sum(prefix_hits), sum(waiting_s), sum(kv_bound_s) "
        "from cache_efficiency"
    )
    assert sums == storage.fetchall(
        "select sum(prefix_queries), sum(prefix_hits), sum(waiting_s), sum(kv_bound_s) "
        "from mart_cache_hourly"
    )
    bad = storage.fetchall(
        """select hour, deployment from cache_efficiency where not (
            coalesce(prefix_hit_rate between 0 and 1, true)
            and coalesce(span_hit_rate between 0 and 1, true)
            and coalesce(kv_bound_s + compute_bound_s <= waiting_s + 1e-6, true)
            and coalesce(kv_usage_p50 <= kv_usage_p90, true)
            and coalesce(gpu_util_mean between 0 and 1, true)
            and coalesce(prefill_cost_saved >= 0, true)
            and coalesce(abs(list_sum(kv_usage_hist_s) - covered_s) < 1e-6, true))"""
    )
    assert bad == []

    assert_unique(
        storage,
        "latency_stages",
        ["hour", "environment", "app", "route", "stage"],
        ["hour", "stage", "count"],
    )
    bad = storage.fetchall(
        "select * from latency_stages where not (count > 0 and min_s <= p50_s "
        "and p50_s <= p95_s and p95_s <= p99_s and p99_s <= max_s)"
    )
    assert bad == []
    # the histogram holds the same observations as the exact mart
    assert storage.fetchall(
        "select stage, sum(count) from mart_latency_buckets group by 1 order by 1"
    ) == storage.fetchall("select stage, sum(count) from latency_stages group by 1 order by 1")
    merged = storage.query("select * from latency_percentiles_over(null, null)")
    assert merged.height == storage.scalar(
        "select count(*) from (select distinct environment, app, route, stage from latency_stages)"
    )
    assert (
        merged.filter(
            ~((merged["p50_s"] <= merged["p95_s"]) & (merged["p95_s"] <= merged["p99_s"]))
        ).height
        == 0
    )

    assert_unique(
        storage,
        "slo_attainment",
        ["day", "objective", "route"],
        ["day", "objective", "route", "target_s", "percentile", "met"],
    )
    bad = storage.fetchall(
        "select * from slo_attainment where not (attained_share between 0 and 1 "
        "and within_target <= requests + 1e-9 and met = (attained_share >= percentile))"
    )
    assert bad == []
    # '/%' matches every route; the tool calls are all on /answer, on one day
    assert storage.fetchall("select route from slo_attainment where objective = 'tools'") == [
        ("/answer",)
    ]

    assert_unique(storage, "cache_by_app", ["app", "route"], ["requests"])
    bad = storage.fetchall(
        "select * from cache_by_app where not (coalesce(hit_rate between 0 and 1, true) "
        "and cached_input_tokens <= cache_reported_input_tokens "
        "and cache_reported_input_tokens <= input_tokens)"
    )
    assert bad == []
    ranks = [
        r[0]
        for r in storage.fetchall(
            "select poor_sharing_rank from cache_by_app "
            "where poor_sharing_rank is not null order by 1"
        )
    ]
    assert ranks[0] == 1


def test_refresh_on_an_empty_database(storage):
    assert refresh_cache(storage, [H12]) == 0
    assert refresh_requests(storage, [H12]) == 0
    assert storage.write(lambda cur: dirty_cache_hours(cur, None)) == []


def test_shipped_targets_file_is_valid():
    targets = load_slo_targets(
        Path(__file__).resolve().parent.parent / "models/data/slo_targets.yaml"
    )
    assert all(0 < t.percentile <= 1 and t.target_s > 0 for t in targets)
