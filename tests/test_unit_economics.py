"""Unit economics end to end: spans through the real span writer, prices in the price book,
the real allocation (ledger.allocation.allocate_window), then mart_tasks and its views, checked
against numbers computed by hand. Real DuckDB files; nothing of ours is mocked."""

from __future__ import annotations

import hashlib
import itertools
import json
from datetime import UTC, date, datetime, timedelta

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from inferledger.core.storage import Storage
from inferledger.fixtures import BASE_NS
from ingest.outcome_parse import parse_outcomes_json
from ingest.outcome_writer import store_outcomes
from ingest.span_writer import decode_for_storage, insert_spans
from ledger import price_book as pb
from ledger.allocation import HOUR_NS, allocate_window
from ledger.deployments import learn_replicas, sync_configured
from ledger.marts import Refresher
from ledger.queries import Filters, QueryError, bind, run
from ledger.unit_economics import refresh_tasks_for_outcomes, refresh_tasks_window
from models.deployment_config import parse_deployments
from models.otlp import add_attribute

S = 1_000_000_000
H0 = BASE_NS // HOUR_NS * HOUR_NS  # 2026-05-28 20:00 UTC, a Thursday
DAY = date(2026, 5, 28)
WEEK_NS = 7 * 24 * HOUR_NS

# $ per 1M tokens (input, output), per call, per reviewer hour: small round numbers, so every
# expected cost below is a short sum.
PRICES = [
    ("model", "small-llm", "input_mtok", 1.0, None),
    ("model", "small-llm", "output_mtok", 2.0, None),
    ("model", "big-llm", "input_mtok", 10.0, None),
    ("model", "big-llm", "output_mtok", 30.0, None),
    ("service", "kb", "call", 0.001, "retrieval"),
    ("service", "search-api", "call", 0.01, "tools"),
    ("reviewer", "*", "hour", 36.0, None),
]


def trace_id(name: str) -> str:
    return hashlib.md5(name.encode()).hexdigest()


class Batch:
    """Spans as an instrumented app sends them: a SERVER root per attempt (the inferledger.*
    task attributes), CLIENT GenAI spans under it, retrieval and tool spans."""

    def __init__(self, service: str = "support-bot", instance: str | None = None) -> None:
        self.service_name = service
        self.req = ExportTraceServiceRequest()
        rs = self.req.resource_spans.add()
        add_attribute(rs.resource.attributes, "service.name", service)
        add_attribute(rs.resource.attributes, "deployment.environment.name", "prod")
        if instance is not None:
            add_attribute(rs.resource.attributes, "service.instance.id", instance)
        self.spans = rs.scope_spans.add().spans
        self._ids = itertools.count(1)

    def _span(
        self, trace: str, parent: bytes | None, name: str, start: float, end: float, t0: int
    ) -> Span:
        span = self.spans.add()
        span.trace_id = bytes.fromhex(trace_id(trace))
        key = f"{self.service_name}/{trace}/{next(self._ids)}"
        span.span_id = bytes.fromhex(trace_id(key)[:16])
        if parent is not None:
            span.parent_span_id = parent
        span.name = name
        span.start_time_unix_nano = t0 + round(start * S)
        span.end_time_unix_nano = t0 + round(end * S)
        return span

    def root(
        self,
        trace: str,
        start: float,
        end: float,
        *,
        task: str | None = None,
        attempt: int | None = None,
        outcome: str | None = None,
        review_s: float | None = None,
        error: bool = False,
        workflow: str = "answer-ticket",
        app: str = "support",
        route: str = "/answer",
        t0: int = H0,
    ) -> bytes:
        span = self._span(trace, None, f"POST {route}", start, end, t0)
        span.kind = Span.SPAN_KIND_SERVER
        attrs = [
            ("inferledger.app", app),
            ("inferledger.team", "cx"),
            ("inferledger.route", route),
            ("inferledger.workflow", workflow),
            ("inferledger.task.id", task),
            ("inferledger.attempt", attempt),
            ("inferledger.outcome", outcome),
            ("inferledger.review.seconds", review_s),
        ]
        for key, value in attrs:
            if value is not None:
                add_attribute(span.attributes, key, value)
        if error:
            span.status.code = Status.STATUS_CODE_ERROR
        return span.span_id

    def llm(
        self,
        trace: str,
        parent: bytes,
        start: float,
        end: float,
        model: str,
        tokens: tuple[int, int],
        *,
        error: bool = False,
        fallback: bool | None = None,
        t0: int = H0,
    ) -> bytes:
        span = self._span(trace, parent, f"chat {model}", start, end, t0)
        span.kind = Span.SPAN_KIND_CLIENT
        add_attribute(span.attributes, "gen_ai.operation.name", "chat")
        add_attribute(span.attributes, "gen_ai.request.model", model)
        add_attribute(span.attributes, "gen_ai.usage.input_tokens", tokens[0])
        add_attribute(span.attributes, "gen_ai.usage.output_tokens", tokens[1])
        if fallback is not None:
            add_attribute(span.attributes, "inferledger.fallback", fallback)
        if error:
            span.status.code = Status.STATUS_CODE_ERROR
        return span.span_id

    def service(
        self, trace: str, parent: bytes, start: float, end: float, key: str, *, t0: int = H0
    ) -> None:
        if key == "kb":
            span = self._span(trace, parent, "retrieval kb", start, end, t0)
            add_attribute(span.attributes, "gen_ai.operation.name", "retrieval")
            add_attribute(span.attributes, "gen_ai.data_source.id", key)
        else:
            span = self._span(trace, parent, f"execute_tool {key}", start, end, t0)
            add_attribute(span.attributes, "gen_ai.operation.name", "execute_tool")
            add_attribute(span.attributes, "gen_ai.tool.name", key)
        span.kind = Span.SPAN_KIND_CLIENT

    def store(self, storage: Storage) -> int:
        decoded = decode_for_storage(self.req.SerializeToString())
        return storage.write(lambda cur: insert_spans(cur, decoded))


