"""Contracts of the metric views and macros, on hand-computed cases.

Scrapes are replayed through Scraper.ingest_text (the same parse-and-store path as a live
scrape) into a real DuckDB file; every expected number is worked out in the comments.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from inferledger.core.settings import ScrapeTarget
from inferledger.core.storage import Storage
from ingest.scraper import Scraper

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
STEP = timedelta(seconds=15)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SERIES = f'engine="0",model_name="{MODEL}"'
# vLLM's default buckets for vllm:e2e_request_latency_seconds (reference section 1c).
E2E_BUCKETS = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480)
E2E_BUCKETS += (960, 1920, 7680)
E2E = "vllm:e2e_request_latency_seconds"
TEXT = "text/plain; version=0.0.4; charset=utf-8"
VLLM = ScrapeTarget("vllm-a", "http://127.0.0.1:8000/metrics", 15, 10, "vllm", "chat-prod")


@pytest.fixture
def storage(tmp_path):
    with Storage(tmp_path / "views.duckdb") as store:
        yield store


@pytest.fixture
def scraper(storage):
    return Scraper(storage, None, max_bytes=1 << 20)


def histogram_text(family: str, observations: Sequence[float], bounds: Sequence[float]) -> str:
    """A classic-format histogram as prometheus_client writes it, from raw observations."""
    lines = [f"# HELP {family} test histogram", f"# TYPE {family} histogram"]
    for bound in bounds:
        count = sum(1 for x in observations if x <= bound)
        lines.append(
            f'{family}_bucket{{engine="0",le="{float(bound)}",model_name="{MODEL}"}} {float(count)}'
        )
    lines.append(
        f'{family}_bucket{{engine="0",le="+Inf",model_name="{MODEL}"}} {float(len(observations))}'
    )
    lines.append(f"{family}_count{{{SERIES}}} {float(len(observations))}")
    lines.append(f"{family}_sum{{{SERIES}}} {float(sum(observations))}")
    return "\n".join(lines) + "\n"


def counter_text(name: str, value: float) -> str:
    return f"# HELP {name} test counter\n# TYPE {name} counter\n{name}{{{SERIES}}} {value}\n"


def replay(scraper: Scraper, texts: Sequence[str], target: ScrapeTarget = VLLM) -> None:
    for i, text in enumerate(texts):
        result = scraper.ingest_text(target, text, TEXT, T0 + i * STEP)
        assert result.up, result.error


# ---------------------------------------------------------------- counters
def test_counter_increase_follows_prometheus_reset_rule(storage, scraper):
    # prompt tokens 100 → 150 → 150 → (vLLM restarted) 30 → 80
    replay(scraper, [counter_text("vllm:prompt_tokens_total", v) for v in (100, 150, 150, 30, 80)])
    rows = storage.fetchall(
        "select interval_start, interval_end, start_value, end_value, reset, increase, "
        "interval_s, rate_per_s from metric_counter_increases "
        "where metric = 'vllm:prompt_tokens_total' order by interval_end"
    )
    assert [r[5] for r in rows] == [50, 0, 30, 50]  # the drop counts as the new value, 30
    assert [r[4] for r in rows] == [False, False, True, False]
    assert [(r[0], r[1]) for r in rows] == [(T0 + i * STEP, T0 + (i + 1) * STEP) for i in range(4)]
    assert all(r[6] == 15 for r in rows)
    assert [r[7] for r in rows] == pytest.approx([50 / 15, 0, 30 / 15, 50 / 15])
    assert sum(r[5] for r in rows) == 130  # 50 before the restart + 80 after it


def test_counter_increases_contract(storage, scraper):
    rng = random.Random(7)
    texts = []
    for i in range(12):
        value = rng.randint(0, 50) if i % 5 == 4 else 100 * i + rng.randint(0, 99)
        texts.append(
            counter_text("vllm:generation_tokens_total", value)
            + histogram_text(E2E, [rng.random() * 3 for _ in range(i * 3)], E2E_BUCKETS)
        )
    replay(scraper, texts)
    duplicates = storage.scalar(
        "select count(*) from (select target, metric, series_key, le, interval_end "
        "from metric_counter_increases group by all having count(*) > 1)"
    )
    assert duplicates == 0
    assert storage.scalar("select min(increase) from metric_counter_increases") >= 0
    assert (
        storage.scalar(
            "select count(*) from metric_counter_increases "
            "where target is null or metric is null or interval_start is null or increase is null"
        )
        == 0
    )
    # one pair per consecutive scrape for each of the 1 + 22 buckets + _sum + _count series
    assert storage.scalar("select count(*) from metric_counter_increases") == 11 * (1 + 22 + 2)
    # gauges and info metrics never show up as counters
    assert (
        storage.scalar(
            "select count(*) from metric_counter_increases "
            "where type not in ('counter', 'histogram')"
        )
        == 0
    )


# ---------------------------------------------------------------- histogram quantiles
def e2e_scrapes() -> list[str]:
    """Cumulative observations at five scrapes, vLLM restarting before the fifth."""
    first = [0.6, 0.7] + [0.9] * 6 + [1.2, 1.4]  # 2 in (0.5,0.8], 6 in (0.8,1], 2 in (1,1.5]
    second = [*first, 0.1, 10_000]  # one in the first bucket, one above every finite bound
    after_restart = [0.6]
    observed = [[], first, second, second, after_restart]
    return [histogram_text(E2E, obs, E2E_BUCKETS) for obs in observed]


def test_histogram_quantiles_per_interval(storage, scraper):
    replay(scraper, e2e_scrapes())
    rows = storage.fetchall(
        "select interval_end, observations, p50, p95, p99, labels, series_key "
        "from metric_histogram_quantiles where family = ? order by interval_end",
        [E2E],
    )
    by_end = {r[0]: r[1:] for r in rows}
    assert len(rows) == 4
    # interval 1: 10 observations. p50: rank 5 lies in (0.8, 1] holding 6 (2 below):
    # 0.8 + 0.2 * (5 - 2) / 6 = 0.9; p95: rank 9.5 in (1, 1.5] holding 2 (8 below):
    # 1 + 0.5 * 1.5 / 2 = 1.375; p99: 1 + 0.5 * 1.9 / 2 = 1.475
    obs, p50, p95, p99, labels, key = by_end[T0 + STEP]
    assert (obs, p50, p95, p99) == (10, pytest.approx(0.9), pytest.approx(1.375), 1.475)
    assert labels == {"engine": "0", "model_name": MODEL}  # le is gone
    assert key == SERIES
    # interval 2: 0.1 and 10000. p50: rank 1 in the first bucket [0, 0.3]: 0.3 * 1/1 = 0.3;
    # p95, p99: rank 1.9 / 1.98 is only reached by +Inf: the last finite bound, 7680
    assert by_end[T0 + 2 * STEP][:4] == (2, pytest.approx(0.3), 7680, 7680)
    # interval 3: nothing observed: no quantile (Prometheus: NaN)
    assert by_end[T0 + 3 * STEP][:4] == (0, None, None, None)
    # interval 4: vLLM restarted and observed 0.6; every bucket dropped, so each increase is
    # the new count. p50: rank 0.5 in (0.5, 0.8] holding 1: 0.5 + 0.3 * 0.5 = 0.65
    assert by_end[T0 + 4 * STEP][:2] == (1, pytest.approx(0.65))


def test_histogram_quantile_over_a_window(storage, scraper):
    replay(scraper, e2e_scrapes())

    def over(q: float, start: datetime, end: datetime) -> list[tuple]:
        return storage.fetchall(
            "select target, series_key, labels, quantile, observations, window_start, window_end "
            "from histogram_quantile_over(?, ?, ?, ?)",
            [E2E, q, start, end],
        )

    # intervals ending in (T0, T0+3·STEP]: the 12 observations of intervals 1-3.
    # cumulative: 0.3→1, 0.5→1, 0.8→3, 1→9, 1.5→11, … 7680→11, +Inf→12
    (row,) = over(0.5, T0, T0 + 3 * STEP)  # rank 6 in (0.8, 1]: 0.8 + 0.2 * (6-3)/(9-3)
    assert row[0] == "vllm-a"
    assert row[1] == SERIES
    assert row[2] == {"engine": "0", "model_name": MODEL}
    assert row[3] == pytest.approx(0.9)
    assert row[4] == 12
    assert (row[5], row[6]) == (T0, T0 + 3 * STEP)
    assert over(0.25, T0, T0 + 3 * STEP)[0][3] == pytest.approx(0.8)  # rank 3 = top of (0.5,0.8]
    assert over(0.95, T0, T0 + 3 * STEP)[0][3] == 7680  # rank 11.4 > 11: last finite bound
    assert over(1.5, T0, T0 + 3 * STEP)[0][3] == math.inf
    assert over(-0.1, T0, T0 + 3 * STEP)[0][3] == -math.inf
    # consecutive windows split the intervals exactly: (T0, T0+STEP] holds interval 1 only
    assert over(0.5, T0, T0 + STEP)[0][3:5] == (pytest.approx(0.9), 10)
    assert over(0.5, T0 + 3 * STEP, T0 + 4 * STEP)[0][3:5] == (pytest.approx(0.65), 1)
    assert over(0.5, T0 + 10 * STEP, T0 + 20 * STEP) == []
    assert over(0.5, T0, T0 + 4 * STEP)[0][4] == 13  # 12 + the one after the restart


def reference_quantile(q: float, bounds: Sequence[float], counts: Sequence[float]) -> float | None:
    """Prometheus's bucketQuantile (promql/quantile.go), written out in Python; None for NaN."""
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if len(bounds) < 2 or not math.isinf(bounds[-1]):
        return None
    fixed = [max(counts[: i + 1]) for i in range(len(counts))]  # ensureMonotonic
    observations = fixed[-1]
    if observations == 0:
        return None
    rank = q * observations
    b = bisect.bisect_left(fixed[:-1], rank)  # sort.Search over all but the +Inf bucket
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], fixed[b]
    if b > 0:
        start = bounds[b - 1]
        count -= fixed[b - 1]
        rank -= fixed[b - 1]
    return start + (end - start) * rank / count if count else None


