"""POST /v1/traces end to end: the real OpenTelemetry SDK and raw HTTP against a real server."""

from __future__ import annotations

import gzip
import json
import random
import zlib

import pytest
import requests
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from inferledger.fixtures import make_export_request

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


def span_count(live) -> int:
    return live.storage.scalar("select count(*) from spans")


def post(live, body: bytes, headers: dict[str, str], **kw) -> requests.Response:
    return requests.post(live.url + "/v1/traces", data=body, headers=headers, timeout=30, **kw)


def to_otlp_json(req: ExportTraceServiceRequest) -> dict:
    """OTLP/JSON as the spec writes it: ids in hex (json_format would write base64)."""
    doc = json_format.MessageToDict(req)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        import base64

                        sp[key] = base64.b64decode(sp[key]).hex()
    return doc


# --------------------------------------------------------------------------- the real SDK
def test_sdk_app_and_vllm_spans_land_with_columns(live) -> None:
    def provider(resource: dict) -> TracerProvider:
        tp = TracerProvider(resource=Resource.create(resource))
        tp.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=live.url + "/v1/traces"))
        )
        return tp

    app_tp = provider(
        {
            "service.name": "support-bot",
            "deployment.environment.name": "prod",
            "inferledger.team": "customer-experience",
        }
    )
    vllm_tp = provider({"service.name": "vllm"})
    app_tracer, vllm_tracer = app_tp.get_tracer("support-bot"), vllm_tp.get_tracer("vllm")

    with app_tracer.start_as_current_span("POST /answer", kind=trace.SpanKind.SERVER) as root:
        root.set_attributes(
            {
                "inferledger.app": "support-assistant",
                "inferledger.route": "/answer",
                "inferledger.task.id": "task-42",
                "inferledger.workflow": "answer",
                "inferledger.outcome": "Accepted",
                "inferledger.review.seconds": 30.5,
            }
        )
        with app_tracer.start_as_current_span("chat llama", kind=trace.SpanKind.CLIENT) as client:
            client.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "vllm",
                    "gen_ai.request.model": "llama-3.1-8b",
                    "inferledger.attempt": 2,
                    "inferledger.fallback": False,
                    "tags": ["a", "b"],
                }
            )
            carrier: dict[str, str] = {}
            TraceContextTextMapPropagator().inject(carrier)  # what the HTTP client sends vLLM
    # vLLM extracts traceparent and emits llm_request as a child of the client span.
    parent_ctx = TraceContextTextMapPropagator().extract(carrier)
    token = otel_context.attach(parent_ctx)
    try:
        with vllm_tracer.start_as_current_span("llm_request", kind=trace.SpanKind.SERVER) as eng:
            eng.set_attributes(
                {
                    "gen_ai.request.id": "cmpl-1",
                    "gen_ai.usage.prompt_tokens": 812,
                    "gen_ai.usage.completion_tokens": 64,
                    "gen_ai.latency.time_in_queue": 0.012,
                    "gen_ai.latency.time_to_first_token": 0.081,
                    "gen_ai.latency.time_in_model_prefill": 0.069,
                    "gen_ai.latency.time_in_model_decode": 0.9,
                    "gen_ai.latency.time_in_model_inference": 0.969,
                    "gen_ai.latency.e2e": 0.981,
                    "gen_ai.request.temperature": 0.0,
                }
            )
    finally:
        otel_context.detach(token)
    app_tp.shutdown()
    vllm_tp.shutdown()

    rows = live.storage.query("select * from stg_spans order by start_ns").rows_by_key(
        "name", named=True, unique=True
    )
    assert set(rows) == {"POST /answer", "chat llama", "llm_request"}
    root, client, eng = rows["POST /answer"], rows["chat llama"], rows["llm_request"]
    assert root["trace_id"] == client["trace_id"] == eng["trace_id"]
    assert len(root["trace_id"]) == 32 and len(root["span_id"]) == 16
    assert root["parent_span_id"] is None
    assert client["parent_span_id"] == root["span_id"]
    assert eng["parent_span_id"] == client["span_id"]
    assert (root["kind"], client["kind"], eng["kind"]) == (2, 3, 2)
    assert root["service_name"] == "support-bot" and eng["service_name"] == "vllm"
    assert root["environment"] == "prod"
    assert root["team"] == "customer-experience"  # from the resource
    assert (root["app"], root["route"], root["task_id"], root["workflow"]) == (
        "support-assistant",
        "/answer",
        "task-42",
        "answer",
    )
    assert root["outcome"] == "accepted" and root["review_s"] == 30.5
    assert (client["gen_ai_operation"], client["gen_ai_provider"], client["request_model"]) == (
        "chat",
        "vllm",
        "llama-3.1-8b",
    )
    assert client["attempt"] == 2 and client["fallback"] is False
    assert json.loads(dict(client["attributes"])["tags"]) == ["a", "b"]
    assert (eng["input_tokens"], eng["output_tokens"], eng["gen_ai_request_id"]) == (
        812,
        64,
        "cmpl-1",
    )
    assert eng["latency_queue_s"] == pytest.approx(0.012)
    assert eng["latency_ttft_s"] == pytest.approx(0.081)
    assert eng["latency_prefill_s"] == pytest.approx(0.069)
    assert eng["latency_decode_s"] == pytest.approx(0.9)
    assert eng["latency_inference_s"] == pytest.approx(0.969)
    assert eng["latency_e2e_s"] == pytest.approx(0.981)
    assert dict(eng["attributes"])["gen_ai.request.temperature"] == "0.0"
    assert dict(eng["resource_attributes"])["service.name"] == "vllm"
    assert eng["end_ns"] >= eng["start_ns"] > 0