def seed_prices(storage: Storage) -> None:
    for kind, subject, unit, price, stage in PRICES:
        pb.set_price(
            storage, kind, subject, unit, price, "2026-01-01",
            changed_by="test", source="cli", stage=stage,
        )  # fmt: skip


def allocate(storage: Storage, h0: int = H0, hours: int = 1) -> int:
    """The ledger's window refresh: allocation, then the tasks of the window."""

    def op(cur) -> int:
        allocate_window(cur, h0, h0 + hours * HOUR_NS)
        return refresh_tasks_window(cur, h0, h0 + hours * HOUR_NS)

    return storage.write(op)


def post(storage: Storage, *docs: dict) -> None:
    """Store decisions as POST /v1/outcomes does (the same parser and writer)."""
    body = json.dumps({"outcomes": list(docs)}).encode()
    store_outcomes(storage, parse_outcomes_json(body))


def task(storage: Storage, key: str) -> dict:
    rows = storage.query("select * from task_outcomes where task_key = ?", [key]).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


def page_query(
    storage: Storage,
    name: str,
    start: date = date(2026, 1, 1),
    end: date = date(2027, 1, 1),
    **kw: object,
) -> list[dict]:
    """A named query of the Unit economics page over the tasks that started on days
    [start, end) (the whole fixture by default); ``kw``: filters (policy, app, ...) and dim."""
    fields = {"environment", "team", "app", "route", "model", "policy"}
    filters = Filters(
        datetime.combine(start, datetime.min.time(), UTC),
        datetime.combine(end, datetime.min.time(), UTC),
        **{k: v for k, v in kw.items() if k in fields},
    )
    extra = {k: v for k, v in kw.items() if k not in fields}
    return run(storage, name, filters, **extra).to_pylist()


def economics(storage: Storage) -> dict:
    rows = storage.query(
        "select * from outcome_economics where day = ? and workflow = 'answer-ticket'", [DAY]
    ).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


