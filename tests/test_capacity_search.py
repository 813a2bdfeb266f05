"""The simulator-verified knee and replica search (models/capacity/search.py, issue #13): the
knee meets the SLO and a little more load does not, the fewest replicas meet it and one fewer
does not, cancel stops a search, and every answer is the same for the same seed."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from inferledger.core.errors import BadInputError
from models.capacity import search
from models.capacity.types import AppProfile, Candidate, Pool, Slo, SloClass

MODEL = "llama-3.1-8b"
#: small runs keep the file fast; the search compares rates on the same draws at any size
N = 600


def _pool(slo: Slo, *, seed: int = 1) -> Pool:
    rng = np.random.default_rng(seed)
    lengths = tuple(
        (int(p), int(o))
        for p, o in zip(rng.integers(300, 1500, 400), rng.integers(40, 240, 400), strict=True)
    )
    app = AppProfile(
        app="chat",
        model=MODEL,
        hourly_requests=(3600.0,) * 168,
        lengths=lengths,
        prefix_len=200,
        prefix_hit_rate=0.2,
    )
    return Pool(f"interactive/{MODEL}", SloClass.INTERACTIVE, MODEL, (app,), slo)


POOL = _pool(Slo(ttft_p95_s=0.4, itl_p95_s=0.05, e2e_p95_s=10.0))
CANDIDATE = Candidate(MODEL, "H100", max_num_seqs=64, price_per_gpu_hour=2.5)


@pytest.fixture(scope="module")
def knee() -> tuple[float, list[search.LoadPoint]]:
    return search.find_knee(POOL, CANDIDATE, guess=5.0, num_requests=N)


def test_knee_meets_the_slo_and_ten_percent_more_does_not(knee):
    rate, curve = knee
    assert rate > 0
    at = search.simulate_point(POOL, CANDIDATE, rate, num_requests=N)
    assert at.meets_slo and at.failed == 0
    assert at.ttft_p95_s <= 0.4 and at.itl_p95_s <= 0.05 and at.e2e_p95_s <= 10.0
    above = search.simulate_point(POOL, CANDIDATE, 1.1 * rate, num_requests=N)
    assert not above.meets_slo
    # the curve: sorted by rate, with the chart's points up to 1.3 x the knee
    rates = [p.rate for p in curve]
    assert rates == sorted(rates)
    assert max(rates) >= 1.25 * rate and min(rates) <= 0.3 * rate
    assert {p.meets_slo for p in curve} == {True, False}
    assert at.to_dict() in [p.to_dict() for p in curve]


def test_the_knee_agrees_with_a_dense_sweep(knee):
    truth = search.brute_force_knee(POOL, CANDIDATE, step=0.02, num_requests=N, start=0.5)
    assert knee[0] == pytest.approx(truth, rel=0.07)


def test_a_point_reports_latency_throughput_and_goodput(knee):
    light = search.simulate_point(POOL, CANDIDATE, 0.5 * knee[0], num_requests=N)
    assert light.meets_slo
    assert light.throughput_rps == pytest.approx(0.5 * knee[0], rel=0.15)
    assert light.goodput_rps == pytest.approx(light.throughput_rps, rel=0.1)
    assert 0 < light.ttft_p50_s <= light.ttft_p95_s
    assert 0 < light.itl_p50_s <= light.itl_p95_s
    assert light.e2e_p50_s <= light.e2e_p95_s
    assert 0 < light.kv_peak <= 1 and light.output_tokens_per_s > 0
    assert set(light.to_dict()) == {
        "rate",
        "replicas",
        "ttft_p50_s",
        "ttft_p95_s",
        "itl_p50_s",
        "itl_p95_s",
        "e2e_p50_s",
        "e2e_p95_s",
        "throughput_rps",
        "output_tokens_per_s",
        "kv_peak",
        "preemptions",
        "failed",
        "meets_slo",
        "goodput_rps",
    }


def test_an_overloaded_point_is_cheap_and_misses_the_slo(knee):
    began = time.perf_counter()
    point = search.simulate_point(POOL, CANDIDATE, 20 * knee[0], num_requests=N)
    assert time.perf_counter() - began < 5
    assert not point.meets_slo
    assert point.throughput_rps < 0.5 * point.rate
    assert point.goodput_rps < 0.1 * point.rate


def test_fewest_replicas_meet_the_slo_and_one_fewer_do_not(knee):
    rate = knee[0]
    peak = 3.6 * rate
    n, at_peak = search.fewest_replicas(POOL, CANDIDATE, peak, rate, num_requests=4 * N)
    assert n >= 2
    assert at_peak.meets_slo and at_peak.replicas == n and at_peak.rate == peak
    fewer = search.simulate_point(POOL, CANDIDATE, peak, replicas=n - 1, num_requests=4 * N)
    assert not fewer.meets_slo
    # from a poor start (a knee guessed 3x too high) the search still lands on the same count
    again, _ = search.fewest_replicas(POOL, CANDIDATE, peak, 3 * rate, num_requests=4 * N)
    assert again == n


def test_the_same_seed_gives_the_same_answer_and_another_seed_other_draws():
    one = search.simulate_point(POOL, CANDIDATE, 4.0, num_requests=N, seed=3)
    two = search.simulate_point(POOL, CANDIDATE, 4.0, num_requests=N, seed=3)
    other = search.simulate_point(POOL, CANDIDATE, 4.0, num_requests=N, seed=4)
    assert one == two
    assert other != one
    knee_a = search.find_knee(POOL, CANDIDATE, guess=5.0, num_requests=N, seed=3)
    knee_b = search.find_knee(POOL, CANDIDATE, guess=5.0, num_requests=N, seed=3)
    assert knee_a == knee_b


def test_cancel_stops_the_search_between_simulations():
    calls = itertools.count()

    def cancel_after_three() -> bool:
        return next(calls) >= 3

    with pytest.raises(search.PlanCancelled):
        search.find_knee(POOL, CANDIDATE, num_requests=N, cancelled=cancel_after_three)
    assert next(calls) == 4  # polled before each of three simulations, the fourth stopped it
    with pytest.raises(search.PlanCancelled):
        search.fewest_replicas(POOL, CANDIDATE, 20.0, 5.0, num_requests=N, cancelled=lambda: True)
    with pytest.raises(search.PlanCancelled):
        search.verify(POOL, CANDIDATE, 20.0, cancelled=lambda: True)
    with pytest.raises(search.PlanCancelled):
        search.verify_many(POOL, [CANDIDATE, CANDIDATE], 20.0, workers=2, cancelled=lambda: True)


def test_an_slo_below_the_unloaded_latency_has_no_knee():
    pool = _pool(Slo(ttft_p95_s=0.001))
    rate, curve = search.find_knee(pool, CANDIDATE, guess=4.0, num_requests=200)
    assert rate == 0.0
    assert curve and not any(p.meets_slo for p in curve)


def test_verify_counts_its_simulations_and_prices_nothing(knee):
    v = search.verify(POOL, CANDIDATE, 2.5 * knee[0], guess=knee[0])
    assert v.candidate == CANDIDATE
    assert v.knee_rate > 0 and v.replicas >= 2 and v.at_peak.meets_slo
    assert v.simulations >= len(v.curve) + 1
    assert [p.rate for p in v.curve] == sorted(p.rate for p in v.curve)


def test_bad_input_is_one_line_naming_the_field():
    with pytest.raises(BadInputError, match="rate"):
        search.simulate_point(POOL, CANDIDATE, 0.0)
    with pytest.raises(BadInputError, match="replicas"):
        search.simulate_point(POOL, CANDIDATE, 1.0, replicas=0)
    with pytest.raises(BadInputError, match="knee"):
        search.fewest_replicas(POOL, CANDIDATE, 10.0, 0.0)
    with pytest.raises(BadInputError, match="rel_tol"):
        search.find_knee(POOL, CANDIDATE, rel_tol=0.0)
