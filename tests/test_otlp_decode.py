"""The OTLP trace decoder: exact tables, span rejections, wire-format errors, and the C decoder
checked against the Python reference (differential property tests and fuzzing, with and without
an ExtractSpec). OTLP/JSON is in tests/test_otlp_json.py; extraction's own cases in
tests/test_otlp_extract.py."""

from __future__ import annotations

import json
import math
import random
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    EntityRef,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from inferledger.fixtures import make_export_request
from ingest import otlp_decode
from ingest.otlp_decode import (
    RESOURCE_SCHEMA,
    SCOPE_SCHEMA,
    SPAN_SCHEMA,
    DecodedTraces,
    ExtractSpec,
    OtlpDecodeError,
    SpanWindow,
    decode_traces,
    decode_traces_python,
    make_extract_spec,
)

NEEDS_C = pytest.mark.skipif(
    not otlp_decode.ACCELERATED,
    reason="C extension ingest._otlp_fast is not built (python setup.py build_ext --inplace)",
)
DECODERS = [
    pytest.param(False, id="python"),
    pytest.param(True, id="c", marks=NEEDS_C),
]

TRACE = bytes(range(1, 17))
TRACE_HEX = TRACE.hex()
SPAN = bytes(range(1, 9))
SPAN_HEX = SPAN.hex()
T0 = 1_700_000_000_000_000_000


# --- helpers ----------------------------------------------------------------------------------


def kv(key: str, value: AnyValue | None = None) -> KeyValue:
    return KeyValue(key=key) if value is None else KeyValue(key=key, value=value)


def s(text: str) -> AnyValue:
    return AnyValue(string_value=text)


def arr(*values: AnyValue) -> AnyValue:
    return AnyValue(array_value=ArrayValue(values=values))


def kvl(*pairs: KeyValue) -> AnyValue:
    return AnyValue(kvlist_value=KeyValueList(values=pairs))


def make_span(name: str = "op", **fields: object) -> Span:
    values: dict[str, object] = {
        "trace_id": TRACE,
        "span_id": SPAN,
        "name": name,
        "start_time_unix_nano": T0,
        "end_time_unix_nano": T0 + 1000,
    }
    values.update(fields)
    return Span(**values)


def request_of(*spans: Span) -> bytes:
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    ).SerializeToString()


def decode_both(data: bytes) -> DecodedTraces:
    """Decode with the reference and, when built, with C; assert they agree; return one."""
    try:
        expected = decode_traces_python(data)
    except OtlpDecodeError as exc:
        if otlp_decode.ACCELERATED:
            with pytest.raises(OtlpDecodeError):
                decode_traces(data, use_c=True)
        raise exc
    if otlp_decode.ACCELERATED:
        assert_same(decode_traces(data, use_c=True), expected)
    return expected


def assert_same(got: DecodedTraces, expected: DecodedTraces) -> None:
    for table in ("spans", "scopes", "resources"):
        a, b = getattr(got, table), getattr(expected, table)
        a.validate(full=True)  # offsets, bitmaps and UTF-8 of the buffers the C decoder built
        assert a.schema.equals(b.schema), table
        assert a.equals(b), (table, a.to_pylist(), b.to_pylist())
    assert got.total_spans == expected.total_spans
    assert got.rejected_spans == expected.rejected_spans
    assert got.errors == expected.errors


def attrs_of(data: bytes, use_c: bool, row: int = 0) -> dict[str, str | None]:
    return dict(decode_traces(data, use_c=use_c).spans.column("attributes")[row].as_py())


# Raw wire format, for what the protobuf classes cannot express.


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def ld(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


def wrap_spans(*span_payloads: bytes) -> bytes:
    """A request of one resource and one scope holding these serialized spans."""
    scope_spans = b"".join(ld(2, p) for p in span_payloads)
    return ld(1, ld(2, scope_spans))


UNKNOWN_FIELDS = (
    tag(900, 0)
    + varint(2**64 - 1)
    + tag(901, 1)
    + b"\x00" * 8
    + tag(902, 5)
    + b"\x00" * 4
    + ld(903, b"\xff\xfe not utf-8, not parsed")
    + tag(904, 3)
    + tag(1, 0)
    + b"\x01"
    + ld(2, b"x")
    + tag(904, 4)
)


# --- exact tables -----------------------------------------------------------------------------


def rich_request() -> ExportTraceServiceRequest:
    """Two resources; the first has two scopes (one without spans); the second holds only a
    rejected span. Every AnyValue type, events, links, status, duplicates."""
    span_a = make_span(
        "chat",
        parent_span_id=b"\x0a" * 8,
        trace_state="vendor=1",
        flags=0x101,
        kind=Span.SPAN_KIND_SERVER,
        dropped_attributes_count=1,
        dropped_events_count=2,
        dropped_links_count=3,
        status=Status(code=Status.STATUS_CODE_ERROR, message="boom"),
        attributes=[
            kv("str", s("héllo")),
            kv("bool_t", AnyValue(bool_value=True)),
            kv("bool_f", AnyValue(bool_value=False)),
            kv("int", AnyValue(int_value=-(2**63))),
            kv("dbl", AnyValue(double_value=0.1)),
            kv("dbl_int", AnyValue(double_value=3.0)),
            kv("dbl_small", AnyValue(double_value=1e-7)),
            kv("dbl_big", AnyValue(double_value=1e22)),
            kv("nan", AnyValue(double_value=math.nan)),
            kv("inf", AnyValue(double_value=-math.inf)),
            kv("bytes", AnyValue(bytes_value=b"\x00\xff\x10")),
            kv("empty_str", s("")),
            kv("empty_bytes", AnyValue(bytes_value=b"")),
            kv("unset", AnyValue()),
            kv("no_value"),
            kv("strindex", AnyValue(string_value_strindex=3)),
            kv(
                "array",
                arr(
                    s('q"\\\n\t\x01é😀'),
                    AnyValue(int_value=7),
                    AnyValue(double_value=2.5),
                    AnyValue(double_value=math.inf),
                    AnyValue(double_value=math.nan),
                    AnyValue(bool_value=False),
                    AnyValue(bytes_value=b"hi"),
                    AnyValue(),
                    arr(),
                    kvl(),
                ),
            ),
            kv(
                "kvlist",
                kvl(
                    kv("a", AnyValue(int_value=1)),
                    kv("a", AnyValue(int_value=2)),
                    kv("nested", arr(s("x"), kvl(kv("deep", AnyValue(bool_value=True))))),
                    kv("none"),
                ),
            ),
            kv("str", s("second occurrence loses")),
        ],
        events=[
            Span.Event(
                time_unix_nano=T0 + 5,
                name="token",
                attributes=[kv("n", AnyValue(int_value=3)), kv("l", arr(s("a")))],
                dropped_attributes_count=4,
            ),
            Span.Event(name="", attributes=[kv("u")]),
        ],
        links=[
            Span.Link(
                trace_id=b"\xab" * 16,
                span_id=b"\xcd" * 8,
                trace_state="k=v",
                attributes=[kv("x", s("y")), kv("x", s("z"))],
                dropped_attributes_count=5,
                flags=1,
            ),
            Span.Link(trace_id=b"\x01\x02"),
        ],
    )
    span_b = make_span("second", span_id=b"\x02" * 8, parent_span_id=bytes(8))
    rejected = make_span("bad", trace_id=bytes(16))
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(
                    attributes=[kv("service.name", s("svc")), kv("service.name", s("dup"))],
                    entity_refs=[EntityRef(type="service", id_keys=["service.name"])],
                ),
                schema_url="https://opentelemetry.io/schemas/1.30.0",
                scope_spans=[
                    ScopeSpans(
                        scope=InstrumentationScope(
                            name="vllm", version="0.33", attributes=[kv("lib", s("x"))]
                        ),
                        spans=[span_a, span_b],
                    ),
                    ScopeSpans(scope=InstrumentationScope(name="idle")),
                ],
            ),
            ResourceSpans(scope_spans=[ScopeSpans(spans=[rejected])]),
        ]
    )


