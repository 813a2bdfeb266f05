"""What a 200 promises: SIGKILL mid-stream loses nothing acknowledged; overload answers 503
with Retry-After, stays within bounded memory, and loses nothing acknowledged; SIGTERM exits 0
after flushing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psutil
import pytest
import requests

from inferledger.core.storage import Storage
from inferledger.fixtures import make_export_request

PB = {"Content-Type": "application/x-protobuf"}


def _stored_span_ids(db) -> set[tuple[str, str]]:
    with Storage(db) as st:
        return set(st.fetchall("select trace_id, span_id from spans"))


def _expected_ids(batch_no: int, n: int) -> set[tuple[str, str]]:
    req = make_export_request(n, seed=batch_no, id_offset=batch_no * n)
    return {(s.trace_id.hex(), s.span_id.hex()) for s in req.resource_spans[0].scope_spans[0].spans}


def test_sigkill_mid_stream_keeps_every_acknowledged_span(server_factory, tmp_path) -> None:
    srv = server_factory()
    acked: list[int] = []
    stop = threading.Event()

    def sender(worker: int) -> None:
        batch = worker * 100_000
        session = requests.Session()
        while not stop.is_set():
            body = make_export_request(200, seed=batch, id_offset=batch * 200).SerializeToString()
            try:
                resp = session.post(srv.url + "/v1/traces", data=body, headers=PB, timeout=10)
            except requests.RequestException:
                return  # the server died under us: this batch was never acknowledged
            if resp.status_code == 200:
                acked.append(batch)
            batch += 1

    threads = [threading.Thread(target=sender, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 30 and time.monotonic() < deadline:
        time.sleep(0.01)
    srv.kill()  # SIGKILL: no flush, no checkpoint, no goodbye
    stop.set()
    for t in threads:
        t.join(15)
    assert len(acked) >= 30, srv.log()

    # Restart on the same file (the WAL replays), then stop cleanly so the file can be read.
    again = server_factory(db=srv.db)
    assert again.terminate() == 0
    stored = _stored_span_ids(srv.db)
    missing = [b for b in acked if not _expected_ids(b, 200) <= stored]
    assert missing == [], f"acknowledged batches lost after SIGKILL: {missing[:5]}"


def test_sigterm_flushes_and_exits_zero(server_factory) -> None:
    srv = server_factory()
    body = make_export_request(500, seed=99).SerializeToString()
    assert requests.post(srv.url + "/v1/traces", data=body, headers=PB, timeout=30).ok
    assert srv.terminate() == 0
    assert "stopped cleanly" in srv.log()
    assert len(_stored_span_ids(srv.db)) == 500
    assert not (srv.db.parent / (srv.db.name + ".wal")).exists() or (
        (srv.db.parent / (srv.db.name + ".wal")).stat().st_size == 0
    ), "checkpoint at shutdown should leave an empty WAL"


def _flood(
    srv, senders: int, per_sender: int, body: Callable[[int], bytes]
) -> tuple[list[tuple[int, int, str | None]], int]:
    """`senders` clients post `per_sender` bodies each at once (batch = worker * 1000 + k);
    returns every (batch, status, Retry-After) and how far the server's RSS grew at its peak."""
    proc = psutil.Process(srv.proc.pid)
    rss_before = proc.memory_info().rss
    peak = [rss_before]
    results: list[tuple[int, int, str | None]] = []
    lock = threading.Lock()

    def sender(worker: int) -> None:
        session = requests.Session()
        for k in range(per_sender):
            batch = worker * 1000 + k
            resp = session.post(srv.url + "/v1/traces", data=body(batch), headers=PB, timeout=120)
            with lock:
                results.append((batch, resp.status_code, resp.headers.get("Retry-After")))
                peak[0] = max(peak[0], proc.memory_info().rss)

    threads = [threading.Thread(target=sender, args=(w,)) for w in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return results, peak[0] - rss_before


def _check_flood(srv, results, grown: int, spans_per_batch: int, why_503: str) -> None:
    """Only 200s and 503s (Retry-After 1), RSS grew by under 1 GiB, every acknowledged span is
    stored after a clean stop, and no refused one is."""
    statuses = {s for _, s, _ in results}
    assert statuses <= {200, 503}
    assert 503 in statuses, why_503
    assert all(ra == "1" for _, s, ra in results if s == 503)
    assert grown < 1024**3, f"RSS grew by {grown >> 20} MiB"
    assert srv.terminate() == 0
    stored = _stored_span_ids(srv.db)
    acked = [b for b, s, _ in results if s == 200]
    assert acked
    assert all(_expected_ids(b, spans_per_batch) <= stored for b in acked)
    refused = [b for b, s, _ in results if s == 503]
    assert all(not (_expected_ids(b, spans_per_batch) & stored) for b in refused), (
        "a 503 wrote spans"
    )


def test_overload_answers_503_with_bounded_memory(server_factory) -> None:
    srv = server_factory(
        env={"INFERLEDGER_INGEST_QUEUE_MAX_SPANS": "1000"}, args=("--threads", "16")
    )

    def body(batch: int) -> bytes:
        return make_export_request(2000, seed=batch, id_offset=batch * 2000).SerializeToString()

    # 12 x 2,000-span requests in flight at most: memory grows by well under 1 GiB.
    results, grown = _flood(srv, 12, 4, body)
    metrics = requests.get(srv.url + "/metrics", timeout=5).text
    refused = sum(1 for _, status, _ in results if status == 503)
    assert (
        f'inferledger_http_requests_total{{endpoint="/v1/traces",status="503"}} {refused}.0'
        in metrics
    )
    _check_flood(
        srv,
        results,
        grown,
        2000,
        "12 concurrent senders of 2,000 spans should overflow a 1,000 queue",
    )


def _large_body(batch: int, n: int = 150, prompt_bytes: int = 40_000) -> bytes:
    req = make_export_request(n, seed=batch, id_offset=batch * n)
    for span in req.resource_spans[0].scope_spans[0].spans:
        kv = span.attributes.add()
        kv.key = "gen_ai.prompt"
        kv.value.string_value = chr(97 + batch % 26) * prompt_bytes
    return req.SerializeToString()


@pytest.mark.slow
def test_large_attribute_overload_is_bounded_in_bytes(server_factory) -> None:
    """Issue #17: bodies of LLM spans with long prompts (6 MB each here) from many clients.
    Counting spans alone let RSS reach 11.7 GB with 60 MB bodies; the byte bounds answer 503
    instead, and every acknowledged span is stored."""
    srv = server_factory(
        env={"INFERLEDGER_INGEST_QUEUE_MAX_BYTES": str(16 << 20)}, args=("--threads", "16")
    )
    # 30 bodies of 6 MB = 180 MB of prompts are sent; the bounds keep far less in memory.
    results, grown = _flood(srv, 10, 3, _large_body)
    _check_flood(
        srv, results, grown, 150, "10 concurrent 6 MB bodies should pass a 16 MiB byte bound"
    )
