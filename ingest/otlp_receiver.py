"""OTLP/HTTP trace receiver: POST /v1/traces, per the OTLP specification.

Answers (https://opentelemetry.io/docs/specs/otlp/#otlphttp-response):
- 200 with an empty ExportTraceServiceResponse once every span is durably accepted (in the
  spool, see ingest/spool.py; the worker commits it to DuckDB moments later);
- 200 with ``partial_success`` (rejected count and the first problems) when some spans are
  invalid and the valid ones are accepted;
- 400 with a google.rpc.Status for a body that cannot be decoded; 401 for a missing or wrong
  ingest key; 405; 413 for a body over the limit *after* decompression (a gzip bomb is stopped
  once the limit is passed, never inflated fully); 415 for another content type or encoding;
  503 + Retry-After when too many accepted spans, or too many bytes of them, wait to be written
  (ingest.queue_max_spans, ingest.queue_max_bytes).
The response uses the request's content type (protobuf or JSON). Nothing is written unless the
answer is 200. This module knows nothing of Flask; inferledger/server.py adapts it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)

from inferledger.core.errors import (
    BadInputError,
    InferLedgerError,
    PayloadTooLargeError,
    QueueFullError,
    StorageError,
    UnauthorizedError,
    UnsupportedMediaTypeError,
)
from inferledger.core.service_metrics import ServiceMetrics
from ingest.ingest_keys import check_ingest_key
from ingest.otlp_decode import DecodedTraces
from ingest.otlp_json import json_to_protobuf
from ingest.span_ingestor import SpanIngestor
from ingest.span_writer import decode_for_storage

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_READ_CHUNK = 1 << 20
_OVERLOADED = "ingest is overloaded (too many spans waiting to be written); retry later"


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str
    headers: Mapping[str, str] = field(default_factory=dict)


class MethodNotAllowedError(BadInputError):
    http_status = 405


class ServiceUnavailableError(InferLedgerError):
    http_status = 503


_GRPC_CODE = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    405: code_pb2.UNIMPLEMENTED,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    503: code_pb2.UNAVAILABLE,
}


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def read_body(
    stream: BinaryIO, content_length: int | None, content_encoding: str | None, limit: int
) -> bytes:
    """Read and (if gzip) inflate the body, refusing anything over ``limit`` bytes.

    The compressed body is read in chunks and inflated with ``max_length`` so that at most
    ``limit + 1`` bytes are ever produced: a gzip bomb costs us ``limit`` bytes, not its size.
    A gzip body may hold several members (concatenated streams, RFC 1952 section 2.2); every
    one is inflated, and anything after a member that is not another member is a 400.
    """
    encoding = (content_encoding or "identity").strip().lower()
    if encoding not in ("identity", "gzip"):
        raise UnsupportedMediaTypeError(
            f"unsupported Content-Encoding {content_encoding!r}: use gzip or none"
        )
    if content_length is not None and content_length > limit:
        raise PayloadTooLargeError(
            f"request body of {content_length} bytes exceeds the limit of {limit} bytes"
        )
    raw = bytearray()
    while True:
        chunk = stream.read(_READ_CHUNK)
        if not chunk:
            break
        raw += chunk
        if len(raw) > limit:
            raise PayloadTooLargeError(f"request body exceeds the limit of {limit} bytes")
    if encoding == "identity":
        return bytes(raw)
    return _gunzip(bytes(raw), limit)


def _gunzip(data: bytes, limit: int) -> bytes:
    out = bytearray()
    while True:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            # Never more than limit + 1 bytes in all: the rest of the input stays unconsumed.
            out += inflater.decompress(data, limit + 1 - len(out))
        except zlib.error as exc:
            raise BadInputError(f"body is not valid gzip: {exc}") from None
        if len(out) > limit:
            raise PayloadTooLargeError(
                f"request body exceeds the limit of {limit} bytes after gzip decompression"
            )
        if not inflater.eof:
            raise BadInputError("body is not valid gzip: the stream is truncated")
        data = inflater.unused_data
        if not data:
            return bytes(out)


class ByteBudget:
    """Bytes that requests being read and decoded may hold at once, across HTTP threads.

    One holder may take more than the whole budget when nobody else holds any, otherwise a
    request larger than the budget could never be received.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def try_acquire(self, nbytes: int) -> bool:
        with self._lock:
            if self._used and self._used + nbytes > self.capacity:
                return False
            self._used += nbytes
            return True

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._used -= nbytes


