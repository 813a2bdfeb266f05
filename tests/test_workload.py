"""The workload generator (models/workload): config validation, the arrival process, the task
plan's rates, the closed loop with the simulated engines, and the OTLP spans it produces,
decoded by the real decoder and checked for parentage and nesting."""

from __future__ import annotations

import copy
import math
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import yaml

from ingest.otlp_decode import decode_traces
from ingest.prom_text import parse_exposition
from models.workload import (
    SimulatedSegment,
    SpanBuilder,
    WorkloadConfigError,
    base_intensity,
    build_deployments,
    build_pools,
    draw_arrivals,
    load_workload,
    plan_tasks,
    scrape_targets,
    simulate_plan,
    workload_from_dict,
)
from models.workload.arrivals import HOUR_S
from models.workload.feed import merge_pages

WEDNESDAY = datetime(2026, 6, 3, tzinfo=UTC).timestamp()  # 00:00 UTC
SHIPPED = Path(__file__).resolve().parent.parent / "models" / "data" / "workload.yaml"

# One app whose rates are high enough to measure in a few thousand tasks.
STRESS = {
    "deployments": [
        {
            "name": "small",
            "model": "llama-3.1-8b",
            "served_model_name": "meta-llama/Llama-3.1-8B-Instruct",
            "gpu": "h200",
            "replicas": 2,
            "service_name": "vllm-small",
            "node": "node-s",
        }
    ],
    "hosted_models": [
        {
            "name": "hosted",
            "provider": "openai",
            "model": "gpt-4.1-mini",
            "server_address": "api.openai.com",
            "ttft_s": 0.4,
            "output_tokens_per_s": {"dist": "uniform", "min": 60, "max": 100},
        }
    ],
    "apps": [
        {
            "name": "stress-app",
            "team": "qa",
            "arrivals": {"mean_rate_per_s": 2.0, "hourly": [1.0] * 24},
            "routes": [
                {
                    "route": "/ask",
                    "workflow": "ask",
                    "share": 0.7,
                    "deployment": "small",
                    "prompt": [
                        {"shared": "system", "tokens": 1200},
                        {
                            "pool": "docs",
                            "size": 50,
                            "zipf": 1.1,
                            "draws": 2,
                            "tokens": {"dist": "uniform", "min": 100, "max": 300},
                        },
                        {
                            "unique": "question",
                            "tokens": {"dist": "uniform", "min": 20, "max": 200},
                        },
                    ],
                    "output_tokens": {"dist": "uniform", "min": 20, "max": 120},
                    "max_tokens": 100,
                    "retrieval": {
                        "collection": "kb",
                        "system": "qdrant",
                        "server_address": "qdrant",
                        "latency_s": 0.03,
                    },
                    "tool": {
                        "name": "lookup",
                        "probability": 0.4,
                        "mode": "between",
                        "latency_s": {"dist": "uniform", "min": 0.05, "max": 0.3},
                        "call_output_tokens": 30,
                        "result_tokens": 200,
                    },
                    "failure_rate": 0.3,
                    "max_attempts": 2,
                    "retry_backoff_s": {"dist": "uniform", "min": 0.2, "max": 1.0},
                    "fallback": "hosted",
                    "outcomes": {"accepted": 0.6, "corrected": 0.3, "rejected": 0.1},
                    "review": {"probability": 0.5, "seconds": 30},
                },
                {
                    "route": "/extract",
                    "workflow": "extract",
                    "share": 0.3,
                    "deployment": "small",
                    "prompt": [
                        {"shared": "schema", "tokens": 800},
                        {"unique": "doc", "tokens": {"dist": "uniform", "min": 500, "max": 3000}},
                    ],
                    "fanout": {"dist": "uniform", "min": 1, "max": 3},
                    "output_tokens": 80,
                    "max_tokens": 256,
                    "tool": {"name": "post", "probability": 1.0, "mode": "after", "latency_s": 0.1},
                    "conversation": None,
                },
            ],
        }
    ],
}


def attrs(table, i):
    return dict(table.column("attributes")[i].as_py())


