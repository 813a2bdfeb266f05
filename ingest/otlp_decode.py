"""OTLP trace decoding: a serialized ExportTraceServiceRequest becomes three pyarrow tables.

Two decoders produce identical tables (tests/test_otlp_decode.py checks it differentially):

- the C extension ``ingest._otlp_fast`` walks the protobuf wire format and fills Arrow buffers
  directly, with no per-attribute Python work (the hot path of ingest);
- ``decode_traces_python`` parses with upb and loops in Python: the fallback when the extension
  is not built, and the oracle for the tests.

Attribute values become text in a ``map<string, string>``: strings as is, bools ``true``/``false``,
ints in decimal, doubles as ``repr(float)``, bytes as standard base64, arrays and kvlists as
compact JSON. The first occurrence of a duplicate key wins (DuckDB maps reject duplicate keys).
``string_value_strindex`` indexes a string table that only OTLP profiles carry, so in traces it
reads as a value that is not set (NULL).

An ``ExtractSpec`` lifts known span attribute keys into columns of their own (``"a:" + key``,
the same text the map would hold) and takes them out of the map when the value has the expected
protobuf type, so that storage neither keeps them twice nor looks them up by list position.

Invalid spans are rejected one by one (counted, the first ten reasons kept); input that is not a
well-formed request raises ``OtlpDecodeError``. With a ``SpanWindow`` (ingest passes one, see
ingest/span_writer.py), spans that start before 2000-01-01 or end more than a day after receipt
are rejected too: a span near 2^63-1 ns overflowed every refresh of its hour (issue #17).
Wire-format rules follow upb, which the reference decoder parses with, so both decoders accept
and reject the same bytes. An OTLP/JSON body reaches here as protobuf bytes, converted first by
ingest/otlp_json.py, which imports OtlpDecodeError from this module (never the reverse).
"""

from __future__ import annotations

import base64
import functools
import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import pyarrow as pa
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from inferledger.core.errors import BadInputError

__all__ = [
    "ACCELERATED",
    "ATTRIBUTES_TYPE",
    "RESOURCE_SCHEMA",
    "SCOPE_SCHEMA",
    "SPAN_SCHEMA",
    "DecodedTraces",
    "ExtractKind",
    "ExtractSpec",
    "OtlpDecodeError",
    "SpanWindow",
    "decode_traces",
    "decode_traces_python",
    "make_extract_spec",
]

# The layout of the dict that ingest/_otlp_fast.c returns; must equal its ABI_VERSION.
_C_ABI_VERSION = 3

try:
    from ingest import _otlp_fast
except ImportError:  # not built (no compiler at install time): the Python decoder serves
    _otlp_fast = None
if _otlp_fast is not None and getattr(_otlp_fast, "ABI_VERSION", None) != _C_ABI_VERSION:
    # A stale build left in the source tree by an older editable install: never misread it.
    _otlp_fast = None

ACCELERATED: bool = _otlp_fast is not None

MAX_ATTRIBUTE_DEPTH = 32  # nested AnyValue levels; an attribute's own value is level 1
MAX_ERRORS = 10
_INT64_MAX = 2**63 - 1
_ZERO_SPAN_ID = bytes(8)

#: Stored spans start on or after 2000-01-01T00:00:00Z (_otlp_fast.c MIN_SPAN_NS): earlier
#: times are a missing or mis-scaled clock (seconds or microseconds sent as nanoseconds).
MIN_SPAN_NS = 946_684_800 * 1_000_000_000
#: ... and end at most this long after they are received: clock skew and batching, never more.
#: Later times are a broken clock, and near 2^63-1 ns they overflowed the ledger's hour maths.
MAX_SPAN_FUTURE_S = 86_400