EXPECTED_ATTRIBUTES = [
    ("str", "héllo"),
    ("bool_t", "true"),
    ("bool_f", "false"),
    ("int", "-9223372036854775808"),
    ("dbl", "0.1"),
    ("dbl_int", "3.0"),
    ("dbl_small", "1e-07"),
    ("dbl_big", "1e+22"),
    ("nan", "nan"),
    ("inf", "-inf"),
    ("bytes", "AP8Q"),
    ("empty_str", ""),
    ("empty_bytes", ""),
    ("unset", None),
    ("no_value", None),
    ("strindex", None),
    (
        "array",
        '["q\\"\\\\\\n\\t\\u0001é😀",7,2.5,"Infinity","NaN",false,"aGk=",null,[],{}]',
    ),
    ("kvlist", '{"a":1,"nested":["x",{"deep":true}],"none":null}'),
]


@pytest.mark.parametrize("use_c", DECODERS)
def test_rich_request_gives_exact_tables(use_c: bool) -> None:
    decoded = decode_traces(rich_request().SerializeToString(), use_c=use_c)
    events = (
        f'[{{"time_unix_nano":{T0 + 5},"name":"token","attributes":{{"n":"3","l":"[\\"a\\"]"}},'
        '"dropped_attributes_count":4},'
        '{"time_unix_nano":0,"name":"","attributes":{"u":null},"dropped_attributes_count":0}]'
    )
    links = (
        '[{"trace_id":"' + "ab" * 16 + '","span_id":"' + "cd" * 8 + '","trace_state":"k=v",'
        '"attributes":{"x":"y"},"dropped_attributes_count":5,"flags":1},'
        '{"trace_id":"0102","span_id":"","trace_state":"","attributes":{},'
        '"dropped_attributes_count":0,"flags":0}]'
    )
    common = {"trace_id": TRACE_HEX, "start_ns": T0, "end_ns": T0 + 1000}
    expected_spans = pa.Table.from_pylist(
        [
            {
                **common,
                "span_id": SPAN_HEX,
                "parent_span_id": "0a" * 8,
                "trace_state": "vendor=1",
                "flags": 0x101,
                "name": "chat",
                "kind": 2,
                "status_code": 2,
                "status_message": "boom",
                "attributes": EXPECTED_ATTRIBUTES,
                "dropped_attributes_count": 1,
                "dropped_events_count": 2,
                "dropped_links_count": 3,
                "events": events,
                "links": links,
                "resource_index": 0,
                "scope_index": 0,
            },
            {
                **common,
                "span_id": "02" * 8,
                "parent_span_id": None,
                "trace_state": None,
                "flags": 0,
                "name": "second",
                "kind": 0,
                "status_code": 0,
                "status_message": None,
                "attributes": [],
                "dropped_attributes_count": 0,
                "dropped_events_count": 0,
                "dropped_links_count": 0,
                "events": None,
                "links": None,
                "resource_index": 0,
                "scope_index": 0,
            },
        ],
        schema=SPAN_SCHEMA,
    )
    expected_scopes = pa.Table.from_pylist(
        [
            {
                "scope_index": 0,
                "resource_index": 0,
                "scope_name": "vllm",
                "scope_version": "0.33",
                "scope_attributes": [("lib", "x")],
            },
            {
                "scope_index": 1,
                "resource_index": 0,
                "scope_name": "idle",
                "scope_version": "",
                "scope_attributes": [],
            },
            {
                "scope_index": 2,
                "resource_index": 1,
                "scope_name": "",
                "scope_version": "",
                "scope_attributes": [],
            },
        ],
        schema=SCOPE_SCHEMA,
    )
    expected_resources = pa.Table.from_pylist(
        [
            {
                "resource_index": 0,
                "resource_attributes": [("service.name", "svc")],
                "resource_schema_url": "https://opentelemetry.io/schemas/1.30.0",
            },
            {"resource_index": 1, "resource_attributes": [], "resource_schema_url": ""},
        ],
        schema=RESOURCE_SCHEMA,
    )
    assert decoded.spans.to_pylist() == expected_spans.to_pylist()
    assert decoded.spans.equals(expected_spans)
    assert decoded.scopes.equals(expected_scopes)
    assert decoded.resources.equals(expected_resources)
    assert decoded.total_spans == 3
    assert decoded.rejected_spans == 1
    assert decoded.errors == (
        "resource_spans[1].scope_spans[0].spans[0]: trace_id must not be all zeros",
    )


@pytest.mark.parametrize("use_c", DECODERS)
def test_empty_request_gives_empty_tables_with_schemas(use_c: bool) -> None:
    decoded = decode_traces(b"", use_c=use_c)
    assert decoded.spans.schema.equals(SPAN_SCHEMA)
    assert decoded.scopes.schema.equals(SCOPE_SCHEMA)
    assert decoded.resources.schema.equals(RESOURCE_SCHEMA)
    assert (decoded.spans.num_rows, decoded.scopes.num_rows, decoded.resources.num_rows) == (
        0,
        0,
        0,
    )
    assert (decoded.total_spans, decoded.rejected_spans, decoded.errors) == (0, 0, ())


