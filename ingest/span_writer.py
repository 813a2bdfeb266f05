"""Writes decoded spans through the storage gateway's single writer.

The Python side hands DuckDB three Arrow tables and one statement (sql/ingest/insert_spans.sql);
the per-key work — typed columns, fallback chains, duplicate checks — runs in DuckDB's vectorized
engine, not per attribute in Python (the hot-path rule of the ingest benchmark).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import pyarrow as pa
import pyarrow.compute as pc

from inferledger.core.storage import Transaction
from ingest.otlp_decode import DecodedTraces, SpanWindow, decode_traces, make_extract_spec

# The span attributes the product reads (docs/attributes.md). The decoder returns each as a text
# column "a:<key>" and leaves it out of the attribute lists when its value has the expected type,
# so the typed columns need no per-row lookups and the lists stay short — together ~4 us per
# span less to insert and checkpoint (docs/benchmarks.md). Keys a fallback chain passes over
# are put back into the lists by sql/ingest/insert_spans.sql, so nothing is lost.
SPAN_EXTRACT = make_extract_spec(
    [
        ("gen_ai.operation.name", "str"),
        ("gen_ai.provider.name", "str"),
        ("gen_ai.system", "str"),
        ("gen_ai.request.model", "str"),
        ("gen_ai.response.model", "str"),
        ("gen_ai.request.id", "str"),
        ("gen_ai.response.id", "str"),
        ("gen_ai.usage.input_tokens", "int"),
        ("gen_ai.usage.prompt_tokens", "int"),
        ("gen_ai.usage.output_tokens", "int"),
        ("gen_ai.usage.completion_tokens", "int"),
        ("gen_ai.usage.cache_read.input_tokens", "int"),
        ("gen_ai.usage.cached_tokens", "int"),
        ("gen_ai.request.max_tokens", "int"),
        ("gen_ai.response.finish_reasons", "str"),
        ("gen_ai.latency.time_in_queue", "float"),
        ("gen_ai.latency.time_to_first_token", "float"),
        ("gen_ai.latency.time_in_model_prefill", "float"),
        ("gen_ai.latency.time_in_model_decode", "float"),
        ("gen_ai.latency.time_in_model_inference", "float"),
        ("gen_ai.latency.e2e", "float"),
        ("inferledger.app", "str"),
        ("inferledger.team", "str"),
        ("inferledger.route", "str"),
        ("http.route", "str"),
        ("inferledger.stage", "str"),
        ("inferledger.task.id", "str"),
        ("inferledger.workflow", "str"),
        ("inferledger.attempt", "int"),
        ("inferledger.fallback", "bool"),
        ("inferledger.outcome", "str"),
        ("inferledger.review.seconds", "float"),
        ("deployment.environment.name", "str"),
    ]
)


def decode_for_storage(data: bytes) -> DecodedTraces:
    """Decode an OTLP request body the way insert_spans expects it: spans outside the time
    window around now are rejected (a spool replay, later, is only more lenient)."""
    return decode_traces(data, extract=SPAN_EXTRACT, window=SpanWindow.at_receipt())


def _split_map(table: pa.Table, column: str, keys: str, values: str) -> pa.Table:
    """Replace a map column by parallel key and value list columns, zero-copy.

    DuckDB scans Arrow lists about 15x faster than Arrow maps and appends lists about 3x faster
    than maps (docs/benchmarks.md), so spans store lists and the views build maps on read.
    Chunk by chunk, never combined: a merged batch's attribute text can pass 2 GiB, where one
    combined string column would overflow its 32-bit offsets (issue #17).
    """
    idx = table.schema.get_field_index(column)
    maps = table.column(idx)
    map_type = maps.type
    key_lists = pa.chunked_array(
        [pa.ListArray.from_arrays(chunk.offsets, chunk.keys) for chunk in maps.chunks],
        type=pa.list_(map_type.key_type),
    )
    value_lists = pa.chunked_array(
        [pa.ListArray.from_arrays(chunk.offsets, chunk.items) for chunk in maps.chunks],
        type=pa.list_(map_type.item_type),
    )
    return (
        table.remove_column(idx).append_column(keys, key_lists).append_column(values, value_lists)
    )


def _shift(table: pa.Table, column: str, offset: int) -> pa.Table:
    if offset == 0:
        return table
    idx = table.schema.get_field_index(column)
    shifted = pc.add(table.column(idx), pa.scalar(offset, pa.int32()))
    return table.set_column(idx, table.schema.field(idx), shifted)  # keeps NOT NULL


def decoded_nbytes(decoded: DecodedTraces) -> int:
    """Memory the decoded tables hold (Arrow buffers): what a queued request costs."""
    return decoded.spans.nbytes + decoded.scopes.nbytes + decoded.resources.nbytes


def merge_decoded(batches: list[DecodedTraces]) -> DecodedTraces:
    """Concatenate decoded requests into one, renumbering resource and scope indices.

    Zero-copy: each request stays its own chunk (the span ingestor bounds a merge in bytes).
    """
    if len(batches) == 1:
        return batches[0]
    spans, scopes, resources = [], [], []
    r_off = s_off = 0
    for d in batches:
        spans.append(_shift(_shift(d.spans, "resource_index", r_off), "scope_index", s_off))
        scopes.append(_shift(_shift(d.scopes, "resource_index", r_off), "scope_index", s_off))
        resources.append(_shift(d.resources, "resource_index", r_off))
        r_off += d.resources.num_rows
        s_off += d.scopes.num_rows
    return DecodedTraces(
        spans=pa.concat_tables(spans),
        scopes=pa.concat_tables(scopes),
        resources=pa.concat_tables(resources),
        total_spans=sum(d.total_spans for d in batches),
        rejected_spans=sum(d.rejected_spans for d in batches),
        errors=tuple(e for d in batches for e in d.errors)[:10],
    )


@cache
def _insert_sql() -> str:
    return resources.files("sql").joinpath("ingest", "insert_spans.sql").read_text("utf-8")


def insert_spans(tx: Transaction, decoded: DecodedTraces) -> int:
    """Insert the batch's new spans; returns how many rows were written (duplicates skipped).

    Runs on the writer thread inside the gateway's transaction.
    """
    spans = decoded.spans
    if spans.num_rows == 0:
        return 0
    bounds = pc.min_max(spans.column("start_ns"))
    # Span ids repeat within one request only by mistake; checking costs ~0.05 us per span.
    has_repeats = pc.count_distinct(spans.column("span_id")).as_py() != spans.num_rows
    inputs = {
        "batch_spans": _split_map(spans, "attributes", "attr_keys", "attr_values"),
        "batch_scopes": decoded.scopes,
        "batch_resources": _split_map(
            decoded.resources, "resource_attributes", "resource_keys", "resource_values"
        ),
    }
    params = {
        "min_start": bounds["min"].as_py(),
        "max_start": bounds["max"].as_py(),
        "has_repeats": has_repeats,
    }
    row = tx.insert_arrow(_insert_sql(), inputs, params).fetchone()
    return int(row[0]) if row else 0