def test_histogram_quantile_matches_prometheus_reference(storage, scraper):
    rng = random.Random(20260105)
    bounds = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, math.inf]
    cases = []
    for i in range(40):
        target = ScrapeTarget(f"engine-{i}", "http://127.0.0.1:1/metrics", 15, 10, "vllm")
        observations = [rng.expovariate(8) for _ in range(rng.choice([0, 1, 2, 5, 40, 300]))]
        text = histogram_text("vllm:inter_token_latency_seconds", observations, bounds[:-1])
        empty = histogram_text("vllm:inter_token_latency_seconds", [], bounds[:-1])
        replay(scraper, [empty, text], target)
        counts = [float(sum(1 for x in observations if x <= b)) for b in bounds]
        cases.append((target.name, counts))
    for q in (0.0, 0.01, 0.5, 0.9, 0.95, 0.99, 1.0):
        got = dict(
            storage.fetchall(
                "select target, quantile from histogram_quantile_over(?, ?, ?, ?)",
                ["vllm:inter_token_latency_seconds", q, T0, T0 + STEP],
            )
        )
        for name, counts in cases:
            expected = reference_quantile(q, bounds, counts)
            assert got[name] == (None if expected is None else pytest.approx(expected)), (q, name)


# ---------------------------------------------------------------- renamed metrics
def test_old_metric_names_map_to_current_ones(storage, scraper):
    # vLLM 0.8 names: gpu_cache_usage_perc, gpu_prefix_cache_*, time_per_output_token_seconds
    old = (
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        f"vllm:gpu_cache_usage_perc{{{SERIES}}} 0.25\n"
        + counter_text("vllm:gpu_prefix_cache_queries_total", 1000)
        + counter_text("vllm:gpu_prefix_cache_hits_total", 400)
    )
    itl = [0.02, 0.03, 0.04, 0.06]
    texts = [
        old + histogram_text("vllm:time_per_output_token_seconds", [], (0.025, 0.05, 0.075)),
        old.replace("1000", "2000").replace("400", "1000")
        + histogram_text("vllm:time_per_output_token_seconds", itl, (0.025, 0.05, 0.075)),
    ]
    replay(scraper, texts)
    rows = storage.fetchall(
        "select exported_metric, metric, family from stg_metric_samples "
        "where ts = ? and le is null order by exported_metric",
        [T0],
    )
    assert rows == [
        ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc"),
        (
            "vllm:gpu_prefix_cache_hits_total",
            "vllm:prefix_cache_hits_total",
            "vllm:prefix_cache_hits",
        ),
        (
            "vllm:gpu_prefix_cache_queries_total",
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_queries",
        ),
        (
            "vllm:time_per_output_token_seconds_count",
            "vllm:inter_token_latency_seconds_count",
            "vllm:inter_token_latency_seconds",
        ),
        (
            "vllm:time_per_output_token_seconds_sum",
            "vllm:inter_token_latency_seconds_sum",
            "vllm:inter_token_latency_seconds",
        ),
    ]
    # the hit rate over the renamed counters: (1000-400) / (2000-1000)
    hit_rate = storage.scalar(
        "select sum(increase) filter (where family = 'vllm:prefix_cache_hits') "
        "/ sum(increase) filter (where family = 'vllm:prefix_cache_queries') "
        "from metric_counter_increases"
    )
    assert hit_rate == pytest.approx(0.6)
    # the quantile is asked for under the current name: rank 2 in (0.025, 0.05] holding 2
    # (1 below): 0.025 + 0.025 * (2 - 1) / 2 = 0.0375
    (quantile,) = storage.fetchall(
        "select quantile from histogram_quantile_over(?, 0.5, ?, ?)",
        ["vllm:inter_token_latency_seconds", T0, T0 + STEP],
    )[0]
    assert quantile == pytest.approx(0.0375)


