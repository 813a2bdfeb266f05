"""Workload realism (issue #11): trace replay (`simulate --trace`, and a trace exported from a
real ledger with `inferledger trace export`), the fitted ShareGPT length distribution
(`--dataset-name sharegpt`), client + network delay with jitter, and the warm-up / cool-down
window a closed-loop benchmark measures. Real files, real parsing, the real simulator."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from inferledger.cli import main
from inferledger.core.errors import BadInputError
from inferledger.ledger_fixtures import S, SpanSet
from ledger.allocation import HOUR_NS
from ledger.marts import refresh
from ledger.traces import TraceWindow, export_trace, trace_requests
from models.serving.scenario import ScenarioConfig, load_scenario
from models.serving.scenario_run import make_workload, run_scenario, summarize_run
from models.serving.summary import format_benchmark_result, summarize
from models.workload.datasets import get_dataset
from models.workload.trace import parse_trace, read_trace, trace_specs

BASE = ScenarioConfig(model="llama-3.1-8b", gpu="h200")

TRACE = """\
{"arrival_s": 1700000010.5, "prompt_tokens": 900, "output_tokens": 40, "prefix_id": "sys", "prefix_tokens": 512, "app": "chat", "route": "answer"}
{"arrival_s": 1700000010.0, "prompt_tokens": 700, "output_tokens": 30, "prefix_id": "sys", "prefix_tokens": 512, "request_id": "first"}

