"""Late outcomes end to end: POST /v1/outcomes on a real server, spans through /v1/traces,
the task_outcome_decisions view, and `inferledger outcomes import` in both modes."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from inferledger.cli import main
from inferledger.core.errors import QueueFullError
from inferledger.core.storage import Storage
from inferledger.fixtures import BASE_NS
from models.otlp import add_attribute
from tests.conftest import LiveService, free_port

JS = {"Content-Type": "application/json"}
TRACE_A = "0af7651916cd43dd8448eb211c80319c"
TRACE_B = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_C = "5b8efff798038103d269b633813fc60c"


@pytest.fixture(scope="module")
def shared_live(tmp_path_factory) -> Iterator[LiveService]:
    """One server for the many cases that must write nothing (each checks that it did not):
    starting a server per case would take most of this file's time."""
    from inferledger.server import Service
    from inferledger.settings import load_settings

    port = free_port()
    db = tmp_path_factory.mktemp("outcomes") / "shared.duckdb"
    service = Service(load_settings(env={}).replace(db=str(db), port=port)).start()
    thread = threading.Thread(
        target=service.serve_forever, kwargs={"install_signal_handlers": False}, daemon=True
    )
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if requests.get(url + "/readyz", timeout=1).ok:
                break
        except (requests.ConnectionError, requests.Timeout):
            time.sleep(0.05)
    yield LiveService(service, thread, url)
    service.request_stop()
    thread.join(30)


def post(live, doc: object, headers: dict[str, str] | None = None) -> requests.Response:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return requests.post(live.url + "/v1/outcomes", data=body, headers=headers or JS, timeout=30)


def stored(live) -> list[dict]:
    return live.storage.query("select * from outcomes order by outcome_id").to_dicts()


def decisions(live) -> dict[str, dict]:
    rows = live.storage.query("select * from task_outcome_decisions").to_dicts()
    return {row["task_key"]: row for row in rows}