def test_old_and_new_name_in_one_scrape_count_once(storage, scraper):
    # vLLM 0.9/0.10 export both names during the deprecation window
    both = (
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        f"vllm:gpu_cache_usage_perc{{{SERIES}}} 0.25\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{SERIES}}} 0.5\n"
        + counter_text("vllm:gpu_prefix_cache_queries_total", 100)
        + counter_text("vllm:prefix_cache_queries_total", 100)
    )
    replay(scraper, [both, both.replace(" 100\n", " 300\n")])
    usage = storage.fetchall(
        "select exported_metric, value from stg_metric_samples "
        "where metric = 'vllm:kv_cache_usage_perc' and ts = ?",
        [T0],
    )
    assert usage == [("vllm:kv_cache_usage_perc", 0.5)]
    assert (
        storage.scalar(
            "select sum(increase) from metric_counter_increases "
            "where metric = 'vllm:prefix_cache_queries_total'"
        )
        == 200
    )


def test_an_alias_is_data(storage, scraper):
    storage.execute_write(
        "insert into metric_name_aliases (old_name, new_name, note) values (?, ?, ?)",
        ["DCGM_FI_DEV_GPU_UTILIZATION", "DCGM_FI_DEV_GPU_UTIL", "a renamed exporter metric"],
    )
    replay(
        scraper,
        ['# TYPE DCGM_FI_DEV_GPU_UTILIZATION gauge\nDCGM_FI_DEV_GPU_UTILIZATION{gpu="0"} 87\n'],
    )
    assert storage.fetchall("select metric, family, value from stg_metric_samples") == [
        ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL", 87.0)
    ]