@pytest.mark.parametrize("use_c", DECODERS)
def test_many_attributes_keep_first_of_each_key(use_c: bool) -> None:
    # Past 16 keys the C decoder switches from a linear scan to a hash set.
    attributes = [kv(f"k{i % 150}", AnyValue(int_value=i)) for i in range(600)]
    nested = kvl(*[kv(f"n{i % 40}", AnyValue(int_value=i)) for i in range(100)])
    data = request_of(make_span(attributes=[*attributes, kv("nested", nested)]))
    got = attrs_of(data, use_c)
    assert len(got) == 151
    assert got["k149"] == "149"
    assert json.loads(got["nested"]) == {f"n{i}": i for i in range(40)}
    decode_both(data)


@NEEDS_C
def test_double_text_equals_python_repr() -> None:
    from ingest import _otlp_fast

    rng = random.Random(5)
    samples = [
        0.0,
        -0.0,
        1e-4,
        9.999999999999999e-05,
        1e-13,
        math.nextafter(1e-13, 0),
        1.5e-07,
        1e16,
        2.0**53,
        2.0**53 - 1,
        5e-324,
        1.7976931348623157e308,
        0.1 + 0.2,
    ]
    for _ in range(20_000):
        samples.append(struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0])
        samples.append(rng.random() * 10.0 ** rng.randint(-16, 17))
        samples.append(round(rng.uniform(-1000, 1000), rng.randint(0, 6)))
    for exponent in range(-1074, 1024, 7):
        x = 2.0**exponent
        samples += [x, math.nextafter(x, 0), math.nextafter(x, math.inf)]
    for x in samples:
        assert _otlp_fast.format_double(x) == repr(x), x


# --- span rejections --------------------------------------------------------------------------

REJECTIONS = [
    ({"trace_id": b"\x01" * 15}, "trace_id must be 16 bytes, got 15"),
    ({"trace_id": b""}, "trace_id must be 16 bytes, got 0"),
    ({"trace_id": bytes(16)}, "trace_id must not be all zeros"),
    ({"span_id": b"\x01" * 9}, "span_id must be 8 bytes, got 9"),
    ({"span_id": bytes(8)}, "span_id must not be all zeros"),
    ({"parent_span_id": b"\x01" * 4}, "parent_span_id must be 0 or 8 bytes, got 4"),
    ({"name": ""}, "name is required"),
    ({"start_time_unix_nano": 0}, "start_time_unix_nano is required"),
    (
        {"start_time_unix_nano": 2**63, "end_time_unix_nano": 2**63 + 1},
        "start_time_unix_nano is out of range (> 2^63-1)",
    ),
    ({"end_time_unix_nano": 0}, "end_time_unix_nano is before start_time_unix_nano"),
    ({"end_time_unix_nano": T0 - 1}, "end_time_unix_nano is before start_time_unix_nano"),
    ({"end_time_unix_nano": 2**63}, "end_time_unix_nano is out of range (> 2^63-1)"),
    (
        {"events": [Span.Event(time_unix_nano=1), Span.Event(time_unix_nano=2**64 - 1)]},
        "events[1].time_unix_nano is out of range (> 2^63-1)",
    ),
]


@pytest.mark.parametrize("use_c", DECODERS)
@pytest.mark.parametrize(("fields", "reason"), REJECTIONS, ids=[r for _, r in REJECTIONS])
def test_invalid_span_is_rejected_and_neighbours_survive(
    use_c: bool, fields: dict[str, object], reason: str
) -> None:
    bad = make_span(**{"name": "bad", "attributes": [kv("x", s("y"))], **fields})
    data = request_of(make_span("before"), bad, make_span("after", attributes=[kv("a", s("b"))]))
    decoded = decode_traces(data, use_c=use_c)
    assert decoded.spans.column("name").to_pylist() == ["before", "after"]
    assert decoded.spans.column("attributes").to_pylist() == [[], [("a", "b")]]
    assert (decoded.total_spans, decoded.rejected_spans) == (3, 1)
    assert decoded.errors == (f"resource_spans[0].scope_spans[0].spans[1]: {reason}",)
    decode_both(data)


@pytest.mark.parametrize("use_c", DECODERS)
def test_edge_values_that_are_accepted(use_c: bool) -> None:
    data = request_of(
        make_span("zero parent", parent_span_id=bytes(8)),
        make_span("instant", end_time_unix_nano=T0),
        make_span("max", start_time_unix_nano=2**63 - 1, end_time_unix_nano=2**63 - 1),
        make_span("event at zero", events=[Span.Event(time_unix_nano=0)]),
    )
    decoded = decode_traces(data, use_c=use_c)
    assert decoded.rejected_spans == 0
    assert decoded.spans.column("parent_span_id").to_pylist() == [None, None, None, None]
    assert decoded.spans.column("end_ns").to_pylist() == [T0 + 1000, T0, 2**63 - 1, T0 + 1000]


# --- the time window (issue #17: a span at 2^63-1 ns overflowed every refresh of its hour) -----

WINDOW = SpanWindow(received_ns=T0, future_s=3600)  # spans may end up to an hour after T0
HOUR = 3600 * 10**9
WINDOW_REJECTIONS = [
    ({"start_time_unix_nano": 2**63 - 1, "end_time_unix_nano": 2**63 - 1},
     "end_time_unix_nano is more than 3600 s after receipt"),
    ({"start_time_unix_nano": T0, "end_time_unix_nano": 2**63 - 1},
     "end_time_unix_nano is more than 3600 s after receipt"),
    ({"start_time_unix_nano": T0 + HOUR + 1, "end_time_unix_nano": T0 + HOUR + 2},
     "end_time_unix_nano is more than 3600 s after receipt"),
    ({"start_time_unix_nano": 1, "end_time_unix_nano": T0},
     "start_time_unix_nano is before 2000-01-01T00:00:00Z"),
    ({"start_time_unix_nano": 1_700_000_000, "end_time_unix_nano": 1_700_000_001},
     "start_time_unix_nano is before 2000-01-01T00:00:00Z"),  # seconds sent as nanoseconds
    ({"start_time_unix_nano": otlp_decode.MIN_SPAN_NS - 1, "end_time_unix_nano": T0},
     "start_time_unix_nano is before 2000-01-01T00:00:00Z"),
]  # fmt: skip


