"""The read-only views API (issue #14): the analyst view catalog as JSON and any catalog view's
rows, page by page, as JSON, CSV, JSON Lines or Parquet. docs/api.md, "Views API".

- ``GET /api/v1/views``: every view with its grain, time column, key order, typed columns
  (units, meanings) and example queries (ledger/catalog.py).
- ``GET /api/v1/views/NAME?from=&to=&format=&limit=&cursor=``: one page of NAME's rows in the
  catalog's key order. ``from``/``to`` filter the view's time column (``from <= t < to``); a
  view without one refuses them (400) rather than silently returning every row.
- ``GET /api/v1/openapi.json``: the OpenAPI 3.1 document (app/api_openapi.py), needing no
  token: it is generated from the bundled catalog, the same text as docs/views.md.

Tokens and refusals are app/api_common.py's; the views need the analyst role (or admin), a
viewer gets 403. The view name is looked up in the catalog (404 otherwise) and the page query
is built from the catalog (ledger.catalog.page_statement) with every value bound, then read
through the storage gateway's readers (time-limited), never its writer.

Pagination is by keyset in the catalog's key order: the opaque cursor (base64url JSON of the
view, from, to and the last row's key values; a cursor from another query is a 400) asks for
the rows after that key, so a deep page costs what the first does and rows arriving before the
cursor never shift later pages. Each page is read as ``limit + 1`` rows, so ``next`` is given
exactly when more rows follow. The key order is unique per row (each view's grain; checked on
the bench ledger by bench/catalog_queries.py --check-keys), so pages neither skip nor repeat.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import math
from collections.abc import Callable, Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import flask
import pyarrow as pa
import pyarrow.parquet as pq

from app.api_common import (
    EVERY_METHOD,
    ApiAnswer,
    api_endpoint,
    authenticate,
    check_params,
    json_response,
    parse_instant,
    require_role,
)
from app.api_openapi import openapi_document
from inferledger.core.errors import QueryError
from inferledger.core.storage import compile_statement
from ledger.catalog import (
    catalog_json,
    key_values,
    load_catalog,
    page_statement,
    view_columns,
)
from ledger.users import Role

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

VIEWS_PATH = "/api/v1/views"
OPENAPI_PATH = "/api/v1/openapi.json"
PAGE_PARAMS = ("from", "to", "format", "limit", "cursor")
FORMATS = {
    "json": "application/json",
    "csv": "text/csv; charset=utf-8",
    "jsonl": "application/x-ndjson; charset=utf-8",
    "parquet": "application/vnd.apache.parquet",
}
DEFAULT_LIMIT = 1000
MAX_LIMIT = 50_000
#: Rows per chunk of a streamed CSV or JSON Lines body.
_CHUNK_ROWS = 2000


def _plain(value: Any) -> Any:
    """A value as JSON has it: instants and dates in ISO 8601, NaN and infinities as null,
    HUGEINT sums (Decimal) as integers, MAP columns (a list of pairs) as objects."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): _plain(v) for k, v in value}
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value


def table_rows(table: pa.Table) -> Iterator[dict[str, Any]]:
    """The rows of an Arrow table as JSON-ready dicts, a batch at a time."""
    for batch in table.to_batches(max_chunksize=_CHUNK_ROWS):
        columns = [[_plain(v) for v in col.to_pylist()] for col in batch.columns]
        names = batch.schema.names
        for values in zip(*columns, strict=True):
            yield dict(zip(names, values, strict=True))


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return value


def csv_chunks(table: pa.Table) -> Iterator[str]:
    """A header line, then the rows as CSV (RFC 4180 quoting; NULL is an empty field, a list or
    map column a JSON text), in chunks of rows."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(table.schema.names)
    for i, row in enumerate(table_rows(table), start=1):
        writer.writerow([_csv_cell(v) for v in row.values()])
        if i % _CHUNK_ROWS == 0:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def jsonl_chunks(table: pa.Table) -> Iterator[str]:
    """One JSON object per row and line, in chunks of rows."""
    lines: list[str] = []
    for row in table_rows(table):
        lines.append(json.dumps(row, ensure_ascii=False) + "\n")
        if len(lines) >= _CHUNK_ROWS:
            yield "".join(lines)
            lines = []
    yield "".join(lines)


def parquet_bytes(table: pa.Table) -> bytes:
    """One page as a Parquet file (built in memory: a page is at most MAX_LIMIT rows)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _tagged(value: Any) -> Any:
    """A key value as JSON that comes back as the same Python value (instants and dates
    tagged, so they are bound with their own types)."""
    if isinstance(value, datetime):
        return {"ts": value.isoformat()}
    if isinstance(value, date):
        return {"date": value.isoformat()}
    if isinstance(value, Decimal):
        return {"dec": str(value)}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ValueError(f"a key value of type {type(value).__name__}")


def _untagged(value: Any) -> Any:
    if isinstance(value, dict):
        ((tag, text),) = value.items()
        parse = {"ts": datetime.fromisoformat, "date": date.fromisoformat, "dec": Decimal}[tag]
        return parse(text)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ValueError(value)