def test_json_lands_identically_to_protobuf(live) -> None:
    req = make_export_request(25, seed=7)
    assert post(live, req.SerializeToString(), PB).status_code == 200
    cols = "* exclude (received_at)"
    via_pb = live.storage.query(f"select {cols} from spans order by span_id")
    live.storage.execute_write("delete from spans")
    resp = post(live, json.dumps(to_otlp_json(req)).encode(), JS)
    assert resp.status_code == 200, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.json() == {}
    via_json = live.storage.query(f"select {cols} from spans order by span_id")
    assert via_json.equals(via_pb)


def test_json_enums_int64_strings_and_unknown_fields(live) -> None:
    doc = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "j"}}]
                },
                "futureField": 1,
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5B8EFFF798038103D269B633813FC60C",
                                "spanId": "EEE19B7EC3C1B174",
                                "name": "x",
                                "kind": 3,
                                "startTimeUnixNano": "1780000000000000000",
                                "endTimeUnixNano": 1780000000000000500,
                                "status": {"code": 2, "message": "boom"},
                                "attributes": [{"key": "n", "value": {"intValue": "12"}}],
                                "unknownThing": [1],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    resp = post(live, json.dumps(doc).encode(), JS)
    assert resp.status_code == 200, resp.text
    row = live.storage.query("select * from stg_spans").row(0, named=True)
    assert row["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert (row["kind"], row["status_code"], row["status_message"]) == (3, 2, "boom")
    assert row["end_ns"] - row["start_ns"] == 500
    assert dict(row["attributes"]) == {"n": "12"}


def test_gzip_body_is_accepted(live) -> None:
    body = gzip.compress(make_export_request(10, seed=3).SerializeToString())
    resp = post(live, body, {**PB, "Content-Encoding": "gzip"})
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "application/x-protobuf"
    assert ExportTraceServiceResponse.FromString(resp.content) == ExportTraceServiceResponse()
    assert span_count(live) == 10


def test_multi_member_gzip_keeps_every_member(live) -> None:
    """Concatenated gzip streams (RFC 1952 2.2), as some HTTP clients send: every member counts."""
    members = [
        gzip.compress(make_export_request(5, seed=s, id_offset=5 * s).SerializeToString())
        for s in (1, 2)
    ]
    resp = post(live, b"".join(members), {**PB, "Content-Encoding": "gzip"})
    assert resp.status_code == 200
    assert span_count(live) == 10


def test_gzip_members_are_refused_past_the_limit_or_garbage(small_limit_live) -> None:
    live = small_limit_live
    half = gzip.compress(b"\x00" * (600 * 1024))  # 1.2 MiB in all, past the 1 MiB limit
    resp = post(live, half + half, {**PB, "Content-Encoding": "gzip"})
    assert resp.status_code == 413
    assert "after gzip decompression" in _status(resp)[1]
    member = gzip.compress(make_export_request(5, seed=4).SerializeToString())
    resp = post(live, member + b"trailing junk", {**PB, "Content-Encoding": "gzip"})
    assert resp.status_code == 400
    assert "not valid gzip" in _status(resp)[1]
    resp = post(live, member + member[:-9], {**PB, "Content-Encoding": "gzip"})
    assert resp.status_code == 400
    assert "not valid gzip: the stream is truncated" in _status(resp)[1]
    assert span_count(live) == 0


# --------------------------------------------------------------------------- partial success
def test_invalid_spans_are_rejected_and_valid_ones_stored(live) -> None:
    req = make_export_request(5, seed=11)
    spans = req.resource_spans[0].scope_spans[0].spans
    spans[1].trace_id = b"\x01" * 15
    spans[3].span_id = b"\x00" * 8
    resp = post(live, req.SerializeToString(), PB)
    assert resp.status_code == 200
    answer = ExportTraceServiceResponse.FromString(resp.content)
    assert answer.partial_success.rejected_spans == 2
    msg = answer.partial_success.error_message
    assert msg.startswith("2 of 5 spans rejected: ")
    assert "resource_spans[0].scope_spans[0].spans[1]: trace_id must be 16 bytes, got 15" in msg
    assert "spans[3]: span_id must not be all zeros" in msg
    assert span_count(live) == 3

    as_json = to_otlp_json(make_export_request(2, seed=12))
    as_json["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["endTimeUnixNano"] = "1"
    resp = post(live, json.dumps(as_json).encode(), JS)
    assert resp.status_code == 200
    assert resp.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert (
        "end_time_unix_nano is before start_time_unix_nano"
        in (resp.json()["partialSuccess"]["errorMessage"])
    )
    assert span_count(live) == 4


# --------------------------------------------------------------------------- bad input
def _gzip_bomb(size: int) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\x00" * (1 << 20)
    out = [comp.compress(chunk) for _ in range(size >> 20)]
    out.append(comp.flush())
    return b"".join(out)


def _status(resp: requests.Response) -> tuple[int, str]:
    if resp.headers["Content-Type"].startswith("application/json"):
        doc = resp.json()
        return doc["code"], doc["message"]
    st = status_pb2.Status.FromString(resp.content)
    return st.code, st.message


BAD_INPUTS = [
    pytest.param(
        make_export_request(3).SerializeToString()[:-7],
        PB,
        400,
        "malformed OTLP protobuf",
        id="truncated-protobuf",
    ),
    pytest.param(
        b"{}",
        {"Content-Type": "text/plain"},
        415,
        "unsupported Content-Type 'text/plain': use application/x-protobuf or application/json",
        id="wrong-content-type",
    ),
    pytest.param(
        b'{"resourceSpans": [', JS, 400, "OTLP/JSON body is not valid JSON", id="invalid-json"
    ),
    pytest.param(
        json.dumps(
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    {
                                        "traceId": "W47/95gDgQPSabYzgT/GDA==",
                                        "spanId": "7uGbfsPBsXQ=",
                                        "name": "x",
                                        "startTimeUnixNano": "1",
                                        "endTimeUnixNano": "2",
                                    }
                                ]
                            }
                        ]
                    }
                ]
            }
        ).encode(),
        JS,
        400,
        "must be a hex string",
        id="json-base64-ids",
    ),
    pytest.param(
        b"\x00" * (1024 * 1024 + 10),
        PB,
        413,
        "exceeds the limit of 1048576 bytes",
        id="oversize-body",
    ),
]


