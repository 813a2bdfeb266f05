"""Extracting known span attribute keys into columns of their own (ExtractSpec): which values leave
the attributes map, what the columns hold, and which specs are refused. Both decoders run every
case; the random differential and fuzz runs are in tests/test_otlp_decode.py."""

from __future__ import annotations

import copy
import json
import math
import pickle

import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from ingest import otlp_decode
from ingest.otlp_decode import (
    SPAN_SCHEMA,
    DecodedTraces,
    ExtractSpec,
    decode_traces,
    decode_traces_python,
    make_extract_spec,
)
from tests.test_otlp_decode import (
    DECODERS,
    NEEDS_C,
    arr,
    assert_same,
    kv,
    kvl,
    ld,
    make_span,
    request_of,
    rich_request,
    s,
    span_bytes,
    tag,
    wrap_spans,
)


def decode_both(data: bytes, spec: ExtractSpec) -> DecodedTraces:
    """Decode with the reference and, when built, with C; assert they agree; return one."""
    expected = decode_traces_python(data, extract=spec)
    if otlp_decode.ACCELERATED:
        assert_same(decode_traces(data, use_c=True, extract=spec), expected)
    return expected


def row_of(decoded: DecodedTraces, row: int = 0) -> dict[str, object]:
    return decoded.spans.slice(row, 1).to_pylist()[0]


INT = AnyValue(int_value=-42)
DOUBLE = AnyValue(double_value=0.25)
BOOL = AnyValue(bool_value=True)
STRING = s("12")
BYTES = AnyValue(bytes_value=b"\x01\x02")
ARRAY = arr(s("stop"), s("length"))
KVLIST = kvl(kv("a", INT))
UNSET = AnyValue()
STRINDEX = AnyValue(string_value_strindex=2)
TEXT = {
    "int": "-42",
    "double": "0.25",
    "bool": "true",
    "string": "12",
    "bytes": "AQI=",
    "array": '["stop","length"]',
    "kvlist": '{"a":-42}',
    "unset": None,
    "strindex": None,
}
VALUES = {
    "int": INT,
    "double": DOUBLE,
    "bool": BOOL,
    "string": STRING,
    "bytes": BYTES,
    "array": ARRAY,
    "kvlist": KVLIST,
    "unset": UNSET,
    "strindex": STRINDEX,
}
# (kind, value types that take the key out of the map)
MATCHES = {
    "str": {"string"},
    "int": {"int"},
    "float": {"double", "int"},
    "bool": {"bool"},
}
CASES = [
    (kind, value_type, value_type in matched)
    for kind, matched in MATCHES.items()
    for value_type in VALUES
]


@pytest.mark.parametrize("use_c", DECODERS)
@pytest.mark.parametrize(
    ("kind", "value_type", "removed"),
    CASES,
    ids=[f"{k}<-{v}:{'out' if r else 'kept'}" for k, v, r in CASES],
)
def test_value_leaves_the_map_only_when_its_type_matches_the_kind(
    use_c: bool, kind: str, value_type: str, removed: bool
) -> None:
    spec = make_extract_spec([("x", kind)])
    data = request_of(make_span(attributes=[kv("a", s("1")), kv("x", VALUES[value_type])]))
    row = row_of(decode_traces(data, use_c=use_c, extract=spec))
    assert row["a:x"] == TEXT[value_type]
    kept = [("a", "1")] if removed else [("a", "1"), ("x", TEXT[value_type])]
    assert row["attributes"] == kept


@pytest.mark.parametrize("use_c", DECODERS)
def test_a_key_without_a_value_stays_in_the_map_and_reads_null(use_c: bool) -> None:
    spec = make_extract_spec([("x", "str"), ("missing", "int")])
    row = row_of(
        decode_traces(request_of(make_span(attributes=[kv("x")])), use_c=use_c, extract=spec)
    )
    assert (row["a:x"], row["a:missing"], row["attributes"]) == (None, None, [("x", None)])


@pytest.mark.parametrize("use_c", DECODERS)
def test_the_first_occurrence_decides_and_later_duplicates_are_dropped(use_c: bool) -> None:
    spec = make_extract_spec([("m", "int"), ("k", "int"), ("late", "str")])
    span = make_span(
        attributes=[
            kv("m", s("first is a string")),  # mismatch: kept, and the int below is dropped
            kv("k", AnyValue(int_value=5)),  # match: out of the map
            kv("m", AnyValue(int_value=1)),
            kv("k", s("dropped")),
            kv("other", s("o")),
            kv("late", s("v1")),
            kv("late", s("v2")),
        ]
    )
    row = row_of(decode_both(request_of(span), spec))
    assert (row["a:m"], row["a:k"], row["a:late"]) == ("first is a string", "5", "v1")
    assert row["attributes"] == [("m", "first is a string"), ("other", "o")]


