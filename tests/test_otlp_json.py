"""OTLP/JSON: ingest/otlp_json.py against json_format (the implementation it replaced, kept here as
the reference: the bytes must be identical) and against decoding the protobuf request itself
(the tables must be identical), on fixed cases, hypothesis requests and mutated documents."""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import math
import random
import re
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from inferledger.fixtures import make_export_request
from ingest import otlp_json
from ingest.otlp_decode import DecodedTraces, OtlpDecodeError, decode_traces
from ingest.otlp_json import json_to_protobuf
from tests.test_otlp_decode import (
    REQUESTS,
    SPAN,
    SPAN_HEX,
    T0,
    TRACE,
    TRACE_HEX,
    assert_same,
    decode_both,
    make_span,
    nested_array,
    nested_kvlist,
    request_of,
    rich_request,
)
from tests.test_otlp_decode import kv as key_value

# --- the reference: json_format, exactly as ingest used it before ingest/otlp_json.py ---------

_HEX_ID = re.compile(r"(?:[0-9a-fA-F]{2})*")
_ID_FIELDS = (("traceId", "trace_id"), ("spanId", "span_id"), ("parentSpanId", "parent_span_id"))
_LINK_ID_FIELDS = (("traceId", "trace_id"), ("spanId", "span_id"))


def reference_json_to_protobuf(body: bytes) -> bytes:
    document = json.loads(body.decode("utf-8"))
    if not isinstance(document, dict):
        raise OtlpDecodeError("OTLP/JSON body must be a JSON object")
    for rs_name, r, resource_spans in _children(document, "resourceSpans", "resource_spans"):
        for ss_name, s, scope_spans in _children(resource_spans, "scopeSpans", "scope_spans"):
            for span_name, i, span in _children(scope_spans, "spans"):
                path = f"{rs_name}[{r}].{ss_name}[{s}].{span_name}[{i}]"
                _rewrite_ids(span, _ID_FIELDS, path)
                for link_name, k, link in _children(span, "links"):
                    _rewrite_ids(link, _LINK_ID_FIELDS, f"{path}.{link_name}[{k}]")
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise OtlpDecodeError(f"invalid OTLP/JSON: {exc}") from None
    return request.SerializeToString()


def _children(parent: dict[str, Any], *names: str) -> list[tuple[str, int, dict[str, Any]]]:
    found = []
    for name in names:
        items = parent.get(name)
        if isinstance(items, list):
            found.extend((name, i, item) for i, item in enumerate(items) if isinstance(item, dict))
    return found


def _rewrite_ids(obj: dict[str, Any], fields: tuple[tuple[str, str], ...], path: str) -> None:
    for names in fields:
        for name in names:
            value = obj.get(name)
            if not isinstance(value, str) or not value:
                continue
            if not _HEX_ID.fullmatch(value):
                raise OtlpDecodeError(
                    f"{path}.{name} must be a hex string (OTLP/JSON encodes ids as hex, not base64)"
                )
            obj[name] = base64.b64encode(bytes.fromhex(value)).decode("ascii")


def reference_outcome(body: bytes) -> bytes | None:
    """The reference's bytes, or None for any error (it lets a few crash: an enum of 1e999)."""
    try:
        return reference_json_to_protobuf(body)
    except Exception:  # every failure of the reference counts as "rejected"
        return None


def fast_outcome(body: bytes) -> bytes | str:
    """The bytes, or the OtlpDecodeError's message; any other exception fails the test."""
    try:
        return json_to_protobuf(body)
    except OtlpDecodeError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 400, message
        return message


# Inputs json_format accepts by accident and we reject on purpose (see otlp_json's docstring).
DELIBERATE = re.compile(
    r"must be a JSON object, got (the string|an array)"
    r"|must be an enum name or an integer, got (a boolean|the number)"
    r"|is out of range for an enum"
    r'|must be a number, "NaN", "Infinity" or "-Infinity", got a boolean'
)


def assert_agrees(body: bytes, *, deliberate: bool = True) -> bytes | str:
    """Our outcome equals the reference's: the same bytes, or both reject (ours may also reject
    what json_format accepts only by accident, when `deliberate`)."""
    fast = fast_outcome(body)
    reference = reference_outcome(body)
    if isinstance(fast, bytes):
        assert fast == reference
    else:
        assert reference is None or (deliberate and DELIBERATE.search(fast)), fast
    return fast


# --- documents --------------------------------------------------------------------------------