@pytest.fixture
def small_limit_live(live_factory):
    return live_factory(ingest__max_body_bytes=1024 * 1024)


@pytest.mark.parametrize(("body", "headers", "status", "message"), BAD_INPUTS)
def test_bad_input_gets_exact_error_and_writes_nothing(
    small_limit_live, body: bytes, headers: dict, status: int, message: str
) -> None:
    live = small_limit_live
    resp = post(live, body, headers)
    assert resp.status_code == status, resp.content[:300]
    code, text = _status(resp)
    assert message in text
    assert code != 0
    assert span_count(live) == 0
    # the server keeps serving
    assert post(live, make_export_request(2).SerializeToString(), PB).status_code == 200


def test_gzip_bomb_is_refused_without_inflating(small_limit_live) -> None:
    live = small_limit_live
    bomb = _gzip_bomb(512 * 1024 * 1024)  # 512 MiB of zeros in about 0.5 MiB
    assert len(bomb) < 1024 * 1024
    resp = post(live, bomb, {**PB, "Content-Encoding": "gzip"})
    assert resp.status_code == 413
    assert "after gzip decompression" in _status(resp)[1]
    assert span_count(live) == 0


def test_method_and_encoding_errors(live) -> None:
    resp = requests.get(live.url + "/v1/traces", timeout=10)
    assert resp.status_code == 405
    resp = post(live, b"x", {**PB, "Content-Encoding": "br"})
    assert resp.status_code == 415
    assert "unsupported Content-Encoding 'br'" in _status(resp)[1]
    resp = post(live, b"not gzip", {**PB, "Content-Encoding": "gzip"})
    assert resp.status_code == 400
    assert "not valid gzip" in _status(resp)[1]