@pytest.mark.parametrize("use_c", DECODERS)
@pytest.mark.parametrize(("fields", "reason"), WINDOW_REJECTIONS)
def test_span_outside_the_window_is_rejected_and_neighbours_survive(
    use_c: bool, fields: dict[str, object], reason: str
) -> None:
    data = request_of(make_span("before"), make_span("bad", **fields), make_span("after"))
    decoded = decode_traces(data, use_c=use_c, window=WINDOW)
    assert decoded.spans.column("name").to_pylist() == ["before", "after"]
    assert (decoded.total_spans, decoded.rejected_spans) == (3, 1)
    assert decoded.errors == (f"resource_spans[0].scope_spans[0].spans[1]: {reason}",)
    assert_same(decode_traces_python(data, window=WINDOW), decoded)
    # Without a window (a plain decode) the span is kept: only ingest applies the window.
    assert decode_traces(data, use_c=use_c).rejected_spans == 0


@pytest.mark.parametrize("use_c", DECODERS)
def test_window_edges_are_accepted(use_c: bool) -> None:
    data = request_of(
        make_span("first instant", start_time_unix_nano=otlp_decode.MIN_SPAN_NS),
        make_span("last instant", end_time_unix_nano=T0 + HOUR),
        make_span("event far out", events=[Span.Event(time_unix_nano=2**63 - 1)]),
    )
    decoded = decode_traces(data, use_c=use_c, window=WINDOW)
    assert decoded.rejected_spans == 0 and decoded.spans.num_rows == 3


def test_window_end_saturates_below_int64() -> None:
    assert SpanWindow(2**63 - 10, 10**9).max_end_ns == 2**63 - 1
    assert SpanWindow(T0).max_end_ns == T0 + otlp_decode.MAX_SPAN_FUTURE_S * 10**9


@pytest.mark.parametrize("use_c", DECODERS)
def test_rejection_messages_name_their_position_and_keep_ten(use_c: bool) -> None:
    request = ExportTraceServiceRequest()
    request.resource_spans.add()
    resource = request.resource_spans.add()
    resource.scope_spans.add()
    resource.scope_spans.add()
    resource.scope_spans.add().spans.extend(
        [make_span("ok")] + [make_span("", span_id=bytes([i + 1]) * 8) for i in range(12)]
    )
    decoded = decode_traces(request.SerializeToString(), use_c=use_c)
    assert (decoded.total_spans, decoded.rejected_spans, decoded.spans.num_rows) == (13, 12, 1)
    assert len(decoded.errors) == 10
    assert decoded.errors[0] == "resource_spans[1].scope_spans[2].spans[1]: name is required"
    assert decoded.errors[9] == "resource_spans[1].scope_spans[2].spans[10]: name is required"
    assert decoded.spans.column("resource_index").to_pylist() == [1]
    assert decoded.spans.column("scope_index").to_pylist() == [2]
    assert decoded.scopes.num_rows == 3
    assert decoded.resources.num_rows == 2


# --- nesting depth ----------------------------------------------------------------------------


def nested_array(levels: int) -> AnyValue:
    """An AnyValue nesting `levels` AnyValues (itself included)."""
    value = AnyValue(int_value=1)
    for _ in range(levels - 1):
        value = arr(value)
    return value


def nested_kvlist(levels: int) -> AnyValue:
    value = AnyValue(int_value=1)
    for _ in range(levels - 1):
        value = kvl(kv("k", value))
    return value


def raw_nested(levels: int, container: str = "array") -> bytes:
    """A serialized AnyValue nesting `levels` AnyValues (itself included); built by hand because
    the protobuf classes refuse to copy messages nested past upb's limit."""
    value = tag(3, 0) + b"\x01"
    for _ in range(levels - 1):
        if container == "array":
            value = ld(5, ld(1, value))
        else:
            value = ld(6, ld(1, ld(1, b"k") + ld(2, value)))
    return value


@pytest.mark.parametrize("use_c", DECODERS)
@pytest.mark.parametrize("container", ["array", "kvlist"])
def test_attribute_nesting_is_limited_to_32_levels(use_c: bool, container: str) -> None:
    def attribute(levels: int) -> bytes:
        return ld(1, b"v") + ld(2, raw_nested(levels, container))

    text = attrs_of(wrap_spans(span_bytes() + ld(9, attribute(32))), use_c)["v"]
    assert text.count("[") + text.count("{") == 31
    deep = attribute(33)
    for data in (
        wrap_spans(span_bytes() + ld(9, deep)),
        wrap_spans(span_bytes() + ld(11, ld(3, deep))),
        ld(1, ld(1, ld(1, deep))),
    ):
        with pytest.raises(OtlpDecodeError) as caught:
            decode_traces(data, use_c=use_c)
        # A kvlist level costs upb three message levels, so in a span a 33-level kvlist is also
        # past upb's limit of 100 levels, and the Python decoder reports that error instead.
        if container == "array" or use_c:
            assert str(caught.value) == "attribute value nested deeper than 32 levels"


@pytest.mark.parametrize("use_c", DECODERS)
def test_depth_is_only_checked_where_the_value_is_used(use_c: bool) -> None:
    deep = nested_array(40)
    rejected = make_span("", attributes=[kv("v", deep)])
    duplicate = make_span(attributes=[kv("v", s("first")), kv("v", deep)])
    decoded = decode_traces(request_of(rejected, duplicate), use_c=use_c)
    assert decoded.rejected_spans == 1
    assert decoded.spans.column("attributes").to_pylist() == [[("v", "first")]]


@pytest.mark.parametrize("use_c", DECODERS)
def test_messages_nested_past_upbs_limit_fail_even_when_unused(use_c: bool) -> None:
    # upb refuses more than 100 levels of messages (a span's attribute value is at level 5, each
    # array adds two); a rejected span must not slip past that.
    def rejected_with(levels: int) -> bytes:
        return wrap_spans(span_bytes(name="") + ld(9, ld(1, b"v") + ld(2, raw_nested(levels))))

    assert decode_traces(rejected_with(48), use_c=use_c).rejected_spans == 1
    with pytest.raises(OtlpDecodeError, match="malformed OTLP protobuf"):
        decode_traces(rejected_with(49), use_c=use_c)
    groups = wrap_spans(span_bytes() + tag(99, 3) * 98 + tag(99, 4) * 98)
    with pytest.raises(OtlpDecodeError, match="malformed OTLP protobuf"):
        decode_traces(groups, use_c=use_c)
    fits = wrap_spans(span_bytes() + tag(99, 3) * 97 + tag(99, 4) * 97)
    assert decode_traces(fits, use_c=use_c).spans.num_rows == 1


