"""Older engines (issue #11): vLLM V0's multi-step scheduling (--num-scheduler-steps),
the V0 engine's serial CPU work per step, and the LLM class's scheduler defaults
(models/serving/engine_era.py, replica_scheduler.py, docs/simulator.md "Older engines")."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import numpy as np
import pytest

from inferledger.cli import main
from inferledger.core.errors import BadInputError
from models.serving import (
    CacheConfig,
    Cluster,
    ClusterConfig,
    ReplicaConfig,
    RequestSpec,
    SchedulerConfig,
    SimulationOptions,
    random_workload,
)
from models.serving.affine_predictor import AffineStepTimePredictor
from models.serving.engine_era import V0_ENGINE_CPU_SCALE, engine_step_model
from models.serving.records import SimulationResult
from models.serving.scenario import ScenarioConfig, scenario_from_mapping
from models.serving.scenario_run import (
    resolve_engine,
    run_scenario,
    scheduler_defaults,
    summarize_run,
)
from models.serving.summary import summarize
from models.steptime import StepShape

PREDICTOR = AffineStepTimePredictor.h200_llama_8b_like()


def _specs(seed: int = 4, n: int = 400, rate: float = 20.0) -> list[RequestSpec]:
    return random_workload(
        np.random.default_rng(seed),
        num_prompts=n,
        input_len=500,
        output_len=120,
        range_ratio=0.8,
        prefix_len=0,
        request_rate=rate,
    )


def _run(
    steps: int | None, specs: list[RequestSpec], debug: bool = True, blocks: int = 40_000
) -> SimulationResult:
    sched = SchedulerConfig() if steps is None else SchedulerConfig(num_scheduler_steps=steps)
    config = ClusterConfig(ReplicaConfig(CacheConfig(blocks), sched))
    return Cluster(config, PREDICTOR, SimulationOptions(debug_checks=debug)).run(specs)


def _digest(result: SimulationResult) -> str:
    h = hashlib.sha256()
    for r in sorted(result.requests, key=lambda r: r.request_id):
        h.update(
            repr(
                (
                    r.request_id,
                    r.first_scheduled_s,
                    r.first_token_s,
                    r.last_token_s,
                    r.finished_s,
                    r.output_tokens,
                    r.finish_reason.value,
                    r.gpu_prefill_s,
                    r.gpu_decode_s,
                )
            ).encode()
        )
    return h.hexdigest()


def _pass_boundaries(result: SimulationResult, steps: int) -> set[float]:
    """Times at which a multi-step replica without chunked prefill may schedule: the end of
    every step with prefill (a pass of one step) and the end of every `steps` decode steps
    after it, from the step log (a pass ends early only when all its decoders have finished:
    the replica goes idle or a prompt step follows at once, both also boundaries)."""
    log = result.replicas[0].steps
    ends = log.start_s + log.duration_s
    out: set[float] = set()
    in_pass = 0
    for i in range(len(ends)):
        if log.prefill_tokens[i] > 0:
            in_pass = 0
            out.add(round(float(ends[i]), 9))
            continue
        in_pass += int(log.steps[i])
        next_start = log.start_s[i + 1] if i + 1 < len(ends) else np.inf
        prompt_next = i + 1 < len(ends) and log.prefill_tokens[i + 1] > 0
        if in_pass >= steps or next_start > ends[i] or log.num_decode[i] == 0 or prompt_next:
            in_pass = 0
            out.add(round(float(ends[i]), 9))
    return out


# -- num_scheduler_steps = 1 is today's engine ----------------------------------------------

# sha256 of _digest(_run(None, _specs())) computed with the engine before multi-step existed
# (git HEAD of 2026-12-07 21:05 UTC, exported with `git archive`).
TODAY_DIGEST = "efba008f5c2bc7f5fc43f56c0413fa6931dc223c27a6ffc84d47dd5f89226dfb"


def test_one_step_is_bit_identical_to_the_engine_before_multistep():
    specs = _specs()
    default = _run(None, specs, debug=False)
    assert _digest(default) == TODAY_DIGEST
    assert _digest(_run(1, specs, debug=False)) == TODAY_DIGEST


# -- multi-step: admission at boundaries, bursts, throughput ---------------------------------


def test_requests_are_admitted_only_at_pass_boundaries():
    specs = _specs()
    ten = _run_v0(specs, chunked=False, steps=10)
    bounds = _pass_boundaries(ten, 10)
    arrivals = {s.request_id: s.arrival_s for s in specs}
    late = 0
    for r in ten.requests:
        assert r.first_scheduled_s is not None
        if r.first_scheduled_s > arrivals[r.request_id]:
            late += 1
            assert round(r.first_scheduled_s, 9) in bounds, r.request_id
    assert late > 0.5 * len(specs)  # most arrive while a pass runs
    # the same check fails when the engine admits at every step
    one = _run_v0(specs, chunked=False, steps=1)
    outside = sum(
        r.first_scheduled_s is not None
        and r.first_scheduled_s > arrivals[r.request_id]
        and round(r.first_scheduled_s, 9) not in bounds
        for r in one.requests
    )
    assert outside > 0


def test_ttft_includes_the_wait_for_the_pass_to_end():
    specs = _specs()
    ttft = {n: np.median([r.ttft_s for r in _run(n, specs).requests]) for n in (1, 10)}
    one_step = PREDICTOR.step_time_s(StepShape(num_decode=20, decode_context_sum=20 * 600))
    # on average a request waits about half a pass of ten ~6-7 ms steps before its prefill
    assert ttft[10] - ttft[1] > 3 * one_step
    assert ttft[10] - ttft[1] < 10 * one_step


def test_a_prefill_step_is_a_pass_of_one_step():
    # A decodes alone; B arrives 30 ms in (about step 5): it waits for the pass to end. A's
    # prefill step is a pass of its own (V0 gives a prefill no lookahead slots), then a pass of
    # 10 decode steps follows; B's prefill step (with A decoding when chunked, alone when
    # not) is again a pass of one, then 10 decode steps.
    specs = [
        RequestSpec("A", 0.0, (("A", 300),), 300),
        RequestSpec("B", 0.03, (("B", 300),), 50),
    ]
    for chunked in (True, False):
        first_pass_end = 11
        res = _run_v0(specs, chunked=chunked, steps=10)
        log = res.replicas[0].steps
        ends = log.start_s + log.duration_s
        cum = np.cumsum(log.steps)
        row = int(np.searchsorted(cum, first_pass_end))
        assert cum[row] == first_pass_end  # a stretch never runs past a pass end
        b = next(r for r in res.requests if r.request_id == "B")
        assert b.first_scheduled_s == pytest.approx(float(ends[row]), abs=1e-12)
        assert log.prefill_tokens[row + 1] == 300 and log.steps[row + 2] == 10
        assert log.num_decode[row + 1] == (1 if chunked else 0)  # A paused without chunking


def test_tokens_arrive_in_bursts_and_finished_requests_leave_at_the_pass_end():
    # A long and a short request together: the short one finishes 4 steps into the first pass
    # and is held to the pass's end (vLLM V0 appends a pass's tokens when its last step ends).
    specs = [
        RequestSpec("long", 0.0, (("long", 300),), 200),
        RequestSpec("short", 0.0, (("short", 300),), 5),
    ]
    by = {n: {r.request_id: r for r in _run(n, specs).requests} for n in (1, 10)}
    log = _run(10, specs).replicas[0].steps
    ends = list(np.round(log.start_s + log.duration_s, 12))
    cum_steps = np.cumsum(log.steps)
    # step 1 is the prefill (a pass of one), steps 2..11 the first pass of decode steps
    pass_end = ends[int(np.searchsorted(cum_steps, 11))]
    assert by[10]["short"].finished_s == pytest.approx(pass_end, abs=1e-12)
    assert by[10]["short"].last_token_s == pytest.approx(pass_end, abs=1e-12)
    assert by[1]["short"].finished_s < pass_end - 1e-4  # today: right after its 4th step
    assert by[10]["short"].output_tokens == by[1]["short"].output_tokens == 5


def test_offline_throughput_stays_within_a_few_percent():
    specs = _specs(n=600, rate=float("inf"))
    tput = {}
    for n in (1, 10):
        res = _run(n, specs, debug=False)
        end = max(r.finished_s for r in res.requests)
        tput[n] = len(res.requests) / end
    # the GPU does the same work; passes only delay admissions and finishes
    assert tput[10] == pytest.approx(tput[1], rel=0.05)
    assert tput[10] != tput[1]


def test_itl_is_one_gap_per_chunk_and_tpot_stays_per_token():
    """A streaming client of a multi-step engine sees one chunk per pass (vLLM's and SGLang's
    benchmark clients record one ITL per chunk): median ITL is about N steps, TPOT is not."""
    specs = _specs(n=300, rate=10.0)
    one, ten = (summarize(_run(n, specs, debug=False)) for n in (1, 10))
    assert ten["median_itl_ms"] == pytest.approx(10 * one["median_itl_ms"], rel=0.25)
    assert ten["median_tpot_ms"] == pytest.approx(one["median_tpot_ms"], rel=0.25)
    assert ten["median_tpot_ms"] < ten["median_itl_ms"] / 5


def test_debug_checks_hold_through_preemptions_under_multistep():
    specs = _specs(seed=7, n=300, rate=60.0)
    res = _run(10, specs, debug=True, blocks=900)  # a small cache: preemptions inside passes
    assert sum(r.num_preemptions for r in res.requests) > 0
    assert all(r.output_tokens > 0 for r in res.requests if r.finish_reason.value != "error")


# -- V0 without chunked prefill ---------------------------------------------------------------


def _run_v0(specs: list[RequestSpec], chunked: bool, steps: int = 1) -> SimulationResult:
    sched = SchedulerConfig(
        max_num_seqs=256,
        max_num_batched_tokens=4096,
        max_model_len=4096,
        num_scheduler_steps=steps,
        enable_chunked_prefill=chunked,
    )
    config = ClusterConfig(ReplicaConfig(CacheConfig(40_000, enable_prefix_caching=False), sched))
    return Cluster(config, PREDICTOR, SimulationOptions(debug_checks=True)).run(specs)


@pytest.mark.parametrize("steps", [1, 10])
def test_without_chunked_prefill_prompts_run_alone_and_whole(steps):
    specs = _specs(seed=5, n=300, rate=30.0)
    off = _run_v0(specs, chunked=False, steps=steps)
    log = off.replicas[0].steps
    prompt_steps = log.prefill_tokens > 0
    assert prompt_steps.any()
    assert (log.num_decode[prompt_steps] == 0).all()  # decoders paused in prompt steps
    # every prompt is computed whole in the step it is admitted: its first token ends that step
    ends = (log.start_s + log.duration_s).tolist()
    step_end = dict(zip(log.start_s.tolist(), ends, strict=True))
    for r in off.requests:
        assert r.first_token_s == pytest.approx(step_end[r.first_scheduled_s], abs=1e-12)
    # chunked prefill (V1's way) batches prompts with decoders: the check above can fail
    on = _run_v0(specs, chunked=True, steps=steps).replicas[0].steps
    assert ((on.prefill_tokens > 0) & (on.num_decode > 0)).any()
    # paused decoders: the same requests take longer per token
    tpot = {
        name: np.median([r.tpot_s for r in res.requests if r.tpot_s is not None])
        for name, res in (("off", off), ("on", _run_v0(specs, chunked=True, steps=steps)))
    }
    assert tpot["off"] > tpot["on"]
    assert sum(r.output_tokens for r in off.requests) == sum(s.output_tokens for s in specs)


def test_step_observer_sees_paused_decoders_and_held_finishes_do_no_work():
    specs = _specs(seed=6, n=150, rate=30.0)
    sched = SchedulerConfig(
        max_num_seqs=256,
        max_num_batched_tokens=4096,
        max_model_len=4096,
        num_scheduler_steps=10,
        enable_chunked_prefill=False,
    )
    config = ClusterConfig(ReplicaConfig(CacheConfig(40_000), sched))
    tokens = {"prefill": 0, "decode": 0}

    def observer(index, start, end, steps, work):
        kinds = {kind for _, _, kind in work}
        assert len(kinds) <= 1  # a step prefills or decodes, never both
        for _, n, kind in work:
            tokens[kind] += n

    res = Cluster(config, PREDICTOR, SimulationOptions(debug_checks=True)).run(
        specs, step_observer=observer
    )
    assert tokens["prefill"] == sum(s.prompt_tokens for s in specs)
    # each request decodes output - 1 tokens (the first comes from its prefill)
    assert tokens["decode"] == sum(r.output_tokens - 1 for r in res.requests)


def test_without_chunked_prefill_needs_a_budget_of_max_model_len_and_engine_v0():
    with pytest.raises(
        ValueError, match=r"max_num_batched_tokens \(2048\) must be >= max_model_len"
    ):
        SchedulerConfig(
            max_num_batched_tokens=2048, max_model_len=4096, enable_chunked_prefill=False
        )
    base = {"model": "llama-3.1-8b", "gpu": "H200", "enable_chunked_prefill": False}
    with pytest.raises(BadInputError, match="enable_chunked_prefill false needs engine v0"):
        scenario_from_mapping(base, "s.yaml")
    scenario = scenario_from_mapping({**base, "engine": "v0", "max_model_len": 16384}, "s.yaml")
    with pytest.raises(BadInputError) as err:
        resolve_engine(scenario)
    assert "max_num_batched_tokens (8192) must be >= max_model_len (16384)" in str(err.value)
    engine, _ = resolve_engine(replace(scenario, max_model_len=8192))
    assert engine.enable_chunked_prefill is False


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -3, 2.5, True])
def test_num_scheduler_steps_is_validated(value):
    with pytest.raises(ValueError, match="num_scheduler_steps must be >= 1"):
        SchedulerConfig(num_scheduler_steps=value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_scheduler_steps", 0, "num_scheduler_steps must be >= 1, got 0"),
        ("num_scheduler_steps", "ten", "num_scheduler_steps must be an integer, got 'ten'"),
        ("engine", "v2", "engine must be one of v1, v0, got 'v2'"),
        ("usage_context", "cli", "usage_context must be one of api_server, llm_class"),
    ],
)
def test_scenario_fields_fail_in_one_line(field, value, message):
    with pytest.raises(BadInputError) as err:
        scenario_from_mapping({"model": "llama-3.1-8b", "gpu": "H200", field: value}, "s.yaml")
    text = str(err.value)
    assert "\n" not in text
    assert message in text and text.startswith("s.yaml: ")


# -- usage context ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "context", "expected"),
    [
        ("H200", "api_server", (1024, 8192)),
        ("H200", "llm_class", (1024, 16384)),
        ("H100", "llm_class", (1024, 16384)),
        ("A100-80GB", "llm_class", (256, 8192)),
        ("A100-80GB", "api_server", (256, 2048)),
        ("L40S", "llm_class", (256, 8192)),
    ],
)
def test_usage_context_picks_vllms_defaults(gpu, context, expected):
    assert scheduler_defaults(gpu, context) == expected
    engine, _ = resolve_engine(
        ScenarioConfig(model="llama-3.1-8b", gpu=gpu, usage_context=context, max_model_len=8192)
    )
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == expected
    assert engine.usage_context == context


def test_explicit_limits_win_over_the_usage_context():
    base = ScenarioConfig(model="llama-3.1-8b", gpu="H200", usage_context="llm_class")
    engine, _ = resolve_engine(replace(base, max_num_batched_tokens=4096, max_num_seqs=64))
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (64, 4096)
    engine, _ = resolve_engine(replace(base, max_num_seqs=64))
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (64, 16384)


# -- engine: v0 ------------------------------------------------------------------------------


def test_engine_v1_is_todays_predictor():
    assert engine_step_model("v1") == (True, None)
    with pytest.raises(ValueError, match="engine must be one of v1, v0"):
        engine_step_model("v2")


def test_engine_v0_changes_only_the_engine_cpu_of_the_step_model():
    base = ScenarioConfig(model="llama-3.1-8b", gpu="H100")
    e1, p1 = resolve_engine(base)
    e0, p0 = resolve_engine(replace(base, engine="v0"))
    assert replace(e0, engine="v1") == e1  # KV blocks, limits: unchanged
    assert p1.async_scheduling and not p0.async_scheduling
    c1, c0 = p1.coefficients, p0.coefficients
    changed = {
        name
        for name in c1.__dataclass_fields__
        if getattr(c1, name) != getattr(c0, name)  # exact: copied or scaled, never refitted
    }
    assert changed == {"engine_step_cpu_s", "engine_seq_cpu_s"}
    ref = c1  # the V1 predictor's coefficients for this GPU
    assert c0.engine_step_cpu_s == pytest.approx(V0_ENGINE_CPU_SCALE * ref.engine_step_cpu_s)
    assert c0.engine_seq_cpu_s == pytest.approx(V0_ENGINE_CPU_SCALE * ref.engine_seq_cpu_s)
    # a decode step (in a CUDA graph) now pays its engine CPU after the forward pass
    for n in (8, 64, 256):
        shape = StepShape(num_decode=n, decode_context_sum=n * 1000)
        engine_cpu = c0.engine_step_cpu_s + c0.engine_seq_cpu_s * n
        extra = p0.step_time_s(shape) - p1.step_time_s(shape)
        assert extra == pytest.approx(engine_cpu, rel=1e-6)
        assert p0.decode_steps_time_s(shape, 10) > p1.decode_steps_time_s(shape, 10)


def test_engine_v0_slows_a_scenario_and_multistep_delays_first_tokens():
    base = ScenarioConfig(
        model="llama-3.1-8b",
        gpu="H100",
        dataset_name="sharegpt",
        num_prompts=200,
        request_rate=4.0,
        max_model_len=4096,
    )
    out = {}
    for name, kw in {
        "v1": {},
        "v0": {"engine": "v0"},
        "v0x10": {"engine": "v0", "num_scheduler_steps": 10},
    }.items():
        out[name] = summarize_run(run_scenario(replace(base, **kw)))
    assert out["v0"]["median_tpot_ms"] > out["v1"]["median_tpot_ms"] * 1.1
    assert out["v0x10"]["median_ttft_ms"] > out["v0"]["median_ttft_ms"] + 10.0
    assert out["v0"]["request_throughput"] == pytest.approx(
        out["v1"]["request_throughput"], rel=0.05
    )  # request-rate bound


# -- the command line ------------------------------------------------------------------------


def test_simulate_flags_reach_the_resolved_engine(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = [
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "A100-80GB",
        "--num-prompts",
        "40",
        "--request-rate",
        "4",
        "--max-model-len",
        "4096",
        "--num-scheduler-steps",
        "10",
        "--engine",
        "v0",
        "--usage-context",
        "llm_class",
        "--save-result",
        str(out),
    ]
    assert main(argv) == 0
    engine = json.loads(out.read_text())["config"]["engine"]
    assert engine["num_scheduler_steps"] == 10 and engine["engine"] == "v0"
    assert (engine["max_num_seqs"], engine["max_num_batched_tokens"]) == (256, 8192)
    capsys.readouterr()
    assert main([*argv[:-2], "--num-scheduler-steps", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--num-scheduler-steps must be >= 1, got 0" in err
