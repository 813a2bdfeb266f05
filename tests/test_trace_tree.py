"""The span tree of a trace (models/trace_tree.py) on hand-made spans: order, depth, offsets,
orphans, broken parent cycles, the critical path and engine stages."""

from __future__ import annotations

import random

import pytest

from models.trace_tree import (
    Category,
    Span,
    build_tree,
    category_of,
    parse_trace_id,
    stage_segments,
)

MS = 1_000_000  # ns
T0 = 1_796_000_000_000_000_000


def span(
    span_id: str,
    parent: str | None,
    start_ms: float,
    end_ms: float,
    name: str | None = None,
    **kw: object,
) -> Span:
    return Span(
        span_id=span_id,
        parent_span_id=parent,
        name=name or span_id,
        start_ns=T0 + round(start_ms * MS),
        end_ns=T0 + round(end_ms * MS),
        **kw,  # type: ignore[arg-type]
    )


def ids(tree) -> list[str]:
    return [n.span.span_id for n in tree.nodes]


def test_children_follow_their_parent_in_start_order_with_depth_and_offsets() -> None:
    spans = [
        span("c2", "root", 50, 90),
        span("g1", "c1", 15, 30),
        span("root", None, 0, 100, kind=2),
        span("c1", "root", 10, 40),
        span("g0", "c1", 12, 14),
    ]
    tree = build_tree(spans)
    assert ids(tree) == ["root", "c1", "g0", "g1", "c2"]
    assert [n.depth for n in tree.nodes] == [0, 1, 2, 2, 1]
    assert [n.parent_id for n in tree.nodes] == [None, "root", "c1", "c1", "root"]
    assert [n.offset_ms for n in tree.nodes] == [0, 10, 12, 15, 50]
    assert [n.duration_ms for n in tree.nodes] == [100, 30, 2, 15, 40]
    assert tree.nodes[1].duration_s == 0.03
    assert tree.duration_ms == 100 and tree.duration_s == 0.1
    assert tree.main_root_id == "root" and tree.orphans == 0


def test_the_order_does_not_depend_on_the_input_order() -> None:
    spans = [
        span("root", None, 0, 100),
        *(span(f"c{i}", "root", i * 5, i * 5 + 3) for i in range(10)),
        span("tie-b", "root", 20, 30),  # same start as c4: end, then id decide
        span("tie-a", "root", 20, 30),
    ]
    expected = ids(build_tree(spans))
    assert expected.index("tie-a") < expected.index("tie-b")
    rng = random.Random(7)
    for _ in range(20):
        rng.shuffle(spans)
        assert ids(build_tree(spans)) == expected


def test_a_span_whose_parent_is_missing_becomes_a_flagged_root() -> None:
    spans = [
        span("root", None, 0, 100),
        span("a", "root", 10, 20),
        span("lost", "not-ingested", 30, 60),
        span("lost-child", "lost", 35, 40),
    ]
    tree = build_tree(spans)
    assert ids(tree) == ["root", "a", "lost", "lost-child"]
    lost = tree.node("lost")
    assert lost is not None and lost.orphan and lost.parent_id is None and lost.depth == 0
    child = tree.node("lost-child")
    assert child is not None and child.depth == 1 and not child.orphan
    assert tree.orphans == 1
    assert [n.span.span_id for n in tree.roots] == ["root", "lost"]
    # the true root is shown first even when an orphan started earlier
    tree = build_tree([*spans, span("early-orphan", "gone", -5, 1)])
    assert tree.main_root_id == "root"
    assert ids(tree)[0] == "early-orphan"


def test_only_orphans_the_earliest_is_the_main_root() -> None:
    tree = build_tree([span("b", "x", 5, 9), span("a", "y", 1, 3)])
    assert tree.main_root_id == "a"
    assert all(n.orphan and n.depth == 0 for n in tree.nodes)


def test_parent_cycles_are_broken_so_every_span_appears_once() -> None:
    spans = [
        span("root", None, 0, 100),
        span("a", "c", 10, 50),  # a -> c -> b -> a: no way in from a root
        span("b", "a", 20, 40),
        span("c", "b", 30, 35),
        span("self", "self", 60, 70),  # its own parent
        span("under-a", "a", 12, 14),
    ]
    tree = build_tree(spans)
    assert sorted(ids(tree)) == sorted(s.span_id for s in spans)
    assert len(ids(tree)) == len(spans)
    # the cycle is broken at its earliest span, which becomes a root
    a = tree.node("a")
    assert a is not None and a.parent_id is None and a.depth == 0
    assert tree.node("b").parent_id == "a" and tree.node("c").parent_id == "b"  # type: ignore[union-attr]
    assert tree.node("self").parent_id is None  # type: ignore[union-attr]
    for node in tree.nodes:  # a parent always comes before its children
        if node.parent_id is not None:
            assert ids(tree).index(node.parent_id) < ids(tree).index(node.span.span_id)
    assert tree.main_root_id == "root"


