"""The span tree of one trace, laid out for a waterfall: parent/child order, depth, offsets from
the trace's start, the critical path, and the queue/prefill/decode stages of engine spans.

Pure functions over span records (no I/O). Telemetry is messy, so the tree never trusts it:

- a span whose parent is not in the trace (not ingested yet, dropped, older than retention) is
  an **orphan** and becomes a root of its own, flagged so the view can say so;
- a span that names itself as parent is a root;
- parent links that form a cycle (impossible in valid OTLP, possible in hand-made or corrupt
  data) are broken at the cycle's earliest span, which becomes a root: every span appears
  exactly once and the walk always ends;
- a span id received twice keeps its first record.

Children are ordered by start time (then end time, then span id), so the order is deterministic.
Stages of an engine span follow docs/cost-model.md ("Replica cost and its split"): queue from
the span's start (arrival) to ``start + time_in_queue``, prefill from there to
``start + time_to_first_token``, decode from the first token to the span's end.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

_NS_PER_MS = 1_000_000
_NS_PER_S = 1_000_000_000
#: gen_ai.operation.name values of an app-side LLM call (docs/cost-model.md "Requests").
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "embeddings"})
SPAN_KIND_SERVER = 2
STATUS_ERROR = 2
_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")


def parse_trace_id(text: str | None) -> str | None:
    """The trace id in `text` (32 hex characters, stored lower-case), else None."""
    if text is None or not _TRACE_ID.fullmatch(text):
        return None
    return text.lower()


class Category(StrEnum):
    """What a span is, for the waterfall's colours and legend."""

    SERVER = "server"
    LLM_CALL = "llm call"
    ENGINE = "engine"
    RETRIEVAL = "retrieval"
    TOOLS = "tools"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Span:
    """The fields of a span the tree needs (a row of the trace_spans query)."""

    span_id: str
    parent_span_id: str | None
    name: str
    start_ns: int
    end_ns: int
    service: str | None = None
    kind: int = 0
    status_code: int = 0
    stage: str | None = None
    operation: str | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    queue_s: float | None = None
    ttft_s: float | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Span:
        """From a query row with the trace_spans columns (extra keys are ignored)."""
        return cls(
            span_id=row["span_id"],
            parent_span_id=row.get("parent_span_id") or None,
            name=row["name"],
            start_ns=int(row["start_ns"]),
            end_ns=int(row["end_ns"]),
            service=row.get("service_name"),
            kind=int(row.get("kind") or 0),
            status_code=int(row.get("status_code") or 0),
            stage=row.get("stage"),
            operation=row.get("gen_ai_operation"),
            model=row.get("request_model"),
            input_tokens=row.get("input_tokens"),
            output_tokens=row.get("output_tokens"),
            queue_s=row.get("latency_queue_s"),
            ttft_s=row.get("latency_ttft_s"),
        )

    @property
    def failed(self) -> bool:
        return self.status_code == STATUS_ERROR

    @property
    def is_engine(self) -> bool:
        """vLLM's request span (or any span carrying the engine's latency set)."""
        return self.name == "llm_request" or self.ttft_s is not None


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of an engine span spent in one stage, in ms from the trace's start."""

    stage: str
    offset_ms: float
    duration_ms: float


@dataclass(frozen=True, slots=True)
class Node:
    """One span placed in the tree."""

    span: Span
    depth: int
    parent_id: str | None  # the parent in the tree; None for a root (orphans included)
    orphan: bool  # its parent_span_id names a span that is not in the trace
    offset_ms: float  # start, from the trace's earliest start
    duration_ms: float
    critical: bool  # on the critical path of the main root
    category: Category
    segments: tuple[Segment, ...]  # queue/prefill/decode of an engine span; () otherwise

    @property
    def duration_s(self) -> float:
        return self.duration_ms / 1000


@dataclass(frozen=True, slots=True)
class TraceTree:
    """The spans of a trace in depth-first order (a parent before its children)."""

    nodes: tuple[Node, ...]
    start_ns: int
    end_ns: int
    main_root_id: str | None = None  # the earliest true root (no parent id), else earliest root

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / _NS_PER_MS

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / _NS_PER_S

    @property
    def roots(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.parent_id is None)

    @property
    def orphans(self) -> int:
        return sum(1 for n in self.nodes if n.orphan)

    @property
    def main_root(self) -> Node | None:
        """The span to show first: the earliest true root, else the earliest other root."""
        return self.node(self.main_root_id) if self.main_root_id else None

    def node(self, span_id: str) -> Node | None:
        return next((n for n in self.nodes if n.span.span_id == span_id), None)


def category_of(span: Span) -> Category:
    if span.stage == "retrieval" or span.operation == "retrieval":
        return Category.RETRIEVAL
    if span.stage == "tools" or span.operation == "execute_tool":
        return Category.TOOLS
    if span.is_engine:
        return Category.ENGINE
    if span.operation in LLM_OPERATIONS:
        return Category.LLM_CALL
    if span.kind == SPAN_KIND_SERVER:
        return Category.SERVER
    return Category.OTHER