class TraceReceiver:
    """Decodes, validates and commits OTLP trace exports."""

    def __init__(
        self,
        ingestor: SpanIngestor,
        metrics: ServiceMetrics,
        *,
        ingest_keys: tuple[str, ...] = (),
        max_body_bytes: int = 64 * 1024 * 1024,
        retry_after_s: int = 1,
        inflight_max_bytes: int = 256 * 1024 * 1024,
        decoder: Callable[[bytes], DecodedTraces] = decode_for_storage,
    ) -> None:
        self._ingestor = ingestor
        self._metrics = metrics
        self._keys = tuple(k.encode() for k in ingest_keys)
        self._max_body = max_body_bytes
        self._retry_after = retry_after_s
        self._decode = decoder
        self._inflight = ByteBudget(inflight_max_bytes)

    @property
    def inflight_bytes(self) -> int:
        """Bytes held by requests being read and decoded now."""
        return self._inflight.used

    # ------------------------------------------------------------------ entry point
    def handle(self, method: str, headers: Mapping[str, str], stream: BinaryIO) -> Response:
        """Answer one HTTP request to /v1/traces. ``headers`` keys are case-insensitive."""
        started = time.perf_counter()
        fmt = JSON if _media_type(headers.get("Content-Type")) == JSON else PROTOBUF
        try:
            response = self._handle(method, headers, stream, fmt)
        except InferLedgerError as exc:
            response = self._error(exc, fmt)
        except Exception:  # the one place a bug becomes a 500 with a log line, never a hang
            log.exception("unexpected error in /v1/traces")
            response = self._error(InferLedgerError("internal error; see the server log"), fmt)
        self._metrics.http_requests.labels("/v1/traces", str(response.status)).inc()
        self._metrics.http_latency.labels("/v1/traces").observe(time.perf_counter() - started)
        return response

    def _handle(
        self, method: str, headers: Mapping[str, str], stream: BinaryIO, fmt: str
    ) -> Response:
        if method != "POST":
            raise MethodNotAllowedError(f"method {method} is not allowed; use POST")
        self._authenticate(headers)
        media = _media_type(headers.get("Content-Type"))
        if media not in (PROTOBUF, JSON):
            self._metrics.spans_rejected.labels("unsupported_media_type").inc()
            raise UnsupportedMediaTypeError(
                f"unsupported Content-Type {headers.get('Content-Type')!r}: "
                f"use {PROTOBUF} or {JSON}"
            )
        length_header = headers.get("Content-Length")
        try:
            length = int(length_header) if length_header else None
        except ValueError:
            raise BadInputError(f"invalid Content-Length {length_header!r}") from None
        if not self._ingestor.has_room():  # refuse before spending time on the body
            # Its spans are not counted (never decoded); http_requests counts the 503.
            raise ServiceUnavailableError(_OVERLOADED)
        held = 0
        try:
            # The body read, inflated and decoded costs about twice its size until it is queued;
            # the budget bounds that across the HTTP threads (issue #17: 12 clients posting
            # 60 MB bodies must not take the process to many GB).
            held = self._hold(2 * min(length or 0, self._max_body), held)
            try:
                body = read_body(stream, length, headers.get("Content-Encoding"), self._max_body)
            except PayloadTooLargeError:
                self._metrics.spans_rejected.labels("too_large").inc()
                raise
            held = self._hold(2 * len(body), held)
            return self._receive(body, media, fmt)
        finally:
            self._inflight.release(held)

    def _hold(self, nbytes: int, held: int) -> int:
        """Grow this request's share of the in-flight budget to ``nbytes``, or answer 503."""
        if nbytes > held:
            if not self._inflight.try_acquire(nbytes - held):
                raise ServiceUnavailableError(_OVERLOADED)  # counted as above
            return nbytes
        return held

    def _receive(self, body: bytes, media: str, fmt: str) -> Response:
        try:
            payload = json_to_protobuf(body) if media == JSON else body
            decoded = self._decode(payload)
        except BadInputError:
            self._metrics.spans_rejected.labels("undecodable").inc()
            raise
        if decoded.rejected_spans:
            self._metrics.spans_rejected.labels("invalid_span").inc(decoded.rejected_spans)
        if decoded.spans.num_rows:
            try:
                self._ingestor.accept(payload, decoded)
            except QueueFullError:
                self._metrics.spans_rejected.labels("overloaded").inc(decoded.spans.num_rows)
                raise ServiceUnavailableError(_OVERLOADED) from None
            except (OSError, StorageError) as exc:
                self._metrics.spans_rejected.labels("unavailable").inc(decoded.spans.num_rows)
                raise ServiceUnavailableError(f"cannot accept spans now: {exc}") from None
        return self._success(decoded, fmt)

    def _authenticate(self, headers: Mapping[str, str]) -> None:
        try:
            check_ingest_key(headers, self._keys)
        except UnauthorizedError:
            self._metrics.spans_rejected.labels("unauthorized").inc()
            raise

    # ------------------------------------------------------------------ answers
    def _success(self, decoded: DecodedTraces, fmt: str) -> Response:
        msg = ExportTraceServiceResponse()
        if decoded.rejected_spans:
            msg.partial_success.rejected_spans = decoded.rejected_spans
            shown = "; ".join(decoded.errors)
            more = decoded.rejected_spans - len(decoded.errors)
            msg.partial_success.error_message = (
                f"{decoded.rejected_spans} of {decoded.total_spans} spans rejected: {shown}"
                + (f"; and {more} more" if more > 0 else "")
            )
        if fmt == JSON:
            body = json_format.MessageToJson(msg, indent=None).encode()
        else:
            body = msg.SerializeToString()
        return Response(200, body, fmt)

    def _error(self, exc: InferLedgerError, fmt: str) -> Response:
        status = exc.http_status
        message = str(exc)
        code = _GRPC_CODE.get(status, code_pb2.INTERNAL)
        headers: dict[str, str] = {}
        if status == 503:
            headers["Retry-After"] = str(self._retry_after)
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="inferledger-ingest"'
        if fmt == JSON:
            body = json.dumps({"code": code, "message": message}).encode()
        else:
            body = status_pb2.Status(code=code, message=message).SerializeToString()
        return Response(status, body, fmt, headers)