# --- wire format ------------------------------------------------------------------------------


def span_bytes(**fields: object) -> bytes:
    return make_span(**fields).SerializeToString()


MALFORMED = {
    "truncated": request_of(make_span(attributes=[kv("a", s("b"))]))[:-1],
    "length past end": ld(1, b"")[:-1] + b"\x05",
    "huge length": tag(1, 2) + b"\xff\xff\xff\xff\x0f",
    "length over 5 bytes": tag(1, 2) + b"\x80\x80\x80\x80\x80\x00",
    "truncated varint": wrap_spans(span_bytes() + tag(6, 0) + b"\x80"),
    "varint over 10 bytes": wrap_spans(span_bytes() + tag(6, 0) + b"\xff" * 10 + b"\x01"),
    "tag over 32 bits": b"\xff\xff\xff\xff\x1f\x00",
    "field number 0": tag(0, 0) + b"\x01",
    "wire type 6": tag(1, 6),
    "wire type 7": wrap_spans(span_bytes() + tag(3, 7)),
    "stray end group": wrap_spans(span_bytes() + tag(30, 4)),
    "unterminated group": wrap_spans(span_bytes() + tag(30, 3) + tag(1, 0) + b"\x01"),
    "mismatched group": wrap_spans(span_bytes() + tag(30, 3) + tag(31, 4)),
    "group ends outside its message": wrap_spans(span_bytes() + tag(30, 3)) + tag(30, 4),
    "truncated fixed64": wrap_spans(span_bytes() + tag(7, 1) + b"\x00" * 7),
    "bad utf-8 name": wrap_spans(span_bytes() + ld(5, b"\xc3")),
    "surrogate in key": request_of(make_span(attributes=[kv("k")]))[:-3] + b"\xed\xa0\x80",
    "bad utf-8 overwritten": wrap_spans(ld(5, b"\xff") + span_bytes()),
    "bad utf-8 in replaced oneof member": wrap_spans(
        span_bytes() + ld(9, ld(1, b"k") + ld(2, ld(1, b"\xff") + tag(3, 0) + b"\x01"))
    ),
    "bad utf-8 in replaced array": wrap_spans(
        span_bytes()
        + ld(9, ld(1, b"k") + ld(2, ld(5, ld(1, ld(1, b"\xff"))) + tag(3, 0) + b"\x01"))
    ),
    "bad utf-8 in duplicate attribute": wrap_spans(
        span_bytes(attributes=[kv("k", s("v"))]) + ld(9, ld(1, b"k") + ld(2, ld(1, b"\xff")))
    ),
    "bad utf-8 in rejected span": wrap_spans(
        span_bytes(name="") + ld(11, ld(3, ld(1, b"k") + ld(2, ld(1, b"\xff"))))
    ),
    "bad utf-8 in entity ref": ld(1, ld(1, ld(3, ld(3, b"\xff")))),
    "bad utf-8 in scope schema url": ld(1, ld(2, ld(3, b"\xff"))),
    "bad utf-8 in status": wrap_spans(span_bytes() + ld(15, ld(2, b"\xff"))),
    "bad utf-8 in link state": wrap_spans(span_bytes() + ld(13, ld(3, b"\xff"))),
}


@pytest.mark.parametrize("use_c", DECODERS)
@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_request_raises_one_line_error(use_c: bool, data: bytes) -> None:
    with pytest.raises(OtlpDecodeError) as caught:
        decode_traces(data, use_c=use_c)
    message = str(caught.value)
    assert message.startswith("malformed OTLP protobuf: ")
    assert "\n" not in message


@pytest.mark.parametrize("use_c", DECODERS)
def test_unknown_fields_are_skipped_at_every_level(use_c: bool) -> None:
    u = UNKNOWN_FIELDS
    any_value = ld(5, ld(1, ld(1, b"x") + u) + u) + u  # AnyValue{array{[AnyValue{"x"}]}}
    key_value = ld(1, b"k") + ld(2, any_value) + u
    event = tag(1, 1) + struct.pack("<Q", 5) + ld(2, b"e") + ld(3, key_value) + u
    link = ld(1, TRACE) + ld(2, SPAN) + ld(4, key_value) + u
    status = ld(2, b"m") + tag(3, 0) + b"\x02" + u
    span = span_bytes() + ld(9, key_value) + ld(11, event) + ld(13, link) + ld(15, status) + u
    scope = ld(1, b"scope") + ld(3, key_value) + u
    resource = ld(1, key_value) + ld(3, ld(2, b"service") + u) + u
    data = ld(1, ld(1, resource) + ld(2, ld(1, scope) + ld(2, span) + u) + u) + u
    decoded = decode_traces(data, use_c=use_c)
    row = decoded.spans.to_pylist()[0]
    assert row["attributes"] == [("k", '["x"]')]
    assert row["status_code"] == 2 and row["status_message"] == "m"
    assert json.loads(row["events"])[0]["attributes"] == {"k": '["x"]'}
    assert json.loads(row["links"])[0]["attributes"] == {"k": '["x"]'}
    assert decoded.scopes.column("scope_attributes").to_pylist() == [[("k", '["x"]')]]
    assert decoded.resources.column("resource_attributes").to_pylist() == [[("k", '["x"]')]]
    decode_both(data)