def test_ingest_keys(live_factory) -> None:
    live = live_factory(ingest__keys=["key-one-12345", "key-two-12345"])
    body = make_export_request(2).SerializeToString()
    resp = post(live, body, PB)
    assert resp.status_code == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert "missing ingest key" in _status(resp)[1]
    resp = post(live, body, {**PB, "Authorization": "Bearer nope-nope-nope"})
    assert resp.status_code == 401 and _status(resp)[1] == "invalid ingest key"
    assert span_count(live) == 0
    assert post(live, body, {**PB, "Authorization": "Bearer key-two-12345"}).status_code == 200
    assert post(live, body, {**PB, "X-InferLedger-Key": "key-one-12345"}).status_code == 200
    assert span_count(live) == 2


def test_random_and_mutated_bodies_never_500(live) -> None:
    rng = random.Random(1234)
    valid = make_export_request(3, seed=5).SerializeToString()
    for i in range(150):
        if i % 3 == 0:
            body = rng.randbytes(rng.randint(0, 400))
        else:
            buf = bytearray(valid)
            for _ in range(rng.randint(1, 8)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            body = bytes(buf[: rng.randint(1, len(buf))])
        headers = PB if i % 2 else JS
        resp = post(live, body, headers)
        assert resp.status_code in (200, 400), (i, resp.status_code, resp.content[:200])
    assert requests.get(live.url + "/healthz", timeout=5).status_code == 200


# --------------------------------------------------------------------------- idempotence
def test_resent_batch_is_not_duplicated(live) -> None:
    body = make_export_request(100, seed=21).SerializeToString()
    assert post(live, body, PB).status_code == 200
    assert post(live, body, PB).status_code == 200  # the exporter retried after a timeout
    assert span_count(live) == 100
    # a batch that overlaps half of the first stores only the new half
    overlap = make_export_request(100, seed=21, id_offset=50).SerializeToString()
    assert post(live, overlap, PB).status_code == 200
    assert span_count(live) == 150
    metrics = requests.get(live.url + "/metrics", timeout=5).text  # after span_count's flush
    assert "inferledger_spans_accepted_total 150.0" in metrics
    assert "inferledger_spans_duplicate_total 150.0" in metrics


def test_attributes_read_into_columns_lose_nothing(live) -> None:
    """Keys the product reads become typed columns; a key a fallback chain passed over, or one
    whose value had an unexpected type, stays in the attributes map."""
    from models.otlp import add_attribute as _set

    req = make_export_request(1, seed=31)
    span = req.resource_spans[0].scope_spans[0].spans[0]
    del span.attributes[:]
    _set(span.attributes, "gen_ai.usage.input_tokens", 900)
    _set(span.attributes, "gen_ai.usage.prompt_tokens", 901)  # older name, passed over
    _set(span.attributes, "gen_ai.usage.completion_tokens", "77")  # a string, not an int
    _set(span.attributes, "gen_ai.usage.output_tokens", 2**60 + 1)  # exact beyond 2^53
    _set(span.attributes, "http.route", "/fallback")
    _set(span.attributes, "custom.flag", True)
    assert post(live, req.SerializeToString(), PB).status_code == 200
    row = live.storage.query("select * from stg_spans").row(0, named=True)
    assert row["input_tokens"] == 900
    assert row["output_tokens"] == 2**60 + 1
    assert row["route"] == "/fallback"
    assert dict(row["attributes"]) == {
        "gen_ai.usage.prompt_tokens": "901",
        "gen_ai.usage.completion_tokens": "77",
        "custom.flag": "true",
    }
