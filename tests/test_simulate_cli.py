"""`inferledger simulate`: the command end to end (in a subprocess), its result JSON, bad input
(one line, exit 2), determinism, scenario files and the shipped example scenarios."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from inferledger.cli import main
from models.serving.scenario import SCENARIO_FIELDS, ScenarioConfig, load_scenario
from models.serving.scenario_run import run_scenario, scheduler_defaults
from models.steptime import build_predictor

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "scenarios").glob("*.yaml"))
SMALL = [
    "--model",
    "llama-3.1-8b",
    "--gpu",
    "h200",
    "--num-prompts",
    "200",
    "--request-rate",
    "20",
    "--random-input-len",
    "256",
    "--random-output-len",
    "64",
    "--random-prefix-len",
    "128",
]
BENCH_KEYS = (
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
)


def _run(argv, capsys):
    rc = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_end_to_end_in_a_subprocess(tmp_path):
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "inferledger.cli", "simulate", *SMALL, "--seed", "3"),
            *("--save-result", str(result), "--metric-percentiles", "50,99"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert lines[-1] == "=" * 50
    assert lines[1].startswith("Successful requests:") and lines[1][41:].strip() == "200"
    assert "Request rate configured (RPS):           20.00     " in lines
    assert any(line.startswith("P50 TTFT (ms):") for line in lines)
    assert not any("E2EL" in line for line in lines)  # not among the default metrics
    doc = json.loads(result.read_text())
    for key in BENCH_KEYS:
        assert key in doc, key
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p50", "p99"):
            assert isinstance(doc[f"{stat}_{metric}_ms"], float)
    for key in ("mean_kv_cache_usage", "p95_kv_cache_usage", "max_kv_cache_usage"):
        assert 0 <= doc[key] <= 1
    assert doc["num_preemptions"] == 0 and doc["prefix_cache_hits"] > 0
    assert doc["backend"] == "inferledger-sim" and doc["model_id"] == "llama-3.1-8b"
    assert doc["num_prompts"] == 200 and doc["request_rate"] == 20.0
    assert re.fullmatch(r"\d{8}-\d{6}", doc["date"])
    assert doc["completed"] + doc["failed"] == 200
    assert doc["request_throughput"] == pytest.approx(doc["completed"] / doc["duration"])
    assert doc["output_throughput"] == pytest.approx(doc["total_output_tokens"] / doc["duration"])
    # the numbers trace to their inputs
    config = doc["config"]
    assert config["scenario"]["num_prompts"] == 200 and config["scenario"]["seed"] == 3
    engine = config["engine"]
    assert engine["num_gpu_blocks"] == build_predictor("llama-3.1-8b", "h200").num_gpu_blocks()
    assert (engine["max_num_seqs"], engine["max_num_batched_tokens"]) == (1024, 8192)
    assert (
        config["simulation"]["cluster"]["replica"]["cache"]["num_gpu_blocks"]
        == (engine["num_gpu_blocks"])
    )


def test_same_seed_same_output_other_seed_other_output(tmp_path, capsys):
    outputs = []
    for i, seed in enumerate(("5", "5", "6")):
        path = tmp_path / f"r{i}.json"
        rc, out, _ = _run([*SMALL, "--seed", seed, "--save-result", str(path)], capsys)
        assert rc == 0
        doc = json.loads(path.read_text())
        del doc["date"]
        outputs.append((out, doc))
    assert outputs[0] == outputs[1]
    assert outputs[0][0] != outputs[2][0]


def test_infinite_rate_and_max_concurrency(tmp_path, capsys):
    path = tmp_path / "r.json"
    argv = [*SMALL[:-6], "--request-rate", "inf", "--max-concurrency", "8"]
    rc, out, _ = _run([*argv, "--save-result", str(path), "--num-prompts", "40"], capsys)
    assert rc == 0
    assert "Maximum request concurrency:             8         " in out.splitlines()
    assert "Request rate configured" not in out
    doc = json.loads(path.read_text())
    assert doc["request_rate"] == "inf" and doc["max_concurrency"] == 8
    assert doc["config"]["scenario"]["request_rate"] == "inf"


def _scenario(tmp_path: Path, text: str) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return str(path)


BAD = [
    (["--num-prompts", "abc"], "--num-prompts must be an integer, got 'abc'"),
    (["--num-prompts", "0"], "--num-prompts must be >= 1, got 0"),
    (["--request-rate", "-1"], "--request-rate must be > 0 or inf, got -1.0"),
    (["--request-rate", "fast"], "--request-rate must be a number or inf, got 'fast'"),
    (["--burstiness", "0"], "--burstiness must be > 0"),
    (["--router", "random"], "--router must be one of round_robin, least_outstanding_requests"),
    (["--gpu", "tpu-v5"], "unknown GPU 'tpu-v5'"),
    (["--model", "gpt-5"], "unknown model 'gpt-5'"),
    (["--kv-cache-dtype", "fp8_inc"], "--kv-cache-dtype must be one of auto, bfloat16"),
    (["--dtype", "int4"], "unknown dtype 'int4'"),
    (["--gpu", "a100", "--dtype", "fp8"], "A100-80GB has no fp8"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must be in (0, 1]"),
    (["--random-range-ratio", "1"], "--random-range-ratio must be < 1"),
    (["--max-num-seqs", "9000"], "max_num_batched_tokens (8192) must be >= max_num_seqs (9000)"),
    (["--model", "llama-3.1-70b"], "does not fit on H200"),
    (["--gpu-memory-utilization", "0.2"], "fewer than max_model_len 131072"),
    (["--percentile-metrics", "ttft,foo"], "--percentile-metrics takes a comma-separated list"),
    (["--metric-percentiles", "0"], "--metric-percentiles takes comma-separated numbers"),
    (["--save-result", "/nonexistent/dir/r.json"], "folder /nonexistent/dir does not exist"),
    (["--scenario", "/nonexistent.yaml"], "scenario file /nonexistent.yaml: No such file"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_flags_give_one_line_and_exit_2(argv, message, capsys):
    rc, out, err = _run([*SMALL, *argv], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("inferledger: ")
    assert message in err


def test_model_and_gpu_are_required(capsys):
    rc, _, err = _run(["--gpu", "h200"], capsys)
    assert rc == 2 and "model is required (--model, or 'model' in the scenario)" in err
    rc, _, err = _run(["--model", "llama-3.1-8b"], capsys)
    assert rc == 2 and "gpu is required" in err


BAD_FILES = [
    ("model: [unclosed", "is not valid YAML at line 1"),
    ("- a\n- b\n", "must be a mapping of scenario fields"),
    ("model: llama-3.1-8b\nfoo: 1\n", "unknown field(s) foo"),
    ("num_prompts: many\n", ": num_prompts must be an integer, got 'many'"),
    ("enable_prefix_caching: maybe\n", "enable_prefix_caching must be true or false"),
    ("mix: []\n", "mix must be a non-empty list of traffic classes"),
    ("mix:\n  - name: a\n    weight: 1\n", "mix[0]: missing field(s) input_len, output_len"),
    (
        "mix:\n  - {name: chat, weight: -1, input_len: 10, output_len: 10}\n",
        "mix[0]: mix class 'chat': weight must be > 0, got -1",
    ),
    (
        "mix:\n  - {name: chat, weight: 1, input_len: 10, output_len: 10, colour: red}\n",
        "mix[0]: unknown field(s) colour",
    ),
    (
        "mix:\n  - {name: a, weight: 1, input_len: 1, output_len: 1}\n"
        "  - {name: a, weight: 1, input_len: 1, output_len: 1}\n",
        "class names must be unique",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES, ids=[m for _, m in BAD_FILES])
def test_bad_scenario_files_give_one_line_naming_the_field(text, message, tmp_path, capsys):
    path = _scenario(tmp_path, text)
    rc, out, err = _run(["--scenario", path, "--model", "llama-3.1-8b", "--gpu", "h200"], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert path in err and message in err


def test_flags_override_the_scenario_file(tmp_path, capsys):
    path = _scenario(
        tmp_path,
        "model: llama-3.1-8b\ngpu: h100\nnum_prompts: 5000\nrequest_rate: 50\n"
        "mix:\n  - {name: chat, weight: 1, input_len: 100, output_len: 20, prefix_len: 64}\n",
    )
    result = tmp_path / "r.json"
    rc, _, _ = _run(
        ["--scenario", path, "--num-prompts", "30", "--save-result", str(result)], capsys
    )
    assert rc == 0
    doc = json.loads(result.read_text())
    assert doc["completed"] + doc["failed"] == 30
    assert (
        doc["config"]["scenario"]["gpu"] == "h100" and doc["config"]["engine"]["gpu"] == "H100-SXM"
    )
    assert doc["config"]["scenario"]["mix"][0]["name"] == "chat"
    rc, _, err = _run(["--scenario", path, "--random-input-len", "10"], capsys)
    assert rc == 2 and "--random-input-len: the scenario's traffic mix sets the lengths" in err


def test_no_enable_prefix_caching(capsys, tmp_path):
    path = tmp_path / "r.json"
    rc, _, _ = _run([*SMALL, "--no-enable-prefix-caching", "--save-result", str(path)], capsys)
    assert rc == 0
    doc = json.loads(path.read_text())
    assert doc["prefix_cache_hits"] == 0 and doc["prefix_cache_queries"] == 0
    assert doc["config"]["engine"]["enable_prefix_caching"] is False


def test_vllm_scheduler_defaults_per_gpu():
    for gpu in ("h200", "h100", "b200"):
        assert scheduler_defaults(gpu) == (1024, 8192)
    for gpu in ("a100", "l40s"):
        assert scheduler_defaults(gpu) == (256, 2048)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_scenarios_load_and_run(path):
    scenario = load_scenario(path)
    assert scenario.mix and scenario.model and scenario.gpu
    run = run_scenario(replace(scenario, num_prompts=80))
    records = run.result.requests
    assert len(records) == 80 and all(r.succeeded for r in records)
    assert sum(rep.counters.prefix_cache_hits for rep in run.result.replicas) > 0
    assert {r.context["traffic_class"] for r in records} <= {c.name for c in scenario.mix}
    for r in records:
        assert r.output_tokens <= r.context["max_tokens"]


def test_there_are_example_scenarios():
    assert len(EXAMPLES) >= 3


def test_mix_workload_is_deterministic_and_follows_the_weights():
    scenario = ScenarioConfig(
        model="llama-3.1-8b",
        gpu="h200",
        num_prompts=2000,
        request_rate=100.0,
        mix=load_scenario(EXAMPLES[0]).mix,
    )
    from models.serving.scenario_run import make_workload

    a, b = make_workload(scenario), make_workload(scenario)
    assert a == b
    share = sum(s.context["traffic_class"] == scenario.mix[0].name for s in a) / len(a)
    weights = [c.weight for c in scenario.mix]
    assert share == pytest.approx(weights[0] / sum(weights), abs=0.03)
    assert math.isclose(len(a) / a[-1].arrival_s, 100.0, rel_tol=0.1)


def test_every_scenario_field_is_documented():
    docs = (ROOT / "docs" / "simulator.md").read_text()
    for spec in SCENARIO_FIELDS:
        flag = "--" + spec.name.replace("_", "-")
        assert f"`{flag}`" in docs or f"`{spec.name}`" in docs, spec.name
