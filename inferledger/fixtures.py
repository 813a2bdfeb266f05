"""Realistic OTLP payloads, built with the real protobuf classes, for tests and benchmarks.

The spans look like what an instrumented app and vLLM send: an app SERVER span carrying our
attribute convention, a CLIENT GenAI span under it, and vLLM's `llm_request` SERVER span with
the gen_ai.latency.* set and the older usage names (../shared/reference/vllm-observability.md).
"""

from __future__ import annotations

import random

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from models.otlp import add_attribute as _set

BASE_NS = 1_780_000_000_000_000_000  # 2026-05-28


def vllm_attributes(rng: random.Random, i: int) -> list[tuple[str, object]]:
    """The 14 attributes vLLM's do_tracing sets on `llm_request`, plus a route."""
    queue = rng.uniform(0.0, 0.2)
    prefill = rng.uniform(0.01, 0.3)
    decode = rng.uniform(0.2, 8.0)
    return [
        ("gen_ai.request.id", f"cmpl-{i:012x}"),
        ("gen_ai.response.model", "meta-llama/Llama-3.1-8B-Instruct"),
        ("gen_ai.usage.prompt_tokens", rng.randint(50, 8000)),
        ("gen_ai.usage.completion_tokens", rng.randint(1, 1024)),
        ("gen_ai.latency.time_in_queue", queue),
        ("gen_ai.latency.time_to_first_token", queue + prefill),
        ("gen_ai.latency.time_in_model_prefill", prefill),
        ("gen_ai.latency.time_in_model_decode", decode),
        ("gen_ai.latency.time_in_model_inference", prefill + decode),
        ("gen_ai.latency.e2e", queue + prefill + decode),
        ("gen_ai.request.max_tokens", 1024),
        ("gen_ai.request.temperature", 0.7),
        ("gen_ai.request.top_p", 0.95),
        ("inferledger.route", rng.choice(["/chat", "/extract", "/complete"])),
    ]


def make_export_request(
    n_spans: int,
    *,
    seed: int = 0,
    service: str = "vllm",
    environment: str = "prod",
    start_ns: int = BASE_NS,
    id_offset: int = 0,
) -> ExportTraceServiceRequest:
    """`n_spans` vLLM `llm_request` spans in one request, each its own trace.

    Ids are derived from ``seed`` and ``id_offset`` so payloads are reproducible and distinct
    payloads never collide.
    """
    rng = random.Random(seed)
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    _set(rs.resource.attributes, "service.name", service)
    _set(rs.resource.attributes, "deployment.environment.name", environment)
    ss = rs.scope_spans.add()
    ss.scope.name = "vllm.llm_engine"
    for j in range(n_spans):
        i = id_offset + j
        span = ss.spans.add()
        span.trace_id = (seed * 1_000_003 + i + 1).to_bytes(16, "big")
        span.span_id = (i + 1).to_bytes(8, "big")
        span.parent_span_id = (i + 1 + (1 << 40)).to_bytes(8, "big")
        span.name = "llm_request"
        span.kind = Span.SPAN_KIND_SERVER
        span.start_time_unix_nano = start_ns + i * 1_000_000
        attrs = vllm_attributes(rng, i)
        span.end_time_unix_nano = span.start_time_unix_nano + int(float(attrs[9][1]) * 1e9) + 1
        for key, value in attrs:
            _set(span.attributes, key, value)
    return req
