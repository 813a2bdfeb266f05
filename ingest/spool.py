"""A durable, ordered spool of accepted OTLP requests.

The receiver acknowledges a request once its (validated) protobuf body is in the spool: written
to a temporary file, fsynced, renamed to its sequence number and the directory fsynced. A
background worker moves spooled requests into DuckDB many at a time and deletes their files
after the commit; at start-up, files left by a crash are replayed in order. Re-inserting a
request that was committed just before a crash is harmless: span inserts are idempotent.

Why a spool: the INSERT that turns decoded spans into typed rows costs ~10 ms to plan whatever
the batch size, so committing each request on its own caps ingest at ~30k spans/s for typical
2,000-span requests; merging requests amortises it (docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from inferledger.core.errors import StorageError

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{20})\.otlp$")


@dataclass(frozen=True, order=True)
class SpoolEntry:
    seq: int
    path: Path


class Spool:
    """Append-only folder of request bodies named by a monotonic sequence number."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.failed_directory = self.directory / "failed"
        self._lock = threading.Lock()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for stale in self.directory.glob("*.tmp"):  # a crash mid-write: never acknowledged
                stale.unlink(missing_ok=True)
            existing = [e.seq for e in self.pending()]
            # Past quarantined files too: a new request must never reuse (overwrite) their name.
            self._next_seq = max([0, *existing, *self._failed_seqs()]) + 1
        except OSError as exc:
            raise StorageError(
                f"cannot use spool folder {str(self.directory)!r}: {exc.strerror or exc}"
            ) from None

    def _failed_seqs(self) -> list[int]:
        if not self.failed_directory.is_dir():
            return []
        return [
            int(m.group(1)) for p in self.failed_directory.iterdir() if (m := _NAME.match(p.name))
        ]

    def pending(self) -> list[SpoolEntry]:
        """Spooled requests not yet committed to the database, oldest first."""
        entries = []
        for path in self.directory.iterdir():
            m = _NAME.match(path.name)
            if m:
                entries.append(SpoolEntry(int(m.group(1)), path))
        entries.sort()
        return entries

    def append(self, body: bytes) -> SpoolEntry:
        """Durably store ``body``; when this returns, a crash cannot lose it."""
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
        final = self.directory / f"{seq:020d}.otlp"
        tmp = final.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
        self._fsync_directory()
        return SpoolEntry(seq, final)

    def remove(self, entries: list[SpoolEntry]) -> None:
        for entry in entries:
            entry.path.unlink(missing_ok=True)

    def quarantine(self, entry: SpoolEntry, reason: str) -> Path:
        """Move a request that cannot be stored aside, with the reason next to it."""
        self.failed_directory.mkdir(exist_ok=True)
        target = self.failed_directory / entry.path.name
        os.replace(entry.path, target)
        target.with_suffix(".reason.txt").write_text(reason + "\n", encoding="utf-8")
        log.error("spooled request %s moved to %s: %s", entry.seq, target, reason)
        return target

    def _fsync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
