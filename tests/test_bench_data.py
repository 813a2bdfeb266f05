"""The ledger benchmark's data generator (bench/ledger_data.py) on a small N: the rows it writes
are accepted by the real schema, obey ingest's validity rules, are exactly what the real OTLP
decoder and Prometheus parser would store for the same spans and scrape pages, and hang
together (engine spans under their client spans, counters that match the spans)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from inferledger.core.storage import Storage
from ingest.prom_text import parse_exposition
from ingest.span_writer import decode_for_storage, insert_spans
from models.otlp import add_attribute

ROOT = Path(__file__).resolve().parent.parent


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("ledger_data", ROOT / "bench" / "ledger_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ledger_data"] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


ld = _load_generator()
REQUESTS = 2_000
START = datetime(2026, 3, 2, 10, tzinfo=UTC)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    path = tmp_path_factory.mktemp("bench") / "bench.duckdb"
    result = ld.generate(path, REQUESTS, rate_per_s=1.0, start=START, replicas=4, seed=3)
    assert result.requests == REQUESTS
    with Storage(path, read_timeout_s=30) as storage:
        yield storage


def test_every_request_is_a_trace_with_root_client_and_engine_spans(db: Storage) -> None:
    counts = dict(
        db.fetchall(
            """
            select kind_of, count(*) from (
                select case
                    when parent_span_id is null then 'root'
                    when name = 'llm_request' then 'engine'
                    when gen_ai_operation = 'chat' and gen_ai_provider = 'openai' then 'hosted'
                    when gen_ai_operation = 'chat' then 'client'
                    else gen_ai_operation end as kind_of
                from spans)
            group by all
            """
        )
    )
    assert counts["root"] == REQUESTS
    assert counts["client"] + counts["hosted"] == REQUESTS
    assert counts["engine"] == counts["client"]
    assert 0.004 * REQUESTS <= counts["hosted"] <= 0.02 * REQUESTS
    assert 0.5 < counts["retrieval"] / REQUESTS < 0.7
    assert 0.1 < counts["execute_tool"] / REQUESTS < 0.2
    assert db.scalar("select count(distinct trace_id) from spans") == REQUESTS


def test_spans_pass_the_ingest_validity_rules(db: Storage) -> None:
    bad = db.fetchall(
        """
        select trace_id, span_id, name from spans
        where not regexp_full_match(trace_id, '[0-9a-f]{32}') or trace_id = repeat('0', 32)
           or not regexp_full_match(span_id, '[0-9a-f]{16}') or span_id = repeat('0', 16)
           or (parent_span_id is not null
               and not regexp_full_match(parent_span_id, '[0-9a-f]{16}'))
           or name = '' or start_ns <= 0 or end_ns < start_ns
        """
    )
    assert bad == []
    assert db.scalar("select count(*) - count(distinct (trace_id, span_id)) from spans") == 0
    orphans = db.scalar(
        """
        select count(*) from spans as c
        left join spans as p on p.trace_id = c.trace_id and p.span_id = c.parent_span_id
        where c.parent_span_id is not null
          and (p.span_id is null or c.start_ns < p.start_ns or c.end_ns > p.end_ns)
        """
    )
    assert orphans == 0  # every parent exists and encloses its child


def test_engine_spans_join_their_client_spans_with_consistent_latencies(db: Storage) -> None:
    rows = db.fetchall(
        """
        select c.name, c.request_model, c.gen_ai_request_id = e.gen_ai_request_id,
               c.input_tokens = e.input_tokens and c.output_tokens = e.output_tokens,
               e.start_ns - c.start_ns, c.end_ns - e.end_ns,
               abs(e.latency_ttft_s - (e.latency_queue_s + e.latency_prefill_s)),
               abs(e.latency_inference_s - (e.latency_prefill_s + e.latency_decode_s)),
               abs(e.latency_e2e_s - (e.latency_queue_s + e.latency_inference_s)),
               abs((e.end_ns - e.start_ns) / 1e9 - e.latency_e2e_s),
               e.service_instance_id, e.resource_values[list_position(e.resource_keys,
                   'host.name')]
        from spans as e
        inner join spans as c on c.trace_id = e.trace_id and c.span_id = e.parent_span_id
        where e.name = 'llm_request'
        """
    )
    assert len(rows) == db.scalar("select count(*) from spans where name = 'llm_request'")
    for name, model, same_id, same_tokens, lead, tail, ttft, inference, e2e, dur, rep, host in rows:
        assert name == f"chat {model}" and same_id and same_tokens
        assert lead == tail == 800_000  # the 0.8 ms network hop each way
        assert max(ttft, inference, e2e) < 1e-9 and dur < 1e-6
        assert rep.startswith(("vllm-llama-8b-", "vllm-llama-70b-"))
        assert host == ("gpu-node-a" if "8b" in rep else "gpu-node-b")
    # Requests overlap on a replica, so the engine sees batches.
    overlapping = db.scalar(
        """
        select count(*) from spans as a
        inner join spans as b on a.service_instance_id = b.service_instance_id
            and a.span_id < b.span_id and b.start_ns < a.end_ns and a.start_ns < b.end_ns
        where a.name = 'llm_request' and b.name = 'llm_request'
        """
    )
    assert overlapping > 100


def test_hosted_fallbacks_and_retries_follow_a_failed_first_attempt(db: Storage) -> None:
    hosted = db.fetchall(
        """
        select c.attempt, c.fallback, c.response_model, count(e.span_id)
        from spans as c
        left join spans as e on e.trace_id = c.trace_id and e.parent_span_id = c.span_id
        where c.name = 'chat gpt-4.1-mini'
        group by all
        """
    )
    assert hosted == [(2, True, "gpt-4.1-mini-2025-04-14", 0)]
    tasks = db.fetchall(
        """
        select r2.outcome, r1.outcome, r1.status_code, r1.end_ns < r2.start_ns,
               r1.route = r2.route
        from spans as r2
        inner join spans as r1 on r1.task_id = r2.task_id and r1.attempt = 1
            and r1.parent_span_id is null
        where r2.parent_span_id is null and r2.attempt = 2
        """
    )
    assert tasks, "no retried task"
    for final_outcome, first_outcome, first_status, in_order, same_route in tasks:
        assert final_outcome in ("accepted", "corrected", "rejected")
        assert first_outcome is None and first_status == 2 and in_order and same_route
    unfinished = db.scalar(
        "select count(*) from spans where parent_span_id is null and outcome is null "
        "and status_code <> 2"
    )
    assert unfinished == 0


def _otlp_from_rows(rows: list[dict[str, Any]]) -> bytes:
    """An OTLP request that carries exactly these stored spans: typed columns back to their
    attribute keys (docs/attributes.md), the rest from the attribute lists, as strings."""
    typed = {
        "gen_ai_operation": "gen_ai.operation.name",
        "gen_ai_provider": "gen_ai.provider.name",
        "request_model": "gen_ai.request.model",
        "response_model": "gen_ai.response.model",
        "gen_ai_request_id": "gen_ai.request.id",
        "input_tokens": "gen_ai.usage.input_tokens",
        "output_tokens": "gen_ai.usage.output_tokens",
        "cached_input_tokens": "gen_ai.usage.cache_read.input_tokens",
        "request_max_tokens": "gen_ai.request.max_tokens",
        "finish_reasons": "gen_ai.response.finish_reasons",
        "latency_queue_s": "gen_ai.latency.time_in_queue",
        "latency_ttft_s": "gen_ai.latency.time_to_first_token",
        "latency_prefill_s": "gen_ai.latency.time_in_model_prefill",
        "latency_decode_s": "gen_ai.latency.time_in_model_decode",
        "latency_inference_s": "gen_ai.latency.time_in_model_inference",
        "latency_e2e_s": "gen_ai.latency.e2e",
        "app": "inferledger.app",
        "team": "inferledger.team",
        "route": "inferledger.route",
        "stage": "inferledger.stage",
        "task_id": "inferledger.task.id",
        "workflow": "inferledger.workflow",
        "attempt": "inferledger.attempt",
        "fallback": "inferledger.fallback",
        "outcome": "inferledger.outcome",
        "review_s": "inferledger.review.seconds",
    }
    request = ExportTraceServiceRequest()
    for row in rows:
        rs = request.resource_spans.add()
        for k, v in zip(row["resource_keys"], row["resource_values"], strict=True):
            add_attribute(rs.resource.attributes, k, v)
        ss = rs.scope_spans.add()
        ss.scope.name = row["scope_name"]
        ss.scope.version = row["scope_version"]
        span = ss.spans.add()
        span.trace_id = bytes.fromhex(row["trace_id"])
        span.span_id = bytes.fromhex(row["span_id"])
        if row["parent_span_id"]:
            span.parent_span_id = bytes.fromhex(row["parent_span_id"])
        span.flags = row["flags"]
        span.name = row["name"]
        span.kind = row["kind"]
        span.start_time_unix_nano = row["start_ns"]
        span.end_time_unix_nano = row["end_ns"]
        span.status.code = row["status_code"]
        if row["status_message"]:
            span.status.message = row["status_message"]
        for column, key in typed.items():
            if row[column] is not None:
                add_attribute(span.attributes, key, row[column])
        for k, v in zip(row["attr_keys"], row["attr_values"], strict=True):
            add_attribute(span.attributes, k, v)
    return request.SerializeToString()


def test_span_rows_are_what_ingest_stores_for_the_same_spans(db: Storage, tmp_path: Path) -> None:
    # One trace of every shape: tool, retrieval, 70B, hosted fallback, both failure kinds.
    traces = [
        row[0]
        for row in db.fetchall(
            """
            select min(trace_id) from spans
            group by name, status_code, status_message
            """
        )
    ]
    cols = "* exclude (received_at)"
    order = "order by trace_id, span_id"
    generated = db.query(
        f"select {cols} from spans where list_contains(?, trace_id) {order}", [traces]
    )
    rows = generated.to_dicts()
    assert {r["name"] for r in rows} >= {
        "llm_request",
        "chat gpt-4.1-mini",
        "execute_tool lookup_order",
        "retrieval support-kb",
        "chat meta-llama/Llama-3.1-70B-Instruct",
    }
    decoded = decode_for_storage(_otlp_from_rows(rows))
    assert decoded.rejected_spans == 0, decoded.errors
    with Storage(tmp_path / "ingested.duckdb") as fresh:
        assert fresh.write(lambda cur: insert_spans(cur, decoded)) == len(rows)
        ingested = fresh.query(f"select {cols} from spans {order}")
    assert ingested.to_dicts() == rows


def test_scrapes_cover_every_replica_every_15_s_with_a_few_failures(db: Storage) -> None:
    engines = "select distinct service_instance_id from spans where name = 'llm_request'"
    replicas = {r[0] for r in db.fetchall(engines)}
    assert replicas == set(ld.replica_names(4))
    per_target = db.fetchall(
        """
        select target, kind, deployment, count(*), count(*) filter (where not up),
               count(distinct date_diff('second', lag_ts, ts)) filter (where lag_ts is not null),
               max(date_diff('second', lag_ts, ts))
        from (select *, lag(ts) over (partition by target order by ts) as lag_ts from scrapes)
        group by all order by target
        """
    )
    assert {r[0] for r in per_target if r[1] == "vllm"} == replicas
    assert {r[0] for r in per_target if r[1] == "dcgm"} == {"dcgm-gpu-node-a", "dcgm-gpu-node-b"}
    for _, _, deployment, scrapes, _, intervals, widest in per_target:
        assert deployment in {d["deployment"] for d in ld.DEPLOYMENTS}
        assert scrapes == 240 and intervals == 1 and widest == 15  # one hour of 15-s scrapes
    assert sum(r[4] for r in per_target) < 10
    mismatched = db.scalar(
        """
        select count(*) from scrapes as s
        left join (select target, ts, count(*) as n from metric_samples group by all) as m
            on m.target = s.target and m.ts = s.ts
        where s.samples <> coalesce(m.n, 0) or (not s.up and s.error is null)
        """
    )
    assert mismatched == 0
    if db.scalar("select count(*) from information_schema.tables where table_name = 'deployments'"):
        names = {r[0] for r in db.fetchall("select deployment from deployments")}
        assert names >= {d["deployment"] for d in ld.DEPLOYMENTS}


def _exposition(rows: list[tuple[str, str, str, dict[str, str], float]]) -> str:
    """A /metrics page in Prometheus text format 0.0.4, as prometheus_client writes it (a
    counter's TYPE line names it with its _total suffix)."""
    lines, typed = [], set()
    for metric, family, type_, labels, value in rows:
        if family not in typed:
            lines.append(f"# TYPE {metric if type_ == 'counter' else family} {type_}")
            typed.add(family)
        body = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{metric}{{{body}}} {value!r}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("target", ["vllm-llama-8b-0", "vllm-llama-70b-0", "dcgm-gpu-node-a"])
def test_samples_are_what_the_prometheus_parser_stores(db: Storage, target: str) -> None:
    ts = db.scalar("select max(ts) from scrapes where target = ? and up", [target])
    stored = db.fetchall(
        "select metric, family, type, labels, value, series_key, le from metric_samples "
        "where target = ? and ts = ? order by family, metric, series_key",
        [target, ts],
    )
    text = _exposition([(m, f, t, dict(lb), v) for m, f, t, lb, v, _, _ in stored])
    parsed = parse_exposition(text, "text/plain; version=0.0.4", ts).to_pylist()
    got = sorted(
        (
            p["metric"],
            p["family"],
            p["type"],
            sorted(dict(p["labels"]).items()),
            p["value"],
            p["series_key"],
            p["le"],
        )
        for p in parsed
    )
    want = sorted(
        (m, f, t, sorted(dict(lb).items()), v, sk, le) for m, f, t, lb, v, sk, le in stored
    )
    assert got == want
    assert all(p["ts"] == ts for p in parsed)


def test_counters_match_the_engine_spans_through_the_views(db: Storage) -> None:
    # Each counter sample = the engine requests of its replica that ended by then (the last
    # scrape also counts what ended after it, so stop one interval early).
    off = db.fetchall(
        """
        with engine as (
            select e.service_instance_id as target, e.end_ns, e.input_tokens, e.output_tokens,
                   c.cached_input_tokens
            from spans as e
            inner join spans as c on c.trace_id = e.trace_id and c.span_id = e.parent_span_id
            where e.name = 'llm_request'
        ),
        samples as (
            select target, ts, metric, value from stg_metric_samples
            where metric in ('vllm:prompt_tokens_total', 'vllm:prefix_cache_hits_total',
                             'vllm:generation_tokens_total')
              and ts < (select max(ts) from scrapes)
        )
        select count(*), count(*) filter (where value <> expected) from (
            select s.target, s.ts, s.metric, s.value, coalesce(sum(case s.metric
                when 'vllm:prompt_tokens_total' then e.input_tokens
                when 'vllm:prefix_cache_hits_total' then e.cached_input_tokens
                else e.output_tokens end), 0) as expected
            from samples as s
            left join engine as e
                on e.target = s.target and e.end_ns <= epoch_ns(s.ts)
            group by all
        )
        """
    )
    assert off[0][0] > 2_000 and off[0][1] == 0
    increases = db.fetchall(
        """
        select family, count(*) filter (where reset), min(increase), sum(increase)
        from metric_counter_increases
        where family in ('vllm:prompt_tokens', 'vllm:prefix_cache_hits',
                         'vllm:request_success', 'vllm:num_preemptions')
        group by family order by family
        """
    )
    assert [r[0] for r in increases] == [
        "vllm:num_preemptions",
        "vllm:prefix_cache_hits",
        "vllm:prompt_tokens",
        "vllm:request_success",
    ]
    assert all(resets == 0 and lowest >= 0 for _, resets, lowest, _ in increases)
    hits, prompt = increases[1][3], increases[2][3]
    assert 0.4 < hits / prompt < 0.8  # prefix-cache hit rate, like the demo's
    gauges = db.fetchall(
        """
        select metric, min(value), max(value) from stg_metric_samples
        where metric in ('vllm:kv_cache_usage_perc', 'vllm:num_requests_running',
                         'vllm:num_requests_waiting', 'DCGM_FI_DEV_GPU_UTIL')
        group by metric order by metric
        """
    )
    bounds = {"vllm:kv_cache_usage_perc": 1, "DCGM_FI_DEV_GPU_UTIL": 100}
    assert len(gauges) == 4
    for metric, low, high in gauges:
        assert 0 <= low <= high <= bounds.get(metric, 10_000)
        assert high > 0, metric


def test_an_appended_hour_continues_the_counters(tmp_path: Path) -> None:
    path = tmp_path / "append.duckdb"
    ld.generate(path, 500, rate_per_s=0.2, start=START, replicas=2, seed=5)
    with Storage(path) as storage:
        before = storage.scalar("select max(ts) from scrapes")
        added = ld.append_hours(storage, hours=1, rate_per_s=0.2)
        assert added.requests == 720 and added.start == START + timedelta(hours=1)
        assert storage.scalar("select min(ts) from scrapes where ts > ?", [before]) == (
            before + timedelta(seconds=15)
        )
        assert storage.scalar("select count(*) from metric_counter_increases where reset") == 0
        gpus = "select count(distinct series_key) from metric_samples where target like 'dcgm-%'"
        assert storage.scalar(gpus) == 2  # the appended hour continues the same GPU series
        roots = "select count(*) - count(distinct trace_id) from spans where parent_span_id is null"
        assert storage.scalar(roots) == 0
        spans_after = storage.scalar("select max(start_ns) from spans where attempt = 1")
        assert spans_after >= int(added.start.timestamp()) * 10**9