# ---------------------------------------------------------------- scrape health and replay
def test_scrape_health_shows_latest_scrape_per_target(storage, scraper):
    dcgm = ScrapeTarget("dcgm-a", "http://127.0.0.1:9400/metrics", 15, 10, "dcgm")
    replay(scraper, [counter_text("vllm:prompt_tokens_total", 1)] * 2)
    scraper.ingest_text(VLLM, "<html>oops</html>", "text/html", T0 + 2 * STEP)
    scraper.ingest_text(VLLM, "<html>oops</html>", "text/html", T0 + 3 * STEP)
    scraper.ingest_text(dcgm, 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 50\n', TEXT, T0)
    rows = storage.query("select * from scrape_health order by target").to_dicts()
    assert [r["target"] for r in rows] == ["dcgm-a", "vllm-a"]
    dcgm_row, vllm_row = rows
    assert dcgm_row["up"] is True and dcgm_row["consecutive_failures"] == 0
    assert dcgm_row["samples"] == 1 and dcgm_row["kind"] == "dcgm"
    assert vllm_row["up"] is False
    assert vllm_row["last_scrape_ts"] == T0 + 3 * STEP
    assert vllm_row["last_success_ts"] == T0 + STEP
    assert vllm_row["consecutive_failures"] == 2
    assert vllm_row["samples"] == 0
    assert vllm_row["deployment"] == "chat-prod"
    assert vllm_row["error"].startswith("not valid Prometheus text format")


def test_replaying_a_scrape_twice_stores_it_once(storage, scraper):
    text = counter_text("vllm:prompt_tokens_total", 5)
    assert scraper.ingest_text(VLLM, text, TEXT, T0).up
    again = scraper.ingest_text(VLLM, text, TEXT, T0)
    assert not again.up
    assert again.error.startswith("not stored:")
    assert storage.scalar("select count(*) from metric_samples") == 1
    assert storage.scalar("select count(*) from scrapes") == 1