def decoded_spans(sim):
    """Every span of a simulated plan, decoded by ingest's decoder: (spans, resources)."""
    builder = SpanBuilder(sim)
    rows, resources, rejected = [], [], 0
    for req in builder.export_requests(range(sim.plan.num_attempts), max_spans=2000):
        d = decode_traces(req.SerializeToString())
        rejected += d.rejected_spans
        res = [dict(r) for r in d.resources.column("resource_attributes").to_pylist()]
        for row in d.spans.to_pylist():
            row["attributes"] = dict(row["attributes"])
            row["resource"] = res[row["resource_index"]]
            rows.append(row)
        resources.extend(res)
    assert rejected == 0
    return rows


@pytest.fixture(scope="module")
def shipped():
    return load_workload()


@pytest.fixture(scope="module")
def shipped_sim(shipped):
    """45 busy minutes (a Wednesday afternoon) of the shipped scenario, served."""
    config = shipped.scaled(0.5)
    plan = plan_tasks(
        config,
        build_pools(config, 3),
        np.random.default_rng(3),
        start_unix_s=WEDNESDAY + 14 * HOUR_S,
        duration_s=2700,
    )
    return simulate_plan(plan, build_deployments(config))


@pytest.fixture(scope="module")
def stress_sim():
    config = workload_from_dict(STRESS)
    plan = plan_tasks(
        config,
        build_pools(config, 5),
        np.random.default_rng(5),
        start_unix_s=WEDNESDAY,
        duration_s=900,
    )
    return simulate_plan(plan, build_deployments(config))


# --- config -------------------------------------------------------------------------------