def send_spans(live, spans: list[tuple[str, str | None]]) -> None:
    """One app span per (trace id, task id or None), through the real /v1/traces."""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    add_attribute(rs.resource.attributes, "service.name", "support-bot")
    ss = rs.scope_spans.add()
    for i, (trace_id, task_id) in enumerate(spans):
        span = ss.spans.add()
        span.trace_id = bytes.fromhex(trace_id)
        span.span_id = (i + 1).to_bytes(8, "big")
        span.name = "POST /answer"
        span.kind = Span.SPAN_KIND_SERVER
        span.start_time_unix_nano = BASE_NS + i * 1_000_000
        span.end_time_unix_nano = span.start_time_unix_nano + 500_000_000
        if task_id is not None:
            add_attribute(span.attributes, "inferledger.task.id", task_id)
    resp = requests.post(
        live.url + "/v1/traces",
        data=req.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.content


# --------------------------------------------------------------------------- posting
def test_single_and_batch_posts_are_stored(live) -> None:
    resp = post(
        live,
        {
            "task_id": "task-1",
            "outcome": "Accepted",
            "review_seconds": 42,
            "reviewer": "ana",
            "score": 0.9,
            "decided_at": "2026-05-28T14:03:00+02:00",
        },
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.json() == {"inserted": 1, "duplicates": 0}

    resp = post(
        live,
        {
            "outcomes": [
                {"id": "rev-7", "task_id": "task-2", "outcome": "rejected"},
                {"trace_id": TRACE_A.upper(), "outcome": "corrected", "review_seconds": 0},
            ]
        },
    )
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"inserted": 2, "duplicates": 0}

    rows = {row["task_id"] or row["trace_id"]: row for row in stored(live)}
    assert set(rows) == {"task-1", "task-2", TRACE_A}
    one = rows["task-1"]
    assert (one["outcome"], one["review_s"], one["reviewer"], one["score"]) == (
        "accepted",
        42.0,
        "ana",
        0.9,
    )
    assert one["decided_at"].isoformat().startswith("2026-05-28T12:03:00")
    assert one["outcome_id"].startswith("sha256:") and one["source"] == "api"
    assert rows["task-2"]["outcome_id"] == "rev-7"
    # not given: dated when received
    assert rows["task-2"]["decided_at"] == rows["task-2"]["received_at"]
    assert rows[TRACE_A]["trace_id"] == TRACE_A  # stored lowercase
    assert rows[TRACE_A]["review_s"] == 0.0


def test_gzip_body_is_accepted(live) -> None:
    body = gzip.compress(json.dumps({"task_id": "t", "outcome": "accepted"}).encode())
    resp = post(live, body, {**JS, "Content-Encoding": "gzip"})
    assert resp.status_code == 200, resp.text
    assert len(stored(live)) == 1


def test_reposting_is_idempotent(live) -> None:
    batch = {
        "outcomes": [
            {"id": "r-1", "task_id": "t1", "outcome": "accepted"},
            {"task_id": "t2", "outcome": "rejected", "decided_at": "2026-05-28T10:00:00Z"},
            {"task_id": "t3", "outcome": "corrected", "review_seconds": 12.5},
        ]
    }
    assert post(live, batch).json() == {"inserted": 3, "duplicates": 0}
    first = stored(live)
    assert post(live, batch).json() == {"inserted": 0, "duplicates": 3}
    # The same time written another way is the same decision; a repeat within one request too.
    again = {
        "outcomes": [
            {"task_id": "t2", "outcome": "rejected", "decided_at": "2026-05-28T12:00:00+02:00"},
            {"task_id": "t4", "outcome": "accepted"},
            {"task_id": "t4", "outcome": "accepted"},
        ]
    }
    assert post(live, again).json() == {"inserted": 1, "duplicates": 2}
    rows = stored(live)
    assert len(rows) == 4
    assert [r for r in rows if r["task_id"] != "t4"] == first  # nothing rewritten


def test_same_id_with_other_content_is_a_conflict(live) -> None:
    assert post(live, {"id": "r-1", "task_id": "t1", "outcome": "accepted"}).status_code == 200
    resp = post(
        live,
        {
            "outcomes": [
                {"id": "r-2", "task_id": "t2", "outcome": "accepted"},
                {"id": "r-1", "task_id": "t1", "outcome": "rejected"},
            ]
        },
    )
    assert resp.status_code == 409, resp.text
    doc = resp.json()
    assert doc["error"].startswith(
        "outcomes[1]: id 'r-1' is already stored with other content "
        "(outcome stored 'accepted', posted 'rejected')"
    )
    assert doc["errors"] == [doc["error"]]
    assert [r["outcome_id"] for r in stored(live)] == ["r-1"]  # r-2 not stored either

    resp = post(
        live,
        {
            "outcomes": [
                {"id": "r-3", "task_id": "t3", "outcome": "accepted"},
                {"id": "r-3", "task_id": "t3", "outcome": "corrected"},
            ]
        },
    )
    assert resp.status_code == 409
    assert (
        "outcomes[1]: id 'r-3' is also used by outcomes[0] with other content"
        in (resp.json()["error"])
    )
    assert len(stored(live)) == 1


GOOD = {"task_id": "t1", "outcome": "accepted"}
BAD_BODIES = [
    (b"{not json", "body is not valid JSON: "),
    (b"[]", 'body must be a JSON object: one outcome, or {"outcomes": [...]}'),
    (b"\xff\xfe", "body is not valid JSON: "),
    (
        {"task_id": "t1", "outcome": "approved"},
        "outcome: must be one of accepted, rejected, corrected, got 'approved'",
    ),
    ({"task_id": "t1"}, "outcome: required (one of accepted, rejected, corrected)"),
    ({"task_id": "t1", "outcome": None}, "outcome: required"),
    ({"outcome": "accepted"}, "task_id: required unless trace_id is given"),
    (
        {"trace_id": "abc", "outcome": "accepted"},
        "trace_id: must be 32 hexadecimal characters, got 'abc'",
    ),
    ({"trace_id": "0" * 32, "outcome": "accepted"}, "trace_id: must not be all zeros"),
    ({"trace_id": "g" * 32, "outcome": "accepted"}, "trace_id: must be 32 hexadecimal"),
    ({**GOOD, "review_seconds": -1}, "review_seconds: must be 0 or more, got -1"),
    ({**GOOD, "review_seconds": "30"}, "review_seconds: must be a number, got a string"),
    (
        b'{"task_id": "t1", "outcome": "accepted", "review_seconds": NaN}',
        "review_seconds: must be a finite number",
    ),
    ({**GOOD, "score": True}, "score: must be a number, got a boolean"),
    ({**GOOD, "score": [1]}, "score: must be a number, got a list"),
    (
        {**GOOD, "decided_at": "yesterday"},
        "decided_at: must be an RFC 3339 time with a UTC offset, e.g. 2026-05-28T14:03:00Z",
    ),
    ({**GOOD, "decided_at": "2026-05-28T10:00:00"}, "decided_at: must be an RFC 3339 time"),
    ({**GOOD, "decided_at": 1780000000}, "decided_at: must be a string, got a number"),
    ({**GOOD, "decided_at": "2026-02-30T10:00:00Z"}, "decided_at: is not a valid time"),
    (
        {**GOOD, "reviewr": "ana"},
        "reviewr: unknown field (fields: id, task_id, trace_id, "
        "outcome, review_seconds, reviewer, score, decided_at)",
    ),
    ({"task_id": 17, "outcome": "accepted"}, "task_id: must be a string, got a number"),
    ({"task_id": "", "outcome": "accepted"}, "task_id: must not be empty"),
    ({**GOOD, "id": "x" * 1025}, "id: must be at most 1024 characters, got 1025"),
    (b'{"task_id": "t1", "outcome": "accepted", "outcome": "rejected"}', "outcome: given twice"),
    (
        {"outcomes": [GOOD, {"task_id": "t2", "outcome": "nope"}]},
        "outcomes[1].outcome: must be one of accepted, rejected, corrected, got 'nope'",
    ),
    ({"outcomes": [GOOD, 3]}, "outcomes[1]: must be an object, got a number"),
    ({"outcomes": {"task_id": "t1"}}, "outcomes: must be a list, got an object"),
    ({"outcomes": [GOOD], "source": "email"}, "source: must be one of api, csv, got 'email'"),
    (
        {"outcomes": [GOOD], "dry_run": True},
        "dry_run: unknown field (a batch has 'outcomes' and optionally 'source')",
    ),
    (
        {"outcomes": [GOOD] * 10_001},
        "outcomes: at most 10000 per request, got 10001; send them in several requests",
    ),
    # Hostile input that answered 500 before issue #17: a lone surrogate reached the database,
    # json.loads raised RecursionError or ValueError, the conversion to UTC OverflowError.
    (
        b'{"task_id": "\\ud800", "outcome": "accepted"}',
        "task_id: contains an unpaired surrogate (\\ud800-\\udfff)",
    ),
    (
        b'{"task_id": "t1", "reviewer": "a\\udc00b", "outcome": "accepted"}',
        "reviewer: contains an unpaired surrogate",
    ),
    (b"[" * 10_000 + b"]" * 10_000, "body is not valid JSON: it is nested too deeply"),
    (
        b'{"task_id": "t1", "outcome": "accepted", "score": {"a": ' * 5_000 + b"1" + b"}" * 5_000,
        "body is not valid JSON: it is nested too deeply",
    ),
    (
        b'{"task_id": "t1", "outcome": "accepted", "score": ' + b"1" * 5_000 + b"}",
        "body is not valid JSON: Exceeds the limit (4300 digits) for integer string conversion",
    ),
    ({**GOOD, "review_seconds": 10**400}, "review_seconds: must be a finite number"),
    (
        {**GOOD, "decided_at": "0001-01-01T00:00:00+01:00"},
        "decided_at: is out of range: '0001-01-01T00:00:00+01:00' in UTC lies outside years "
        "0001 to 9999",
    ),
    ({**GOOD, "decided_at": "9999-12-31T23:59:59-00:01"}, "decided_at: is out of range"),
]


@pytest.mark.parametrize(("body", "message"), BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_invalid_outcomes_are_refused_and_nothing_is_written(
    shared_live, body: object, message: str
) -> None:
    live = shared_live
    resp = post(live, body)
    assert resp.status_code == 400, resp.text
    doc = resp.json()
    assert any(err.startswith(message) for err in doc["errors"]), doc
    assert doc["error"].endswith("; nothing was stored")
    assert stored(live) == []


def test_every_problem_is_listed_with_its_place(live) -> None:
    resp = post(
        live,
        {
            "outcomes": [
                {"task_id": "t0", "outcome": "accepted"},
                {"task_id": "t1", "outcome": "maybe", "score": "high"},
                {"outcome": "rejected"},
            ]
        },
    )
    assert resp.status_code == 400
    doc = resp.json()
    assert doc["errors"] == [
        "outcomes[1].outcome: must be one of accepted, rejected, corrected, got 'maybe'",
        "outcomes[1].score: must be a number, got a string",
        "outcomes[2].task_id: required unless trace_id is given",
    ]
    assert doc["error"] == (
        "outcomes[1].outcome: must be one of accepted, rejected, corrected, got 'maybe' "
        "(and 2 more problems); nothing was stored"
    )
    assert stored(live) == []


# --------------------------------------------------------------------------- HTTP rules
def test_ingest_keys_are_required_when_configured(live_factory) -> None:
    live = live_factory(ingest__keys=["key-one-12345", "key-two-12345"])
    resp = post(live, GOOD)
    assert resp.status_code == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert resp.json()["error"] == (
        "missing ingest key: send 'Authorization: Bearer <key>' or 'X-InferLedger-Key'"
    )
    resp = post(live, GOOD, {**JS, "Authorization": "Bearer nope-nope-nope"})
    assert resp.status_code == 401 and resp.json()["error"] == "invalid ingest key"
    assert stored(live) == []
    assert post(live, GOOD, {**JS, "Authorization": "Bearer key-two-12345"}).status_code == 200
    other = {"task_id": "t2", "outcome": "rejected"}
    assert post(live, other, {**JS, "X-InferLedger-Key": "key-one-12345"}).status_code == 200
    assert len(stored(live)) == 2


def test_method_media_type_and_size(live_factory) -> None:
    live = live_factory(ingest__max_body_bytes=4096)
    resp = requests.get(live.url + "/v1/outcomes", timeout=10)
    assert resp.status_code == 405
    assert resp.json()["error"] == "method GET is not allowed; use POST"
    resp = post(live, b"task_id,outcome\nt1,accepted\n", {"Content-Type": "text/csv"})
    assert resp.status_code == 415
    assert resp.json()["error"] == "unsupported Content-Type 'text/csv': use application/json"
    big = {"outcomes": [{"task_id": f"task-{i:05d}", "outcome": "accepted"} for i in range(200)]}
    resp = post(live, big)
    assert resp.status_code == 413
    assert "exceeds the limit of 4096 bytes" in resp.json()["error"]
    assert post(live, GOOD, {"Content-Type": "application/json; charset=utf-8"}).ok
    assert len(stored(live)) == 1
    text = requests.get(live.url + "/metrics", timeout=10).text
    for status in ("200", "405", "413", "415"):
        line = f'inferledger_http_requests_total{{endpoint="/v1/outcomes",status="{status}"}} 1.0'
        assert line in text


def test_full_write_queue_answers_503_with_retry_after(live_factory) -> None:
    live = live_factory(ingest__queue_max_spans=1000, ingest__retry_after_s=3)
    storage = live.storage
    release = threading.Event()
    # Occupy the single writer and fill its queue, as a burst of spans would. The server's
    # first ledger refresh may still hold a unit at start: wait until the queue has room.
    deadline = time.monotonic() + 30
    while True:
        try:
            blocker = storage.submit(lambda _cur: release.wait(30), units=1000)
            break
        except QueueFullError:
            assert time.monotonic() < deadline, "the startup writes never drained"
            time.sleep(0.01)
    try:
        resp = post(live, GOOD)
        assert resp.status_code == 503
        assert resp.headers["Retry-After"] == "3"
        assert "overloaded" in resp.json()["error"]
    finally:
        release.set()
        blocker.result(30)
    assert post(live, GOOD).json() == {"inserted": 1, "duplicates": 0}


# --------------------------------------------------------------------------- the view
def test_outcome_for_unknown_task_is_kept_and_joins_when_spans_arrive(live) -> None:
    resp = post(
        live,
        {
            "outcomes": [
                {"task_id": "task-late", "outcome": "accepted", "review_seconds": 30},
                {"trace_id": TRACE_B, "outcome": "rejected"},  # its spans carry task-b
                {"trace_id": TRACE_C, "outcome": "corrected"},  # its spans carry no task id
            ]
        },
    )
    assert resp.status_code == 200
    before = decisions(live)
    assert set(before) == {"task-late", f"trace:{TRACE_B}", f"trace:{TRACE_C}"}

    send_spans(live, [(TRACE_A, "task-late"), (TRACE_B, "task-b"), (TRACE_C, None)])
    after = decisions(live)
    assert set(after) == {"task-late", "task-b", f"trace:{TRACE_C}"}
    assert after["task-b"]["outcome"] == "rejected"
    assert after["task-late"]["review_s"] == 30.0
    # every decision now meets its task's spans
    joined = live.storage.fetchall(
        "select d.task_key, count(*) from task_outcome_decisions as d "
        "join spans as s on s.task_id = d.task_key "
        "or (s.task_id is null and d.task_key = 'trace:' || s.trace_id) "
        "group by d.task_key order by d.task_key"
    )
    assert joined == [("task-b", 1), ("task-late", 1), (f"trace:{TRACE_C}", 1)]


def test_latest_decision_wins(live) -> None:
    # Posted out of order: the decision time decides, not the arrival.
    for outcome, at in (
        ("accepted", "2026-05-28T10:00:00Z"),
        ("rejected", "2026-05-28T12:00:00Z"),
        ("corrected", "2026-05-28T11:00:00Z"),
    ):
        assert post(live, {"task_id": "t1", "outcome": outcome, "decided_at": at}).ok
    # A trace-only decision counts for the task its spans carry, once they arrive.
    send_spans(live, [(TRACE_A, "t1")])
    assert post(
        live, {"trace_id": TRACE_A, "outcome": "corrected", "decided_at": "2026-05-28T13:00:00Z"}
    ).ok
    # Same decision time: the one received later wins.
    for outcome in ("rejected", "accepted"):
        body = {"task_id": "t2", "outcome": outcome, "decided_at": "2026-05-28T10:00:00Z"}
        assert post(live, body).ok
    got = decisions(live)
    assert set(got) == {"t1", "t2"}
    assert (got["t1"]["outcome"], got["t1"]["decisions"]) == ("corrected", 4)
    assert got["t1"]["decided_at"].isoformat().startswith("2026-05-28T13:00:00")
    assert (got["t2"]["outcome"], got["t2"]["decisions"]) == ("accepted", 2)
    # a later review overrides
    assert post(
        live, {"task_id": "t1", "outcome": "rejected", "decided_at": "2026-05-29T09:00:00Z"}
    ).ok
    assert decisions(live)["t1"]["outcome"] == "rejected"


# --------------------------------------------------------------------------- CSV import
CSV = (
    "task_id,trace_id,outcome,review_seconds,reviewer,score,decided_at,id\n"
    "task-1,,accepted,30,ana,0.8,2026-05-28T10:00:00Z,\n"
    f',{TRACE_A},rejected,,"O\'Neil, Pat",,,\n'
    "task-3,,Corrected,12.5,,,2026-05-28T11:30:00+02:00,ext-3\n"
)


def write(tmp_path: Path, text: str, name: str = "outcomes.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_import_posts_to_a_running_server(live_factory, tmp_path, capsys) -> None:
    live = live_factory(ingest__keys=["key-one-12345"])
    capsys.readouterr()  # the server's start-up line
    path = write(tmp_path, CSV)
    args = ["outcomes", "import", str(path), "--url", live.url]
    assert main([*args, "--key", "key-one-12345"]) == 0
    assert capsys.readouterr().out == "imported 3 outcomes (0 already present)\n"
    rows = stored(live)
    assert {r["source"] for r in rows} == {"csv"}
    by_task = {r["task_id"] or r["trace_id"]: r for r in rows}
    assert by_task[TRACE_A]["reviewer"] == "O'Neil, Pat"
    assert by_task["task-3"]["outcome_id"] == "ext-3"
    assert by_task["task-3"]["outcome"] == "corrected"
    assert main([*args, "--key", "key-one-12345"]) == 0
    assert capsys.readouterr().out == "imported 0 outcomes (3 already present)\n"
    # a conflict is named by the file's line, and nothing of the file is stored
    assert post(
        live,
        {"id": "ext-4", "task_id": "task-4", "outcome": "accepted"},
        {**JS, "X-InferLedger-Key": "key-one-12345"},
    ).ok
    path = write(tmp_path, "id,task_id,outcome\next-5,task-5,accepted\next-4,task-4,rejected\n")
    assert main([*args[:2], str(path), *args[3:], "--key", "key-one-12345"]) == 2
    assert capsys.readouterr().err.startswith(
        f"inferledger: {live.url}/v1/outcomes answered 409: outcomes.csv line 3: id 'ext-4' "
        "is already stored with other content (outcome stored 'accepted', posted 'rejected')"
    )
    assert len(stored(live)) == 4
    # the server's answer is one line
    assert main(args) == 2
    assert capsys.readouterr().err == (
        f"inferledger: {live.url}/v1/outcomes answered 401: missing ingest key: send "
        "'Authorization: Bearer <key>' or 'X-InferLedger-Key'\n"
    )


def test_csv_import_batches_large_files(live, tmp_path, capsys) -> None:
    lines = ["task_id,outcome,review_seconds"]
    lines += [f"task-{i},accepted,{i % 60}" for i in range(12_345)]
    path = write(tmp_path, "\n".join(lines) + "\n")
    capsys.readouterr()  # the server's start-up line
    assert main(["outcomes", "import", str(path), "--url", live.url]) == 0
    assert capsys.readouterr().out == "imported 12345 outcomes (0 already present)\n"
    assert live.storage.scalar("select count(*) from outcomes") == 12_345
    # two requests: at most 10,000 outcomes each
    text = requests.get(live.url + "/metrics", timeout=10).text
    assert 'inferledger_http_requests_total{endpoint="/v1/outcomes",status="200"} 2.0' in text

    # An id used twice in the file with other content: found before anything is posted.
    lines = ["id,task_id,outcome"] + [f"n-{i},new-{i},accepted" for i in range(10_000)]
    path = write(tmp_path, "\n".join([*lines, "n-0,new-0,rejected"]) + "\n", "more.csv")
    assert main(["outcomes", "import", str(path), "--url", live.url]) == 2
    assert capsys.readouterr().err.startswith(
        "inferledger: more.csv line 10002: id 'n-0' is also used by more.csv line 2 with other "
        "content"
    )
    assert live.storage.scalar("select count(*) from outcomes") == 12_345
    # A conflict with a stored id in the second batch: the first batch stays stored.
    assert post(live, {"id": "n-late", "task_id": "x", "outcome": "accepted"}).ok
    path = write(tmp_path, "\n".join([*lines, "n-late,x,rejected"]) + "\n", "more.csv")
    assert main(["outcomes", "import", str(path), "--url", live.url]) == 2
    err = capsys.readouterr().err
    assert "answered 409: more.csv line 10002: id 'n-late' is already stored" in err
    assert err.endswith(
        "(in that batch; the 10000 outcomes before it are stored, and importing the file "
        "again is safe)\n"
    )
    assert live.storage.scalar("select count(*) from outcomes") == 22_346


def test_csv_import_into_a_database_file(tmp_path, capsys) -> None:
    db = tmp_path / "ledger.duckdb"
    Storage(db).open().close()
    path = write(tmp_path, CSV)
    args = ["outcomes", "import", str(path), "--db", str(db)]
    assert main(args) == 0
    assert capsys.readouterr().out == "imported 3 outcomes (0 already present)\n"
    assert main(args) == 0
    assert capsys.readouterr().out == "imported 0 outcomes (3 already present)\n"
    with Storage(db) as st:
        rows = st.fetchall("select task_key, outcome from task_outcome_decisions order by 1")
    assert rows == [
        ("task-1", "accepted"),
        ("task-3", "corrected"),
        (f"trace:{TRACE_A}", "rejected"),
    ]

    assert main(["outcomes", "import", str(path), "--db", str(tmp_path / "typo.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.endswith("typo.duckdb' does not exist\n") and err.count("\n") == 1
    assert not (tmp_path / "typo.duckdb").exists()


@pytest.mark.parametrize(
    "cell", ["0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00", "1" * 5000]
)
def test_csv_import_of_hostile_cells_prints_one_line(tmp_path, capsys, cell: str) -> None:
    # Year-1 dates with an offset printed an OverflowError traceback before issue #17.
    db = tmp_path / "ledger.duckdb"
    path = write(tmp_path, f"task_id,outcome,decided_at\nt1,accepted,2026-05-28T10:00:00Z\n"
                           f"t2,accepted,{cell}\n")  # fmt: skip
    assert main(["outcomes", "import", str(path), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inferledger: outcomes.csv line 3: decided_at: ")
    assert err.endswith("; nothing was stored\n") and err.count("\n") == 1
    assert not db.exists()


def test_csv_import_into_a_database_a_server_holds_points_to_url(server_factory, tmp_path) -> None:
    srv = server_factory()
    path = write(tmp_path, CSV)
    command = ["outcomes", "import", str(path), "--db", str(srv.db)]
    result = subprocess.run(
        [sys.executable, "-m", "inferledger.cli", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"inferledger: cannot open database '{srv.db}'")
    assert result.stderr.endswith("(is a server using it? Then import with --url)\n")
    assert result.stderr.count("\n") == 1


BAD_CSVS = [
    (
        "task_id,outcome\nt1,accepted\nt2,approved\nt3,rejected\n",
        "outcomes.csv line 3: outcome: must be one of accepted, rejected, corrected, "
        "got 'approved'; nothing was stored",
    ),
    (
        "task_id,outcome,review_seconds\nt1,accepted,ten\n\n,rejected,5\n",
        "outcomes.csv line 2: review_seconds: must be a number, got 'ten' "
        "(and 1 more problem); nothing was stored",
    ),
    (
        'task_id,outcome\nt1,accepted\n"t2\nstill t2",rejected,extra\n',
        "outcomes.csv line 3: 3 cells, the header has 2; nothing was stored",
    ),
    (
        "task,outcome\nt1,accepted\n",
        "outcomes.csv line 1: unknown column 'task' (columns: id, task_id, trace_id, outcome, "
        "review_seconds, reviewer, score, decided_at)",
    ),
    ("", "outcomes.csv: empty file; the first line must be a header; nothing was stored"),
]


@pytest.mark.parametrize(("text", "message"), BAD_CSVS, ids=range(len(BAD_CSVS)))
def test_bad_csv_imports_nothing_and_names_the_line(
    shared_live, tmp_path, capsys, text: str, message: str
) -> None:
    live = shared_live
    path = write(tmp_path, text)
    db = tmp_path / "ledger.duckdb"
    Storage(db).open().close()
    for target in (["--url", live.url], ["--db", str(db)]):
        assert main(["outcomes", "import", str(path), *target]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"inferledger: {message}"), err
        assert err.count("\n") == 1
    assert stored(live) == []
    with Storage(db) as st:
        assert st.scalar("select count(*) from outcomes") == 0


def test_csv_that_is_not_utf8_is_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes("task_id,outcome,reviewer\nt1,accepted,Jos\xe9\n".encode("latin-1"))
    db = tmp_path / "ledger.duckdb"
    Storage(db).open().close()
    assert main(["outcomes", "import", str(path), "--db", str(db)]) == 2
    assert "latin1.csv: not UTF-8 text" in capsys.readouterr().err


# --------------------------------------------------------------------------- the docs
def _outcomes_docs() -> str:
    text = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
    start = text.index("## `POST /v1/outcomes`")
    return text[start : text.index("\n## ", start + 1)]


def test_the_documented_examples_behave_as_documented(live, tmp_path, capsys) -> None:
    docs = _outcomes_docs()
    blocks = re.findall(r"```(json|csv|sh)\n(.*?)```", docs, re.DOTALL)
    requests_ = [json.loads(b) for kind, b in blocks if kind == "json" and '"outcome"' in b]
    assert len(requests_) == 2
    assert post(live, requests_[0]).json() == {"inserted": 1, "duplicates": 0}
    assert post(live, requests_[1]).json() == {"inserted": 2, "duplicates": 0}

    (curl,) = [b for kind, b in blocks if kind == "sh" and "curl" in b]
    (answer,) = [json.loads(b) for kind, b in blocks if kind == "json" and '"error"' in b]
    resp = post(live, re.search(r"-d '(.*?)'", curl, re.DOTALL).group(1).encode())
    assert resp.status_code == 400 and resp.json() == answer

    (csv_text,) = [b for kind, b in blocks if kind == "csv"]
    path = write(tmp_path, csv_text, "reviews.csv")
    capsys.readouterr()
    assert main(["outcomes", "import", str(path), "--url", live.url]) == 0
    # the file's first row is the first JSON example again
    assert capsys.readouterr().out == "imported 1 outcomes (1 already present)\n"