ID_KEYS = {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}
INT64_KEYS = {
    "intValue",
    "int_value",
    "startTimeUnixNano",
    "start_time_unix_nano",
    "endTimeUnixNano",
    "end_time_unix_nano",
    "timeUnixNano",
    "time_unix_nano",
}


def to_otlp_json(
    request: ExportTraceServiceRequest,
    *,
    proto_names: bool = False,
    int_enums: bool = False,
    int64_numbers: bool = False,
) -> dict[str, Any]:
    """MessageToDict writes ids as base64 and int64s as strings; OTLP/JSON wants hex ids and
    takes int64s as strings or numbers."""
    document = json_format.MessageToDict(
        request, preserving_proto_field_name=proto_names, use_integers_for_enums=int_enums
    )

    def walk(node: Any, in_span: bool) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, in_span)
        elif isinstance(node, dict):
            for key, value in node.items():
                if in_span and key in ID_KEYS:
                    node[key] = base64.b64decode(value).hex()
                elif int64_numbers and key in INT64_KEYS and isinstance(value, str):
                    node[key] = int(value)
                else:
                    walk(value, in_span or key in ("spans", "links"))

    walk(document, False)
    return document


def body_of(document: Any) -> bytes:
    return json.dumps(document).encode()


VARIANTS = [
    pytest.param({}, id="camel"),
    pytest.param({"proto_names": True}, id="snake"),
    pytest.param({"int_enums": True, "int64_numbers": True}, id="camel-numbers"),
    pytest.param({"proto_names": True, "int_enums": True, "int64_numbers": True}, id="snake-nums"),
]


def check_request(request: ExportTraceServiceRequest, **variant: bool) -> None:
    """Bytes equal to json_format's; tables equal to decoding the request's own protobuf."""
    body = body_of(to_otlp_json(request, **variant))
    data = json_to_protobuf(body)
    assert data == reference_json_to_protobuf(body)
    try:
        expected: DecodedTraces | str = decode_traces(request.SerializeToString())
    except OtlpDecodeError as exc:
        expected = str(exc)
    if isinstance(expected, str):
        with pytest.raises(OtlpDecodeError):
            decode_traces(data)
    else:
        assert_same(decode_traces(data), expected)


# --- equal to protobuf and to json_format -----------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_rich_request_decodes_like_its_protobuf(variant: dict[str, bool]) -> None:
    check_request(rich_request(), **variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_shared_fixture_requests_decode_like_their_protobuf(variant: dict[str, bool]) -> None:
    request = make_export_request(200, seed=4)
    check_request(request, **variant)
    assert json_to_protobuf(body_of(to_otlp_json(request, **variant))) == (
        request.SerializeToString()
    )


def test_nested_values_events_and_links_decode_like_their_protobuf() -> None:
    span = make_span(
        attributes=[key_value("a", nested_array(30)), key_value("k", nested_kvlist(10))],
        events=[Span.Event(time_unix_nano=T0, name="e", attributes=[key_value("n")])],
        links=[Span.Link(trace_id=TRACE, span_id=SPAN, flags=3, trace_state="t=1")],
    )
    request = ExportTraceServiceRequest.FromString(request_of(span))
    for variant in VARIANTS:
        check_request(request, **variant.values[0])


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    request=REQUESTS,
    proto_names=st.booleans(),
    int_enums=st.booleans(),
    int64_numbers=st.booleans(),
)
def test_random_requests_decode_like_their_protobuf(
    request: ExportTraceServiceRequest, proto_names: bool, int_enums: bool, int64_numbers: bool
) -> None:
    check_request(
        request, proto_names=proto_names, int_enums=int_enums, int64_numbers=int64_numbers
    )


def test_canonical_spans_and_attributes_take_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    general: list[str] = []
    original = otlp_json._Encoder.element

    def element(self: Any, item: Any, message: Any, where: str, i: int, depth: int) -> bytes:
        general.append(message.full_name)
        return original(self, item, message, where, i, depth)

    monkeypatch.setattr(otlp_json._Encoder, "element", element)
    request = make_export_request(20, seed=1)
    request.resource_spans[0].scope_spans[0].spans[3].status.code = 2
    request.resource_spans[0].scope_spans[0].spans[4].status.message = "é"
    request.resource_spans[0].scope_spans[0].spans[5].flags = 257
    for variant in ({}, {"int_enums": True, "int64_numbers": True}):
        body = body_of(to_otlp_json(request, **variant))
        assert json_to_protobuf(body) == request.SerializeToString()
    assert general == []


