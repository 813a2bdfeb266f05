"""`vllm bench serve`-style summary of simulation results, and the workload helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.serving import (
    AffineStepTimePredictor,
    CacheConfig,
    Cluster,
    ClusterConfig,
    ReplicaConfig,
    RequestSpec,
    SimulationOptions,
    arrival_times,
    format_benchmark_result,
    random_workload,
    summarize,
)
from models.serving.summary import weighted_percentile


def run(specs, **kw):
    config = ClusterConfig(ReplicaConfig(CacheConfig(5000)), **kw)
    predictor = AffineStepTimePredictor(
        base_s=0.010, per_prefill_token_s=1e-4, per_decode_seq_s=1e-3
    )
    return Cluster(config, predictor, SimulationOptions(debug_checks=True)).run(specs)


def test_weighted_percentile_equals_percentile_of_the_expanded_array():
    rng = np.random.default_rng(0)
    values = rng.random(50)
    weights = rng.integers(1, 6, size=50)
    expanded = np.repeat(values, weights)
    for q in (0, 1, 37.5, 50, 95, 99, 100):
        assert weighted_percentile(values, weights, q) == pytest.approx(np.percentile(expanded, q))


def test_summary_of_the_hand_worked_case():
    specs = [
        RequestSpec("a", 0.0, (("pa", 100),), 6, max_tokens=6),
        RequestSpec("b", 0.015, (("pb", 50),), 2, max_tokens=2),
        RequestSpec("c", 0.2, (("pc", 10),), 1, max_tokens=1),  # excluded from TPOT
        RequestSpec("d", 0.3, (("pd", 10),), 1, max_tokens=1000),
    ]
    config = ClusterConfig(ReplicaConfig(CacheConfig(5000), _small_model_len()))
    predictor = AffineStepTimePredictor(
        base_s=0.010, per_prefill_token_s=1e-4, per_decode_seq_s=1e-3
    )
    result = Cluster(config, predictor).run(specs)
    s = summarize(result, percentiles=(50, 99))
    assert s["completed"] == 3 and s["failed"] == 1  # d asks for more than max_model_len
    assert s["total_input_tokens"] == 160 and s["total_output_tokens"] == 9
    # a, b as in the hand-worked simulator test; c prefills alone in [0.2, 0.211)
    assert s["duration"] == pytest.approx(0.3)  # d's rejection at 0.3 ends the run
    assert s["mean_ttft_ms"] == pytest.approx((20 + 21 + 11) / 3)
    assert s["mean_tpot_ms"] == pytest.approx(((81 - 20) / 5 + (48 - 36) / 1) / 2)
    assert s["mean_e2el_ms"] == pytest.approx((81 + 33 + 11) / 3)
    assert s["median_ttft_ms"] == pytest.approx(20)
    assert s["request_throughput"] == pytest.approx(3 / 0.3)
    # ITL: a's gaps 16, 12, 11, 11, 11 ms and b's 12 ms
    itl = np.array([16, 12, 11, 11, 11, 12])
    assert s["mean_itl_ms"] == pytest.approx(itl.mean())
    assert s["std_itl_ms"] == pytest.approx(itl.std())
    assert s["p99_itl_ms"] == pytest.approx(np.percentile(itl, 99))
    assert s["max_concurrent_requests"] == 3  # active during second 0, as bench serve counts
    for key in (
        "request_goodput",
        "output_throughput",
        "total_token_throughput",
        "max_output_tokens_per_s",
        "mean_kv_cache_usage",
        "p95_kv_cache_usage",
        "max_kv_cache_usage",
        "num_preemptions",
        "prefix_cache_hit_rate",
    ):
        assert key in s


def _small_model_len():
    from models.serving import SchedulerConfig

    return SchedulerConfig(max_model_len=500)


def test_format_matches_the_vllm_bench_serve_layout():
    specs = random_workload(
        np.random.default_rng(0), num_prompts=20, input_len=50, output_len=10, request_rate=10
    )
    text = format_benchmark_result(summarize(run(specs)), max_concurrency=4, request_rate=10)
    lines = text.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert lines[1].startswith("Successful requests:") and lines[1][41:].strip() == "20"
    assert lines[2].startswith("Failed requests:")
    assert lines[3].startswith("Maximum request concurrency:")
    assert lines[4].startswith("Request rate configured (RPS):")
    assert "---------------Time to First Token----------------" in lines
    assert "-----Time per Output Token (excl. 1st token)------" in lines
    assert "---------------Inter-token Latency----------------" in lines
    assert lines[-1] == "=" * 50
    assert all(len(line) >= 50 for line in lines)
    assert any(line.startswith("P99 ITL (ms):") for line in lines)


def test_arrival_times_poisson_and_burst():
    rng = np.random.default_rng(0)
    times = arrival_times(rng, 20_000, request_rate=50.0)
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0)
    assert 20_000 / times[-1] == pytest.approx(50.0, rel=0.03)
    assert np.all(arrival_times(rng, 5, math.inf, start_s=3.0) == 3.0)


def test_random_workload_shares_one_prefix_and_respects_ranges():
    specs = random_workload(
        np.random.default_rng(2),
        num_prompts=500,
        input_len=100,
        output_len=40,
        range_ratio=0.5,
        prefix_len=30,
        request_rate=5,
    )
    assert all(s.prompt[0] == ("random-prefix", 30) for s in specs)
    own = [s.prompt[1][1] for s in specs]
    assert min(own) >= 50 and max(own) <= 150
    assert all(20 <= s.output_tokens <= 60 and s.max_tokens == s.output_tokens for s in specs)
    assert len({s.prompt[1][0] for s in specs}) == 500
    again = random_workload(
        np.random.default_rng(2),
        num_prompts=500,
        input_len=100,
        output_len=40,
        range_ratio=0.5,
        prefix_len=30,
        request_rate=5,
    )
    assert specs == again
