"""What the simulator does when the KV cache is full (issue #11): vLLM V1 preempts the last
admitted request and recomputes it later; the `reserve` admission policy never preempts
because it admits a request only when its whole sequence fits; and a run that preempts more
often than it serves requests says so."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferledger.cli import main
from models.serving import SchedulerConfig
from models.serving.scenario import ScenarioConfig
from models.serving.scenario_run import run_scenario
from models.serving.summary import preemption_warning
from models.serving.workload import random_workload
from tests.test_serving_sim import by_id, cluster, spec


def test_reserve_waits_where_vllm_preempts():
    # 10 blocks of 16 tokens; each request's whole sequence (32 + 100 - 1 tokens) takes 9.
    specs = [spec("r1", 0.0, (("p1", 32),), 100), spec("r2", 0.0, (("p2", 32),), 100)]
    vllm = by_id(cluster(10).run(specs))
    assert vllm["r2"].num_preemptions == 1  # tests/test_serving_sim.py works this one by hand
    reserve = by_id(cluster(10, admission="reserve").run(specs))
    r1, r2 = reserve["r1"], reserve["r2"]
    assert (r1.num_preemptions, r2.num_preemptions) == (0, 0)
    assert r1.output_tokens == r2.output_tokens == 100
    assert r2.recomputed_tokens == 0
    # r2 waits for r1's reservation to go: admitted once r1 has finished.
    assert r2.first_scheduled_s >= r1.finished_s


def test_reserve_never_preempts_and_keeps_the_invariants_on_random_workloads():
    rng = np.random.default_rng(7)
    specs = random_workload(
        rng, num_prompts=150, input_len=200, output_len=300, range_ratio=0.5, request_rate=40.0
    )
    vllm = cluster(120, max_num_seqs=64, max_num_batched_tokens=512).run(specs)
    reserve = cluster(120, max_num_seqs=64, max_num_batched_tokens=512, admission="reserve").run(
        specs
    )  # DEBUG options: the scheduler checks reservations against the running set every event
    assert sum(r.counters.num_preemptions for r in vllm.replicas) > 0
    assert sum(r.counters.num_preemptions for r in reserve.replicas) == 0
    assert len(reserve.requests) == len(vllm.requests) == 150
    assert {r.output_tokens for r in reserve.requests} == {r.output_tokens for r in vllm.requests}


def test_an_unknown_admission_policy_is_refused():
    with pytest.raises(ValueError, match="admission must be one of vllm, reserve, got 'tgi'"):
        SchedulerConfig(admission="tgi")


KV_TIGHT = {
    "model": "llama-3.1-8b",
    "gpu": "H100",
    "gpu_memory_utilization": 0.25,  # 13,664 tokens of KV beside the 8B's weights
    "max_model_len": 8192,
    "random_input_len": 512,
    "random_output_len": 3000,
    "random_range_ratio": 0.5,
    "num_prompts": 30,
}


def test_a_run_that_preempts_more_than_it_serves_is_flagged_and_reserve_is_not():
    vllm = run_scenario(ScenarioConfig(**KV_TIGHT))
    preemptions = sum(r.counters.num_preemptions for r in vllm.result.replicas)
    assert preemptions > 30
    warning = preemption_warning(preemptions, 30, vllm.engine.kv_cache_tokens)
    assert warning is not None and f"{preemptions:,} preemptions for 30 requests" in warning
    reserve = run_scenario(ScenarioConfig(**KV_TIGHT, admission="reserve"))
    assert sum(r.counters.num_preemptions for r in reserve.result.replicas) == 0
    assert reserve.engine.admission == "reserve"
    assert preemption_warning(0, 30, reserve.engine.kv_cache_tokens) is None
    assert preemption_warning(30, 30, 1000) is None  # as many as requests: no warning


def test_the_cli_prints_the_warning_and_saves_it(tmp_path, capsys):
    out = tmp_path / "r.json"
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in KV_TIGHT.items()]
    assert main(["simulate", *flags, f"--save-result={out}"]) == 0
    err = capsys.readouterr().err
    assert "preemptions for 30 requests" in err and "--admission reserve" in err
    saved = json.loads(out.read_text())
    assert saved["warnings"] == [err.strip()]
    assert saved["config"]["engine"]["admission"] == "vllm"
    assert main(["simulate", *flags, "--admission=reserve"]) == 0
    assert "preemptions" not in capsys.readouterr().err