@pytest.mark.parametrize("use_c", DECODERS)
def test_proto3_merge_semantics_of_non_canonical_encodings(use_c: bool) -> None:
    key = ld(1, b"k")
    span = (
        span_bytes(name="first")
        + ld(5, b"last")  # a repeated singular scalar: the last one wins
        + tag(5, 0)  # a known field with the wrong wire type is an unknown field
        + b"\x07"
        + ld(15, tag(3, 0) + b"\x02")  # occurrences of a singular message merge
        + ld(15, ld(2, b"msg"))
        + ld(9, key + ld(2, ld(1, b"x")) + ld(2, tag(3, 0) + b"\x05"))  # KeyValue.value merges
        + ld(9, ld(1, b"a") + ld(2, ld(5, ld(1, ld(1, b"1"))) + ld(5, ld(1, ld(1, b"2")))))
        + ld(9, ld(1, b"b") + ld(2, ld(5, ld(1, ld(1, b"1"))) + tag(2, 0) + b"\x01"))
        + ld(9, ld(1, b"c") + ld(2, ld(5, ld(1, ld(1, b"1"))) + tag(2, 0) + b"\x01" + ld(5, b"")))
        + ld(9, ld(1, b"d") + ld(2, tag(2, 0) + b"\x02"))  # any non-zero bool is true
        + ld(9, ld(1, b"e") + ld(2, tag(3, 0) + b"\xff" * 9 + b"\x7f"))
        + tag(6, 0)
        + varint(2**32 + 3)  # int32 fields keep the low 32 bits, as upb does
    )
    resource = ld(1, ld(1, key + ld(2, ld(1, b"r1")))) + ld(1, ld(1, ld(1, b"k2")))
    scope = ld(1, ld(1, b"name")) + ld(1, ld(2, b"version"))
    data = ld(1, resource + ld(2, scope + ld(2, span)))
    decoded = decode_traces(data, use_c=use_c)
    row = decoded.spans.to_pylist()[0]
    assert row["name"] == "last"
    assert row["kind"] == 3
    assert (row["status_code"], row["status_message"]) == (2, "msg")
    assert row["attributes"] == [
        ("k", "5"),
        ("a", '["1","2"]'),
        ("b", "true"),
        ("c", "[]"),
        ("d", "true"),
        ("e", "-1"),
    ]
    assert decoded.resources.column("resource_attributes").to_pylist() == [
        [("k", "r1"), ("k2", None)]
    ]
    assert decoded.scopes.select(["scope_name", "scope_version"]).to_pylist() == [
        {"scope_name": "name", "scope_version": "version"}
    ]
    decode_both(data)


# --- differential: C against the Python reference ---------------------------------------------