# ---------------------------------------------------------------- the worked example
def worked_example(storage: Storage) -> None:
    """docs/unit-economics.md's worked example: five tasks of one route in one hour."""
    seed_prices(storage)
    b = Batch()
    # ticket-1, attempt 1 fails: retrieval 0.001, a failed small-llm call 0.0014
    r = b.root("t1-a", 60, 70, task="ticket-1", attempt=1, error=True)
    b.service("t1-a", r, 61, 61.5, "kb")
    b.llm("t1-a", r, 62, 65, "small-llm", (1000, 200), error=True)
    # attempt 2: retrieval 0.001, small-llm fails again (0.0016), the fallback to big-llm
    # (0.019) and a tool call (0.01) succeed; the span says accepted after 2 s of review
    r = b.root("t1-b", 100, 130, task="ticket-1", attempt=2, outcome="accepted", review_s=2.0)
    b.service("t1-b", r, 101, 101.5, "kb")
    b.llm("t1-b", r, 102, 104, "small-llm", (1000, 300), error=True)
    b.llm("t1-b", r, 105, 110, "big-llm", (1000, 300), fallback=True)
    b.service("t1-b", r, 111, 112, "search-api")
    # ticket-2: accepted (span), retrieval 0.001 + small-llm 0.0012
    r = b.root("t2", 200, 210, task="ticket-2", outcome="accepted")
    b.service("t2", r, 201, 201.5, "kb")
    b.llm("t2", r, 202, 205, "small-llm", (1000, 100))
    # ticket-3: rejected (span), small-llm 0.003
    r = b.root("t3", 300, 310, task="ticket-3", outcome="rejected")
    b.llm("t3", r, 301, 305, "small-llm", (2000, 500))
    # a trace with no task id: its only call fails (0.001), no outcome -> failed
    r = b.root("t4", 400, 405)
    b.llm("t4", r, 401, 402, "small-llm", (1000, 0), error=True)
    # ticket-5: no outcome yet -> pending, small-llm 0.0007
    r = b.root("t5", 500, 505, task="ticket-5")
    b.llm("t5", r, 501, 503, "small-llm", (500, 100))
    assert b.store(storage) == 17
    # the reviewer's decisions, posted: the later one (corrected, 3 s of review) wins over the
    # span's "accepted" and over the earlier post
    post(
        storage,
        {"task_id": "ticket-1", "outcome": "accepted", "review_seconds": 10,
         "decided_at": "2026-05-28T20:30:00Z"},
        {"task_id": "ticket-1", "outcome": "corrected", "review_seconds": 3,
         "decided_at": "2026-05-28T21:00:00Z"},
    )  # fmt: skip
    assert allocate(storage) == 5


def test_a_task_with_a_retry_a_fallback_and_a_review(storage: Storage) -> None:
    worked_example(storage)
    t1 = task(storage, "ticket-1")
    expected = {
        "workflow": "answer-ticket",
        "app": "support",
        "team": "cx",
        "route": "/answer",
        "environment": "prod",
        "first_model": "small-llm",
        "final_model": "big-llm",
        "day": DAY,
        "week": date(2026, 5, 25),
        "traces": 2,
        "attempts": 2,
        "retried": True,
        "llm_calls": 3,
        "failed_calls": 2,
        "fallback_calls": 1,
        "unpriced_calls": 0,
        "service_calls": 3,
        "outcome": "corrected",
        "outcome_source": "posted",
        "decided_at": datetime(2026, 5, 28, 21, tzinfo=UTC),
        "is_accepted": True,
        "review_s": 3.0,
        "input_tokens": 3000,
        "output_tokens": 800,
    }
    assert {k: t1[k] for k in expected} == expected
    costs = {
        "llm_cost": 0.0014 + 0.0016 + 0.019,
        "retrieval_cost": 0.002,
        "tools_cost": 0.01,
        "review_cost": 3 / 3600 * 36,  # the posted 3 s, not the span's 2 s
        "total_cost": 0.064,
        "retry_cost": 0.0016 + 0.019 + 0.001 + 0.01,  # everything of attempt 2 but review
        "fallback_cost": 0.019,
        # failed calls, and all of attempt 1 (its root span failed): its retrieval too
        "failed_cost": 0.0014 + 0.001 + 0.0016,
        "waste_cost": 0.004,
        "retry_share": 0.0316 / 0.064,
        "fallback_share": 0.019 / 0.064,
        "review_share": 0.03 / 0.064,
        "total_cost_configured": 0.064,  # hosted calls have no idle to share
    }
    assert {k: t1[k] for k in costs} == pytest.approx(costs, rel=1e-12)
    assert t1["first_start"] == datetime.fromtimestamp((H0 + 61 * S) / S, UTC)
    assert t1["last_end"] == datetime.fromtimestamp((H0 + 112 * S) / S, UTC)