@dataclass(frozen=True)
class SpanWindow:
    """The times a span may have to be stored: ``MIN_SPAN_NS <= start`` and
    ``end <= received_ns + future_s`` seconds; spans outside are rejected one by one."""

    received_ns: int
    future_s: int = MAX_SPAN_FUTURE_S

    @classmethod
    def at_receipt(cls, future_s: int = MAX_SPAN_FUTURE_S) -> SpanWindow:
        """The window for a request received now."""
        return cls(time.time_ns(), future_s)

    @functools.cached_property  # read once per span by the Python decoder
    def max_end_ns(self) -> int:
        return max(0, min(self.received_ns + self.future_s * 1_000_000_000, _INT64_MAX))


ATTRIBUTES_TYPE = pa.map_(pa.string(), pa.string())

SPAN_SCHEMA = pa.schema(
    [
        pa.field("trace_id", pa.string(), nullable=False),
        pa.field("span_id", pa.string(), nullable=False),
        pa.field("parent_span_id", pa.string()),
        pa.field("trace_state", pa.string()),
        pa.field("flags", pa.int64(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("kind", pa.int32(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("end_ns", pa.int64(), nullable=False),
        pa.field("status_code", pa.int32(), nullable=False),
        pa.field("status_message", pa.string()),
        pa.field("attributes", ATTRIBUTES_TYPE, nullable=False),
        pa.field("dropped_attributes_count", pa.int64(), nullable=False),
        pa.field("dropped_events_count", pa.int64(), nullable=False),
        pa.field("dropped_links_count", pa.int64(), nullable=False),
        pa.field("events", pa.string()),
        pa.field("links", pa.string()),
        pa.field("resource_index", pa.int32(), nullable=False),
        pa.field("scope_index", pa.int32(), nullable=False),
    ]
)

SCOPE_SCHEMA = pa.schema(
    [
        pa.field("scope_index", pa.int32(), nullable=False),
        pa.field("resource_index", pa.int32(), nullable=False),
        pa.field("scope_name", pa.string(), nullable=False),
        pa.field("scope_version", pa.string(), nullable=False),
        pa.field("scope_attributes", ATTRIBUTES_TYPE, nullable=False),
    ]
)

RESOURCE_SCHEMA = pa.schema(
    [
        pa.field("resource_index", pa.int32(), nullable=False),
        pa.field("resource_attributes", ATTRIBUTES_TYPE, nullable=False),
        pa.field("resource_schema_url", pa.string(), nullable=False),
    ]
)


class OtlpDecodeError(BadInputError):
    """The request is not a well-formed OTLP trace export; ``str(exc)`` is one user-facing line."""


# --- attribute extraction ---------------------------------------------------------------------

ExtractKind = Literal["str", "int", "float", "bool"]
EXTRACT_COLUMN_PREFIX = "a:"
MAX_EXTRACT_KEYS = 256  # _otlp_fast.c MAX_EXTRACT
# The AnyValue members whose value takes an extracted key out of the attributes map. Any other
# type leaves it there too, so that nothing is lost when the typed column's cast fails.
_ACCEPTED: dict[str, frozenset[str]] = {
    "str": frozenset({"string_value"}),
    "int": frozenset({"int_value"}),
    "float": frozenset({"double_value", "int_value"}),
    "bool": frozenset({"bool_value"}),
}


@dataclass(frozen=True)
class ExtractSpec:
    """Span attribute keys to extract, in column order: ``((key, kind), ...)``.

    Validated once, here; the derived fields (the spans schema, the lookup used by the Python
    decoder, the C decoder's compiled form) are built once too, so a decode pays nothing for
    them. Equality and hashing look at ``pairs`` only.
    """

    pairs: tuple[tuple[str, ExtractKind], ...]
    span_schema: pa.Schema = field(init=False, repr=False, compare=False)
    _positions: dict[str, tuple[int, frozenset[str]]] = field(init=False, repr=False, compare=False)
    _compiled: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _validate_pairs(self.pairs)
        columns = [pa.field(EXTRACT_COLUMN_PREFIX + key, pa.string()) for key, _ in self.pairs]
        positions = {key: (i, _ACCEPTED[kind]) for i, (key, kind) in enumerate(self.pairs)}
        compiled = None if _otlp_fast is None else _otlp_fast.Extract(self.pairs)
        # The dataclass is frozen; these are derived caches, set once before anyone sees them.
        object.__setattr__(self, "span_schema", pa.schema([*SPAN_SCHEMA, *columns]))
        object.__setattr__(self, "_positions", positions)
        object.__setattr__(self, "_compiled", compiled)

    def __reduce__(self) -> tuple[type[ExtractSpec], tuple[Any, ...]]:
        # Pickle and copy by the pairs: the compiled C object cannot be pickled, and is rebuilt.
        return (ExtractSpec, (self.pairs,))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(key for key, _ in self.pairs)

    @property
    def columns(self) -> tuple[str, ...]:
        """The names of the extracted columns of the spans table, in order."""
        return tuple(EXTRACT_COLUMN_PREFIX + key for key, _ in self.pairs)


def _validate_pairs(pairs: object) -> None:
    if not isinstance(pairs, tuple):
        raise ValueError(
            f"extract spec must be a tuple of (key, kind) pairs, got {type(pairs).__name__}"
        )
    if len(pairs) > MAX_EXTRACT_KEYS:
        raise ValueError(f"extract spec has {len(pairs)} keys; at most {MAX_EXTRACT_KEYS}")
    kinds = get_args(ExtractKind)
    seen: set[str] = set()
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise ValueError(f"extract spec entry {pair!r} is not a (key, kind) tuple")
        key, kind = pair
        if not isinstance(key, str) or not key:
            raise ValueError(f"extract key must be a non-empty string, got {key!r}")
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"extract key {key!r} is not valid UTF-8") from None
        if kind not in kinds:
            raise ValueError(
                f"extract kind for {key!r} must be one of {', '.join(kinds)}; got {kind!r}"
            )
        if key in seen:
            raise ValueError(f"extract key {key!r} appears twice")
        seen.add(key)


def make_extract_spec(pairs: Iterable[tuple[str, str]]) -> ExtractSpec:
    """An ExtractSpec from (key, kind) tuples, e.g. ``make_extract_spec(d.items())``."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise ValueError(
            f"extract spec must be an iterable of (key, kind) tuples, got {type(pairs).__name__}"
        )
    return ExtractSpec(tuple(pairs))  # type: ignore[arg-type]  # _validate_pairs checks kinds


def _check_extract(extract: object) -> None:
    if extract is not None and not isinstance(extract, ExtractSpec):
        raise ValueError(
            f"extract must be an ExtractSpec (see make_extract_spec), got {type(extract).__name__}"
        )


@dataclass(frozen=True)
class DecodedTraces:
    spans: pa.Table  # valid spans only: SPAN_SCHEMA, or the ExtractSpec's span_schema
    scopes: pa.Table  # SCOPE_SCHEMA, one row per scope_spans in request order
    resources: pa.Table  # RESOURCE_SCHEMA, one row per resource_spans in request order
    total_spans: int
    rejected_spans: int
    errors: tuple[str, ...]  # the first MAX_ERRORS rejection messages


def decode_traces(
    data: bytes,
    *,
    use_c: bool | None = None,
    extract: ExtractSpec | None = None,
    window: SpanWindow | None = None,
) -> DecodedTraces:
    """Decode a serialized ExportTraceServiceRequest; ``use_c=None`` picks C when it is built.

    With ``extract``, the spans table gains the spec's columns (see ExtractSpec); with
    ``window``, spans outside it are rejected (see SpanWindow)."""
    _check_extract(extract)
    if use_c is None:
        use_c = ACCELERATED
    if not use_c:
        return decode_traces_python(data, extract=extract, window=window)
    if _otlp_fast is None:
        raise RuntimeError(
            "the C decoder ingest._otlp_fast is not built (or is stale); build it with "
            "`pip install --no-deps -e .` or `python setup.py build_ext --inplace`"
        )
    span_schema = SPAN_SCHEMA
    compiled = None
    if extract is not None:
        span_schema = extract.span_schema
        compiled = extract._compiled
        if compiled is None:  # the spec was built while the extension was unavailable (tests)
            compiled = _otlp_fast.Extract(extract.pairs)
    try:
        if window is None:
            raw = _otlp_fast.decode(data, compiled)
        else:
            raw = _otlp_fast.decode(data, compiled, window.max_end_ns, window.future_s)
    except _otlp_fast.DecodeError as exc:
        raise OtlpDecodeError(str(exc)) from None
    n_spans = raw["n_spans"]
    span_arrays = _arrays_from_buffers(SPAN_SCHEMA, n_spans, raw["spans"])
    # The extracted columns, in spec order (an empty tuple without a spec).
    span_arrays += [_string_array(n_spans, parts) for parts in raw["spans"]["extracted"]]
    return DecodedTraces(
        spans=pa.Table.from_arrays(span_arrays, schema=span_schema),
        scopes=_table_from_buffers(SCOPE_SCHEMA, raw["n_scopes"], raw["scopes"]),
        resources=_table_from_buffers(RESOURCE_SCHEMA, raw["n_resources"], raw["resources"]),
        total_spans=raw["total_spans"],
        rejected_spans=raw["rejected_spans"],
        errors=tuple(raw["errors"]),
    )


# --- C buffers -> Arrow, zero copy ------------------------------------------------------------
# The C decoder hands over the memory it built each column in (read-only objects supporting the
# buffer protocol; bytes would cost one more copy of everything). String columns come as
# (validity or None, int32 offsets, data, null count); map columns as (int32 offsets, key parts,
# value parts, entry count); fixed-width columns as one buffer. The spans dict also holds
# "extracted": the string parts of each ExtractSpec column, in spec order.


def _string_array(length: int, parts: tuple[Any, Any, Any, int]) -> pa.Array:
    validity, offsets, data, null_count = parts
    buffers = [
        None if validity is None else pa.py_buffer(validity),
        pa.py_buffer(offsets),
        pa.py_buffer(data),
    ]
    return pa.Array.from_buffers(pa.string(), length, buffers, null_count=null_count)


def _column(field: pa.Field, length: int, parts: Any) -> pa.Array:
    if pa.types.is_string(field.type):
        return _string_array(length, parts)
    if pa.types.is_map(field.type):
        offsets, keys, values, entries = parts
        return pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), length + 1, [None, pa.py_buffer(offsets)]),
            _string_array(entries, keys),
            _string_array(entries, values),
            type=field.type,
        )
    return pa.Array.from_buffers(field.type, length, [None, pa.py_buffer(parts)], null_count=0)


def _arrays_from_buffers(schema: pa.Schema, length: int, columns: dict[str, Any]) -> list[pa.Array]:
    return [_column(f, length, columns[f.name]) for f in schema]


def _table_from_buffers(schema: pa.Schema, length: int, columns: dict[str, Any]) -> pa.Table:
    return pa.Table.from_arrays(_arrays_from_buffers(schema, length, columns), schema=schema)


# --- the reference decoder --------------------------------------------------------------------


def decode_traces_python(
    data: bytes, *, extract: ExtractSpec | None = None, window: SpanWindow | None = None
) -> DecodedTraces:
    """Decode with upb and Python loops; the fallback, and the oracle the C decoder must match."""
    _check_extract(extract)
    span_schema = SPAN_SCHEMA if extract is None else extract.span_schema
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(data)
    except DecodeError as exc:
        # upb says e.g. "Error parsing message with type '...': Wire format was corrupt".
        reason = str(exc).rsplit(": ", 1)[-1]
        raise OtlpDecodeError(f"malformed OTLP protobuf: {reason}") from None

    spans: dict[str, list[Any]] = {f.name: [] for f in span_schema}
    scopes: dict[str, list[Any]] = {f.name: [] for f in SCOPE_SCHEMA}
    resources: dict[str, list[Any]] = {f.name: [] for f in RESOURCE_SCHEMA}
    total = rejected = 0
    errors: list[str] = []
    for r_pos, resource_spans in enumerate(request.resource_spans):
        resource_index = len(resources["resource_index"])
        resources["resource_index"].append(resource_index)
        resources["resource_attributes"].append(
            _attribute_pairs(resource_spans.resource.attributes)
        )
        resources["resource_schema_url"].append(resource_spans.schema_url)
        for s_pos, scope_spans in enumerate(resource_spans.scope_spans):
            scope_index = len(scopes["scope_index"])
            scope = scope_spans.scope
            scopes["scope_index"].append(scope_index)
            scopes["resource_index"].append(resource_index)
            scopes["scope_name"].append(scope.name)
            scopes["scope_version"].append(scope.version)
            scopes["scope_attributes"].append(_attribute_pairs(scope.attributes))
            for i_pos, span in enumerate(scope_spans.spans):
                total += 1
                reason = _span_rejection(span, window)
                if reason is not None:
                    rejected += 1
                    if len(errors) < MAX_ERRORS:
                        errors.append(
                            f"resource_spans[{r_pos}].scope_spans[{s_pos}].spans[{i_pos}]: {reason}"
                        )
                    continue
                _append_span(spans, span, resource_index, scope_index, extract)
    return DecodedTraces(
        spans=_table_from_lists(span_schema, spans),
        scopes=_table_from_lists(SCOPE_SCHEMA, scopes),
        resources=_table_from_lists(RESOURCE_SCHEMA, resources),
        total_spans=total,
        rejected_spans=rejected,
        errors=tuple(errors),
    )


def _table_from_lists(schema: pa.Schema, columns: dict[str, list[Any]]) -> pa.Table:
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _span_rejection(span: Span, window: SpanWindow | None = None) -> str | None:
    """Why a span cannot be stored, or None. Same rules, order and words as _otlp_fast.c."""
    if len(span.trace_id) != 16:
        return f"trace_id must be 16 bytes, got {len(span.trace_id)}"
    if not any(span.trace_id):
        return "trace_id must not be all zeros"
    if len(span.span_id) != 8:
        return f"span_id must be 8 bytes, got {len(span.span_id)}"
    if not any(span.span_id):
        return "span_id must not be all zeros"
    if len(span.parent_span_id) not in (0, 8):
        return f"parent_span_id must be 0 or 8 bytes, got {len(span.parent_span_id)}"
    if not span.name:
        return "name is required"
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if start == 0:
        return "start_time_unix_nano is required"
    if start > _INT64_MAX:
        return "start_time_unix_nano is out of range (> 2^63-1)"
    if end < start:
        return "end_time_unix_nano is before start_time_unix_nano"
    if end > _INT64_MAX:
        return "end_time_unix_nano is out of range (> 2^63-1)"
    if window is not None:
        if start < MIN_SPAN_NS:
            return "start_time_unix_nano is before 2000-01-01T00:00:00Z"
        if end > window.max_end_ns:
            return f"end_time_unix_nano is more than {window.future_s} s after receipt"
    for k, event in enumerate(span.events):
        if event.time_unix_nano > _INT64_MAX:
            return f"events[{k}].time_unix_nano is out of range (> 2^63-1)"
    return None


def _append_span(
    columns: dict[str, list[Any]],
    span: Span,
    resource: int,
    scope: int,
    extract: ExtractSpec | None,
) -> None:
    parent = span.parent_span_id
    columns["trace_id"].append(span.trace_id.hex())
    columns["span_id"].append(span.span_id.hex())
    columns["parent_span_id"].append(parent.hex() if parent and parent != _ZERO_SPAN_ID else None)
    columns["trace_state"].append(span.trace_state or None)
    columns["flags"].append(span.flags)
    columns["name"].append(span.name)
    columns["kind"].append(span.kind)
    columns["start_ns"].append(span.start_time_unix_nano)
    columns["end_ns"].append(span.end_time_unix_nano)
    columns["status_code"].append(span.status.code)
    columns["status_message"].append(span.status.message or None)
    if extract is None:
        columns["attributes"].append(_attribute_pairs(span.attributes))
    else:
        pairs, texts = _extract_attributes(span.attributes, extract)
        columns["attributes"].append(pairs)
        for name, text in zip(extract.columns, texts, strict=True):
            columns[name].append(text)
    columns["dropped_attributes_count"].append(span.dropped_attributes_count)
    columns["dropped_events_count"].append(span.dropped_events_count)
    columns["dropped_links_count"].append(span.dropped_links_count)
    columns["events"].append(_events_json(span) if span.events else None)
    columns["links"].append(_links_json(span) if span.links else None)
    columns["resource_index"].append(resource)
    columns["scope_index"].append(scope)


def _events_json(span: Span) -> str:
    return _dumps(
        [
            {
                "time_unix_nano": event.time_unix_nano,
                "name": event.name,
                "attributes": dict(_attribute_pairs(event.attributes)),
                "dropped_attributes_count": event.dropped_attributes_count,
            }
            for event in span.events
        ]
    )


def _links_json(span: Span) -> str:
    return _dumps(
        [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "trace_state": link.trace_state,
                "attributes": dict(_attribute_pairs(link.attributes)),
                "dropped_attributes_count": link.dropped_attributes_count,
                "flags": link.flags,
            }
            for link in span.links
        ]
    )


def _attribute_pairs(attributes: Any) -> list[tuple[str, str | None]]:
    """(key, text) per attribute in order; the first occurrence of a key wins."""
    seen: set[str] = set()
    pairs: list[tuple[str, str | None]] = []
    for kv in attributes:
        if kv.key in seen:
            continue
        seen.add(kv.key)
        pairs.append((kv.key, _value_text(kv.value)))
    return pairs


def _extract_attributes(
    attributes: Any, extract: ExtractSpec
) -> tuple[list[tuple[str, str | None]], list[str | None]]:
    """The map pairs less the extracted keys whose type the spec accepts, and the text of each
    extracted key (None when absent); the first occurrence of a key wins, as in the map."""
    seen: set[str] = set()
    pairs: list[tuple[str, str | None]] = []
    texts: list[str | None] = [None] * len(extract.pairs)
    positions = extract._positions
    for kv in attributes:
        if kv.key in seen:
            continue
        seen.add(kv.key)
        text = _value_text(kv.value)
        found = positions.get(kv.key)
        if found is not None:
            index, accepted = found
            texts[index] = text
            if kv.value.WhichOneof("value") in accepted:
                continue
        pairs.append((kv.key, text))
    return pairs, texts


def _value_text(value: AnyValue) -> str | None:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "int_value":
        return str(value.int_value)
    if kind == "double_value":
        return repr(value.double_value)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind in ("array_value", "kvlist_value"):
        return _dumps(_json_value(value, 1))
    return None  # not set, or string_value_strindex (a profiles-only string table)


def _json_value(value: AnyValue, depth: int) -> Any:
    if depth > MAX_ATTRIBUTE_DEPTH:
        raise OtlpDecodeError(f"attribute value nested deeper than {MAX_ATTRIBUTE_DEPTH} levels")
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        number = value.double_value
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
        return number
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind == "array_value":
        return [_json_value(item, depth + 1) for item in value.array_value.values]
    if kind == "kvlist_value":
        obj: dict[str, Any] = {}
        kv: KeyValue
        for kv in value.kvlist_value.values:
            if kv.key not in obj:
                obj[kv.key] = _json_value(kv.value, depth + 1)
        return obj
    return None


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