KEYS = st.sampled_from(["a", "b", "gen_ai.usage.prompt_tokens", "", "é", "k\n\x00", "😀"])
TEXT = st.text(max_size=6)
SCALARS = st.one_of(
    st.builds(s, TEXT),
    st.builds(lambda b: AnyValue(bool_value=b), st.booleans()),
    st.builds(lambda i: AnyValue(int_value=i), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda d: AnyValue(double_value=d), st.floats()),
    st.builds(lambda b: AnyValue(bytes_value=b), st.binary(max_size=7)),
    st.just(AnyValue()),
    st.builds(lambda i: AnyValue(string_value_strindex=i), st.integers(0, 9)),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.builds(lambda xs: arr(*xs), st.lists(inner, max_size=3)),
        st.builds(
            lambda pairs: kvl(*[kv(k, v) for k, v in pairs]),
            st.lists(st.tuples(KEYS, st.one_of(st.none(), inner)), max_size=3),
        ),
    ),
    max_leaves=8,
)
ATTRIBUTES = st.lists(st.builds(kv, KEYS, st.one_of(st.none(), VALUES)), max_size=5)
U64 = st.one_of(st.just(0), st.integers(1, 2**63 - 1), st.integers(2**63, 2**64 - 1), st.just(T0))
U32 = st.integers(0, 2**32 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
ID16 = st.one_of(st.binary(min_size=16, max_size=16), st.just(bytes(16)), st.binary(max_size=17))
ID8 = st.one_of(st.binary(min_size=8, max_size=8), st.just(bytes(8)), st.binary(max_size=9))


@st.composite
def spans(draw: st.DrawFn) -> Span:
    start = draw(U64)
    end = draw(st.one_of(U64, st.integers(0, 2**40).map(lambda d: min(start + d, 2**64 - 1))))
    return Span(
        trace_id=draw(ID16),
        span_id=draw(ID8),
        trace_state=draw(TEXT),
        parent_span_id=draw(st.one_of(st.just(b""), ID8)),
        flags=draw(U32),
        name=draw(st.one_of(st.just("op"), TEXT)),
        kind=draw(st.one_of(st.integers(0, 5), I32)),
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=draw(ATTRIBUTES),
        dropped_attributes_count=draw(U32),
        events=draw(
            st.lists(
                st.builds(
                    Span.Event,
                    time_unix_nano=st.one_of(st.integers(0, 2**63 - 1), U64),
                    name=TEXT,
                    attributes=ATTRIBUTES,
                    dropped_attributes_count=U32,
                ),
                max_size=2,
            )
        ),
        dropped_events_count=draw(U32),
        links=draw(
            st.lists(
                st.builds(
                    Span.Link,
                    trace_id=ID16,
                    span_id=ID8,
                    trace_state=TEXT,
                    attributes=ATTRIBUTES,
                    dropped_attributes_count=U32,
                    flags=U32,
                ),
                max_size=2,
            )
        ),
        dropped_links_count=draw(U32),
        status=draw(st.builds(Status, code=I32, message=TEXT)),
    )


def requests_of(
    span: st.SearchStrategy[Span], min_size: int = 0
) -> st.SearchStrategy[ExportTraceServiceRequest]:
    """Requests of these spans; min_size=1 gives each level at least one element."""
    return st.builds(
        lambda resources: ExportTraceServiceRequest(resource_spans=resources),
        st.lists(
            st.builds(
                ResourceSpans,
                resource=st.builds(Resource, attributes=ATTRIBUTES),
                schema_url=TEXT,
                scope_spans=st.lists(
                    st.builds(
                        ScopeSpans,
                        scope=st.builds(
                            InstrumentationScope, name=TEXT, version=TEXT, attributes=ATTRIBUTES
                        ),
                        spans=st.lists(span, min_size=min_size, max_size=3),
                    ),
                    min_size=min_size,
                    max_size=2,
                ),
            ),
            min_size=min_size,
            max_size=2,
        ),
    )


REQUESTS = requests_of(spans())
# Random spans are nearly all rejected; extraction wants stored ones too, with events and links
# whose attributes must stay where they are.
STORED_SPANS = st.builds(
    lambda attributes, events, links: make_span(attributes=attributes, events=events, links=links),
    st.lists(st.builds(kv, KEYS, st.one_of(SCALARS, SCALARS, VALUES)), min_size=1, max_size=8),
    st.lists(st.builds(Span.Event, name=TEXT, attributes=ATTRIBUTES), max_size=1),
    st.lists(st.builds(Span.Link, trace_id=ID16, span_id=ID8, attributes=ATTRIBUTES), max_size=1),
)


# What each extract kind accepts, restated from the contract (not imported from the code).
ACCEPTED_TYPES = {
    "str": {"string_value"},
    "int": {"int_value"},
    "float": {"double_value", "int_value"},
    "bool": {"bool_value"},
}


def attribute_keys(request: ExportTraceServiceRequest) -> set[str]:
    """Every attribute key of the request: spans, events, links, scopes and resources."""
    keys: set[str] = set()
    for resource_spans in request.resource_spans:
        keys.update(kv.key for kv in resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            keys.update(kv.key for kv in scope_spans.scope.attributes)
            for span in scope_spans.spans:
                keys.update(kv.key for kv in span.attributes)
                for item in [*span.events, *span.links]:
                    keys.update(kv.key for kv in item.attributes)
    return keys


@st.composite
def requests_with_specs(draw: st.DrawFn) -> tuple[ExportTraceServiceRequest, ExtractSpec]:
    """A request, and a spec of some of its keys and some absent ones, of random kinds."""
    request = draw(st.one_of(REQUESTS, requests_of(STORED_SPANS, min_size=1)))
    candidates = [*sorted(attribute_keys(request) - {""}), "absent", "gen_ai.system"]
    keys = draw(st.lists(st.sampled_from(candidates), unique=True, min_size=1))
    kind = st.sampled_from(sorted(ACCEPTED_TYPES))
    kinds = draw(st.lists(kind, min_size=len(keys), max_size=len(keys)))
    return request, make_extract_spec(zip(keys, kinds, strict=True))


def assert_extraction(
    request: ExportTraceServiceRequest,
    spec: ExtractSpec,
    plain: DecodedTraces,
    extracted: DecodedTraces,
) -> None:
    """`extracted` is `plain` plus one column per spec key holding the text the map held, with
    exactly those keys out of the map whose first occurrence has a type the kind accepts."""
    base = extracted.spans.drop_columns(list(spec.columns))
    assert base.schema.equals(SPAN_SCHEMA)
    assert base.drop_columns(["attributes"]).equals(plain.spans.drop_columns(["attributes"]))
    assert extracted.scopes.equals(plain.scopes)
    assert extracted.resources.equals(plain.resources)
    kinds = dict(spec.pairs)
    valid = [
        span
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
        if otlp_decode._span_rejection(span) is None
    ]
    assert len(valid) == plain.spans.num_rows
    maps_before = plain.spans.column("attributes").to_pylist()
    maps_after = extracted.spans.column("attributes").to_pylist()
    columns = {
        key: extracted.spans.column(name).to_pylist()
        for key, name in zip(spec.keys, spec.columns, strict=True)
    }
    for row, span in enumerate(valid):
        first_type: dict[str, str | None] = {}
        for item in span.attributes:
            first_type.setdefault(item.key, item.value.WhichOneof("value"))
        held = dict(maps_before[row])
        removed = {k for k in held if k in kinds and first_type[k] in ACCEPTED_TYPES[kinds[k]]}
        assert maps_after[row] == [(k, v) for k, v in maps_before[row] if k not in removed]
        for key, texts in columns.items():
            assert texts[row] == held.get(key), key


@NEEDS_C
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=requests_with_specs(), suffix=st.sampled_from([b"", UNKNOWN_FIELDS]))
def test_c_and_python_decoders_agree_on_random_requests(
    case: tuple[ExportTraceServiceRequest, ExtractSpec], suffix: bytes
) -> None:
    request, spec = case
    data = request.SerializeToString() + suffix
    plain = decode_traces_python(data)
    assert_same(decode_traces(data, use_c=True), plain)
    extracted = decode_traces_python(data, extract=spec)
    assert_same(decode_traces(data, use_c=True, extract=spec), extracted)
    assert_extraction(request, spec, plain, extracted)
    window = SpanWindow(T0 + 10**12, 60)  # T0-based spans straddle its end
    assert_same(
        decode_traces(data, use_c=True, extract=spec, window=window),
        decode_traces_python(data, extract=spec, window=window),
    )


def outcome(data: bytes, use_c: bool, extract: ExtractSpec | None = None) -> DecodedTraces | str:
    try:
        return decode_traces(data, use_c=use_c, extract=extract)
    except OtlpDecodeError as exc:
        return f"error: {exc}"


# Keys of the fuzz seeds, of kinds that match some of their values and not others.
FUZZ_SPEC = make_extract_spec(
    [
        ("str", "str"),
        ("int", "int"),
        ("dbl", "float"),
        ("bool_t", "bool"),
        ("bytes", "str"),
        ("array", "str"),
        ("kvlist", "int"),
        ("unset", "str"),
        ("v", "str"),
        ("gen_ai.request.id", "str"),
        ("gen_ai.usage.prompt_tokens", "int"),
        ("gen_ai.latency.e2e", "float"),
        ("gen_ai.request.max_tokens", "float"),
        ("inferledger.route", "bool"),
    ]
)


def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    choice = rng.randrange(6)
    if not buf or choice == 0:
        return bytes(buf[: rng.randrange(len(buf) + 1)])  # truncation
    pos = rng.randrange(len(buf))
    if choice == 1:
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)  # bit flips
    elif choice == 2:
        buf[pos] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)])  # a length
    elif choice == 3:
        buf[pos:pos] = rng.randbytes(rng.randint(1, 4))
    elif choice == 4:
        del buf[pos : pos + rng.randint(1, 8)]
    else:
        end = min(len(buf), pos + rng.randint(1, 40))
        buf[pos:pos] = buf[pos:end]  # duplicated fields: merges and last-wins
    return bytes(buf)


Field = tuple[int, int, bytes]  # field number, wire type, value as on the wire


def split_fields(data: bytes) -> list[Field] | None:
    """The fields of a message (groups not supported), or None when it does not parse."""
    fields: list[Field] = []
    pos = 0

    def read_varint() -> int:
        nonlocal pos
        value = shift = 0
        while pos < len(data) and shift < 64:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value
        raise ValueError("bad varint")

    try:
        while pos < len(data):
            key = read_varint()
            number, wire_type = key >> 3, key & 7
            start = pos
            if wire_type == 0:
                read_varint()
            elif wire_type in (1, 5):
                pos += 8 if wire_type == 1 else 4
            elif wire_type == 2:
                length = read_varint()
                pos += length
            else:
                return None
            if number == 0 or pos > len(data):
                return None
            fields.append((number, wire_type, data[start:pos]))
    except ValueError:
        return None
    return fields


def join_fields(fields: list[Field]) -> bytes:
    return b"".join(tag(number, wire_type) + value for number, wire_type, value in fields)


def payload_of(value: bytes) -> bytes:
    """The payload of a length-delimited value (its length prefix removed)."""
    prefix = 1
    while value[prefix - 1] & 0x80:
        prefix += 1
    return value[prefix:]