def test_outcomes_waste_and_cost_per_accepted_of_the_route(storage: Storage) -> None:
    worked_example(storage)
    outcomes = dict(storage.fetchall("select task_key, outcome from mart_tasks"))
    trace4 = "trace:" + trace_id("t4")
    assert outcomes == {
        "ticket-1": "corrected",
        "ticket-2": "accepted",
        "ticket-3": "rejected",
        trace4: "failed",
        "ticket-5": "pending",
    }
    assert task(storage, "ticket-2")["outcome_source"] == "span"
    assert task(storage, trace4)["outcome_source"] is None
    assert task(storage, "ticket-3")["waste_cost"] == pytest.approx(0.003)
    assert task(storage, "ticket-5")["waste_cost"] == 0

    e = economics(storage)
    counts = ("tasks", "accepted", "corrected", "rejected", "failed", "pending")
    assert [e[k] for k in counts] == [5, 1, 1, 1, 1, 1]
    assert e["accepted_outcomes"] == 2
    assert e["retried_tasks"] == 1
    assert e["llm_calls"] == 7
    assert e["tokens"] == 9000
    total = 0.064 + 0.0022 + 0.003 + 0.001 + 0.0007
    expected = {
        "total_cost": total,
        "total_cost_configured": total,
        "cost_per_accepted": total / 2,  # accepted + corrected
        "cost_per_accepted_strict": total / 1,
        "cost_per_accepted_configured": total / 2,
        "acceptance_rate": 2 / 4,  # of the decided tasks
        "waste_cost": 0.004 + 0.003 + 0.001,
        "waste_share": 0.008 / total,
        "retry_share": 0.0316 / total,
        "fallback_share": 0.019 / total,
        "review_share": 0.03 / total,
        "cost_per_request": 0.0279 / 7,
        "cost_per_1m_tokens": 0.0279 / 9000 * 1e6,
    }
    assert {k: e[k] for k in expected} == pytest.approx(expected, rel=1e-12)


def test_a_late_outcome_changes_the_task_and_the_economics(storage: Storage) -> None:
    worked_example(storage)
    since = storage.scalar("select current_timestamp")
    # ticket-2 is rejected after all; ticket-5 is accepted by a decision that names its trace
    post(
        storage,
        {"task_id": "ticket-2", "outcome": "rejected", "decided_at": "2026-05-29T09:00:00Z"},
        {"trace_id": trace_id("t5"), "outcome": "accepted", "decided_at": "2026-05-29T09:00:00Z"},
    )
    assert task(storage, "ticket-2")["outcome"] == "accepted"  # not refreshed yet
    assert storage.write(lambda cur: refresh_tasks_for_outcomes(cur, since)) == 2
    t2, t5 = task(storage, "ticket-2"), task(storage, "ticket-5")
    assert (t2["outcome"], t2["outcome_source"]) == ("rejected", "posted")
    assert (t5["outcome"], t5["outcome_source"]) == ("accepted", "posted")
    assert t2["waste_cost"] == pytest.approx(0.0022)
    e = economics(storage)
    assert [e[k] for k in ("accepted", "corrected", "rejected", "pending")] == [1, 1, 2, 0]
    total = 0.0709
    assert e["cost_per_accepted"] == pytest.approx(total / 2)
    assert e["waste_cost"] == pytest.approx(0.008 + 0.0022)
    assert e["acceptance_rate"] == pytest.approx(2 / 5)
    # only the tasks those outcomes name were touched
    assert storage.write(lambda cur: refresh_tasks_for_outcomes(cur, since)) == 2
    later = datetime.now(UTC) + timedelta(hours=1)
    assert storage.write(lambda cur: refresh_tasks_for_outcomes(cur, later)) == 0


