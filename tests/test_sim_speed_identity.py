"""The serving simulator's speed work (issue #11, "Performance": 16 replicas at 200 requests/s)
changes how it computes, never what. Each scenario below is run and its whole result hashed:
every request record (all fields, floats by repr, so bit for bit), every replica's counters,
sampled series, step log and resume gaps, and the summary JSON (its floats to 9 significant
digits: Python 3.12's compensated sum() changes their last bits). The digests were computed by
the code before the speed work (commit 150ffbe plus the working tree of 2026-12-07 21:03 UTC),
and again, with the summary rounded, by the code after it once unrounded digests had matched
(the same on Python 3.11 and 3.12); a change to any simulated number changes a digest.

Scenarios: the benchmark's two (bench/simulator.py's 4x50 and 16x200, shortened), a
prefix-caching mix (several shared system prompts, multi-turn chains, least-outstanding
router), a KV-full one (few blocks, preemptions and recomputation, admission-time rejection,
a horizon that aborts requests in flight), and a concurrency-limited one with client delays
and a step observer. Step times come from the affine stand-in predictor, so a recalibration of
models/steptime.py does not move the digests (`--roofline` below prints them with the
calibrated model, which is how the full benchmark runs were compared before and after).

A round-robin run without a concurrency limit or step observer now runs each replica alone
(models/serving/cluster.py's _run_independent); the other runs keep the one event loop. The
last tests run the same bursty workloads both ways and require the same result, record order
among equal arrival times included.

A change that is meant to alter simulated results (not a speed change) must regenerate GOLDEN:

    .venv/bin/python tests/test_sim_speed_identity.py             # the digests of the code now
    .venv/bin/python tests/test_sim_speed_identity.py --roofline  # same, calibrated step times
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.serving import (
    CacheConfig,
    Cluster,
    ClusterConfig,
    ReplicaConfig,
    RequestSpec,
    RouterPolicy,
    SchedulerConfig,
    SimulationOptions,
    random_workload,
    summarize,
)
from models.serving.affine_predictor import AffineStepTimePredictor
from models.serving.records import SimulationResult

# The affine stand-in, not models/steptime.py's calibrated model: a recalibration of the step
# times must not move these digests (they pin the engine, not the step-time model).
# `--roofline` prints the digests with the calibrated model instead, for a before/after check.
PREDICTOR = AffineStepTimePredictor.h200_llama_8b_like()
if "--roofline" in sys.argv:
    from models.steptime import build_predictor

    PREDICTOR = build_predictor("llama-3.1-8b", "h200", "bf16", 1)  # type: ignore[assignment]


def _bench(replicas: int, rate: float, seconds: float) -> SimulationResult:
    """bench/simulator.py's scenario (random traffic, 200-token shared prefix + 800 +- 50 %,
    250 +- 50 % out), shortened to `seconds`."""
    specs = random_workload(
        np.random.default_rng(0),
        num_prompts=round(rate * seconds),
        input_len=800,
        output_len=250,
        range_ratio=0.5,
        prefix_len=200,
        request_rate=rate,
    )
    config = ClusterConfig(
        ReplicaConfig(CacheConfig(51_800), label="llama-3.1-8b/h200"),
        num_replicas=replicas,
    )
    return Cluster(config, PREDICTOR, SimulationOptions(sample_interval_s=1.0)).run(specs)


def _prefix_mix(seed: int = 1, n: int = 3000) -> list[RequestSpec]:
    """Five system prompts of 300-1500 tokens, conversations of up to four turns whose later
    turns repeat the earlier ones (segments), stop-vs-length finishes."""
    rng = np.random.default_rng(seed)
    systems = [(f"sys{i}", int(rng.integers(300, 1500))) for i in range(5)]
    t = 0.0
    specs = []
    conversations: list[tuple[tuple[str, int], ...]] = []
    for i in range(n):
        t += float(rng.exponential(1 / 60.0))
        if conversations and rng.random() < 0.4:
            j = int(rng.integers(len(conversations)))
            prompt = conversations[j] + ((f"turn{i}", int(rng.integers(20, 400))),)
            conversations[j] = prompt if len(prompt) < 8 else conversations[j]
        else:
            prompt = (systems[int(rng.integers(5))], (f"user{i}", int(rng.integers(50, 900))))
            conversations.append(prompt)
        out = int(rng.integers(1, 600))
        max_tokens = out if rng.random() < 0.5 else out + int(rng.integers(0, 50))
        specs.append(RequestSpec(f"p{i}", t, prompt, out, max_tokens))
    return specs


def _prefix_caching() -> SimulationResult:
    config = ClusterConfig(
        ReplicaConfig(CacheConfig(8_000), SchedulerConfig(max_num_batched_tokens=2048)),
        num_replicas=3,
        router=RouterPolicy.LEAST_OUTSTANDING_REQUESTS,
    )
    return Cluster(config, PREDICTOR, SimulationOptions(sample_interval_s=0.5)).run(_prefix_mix())


def _kv_full() -> SimulationResult:
    specs = random_workload(
        np.random.default_rng(2),
        num_prompts=2500,
        input_len=1200,
        output_len=400,
        range_ratio=0.9,
        prefix_len=64,
        request_rate=40.0,
    )
    # one request too long for the cache (rejected with "error")
    specs.insert(10, RequestSpec("huge", specs[9].arrival_s, (("huge", 40_000),), 10))
    config = ClusterConfig(
        ReplicaConfig(
            CacheConfig(1_500),
            SchedulerConfig(max_num_seqs=128, long_prefill_token_threshold=512),
        ),
        num_replicas=2,
    )
    options = SimulationOptions(sample_interval_s=0.25, horizon_s=50.0)
    return Cluster(config, PREDICTOR, options).run(specs)


def _limited() -> SimulationResult:
    specs = random_workload(
        np.random.default_rng(3),
        num_prompts=1500,
        input_len=600,
        output_len=150,
        range_ratio=0.5,
        prefix_len=100,
        request_rate=100.0,
    )
    delays = {s.request_id: 0.001 * (k % 7) for k, s in enumerate(specs)}
    seen: list[tuple[int, int, int]] = []

    def observer(index: int, t0: float, t1: float, steps: int, work: list) -> None:
        seen.append((index, steps, len(work)))

    config = ClusterConfig(ReplicaConfig(CacheConfig(4_000)), num_replicas=2)
    result = Cluster(config, PREDICTOR, SimulationOptions(max_fast_forward_steps=40)).run(
        specs, max_concurrency=48, client_delay_s=delays, step_observer=observer
    )
    h = hashlib.sha256(repr(seen).encode()).hexdigest()[:16]
    return result, h  # type: ignore[return-value]


def digest(result: SimulationResult) -> str:
    """sha256 (first 16 hex digits) of everything a run produced."""
    h = hashlib.sha256()
    for r in result.requests:
        h.update(
            repr(
                (
                    r.request_id,
                    r.replica,
                    r.arrival_s,
                    r.queued_s,
                    r.first_scheduled_s,
                    r.first_token_s,
                    r.last_token_s,
                    r.finished_s,
                    r.prompt_tokens,
                    r.cached_tokens,
                    r.output_tokens,
                    r.finish_reason.value,
                    r.num_preemptions,
                    r.gpu_prefill_s,
                    r.gpu_decode_s,
                    r.computed_tokens,
                )
            ).encode()
        )
    for rep in result.replicas:
        h.update(repr((rep.index, rep.num_gpu_blocks, rep.peak_kv_cache_usage)).encode())
        h.update(repr(sorted(dataclasses.asdict(rep.counters).items())).encode())
        for name in sorted(rep.series.columns):
            h.update(name.encode())
            h.update(np.ascontiguousarray(rep.series.columns[name]).tobytes())
        steps = rep.steps
        for name in (
            "start_s",
            "steps",
            "num_decode",
            "prefill_tokens",
            "num_prefill_seqs",
            "duration_s",
        ):
            h.update(np.ascontiguousarray(getattr(steps, name)).tobytes())
        h.update(np.ascontiguousarray(rep.resume_gaps_s).tobytes())
    h.update(repr((result.start_s, result.end_s)).encode())
    h.update(json.dumps(_rounded(summarize(result)), sort_keys=True, default=repr).encode())
    return h.hexdigest()[:16]


def _rounded(summary: dict) -> dict:
    """The summary's floats to 9 significant digits. Everything above is the simulation's own
    arithmetic, the same bits on any machine; the summary's means go through Python's sum(),
    which compensates its rounding from Python 3.12 on, so their last bits differ between
    Python versions (the records hashed above do not)."""
    return {k: float(f"{v:.9g}") if isinstance(v, float) else v for k, v in summary.items()}


def _limited_digest() -> str:
    result, observed = _limited()  # type: ignore[misc]
    return digest(result) + "/" + observed


SCENARIOS = {
    "4x50": lambda: digest(_bench(4, 50.0, 120.0)),
    "16x200": lambda: digest(_bench(16, 200.0, 30.0)),
    "prefix_caching": lambda: digest(_prefix_caching()),
    "kv_full": lambda: digest(_kv_full()),
    "limited": _limited_digest,
}

# computed by the code before the speed work (see module docstring)
GOLDEN = {
    "4x50": "5903d1b8561afaec",
    "16x200": "519f79e24090aec2",
    "prefix_caching": "3c618fc1365d8315",
    "kv_full": "875678170acee1fc",
    "limited": "8f793a1b5ed40b94/069030267846596e",
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_results_identical_to_before_the_speed_work(name):
    assert SCENARIOS[name]() == GOLDEN[name]


def test_kv_full_scenario_preempts_rejects_and_aborts():
    """The KV-full scenario exercises what it is meant to (else its digest pins little)."""
    result = _kv_full()
    s = summarize(result)
    reasons = {r.finish_reason.value for r in result.requests}
    assert s["num_preemptions"] > 10
    assert {"error", "abort", "length"} <= reasons


def test_prefix_scenario_hits_the_cache():
    result = _prefix_caching()
    assert summarize(result)["prefix_cache_hit_rate"] > 0.2


def _noop_observer(index: int, t0: float, t1: float, steps: int, work: list) -> None:
    pass


def _tied_specs(n: int, seed: int) -> list[RequestSpec]:
    """Bursts: groups of requests with the same arrival time, some too long to serve."""
    rng = np.random.default_rng(seed)
    specs = []
    t = 0.0
    for i in range(n):
        if i % 7 == 0:
            t += float(rng.exponential(0.2))
        tokens = int(rng.integers(10, 3000)) if i % 50 else 100_000
        out = int(rng.integers(1, 300))
        specs.append(RequestSpec(f"t{i}", t, (("sys", 128), (f"u{i}", tokens)), out))
    return specs


@pytest.mark.parametrize(
    ("replicas", "blocks", "horizon", "seed"),
    [(1, 3_000, None, 0), (3, 600, None, 1), (4, 400, 6.0, 2), (5, 2_000, 3.3, 3)],
)
def test_replicas_run_one_by_one_give_the_one_loop_result(replicas, blocks, horizon, seed):
    """Round robin without a concurrency limit or step observer runs each replica alone
    (cluster.py's _run_independent); with a step observer the same run goes through the one
    event loop of every replica (Cluster._loop). Both must give the same result, bit for bit,
    on bursts of equal arrival times (the record order among ties), rejections, preemptions
    and a horizon that aborts requests in flight."""
    config = ClusterConfig(
        ReplicaConfig(CacheConfig(blocks), SchedulerConfig(max_num_seqs=64)),
        num_replicas=replicas,
    )
    cluster = Cluster(
        config, PREDICTOR, SimulationOptions(sample_interval_s=0.3, horizon_s=horizon)
    )
    specs = _tied_specs(400, seed)
    fast = cluster.run(specs)
    loop = cluster.run(specs, step_observer=_noop_observer)
    assert digest(fast) == digest(loop)
    assert [r.request_id for r in fast.requests] == [r.request_id for r in loop.requests]
    reasons = {r.finish_reason.value for r in fast.requests}
    assert "error" in reasons
    if horizon is not None:
        assert "abort" in reasons and fast.end_s == horizon


def test_unsorted_specs_are_refused_on_both_paths():
    specs = _tied_specs(20, 0)
    specs[5], specs[12] = specs[12], specs[5]
    config = ClusterConfig(ReplicaConfig(CacheConfig(3_000)), num_replicas=2)
    cluster = Cluster(config, PREDICTOR)
    for observer in (None, _noop_observer):
        with pytest.raises(ValueError, match="sorted by arrival_s"):
            cluster.run(specs, step_observer=observer)


@pytest.mark.parametrize("horizon", [0.0, 5.0, 5.5, 7.0, 8.0, 1e9])
@pytest.mark.parametrize("interval", [0.3, 7.0])
def test_both_loops_agree_on_horizons_around_the_first_arrival(horizon, interval):
    """Arrivals from t = 5 s on: a horizon before the first one (no request served, the
    samples and end time of an empty run), inside the run, and far after it."""
    specs = [
        RequestSpec(s.request_id, s.arrival_s + 5.0, s.prompt, s.output_tokens)
        for s in _tied_specs(60, 4)
    ]
    config = ClusterConfig(ReplicaConfig(CacheConfig(900)), num_replicas=3)
    options = SimulationOptions(sample_interval_s=interval, horizon_s=horizon)
    cluster = Cluster(config, PREDICTOR, options)
    fast = cluster.run(specs)
    assert digest(fast) == digest(cluster.run(specs, step_observer=_noop_observer))
    assert fast.end_s <= horizon
    assert bool(fast.requests) == (horizon >= specs[0].arrival_s)


if __name__ == "__main__":
    for name, run in SCENARIOS.items():
        print(f'    "{name}": "{run()}",')
