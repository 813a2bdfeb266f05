"""What a simulated deployment emits, exactly as a real one does: vLLM's `llm_request` spans, vLLM's
`/metrics` page and dcgm-exporter's page (../shared/reference/vllm-observability.md §1, §2, §5a).

Pure functions and precomputed timelines over a SimulationResult; no I/O, no clocks, no randomness:
the same records always render the same bytes.

- engine_spans(): one OTLP `llm_request` SERVER span per request vLLM's OutputProcessor.do_tracing
  would trace, with its attribute set, joined to the caller's trace when the request's context
  carries a W3C traceparent.
- ReplicaMetricsTimeline(...).render(at_s): one replica's `/metrics` text (Prometheus 0.0.4, as
  prometheus_client writes it) at simulated time at_s. Counters and histograms are cumulative
  over the events up to at_s; gauges are the replica's last sample at or before at_s.
- GpuMetricsTimeline(...).render(at_s): the dcgm-exporter page of the replica's GPUs.

The spans live here; the two pages in models/serving/vllm_metrics.py and dcgm_metrics.py (this
module re-exports them).

A request's `context` (RequestSpec.context, passed through to RequestRecord.context) may be a
mapping or an object with attributes; these keys are read when present: traceparent, tracestate,
max_tokens, temperature, top_p, n. docs/simulator.md lists what is emitted and where the
simulator deviates from vLLM.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from models.otlp import add_attribute as _set
from models.serving.dcgm_metrics import GpuMetricsTimeline, render_dcgm_metrics
from models.serving.records import RequestRecord
from models.serving.request import FinishReason
from models.serving.vllm_metrics import (
    ReplicaMetricsTimeline,
    context_value,
    render_vllm_metrics,
)

__all__ = [
    "GpuMetricsTimeline",
    "ReplicaMetricsTimeline",
    "engine_spans",
    "parse_traceparent",
    "render_dcgm_metrics",
    "render_vllm_metrics",
]

# --- spans ------------------------------------------------------------------------------------

SCOPE_NAME = "vllm.llm_engine"  # vLLM's init_tracer("vllm.llm_engine", ...)
# Span flags as the OTel Python exporter sets them: "is_remote known", plus "parent is remote".
_FLAG_HAS_IS_REMOTE = 0x100
_FLAG_IS_REMOTE = 0x200
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


def parse_traceparent(value: Any) -> tuple[bytes, bytes] | None:
    """(trace_id, parent_span_id) of a W3C traceparent header, or None when it is absent or
    invalid (the W3C propagator then starts a new trace, and so do we)."""
    if not isinstance(value, str):
        return None
    m = _TRACEPARENT.match(value.strip())
    if m is None:
        return None
    version, trace_hex, span_hex, _, rest = m.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    if trace_hex == "0" * 32 or span_hex == "0" * 16:
        return None
    return bytes.fromhex(trace_hex), bytes.fromhex(span_hex)


def _digest(kind: str, record: RequestRecord, salt: str, size: int) -> bytes:
    """Deterministic id bytes from the request's identity (never all zeros)."""
    text = f"{kind}\x00{salt}\x00{record.replica}\x00{record.request_id}".encode()
    raw = hashlib.blake2b(text, digest_size=size).digest()
    return raw if any(raw) else b"\x01" + raw[1:]


def _traced(record: RequestRecord, include_branch_attributes: bool) -> bool:
    if record.first_token_s is None:
        # Never produced a token: rejected by the API server (no engine request, no span) or
        # aborted while waiting.
        return include_branch_attributes and record.finish_reason is FinishReason.ABORT
    if record.finish_reason is FinishReason.ABORT:
        # Mainline do_tracing runs only for requests the engine finishes; tracing aborted
        # requests is the development-branch PR #32162.
        return include_branch_attributes
    return record.finish_reason is not FinishReason.ERROR