@pytest.mark.parametrize("use_c", DECODERS)
def test_columns_follow_the_spec_order_after_the_existing_columns(use_c: bool) -> None:
    spec = make_extract_spec([("z", "str"), ("a", "int"), ("gen_ai.request.model", "str")])
    decoded = decode_traces(request_of(make_span()), use_c=use_c, extract=spec)
    expected = [*SPAN_SCHEMA.names, "a:z", "a:a", "a:gen_ai.request.model"]
    assert decoded.spans.column_names == expected
    assert decoded.spans.schema.equals(spec.span_schema)
    assert all(decoded.spans.schema.field(name).type == pa.string() for name in spec.columns)


@pytest.mark.parametrize("use_c", DECODERS)
def test_only_span_attributes_are_extracted(use_c: bool) -> None:
    same = [kv("k", s("v"))]
    span = make_span(
        attributes=[kv("k", s("span"))],
        events=[Span.Event(name="e", attributes=same)],
        links=[Span.Link(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, attributes=same)],
    )
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=same),
                scope_spans=[
                    ScopeSpans(scope=InstrumentationScope(name="s", attributes=same), spans=[span])
                ],
            )
        ]
    )
    spec = make_extract_spec([("k", "str")])
    decoded = decode_both(request.SerializeToString(), spec)
    row = row_of(decoded)
    assert (row["a:k"], row["attributes"]) == ("span", [])
    assert json.loads(row["events"])[0]["attributes"] == {"k": "v"}
    assert json.loads(row["links"])[0]["attributes"] == {"k": "v"}
    assert decoded.scopes.column("scope_attributes").to_pylist() == [[("k", "v")]]
    assert decoded.resources.column("resource_attributes").to_pylist() == [[("k", "v")]]


@pytest.mark.parametrize("use_c", DECODERS)
def test_rejected_spans_contribute_nothing(use_c: bool) -> None:
    spec = make_extract_spec([("x", "str"), ("n", "int")])
    attributes = [kv("x", s("y")), kv("n", AnyValue(int_value=3))]
    data = request_of(
        make_span("before"),
        make_span("", attributes=attributes),  # rejected: name is required
        make_span("after", attributes=[kv("n", AnyValue(int_value=7))]),
    )
    decoded = decode_traces(data, use_c=use_c, extract=spec)
    assert (decoded.total_spans, decoded.rejected_spans) == (3, 1)
    table = decoded.spans.select(["name", "attributes", "a:x", "a:n"])
    assert table.to_pylist() == [
        {"name": "before", "attributes": [], "a:x": None, "a:n": None},
        {"name": "after", "attributes": [], "a:x": None, "a:n": "7"},
    ]
    decode_both(data, spec)


@pytest.mark.parametrize("use_c", DECODERS)
def test_rich_request_with_every_value_type(use_c: bool) -> None:
    spec = make_extract_spec(
        [
            ("str", "str"),
            ("bool_f", "bool"),
            ("int", "float"),
            ("dbl_small", "float"),
            ("nan", "float"),
            ("inf", "int"),
            ("bytes", "str"),
            ("array", "str"),
            ("kvlist", "str"),
            ("empty_str", "str"),
            ("strindex", "int"),
            ("absent", "bool"),
        ]
    )
    plain = decode_traces(rich_request().SerializeToString(), use_c=use_c)
    decoded = decode_traces(rich_request().SerializeToString(), use_c=use_c, extract=spec)
    held = dict(plain.spans.column("attributes")[0].as_py())
    row = row_of(decoded)
    for key, name in zip(spec.keys, spec.columns, strict=True):
        assert row[name] == held.get(key), key
    removed = {"str", "bool_f", "int", "dbl_small", "nan", "empty_str"}
    kept = [(k, v) for k, v in plain.spans.column("attributes")[0].as_py() if k not in removed]
    assert row["attributes"] == kept
    assert math.isnan(float(row["a:nan"]))
    assert row_of(decoded, 1)["a:str"] is None
    assert (
        decoded.spans.drop_columns(list(spec.columns))
        .drop_columns(["attributes"])
        .equals(plain.spans.drop_columns(["attributes"]))
    )
    decode_both(rich_request().SerializeToString(), spec)


@pytest.mark.parametrize("use_c", DECODERS)
def test_many_attributes_with_extracted_keys_among_them(use_c: bool) -> None:
    # Past 16 keys the C decoder dedups the rest through a hash set; spec keys never enter it.
    attributes = [kv(f"k{i % 150}", AnyValue(int_value=i)) for i in range(600)]
    attributes.insert(300, kv("k7", s("late duplicate")))
    spec = make_extract_spec([(f"k{i}", "int") for i in range(0, 150, 3)] + [("k1", "str")])
    row = row_of(decode_both(request_of(make_span(attributes=attributes)), spec))
    assert len(row["attributes"]) == 150 - 50
    assert ("k1", "1") in row["attributes"]
    assert (row["a:k0"], row["a:k147"], row["a:k1"]) == ("0", "147", "1")
    assert dict(row["attributes"])["k7"] == "7"