def test_an_outcome_posted_before_its_spans_joins_when_they_arrive(storage: Storage) -> None:
    seed_prices(storage)
    # a decision that names only the trace, posted before any span of it
    post(storage, {"trace_id": trace_id("t6"), "outcome": "accepted", "review_seconds": 60})
    assert storage.write(lambda cur: refresh_tasks_for_outcomes(cur, None)) == 0
    b = Batch()
    r = b.root("t6", 10, 20, task="ticket-6", outcome="rejected")
    b.llm("t6", r, 11, 15, "small-llm", (1000, 100))
    b.store(storage)
    assert allocate(storage) == 1
    t6 = task(storage, "ticket-6")
    # the post wins over the span's outcome, and its review time is the one priced
    assert (t6["outcome"], t6["outcome_source"]) == ("accepted", "posted")
    assert t6["review_cost"] == pytest.approx(60 / 3600 * 36)
    assert t6["total_cost"] == pytest.approx(0.0012 + 0.6)


def test_the_refresher_recomputes_tasks_of_late_outcomes(storage: Storage) -> None:
    """The same through ledger.marts.Refresher, which calls both refreshes."""
    seed_prices(storage)
    b = Batch()
    r = b.root("t7", 10, 20, task="ticket-7", outcome="accepted")
    b.llm("t7", r, 11, 15, "small-llm", (1000, 100))
    b.store(storage)
    refresher = Refresher(storage)
    refresher.refresh(trigger="test")
    assert task(storage, "ticket-7")["outcome"] == "accepted"
    post(storage, {"task_id": "ticket-7", "outcome": "rejected", "review_seconds": 30})
    refresher.refresh(trigger="test")
    t7 = task(storage, "ticket-7")
    assert (t7["outcome"], t7["review_cost"]) == ("rejected", pytest.approx(0.3))
    assert t7["waste_cost"] == pytest.approx(0.0012 + 0.3)


def test_a_task_across_windows_is_recomputed_whole(storage: Storage) -> None:
    """A retry eight hours after the first attempt (beyond the allocation's look-back): the
    second window's refresh still counts the first attempt's calls, found through the task's
    known range."""
    seed_prices(storage)
    b = Batch()
    r = b.root("t8-a", 10, 20, task="ticket-8", attempt=1, error=True)
    b.llm("t8-a", r, 11, 15, "small-llm", (1000, 100), error=True)
    r = b.root("t8-b", 10, 20, task="ticket-8", attempt=2, outcome="accepted", t0=H0 + 8 * HOUR_NS)
    b.llm("t8-b", r, 11, 15, "big-llm", (1000, 100), t0=H0 + 8 * HOUR_NS)
    b.store(storage)
    assert allocate(storage, H0) == 1
    assert task(storage, "ticket-8")["outcome"] == "failed"
    assert allocate(storage, H0 + 8 * HOUR_NS) == 1
    t8 = task(storage, "ticket-8")
    assert (t8["outcome"], t8["attempts"], t8["llm_calls"]) == ("accepted", 2, 2)
    assert t8["total_cost"] == pytest.approx(0.0012 + 0.013)
    assert t8["retry_share"] == pytest.approx(0.013 / 0.0142)
    assert t8["waste_cost"] == pytest.approx(0.0012)


