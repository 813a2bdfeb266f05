"""Hostile OTLP input on a live server over loopback (issue #17): span times the ledger cannot
compute are rejected one by one in the partial-success answer and never stored; numbers too
long for Python's int() are a 400, not a 500."""

from __future__ import annotations

import json
import time

import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from inferledger.fixtures import make_export_request
from tests.test_otlp_receiver import to_otlp_json

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}
DAY_NS = 86_400 * 10**9


def post(live, body: bytes, headers: dict[str, str]) -> requests.Response:
    return requests.post(live.url + "/v1/traces", data=body, headers=headers, timeout=30)


def span_count(live) -> int:
    return live.storage.scalar("select count(*) from spans")


def test_span_times_outside_the_window_are_rejected_and_the_ledger_refreshes(live) -> None:
    req = make_export_request(5, seed=21)
    spans = req.resource_spans[0].scope_spans[0].spans
    spans[1].start_time_unix_nano = spans[1].end_time_unix_nano = 2**63 - 1  # the poison of #17
    spans[2].start_time_unix_nano = 1_780_000_000  # seconds sent as nanoseconds: 1970
    spans[3].end_time_unix_nano = time.time_ns() + 2 * DAY_NS  # two days ahead of receipt
    resp = post(live, req.SerializeToString(), PB)
    assert resp.status_code == 200
    answer = ExportTraceServiceResponse.FromString(resp.content).partial_success
    assert answer.rejected_spans == 3
    assert answer.error_message == (
        "3 of 5 spans rejected: "
        "resource_spans[0].scope_spans[0].spans[1]: end_time_unix_nano is more than 86400 s "
        "after receipt; "
        "resource_spans[0].scope_spans[0].spans[2]: start_time_unix_nano is before "
        "2000-01-01T00:00:00Z; "
        "resource_spans[0].scope_spans[0].spans[3]: end_time_unix_nano is more than 86400 s "
        "after receipt"
    )
    assert span_count(live) == 2

    doc = to_otlp_json(make_export_request(2, seed=22, id_offset=100))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["endTimeUnixNano"] = str(2**63 - 1)
    resp = post(live, json.dumps(doc).encode(), JS)
    assert resp.status_code == 200
    partial = resp.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert partial["errorMessage"].endswith(
        "spans[1]: end_time_unix_nano is more than 86400 s after receipt"
    )
    assert span_count(live) == 3
    # Nothing the ledger cannot compute was stored: a refresh has no failed hour.
    result = live.service.refresher.refresh()
    assert result.failed == () and result.hours > 0


def _json_span(**fields: object) -> bytes:
    doc = to_otlp_json(make_export_request(1, seed=23, id_offset=200))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(fields)
    return json.dumps(doc).encode()


BIG = "1" * 5000  # past Python's 4300-digit limit for int(): a ValueError, a 500 before #17
PATH = "resourceSpans[0].scopeSpans[0].spans[0]"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (_json_span(startTimeUnixNano=BIG), "startTimeUnixNano"),
        (_json_span(endTimeUnixNano=BIG), "endTimeUnixNano"),
        (_json_span(attributes=[{"key": "k", "value": {"intValue": BIG}}]),
         "attributes[0].value.intValue"),
        (_json_span(attributes=[{"key": "k", "value": {"intValue": "-" + BIG}}]),
         "attributes[0].value.intValue"),
    ],
    ids=["start", "end", "intValue", "negative intValue"],
)  # fmt: skip
def test_numbers_past_the_int_digit_limit_are_a_400(live, body: bytes, where: str) -> None:
    resp = post(live, body, JS)
    assert resp.status_code == 400, resp.text
    message = resp.json()["message"]
    assert message.startswith(f"invalid OTLP/JSON: {PATH}.{where} must be an integer")
    assert "\n" not in message
    assert span_count(live) == 0
