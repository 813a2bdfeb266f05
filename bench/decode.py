"""Micro-benchmark of OTLP trace decoding: upb parse alone, the C decoder, the Python decoder,
and OTLP/JSON (json_to_protobuf, then the default decoder) with json.loads alone as its floor.

``decode_c_extract_spans_per_s`` is the C decoder with the product's ExtractSpec (EXTRACT below;
9 of the 14 attributes of these spans are in it).

Builds N spans (default 200,000, in requests of 2,000) shaped like vLLM's: 14 attributes per span
(ids, model, token counts, six latencies, sampling parameters, route) and two resource
attributes; the JSON runs on the first --json-spans of them, written as MessageToDict writes them
(int64 as strings, enum names) with hex ids. Prints plain ``name value`` lines, e.g.
``decode_c_spans_per_s 812345``.

    .venv/bin/python bench/decode.py [--spans 200000] [--repeat 3] [--json-spans 20000]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from ingest import otlp_decode, otlp_json
from ingest.span_writer import SPAN_EXTRACT

EXTRACT = SPAN_EXTRACT  # the product's spec, ingest/span_writer.py

MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-72B-Instruct", "mistral-7b-v0.3")
ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


def _kv(key: str, **value: object) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(**value))


def build_span(rng: random.Random, start_ns: int) -> Span:
    queue = rng.expovariate(20.0)
    ttft = queue + rng.lognormvariate(-2.5, 0.6)
    completion_tokens = rng.randint(1, 2048)
    tpot = rng.lognormvariate(-4.0, 0.3)
    e2e = ttft + completion_tokens * tpot
    attributes = [
        _kv("gen_ai.request.id", string_value=f"chatcmpl-{rng.getrandbits(128):032x}"),
        _kv("gen_ai.response.model", string_value=rng.choice(MODELS)),
        _kv("gen_ai.usage.prompt_tokens", int_value=rng.randint(16, 8192)),
        _kv("gen_ai.usage.completion_tokens", int_value=completion_tokens),
        _kv("gen_ai.latency.time_in_queue", double_value=queue),
        _kv("gen_ai.latency.time_to_first_token", double_value=ttft),
        _kv("gen_ai.latency.e2e", double_value=e2e),
        _kv("gen_ai.latency.time_in_scheduler", double_value=rng.uniform(0.0, 0.01)),
        _kv("gen_ai.latency.time_in_model_forward", double_value=e2e * rng.uniform(0.6, 0.9)),
        _kv("gen_ai.latency.time_in_model_execute", double_value=e2e * rng.uniform(0.7, 0.95)),
        _kv("gen_ai.request.max_tokens", int_value=rng.choice((256, 1024, 4096))),
        _kv("gen_ai.request.temperature", double_value=rng.choice((0.0, 0.2, 0.7, 1.0))),
        _kv("gen_ai.request.top_p", double_value=rng.choice((0.9, 0.95, 1.0))),
        _kv("inferledger.route", string_value=rng.choice(ROUTES)),
    ]
    return Span(
        trace_id=rng.getrandbits(128).to_bytes(16, "big"),
        span_id=rng.getrandbits(64).to_bytes(8, "big") or b"\x01" * 8,
        name="llm_request",
        kind=Span.SPAN_KIND_SERVER,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + int(e2e * 1e9) + 1,
        attributes=attributes,
    )


def build_requests(total: int, batch: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    start_ns = 1_760_000_000_000_000_000
    payloads = []
    for first in range(0, total, batch):
        spans = [build_span(rng, start_ns + (first + i) * 1_000_000) for i in range(batch)]
        resource_spans = ResourceSpans(
            scope_spans=[ScopeSpans(spans=spans)],
        )
        resource_spans.resource.attributes.extend(
            [
                _kv("service.name", string_value="vllm"),
                _kv("deployment.environment.name", string_value="production"),
            ]
        )
        resource_spans.scope_spans[0].scope.name = "vllm.tracing"
        request = ExportTraceServiceRequest(resource_spans=[resource_spans])
        payloads.append(request.SerializeToString())
    return payloads


def to_otlp_json(payload: bytes) -> bytes:
    """The same request as OTLP/JSON: MessageToDict's output with the ids turned to hex."""
    document = json_format.MessageToDict(ExportTraceServiceRequest.FromString(payload))
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def _decode_json(body: bytes) -> object:
    return otlp_decode.decode_traces(otlp_json.json_to_protobuf(body))


def spans_per_second(
    run: Callable[[bytes], object], payloads: list[bytes], spans: int, repeat: int
) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for payload in payloads:
            run(payload)
        best = min(best, time.perf_counter() - started)
    return spans / best


def _upb_parse(payload: bytes) -> object:
    request = ExportTraceServiceRequest()
    request.ParseFromString(payload)
    return request


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--python-repeat", type=int, default=1)
    parser.add_argument("--json-spans", type=int, default=20_000, help="JSON runs on this many")
    args = parser.parse_args(argv)

    payloads = build_requests(args.spans, args.batch)
    spans = len(payloads) * args.batch
    print(f"spans {spans}")
    print(f"requests {len(payloads)}")
    print(f"payload_bytes_per_span {sum(map(len, payloads)) / spans:.0f}")
    print(f"accelerated {int(otlp_decode.ACCELERATED)}")
    print(f"upb_parse_spans_per_s {spans_per_second(_upb_parse, payloads, spans, args.repeat):.0f}")
    if otlp_decode.ACCELERATED:
        c_rate = spans_per_second(
            lambda p: otlp_decode.decode_traces(p, use_c=True), payloads, spans, args.repeat
        )
        print(f"decode_c_spans_per_s {c_rate:.0f}")
        same = otlp_decode.decode_traces(payloads[0], use_c=True).spans.equals(
            otlp_decode.decode_traces_python(payloads[0]).spans
        )
        print(f"c_equals_python {int(same)}")
        extract_rate = spans_per_second(
            lambda p: otlp_decode.decode_traces(p, use_c=True, extract=EXTRACT),
            payloads,
            spans,
            args.repeat,
        )
        print(f"decode_c_extract_spans_per_s {extract_rate:.0f}")
        same = otlp_decode.decode_traces(payloads[0], use_c=True, extract=EXTRACT).spans.equals(
            otlp_decode.decode_traces_python(payloads[0], extract=EXTRACT).spans
        )
        print(f"c_extract_equals_python {int(same)}")
    py_rate = spans_per_second(
        otlp_decode.decode_traces_python, payloads, spans, args.python_repeat
    )
    print(f"decode_python_spans_per_s {py_rate:.0f}")

    json_payloads = [to_otlp_json(p) for p in payloads[: max(1, args.json_spans // args.batch)]]
    json_spans = len(json_payloads) * args.batch
    print(f"json_spans {json_spans}")
    print(f"json_bytes_per_span {sum(map(len, json_payloads)) / json_spans:.0f}")
    loads_rate = spans_per_second(json.loads, json_payloads, json_spans, args.repeat)
    print(f"json_loads_spans_per_s {loads_rate:.0f}")
    json_rate = spans_per_second(_decode_json, json_payloads, json_spans, args.repeat)
    print(f"decode_json_spans_per_s {json_rate:.0f}")


if __name__ == "__main__":
    main()