def test_shipped_scenario(shipped):
    assert {a.name: a.team for a in shipped.apps} == {
        "support-assistant": "customer-experience",
        "document-extraction": "finance-ops",
        "code-assistant": "developer-productivity",
        "internal-chat": "platform",
    }
    routes = {r.route for a in shipped.apps for r in a.routes}
    assert routes == {"/answer", "/summarize", "/extract", "/complete", "/chat"}
    assert [(d.name, d.replicas, d.gpus, d.routing) for d in shipped.deployments] == [
        ("llama-3.1-8b-h200", 4, 4, "prefix_affinity"),
        ("llama-3.1-70b-fp8-h200", 1, 1, "least_outstanding_requests"),
        ("llama-3.1-8b-batch-h200", 2, 2, "least_outstanding_requests"),
    ]
    assert [t.name for t in scrape_targets(shipped)] == [
        "vllm-llama-8b-0",
        "vllm-llama-8b-1",
        "vllm-llama-8b-2",
        "vllm-llama-8b-3",
        "vllm-llama-70b-0",
        "vllm-llama-8b-batch-0",
        "vllm-llama-8b-batch-1",
        "dcgm-gpu-node-a",
        "dcgm-gpu-node-b",
        "dcgm-gpu-node-c",
    ]
    # the planted false economy: /summarize on the 8B from Wednesday 14:00 to Friday 18:00
    summarize = next(r for a in shipped.apps for r in a.routes if r.route == "/summarize")
    assert summarize.switch is not None
    assert (summarize.switch.start_s, summarize.switch.end_s) == (
        (2 * 24 + 14) * HOUR_S,
        (4 * 24 + 18) * HOUR_S,
    )
    assert summarize.deployment == "llama-3.1-70b-fp8-h200"
    assert summarize.switch.route.deployment == "llama-3.1-8b-h200"
    assert summarize.at(WEDNESDAY + 13.99 * HOUR_S) is summarize
    assert summarize.at(WEDNESDAY + 14 * HOUR_S) is summarize.switch.route
    assert summarize.at(WEDNESDAY + (2 * 24 + 18) * HOUR_S) is summarize  # Friday 18:00
    assert summarize.at(WEDNESDAY + 7 * 24 * HOUR_S + 15 * HOUR_S) is summarize.switch.route


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["apps"][0].pop("team"), "workload.apps[0]: missing team"),
        (
            lambda d: d["apps"][0]["routes"][0].update(deployment="nope"),
            "workload.apps[0].routes[0].deployment: unknown deployment 'nope'",
        ),
        (
            lambda d: d["apps"][0]["routes"][0]["outcomes"].update(accepted=0.9),
            "workload.apps[0].routes[0].outcomes: probabilities sum to 1.3, not 1",
        ),
        (
            lambda d: d["apps"][0]["arrivals"].update(hourly=[1.0] * 23),
            "workload.apps[0].arrivals.hourly: expected 24 numbers >= 0, not all zero",
        ),
        (
            lambda d: d["apps"][0]["routes"][0]["output_tokens"].update(dist="gamma"),
            "workload.apps[0].routes[0].output_tokens: dist must be lognormal or uniform",
        ),
        (
            lambda d: d["apps"][0]["routes"][0]["prompt"][0].update(shared="a:b"),
            "prompt[0].shared: a segment key must not contain ':'",
        ),
        (lambda d: d["apps"][0].update(colour="red"), "apps[0]: unknown field(s) colour"),
        (
            lambda d: d["apps"][0]["routes"][0].update(fallback="gpt-9"),
            "fallback: unknown hosted model 'gpt-9'",
        ),
        (
            lambda d: d["deployments"][0].update(routing="random"),
            "workload.deployments[0].routing: expected one of least_outstanding_requests, "
            "round_robin, prefix_affinity, got 'random'",
        ),
        (
            lambda d: d["apps"][0]["routes"][0].update(switch={"deployment": "small"}),
            "workload.apps[0].routes[0].switch: missing from",
        ),
        (
            lambda d: d["apps"][0]["routes"][0].update(
                switch={"from": {"weekday": "wed", "hour": 12}, "deployment": "small"}
            ),
            "routes[0].switch.from.weekday: expected a day name, got 'wed'",
        ),
        (
            lambda d: d["apps"][0]["routes"][0].update(
                switch={"from": {"weekday": "friday", "hour": 25}, "deployment": "small"}
            ),
            "routes[0].switch.from.hour: expected a number from 0 to 24, got 25",
        ),
        (
            lambda d: d["apps"][0]["routes"][0].update(
                switch={
                    "from": {"weekday": "friday"},
                    "until": {"weekday": "wednesday"},
                    "deployment": "small",
                }
            ),
            "routes[0].switch: until must come after from in the same week",
        ),
        (
            lambda d: d["apps"][0]["routes"][0].update(switch={"from": {"weekday": "friday"}}),
            "routes[0].switch: changes nothing",
        ),
        (
            lambda d: d["apps"][0]["routes"][0].update(
                switch={"from": {"weekday": "friday"}, "prompt": []}
            ),
            "routes[0].switch: unknown field(s) prompt",
        ),
        (
            lambda d: d["apps"][0]["routes"][0].update(
                switch={"from": {"weekday": "friday"}, "deployment": "nope"}
            ),
            "workload.apps[0].routes[0].switch.deployment: unknown deployment 'nope'",
        ),
        (
            lambda d: d["apps"][0]["routes"][0].update(
                switch={"from": {"weekday": "friday"}, "failure_rate": 2}
            ),
            "routes[0].switch.failure_rate: expected a number from 0 to 0.95, got 2",
        ),
    ],
)
def test_config_errors_are_one_line(edit, message):
    doc = copy.deepcopy(STRESS)
    edit(doc)
    with pytest.raises(WorkloadConfigError) as err:
        workload_from_dict(doc)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_file_is_one_line(tmp_path):
    bad = tmp_path / "w.yaml"
    bad.write_text("apps: [\n", encoding="utf-8")
    with pytest.raises(WorkloadConfigError, match=r"is not valid YAML at line \d+$"):
        load_workload(bad)
    with pytest.raises(WorkloadConfigError, match="No such file"):
        load_workload(tmp_path / "missing.yaml")
    good = tmp_path / "good.yaml"
    good.write_text(SHIPPED.read_text(encoding="utf-8"), encoding="utf-8")
    assert load_workload(good) == load_workload()


# --- arrivals -----------------------------------------------------------------------------


