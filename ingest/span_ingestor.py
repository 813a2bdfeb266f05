"""Moves accepted span batches from the spool into DuckDB, many requests per INSERT.

accept() runs on the HTTP thread: it bounds the spans waiting (QueueFullError → 503), spools the
body durably and hands the decoded tables to one worker thread. The worker merges whatever is
waiting (up to ``merge_max_spans``) into one batch and writes it through the storage gateway's
single writer; then it deletes the spool files. A batch that fails is retried request by request,
and a request that still fails is quarantined (kept on disk, never silently dropped).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

import duckdb

from inferledger.errors import QueueFullError, StorageError
from inferledger.service_metrics import ServiceMetrics
from inferledger.storage import Storage
from ingest.otlp_decode import DecodedTraces, OtlpDecodeError
from ingest.span_writer import decode_for_storage, insert_spans, merge_decoded
from ingest.spool import Spool, SpoolEntry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Pending:
    entry: SpoolEntry
    decoded: DecodedTraces

    @property
    def spans(self) -> int:
        return self.decoded.spans.num_rows


class SpanIngestor:
    def __init__(
        self,
        storage: Storage,
        spool: Spool,
        metrics: ServiceMetrics,
        *,
        max_pending_spans: int = 500_000,
        merge_max_spans: int = 64_000,
    ) -> None:
        self._storage = storage
        self._spool = spool
        self._metrics = metrics
        self._max_pending = max_pending_spans
        self._merge_max = merge_max_spans
        self._queue: deque[_Pending] = deque()
        self._cond = threading.Condition()
        self._pending_spans = 0
        self._stopping = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SpanIngestor:
        """Queue the spool files a previous run left behind, then start the worker."""
        replayed = 0
        for entry in self._spool.pending():
            try:
                decoded = decode_for_storage(entry.path.read_bytes())
            except (OSError, OtlpDecodeError) as exc:
                self._spool.quarantine(entry, f"cannot replay: {exc}")
                continue
            self._enqueue(_Pending(entry, decoded))
            replayed += 1
        if replayed:
            log.info("replaying %d spooled request(s) from %s", replayed, self._spool.directory)
        self._thread = threading.Thread(target=self._run, name="span-ingestor", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Write everything accepted so far, then stop the worker."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("span ingestor still busy at shutdown; the spool keeps the rest")

    @property
    def pending_spans(self) -> int:
        """Spans acknowledged but not yet committed to the spans table."""
        return self._pending_spans

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Wait until every accepted span is committed (or failed). True when idle."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending_spans:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    # ------------------------------------------------------------------ HTTP side
    def accept(self, body: bytes, decoded: DecodedTraces) -> None:
        """Durably accept a validated request; raises QueueFullError when too much waits."""
        n = decoded.spans.num_rows
        with self._cond:
            if self._stopping:
                raise StorageError("ingest is shutting down")
            # A request larger than the whole bound is admitted when nothing waits, otherwise it
            # could never be stored; memory stays bounded by ingest.max_body_bytes then.
            if self._pending_spans and self._pending_spans + n > self._max_pending:
                raise QueueFullError(
                    f"{self._pending_spans} spans are waiting to be written "
                    f"(limit {self._max_pending})"
                )
            self._pending_spans += n
        try:
            entry = self._spool.append(body)
        except OSError:
            with self._cond:
                self._pending_spans -= n
                self._cond.notify_all()
            raise
        with self._cond:
            self._queue.append(_Pending(entry, decoded))
            self._cond.notify_all()

    def _enqueue(self, item: _Pending) -> None:
        with self._cond:
            self._pending_spans += item.spans
            self._queue.append(item)
            self._cond.notify_all()

    # ------------------------------------------------------------------ worker
    def _take(self) -> list[_Pending]:
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            batch: list[_Pending] = []
            spans = 0
            while self._queue and (not batch or spans + self._queue[0].spans <= self._merge_max):
                item = self._queue.popleft()
                batch.append(item)
                spans += item.spans
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return  # stopping and drained
            try:
                self._write(batch)
            except Exception:
                log.exception("span ingestor failed to write %d request(s)", len(batch))
                time.sleep(1.0)
                with self._cond:
                    self._queue.extendleft(reversed(batch))
                    if self._stopping:
                        return

    def _write(self, batch: list[_Pending]) -> None:
        total = sum(item.spans for item in batch)
        merged = merge_decoded([item.decoded for item in batch])
        try:
            inserted = self._storage.write(lambda cur: insert_spans(cur, merged), units=total)
        except duckdb.Error as exc:
            if len(batch) > 1:  # find the request at fault; store the others
                for item in batch:
                    self._write([item])
                return
            self._spool.quarantine(batch[0].entry, f"insert failed: {exc}")
            self._metrics.spans_rejected.labels("storage_error").inc(total)
            self._done(batch, total)
            return
        self._spool.remove([item.entry for item in batch])
        self._metrics.spans_accepted.inc(inserted)
        self._metrics.spans_duplicate.inc(total - inserted)
        self._done(batch, total)

    def _done(self, batch: list[_Pending], total: int) -> None:
        with self._cond:
            self._pending_spans -= total
            self._cond.notify_all()
