"""The serving simulator's speed work (issue #11, "Performance") changes how it computes, never
what: the cyclic garbage collector is off during Cluster.run and restored after, the decode
block-crossing count is computed without building a list, and bench/simulator.py runs a second
scenario (16 replicas at 200 requests/s). Identical results before and after were checked by
comparing every record, series and step log of whole runs (docs/benchmarks.md); these tests pin
the pieces.
"""

from __future__ import annotations

import gc
import importlib.util
import random
from pathlib import Path

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
    random_workload,
)
from models.serving.replica_scheduler import ReplicaScheduler

ROOT = Path(__file__).resolve().parents[1]


def small_cluster(**options: object) -> Cluster:
    config = ClusterConfig(ReplicaConfig(CacheConfig(2_000)), num_replicas=2)
    return Cluster(
        config, AffineStepTimePredictor.h200_llama_8b_like(), SimulationOptions(**options)
    )


def workload(n: int = 200, seed: int = 0) -> list[RequestSpec]:
    return random_workload(
        np.random.default_rng(seed),
        num_prompts=n,
        input_len=400,
        output_len=100,
        range_ratio=0.5,
        prefix_len=100,
        request_rate=20.0,
    )


@pytest.mark.parametrize("enabled", [True, False])
def test_run_restores_the_garbage_collector_state(enabled):
    was = gc.isenabled()
    try:
        if enabled:
            gc.enable()
        else:
            gc.disable()
        result = small_cluster().run(workload())
        assert gc.isenabled() is enabled
        assert len(result.requests) == 200
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


def test_run_restores_the_garbage_collector_when_it_raises():
    specs = workload(20)
    specs[5], specs[6] = specs[6], specs[5]  # out of arrival order: refused mid-run
    assert gc.isenabled()
    with pytest.raises(ValueError, match="sorted"):
        small_cluster().run(specs)
    assert gc.isenabled()


def test_results_do_not_depend_on_the_collector():
    """Same inputs, the collector on or off around the call: identical records."""
    specs = workload(300, seed=3)
    first = small_cluster(sample_interval_s=0.5).run(specs)
    gc.disable()
    try:
        second = small_cluster(sample_interval_s=0.5).run(specs)
    finally:
        gc.enable()
    assert first.requests == second.requests
    for a, b in zip(first.replicas, second.replicas, strict=True):
        assert a.counters == b.counters
        assert np.array_equal(a.steps.duration_s, b.steps.duration_s)
        assert np.array_equal(a.series["generation_tokens"], b.series["generation_tokens"])


def test_block_crossings_match_a_step_by_step_count():
    """crossings(steps): blocks the decoders need over the next `steps` steps. A decoder whose
    phase is p crosses a block boundary at each step s with (p + s) % block_size == 0; the
    scheduler's bucket for step s is phase[-s % block_size]. Counted step by step here, over
    every window position, including windows that wrap around the end of the phase list."""
    config = ReplicaConfig(CacheConfig(1_000, block_size=16))
    s = ReplicaScheduler(0, config, [])
    rng = random.Random(7)
    for _ in range(60):
        s.phase = [rng.randrange(0, 5) for _ in range(16)]
        s.n_dec = sum(s.phase)
        s.step_count = rng.randrange(0, 1_000)
        for steps in range(0, 50):
            direct = sum(s.phase[-(s.step_count + j) % 16] for j in range(steps))
            assert s.crossings(steps) == direct, (s.phase, s.step_count, steps)


def _bench_module():
    path = ROOT / "bench" / "simulator.py"
    spec = importlib.util.spec_from_file_location("bench_simulator", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_runs_the_large_scenario(capsys):
    bench = _bench_module()
    code = bench.main(["--scenario", "16x200", "--sim-seconds", "1", "--predictor", "affine"])
    out = capsys.readouterr().out
    assert code == 0
    assert "scenario: 16 replicas, 200 req/s" in out
    assert "target (issue #11): >= 300" in out
    assert "requests: 200," in out


def test_bench_flags_override_a_scenario_and_drop_its_target(capsys):
    bench = _bench_module()
    code = bench.main(
        ["--replicas", "2", "--rate", "10", "--sim-seconds", "1", "--predictor", "affine"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "scenario: 2 replicas, 10 req/s" in out
    assert "target" not in out