def encode_cursor(view: str, start: str | None, end: str | None, after: list[Any]) -> str:
    """The opaque cursor: base64url JSON of the query (view, from, to) and the key values of
    the last row sent."""
    doc = {"view": view, "from": start, "to": end, "after": [_tagged(v) for v in after]}
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, view: str, start: str | None, end: str | None) -> list[Any]:
    """The key values a cursor carries; 400 when it is not ours or belongs to another query."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        doc = json.loads(raw)
        after = [_untagged(v) for v in doc["after"]]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError):
        raise ApiAnswer(
            400, "cursor is not one this API gave: use the `next` link as given"
        ) from None
    if (doc.get("view"), doc.get("from"), doc.get("to")) != (view, start, end):
        raise ApiAnswer(400, "cursor belongs to another query: keep the view, from and to")
    if len(after) != len(load_catalog().view(view).order_by):
        raise ApiAnswer(400, "cursor is not one this API gave: use the `next` link as given")
    return after


def _limit(text: str | None) -> int:
    if text is None:
        return DEFAULT_LIMIT
    try:
        limit = int(text)
    except ValueError:
        raise ApiAnswer(400, f"limit={text[:20]!r} is not a whole number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiAnswer(400, f"limit must be between 1 and {MAX_LIMIT:,}, got {limit}")
    return limit


def register_view_routes(
    server: flask.Flask,
    storage: Storage,
    *,
    clock: Callable[[], datetime],
    base_url: str = "",
) -> None:
    """Add GET /api/v1/views, /api/v1/views/NAME and /api/v1/openapi.json (app/api.py's
    register_api calls this). `base_url` (auth.public_url) makes `next` links absolute on
    that origin; without it they use the request's own."""

    def analyst() -> None:
        user = authenticate(storage, flask.request, clock())
        require_role(user, Role.ANALYST, "The views API")

    @api_endpoint(VIEWS_PATH)
    def views_list() -> flask.Response:
        analyst()
        check_params(flask.request, ())
        return json_response(200, {"views": catalog_json(storage)})

    @api_endpoint(VIEWS_PATH + "/NAME")
    def view_page(name: str) -> flask.Response:
        req = flask.request
        analyst()
        doc = load_catalog().view(name)  # 404 before any parameter is read
        check_params(req, PAGE_PARAMS)
        fmt = req.args.get("format", "json")
        if fmt not in FORMATS:
            raise ApiAnswer(400, f"format={fmt[:20]!r}: use one of {', '.join(FORMATS)}")
        limit = _limit(req.args.get("limit"))
        raw_from, raw_to = req.args.get("from") or None, req.args.get("to") or None
        if doc.time_column is None and (raw_from or raw_to):
            raise ApiAnswer(
                400, f"{name} has no time column, so from and to do not apply: leave them out"
            )
        start = parse_instant("from", raw_from) if raw_from else None
        end = parse_instant("to", raw_to) if raw_to else None
        if start and end and end <= start:
            raise ApiAnswer(400, f"to must be after from ({raw_to} <= {raw_from})")
        norm_from = start.isoformat() if start else None
        norm_to = end.isoformat() if end else None
        cursor = req.args.get("cursor")
        after = decode_cursor(cursor, name, norm_from, norm_to) if cursor else None

        columns = view_columns(storage, name)
        types = {c.name: c.type for c in columns}
        stmt = page_statement(
            doc,
            types.get(doc.time_column or ""),
            start=start,
            end=end,
            limit=limit + 1,
            after=after,
        )
        try:
            table = storage.query_arrow(*compile_statement(stmt))
        except QueryError:
            if after is None:
                raise
            # a forged cursor whose key values do not fit the columns' types
            raise ApiAnswer(
                400, "cursor is not one this API gave: use the `next` link as given"
            ) from None
        more = table.num_rows > limit
        table = table.slice(0, limit)

        next_url = None
        if more:
            params = {k: v for k, v in (("from", norm_from), ("to", norm_to)) if v}
            params |= {"format": fmt, "limit": str(limit)}
            last = table.slice(limit - 1, 1).select(list(doc.order_by)).to_pylist()[0]
            params["cursor"] = encode_cursor(name, norm_from, norm_to, key_values(doc, last))
            origin = base_url.rstrip("/") or req.host_url.rstrip("/")
            next_url = f"{origin}{VIEWS_PATH}/{name}?{urlencode(params)}"
        headers = {"Cache-Control": "no-store"}
        if next_url:
            headers["Link"] = f'<{next_url}>; rel="next"'
        if fmt == "json":
            body = {
                "view": name,
                "from": norm_from,
                "to": norm_to,
                "time_column": doc.time_column,
                "order_by": list(doc.order_by),
                "columns": [{"name": c.name, "type": c.type} for c in columns],
                "count": table.num_rows,
                "rows": list(table_rows(table)),
                "next": next_url,
            }
            return json_response(200, body, **{k: v for k, v in headers.items() if k == "Link"})
        headers["Content-Disposition"] = f'attachment; filename="{name}.{fmt}"'
        headers["X-Row-Count"] = str(table.num_rows)
        if fmt == "parquet":
            return flask.Response(parquet_bytes(table), 200, headers, FORMATS[fmt])
        chunks = csv_chunks(table) if fmt == "csv" else jsonl_chunks(table)
        return flask.Response(
            (c.encode("utf-8") for c in chunks), 200, headers, content_type=FORMATS[fmt]
        )

    @api_endpoint(OPENAPI_PATH)
    def openapi() -> flask.Response:
        check_params(flask.request, ())
        return json_response(
            200,
            openapi_document(FORMATS, DEFAULT_LIMIT, MAX_LIMIT),
            **{"Cache-Control": "no-cache"},
        )

    server.add_url_rule(VIEWS_PATH, "api_v1_views", views_list, methods=EVERY_METHOD)
    server.add_url_rule(VIEWS_PATH + "/<name>", "api_v1_view_page", view_page, methods=EVERY_METHOD)
    server.add_url_rule(OPENAPI_PATH, "api_v1_openapi", openapi, methods=EVERY_METHOD)