# ---------------------------------------------------------------- self-hosted calls and idle
def test_self_hosted_calls_carry_their_idle_share(storage: Storage) -> None:
    """One request on an H200 replica ($4/GPU-hour) up the whole hour, idle shared evenly: the
    request's 5 s of prefill and decode cost 5/3600 x $4, the rest of the hour is idle and all
    of it goes to the one request under the deployment's policy."""
    pb.seed_if_empty(storage)  # H200 at $4.00 per GPU-hour
    sync_configured(
        storage,
        parse_deployments(
            [{"name": "llama", "gpu_type": "H200", "gpus_per_replica": 1, "idle_policy": "even"}]
        ),
    )
    rows = [
        (datetime.fromtimestamp((H0 + k * 60 * S) / S, UTC), "llama-0", "vllm", "llama")
        for k in range(60)
    ]
    storage.write(
        lambda cur: cur.executemany(
            "insert into scrapes (ts, target, kind, deployment, url, up, duration_s, samples) "
            "values (?, ?, ?, ?, 'http://llama-0:8000/metrics', true, 0.01, 10)",
            rows,
        )
    )
    learn_replicas(storage)
    app = Batch()
    r = app.root("t9", 100, 110, task="ticket-9", outcome="accepted")
    client = app.llm("t9", r, 101, 106, "llama-8b", (1000, 101))
    app.store(storage)
    engine = Batch(service="vllm", instance="llama-0")
    span = engine._span("t9", client, "llm_request", 101, 106, H0)
    span.kind = Span.SPAN_KIND_SERVER
    for key, value in [
        ("gen_ai.usage.prompt_tokens", 1000),
        ("gen_ai.usage.completion_tokens", 101),
        ("gen_ai.latency.time_in_queue", 0.0),
        ("gen_ai.latency.time_to_first_token", 1.0),
        ("gen_ai.latency.e2e", 5.0),
    ]:
        add_attribute(span.attributes, key, value)
    engine.store(storage)
    allocate(storage)
    t9 = task(storage, "ticket-9")
    usage = 5 / 3600 * 4.0
    assert t9["llm_cost"] == pytest.approx(usage, rel=1e-9)
    assert t9["idle_configured"] == pytest.approx(4.0 - usage, rel=1e-9)
    assert t9["idle_even"] == pytest.approx(4.0 - usage, rel=1e-9)
    assert t9["total_cost"] == pytest.approx(usage, rel=1e-9)
    assert t9["total_cost_configured"] == pytest.approx(4.0, rel=1e-9)
    e = page_query(storage, "economics_by_key", dim="model", policy="configured")
    assert [r["key"] for r in e] == ["llama-8b"]  # by the task's final model
    assert e[0]["cost_per_accepted"] == pytest.approx(4.0, rel=1e-9)


# ---------------------------------------------------------------- false economy
def false_economy_fixture(storage: Storage) -> None:
    """Two weeks. /summarize moves from big-llm to small-llm: a request costs a fifth, but
    acceptance falls from 16 of 20 to 2 of 20. /classify gets cheaper and stays as good, and
    /rare collapses too but on 5 tasks a week (noise, not a finding)."""
    seed_prices(storage)
    b = Batch()
    plan = [
        # route, workflow, week, model, (in, out) tokens, tasks, accepted
        ("/summarize", "summarize", 0, "big-llm", (400, 200), 20, 16),
        ("/summarize", "summarize", 1, "small-llm", (1000, 500), 20, 2),
        ("/classify", "classify", 0, "big-llm", (400, 200), 20, 18),
        ("/classify", "classify", 1, "small-llm", (1000, 500), 20, 18),
        ("/rare", "rare", 0, "big-llm", (400, 200), 5, 5),
        ("/rare", "rare", 1, "small-llm", (1000, 500), 5, 0),
    ]
    for route, workflow, week, model, tokens, n, accepted in plan:
        for i in range(n):
            name = f"{route}-{week}-{i}"
            outcome = "accepted" if i < accepted else "rejected"
            t0 = H0 + week * WEEK_NS
            r = b.root(name, 10 * i, 10 * i + 5, task=name, outcome=outcome, workflow=workflow,
                       app="docs", route=route, t0=t0)  # fmt: skip
            b.llm(name, r, 10 * i + 1, 10 * i + 4, model, tokens, t0=t0)
    # a pending task in the second week changes nothing: decided tasks only
    r = b.root("pending", 900, 905, task="pending", workflow="summarize", app="docs",
               route="/summarize", t0=H0 + WEEK_NS)  # fmt: skip
    b.llm("pending", r, 901, 904, "small-llm", (1000, 500), t0=H0 + WEEK_NS)
    b.store(storage)
    allocate(storage, H0)
    allocate(storage, H0 + WEEK_NS)


