"""A closed-loop client's delay holds its concurrency slot (issue #11): under max_concurrency a
request's slot is free only when its response has reached the client (finish + client delay),
so the next request is sent then, as benchmark clients do. Without a limit, or with no delay,
the engine sees exactly what it saw before."""

from __future__ import annotations

from itertools import pairwise

import pytest

from models.serving.scenario import ScenarioConfig
from models.serving.scenario_run import run_scenario

BASE = {"model": "llama-3.1-8b", "gpu": "H100", "random_input_len": 256, "random_output_len": 32}


def test_a_single_slot_is_reused_a_client_delay_after_each_finish():
    scenario = ScenarioConfig(**BASE, num_prompts=12, max_concurrency=1, client_delay_ms=50)
    run = run_scenario(scenario)
    records = sorted(run.result.requests, key=lambda r: r.arrival_s)
    for before, after in pairwise(records):
        assert after.arrival_s == pytest.approx(before.finished_s + 0.050, abs=1e-9)
    assert set(run.client_delay_s.values()) == {0.050}


def test_jittered_delays_release_each_slot_at_its_own_time():
    run = run_scenario(
        ScenarioConfig(
            **BASE, num_prompts=12, max_concurrency=1, client_delay_ms=20, client_jitter_ms=10
        )
    )
    records = sorted(run.result.requests, key=lambda r: r.arrival_s)
    for before, after in pairwise(records):
        delay = run.client_delay_s[before.request_id]
        assert after.arrival_s == pytest.approx(before.finished_s + delay, abs=1e-9)
    assert len(set(run.client_delay_s.values())) == 12


def test_delays_spread_a_closed_loop_and_leave_open_loop_runs_alone():
    closed = {**BASE, "num_prompts": 160, "max_concurrency": 8, "random_range_ratio": 0.5}
    plain = run_scenario(ScenarioConfig(**closed))
    delayed = run_scenario(ScenarioConfig(**closed, client_delay_ms=30))
    # the slots stay busy 30 ms longer per request: the run takes longer, the engine is less busy
    assert delayed.result.end_s > plain.result.end_s + 160 / 8 * 0.030 * 0.5
    assert max(r.arrival_s for r in delayed.result.requests) > max(
        r.arrival_s for r in plain.result.requests
    )
    opened = {**BASE, "num_prompts": 160, "request_rate": 40.0}
    assert (
        run_scenario(ScenarioConfig(**opened, client_delay_ms=30)).result.requests
        == run_scenario(ScenarioConfig(**opened)).result.requests
    )