# --- the OTLP/JSON rules, case by case --------------------------------------------------------


def span_doc(**fields: Any) -> dict[str, Any]:
    span = {
        "traceId": TRACE_HEX,
        "spanId": SPAN_HEX,
        "name": "op",
        "startTimeUnixNano": str(T0),
        "endTimeUnixNano": str(T0 + 5),
    }
    span.update(fields)
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


def attr_doc(*values: Any, **span_fields: Any) -> dict[str, Any]:
    """A span whose attributes carry these AnyValue JSON objects (keys a0, a1, ...)."""
    attributes = [{"key": f"a{i}", "value": value} for i, value in enumerate(values)]
    return span_doc(attributes=attributes, **span_fields)


def nested(levels: int, container: str = "arrayValue") -> dict[str, Any]:
    value: dict[str, Any] = {"intValue": "1"}
    for _ in range(levels - 1):
        if container == "arrayValue":
            value = {"arrayValue": {"values": [value]}}
        else:
            value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    return value


LONG = "x" * 20_000
AGREEING = {
    # names: both spellings, the later one wins; unknown names are ignored
    "trace id twice, camel last": span_doc(trace_id="ab" * 16, traceId="cd" * 16),
    "trace id twice, snake last": {
        "resourceSpans": [
            {"scopeSpans": [{"spans": [{"traceId": "ab" * 16, "trace_id": "cd" * 16}]}]}
        ]
    },
    "both spellings of scopeSpans": {
        "resourceSpans": [{"scopeSpans": [{"spans": [{}]}], "scope_spans": []}]
    },
    "unknown fields everywhere": {
        "x": 1,
        "resourceSpans": [
            {
                "y": [1],
                "resource": {"z": {}, "attributes": [{"key": "k", "value": {"q": 1}, "w": 2}]},
                "scopeSpans": [{"scope": {"n": None}, "spans": [{"name": "a", "v": None}]}],
            }
        ],
    },
    "extension-like unknown name": span_doc(**{"[ext.name]": 1}),
    "extension-like name with newline": span_doc(**{"[e]\n": 1}),
    "empty extension-like name": {"[]": 1},
    # null
    "null fields": span_doc(attributes=None, status=None, kind=None, events=None, name=None),
    "null resource and scope": {"resourceSpans": [{"resource": None, "scopeSpans": None}]},
    "null in an array": span_doc(attributes=[None]),
    "null span": {"resourceSpans": [{"scopeSpans": [{"spans": [None]}]}]},
    "null member then another": attr_doc({"stringValue": None, "intValue": 3}),
    "member then its null": attr_doc({"intValue": 3, "int_value": None}),
    "member then another's null": attr_doc({"intValue": 3, "stringValue": None}),
    "two members": attr_doc({"intValue": 3, "stringValue": "x"}),
    "null value": attr_doc(None),
    "null key": span_doc(attributes=[{"key": None, "value": {"intValue": 1}}]),
    # ids
    "upper-case ids": span_doc(traceId=TRACE_HEX.upper(), parentSpanId="0A" * 8),
    "empty ids": span_doc(traceId="", spanId="", parentSpanId=""),
    "short id": span_doc(spanId="abcd"),
    "id with a space": span_doc(spanId="0102 0304"),
    "id as a number": span_doc(spanId=12),
    "base64 id": span_doc(traceId=base64.b64encode(TRACE).decode()),
    "link ids": span_doc(links=[{"traceId": "AB" * 16, "span_id": "cd" * 8, "flags": 1}]),
    "bad link id": span_doc(links=[{"spanId": "xyz"}]),
    # integers: numbers or strings
    "times as numbers": span_doc(startTimeUnixNano=T0, endTimeUnixNano=T0 + 1),
    "times as float strings": span_doc(startTimeUnixNano="1e18", endTimeUnixNano="2.0e18"),
    "time as a float": span_doc(startTimeUnixNano=1.5e18),
    "time with a tab": span_doc(startTimeUnixNano="\t5"),
    "time with a space": span_doc(startTimeUnixNano=" 5"),
    "time with underscores": span_doc(startTimeUnixNano="1_000"),
    "negative time": span_doc(startTimeUnixNano="-1"),
    "time past 2^64": span_doc(endTimeUnixNano=str(2**64)),
    "fractional time": span_doc(endTimeUnixNano=1.5),
    "time as hex": span_doc(endTimeUnixNano="0x10"),
    "time as a bool": span_doc(endTimeUnixNano=True),
    "flags as a string": span_doc(flags="257"),
    "flags past 2^32": span_doc(flags=2**32),
    "negative dropped count": span_doc(droppedAttributesCount=-1),
    "counts as strings": span_doc(droppedEventsCount="3", droppedLinksCount=4.0),
    "int values": attr_doc(
        {"intValue": "-5"},
        {"intValue": -(2**63)},
        {"intValue": 5.0},
        {"intValue": "5.0"},
        {"intValue": "٣"},
        {"intValue": 2**63 - 1},
        {"intValue": 20_000},
    ),
    "fractional int": attr_doc({"intValue": 2.5}),
    "int with two signs": attr_doc({"intValue": "--5"}),
    "int past int64": attr_doc({"intValue": str(2**63)}),
    "int as a bool": attr_doc({"intValue": False}),
    "strindex": attr_doc({"stringValueStrindex": 4}, {"string_value_strindex": "5"}),
    "key strindex": span_doc(attributes=[{"key": "k", "keyStrindex": 3, "value": {}}]),
    # enums: names or integers; unknown names leave the field unset
    "kind names and numbers": span_doc(kind="SPAN_KIND_CLIENT", status={"code": 2}),
    "kind as a string number": span_doc(kind="3", status={"code": "STATUS_CODE_ERROR"}),
    "kind with a space": span_doc(kind=" 4"),
    "unknown kind name": span_doc(kind="SPAN_KIND_SOMETHING_NEW"),
    "kind as an exponent": span_doc(kind="1e3"),
    "kind as a float": span_doc(kind=3.0, status={"code": -1.0}),
    "kind out of int32": span_doc(kind=2**31),
    "negative kind": span_doc(kind=-7),
    "kind as an object": span_doc(kind={}),
    # doubles: numbers or strings
    "doubles": attr_doc(
        {"doubleValue": 1},
        {"doubleValue": -0.0},
        {"doubleValue": "1.5"},
        {"doubleValue": "NaN"},
        {"doubleValue": "Infinity"},
        {"doubleValue": "-Infinity"},
        {"doubleValue": "inf"},
        {"doubleValue": 2**60 + 1},
        {"doubleValue": -(2**53)},
        {"doubleValue": 5e-324},
    ),
    "double 'nan'": attr_doc({"doubleValue": "nan"}),
    "double NaN literal": attr_doc({"doubleValue": math.nan}),
    "double Infinity literal": attr_doc({"doubleValue": math.inf}),
    "double too large": attr_doc({"doubleValue": 10**400}),
    "double as text": attr_doc({"doubleValue": "one"}),
    # bools, bytes, strings
    "bools": attr_doc({"boolValue": True}, {"boolValue": False}, {"bool_value": True}),
    "bool as a number": attr_doc({"boolValue": 1}),
    "bool as a string": attr_doc({"boolValue": "true"}),
    "bytes": attr_doc(
        {"bytesValue": "AQID"},
        {"bytesValue": "AQI"},
        {"bytesValue": "_-8="},
        {"bytesValue": "+/8"},
        {"bytesValue": ""},
        {"bytesValue": "!!AQ"},
    ),
    "bytes, bad padding": attr_doc({"bytesValue": "A"}),
    "bytes as a number": attr_doc({"bytesValue": 5}),
    "strings": attr_doc(
        {"stringValue": ""}, {"stringValue": "é😀\u0000"}, {"string_value": "x"}
    ),
    "long string and key": span_doc(
        name=LONG, attributes=[{"key": LONG, "value": {"stringValue": LONG}}]
    ),
    "empty key": span_doc(attributes=[{"key": "", "value": {"intValue": 1}}]),
    "key only": span_doc(attributes=[{"key": "k"}]),
    "value only": span_doc(attributes=[{"value": {"intValue": 1}}]),
    "unpaired surrogate in a value": attr_doc({"stringValue": "\ud800"}),
    "unpaired surrogate in a key": span_doc(attributes=[{"key": "\udc00", "value": {}}]),
    "unpaired surrogate in a name": span_doc(name="a\ud800"),
    "string as a number": span_doc(name=5),
    "trace state": span_doc(traceState="k=v", status={"message": "é"}),
    # nested values, events, links, resource, scope
    "arrays and kvlists": attr_doc(
        {"arrayValue": {"values": [{"intValue": 1}, {}, {"arrayValue": {}}]}},
        {"kvlistValue": {"values": [{"key": "a", "value": {"boolValue": True}}, {"key": "a"}]}},
        {"array_value": {"values": []}},
        {"kvlist_value": {}},
        {"arrayValue": {"values": None}},
    ),
    "null inside an array value": attr_doc({"arrayValue": {"values": [None]}}),
    "events": span_doc(
        events=[
            {"timeUnixNano": "5", "name": "e", "attributes": [{"key": "a", "value": {}}]},
            {"time_unix_nano": 7, "droppedAttributesCount": 2},
            {},
        ]
    ),
    "resource and scope": {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "s"}}],
                    "droppedAttributesCount": 3,
                    "entityRefs": [
                        {"type": "service", "idKeys": ["service.name"], "description_keys": []},
                        {"schemaUrl": "u"},
                    ],
                },
                "schemaUrl": "https://example.com/1",
                "scopeSpans": [
                    {
                        "scope": {"name": "n", "version": "1", "droppedAttributesCount": 1},
                        "schema_url": "v",
                        "spans": [],
                    }
                ],
            },
            {},
        ]
    },
    "null in id keys": {
        "resourceSpans": [{"resource": {"entityRefs": [{"idKeys": ["a", None]}]}}]
    },
    # defaults: proto3 leaves them out, except in a oneof or an array
    "explicit defaults": span_doc(
        traceState="", kind=0, flags=0, droppedAttributesCount=0, droppedEventsCount="0",
        droppedLinksCount=0, events=[], links=[], attributes=[], status={"code": 0, "message": ""},
    ),
    "explicit defaults, general path": span_doc(
        traceState="", kind="SPAN_KIND_UNSPECIFIED", flags=0, droppedAttributesCount=0,
        events=[{"timeUnixNano": "0", "name": "", "droppedAttributesCount": 0}],
        links=[{"traceId": "", "flags": 0, "traceState": ""}], status={"code": 0}, unknown=1,
    ),
    "default values in a oneof": attr_doc(
        {"intValue": 0}, {"doubleValue": 0.0}, {"boolValue": False}, {"stringValueStrindex": 0}
    ),
    "empty strings in an array": {
        "resourceSpans": [{"resource": {"entityRefs": [{"idKeys": ["", "a", ""]}]}}]
    },
    # shapes
    "empty request": {},
    "no spans": {"resourceSpans": []},
    "resourceSpans as an object": {"resourceSpans": {}},
    "spans as a number": {"resourceSpans": [{"scopeSpans": [{"spans": 5}]}]},
    "resource as a number": {"resourceSpans": [{"resource": 5}]},
    "status as a bool": span_doc(status=True),
    "status with an unknown field": span_doc(status={"code": 1, "reason": "x"}),
    "status with an extension-like field": span_doc(status={"code": 1, "[x]": 1}),
    # depth: json_format allows 100 levels of messages (the request is level 1; an attribute's
    # AnyValue is at 6, each arrayValue adds 2, each kvlistValue adds 3)
    "48 nested arrays": attr_doc(nested(48)),
    "49 nested arrays": attr_doc(nested(49)),
    "32 nested kvlists": attr_doc(nested(32, "kvlistValue")),
    "33 nested kvlists": attr_doc(nested(33, "kvlistValue")),
    "deep in a resource": {"resourceSpans": [{"resource": {"attributes": [
        {"key": "k", "value": nested(49)}
    ]}}]},
}  # fmt: skip