def mutate_fields(data: bytes, rng: random.Random, depth: int = 0) -> bytes:
    """A structure-aware mutation: duplicate, drop, swap, renumber or rewrite one field of this
    message or, recursively, of a nested one, keeping every length consistent. It exercises
    last-wins, merging, oneof replacement and wire-type mismatches on realistic requests."""
    fields = split_fields(data)
    if not fields:
        return data
    i = rng.randrange(len(fields))
    number, wire_type, value = fields[i]
    payload = payload_of(value) if wire_type == 2 else b""
    if payload and depth < 8 and rng.random() < 0.75 and split_fields(payload):
        payload = mutate_fields(payload, rng, depth + 1)
        fields[i] = (number, 2, varint(len(payload)) + payload)
        return join_fields(fields)
    op = rng.randrange(5)
    if op == 0:
        fields.insert(rng.randrange(len(fields) + 1), fields[i])
    elif op == 1:
        del fields[i]
    elif op == 2:
        j = rng.randrange(len(fields))
        fields[i], fields[j] = fields[j], fields[i]
    elif op == 3:
        fields[i] = (rng.randint(1, 17), wire_type, value)
    elif wire_type == 0:
        fields[i] = (number, 0, varint(rng.choice([0, 1, 2, 2**31, 2**32 + 3, 2**63, 2**64 - 1])))
    elif payload:
        buf = bytearray(payload)
        buf[rng.randrange(len(buf))] = rng.choice([0x00, 0x22, 0x5C, 0x80, 0xC3, 0xFF])
        fields[i] = (number, 2, varint(len(buf)) + bytes(buf))
    return join_fields(fields)


def fuzz_seeds() -> list[bytes]:
    deep = make_span(attributes=[kv("v", nested_array(31)), kv("w", nested_kvlist(6))])
    return [
        rich_request().SerializeToString(),
        make_export_request(6, seed=3).SerializeToString(),
        request_of(deep),
    ]


def test_shared_fixture_requests_decode_alike() -> None:
    decoded = decode_both(make_export_request(300, seed=11).SerializeToString())
    assert (decoded.spans.num_rows, decoded.rejected_spans) == (300, 0)


def test_fuzzed_payloads_only_decode_or_raise_decode_error() -> None:
    rng = random.Random(2024)
    cases = [rng.randbytes(rng.randint(0, 64)) for _ in range(1000)]
    for seed in fuzz_seeds():
        cases += [mutate(seed, rng) for _ in range(600)]
        cases += [mutate_fields(seed, rng) for _ in range(600)]
    disagreements = []
    for data in cases:
        for extract in (None, FUZZ_SPEC):
            reference = outcome(data, use_c=False, extract=extract)
            if not otlp_decode.ACCELERATED:
                continue
            fast = outcome(data, use_c=True, extract=extract)
            if isinstance(reference, str) or isinstance(fast, str):
                if isinstance(reference, str) != isinstance(fast, str):
                    disagreements.append((data, extract, reference, fast))
                continue
            try:
                assert_same(fast, reference)
            except AssertionError:
                disagreements.append((data, extract, "tables differ", ""))
    assert not disagreements[:3]


# --- a real exporter --------------------------------------------------------------------------


def test_request_from_the_opentelemetry_sdk_encoder() -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource as SdkResource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=SdkResource.create({"service.name": "vllm"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("vllm.tracing", "0.33")
    with tracer.start_as_current_span("parent") as parent:
        pass
    with tracer.start_as_current_span(
        "llm_request",
        kind=SpanKind.SERVER,
        links=[Link(parent.get_span_context(), {"why": "retry"})],
        attributes={
            "gen_ai.usage.prompt_tokens": 12,
            "gen_ai.latency.e2e": 0.125,
            "gen_ai.response.finish_reasons": ["stop", "length"],
            "stream": True,
        },
    ) as span:
        span.add_event("first_token", {"index": 0})
        span.set_status(Status(StatusCode.ERROR, "overloaded"))
    provider.shutdown()
    data = encode_spans(exporter.get_finished_spans()).SerializeToString()

    decoded = decode_both(data)
    assert decoded.rejected_spans == 0
    row = decoded.spans.to_pylist()[1]
    assert row["name"] == "llm_request" and row["kind"] == 2
    assert row["span_id"] == format(span.get_span_context().span_id, "016x")
    assert dict(row["attributes"]) == {
        "gen_ai.usage.prompt_tokens": "12",
        "gen_ai.latency.e2e": "0.125",
        "gen_ai.response.finish_reasons": '["stop","length"]',
        "stream": "true",
    }
    assert (row["status_code"], row["status_message"]) == (2, "overloaded")
    assert json.loads(row["events"])[0]["attributes"] == {"index": "0"}
    parent_id = format(parent.get_span_context().span_id, "016x")
    assert json.loads(row["links"])[0]["span_id"] == parent_id
    resource = dict(decoded.resources.column("resource_attributes")[0].as_py())
    assert resource["service.name"] == "vllm"
    assert decoded.scopes.column("scope_name").to_pylist() == ["vllm.tracing"]


# --- which decoder ----------------------------------------------------------------------------


@NEEDS_C
def test_concurrent_decodes_agree_including_doubles_python_formats() -> None:
    # The C decoder releases the GIL and takes it back for doubles outside its fast formatter
    # (here 1e-20 and 1e300); decodes running side by side must not disturb each other.
    from concurrent.futures import ThreadPoolExecutor

    def payload(i: int) -> bytes:
        doubles = [1e-20 * (i + 1), 1e300, 0.1 * i, -2.5e-9]
        attributes = [kv(f"d{k}", AnyValue(double_value=x)) for k, x in enumerate(doubles)]
        return request_of(*[make_span(f"s{j}", attributes=attributes) for j in range(50)])

    payloads = [payload(i) for i in range(8)]
    expected = [decode_traces_python(p).spans for p in payloads]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda p: decode_traces(p, use_c=True).spans, payloads * 4))
    for k, table in enumerate(results):
        assert table.equals(expected[k % len(payloads)])


def test_use_c_without_the_extension_says_how_to_build_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otlp_decode, "_otlp_fast", None)
    with pytest.raises(RuntimeError, match="build_ext --inplace"):
        decode_traces(b"", use_c=True)
    assert decode_traces(b"", use_c=False).total_spans == 0


def test_default_decoder_is_c_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(
        otlp_decode, "decode_traces_python", lambda data, extract=None: calls.append(data)
    )
    decode_traces(b"")
    assert calls == ([] if otlp_decode.ACCELERATED else [b""])
