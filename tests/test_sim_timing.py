"""Step-time jitter of the served simulation (models/serving/jitter.py): seeded, mean 1, the
spread asked for, and none at all when it is off."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferledger.core.errors import SettingsError
from inferledger.sim_server import SimServeOptions
from models.execution_time import StepShape
from models.serving import CacheConfig, ClusterConfig, ReplicaConfig, SchedulerConfig
from models.serving.jitter import StepJitter
from models.serving.live import LiveCluster
from models.serving.request import RequestSpec
from models.steptime import build_predictor

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def predictor():
    return build_predictor(MODEL, "h200")


def _config(predictor, replicas: int = 1) -> ClusterConfig:
    return ClusterConfig(
        ReplicaConfig(
            CacheConfig(predictor.num_gpu_blocks()),
            SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=2048, max_model_len=8192),
        ),
        num_replicas=replicas,
    )


def _gaps(predictor, cv: float, seed: int = 0, output: int = 800) -> np.ndarray:
    """Token gaps of one stream among four (a new request every 0.5 s cuts the stretches)."""
    live = LiveCluster(_config(predictor), predictor, step_jitter_cv=cv, seed=seed)
    watched = live.submit(
        RequestSpec("w", 0.0, (("w", 300),), output, output, None), track_tokens=True
    )
    for i in range(3):
        t = 0.5 * (i + 1)
        live.submit(RequestSpec(f"o{i}", t, ((f"o{i}", 300),), 200, 200, None))
    live.run_until_idle()
    times = np.array(watched.token_times)
    assert len(times) == output
    return np.diff(times[1:])  # decode gaps (the first token ends the prefill)


def test_the_factors_have_mean_one_and_the_cv_asked_for() -> None:
    f = StepJitter(0.05, seed=3).factors(200_000)
    assert abs(f.mean() - 1.0) < 1e-3
    assert f.std() / f.mean() == pytest.approx(0.05, rel=0.02)
    assert (f > 0).all()
    again = StepJitter(0.05, seed=3).factors(10)
    assert np.array_equal(again, f[:10])  # seeded
    assert not np.array_equal(StepJitter(0.05, seed=4).factors(10), again)
    with pytest.raises(ValueError):
        StepJitter(0.0)


def test_token_gaps_spread_with_jitter_and_keep_their_mean(predictor) -> None:
    exact = _gaps(predictor, 0.0)
    noisy = _gaps(predictor, 0.05)
    # Off: each gap is the predictor's step time, which creeps up as the context grows and
    # jumps only where the batch changes (three arrivals, their prefills and finishes).
    assert _jumps(exact) < 0.03
    assert _jumps(noisy) > 0.9
    # On: about the CV asked for around the same mean (a little more: where the batch changes,
    # the two runs' gaps can fall a step apart).
    ratio = noisy / exact
    assert 0.04 < ratio.std() < 0.08
    assert ratio.mean() == pytest.approx(1.0, abs=0.01)
    assert noisy.sum() == pytest.approx(exact.sum(), rel=0.01)
    # seeded: the same seed gives the same run, another seed another one
    assert np.array_equal(_gaps(predictor, 0.05), noisy)
    assert not np.array_equal(_gaps(predictor, 0.05, seed=1), noisy)


def _jumps(gaps: np.ndarray) -> float:
    """Share of consecutive token gaps that differ by more than 0.1 %."""
    return float((np.abs(np.diff(gaps)) > 1e-3 * gaps.mean()).mean())


def test_without_jitter_every_gap_is_the_predicted_step(predictor) -> None:
    """One request alone: its i-th decode step attends to prompt + i - 1 tokens. Off, each gap
    is exactly that step's predicted time (no spread around the model); on, the gaps scatter
    around it with the CV asked for and the same mean."""
    prompt, output = 100, 600
    expected = np.array(
        [predictor.step_time_s(StepShape(1, prompt + i)) for i in range(output - 1)]
    )
    for cv in (0.0, 0.05):
        live = LiveCluster(_config(predictor), predictor, step_jitter_cv=cv, seed=7)
        h = live.submit(
            RequestSpec("a", 0.0, (("a", prompt),), output, output, None), track_tokens=True
        )
        live.run_until_idle()
        ratio = np.diff(h.token_times) / expected
        if cv == 0.0:
            assert np.allclose(ratio, 1.0, rtol=0.0, atol=1e-9)
        else:
            assert ratio.std() == pytest.approx(cv, rel=0.15)
            assert ratio.mean() == pytest.approx(1.0, abs=0.01)


def test_jitter_breaks_lockstep_between_replicas(predictor) -> None:
    """Two identical requests on two identical replicas finish together without jitter, and
    apart with it (each replica draws its own factors)."""
    for cv, together in ((0.0, True), (0.03, False)):
        live = LiveCluster(_config(predictor, replicas=2), predictor, step_jitter_cv=cv)
        a = live.submit(RequestSpec("a", 0.0, (("p", 500),), 300, 300, None), replica=0)
        b = live.submit(RequestSpec("b", 0.0, (("p", 500),), 300, 300, None), replica=1)
        live.run_until_idle()
        assert (a.record.finished_s == b.record.finished_s) is together
        assert math.isclose(a.record.finished_s, b.record.finished_s, rel_tol=0.02)


def test_serve_options_check_the_jitter(predictor) -> None:
    base = {"cluster": _config(predictor), "predictor": predictor, "served_model_names": ("m",)}
    assert SimServeOptions(**base).step_jitter == pytest.approx(0.03)
    assert SimServeOptions(**base, step_jitter=0.0).step_jitter == 0.0
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(SettingsError):
            SimServeOptions(**base, step_jitter=bad)