@pytest.mark.parametrize("document", AGREEING.values(), ids=AGREEING.keys())
def test_agrees_with_json_format(document: dict[str, Any]) -> None:
    assert_agrees(body_of(document), deliberate=False)


def test_agreeing_cases_cover_both_outcomes() -> None:
    outcomes = [isinstance(fast_outcome(body_of(doc)), bytes) for doc in AGREEING.values()]
    assert 30 < sum(outcomes) < len(outcomes) - 30


DIVERGING = {
    "resource as a string": (
        {"resourceSpans": [{"resource": "abc"}]},
        'resourceSpans[0].resource must be a JSON object, got the string "abc"',
    ),
    "span as a string": (
        {"resourceSpans": [{"scopeSpans": [{"spans": ["x"]}]}]},
        'resourceSpans[0].scopeSpans[0].spans[0] must be a JSON object, got the string "x"',
    ),
    "status as an empty array": (
        span_doc(status=[]),
        "resourceSpans[0].scopeSpans[0].spans[0].status must be a JSON object, got an array",
    ),
    "kind as a bool": (
        span_doc(kind=True),
        "resourceSpans[0].scopeSpans[0].spans[0].kind must be an enum name or an integer, "
        "got a boolean",
    ),
    "kind as a fraction": (
        span_doc(kind=2.5),
        "resourceSpans[0].scopeSpans[0].spans[0].kind must be an enum name or an integer, "
        "got the number 2.5",
    ),
    "kind as NaN": (
        span_doc(kind=math.nan),
        "resourceSpans[0].scopeSpans[0].spans[0].kind must be an enum name or an integer, "
        "got the number nan",
    ),
    "kind past int32": (
        span_doc(kind=2**32 + 2),
        "resourceSpans[0].scopeSpans[0].spans[0].kind is out of range for an enum (int32): "
        "4294967298",
    ),
    "double as a bool": (
        attr_doc({"doubleValue": True}),
        "resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value.doubleValue must be a "
        'number, "NaN", "Infinity" or "-Infinity", got a boolean',
    ),
}