def test_a_cheaper_model_whose_acceptance_collapses_is_one_finding(storage: Storage) -> None:
    false_economy_fixture(storage)
    rows = storage.query("select * from false_economy_findings").to_dicts()
    assert len(rows) == 1, rows
    f = rows[0]
    expected = {
        "kind": "model_route",
        "scope": "route",
        "workflow": "summarize",
        "app": "docs",
        "route": "/summarize",
        "week": date(2026, 6, 1),
        "week_before": date(2026, 5, 25),
        "model_before": "big-llm",
        "model_after": "small-llm",
        "tasks_before": 20,
        "tasks_after": 21,
        "decided_before": 20,
        "decided_after": 20,
        "accepted_before": 16,
        "accepted_after": 2,
    }
    assert {k: f[k] for k in expected} == expected
    numbers = {
        "accepted_rate_before": 0.8,
        "accepted_rate_after": 0.1,
        "cost_per_request_before": 0.01,  # 400 x $10 + 200 x $30 per 1M
        "cost_per_request_after": 0.002,  # 1000 x $1 + 500 x $2 per 1M
        "cost_per_request_change_pct": -80.0,
        "cost_per_1m_tokens_before": 0.01 / 600 * 1e6,
        "cost_per_1m_tokens_after": 0.002 / 1500 * 1e6,
        "cost_per_1m_tokens_change_pct": -92.0,
        "cost_per_accepted_before": 20 * 0.01 / 16,
        "cost_per_accepted_after": 20 * 0.002 / 2,  # the pending task is left out
        "cost_per_accepted_change_pct": 60.0,
    }
    assert {k: f[k] for k in numbers} == pytest.approx(numbers, rel=1e-9)
    assert f["explanation"] == (
        "Route /summarize (workflow summarize, app docs), week of 2026-06-01: moving from "
        "big-llm to small-llm cut cost per request by 80.0% but cost per accepted outcome "
        "rose by 60.0% (acceptance 80.0% -> 10.0%)."
    )
    # the Unit economics page lists the findings whose week overlaps its range
    assert len(page_query(storage, "economics_false_economy", start=date(2026, 6, 1))) == 1
    assert len(page_query(storage, "economics_false_economy", end=date(2026, 6, 1))) == 0


# ---------------------------------------------------------------- contracts
def test_contracts_hold_and_every_cost_lands_in_exactly_one_task(storage: Storage) -> None:
    worked_example(storage)
    false_economy_fixture(storage)
    assert storage.scalar("select count(*) from mart_tasks") == 5 + 91
    assert (
        storage.scalar(
            "select count(*) - count(distinct task_key) + count(*) filter (where task_key is null) "
            "from task_outcomes"
        )
        == 0
    )
    bad = storage.fetchall(
        """
        select task_key from task_outcomes
        where abs(total_cost - (llm_cost + retrieval_cost + tools_cost + review_cost)) > 1e-12
            or not (retry_share between 0 and 1 and fallback_share between 0 and 1
                and review_share between 0 and 1)
            or not (waste_cost between 0 and total_cost + 1e-12)
            or failed_cost > total_cost + 1e-12
        """
    )
    assert bad == []
    shares = storage.fetchall(
        """
        select count(*) from outcome_economics
        where not (coalesce(retry_share, 0) between 0 and 1
            and coalesce(fallback_share, 0) between 0 and 1
            and coalesce(review_share, 0) between 0 and 1
            and coalesce(waste_share, 0) between 0 and 1
            and coalesce(acceptance_rate, 0) between 0 and 1)
            or tasks <> accepted + corrected + rejected + failed + pending
        """
    )
    assert shares == [(0,)]
    # conservation: the tasks' costs are the marts' costs, nothing lost or counted twice
    tasks = storage.fetchall(
        "select sum(llm_cost), sum(retrieval_cost + tools_cost), sum(review_cost) from mart_tasks"
    )[0]
    marts = storage.fetchall(
        """
        select
            (select sum(prefill_cost + decode_cost) from mart_requests),
            (select sum(cost) from mart_service_calls),
            (select sum(cost) from mart_reviews)
        """
    )[0]
    assert tasks == pytest.approx(marts, rel=1e-12)
    # refreshing again changes nothing
    before = storage.query("select * exclude (refreshed_at) from mart_tasks order by task_key")
    allocate(storage, H0)
    after = storage.query("select * exclude (refreshed_at) from mart_tasks order by task_key")
    assert before.equals(after)


