"""POST /v1/outcomes: late outcomes over HTTP, validated (ingest/outcome_parse.py) and stored
idempotently (ingest/outcome_writer.py). This module knows nothing of Flask;
inferledger/server.py adapts OutcomeReceiver.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import BinaryIO

from inferledger.core.errors import (
    BadInputError,
    InferLedgerError,
    QueueFullError,
    StorageError,
    UnsupportedMediaTypeError,
)
from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.storage import Storage
from ingest.ingest_keys import check_ingest_key
from ingest.otlp_receiver import (
    MethodNotAllowedError,
    Response,
    ServiceUnavailableError,
    read_body,
)
from ingest.outcome_parse import parse_outcomes_json
from ingest.outcome_writer import store_outcomes

log = logging.getLogger(__name__)

ENDPOINT = "/v1/outcomes"
JSON = "application/json"
# MAX_OUTCOMES_PER_REQUEST (10,000) outcomes with long ids and names take about 3 MiB of JSON.
MAX_BODY_BYTES = 8 * 1024 * 1024
ERRORS_SHOWN = 100  # problems listed in one 400 answer; the count says how many there were


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


class OutcomeReceiver:
    """Answers POST /v1/outcomes: authenticates, validates, stores, reports.

    Conventions of ingest/otlp_receiver.py's TraceReceiver: the same ingest keys and 401
    messages, 405 for other methods, 413 over the body limit (after gzip), 415 for another
    content type, 503 + Retry-After when the writer's queue is full. Answers are JSON:
    200 ``{"inserted": n, "duplicates": m}``, else ``{"error": "...", "errors": [...]}``.
    """

    def __init__(
        self,
        storage: Storage,
        metrics: ServiceMetrics,
        *,
        ingest_keys: tuple[str, ...] = (),
        max_body_bytes: int = MAX_BODY_BYTES,
        retry_after_s: int = 1,
        write_timeout_s: float = 60.0,
    ) -> None:
        self._storage = storage
        self._metrics = metrics
        self._keys = tuple(k.encode() for k in ingest_keys)
        self._max_body = max_body_bytes
        self._retry_after = retry_after_s
        self._write_timeout = write_timeout_s

    def handle(self, method: str, headers: Mapping[str, str], stream: BinaryIO) -> Response:
        """Answer one HTTP request to /v1/outcomes. ``headers`` keys are case-insensitive."""
        started = time.perf_counter()
        try:
            response = self._handle(method, headers, stream)
        except InferLedgerError as exc:
            response = self._error(exc)
        except Exception:  # the one place a bug becomes a 500 with a log line
            log.exception("unexpected error in %s", ENDPOINT)
            response = self._error(InferLedgerError("internal error; see the server log"))
        self._metrics.http_requests.labels(ENDPOINT, str(response.status)).inc()
        self._metrics.http_latency.labels(ENDPOINT).observe(time.perf_counter() - started)
        return response

    def _handle(self, method: str, headers: Mapping[str, str], stream: BinaryIO) -> Response:
        if method != "POST":
            raise MethodNotAllowedError(f"method {method} is not allowed; use POST")
        self._authenticate(headers)
        if _media_type(headers.get("Content-Type")) != JSON:
            raise UnsupportedMediaTypeError(
                f"unsupported Content-Type {headers.get('Content-Type')!r}: use {JSON}"
            )
        length_header = headers.get("Content-Length")
        try:
            length = int(length_header) if length_header else None
        except ValueError:
            raise BadInputError(f"invalid Content-Length {length_header!r}") from None
        body = read_body(stream, length, headers.get("Content-Encoding"), self._max_body)
        outcomes = parse_outcomes_json(body)
        try:
            result = store_outcomes(self._storage, outcomes, timeout_s=self._write_timeout)
        except QueueFullError:
            raise ServiceUnavailableError(
                "ingest is overloaded (too many writes waiting); retry later"
            ) from None
        except TimeoutError:
            raise ServiceUnavailableError(
                f"the write did not finish within {self._write_timeout:g} s; retry "
                "(posting the same outcomes again is safe)"
            ) from None
        except (OSError, StorageError) as exc:
            raise ServiceUnavailableError(f"cannot store outcomes now: {exc}") from None
        body_out = {"inserted": result.inserted, "duplicates": result.duplicates}
        return Response(200, json.dumps(body_out).encode(), JSON)

    def _authenticate(self, headers: Mapping[str, str]) -> None:
        check_ingest_key(headers, self._keys)  # the same keys and answers as /v1/traces

    def _error(self, exc: InferLedgerError) -> Response:
        status = exc.http_status
        errors = list(getattr(exc, "errors", ())) or [str(exc)]
        doc: dict[str, object] = {"error": str(exc), "errors": errors[:ERRORS_SHOWN]}
        if len(errors) > ERRORS_SHOWN:
            doc["errors_total"] = len(errors)
        headers: dict[str, str] = {}
        if status == 503:
            headers["Retry-After"] = str(self._retry_after)
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="inferledger-ingest"'
        return Response(status, json.dumps(doc).encode(), JSON, headers)