def engine_spans(
    records: Iterable[RequestRecord],
    *,
    epoch_ns: int,
    model_name: str | None = None,
    resource: Mapping[str, str] | None = None,
    include_branch_attributes: bool = False,
    id_salt: str = "",
) -> ExportTraceServiceRequest:
    """vLLM V1's `llm_request` spans (kind SERVER) for `records`, in one export request.

    epoch_ns: Unix time in ns of simulated second 0; a span starts at the request's arrival and
        ends when it finishes. model_name: not put on the span, because vLLM V1's do_tracing
        sets no model attribute (gen_ai.response.model is defined but not set); put it in
        `resource` if you need it there.
    resource: resource attributes; service.name defaults to "vllm".
    include_branch_attributes: also emit what only vLLM development branches emit:
        gen_ai.usage.cached_tokens, gen_ai.response.finish_reasons, and spans for aborted
        requests (PR #32162). Off by default.
    id_salt: mixed into the derived ids, so that two runs with the same request ids get
        distinct traces; the same salt and records always give the same ids.

    Traced: requests that finished with stop or length (and abort, see above). Requests the
    simulator rejects (finish_reason error) get no span: vLLM's API server rejects them before
    they reach the engine. Ids: the span id (and the trace id of a request without a parent) is
    a hash of (salt, replica, request_id). A valid `traceparent` in the context makes the span a
    child of that span in that trace; `tracestate` is carried over.
    """
    del model_name  # documented above: V1 spans carry no model
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    attrs = {"service.name": "vllm", **dict(resource or {})}
    for key, value in attrs.items():
        _set(rs.resource.attributes, key, value)
    ss = rs.scope_spans.add()
    ss.scope.name = SCOPE_NAME
    spans = ss.spans
    for r in records:
        if not _traced(r, include_branch_attributes):
            continue
        ctx = r.context
        span = spans.add()
        parent = parse_traceparent(context_value(ctx, "traceparent"))
        if parent is None:
            span.trace_id = _digest("trace", r, id_salt, 16)
            span.flags = _FLAG_HAS_IS_REMOTE
        else:
            span.trace_id, span.parent_span_id = parent
            span.flags = _FLAG_HAS_IS_REMOTE | _FLAG_IS_REMOTE
            state = context_value(ctx, "tracestate")
            if isinstance(state, str) and state:
                span.trace_state = state
        span.span_id = _digest("span", r, id_salt, 8)
        span.name = "llm_request"
        span.kind = Span.SPAN_KIND_SERVER
        span.start_time_unix_nano = epoch_ns + round(r.arrival_s * 1e9)
        span.end_time_unix_nano = epoch_ns + round(r.finished_s * 1e9)
        # Timestamps a request never reached collapse onto its finish (aborted requests only).
        end = r.finished_s
        scheduled = r.first_scheduled_s if r.first_scheduled_s is not None else end
        first = r.first_token_s if r.first_token_s is not None else end
        last = r.last_token_s if r.last_token_s is not None else first
        a = span.attributes
        # The order of vLLM's do_tracing (output_processor.py).
        _set(a, "gen_ai.latency.time_to_first_token", float(first - r.arrival_s))
        _set(a, "gen_ai.latency.e2e", float(end - r.arrival_s))
        _set(a, "gen_ai.latency.time_in_queue", float(scheduled - r.queued_s))
        _set(a, "gen_ai.usage.prompt_tokens", int(r.prompt_tokens))
        _set(a, "gen_ai.usage.completion_tokens", int(r.output_tokens))
        _set(a, "gen_ai.latency.time_in_model_prefill", float(first - scheduled))
        _set(a, "gen_ai.latency.time_in_model_decode", float(last - first))
        _set(a, "gen_ai.latency.time_in_model_inference", float(last - scheduled))
        _set(a, "gen_ai.request.id", r.request_id)
        if include_branch_attributes:
            _set(a, "gen_ai.response.finish_reasons", json.dumps([r.finish_reason.value]))
            _set(a, "gen_ai.usage.cached_tokens", int(r.cached_tokens))
        for key, kind in (("top_p", float), ("max_tokens", int), ("temperature", float)):
            value = context_value(ctx, key)
            if value:  # vLLM sets these only when truthy (temperature 0 is left out)
                _set(a, f"gen_ai.request.{key}", kind(value))
        n = context_value(ctx, "n")
        if n:
            _set(a, "gen_ai.request.n", int(n))
    return req