@pytest.mark.parametrize(("document", "message"), DIVERGING.values(), ids=DIVERGING.keys())
def test_rejects_wrong_types_json_format_accepted_by_accident(
    document: dict[str, Any], message: str
) -> None:
    body = body_of(document)
    assert reference_outcome(body) is not None
    with pytest.raises(OtlpDecodeError) as caught:
        json_to_protobuf(body)
    assert str(caught.value) == f"invalid OTLP/JSON: {message}"


@pytest.mark.parametrize(
    "document",
    [span_doc(kind=math.inf), attr_doc({"doubleValue": 10**400}), span_doc(kind="\udc00")],
    ids=["kind 1e999", "double 10^400", "kind with a surrogate"],
)
def test_what_json_format_crashed_on_is_a_decode_error(document: dict[str, Any]) -> None:
    # json_format raised OverflowError or SystemError here, which the receiver answered with 500.
    with pytest.raises(OtlpDecodeError):
        json_to_protobuf(body_of(document))


# --- messages ---------------------------------------------------------------------------------

SPAN_PATH = "resourceSpans[0].scopeSpans[0].spans[0]"
ERRORS = [
    (b"{", "OTLP/JSON body is not valid JSON: Expecting property name enclosed in double quotes "
     "(line 1, column 2)"),
    (b"\xff{}", "OTLP/JSON body is not valid UTF-8"),
    (b"[]", "OTLP/JSON body must be a JSON object"),
    (b'"x"', "OTLP/JSON body must be a JSON object"),
    (b"[" * 100_000 + b"]" * 100_000, "OTLP/JSON body is nested too deeply"),
    (b'{"x": ' + b"1" * 5000 + b"}",
     "OTLP/JSON body cannot be read: Exceeds the limit (4300 digits) for integer string "
     "conversion"),
    (b'{"resourceSpans": 5}',
     "invalid OTLP/JSON: resourceSpans must be an array, got the number 5"),
    (body_of(span_doc(name=[])), f"invalid OTLP/JSON: {SPAN_PATH}.name must be a string, "
     "got an array"),
    (body_of(span_doc(spanId="0102030405060708x")),
     f"{SPAN_PATH}.spanId must be a hex string (OTLP/JSON encodes ids as hex, not base64)"),
    (body_of(span_doc(parent_span_id="AQIDBAUGBwg=")),
     f"{SPAN_PATH}.parent_span_id must be a hex string (OTLP/JSON encodes ids as hex, not base64)"),
    (body_of(span_doc(links=[{}, {"traceId": "zz"}])),
     f"{SPAN_PATH}.links[1].traceId must be a hex string (OTLP/JSON encodes ids as hex, not "
     "base64)"),
    (body_of(span_doc(traceId=7)), f"invalid OTLP/JSON: {SPAN_PATH}.traceId must be a hex "
     "string, got the number 7"),
    (body_of(span_doc(attributes=[{}, None])),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[1] must not be null"),
    (body_of(attr_doc({"intValue": 1, "doubleValue": 2.0})),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[0].value sets both intValue and doubleValue: "
     "one only"),
    (body_of(attr_doc({"intValue": "12 "})),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[0].value.intValue must be an integer (a number "
     'or a numeric string), got the string "12 "'),
    # 5000 digits: int() raises ValueError past 4300, which the fast paths let out (a 500)
    (body_of(span_doc(startTimeUnixNano="1" * 5000)),
     f"invalid OTLP/JSON: {SPAN_PATH}.startTimeUnixNano must be an integer (a number or a numeric "
     'string), got the string "' + "1" * 36 + "..."),
    (body_of(span_doc(endTimeUnixNano="9" * 5000)),
     f"invalid OTLP/JSON: {SPAN_PATH}.endTimeUnixNano must be an integer (a number or a numeric "
     'string), got the string "' + "9" * 36 + "..."),
    (body_of(attr_doc({"intValue": "1" * 5000})),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[0].value.intValue must be an integer (a number "
     'or a numeric string), got the string "' + "1" * 36 + "..."),
    (body_of(attr_doc({"intValue": str(2**63)})),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[0].value.intValue is out of range: "
     "9223372036854775808"),
    (body_of(attr_doc({"doubleValue": "nan"})),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[0].value.doubleValue must be a number, \"NaN\", "
     '"Infinity" or "-Infinity", got the string "nan"'),
    (body_of(attr_doc({"doubleValue": math.inf})),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[0].value.doubleValue must be finite; write "
     '"NaN", "Infinity" or "-Infinity" as strings'),
    (body_of(attr_doc({"doubleValue": 10**400})),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[0].value.doubleValue is too large for a double"),
    (body_of(attr_doc({"boolValue": "true"})),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[0].value.boolValue must be true or false, got "
     'the string "true"'),
    (body_of(attr_doc({"bytesValue": "A"})),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[0].value.bytesValue is not valid base64"),
    (body_of(span_doc(attributes=[{"key": "\udc00"}])),
     f"invalid OTLP/JSON: {SPAN_PATH}.attributes[0].key contains an unpaired surrogate "
     "(\\ud800-\\udfff)"),
    (body_of(span_doc(kind=[])), f"invalid OTLP/JSON: {SPAN_PATH}.kind must be an enum name or "
     "an integer, got an array"),
    (body_of(span_doc(kind=-(2**31) - 1)),
     f"invalid OTLP/JSON: {SPAN_PATH}.kind is out of range for an enum (int32): -2147483649"),
    (body_of(span_doc(kind="\ud800")),
     f"invalid OTLP/JSON: {SPAN_PATH}.kind contains an unpaired surrogate (\\ud800-\\udfff)"),
    (body_of(span_doc(**{"[ext]": 1})),
     f'invalid OTLP/JSON: {SPAN_PATH}."[ext]" is protobuf extension syntax, not a field'),
    (body_of(attr_doc(nested(49))),
     "invalid OTLP/JSON: resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value"
     ".(...).arrayValue.values[0].arrayValue nests messages deeper than 100 levels"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message"), ERRORS, ids=[m[:40] for _, m in ERRORS])
def test_errors_are_one_clear_line(body: bytes, message: str) -> None:
    with pytest.raises(OtlpDecodeError) as caught:
        json_to_protobuf(body)
    assert str(caught.value) == message
    assert reference_outcome(body) is None


def test_numbers_strings_enum_names_upper_hex_and_unknown_fields() -> None:
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "s"}}],
                    "futureField": {"x": 1},
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": TRACE_HEX.upper(),
                                "spanId": SPAN_HEX,
                                "parentSpanId": "",
                                "name": "op",
                                "kind": "SPAN_KIND_CLIENT",
                                "startTimeUnixNano": T0,
                                "endTimeUnixNano": str(T0 + 5),
                                "attributes": [
                                    {"key": "n", "value": {"intValue": "12"}},
                                    {"key": "m", "value": {"intValue": 13}},
                                ],
                                "status": {"code": 2},
                                "somethingNew": True,
                            }
                        ]
                    }
                ],
            }
        ],
        "extra": [1, 2],
    }
    decoded = decode_both(json_to_protobuf(body_of(body)))
    row = decoded.spans.to_pylist()[0]
    assert (row["trace_id"], row["span_id"], row["parent_span_id"]) == (TRACE_HEX, SPAN_HEX, None)
    assert (row["kind"], row["status_code"], row["end_ns"]) == (3, 2, T0 + 5)
    assert row["attributes"] == [("n", "12"), ("m", "13")]
    assert_agrees(body_of(body))