def test_weekly_mean_and_diurnal_shape(shipped):
    app = next(a for a in shipped.apps if a.name == "code-assistant")
    arrivals = type(app.arrivals)(
        app.arrivals.mean_rate_per_s, app.arrivals.hourly, app.arrivals.weekday
    )  # no bursts: only the curve
    monday = WEDNESDAY - 2 * 86400
    times, bursts = draw_arrivals(arrivals, np.random.default_rng(11), monday, 14 * 86400)
    assert bursts == ()
    assert len(times) == pytest.approx(arrivals.mean_rate_per_s * 14 * 86400, rel=0.01)
    assert np.all(np.diff(times) >= 0)
    hours = ((times % 86400) // HOUR_S).astype(int)
    weekday = ((times - monday) // 86400).astype(int) % 7 < 5
    peak = np.sum((hours == 14) & weekday)
    night = np.sum((hours == 3) & weekday)
    expected_peak = sum(
        base_intensity(
            arrivals, np.arange(d * 86400 + 14 * 3600, d * 86400 + 15 * 3600, 60.0) + monday
        ).sum()
        * 60
        for d in range(14)
        if d % 7 < 5
    )
    assert peak == pytest.approx(expected_peak, rel=5 / math.sqrt(expected_peak))
    assert peak > 20 * night  # 2.1 vs 0.05 of the daily curve
    weekend = np.sum(~weekday)
    assert weekend < 0.1 * np.sum(weekday)


def test_bursts_add_load(shipped):
    app = next(a for a in shipped.apps if a.name == "support-assistant")
    rng = np.random.default_rng(2)
    times, bursts = draw_arrivals(app.arrivals, rng, WEDNESDAY, 30 * 86400)
    assert 10 <= len(bursts) <= 40  # 0.8 a day
    b = max(bursts, key=lambda b: b.multiplier * b.duration_s)
    inside = np.sum((times >= b.start_s) & (times < b.start_s + b.duration_s))
    grid = np.arange(b.start_s, b.start_s + b.duration_s, 10.0)
    expected = base_intensity(app.arrivals, grid).sum() * 10 * b.multiplier
    assert inside == pytest.approx(expected, rel=0.35)


# --- the task plan ------------------------------------------------------------------------


def test_plan_is_deterministic(shipped):
    def plan(seed):
        return plan_tasks(
            shipped,
            build_pools(shipped, seed),
            np.random.default_rng(seed),
            start_unix_s=WEDNESDAY,
            duration_s=1800,
        )

    a, b, c = plan(1), plan(1), plan(2)
    assert a.tasks == b.tasks and a.engine_calls == b.engine_calls
    assert a.engine_calls != c.engine_calls


def test_spans_are_deterministic(stress_sim):
    config = stress_sim.plan.config
    again = simulate_plan(
        plan_tasks(
            config,
            build_pools(config, 5),
            np.random.default_rng(5),
            start_unix_s=WEDNESDAY,
            duration_s=900,
        ),
        build_deployments(config),
    )
    first = [r.SerializeToString() for r in SpanBuilder(stress_sim).export_requests(range(50))]
    second = [r.SerializeToString() for r in SpanBuilder(again).export_requests(range(50))]
    assert first == second


def test_retries_fallbacks_outcomes_at_configured_rates():
    config = workload_from_dict(STRESS)
    plan = plan_tasks(
        config,
        build_pools(config, 9),
        np.random.default_rng(9),
        start_unix_s=WEDNESDAY,
        duration_s=4 * 3600,
    )
    ask = [t for t in plan.tasks if t.route.route == "/ask"]
    n = len(ask)
    assert n > 15_000

    def near(count, p):
        assert count == pytest.approx(n * p, abs=5 * math.sqrt(n * p * (1 - p)))

    near(sum(len(t.attempts) >= 2 for t in ask), 0.3)  # attempt 1 failed -> retried
    near(sum(t.attempts[-1].fallback for t in ask), 0.09)  # both failed -> hosted model
    assert all(not t.attempts[-1].error_type for t in ask)  # the fallback always answers
    outcomes = Counter(t.outcome for t in ask)
    near(outcomes["accepted"], 0.6)
    near(outcomes["corrected"], 0.3)
    near(sum(t.review_s is not None for t in ask), 0.5)
    tools = sum(any(s.kind.value == "tool" for s in t.attempts[0].steps) for t in ask)
    near(tools, 0.4)
    extract = [t for t in plan.tasks if t.route.route == "/extract"]
    chunks = Counter(len(t.attempts[0].steps[0].calls) for t in extract)
    assert set(chunks) == {1, 2, 3}
    # Retries resend the same prompt (prefix caching makes them cheap).
    retried = next(t for t in ask if len(t.attempts) > 1 and not t.attempts[1].fallback)
    first = [c.prompt for s in retried.attempts[0].steps for c in s.calls]
    second = [c.prompt for s in retried.attempts[1].steps for c in s.calls]
    assert first[0] == second[0]


def test_prompts_share_prefixes(shipped_sim):
    calls = shipped_sim.plan.engine_calls
    assert all(c.prompt_tokens + c.max_tokens <= 32768 for c in calls)
    code = [c for c in calls if c.prompt[0][0] == "code-system-prompt-v3"]
    repos = Counter(c.prompt[1][0] for c in code)
    assert repos.most_common(1)[0][1] > 0.1 * len(code)  # popular repositories are reused
    records = [shipped_sim.records[c.engine_index] for c in code]
    hit = sum(r.cached_tokens for r in records) / sum(r.prompt_tokens for r in records)
    assert hit > 0.5  # repository context and system prompt come from the prefix cache


# --- the closed loop and the spans --------------------------------------------------------


@pytest.mark.parametrize("which", ["shipped_sim", "stress_sim"])
def test_spans_link_app_and_engine_and_nest(which, request):
    sim = request.getfixturevalue(which)
    spans = decoded_spans(sim)
    by_id = {(s["trace_id"], s["span_id"]): s for s in spans}
    assert len(by_id) == len(spans)
    engine = [s for s in spans if s["name"] == "llm_request"]
    assert len(engine) == len(sim.plan.engine_calls)  # every engine request traced once
    for s in engine:
        parent = by_id[(s["trace_id"], s["parent_span_id"])]
        assert parent["kind"] == 3  # CLIENT
        assert parent["attributes"]["gen_ai.operation.name"] == "chat"
        assert parent["attributes"]["gen_ai.provider.name"] == "vllm"
        assert parent["attributes"]["gen_ai.response.id"] == s["attributes"]["gen_ai.request.id"]
        assert (
            parent["attributes"]["gen_ai.usage.input_tokens"]
            == (s["attributes"]["gen_ai.usage.prompt_tokens"])
        )
        assert s["resource"]["service.name"].startswith("vllm-")
    roots = [s for s in spans if s["parent_span_id"] is None]
    assert len(roots) == sim.plan.num_attempts
    for s in spans:
        if s["parent_span_id"] is None:
            continue
        parent = by_id[(s["trace_id"], s["parent_span_id"])]
        assert parent["start_ns"] < s["start_ns"] <= s["end_ns"] < parent["end_ns"], s["name"]
    for root in roots:
        a = root["attributes"]
        assert root["kind"] == 2 and root["name"] == f"POST {a['inferledger.route']}"
        for key in (
            "inferledger.task.id",
            "inferledger.workflow",
            "inferledger.app",
            "inferledger.team",
            "inferledger.attempt",
        ):
            assert key in a
        assert root["resource"]["deployment.environment.name"] == "prod"
        assert root["resource"]["inferledger.team"] == a["inferledger.team"]
    assert sim.schedule.overlaps <= max(1, len(roots) // 500)


def test_fallback_and_retry_spans(stress_sim):
    spans = decoded_spans(stress_sim)
    children: dict[tuple[str, str], list[dict]] = {}
    for s in spans:
        if s["parent_span_id"]:
            children.setdefault((s["trace_id"], s["parent_span_id"]), []).append(s)
    roots = [s for s in spans if s["parent_span_id"] is None]
    fallbacks = [r for r in roots if r["attributes"]["inferledger.fallback"] == "true"]
    assert fallbacks
    for root in fallbacks:
        llm = [
            c
            for c in children[(root["trace_id"], root["span_id"])]
            if c["kind"] == 3 and c["attributes"].get("gen_ai.operation.name") == "chat"
        ]
        assert llm and all(c["attributes"]["gen_ai.provider.name"] == "openai" for c in llm)
        for c in llm:
            assert (c["trace_id"], c["span_id"]) not in children  # no engine span under it
            assert int(c["attributes"]["gen_ai.usage.cache_read.input_tokens"]) >= 1024
    failed = [r for r in roots if r["status_code"] == 2]
    assert failed and all("error.type" in r["attributes"] for r in failed)
    assert all("inferledger.outcome" not in r["attributes"] for r in failed)
    by_task = Counter(r["attributes"]["inferledger.task.id"] for r in roots)
    task, attempts = by_task.most_common(1)[0]
    assert attempts == 3  # failed, retried, fell back: three traces, one task
    traces = {r["trace_id"] for r in roots if r["attributes"]["inferledger.task.id"] == task}
    assert len(traces) == 3
    finals = [r for r in roots if "inferledger.outcome" in r["attributes"]]
    assert len(finals) == len(stress_sim.plan.tasks)
    tools = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    assert tools and all(t["attributes"]["inferledger.stage"] == "tools" for t in tools)


def test_segment_pages_parse(shipped):
    config = shipped.scaled(0.1)
    segment = SimulatedSegment(
        config,
        build_pools(config, 1),
        build_deployments(config),
        seed=1,
        start_unix_s=WEDNESDAY + 15 * HOUR_S,
        duration_s=600,
    )
    pages = segment.pages(WEDNESDAY + 15 * HOUR_S + 300)
    assert [t.name for t, _ in pages] == [t.name for t in scrape_targets(config)]
    at = datetime.fromtimestamp(WEDNESDAY + 15 * HOUR_S + 300, UTC)
    for target, text in pages:
        table = parse_exposition(text, "text/plain; version=0.0.4", at)
        if target.kind == "dcgm":
            gpus = set(table.column("series_key").to_pylist())
            assert len(gpus) == config.deployment(target.deployment).gpus
        else:
            names = set(table.column("family").to_pylist())
            assert "vllm:prompt_tokens" in names and "vllm:kv_cache_usage_perc" in names
    with pytest.raises(ValueError, match="outside the segment"):
        segment.pages(WEDNESDAY)


def test_merge_pages_keeps_one_header_per_family():
    a = '# HELP x X.\n# TYPE x gauge\nx{gpu="0"} 1\n# HELP y Y.\n# TYPE y counter\ny{gpu="0"} 2\n'
    b = a.replace('gpu="0"', 'gpu="1"')
    merged = merge_pages([a, b])
    assert merged.count("# HELP x") == 1 and merged.count("# TYPE y") == 1
    assert merged.splitlines() == [
        "# HELP x X.",
        "# TYPE x gauge",
        'x{gpu="0"} 1',
        'x{gpu="1"} 1',
        "# HELP y Y.",
        "# TYPE y counter",
        'y{gpu="0"} 2',
        'y{gpu="1"} 2',
    ]


def test_yaml_round_trip_of_stress_doc(tmp_path):
    path = tmp_path / "stress.yaml"
    path.write_text(yaml.safe_dump(STRESS), encoding="utf-8")
    assert load_workload(path) == workload_from_dict(STRESS)


def test_a_switched_route_runs_on_its_new_model_inside_its_window():
    """A route's `switch` applies to the tasks that arrive in its weekly window, and only to
    them; prefix-affinity routing sends every prompt with the same shared prefix to the same
    replica (the records say which)."""
    from models.workload.simulation import affinity_replica

    doc = copy.deepcopy(STRESS)
    doc["deployments"][0]["routing"] = "prefix_affinity"
    doc["deployments"].append(
        {
            "name": "other",
            "model": "llama-3.1-8b",
            "served_model_name": "other-8b",
            "gpu": "h200",
            "service_name": "vllm-other",
            "node": "node-o",
        }
    )
    # Wednesday 00:05 to 00:10, on the other deployment, always failing then falling back
    doc["apps"][0]["routes"][0]["switch"] = {
        "from": {"weekday": "wednesday", "hour": 5 / 60},
        "until": {"weekday": "wednesday", "hour": 10 / 60},
        "deployment": "other",
        "failure_rate": 0.95,
        "review": {"probability": 1.0, "seconds": 60},
    }
    config = workload_from_dict(doc)
    plan = plan_tasks(
        config,
        build_pools(config, 5),
        np.random.default_rng(5),
        start_unix_s=WEDNESDAY,
        duration_s=900,
    )
    ask = [t for t in plan.tasks if t.route.route == "/ask"]
    inside = [t for t in ask if 300 <= t.start_s < 600]
    outside = [t for t in ask if not 300 <= t.start_s < 600]
    assert len(inside) > 100 and len(outside) > 200
    assert {t.route.deployment for t in inside} == {"other"}
    assert {t.route.deployment for t in outside} == {"small"}
    assert all(t.review_s == 60 for t in inside)
    failed = sum(t.attempts[0].error_type is not None for t in inside) / len(inside)
    assert failed > 0.85
    assert sum(t.attempts[0].error_type is not None for t in outside) / len(outside) < 0.4
    sim = simulate_plan(plan, build_deployments(config))
    replicas = Counter()
    for call, rec in zip(plan.engine_calls, sim.records, strict=True):
        assert rec.request_id == call.request_id
        if call.deployment == "small":
            assert rec.replica == affinity_replica(call.prompt, 2)
            replicas[rec.replica] += 1
        else:
            assert rec.replica == 0
    assert len(replicas) == 2  # the shared docs spread prompts over both replicas
    assert len(sim.results["small"].replicas) == 2
    assert sim.results["small"].replicas[0].counters.num_steps > 0
