"""Moves accepted span batches from the spool into DuckDB, many requests per INSERT.

accept() runs on the HTTP thread: it bounds the work waiting, in spans and in bytes of decoded
Arrow tables (QueueFullError → 503), spools the body durably and hands the decoded tables to one
worker thread. The worker merges whatever is waiting (up to ``merge_max_spans`` and
``merge_max_bytes``) into one batch and writes it through the storage gateway's single writer;
then it deletes the spool files. A merged batch that fails is split and written request by
request; a request that still fails is retried ``write_attempts`` times in all, with a growing
pause, and then quarantined (moved to the spool's failed/ folder with its reason, a log line and
a metric), so one bad request never blocks the ones behind it (issue #17).

Files a previous run left in the spool are replayed at start, read from disk a merge at a time
by the worker, so a large spool costs no more memory than live traffic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

from inferledger.core.errors import QueueFullError, StorageError, one_line
from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.storage import Storage
from ingest.otlp_decode import DecodedTraces, OtlpDecodeError
from ingest.span_writer import decode_for_storage, decoded_nbytes, insert_spans, merge_decoded
from ingest.spool import Spool, SpoolEntry

log = logging.getLogger(__name__)

_MAX_BACKOFF_S = 30.0


@dataclass(frozen=True)
class _Pending:
    entry: SpoolEntry
    decoded: DecodedTraces
    nbytes: int

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
        max_pending_bytes: int = 256 * 1024 * 1024,
        merge_max_spans: int = 64_000,
        merge_max_bytes: int = 64 * 1024 * 1024,
        write_attempts: int = 5,
        retry_backoff_s: float = 0.5,
    ) -> None:
        self._storage = storage
        self._spool = spool
        self._metrics = metrics
        self._max_pending = max_pending_spans
        self._max_pending_bytes = max_pending_bytes
        self._merge_max = merge_max_spans
        self._merge_max_bytes = merge_max_bytes
        self._write_attempts = max(1, write_attempts)
        self._backoff_s = retry_backoff_s
        self._queue: deque[_Pending] = deque()
        self._backlog: deque[SpoolEntry] = deque()  # spooled by an earlier run, not yet read
        self._cond = threading.Condition()
        self._pending_spans = 0
        self._pending_bytes = 0
        self._busy = False  # the worker holds a batch
        self._stopping = False
        self._stop_requested = threading.Event()  # wakes a retry pause at shutdown
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SpanIngestor:
        """Queue the spool files a previous run left behind, then start the worker."""
        with self._cond:
            queued = {item.entry.seq for item in self._queue}  # accepted before start()
            self._backlog.extend(e for e in self._spool.pending() if e.seq not in queued)
            replayed = len(self._backlog)
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
        self._stop_requested.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("span ingestor still busy at shutdown; the spool keeps the rest")

    @property
    def pending_spans(self) -> int:
        """Spans acknowledged but not yet committed to the spans table (replay not counted)."""
        return self._pending_spans

    @property
    def pending_bytes(self) -> int:
        """Bytes of decoded spans held in memory until they are committed."""
        return self._pending_bytes

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Wait until every accepted span is committed (or quarantined). True when idle."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending_spans or self._backlog or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    # ------------------------------------------------------------------ HTTP side
    def has_room(self) -> bool:
        """False when the bounds are already reached: the receiver answers 503 before it spends
        time decoding a body that could not be queued anyway."""
        with self._cond:
            return (
                self._pending_spans < self._max_pending
                and self._pending_bytes < self._max_pending_bytes
            )

    def accept(self, body: bytes, decoded: DecodedTraces) -> None:
        """Durably accept a validated request; raises QueueFullError when too much waits."""
        n = decoded.spans.num_rows
        size = decoded_nbytes(decoded)
        with self._cond:
            if self._stopping:
                raise StorageError("ingest is shutting down")
            # A request larger than a whole bound is admitted when nothing waits, otherwise it
            # could never be stored; memory stays bounded by ingest.max_body_bytes then.
            if self._pending_spans and self._pending_spans + n > self._max_pending:
                raise QueueFullError(
                    f"{self._pending_spans} spans are waiting to be written "
                    f"(limit {self._max_pending})"
                )
            if self._pending_bytes and self._pending_bytes + size > self._max_pending_bytes:
                raise QueueFullError(
                    f"{self._pending_bytes >> 20} MiB of spans are waiting to be written "
                    f"(limit {self._max_pending_bytes >> 20} MiB)"
                )
            self._pending_spans += n
            self._pending_bytes += size
        try:
            entry = self._spool.append(body)
        except OSError:
            self._release(n, size)
            raise
        with self._cond:
            self._queue.append(_Pending(entry, decoded, size))
            self._cond.notify_all()

    # ------------------------------------------------------------------ worker
    def _take(self) -> list[_Pending] | None:
        """The next batch: the replay backlog first, then accepted requests, bounded in spans
        and bytes (at least one request). None when stopping and drained."""
        with self._cond:
            while not self._queue and not self._backlog and not self._stopping:
                self._cond.wait()
            if not self._queue and not self._backlog:
                return None
            self._busy = True
            if not self._backlog:
                batch: list[_Pending] = []
                spans = size = 0
                while self._queue and (
                    not batch
                    or (
                        spans + self._queue[0].spans <= self._merge_max
                        and size + self._queue[0].nbytes <= self._merge_max_bytes
                    )
                ):
                    item = self._queue.popleft()
                    batch.append(item)
                    spans += item.spans
                    size += item.nbytes
                return batch
            entries = self._take_backlog()
        return self._load(entries)

    def _take_backlog(self) -> list[SpoolEntry]:
        # A spooled body is about as large as its decoded tables, so file sizes bound the merge.
        entries: list[SpoolEntry] = []
        size = 0
        while self._backlog:
            try:
                entry_size = self._backlog[0].path.stat().st_size
            except OSError:
                entry_size = 0
            if entries and size + entry_size > self._merge_max_bytes:
                break
            entries.append(self._backlog.popleft())
            size += entry_size
        return entries

    def _load(self, entries: list[SpoolEntry]) -> list[_Pending]:
        """Read and decode replayed spool files (on the worker thread, outside the lock)."""
        batch = []
        for entry in entries:
            try:
                decoded = decode_for_storage(entry.path.read_bytes())
            except (OSError, OtlpDecodeError) as exc:
                self._quarantine(entry, f"cannot replay: {exc}", 0)
                continue
            item = _Pending(entry, decoded, decoded_nbytes(decoded))
            with self._cond:
                self._pending_spans += item.spans
                self._pending_bytes += item.nbytes
            batch.append(item)
        return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return  # stopping and drained
            try:
                keep_going = self._store(batch) if batch else True
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
            if not keep_going:
                return

    def _store(self, batch: list[_Pending]) -> bool:
        """Commit ``batch``, or quarantine the requests that cannot be stored. False when the
        worker must stop (shutting down while the database refuses writes: the spool keeps
        what is left for the next start)."""
        attempt = 0
        while True:
            try:
                self._write(batch)
                return True
            except QueueFullError:
                pass  # other writers (scrapes, outcomes) fill the gateway's queue: wait, no count
            except Exception as exc:
                if self._stopping:  # keep it in the spool; the next start tries again
                    log.warning(
                        "span ingestor stopping after a failed write: %s", one_line(exc, 500)
                    )
                    return False
                if len(batch) > 1:  # find the request at fault; store the others
                    log.warning(
                        "writing %d merged requests failed (%s); writing them one by one",
                        len(batch),
                        one_line(exc, 500),
                    )
                    return all(self._store([item]) for item in batch)
                attempt += 1
                if attempt >= self._write_attempts:
                    item = batch[0]
                    self._quarantine(
                        item.entry,
                        f"insert failed {attempt} time(s): {one_line(exc, 500)}",
                        item.spans,
                    )
                    self._done(batch)
                    return True
                log.warning(
                    "writing spooled request %s failed (attempt %d of %d): %s",
                    batch[0].entry.seq,
                    attempt,
                    self._write_attempts,
                    one_line(exc, 500),
                )
            if self._stopping:
                return False
            self._stop_requested.wait(
                min(_MAX_BACKOFF_S, self._backoff_s * 2 ** max(0, attempt - 1))
            )

    def _write(self, batch: list[_Pending]) -> None:
        total = sum(item.spans for item in batch)
        merged = merge_decoded([item.decoded for item in batch])
        inserted = self._storage.write(lambda tx: insert_spans(tx, merged), units=total)
        self._spool.remove([item.entry for item in batch])
        self._metrics.spans_accepted.inc(inserted)
        self._metrics.spans_duplicate.inc(total - inserted)
        self._done(batch)

    def _quarantine(self, entry: SpoolEntry, reason: str, spans: int) -> None:
        """Move a request aside for good: it is kept on disk, logged and counted."""
        try:
            self._spool.quarantine(entry, reason)
        except OSError as exc:  # the file stays in the spool and is retried at the next start
            log.error("cannot quarantine spooled request %s: %s", entry.seq, exc)
        self._metrics.ingest_quarantined.inc()
        if spans:
            self._metrics.spans_rejected.labels("quarantined").inc(spans)

    def _done(self, batch: list[_Pending]) -> None:
        self._release(sum(item.spans for item in batch), sum(item.nbytes for item in batch))

    def _release(self, spans: int, nbytes: int) -> None:
        with self._cond:
            self._pending_spans -= spans
            self._pending_bytes -= nbytes
            self._cond.notify_all()
