"""A replay trace from the ledger's own observed requests: `inferledger trace export`.

    result = export_trace(storage, TraceWindow(start, end, app="support"), Path("support.jsonl"))

Reads mart_requests (sql/exports/request_trace.sql) for a window and writes one trace line per
request (models/workload/trace.py's format), which `inferledger simulate --trace` replays
against any deployment. What each line carries:

- arrival_s: seconds from the window's start to the request's start (the client span's, else
  the engine's; when the client sent it, as vLLM's arrival is).
- prompt_tokens / output_tokens: the request's input and output tokens as recorded.
- prefix_id / prefix_tokens: when the engine reported a prefix-cache hit (cached input tokens),
  the hit's length under the id "<app>/<route>": requests of one route whose hits are equal
  share a prefix (the route's system prompt, block-aligned as vLLM caches it). The first
  request of a route has no hit (it computed the prefix) and gets no prefix, so a replay's
  first prefixed request computes it in its place; hosted-API requests with cached tokens are
  treated the same.
- request_id (the request's span id), app and route.

Failed requests and requests with no prompt or output token count are left out and counted.
The file is written whole or not at all (a temporary file beside it, renamed into place).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferledger.core.errors import BadInputError
from models.workload.trace import TraceRequest

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

#: a window longer than this is refused (a trace of it would not replay in useful time)
MAX_WINDOW_DAYS = 31


@dataclass(frozen=True, slots=True)
class TraceWindow:
    """The requests to export: started in [start, end), optionally of one environment, app,
    route or model."""

    start: datetime
    end: datetime
    environment: str | None = None
    app: str | None = None
    route: str | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise BadInputError("--from and --to must carry a time zone (e.g. 2026-03-02T10:00Z)")
        if self.end <= self.start:
            raise BadInputError(f"the window is empty: --from {self.start} to --to {self.end}")
        if (self.end - self.start).total_seconds() > MAX_WINDOW_DAYS * 86400:
            raise BadInputError(f"the window is longer than {MAX_WINDOW_DAYS} days")

    def params(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "environment": self.environment,
            "app": self.app,
            "route": self.route,
            "model": self.model,
        }


@dataclass(frozen=True, slots=True)
class ExportResult:
    path: Path
    written: int
    skipped: int  # failed, or without token counts


@cache
def _sql() -> str:
    return resources.files("sql").joinpath("exports", "request_trace.sql").read_text("utf-8")


def trace_requests(storage: Storage, window: TraceWindow) -> tuple[list[TraceRequest], int]:
    """The window's requests as trace lines, and how many were left out."""
    table = storage.query_arrow(_sql(), window.params())
    rows = table.to_pylist()
    start_ns = int(window.start.timestamp() * 1_000_000_000)
    out = []
    skipped = 0
    for row in rows:
        if not row["usable"]:
            skipped += 1
            continue
        prompt = int(row["input_tokens"])
        cached = min(int(row["cached_input_tokens"]), prompt)
        app, route = row["app"], row["route"]
        out.append(
            TraceRequest(
                arrival_s=(int(row["start_ns"]) - start_ns) / 1e9,
                prompt_tokens=prompt,
                output_tokens=int(row["output_tokens"]),
                prefix_id=f"{app or '-'}/{route or '-'}" if cached > 0 else None,
                prefix_tokens=cached,
                request_id=row["span_id"],
                app=app or None,
                route=route or None,
            )
        )
    return out, skipped


def export_trace(storage: Storage, window: TraceWindow, out: Path) -> ExportResult:
    """Write the window's requests to `out` as a JSONL trace (whole, or nothing). Raises
    BadInputError when the window holds no usable request, or the file cannot be written."""
    if not out.parent.is_dir():
        raise BadInputError(f"--out: folder {out.parent} does not exist")
    requests, skipped = trace_requests(storage, window)
    if not requests:
        raise BadInputError(
            f"no requests to export between {window.start.isoformat()} and "
            f"{window.end.isoformat()}"
            + (f" ({skipped} failed or without token counts)" if skipped else "")
            + " (is the ledger refreshed? `inferledger refresh`)"
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for request in requests:
                handle.write(request.to_json() + "\n")
        os.replace(tmp, out)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise BadInputError(f"--out {out}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return ExportResult(out, len(requests), skipped)