def test_proto_field_names() -> None:
    body = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": TRACE_HEX,
                                "span_id": SPAN_HEX,
                                "name": "op",
                                "start_time_unix_nano": "1",
                                "end_time_unix_nano": "2",
                                "links": [{"trace_id": "ab" * 16, "span_id": "cd" * 8}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    row = decode_both(json_to_protobuf(body_of(body))).spans.to_pylist()[0]
    assert row["trace_id"] == TRACE_HEX
    assert json.loads(row["links"])[0]["trace_id"] == "ab" * 16
    assert_agrees(body_of(body))


def test_wrong_length_hex_rejects_only_that_span() -> None:
    document = to_otlp_json(
        ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[make_span()] * 2)])]
        )
    )
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["traceId"] = "abcd"
    decoded = decode_both(json_to_protobuf(body_of(document)))
    assert decoded.spans.num_rows == 1
    assert decoded.errors == (
        "resource_spans[0].scope_spans[0].spans[1]: trace_id must be 16 bytes, got 2",
    )


def test_empty_object_is_an_empty_request() -> None:
    assert json_to_protobuf(b"{}") == b""


# --- mutated documents ------------------------------------------------------------------------

ODD_VALUES = [
    None, True, False, 0, -1, 3, 2.5, 5.0, 2**31, 2**32, 2**63, 2**64, -(2**63) - 1, 10**400,
    1e300, math.nan, math.inf, -math.inf, "", "x", "0", "12", " 12", "\t12", "1e3", "2.0", "1_0",
    "-5", "٣", "NaN", "nan", "Infinity", "-Infinity", "inf", "AQID", "AQ", "ab" * 8, "AB" * 16,
    "zz", "\ud800", "SPAN_KIND_CLIENT", "STATUS_CODE_ERROR", [], [None], ["x"], ["name"], [1],
    [{}], {}, {"x": 1}, {"[ext]": 1}, {"stringValue": "v"}, {"intValue": "1", "boolValue": True},
    {"key": "k", "value": {"doubleValue": 1.5}}, {"arrayValue": {"values": [{"intValue": 2}]}},
]  # fmt: skip
ODD_KEYS = ["futureField", "[ext]", "[a.b]\n", "x", "value", "stringValue", "trace_id", "values"]