#: The sums outcome_economics and economics_by_key share; the ratios are recomputed from them.
SUMS = ("tasks", "accepted", "corrected", "rejected", "failed", "pending", "total_cost")
SUMS += ("waste_cost", "retry_cost", "fallback_cost", "review_cost")


def test_the_page_queries_match_the_view(storage: Storage) -> None:
    worked_example(storage)
    false_economy_fixture(storage)
    view = storage.query("select * from outcome_economics").to_dicts()
    assert len(view) == 7
    for dim in ("workflow", "app", "route"):
        rolled: dict[str, dict[str, float]] = {}
        for v in view:
            into = rolled.setdefault(v[dim] or "(none)", dict.fromkeys(SUMS, 0))
            for k in SUMS:
                into[k] += v[k]
        by_key = {r["key"]: r for r in page_query(storage, "economics_by_key", dim=dim)}
        assert set(by_key) == set(rolled), dim
        for key, sums in rolled.items():
            q = by_key[key]
            assert {k: q[k] for k in SUMS} == pytest.approx(sums, rel=1e-12), (dim, key)
            outcomes = sums["accepted"] + sums["corrected"]
            decided = sums["tasks"] - sums["pending"]
            expected = {
                "accepted_outcomes": outcomes,
                "cost_per_accepted": sums["total_cost"] / outcomes if outcomes else None,
                "acceptance_rate": outcomes / decided if decided else None,
                "waste_share": sums["waste_cost"] / sums["total_cost"],
                "retry_share": sums["retry_cost"] / sums["total_cost"],
                "fallback_share": sums["fallback_cost"] / sums["total_cost"],
                "review_share": sums["review_cost"] / sums["total_cost"],
            }
            for k, x in expected.items():
                assert q[k] == (x if x is None else pytest.approx(x, rel=1e-12)), (dim, key, k)
    totals = page_query(storage, "economics_totals")[0]
    assert totals["tasks"] == sum(v["tasks"] for v in view)
    assert totals["total_cost"] == pytest.approx(sum(v["total_cost"] for v in view), rel=1e-12)
    # the time range and the filters are bound parameters
    docs = page_query(
        storage, "economics_by_key", DAY, DAY + timedelta(days=1), app="docs", dim="route"
    )
    assert sorted((r["key"], r["tasks"], r["accepted"]) for r in docs) == [
        ("/classify", 20, 18),
        ("/rare", 5, 5),
        ("/summarize", 20, 16),
    ]
    assert page_query(storage, "economics_by_key", team="nobody", dim="app") == []
    assert page_query(storage, "economics_totals", team="nobody")[0]["tasks"] == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda s: bind("economics_by_key", Filters.last(1), dim="app; drop table mart_tasks"),
            "dimension must be one of",
        ),
        (lambda s: page_query(s, "economics_by_key", dim="cost"), "dimension must be one of"),
        (lambda s: page_query(s, "economics_totals", policy="shared"), "idle policy must be one"),
    ],
)
def test_the_page_queries_refuse_unknown_columns(storage: Storage, call, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        call(storage)