{"arrival_s": 1700000011.25, "prompt_tokens": 300, "output_tokens": 20, "max_tokens": 64}
"""  # noqa: E501


def _write(tmp_path: Path, text: str, name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _simulate(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


# --- trace files ---------------------------------------------------------------------------


def test_a_trace_parses_rebases_and_sorts(tmp_path):
    trace = read_trace(_write(tmp_path, TRACE))
    assert [r.prompt_tokens for r in trace] == [900, 700, 300]  # file order, blank line skipped
    specs = trace_specs(trace)
    assert [s.request_id for s in specs] == ["first", "trace-0", "trace-2"]  # by arrival
    assert [s.arrival_s for s in specs] == pytest.approx([0.0, 0.5, 1.25])  # absolute, rebased
    first, second, third = specs
    assert first.prompt == (("prefix:sys", 512), ("first", 188))
    assert second.prompt[0] == ("prefix:sys", 512) and second.prompt_tokens == 900
    assert second.context == {"max_tokens": 40, "app": "chat", "route": "answer"}
    assert third.prompt == (("trace-2", 300),) and third.max_tokens == 64
    assert third.output_tokens == 20


def test_relative_and_absolute_arrivals_replay_the_same():
    line = '{"arrival_s": %s, "prompt_tokens": 5, "output_tokens": 2}'
    relative = parse_trace([line % "0", line % "2.5"])
    absolute = parse_trace([line % "1e9", line % "1000000002.5"])
    assert [s.arrival_s for s in trace_specs(relative)] == [
        s.arrival_s for s in trace_specs(absolute)
    ]


BAD_LINES = [
    ('{"arrival_s": 0, "prompt_tokens": 5', "line 2: not valid JSON"),
    ("[1, 2]", "line 2: expected a JSON object, got list"),
    ('{"arrival_s": 0, "prompt_tokens": 5}', "line 2: missing field(s) output_tokens"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "prompt": 3}',
     "line 2: unknown field(s) prompt"),
    ('{"arrival_s": "soon", "prompt_tokens": 5, "output_tokens": 1}',
     "line 2: arrival_s must be a finite number"),
    ('{"arrival_s": NaN, "prompt_tokens": 5, "output_tokens": 1}',
     "line 2: arrival_s must be a finite number"),
    ('{"arrival_s": true, "prompt_tokens": 5, "output_tokens": 1}',
     "line 2: arrival_s must be a finite number"),
    ('{"arrival_s": 0, "prompt_tokens": 0, "output_tokens": 1}',
     "line 2: prompt_tokens must be >= 1, got 0"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2.5}',
     "line 2: output_tokens must be an integer, got 2.5"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "prefix_id": "p"}',
     "line 2: prefix_id and prefix_tokens go together"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "prefix_id": "p", '
     '"prefix_tokens": 6}', "line 2: prefix_tokens (6) exceeds prompt_tokens (5)"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 9, "max_tokens": 4}',
     "line 2: max_tokens (4) is below output_tokens (9)"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "app": ""}',
     "line 2: app must be a non-empty string"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "request_id": "a"}',
     "line 2: request_id 'a' repeats line 1"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "message"), BAD_LINES, ids=[m for _, m in BAD_LINES])
def test_a_bad_line_is_named_by_number_and_field(line, message, tmp_path, capsys):
    good = '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "request_id": "a"}'
    path = _write(tmp_path, f"{good}\n{line}\n{good.replace('a', 'b')}\n")
    with pytest.raises(BadInputError) as caught:
        read_trace(path)
    assert str(caught.value) == f"{path} {message}" or str(caught.value).startswith(
        f"{path} {message}"
    )
    # through the command: one line, exit 2, and no result file written
    result = tmp_path / "result.json"
    rc, out, err = _simulate(
        ["--model", "llama-3.1-8b", "--gpu", "h200", "--trace", str(path),
         "--save-result", str(result)], capsys,
    )  # fmt: skip
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert message in err
    assert not result.exists()


def test_empty_and_missing_traces(tmp_path):
    with pytest.raises(BadInputError, match="holds no requests"):
        read_trace(_write(tmp_path, "\n\n"))
    with pytest.raises(BadInputError, match="no such file"):
        read_trace(tmp_path / "nope.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe{}")
    with pytest.raises(BadInputError, match="not UTF-8"):
        read_trace(tmp_path / "bin.jsonl")


def test_simulate_replays_a_trace(tmp_path, capsys):
    path = _write(tmp_path, TRACE)
    result = tmp_path / "result.json"
    rc, _, err = _simulate(
        ["--model", "llama-3.1-8b", "--gpu", "h200", "--trace", str(path),
         "--save-result", str(result)], capsys,
    )  # fmt: skip
    assert rc == 0, err
    doc = json.loads(result.read_text())
    assert doc["completed"] == 3 and doc["num_prompts"] == 3 and doc["dataset_name"] == "trace"
    assert doc["total_input_tokens"] == 1900 and doc["total_output_tokens"] == 90
    assert doc["prefix_cache_hits"] >= 512  # the second "sys" request hit the first's prefix
    assert doc["config"]["scenario"]["trace"] == str(path)


def test_a_scenario_file_names_its_trace_relative_to_itself(tmp_path):
    folder = tmp_path / "scenarios"
    folder.mkdir()
    _write(folder, TRACE, "t.jsonl")
    _write(folder, "model: llama-3.1-8b\ngpu: h200\ntrace: t.jsonl\n", "s.yaml")
    scenario = load_scenario(folder / "s.yaml")
    assert scenario.trace == str(folder / "t.jsonl")
    assert len(make_workload(scenario)) == 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--num-prompts", "50"], "the trace sets arrivals and lengths; drop num_prompts"),
        (["--request-rate", "4"], "drop request_rate"),
        (["--dataset-name", "sharegpt"], "a trace and --dataset-name exclude each other"),
    ],
)
def test_a_trace_refuses_the_flags_it_replaces(extra, message, tmp_path, capsys):
    path = _write(tmp_path, TRACE)
    rc, _, err = _simulate(
        ["--model", "llama-3.1-8b", "--gpu", "h200", "--trace", str(path), *extra], capsys
    )
    assert rc == 2 and message in err


# --- the ledger's own requests as a trace ---------------------------------------------------

HOUR0 = 494_444 * HOUR_NS  # 2026-05-28 20:00 UTC
START = datetime.fromtimestamp(HOUR0 / S, UTC)


@pytest.fixture
def ledger(storage):
    """A small real ledger through the real ingest path and refresh: app a1's request at 10 s
    (with its vLLM engine span), two requests of app chat with a 512-token prefix-cache hit at
    50 s and 60 s, and a failed one at 70 s."""
    spans = SpanSet(HOUR0 + 100 * S)
    trace = spans.new_trace()
    root = spans.root(trace, 9.5, 30.5, app="a1", route="/r", team="t")
    call = spans.llm_call(trace, root, 9.9, 30.1, model="m", input_tokens=1000, output_tokens=19)
    spans.engine(trace, call, 10, 30, replica="r0", queue_s=0.0, ttft_s=2,
                 prompt_tokens=1000, completion_tokens=19)  # fmt: skip
    for start, prompt, cached, error in ((50, 800, 512, False), (60, 900, 512, False),
                                         (70, 400, None, True)):  # fmt: skip
        trace = spans.new_trace()
        root = spans.root(trace, start, start + 5, app="chat", route="/ask", error=error)
        spans.llm_call(
            trace, root, start, start + 4, model="m", input_tokens=prompt, output_tokens=30,
            cached_tokens=cached, error=error,
        )  # fmt: skip
    spans.store(storage)
    refresh(storage)
    return storage


def test_export_reads_the_ledgers_requests(ledger, tmp_path):
    out = tmp_path / "observed.jsonl"
    window = TraceWindow(START, START + timedelta(hours=1))
    result = export_trace(ledger, window, out)
    assert (result.written, result.skipped) == (3, 1)
    trace = read_trace(out)
    assert [(r.app, r.route, r.prompt_tokens, r.output_tokens) for r in trace] == [
        ("a1", "/r", 1000, 19), ("chat", "/ask", 800, 30), ("chat", "/ask", 900, 30),
    ]  # fmt: skip
    # the client span's start (0.1 s before the engine's), from the window's start
    assert [r.arrival_s for r in trace] == pytest.approx([109.9, 150.0, 160.0])
    assert [(r.prefix_id, r.prefix_tokens) for r in trace] == [
        (None, 0), ("chat//ask", 512), ("chat//ask", 512),
    ]  # fmt: skip
    assert all(r.request_id for r in trace)
    # and it replays: the two chat requests share their prefix
    scenario = replace(BASE, trace=str(out))
    run = run_scenario(scenario)
    assert len(run.result.requests) == 3
    assert sum(r.cached_tokens for r in run.result.requests) >= 512


def test_export_filters_by_app(ledger):
    window = TraceWindow(START, START + timedelta(hours=1), app="chat")
    requests, skipped = trace_requests(ledger, window)
    assert [r.app for r in requests] == ["chat", "chat"] and skipped == 1


def test_export_writes_nothing_when_there_is_nothing(ledger, tmp_path):
    out = tmp_path / "none.jsonl"
    with pytest.raises(BadInputError, match="no requests to export"):
        export_trace(
            ledger, TraceWindow(START + timedelta(hours=5), START + timedelta(hours=6)), out
        )
    with pytest.raises(BadInputError, match="does not exist"):
        export_trace(ledger, TraceWindow(START, START + timedelta(hours=1)), tmp_path / "x" / "y")
    assert list(tmp_path.iterdir()) == [tmp_path / "test.duckdb"] or not out.exists()
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_bad_windows():
    with pytest.raises(BadInputError, match="window is empty"):
        TraceWindow(START, START)
    with pytest.raises(BadInputError, match="time zone"):
        TraceWindow(START.replace(tzinfo=None), START + timedelta(hours=1))


def test_trace_export_command(ledger, tmp_path, capsys):
    db = tmp_path / "test.duckdb"  # conftest's storage fixture
    ledger.close()
    out = tmp_path / "cli.jsonl"
    rc = main(["trace", "export", "--db", str(db), "--from", START.isoformat(),
               "--to", (START + timedelta(hours=1)).isoformat(), "--app", "chat",
               "--out", str(out)])  # fmt: skip
    printed, err = capsys.readouterr()
    assert rc == 0, err
    assert printed.startswith("wrote 2 requests to") and "1 failed" in printed
    assert len(read_trace(out)) == 2
    rc = main(["trace", "export", "--db", str(db), "--from", "yesterday", "--to", "now",
               "--out", str(out)])  # fmt: skip
    assert rc == 2 and "--from: not an ISO 8601 time" in capsys.readouterr().err
    rc = main(["trace", "export", "--db", str(db), "--from", START.isoformat(),
               "--to", START.isoformat(), "--out", str(out)])  # fmt: skip
    assert rc == 2 and "the window is empty" in capsys.readouterr().err
    rc = main(["trace", "export", "--db", str(tmp_path / "missing.duckdb"), "--from",
               "2026-05-28T20:00", "--to", "2026-05-28T21:00", "--out", str(out)])  # fmt: skip
    assert rc == 2 and "no database" in capsys.readouterr().err
    assert len(read_trace(out)) == 2  # the failed runs left the earlier file as it was


# --- ShareGPT-like lengths -----------------------------------------------------------------


def test_sharegpt_lengths_match_the_published_means_and_vllms_filter():
    dataset = get_dataset("sharegpt")
    lengths = dataset.sample(np.random.default_rng(0), 100_000)
    inputs, outputs = lengths[:, 0], lengths[:, 1]
    assert inputs.mean() == pytest.approx(dataset.mean_input_tokens, rel=0.02)
    assert outputs.mean() == pytest.approx(dataset.mean_output_tokens, rel=0.02)
    assert (dataset.mean_input_tokens, dataset.mean_output_tokens) == (215.2, 197.1)
    assert inputs.min() >= 4 and outputs.min() >= 4 and inputs.max() <= 1024
    assert (inputs + outputs).max() <= 2048
    assert np.median(inputs) < inputs.mean()  # long-tailed, as ShareGPT is
    again = dataset.sample(np.random.default_rng(0), 100_000)
    assert np.array_equal(lengths, again)


def test_simulate_with_the_sharegpt_dataset(tmp_path, capsys):
    result = tmp_path / "r.json"
    rc, _, err = _simulate(
        ["--model", "llama-3.1-8b", "--gpu", "h200", "--dataset-name", "sharegpt",
         "--num-prompts", "300", "--request-rate", "20", "--save-result", str(result)], capsys,
    )  # fmt: skip
    assert rc == 0, err
    doc = json.loads(result.read_text())
    assert doc["completed"] == 300 and doc["dataset_name"] == "sharegpt"
    assert doc["total_input_tokens"] / 300 == pytest.approx(215.2, rel=0.12)
    assert doc["total_output_tokens"] / 300 == pytest.approx(197.1, rel=0.15)
    rc, _, err = _simulate(
        ["--model", "llama-3.1-8b", "--gpu", "h200", "--dataset", "sharegpt",
         "--random-input-len", "99"], capsys,
    )  # fmt: skip
    assert rc == 2 and "sharegpt sets the lengths; drop random_input_len" in err
    rc, _, err = _simulate(["--model", "llama-3.1-8b", "--gpu", "h200", "--dataset", "x"], capsys)
    assert rc == 2 and "--dataset-name must be one of random, sharegpt" in err


# --- client delay ---------------------------------------------------------------------------

SMALL = replace(BASE, num_prompts=60, request_rate=10.0, random_input_len=256,
                random_output_len=32)  # fmt: skip


def test_a_fixed_client_delay_moves_ttft_and_e2e_only():
    plain = summarize_run(run_scenario(SMALL))
    delayed_run = run_scenario(replace(SMALL, client_delay_ms=40.0))
    delayed = summarize_run(delayed_run)
    assert set(delayed_run.client_delay_s.values()) == {0.04}
    for stat in ("mean", "median", "p99"):
        assert delayed[f"{stat}_ttft_ms"] == pytest.approx(plain[f"{stat}_ttft_ms"] + 40.0)
        assert delayed[f"{stat}_e2el_ms"] == pytest.approx(plain[f"{stat}_e2el_ms"] + 40.0)
        assert delayed[f"{stat}_tpot_ms"] == pytest.approx(plain[f"{stat}_tpot_ms"])
        assert delayed[f"{stat}_itl_ms"] == pytest.approx(plain[f"{stat}_itl_ms"])
    assert delayed["mean_client_delay_ms"] == pytest.approx(40.0)
    # the client sees the last response 40 ms later
    assert delayed["duration"] == pytest.approx(plain["duration"] + 0.04)
    text = format_benchmark_result(delayed)
    assert "Mean client delay (ms):                  40.00" in text


def test_client_jitter_is_seeded_and_never_negative():
    run = run_scenario(replace(SMALL, client_delay_ms=5.0, client_jitter_ms=10.0))
    delays = np.array(list(run.client_delay_s.values()))
    assert delays.min() == 0.0 and delays.max() > 0.005  # cut at zero, spread both ways
    again = run_scenario(replace(SMALL, client_delay_ms=5.0, client_jitter_ms=10.0))
    assert again.client_delay_s == run.client_delay_s
    # the workload is the same with or without delays
    plain = run_scenario(SMALL)
    assert [r.e2e_s for r in plain.result.requests] == [r.e2e_s for r in run.result.requests]


def test_a_negative_client_delay_is_refused(capsys):
    rc, _, err = _simulate(
        ["--model", "llama-3.1-8b", "--gpu", "h200", "--client-delay-ms", "-1"], capsys
    )
    assert rc == 2 and "--client-delay-ms must be >= 0" in err


# --- the measured window of a closed-loop run -----------------------------------------------

CLOSED = replace(BASE, num_prompts=400, max_concurrency=32, random_input_len=512,
                 random_output_len=64)  # fmt: skip


def test_warmup_and_cooldown_measure_the_steady_window(capsys):
    whole_run = run_scenario(CLOSED)
    whole = summarize_run(whole_run)
    assert (whole["measure_start_s"], whole["measure_end_s"]) == (0.0, whole["duration"])
    run_s = whole["run_duration"]
    warm, cool = 0.2 * run_s, 0.2 * run_s
    steady = summarize(whole_run.result, warmup_s=warm, cooldown_s=cool)
    assert steady["measure_start_s"] == pytest.approx(warm)
    assert steady["measure_end_s"] == pytest.approx(run_s - cool)
    assert steady["duration"] == pytest.approx(run_s - warm - cool)
    records = whole_run.result.requests
    t0 = min(r.arrival_s for r in records)
    sent = [r for r in records if warm <= r.arrival_s - t0 <= run_s - cool]
    done = [r for r in records if warm <= r.finished_s - t0 <= run_s - cool]
    assert steady["measured_requests"] == len(sent) < len(records)
    assert steady["completed"] == len(done)
    assert steady["request_throughput"] == pytest.approx(len(done) / steady["duration"])
    assert steady["mean_e2el_ms"] == pytest.approx(1000 * float(np.mean([r.e2e_s for r in sent])))
    # the first wave (32 prompts prefilled at once) is left out: its TTFT tail is gone
    assert steady["p99_ttft_ms"] < whole["p99_ttft_ms"]
    text = format_benchmark_result(steady)
    window = f"{warm:.2f}-{run_s - cool:.2f} of {run_s:.2f}"
    assert f"Measured window (s):                     {window}" in text
    assert "Measured window" not in format_benchmark_result(whole)


def test_the_window_through_the_command(tmp_path, capsys):
    result = tmp_path / "r.json"
    rc, out, err = _simulate(
        ["--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "300",
         "--max-concurrency", "16", "--random-input-len", "256", "--random-output-len", "32",
         "--warmup-s", "0.5", "--cooldown-s", "0.5", "--save-result", str(result)], capsys,
    )  # fmt: skip
    assert rc == 0, err
    assert "Measured window (s):                     0.50-" in out
    doc = json.loads(result.read_text())
    assert doc["measure_start_s"] == 0.5
    assert doc["measure_end_s"] == pytest.approx(doc["run_duration"] - 0.5)
    assert doc["config"]["scenario"]["warmup_s"] == 0.5


def test_a_window_that_leaves_nothing_is_refused(capsys):
    rc, _, err = _simulate(
        ["--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "20",
         "--warmup-s", "1000"], capsys,
    )  # fmt: skip
    assert rc == 2 and "leave nothing of a" in err


def test_the_knobs_in_a_scenario_file(tmp_path):
    path = _write(
        tmp_path,
        "model: llama-3.1-8b\ngpu: h200\ndataset_name: sharegpt\nnum_prompts: 50\n"
        "client_delay_ms: 3\nclient_jitter_ms: 1\nwarmup_s: 0.1\ncooldown_s: 0.1\n",
        "s.yaml",
    )
    scenario = load_scenario(path)
    assert (scenario.dataset_name, scenario.client_delay_ms, scenario.warmup_s) == (
        "sharegpt", 3.0, 0.1,
    )  # fmt: skip
    summary = summarize_run(run_scenario(scenario))
    assert summary["measure_start_s"] == 0.1 and summary["mean_client_delay_ms"] > 0
    bad = _write(tmp_path, "model: llama-3.1-8b\ngpu: h200\nwarmup_s: -2\n", "bad.yaml")
    with pytest.raises(BadInputError, match=r"bad.yaml: warmup_s must be >= 0, got -2"):
        load_scenario(bad)