@pytest.mark.parametrize("use_c", DECODERS)
def test_non_canonical_encodings_follow_the_merged_value(use_c: bool) -> None:
    # KeyValue.value occurrences merge and the last oneof member wins: the type that decides is
    # the merged one, as upb sees it.
    span = span_bytes() + ld(
        9, ld(1, b"x") + ld(2, ld(1, b"was a string")) + ld(2, tag(3, 0) + b"\x05")
    )
    spec = make_extract_spec([("x", "int")])
    row = row_of(decode_traces(wrap_spans(span), use_c=use_c, extract=spec))
    assert (row["a:x"], row["attributes"]) == ("5", [])


@pytest.mark.parametrize("use_c", DECODERS)
def test_empty_request_and_empty_spec(use_c: bool) -> None:
    spec = make_extract_spec([("x", "str")])
    decoded = decode_traces(b"", use_c=use_c, extract=spec)
    assert decoded.spans.schema.equals(spec.span_schema)
    assert decoded.spans.num_rows == 0
    data = request_of(make_span(attributes=[kv("x", s("y"))]))
    empty = decode_traces(data, use_c=use_c, extract=make_extract_spec([]))
    assert empty.spans.equals(decode_traces(data, use_c=use_c).spans)


# --- the spec ---------------------------------------------------------------------------------


def test_spec_is_a_hashable_value() -> None:
    pairs = [("gen_ai.request.model", "str"), ("gen_ai.usage.input_tokens", "int")]
    spec = make_extract_spec(pairs)
    assert spec == ExtractSpec(tuple(pairs)) == make_extract_spec(dict(pairs).items())
    assert hash(spec) == hash(ExtractSpec(tuple(pairs)))
    assert {spec: 1}[make_extract_spec(pairs)] == 1
    assert spec.keys == ("gen_ai.request.model", "gen_ai.usage.input_tokens")
    assert spec.columns == ("a:gen_ai.request.model", "a:gen_ai.usage.input_tokens")
    assert spec != make_extract_spec(pairs[::-1])
    with pytest.raises(AttributeError):
        spec.pairs = ()  # type: ignore[misc]
    for clone in (pickle.loads(pickle.dumps(spec)), copy.deepcopy(spec)):
        assert clone == spec and clone.span_schema.equals(spec.span_schema)


INVALID_SPECS = [
    ([("x", "string")], "must be one of str, int, float, bool; got 'string'"),
    ([("x", "str"), ("y", "int"), ("x", "int")], "'x' appears twice"),
    ([("", "str")], "non-empty string"),
    ([(b"x", "str")], "non-empty string"),
    ([("\ud800", "str")], "not valid UTF-8"),
    ([["x", "str"]], "is not a (key, kind) tuple"),
    ([("x", "str", "extra")], "is not a (key, kind) tuple"),
    ("x:str", "got str"),
    (42, "got int"),
    ([(f"k{i}", "str") for i in range(257)], "at most 256"),
]


@pytest.mark.parametrize(("pairs", "message"), INVALID_SPECS)
def test_invalid_spec_raises_value_error(pairs: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        make_extract_spec(pairs)  # type: ignore[arg-type]
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_spec_pairs_must_be_a_tuple() -> None:
    with pytest.raises(ValueError, match=r"must be a tuple of \(key, kind\) pairs, got list"):
        ExtractSpec([("x", "str")])  # type: ignore[arg-type]


@pytest.mark.parametrize("use_c", DECODERS)
def test_extract_must_be_a_spec(use_c: bool) -> None:
    with pytest.raises(ValueError, match="extract must be an ExtractSpec"):
        decode_traces(b"", use_c=use_c, extract=(("x", "str"),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="extract must be an ExtractSpec"):
        decode_traces_python(b"", extract=[("x", "str")])  # type: ignore[arg-type]


@NEEDS_C
def test_c_compiles_a_spec_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest import _otlp_fast

    spec = make_extract_spec([("x", "str")])
    assert isinstance(spec._compiled, _otlp_fast.Extract)
    assert len(spec._compiled) == 1

    def refuse(pairs: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(_otlp_fast, "Extract", refuse)
    data = request_of(make_span(attributes=[kv("x", s("y"))]))
    assert decode_traces(data, use_c=True, extract=spec).spans.column("a:x").to_pylist() == ["y"]


@NEEDS_C
def test_c_extract_validates_on_its_own() -> None:
    from ingest import _otlp_fast

    for pairs, message in [
        ((("x", "str"), ("x", "int")), "duplicate extract key 'x'"),
        ((("x", "text"),), "unknown extract kind 'text'"),
        ((("", "str"),), "must not be empty"),
        ((["x", "str"],), r"must be a \(key: str, kind: str\) tuple"),
    ]:
        with pytest.raises(ValueError, match=message):
            _otlp_fast.Extract(pairs)
    with pytest.raises(TypeError):
        _otlp_fast.Extract([("x", "str")])
    with pytest.raises(TypeError, match="extract must be an Extract"):
        _otlp_fast.decode(b"", (("x", "str"),))