def _slots(node: Any) -> list[tuple[Any, Any]]:
    """(container, key or index) of every value in the document."""
    found = []
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        found.append((node, key))
        if isinstance(value, dict | list):
            found.extend(_slots(value))
    return found


def _twin(name: str) -> str:
    """The other spelling: lowerCamelCase <-> snake_case."""
    if "_" in name:
        return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def mutate_document(seed: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    document = copy.deepcopy(seed)
    for _ in range(rng.randint(1, 3)):
        slots = _slots(document)
        if not slots:
            break
        container, key = rng.choice(slots)
        op = rng.randrange(5)
        if op <= 1:
            container[key] = copy.deepcopy(rng.choice(ODD_VALUES))
        elif op == 2 and isinstance(container, dict):
            del container[key]
        elif op == 3 and isinstance(container, dict):
            # the other spelling, before or after, with the same or an odd value
            value = container[key] if rng.random() < 0.5 else rng.choice(ODD_VALUES)
            entries = list(container.items())
            entries.insert(rng.randrange(len(entries) + 1), (_twin(key), copy.deepcopy(value)))
            container.clear()
            container.update(entries)
        elif isinstance(container, dict):
            container[rng.choice(ODD_KEYS)] = copy.deepcopy(rng.choice(ODD_VALUES))
        else:
            container.insert(
                rng.randrange(len(container) + 1), copy.deepcopy(rng.choice(ODD_VALUES))
            )
    return document


def fuzz_seeds() -> list[dict[str, Any]]:
    rich = rich_request()
    return [
        to_otlp_json(rich),
        to_otlp_json(rich, proto_names=True, int_enums=True, int64_numbers=True),
        to_otlp_json(make_export_request(3, seed=2)),
        attr_doc(nested(3), nested(3, "kvlistValue"), {"bytesValue": "AQID"}, kind=2, flags=1),
    ]


def test_mutated_documents_decode_alike_or_raise_decode_error() -> None:
    rng = random.Random(7)
    counts = {"same bytes": 0, "both rejected": 0, "rejected on purpose": 0}
    for seed in fuzz_seeds():
        for _ in range(750):
            body = body_of(mutate_document(seed, rng))
            fast = assert_agrees(body)
            if isinstance(fast, bytes):
                counts["same bytes"] += 1
                with contextlib.suppress(OtlpDecodeError):
                    decode_traces(fast)
            elif reference_outcome(body) is None:
                counts["both rejected"] += 1
            else:
                counts["rejected on purpose"] += 1
    assert min(counts.values()) > 20, counts
