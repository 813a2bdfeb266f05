"""The vLLM V1 serving simulator: hand-worked cases, prefix caching, eviction, preemption,
invariants, determinism.

Step times come from AffineStepTimePredictor, a closed-form stand-in for the calibrated
predictor (an edge test double of the ExecutionTimePredictor interface): with it, every
timestamp below can be worked out by hand.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from models.execution_time import ExecutionTimePredictor
from models.serving import (
    AffineStepTimePredictor,
    CacheConfig,
    Cluster,
    ClusterConfig,
    FinishReason,
    ReplicaConfig,
    RequestSpec,
    RouterPolicy,
    SchedulerConfig,
    SimulationOptions,
    random_workload,
)

DEBUG = SimulationOptions(debug_checks=True, sample_interval_s=0.1)


def cluster(
    num_gpu_blocks: int = 10_000,
    *,
    predictor: ExecutionTimePredictor | None = None,
    num_replicas: int = 1,
    router: RouterPolicy = RouterPolicy.ROUND_ROBIN,
    options: SimulationOptions = DEBUG,
    prefix_caching: bool = True,
    **scheduler: int,
) -> Cluster:
    config = ClusterConfig(
        ReplicaConfig(
            CacheConfig(num_gpu_blocks, enable_prefix_caching=prefix_caching),
            SchedulerConfig(**scheduler),
        ),
        num_replicas=num_replicas,
        router=router,
    )
    return Cluster(config, predictor or AffineStepTimePredictor(base_s=0.010), options)


def spec(
    rid: str, t: float, prompt: tuple[tuple[str, int], ...], out: int, **kw: object
) -> RequestSpec:
    return RequestSpec(rid, t, prompt, out, max_tokens=kw.pop("max_tokens", out), **kw)


def by_id(result):
    return {r.request_id: r for r in result.requests}


# -- hand-worked timing --------------------------------------------------------------------


def test_two_requests_hand_worked_timestamps():
    # step time = 10 ms + 0.1 ms per prefill token + 1 ms per decoding sequence
    pred = AffineStepTimePredictor(base_s=0.010, per_prefill_token_s=1e-4, per_decode_seq_s=1e-3)
    specs = [
        spec("a", 0.0, (("pa", 100),), 6, context={"trace": "a"}),
        spec("b", 0.015, (("pb", 50),), 2),
    ]
    result = cluster(predictor=pred).run(specs)
    a, b = by_id(result)["a"], by_id(result)["b"]
    # step 1 [0, .020): a prefills 100 tokens (b arrives at .015 and waits for the next step)
    # step 2 [.020, .036): a decodes, b prefills 50     -> b's first token at .036
    # step 3 [.036, .048): a and b decode                -> b done (2 tokens)
    # steps 4-6 [.048, .081): a decodes alone, 11 ms each -> a done (6 tokens)
    assert a.first_scheduled_s == 0.0
    assert a.first_token_s == pytest.approx(0.020)
    assert a.finished_s == pytest.approx(0.081)
    assert b.arrival_s == b.queued_s == 0.015
    assert b.first_scheduled_s == pytest.approx(0.020)
    assert b.first_token_s == pytest.approx(0.036)
    assert b.finished_s == pytest.approx(0.048)
    assert (a.output_tokens, b.output_tokens) == (6, 2)
    assert a.finish_reason is b.finish_reason is FinishReason.LENGTH
    assert a.context == {"trace": "a"} and b.context is None
    assert a.tpot_s == pytest.approx((0.081 - 0.020) / 5)
    # GPU time shares: each step split by tokens contributed
    assert a.gpu_prefill_s == pytest.approx(0.020)
    assert b.gpu_prefill_s == pytest.approx(0.016 * 50 / 51)
    assert a.gpu_decode_s == pytest.approx(0.016 / 51 + 0.012 / 2 + 0.033)
    assert b.gpu_decode_s == pytest.approx(0.012 / 2)
    rep = result.replicas[0]
    assert rep.gpu_busy_s == pytest.approx(0.081)
    assert rep.counters.num_steps == 6
    assert rep.counters.prompt_tokens == 150
    assert rep.counters.generation_tokens == 8
    assert list(rep.steps.steps) == [1, 1, 1, 3]  # the last three steps ran as one stretch
    assert result.end_s == pytest.approx(0.081)


def test_fast_forward_matches_step_by_step():
    pred = AffineStepTimePredictor(
        base_s=0.006, per_decode_seq_s=2e-5, per_context_token_s=4e-8, per_prefill_token_s=3e-5
    )
    specs = random_workload(
        np.random.default_rng(3),
        num_prompts=150,
        input_len=300,
        output_len=60,
        range_ratio=0.9,
        prefix_len=40,
        request_rate=100,
    )
    fast = cluster(
        200, predictor=pred, num_replicas=2, max_num_seqs=24, max_num_batched_tokens=512
    ).run(specs)
    slow_options = SimulationOptions(debug_checks=True, max_fast_forward_steps=1)
    slow = cluster(
        200,
        predictor=pred,
        num_replicas=2,
        max_num_seqs=24,
        max_num_batched_tokens=512,
        options=slow_options,
    ).run(specs)
    assert sum(r.counters.num_preemptions for r in fast.replicas) > 0  # the cache is tight
    assert len(fast.requests) == len(slow.requests) == 150
    for f, s in zip(fast.requests, slow.requests, strict=True):
        assert (f.request_id, f.output_tokens, f.cached_tokens, f.num_preemptions) == (
            s.request_id,
            s.output_tokens,
            s.cached_tokens,
            s.num_preemptions,
        )
        assert f.finished_s == pytest.approx(s.finished_s, abs=1e-9)
        assert f.first_token_s == pytest.approx(s.first_token_s, abs=1e-9)
        assert f.gpu_time_s == pytest.approx(s.gpu_time_s, abs=1e-9)
    assert sum(len(r.steps.steps) for r in fast.replicas) < sum(
        len(r.steps.steps) for r in slow.replicas
    )


def test_chunked_prefill_splits_a_long_prompt_by_the_token_budget():
    pred = AffineStepTimePredictor(base_s=0.01, per_prefill_token_s=1e-5)
    result = cluster(predictor=pred).run([spec("long", 0.0, (("p", 20_000),), 2)])
    log = result.replicas[0].steps
    assert list(log.prefill_tokens[:3]) == [8192, 8192, 20_000 - 2 * 8192]
    rec = result.requests[0]
    assert rec.first_token_s == pytest.approx(3 * 0.01 + 20_000 * 1e-5)


# -- prefix caching ------------------------------------------------------------------------


def test_requests_sharing_a_system_prompt_hit_after_the_first():
    specs = [spec(f"r{i}", i * 1.0, (("system", 100), (f"user{i}", 50)), 3) for i in range(5)]
    result = cluster().run(specs)
    cached = [r.cached_tokens for r in result.requests]
    assert cached == [0] + [100 // 16 * 16] * 4
    counters = result.replicas[0].counters
    assert counters.prefix_cache_queries == 5 * 150
    assert counters.prefix_cache_hits == 4 * 96
    assert counters.prompt_tokens_cached == 4 * 96
    # cache hits are not computed again
    assert result.replicas[0].counters.prefill_computed_tokens == 5 * 150 - 4 * 96


def test_requests_scheduled_in_the_same_step_share_the_prefix():
    # vLLM registers a prompt's full blocks when they are scheduled, so the second request of
    # the same step already hits them.
    specs = [spec(f"r{i}", 0.0, (("system", 64), (f"u{i}", 10)), 2) for i in range(3)]
    result = cluster().run(specs)
    assert [r.cached_tokens for r in result.requests] == [0, 64, 64]
    assert result.replicas[0].steps.prefill_tokens[0] == 74 + 10 + 10


def test_the_last_prompt_token_is_never_a_cache_hit():
    specs = [spec("a", 0.0, (("p", 96),), 1), spec("b", 1.0, (("p", 96),), 1)]
    result = cluster().run(specs)
    assert by_id(result)["b"].cached_tokens == (96 - 1) // 16 * 16


def test_segments_must_match_in_key_and_length():
    specs = [
        spec("a", 0.0, (("sys", 40), ("x", 40)), 1),
        spec("b", 1.0, (("sys", 40), ("y", 40)), 1),  # same first segment only
        spec("c", 2.0, (("sys", 41), ("x", 40)), 1),  # different length: nothing shared
        spec("d", 3.0, (("sys", 40), ("x", 40), ("z", 40)), 1),  # extends a
    ]
    cached = {r.request_id: r.cached_tokens for r in cluster().run(specs).requests}
    assert cached == {"a": 0, "b": 32, "c": 0, "d": 80}


def test_prefix_caching_off_never_hits():
    specs = [spec(f"r{i}", i * 1.0, (("system", 100), (f"u{i}", 5)), 2) for i in range(3)]
    result = cluster(prefix_caching=False).run(specs)
    assert [r.cached_tokens for r in result.requests] == [0, 0, 0]
    assert result.replicas[0].counters.prefix_cache_queries == 0


def test_lru_eviction_evicts_the_least_recently_used_prefix_first():
    # 20 blocks. a, b, c run one after another, each holding 8 blocks: its 96-token prefix
    # (6 blocks) + 32 own tokens (2 blocks), freed (tail first) when it finishes. c needed 8
    # blocks: the 4 never used, then a's own 2 and the last 2 of a's prefix.
    specs = [
        spec(name, t, ((f"prefix-{p}", 96), (name, 32)), 1)
        for name, p, t in [("a", "A", 0.0), ("b", "B", 1.0), ("c", "C", 2.0)]
    ]
    # Probes: just a prefix (the last block is recomputed, so at most 80 tokens hit).
    specs += [
        spec("probe-A", 3.0, (("prefix-A", 96),), 1),
        spec("probe-B", 4.0, (("prefix-B", 96),), 1),
        spec("probe-C", 5.0, (("prefix-C", 96),), 1),
    ]
    result = cluster(20).run(specs)
    cached = {r.request_id: r.cached_tokens for r in result.requests}
    assert cached["probe-A"] == 4 * 16  # the least recently used prefix lost 2 blocks
    assert cached["probe-B"] == cached["probe-C"] == 80  # intact
    assert result.replicas[0].peak_kv_cache_usage <= 1.0


def test_a_freed_prefix_survives_until_its_space_is_needed():
    specs = [spec(f"r{i}", i * 1.0, (("sys", 320), (f"u{i}", 16)), 1) for i in range(3)]
    result = cluster(22).run(specs)
    assert [r.cached_tokens for r in result.requests] == [0, 320, 320]


# -- preemption ----------------------------------------------------------------------------


def test_preemption_by_recompute_when_the_cache_runs_out():
    # 10 blocks; two 32-token prompts generating 100 tokens each need 9 blocks each at the end.
    specs = [spec("r1", 0.0, (("p1", 32),), 100), spec("r2", 0.0, (("p2", 32),), 100)]
    result = cluster(10).run(specs)
    r1, r2 = by_id(result)["r1"], by_id(result)["r2"]
    assert (r1.num_preemptions, r2.num_preemptions) == (0, 1)  # the last admitted goes
    assert r1.output_tokens == r2.output_tokens == 100
    assert r1.recomputed_tokens == 0 and r2.recomputed_tokens > 0
    assert r2.finished_s > r1.finished_s
    counters = result.replicas[0].counters
    assert counters.num_preemptions == 1
    # r2 was preempted when both needed a 6th block: after its first token and 48 decode steps
    # it held 32 + 48 = 80 computed tokens, and asks again for 32 + 49 = 81 tokens.
    assert counters.preempted_prefix_cache_queries == 81
    assert len(result.replicas[0].resume_gaps_s) == 1


def test_requests_that_can_never_fit_are_rejected_with_error():
    specs = [
        spec("too-long", 0.0, (("p", 100),), 10, max_tokens=40),
        spec("too-big-for-cache", 0.0, (("q", 200),), 10),
        spec("fine", 0.0, (("r", 50),), 10),
    ]
    result = cluster(10, max_model_len=128).run(specs)
    reasons = {r.request_id: r.finish_reason for r in result.requests}
    assert reasons == {
        "too-long": FinishReason.ERROR,
        "too-big-for-cache": FinishReason.ERROR,
        "fine": FinishReason.LENGTH,
    }
    assert result.replicas[0].counters.request_success_error == 2


def test_finish_reason_stop_when_output_is_below_max_tokens():
    result = cluster().run(
        [
            RequestSpec("s", 0.0, (("p", 10),), 5, max_tokens=50),
            RequestSpec("n", 0.0, (("q", 10),), 5),
        ]
    )
    assert {r.finish_reason for r in result.requests} == {FinishReason.STOP}


def test_a_capped_long_prefill_shares_each_step_with_the_decoders():
    specs = [spec("long", 0.0, (("L", 600),), 5)]
    specs += [spec(f"s{i}", 0.0, ((f"s{i}", 1),), 30) for i in range(7)]
    kw = dict(max_num_seqs=8, max_num_batched_tokens=32, long_prefill_token_threshold=24)
    result = cluster(**kw).run(specs)
    log = result.replicas[0].steps
    # step 1: 24 tokens of "long" + the 7 one-token prompts; then 24 + 7 decode tokens a step
    assert (log.prefill_tokens[0], log.num_decode[0]) == (24 + 7, 0)
    assert list(log.prefill_tokens[1:25]) == [24] * 24
    assert list(log.num_decode[1:25]) == [7] * 24
    records = by_id(result)
    assert records["long"].first_token_s == pytest.approx(25 * 0.010)  # 600 / 24 steps
    assert records["long"].finished_s == pytest.approx(29 * 0.010)
    assert records["s0"].finished_s == pytest.approx(30 * 0.010)
    _assert_conservation(result)


# -- invariants ----------------------------------------------------------------------------


def _assert_conservation(result):
    steps_tokens = sum(int(rep.counters.iteration_tokens) for rep in result.replicas)
    assert steps_tokens == sum(r.computed_tokens for r in result.requests)
    for r in result.requests:
        if r.succeeded:
            assert r.recomputed_tokens >= 0
            if r.num_preemptions == 0:
                assert r.recomputed_tokens == 0
    produced = sum(rep.counters.generation_tokens for rep in result.replicas)
    assert produced == sum(r.output_tokens for r in result.requests)
    prompt = sum(rep.counters.prompt_tokens for rep in result.replicas)
    assert prompt == sum(r.prompt_tokens for r in result.requests if r.first_token_s is not None)


@pytest.mark.parametrize(
    ("blocks", "caching", "router", "kw"),
    [
        (60_000, True, RouterPolicy.ROUND_ROBIN, {}),
        (300, True, RouterPolicy.LEAST_OUTSTANDING_REQUESTS, {}),
        (300, False, RouterPolicy.ROUND_ROBIN, {}),
        (
            200,
            True,
            RouterPolicy.ROUND_ROBIN,
            dict(max_num_seqs=16, max_num_batched_tokens=256, long_prefill_token_threshold=64),
        ),
    ],
)
def test_invariants_on_random_workloads(blocks, caching, router, kw):
    pred = AffineStepTimePredictor(
        base_s=0.005, per_decode_seq_s=1e-5, per_context_token_s=2e-8, per_prefill_token_s=2e-5
    )
    specs = random_workload(
        np.random.default_rng(7),
        num_prompts=400,
        input_len=400,
        output_len=80,
        range_ratio=0.9,
        prefix_len=100,
        request_rate=60,
    )
    result = cluster(
        blocks, predictor=pred, num_replicas=3, router=router, prefix_caching=caching, **kw
    ).run(specs)
    # every admitted request finishes (debug mode checked KV capacity after every event)
    assert sorted(r.request_id for r in result.requests) == sorted(s.request_id for s in specs)
    assert all(r.finish_reason is FinishReason.LENGTH for r in result.requests)
    for r in result.requests:
        assert r.arrival_s <= r.first_scheduled_s <= r.first_token_s <= r.finished_s
        assert r.cached_tokens % 16 == 0 and r.cached_tokens < r.prompt_tokens
    for rep in result.replicas:
        assert rep.series["kv_cache_usage"].max() <= 1.0 and rep.peak_kv_cache_usage <= 1.0
    _assert_conservation(result)
    # exact GPU-time split: the shares add up to the busy time
    busy = sum(rep.gpu_busy_s for rep in result.replicas)
    assert sum(r.gpu_time_s for r in result.requests) == pytest.approx(busy, rel=1e-9)


@pytest.mark.parametrize("seed", range(12))
def test_random_configurations_keep_invariants_and_match_step_by_step(seed):
    rng = np.random.default_rng(seed)
    budget = int(rng.integers(16, 300))
    kw = dict(
        max_num_seqs=int(rng.integers(1, min(budget, 64) + 1)),
        max_num_batched_tokens=budget,
        long_prefill_token_threshold=int(rng.integers(0, budget)) if seed % 2 else 0,
    )
    blocks = int(rng.integers(40, 400))
    specs = random_workload(
        rng,
        num_prompts=60,
        input_len=int(rng.integers(10, 300)),
        output_len=int(rng.integers(1, 80)),
        range_ratio=0.9,
        prefix_len=int(rng.integers(0, 100)),
        request_rate=float(rng.choice([20.0, 200.0, math.inf])),
    )
    pred = AffineStepTimePredictor(
        base_s=0.004, per_decode_seq_s=1e-5, per_context_token_s=3e-8, per_prefill_token_s=2e-5
    )
    fast = cluster(blocks, predictor=pred, prefix_caching=seed % 3 != 0, **kw).run(specs)
    slow = cluster(
        blocks,
        predictor=pred,
        prefix_caching=seed % 3 != 0,
        **kw,
        options=SimulationOptions(debug_checks=True, max_fast_forward_steps=1),
    ).run(specs)
    ok = [r for r in fast.requests if r.finish_reason is not FinishReason.ERROR]
    assert all(r.succeeded for r in ok)
    _assert_conservation(fast)
    for f, s in zip(fast.requests, slow.requests, strict=True):
        assert (f.request_id, f.finish_reason, f.cached_tokens, f.num_preemptions) == (
            s.request_id,
            s.finish_reason,
            s.cached_tokens,
            s.num_preemptions,
        )
        assert f.finished_s == pytest.approx(s.finished_s, abs=1e-9)


def test_littles_law_holds_on_the_output():
    pred = AffineStepTimePredictor.h200_llama_8b_like()
    specs = random_workload(
        np.random.default_rng(11),
        num_prompts=3000,
        input_len=600,
        output_len=150,
        range_ratio=0.5,
        prefix_len=100,
        request_rate=40,
    )
    options = SimulationOptions(sample_interval_s=0.05)
    result = cluster(50_000, predictor=pred, num_replicas=2, options=options).run(specs)
    # time-average number in system, from the sampled gauges, over the run
    in_system = sum(
        rep.series["num_running"] + rep.series["num_waiting"] for rep in result.replicas
    )
    mean_concurrency = float(in_system[:-1].mean())
    records = result.requests
    throughput = len(records) / result.duration_s
    mean_e2e = sum(r.e2e_s for r in records) / len(records)
    assert mean_concurrency == pytest.approx(throughput * mean_e2e, rel=0.03)


def test_same_seed_same_records_different_seed_different():
    def run(seed):
        specs = random_workload(
            np.random.default_rng(seed),
            num_prompts=200,
            input_len=200,
            output_len=40,
            range_ratio=0.5,
            prefix_len=32,
            request_rate=30,
        )
        return cluster(2000, num_replicas=2).run(specs)

    first, again, other = run(5), run(5), run(6)
    assert json.loads(json.dumps(first.config_dict()))["cluster"]["num_replicas"] == 2
    assert first.requests == again.requests
    assert all(
        np.array_equal(a.steps.duration_s, b.steps.duration_s)
        for a, b in zip(first.replicas, again.replicas, strict=True)
    )
    assert first.requests != other.requests


def test_max_concurrency_caps_requests_in_flight():
    specs = random_workload(
        np.random.default_rng(1),
        num_prompts=60,
        input_len=100,
        output_len=20,
        request_rate=math.inf,
    )
    result = cluster(num_replicas=2).run(specs, max_concurrency=8)
    events = sorted(
        [(r.arrival_s, 1) for r in result.requests] + [(r.finished_s, -1) for r in result.requests]
    )
    in_flight = np.cumsum([d for _, d in events])
    assert in_flight.max() == 8
    assert len(result.requests) == 60


def test_horizon_aborts_requests_still_in_flight():
    specs = [spec(f"r{i}", i * 0.01, ((f"p{i}", 100),), 500) for i in range(10)]
    options = SimulationOptions(horizon_s=1.0, debug_checks=True)
    result = cluster(options=options).run(specs)
    assert len(result.requests) == 10
    assert {r.finish_reason for r in result.requests} == {FinishReason.ABORT}
    assert result.end_s == 1.0
    assert all(0 < r.output_tokens < 500 for r in result.requests)
    assert result.replicas[0].counters.request_success_abort == 10


def test_unsorted_specs_are_refused():
    specs = [spec("b", 1.0, (("p", 10),), 1), spec("a", 0.0, (("q", 10),), 1)]
    with pytest.raises(ValueError, match="sorted"):
        cluster().run(specs)


def test_least_outstanding_router_balances_and_round_robin_cycles():
    specs = [spec("long", 0.0, (("a", 10),), 500)]
    specs += [spec(f"s{i}", 0.05 * (i + 1), ((f"b{i}", 10),), 1) for i in range(4)]
    lor = cluster(num_replicas=2, router=RouterPolicy.LEAST_OUTSTANDING_REQUESTS).run(specs)
    assert [r.replica for r in lor.requests] == [0, 1, 1, 1, 1]
    rr = cluster(num_replicas=2).run(specs)
    assert [r.replica for r in rr.requests] == [0, 1, 0, 1, 0]


def test_series_are_sampled_at_the_interval_with_final_totals():
    specs = [spec(f"r{i}", i * 0.1, ((f"p{i}", 64),), 50) for i in range(20)]
    result = cluster(options=SimulationOptions(sample_interval_s=0.25)).run(specs)
    series = result.replicas[0].series
    times = series["time_s"]
    assert np.allclose(np.diff(times[:-1]), 0.25)
    assert times[-1] == pytest.approx(result.end_s)
    assert series["generation_tokens"][-1] == 20 * 50
    assert series["request_success_length"][-1] == 20
    assert np.all(np.diff(series["generation_tokens"]) >= 0)
    assert series["gpu_busy_s"][-1] == pytest.approx(result.replicas[0].gpu_busy_s)


def test_request_spec_validation():
    with pytest.raises(ValueError):
        RequestSpec("x", 0.0, (), 1)
    with pytest.raises(ValueError):
        RequestSpec("x", 0.0, (("a", 0),), 1)
    with pytest.raises(ValueError):
        RequestSpec("x", 0.0, (("a", 5),), 10, max_tokens=5)
    with pytest.raises(ValueError):
        SchedulerConfig(max_num_seqs=512, max_num_batched_tokens=256)


# -- with the calibrated predictor ---------------------------------------------------------


@pytest.fixture(scope="module")
def roofline():
    steptime = pytest.importorskip("models.steptime")
    return steptime.build_predictor("llama-3.1-8b", "h200", "bf16", 1)


def test_calibrated_predictor_keeps_invariants_and_matches_step_by_step(roofline):
    specs = random_workload(
        np.random.default_rng(21),
        num_prompts=300,
        input_len=900,
        output_len=120,
        range_ratio=0.8,
        prefix_len=150,
        request_rate=30,
    )
    kw = dict(num_replicas=2, router=RouterPolicy.LEAST_OUTSTANDING_REQUESTS)
    fast = cluster(600, predictor=roofline, **kw).run(specs)
    slow = cluster(
        600,
        predictor=roofline,
        **kw,
        options=SimulationOptions(debug_checks=True, max_fast_forward_steps=1),
    ).run(specs)
    assert all(r.succeeded for r in fast.requests)
    assert sum(rep.counters.num_preemptions for rep in fast.replicas) > 0
    _assert_conservation(fast)
    for f, s in zip(fast.requests, slow.requests, strict=True):
        assert f.finished_s == pytest.approx(s.finished_s, rel=1e-9)
        assert f.gpu_time_s == pytest.approx(s.gpu_time_s, rel=1e-6)