def stage_segments(span: Span, trace_start_ns: int) -> tuple[Segment, ...]:
    """Queue, prefill and decode of an engine span, clamped to the span; () for other spans
    or an engine span without its latency set."""
    if not span.is_engine or span.ttft_s is None:
        return ()
    queue_ns = round((span.queue_s or 0.0) * _NS_PER_S)
    ttft_ns = round(span.ttft_s * _NS_PER_S)
    bounds = [span.start_ns]
    for cut in (span.start_ns + queue_ns, span.start_ns + ttft_ns, span.end_ns):
        bounds.append(min(max(cut, bounds[-1]), span.end_ns))
    out = []
    for stage, a, b in zip(("queue", "prefill", "decode"), bounds, bounds[1:], strict=False):
        if b > a:
            out.append(Segment(stage, (a - trace_start_ns) / _NS_PER_MS, (b - a) / _NS_PER_MS))
    return tuple(out)


def _order_key(span: Span) -> tuple[int, int, str]:
    return (span.start_ns, span.end_ns, span.span_id)


def _critical_spans(
    root: str, children: Mapping[str, list[Span]], by_id: Mapping[str, Span]
) -> set[str]:
    """Span ids on the critical path below `root` (Jaeger's walk, at span granularity): from a
    span's end, take the child that finished last, recurse into it, move the cursor back to
    that child's start, and repeat with the children that finished before the cursor. A child
    still running at the cursor ran in parallel with the one taken, so it is not on the path;
    only the first child may end after its parent (clock skew), capped at the parent's end."""
    on_path: set[str] = set()
    stack = [(root, by_id[root].end_ns)]
    while stack:
        span_id, until = stack.pop()
        on_path.add(span_id)
        cursor = min(by_id[span_id].end_ns, until)
        kids = children.get(span_id, ())
        first = max(
            (c for c in kids if c.start_ns < cursor),
            key=lambda c: (min(c.end_ns, cursor), c.start_ns),
            default=None,
        )
        taken = first
        while taken is not None:
            stack.append((taken.span_id, cursor))
            cursor = taken.start_ns
            taken = max(
                (c for c in kids if c.end_ns <= cursor and c.start_ns < cursor),
                key=lambda c: (c.end_ns, c.start_ns),
                default=None,
            )
    return on_path


def build_tree(spans: Iterable[Span]) -> TraceTree:
    """Lay out a trace's spans as a tree (see the module docstring for the rules)."""
    by_id: dict[str, Span] = {}
    for span in spans:
        by_id.setdefault(span.span_id, span)
    if not by_id:
        return TraceTree(nodes=(), start_ns=0, end_ns=0)
    start_ns = min(s.start_ns for s in by_id.values())
    end_ns = max(s.end_ns for s in by_id.values())

    def parent_in_trace(span: Span) -> str | None:
        p = span.parent_span_id
        return p if p and p != span.span_id and p in by_id else None

    children: dict[str, list[Span]] = {}
    roots: list[Span] = []
    for span in by_id.values():
        parent = parent_in_trace(span)
        if parent is None:
            roots.append(span)
        else:
            children.setdefault(parent, []).append(span)
    for kids in children.values():
        kids.sort(key=_order_key)

    placed: dict[str, tuple[int, str | None]] = {}  # span id -> (depth, tree parent)
    ordered: list[Span] = []

    def walk(top: Span) -> None:
        stack = [(top, 0, None)]
        while stack:
            span, depth, parent = stack.pop()
            if span.span_id in placed:  # only reachable through a broken cycle
                continue
            placed[span.span_id] = (depth, parent)
            ordered.append(span)
            for child in reversed(children.get(span.span_id, ())):
                stack.append((child, depth + 1, span.span_id))

    for root in sorted(roots, key=_order_key):
        walk(root)
    # Spans never reached sit on a parent cycle: break each at its earliest span.
    while len(placed) < len(by_id):
        rest = sorted((s for s in by_id.values() if s.span_id not in placed), key=_order_key)
        roots.append(rest[0])
        walk(rest[0])

    root_ids = {s.span_id for s in roots}
    true_roots = [s for s in roots if not s.parent_span_id or s.parent_span_id == s.span_id]
    main = min(true_roots or roots, key=_order_key)
    # The critical path follows tree edges only, so a broken cycle cannot loop it.
    tree_children = {k: [c for c in v if c.span_id not in root_ids] for k, v in children.items()}
    critical = _critical_spans(main.span_id, tree_children, by_id)

    nodes = []
    for span in ordered:
        depth, parent = placed[span.span_id]
        orphan = bool(span.parent_span_id) and span.parent_span_id not in by_id
        nodes.append(
            Node(
                span=span,
                depth=depth,
                parent_id=parent,
                orphan=orphan,
                offset_ms=(span.start_ns - start_ns) / _NS_PER_MS,
                duration_ms=(span.end_ns - span.start_ns) / _NS_PER_MS,
                critical=span.span_id in critical,
                category=category_of(span),
                segments=stage_segments(span, start_ns),
            )
        )
    return TraceTree(
        nodes=tuple(nodes), start_ns=start_ns, end_ns=end_ns, main_root_id=main.span_id
    )
