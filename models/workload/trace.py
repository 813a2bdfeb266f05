"""Request traces: one JSON object per line, replayed by `inferledger simulate --trace FILE`.

Each line is one request a client sent:

    {"arrival_s": 12.5, "prompt_tokens": 900, "output_tokens": 120,
     "prefix_id": "support/answer", "prefix_tokens": 640, "app": "support", "route": "answer"}

arrival_s: send time in seconds, relative (0 = the start) or absolute (Unix seconds); the
replay starts at the earliest one, so either works. prompt_tokens: the whole prompt, the
shared prefix included. output_tokens: tokens generated (the request's max_tokens unless
max_tokens is given). prefix_id / prefix_tokens (together or not at all): the first
prefix_tokens of the prompt are a prefix every request with the same id and length shares (a
system prompt, a document), which prefix caching can reuse. max_tokens, request_id, app and
route are optional; app and route label the request in the results.

Parsing is strict and all-or-nothing: the first bad line raises BadInputError naming the line
number and the field, and nothing is replayed. `inferledger trace export` (ledger/traces.py)
writes the same format from the ledger's observed requests.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferledger.core.errors import BadInputError
from models.serving.request import RequestSpec

#: every field a trace line may carry; the first three are required
TRACE_FIELDS = (
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "prefix_id",
    "prefix_tokens",
    "max_tokens",
    "request_id",
    "app",
    "route",
)
REQUIRED_FIELDS = TRACE_FIELDS[:3]
#: a trace larger than this is refused before it is read (a simulation of it would not end)
MAX_TRACE_BYTES = 512 << 20


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One line of a trace (arrival_s as written, not yet rebased)."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_id: str | None = None
    prefix_tokens: int = 0
    max_tokens: int | None = None
    request_id: str | None = None
    app: str | None = None
    route: str | None = None

    def to_json(self) -> str:
        """The request as one trace line (optional fields only when set)."""
        out: dict[str, Any] = {
            "arrival_s": round(self.arrival_s, 6),
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.prefix_id is not None:
            out["prefix_id"] = self.prefix_id
            out["prefix_tokens"] = self.prefix_tokens
        for name in ("max_tokens", "request_id", "app", "route"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return json.dumps(out, separators=(", ", ": "), allow_nan=False)


def _int(data: Mapping[str, Any], name: str, at: str, low: int) -> int:
    value = data[name]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInputError(f"{at}: {name} must be an integer, got {value!r}")
    if value < low:
        raise BadInputError(f"{at}: {name} must be >= {low}, got {value}")
    return value


def _label(data: Mapping[str, Any], name: str, at: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise BadInputError(f"{at}: {name} must be a non-empty string, got {value!r}")
    return value


def parse_trace_line(text: str, at: str) -> TraceRequest:
    """One trace line; `at` names it in errors (e.g. "trace.jsonl line 3")."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{at}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{at}: expected a JSON object, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in TRACE_FIELDS)
    if unknown:
        raise BadInputError(
            f"{at}: unknown field(s) {', '.join(unknown)} (known: {', '.join(TRACE_FIELDS)})"
        )
    missing = [k for k in REQUIRED_FIELDS if data.get(k) is None]
    if missing:
        raise BadInputError(f"{at}: missing field(s) {', '.join(missing)}")
    arrival = data["arrival_s"]
    if (
        isinstance(arrival, bool)
        or not isinstance(arrival, int | float)
        or not math.isfinite(arrival)
    ):
        raise BadInputError(f"{at}: arrival_s must be a finite number of seconds, got {arrival!r}")
    prompt = _int(data, "prompt_tokens", at, 1)
    output = _int(data, "output_tokens", at, 1)
    prefix_id = _label(data, "prefix_id", at)
    has_tokens = data.get("prefix_tokens") is not None
    if (prefix_id is None) != (not has_tokens):
        raise BadInputError(f"{at}: prefix_id and prefix_tokens go together (give both or neither)")
    prefix_tokens = _int(data, "prefix_tokens", at, 1) if has_tokens else 0
    if prefix_tokens > prompt:
        raise BadInputError(
            f"{at}: prefix_tokens ({prefix_tokens}) exceeds prompt_tokens ({prompt})"
        )
    max_tokens = _int(data, "max_tokens", at, 1) if data.get("max_tokens") is not None else None
    if max_tokens is not None and max_tokens < output:
        raise BadInputError(f"{at}: max_tokens ({max_tokens}) is below output_tokens ({output})")
    return TraceRequest(
        arrival_s=float(arrival),
        prompt_tokens=prompt,
        output_tokens=output,
        prefix_id=prefix_id,
        prefix_tokens=prefix_tokens,
        max_tokens=max_tokens,
        request_id=_label(data, "request_id", at),
        app=_label(data, "app", at),
        route=_label(data, "route", at),
    )


def parse_trace(lines: Iterable[str], where: str = "trace") -> tuple[TraceRequest, ...]:
    """Every request of a trace, in file order. Blank lines are skipped; any bad line raises
    BadInputError naming `where`, its line number and the field. Request ids must be unique."""
    out = []
    seen: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        at = f"{where} line {number}"
        request = parse_trace_line(text, at)
        if request.request_id is not None:
            if request.request_id in seen:
                raise BadInputError(
                    f"{at}: request_id {request.request_id!r} repeats line "
                    f"{seen[request.request_id]}"
                )
            seen[request.request_id] = number
        out.append(request)
    if not out:
        raise BadInputError(f"{where}: the trace holds no requests")
    return tuple(out)


def read_trace(path: str | Path) -> tuple[TraceRequest, ...]:
    """Read and parse a trace file (UTF-8 JSON lines); errors name the file and line."""
    path = Path(path)
    where = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise BadInputError(
                f"trace {where}: {size:,} bytes, more than the {MAX_TRACE_BYTES:,} replayed"
            )
        with path.open(encoding="utf-8") as handle:
            return parse_trace(handle, where)
    except FileNotFoundError:
        raise BadInputError(f"trace {where}: no such file") from None
    except UnicodeDecodeError:
        raise BadInputError(f"trace {where}: not UTF-8 text") from None
    except OSError as exc:
        raise BadInputError(f"trace {where}: {exc.strerror or exc}") from None


def trace_specs(trace: Iterable[TraceRequest]) -> list[RequestSpec]:
    """The trace as the simulator's requests, sorted by arrival (ties keep file order) and
    rebased so the first is sent at 0. Each request's context carries its max_tokens and, when
    the trace gives them, its app and route."""
    requests = list(trace)
    if not requests:
        return []
    start = min(r.arrival_s for r in requests)
    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_s)
    specs = []
    for index in order:
        r = requests[index]
        request_id = r.request_id or f"trace-{index}"
        own = r.prompt_tokens - r.prefix_tokens
        prompt: tuple[tuple[str, int], ...] = ((request_id, own),) if own else ()
        if r.prefix_id is not None:
            prompt = ((f"prefix:{r.prefix_id}", r.prefix_tokens), *prompt)
        max_tokens = r.max_tokens if r.max_tokens is not None else r.output_tokens
        context: dict[str, Any] = {"max_tokens": max_tokens}
        if r.app is not None:
            context["app"] = r.app
        if r.route is not None:
            context["route"] = r.route
        specs.append(
            RequestSpec(
                request_id=request_id,
                arrival_s=r.arrival_s - start,
                prompt=prompt,
                output_tokens=r.output_tokens,
                max_tokens=max_tokens,
                context=context,
            )
        )
    return specs