def test_a_duplicate_span_id_keeps_its_first_record() -> None:
    tree = build_tree([span("r", None, 0, 10, name="first"), span("r", None, 0, 99, name="again")])
    assert len(tree.nodes) == 1 and tree.nodes[0].span.name == "first"


def test_no_spans_no_tree() -> None:
    tree = build_tree([])
    assert tree.nodes == () and tree.main_root is None and tree.roots == ()


def test_the_critical_path_follows_the_last_finishing_child_back_in_time() -> None:
    spans = [
        span("root", None, 0, 100),
        span("retrieve", "root", 1, 20),
        span("llm-fast", "root", 21, 40),  # parallel with llm-slow, finishes first: not critical
        span("llm-slow", "root", 22, 80),
        span("engine", "llm-slow", 23, 79),
        span("tool", "root", 82, 98),
        span("warmup", "root", 0.5, 10),  # overlaps retrieve, which ends later
    ]
    tree = build_tree(spans)
    critical = {n.span.span_id for n in tree.nodes if n.critical}
    assert critical == {"root", "tool", "llm-slow", "engine", "retrieve"}


def test_a_child_ending_after_its_parent_is_capped_not_lost() -> None:
    # clock skew: the engine's span ends 2 ms after the app's call
    tree = build_tree([span("call", None, 0, 50), span("engine", "call", 1, 52)])
    assert all(n.critical for n in tree.nodes)


def test_engine_spans_split_into_queue_prefill_and_decode() -> None:
    engine = span("e", "c", 100, 1100, name="llm_request", queue_s=0.1, ttft_s=0.3)
    segs = stage_segments(engine, T0)
    assert [(s.stage, s.offset_ms, s.duration_ms) for s in segs] == [
        ("queue", 100, 100),
        ("prefill", 200, 200),
        ("decode", 400, 700),
    ]
    # no queue time: no queue segment; latencies past the span's end are clamped to it
    segs = stage_segments(span("e", None, 0, 100, queue_s=0.0, ttft_s=0.5), T0)
    assert [(s.stage, s.offset_ms, s.duration_ms) for s in segs] == [("prefill", 0, 100)]
    # an engine span without its latency set, and any other span: no segments
    assert stage_segments(span("e", None, 0, 10, name="llm_request"), T0) == ()
    assert stage_segments(span("x", None, 0, 10, operation="chat"), T0) == ()
    tree = build_tree([span("c", None, 0, 1200, operation="chat"), engine])
    node = tree.node("e")
    assert node is not None and node.category is Category.ENGINE
    assert node.segments == stage_segments(engine, tree.start_ns)
    assert [s.stage for s in node.segments] == ["queue", "prefill", "decode"]


@pytest.mark.parametrize(
    ("kw", "category"),
    [
        ({"name": "llm_request"}, Category.ENGINE),
        ({"ttft_s": 0.1}, Category.ENGINE),
        ({"operation": "chat"}, Category.LLM_CALL),
        ({"operation": "embeddings"}, Category.LLM_CALL),
        ({"operation": "retrieval"}, Category.RETRIEVAL),
        ({"stage": "retrieval", "operation": "embeddings"}, Category.RETRIEVAL),
        ({"operation": "execute_tool"}, Category.TOOLS),
        ({"stage": "tools"}, Category.TOOLS),
        ({"kind": 2, "name": "POST /answer"}, Category.SERVER),
        ({"kind": 1}, Category.OTHER),
    ],
)
def test_span_categories(kw: dict, category: Category) -> None:
    assert category_of(span("s", None, 0, 1, **kw)) == category


def test_from_row_reads_the_trace_spans_columns() -> None:
    row = {
        "span_id": "b7ad6b7169203331",
        "parent_span_id": "",
        "name": "llm_request",
        "kind": 2,
        "service_name": "vllm",
        "start_ns": T0,
        "end_ns": T0 + 5 * MS,
        "status_code": 2,
        "stage": None,
        "gen_ai_operation": None,
        "request_model": "m",
        "input_tokens": 10,
        "output_tokens": 3,
        "latency_queue_s": 0.001,
        "latency_ttft_s": 0.002,
        "extra": "ignored",
    }
    s = Span.from_row(row)
    assert s.parent_span_id is None and s.failed and s.is_engine and s.service == "vllm"
    assert (s.queue_s, s.ttft_s, s.input_tokens, s.output_tokens) == (0.001, 0.002, 10, 3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4bf92f3577b34da6a3ce929d0e0e4736", "4bf92f3577b34da6a3ce929d0e0e4736"),
        ("4BF92F3577B34DA6A3CE929D0E0E4736", "4bf92f3577b34da6a3ce929d0e0e4736"),
        ("4bf92f3577b34da6a3ce929d0e0e473", None),  # 31
        ("4bf92f3577b34da6a3ce929d0e0e47361", None),  # 33
        ("4bf92f3577b34da6a3ce929d0e0e473g", None),
        ("4bf92f3577b34da6a3ce929d0e0e473\n", None),
        ("' or 1=1 --", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_trace_id(text: str | None, expected: str | None) -> None:
    assert parse_trace_id(text) == expected
