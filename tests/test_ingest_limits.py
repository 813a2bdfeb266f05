"""Issue #17: ingest stays bounded and never wedges.

- merges never build a string column past 2 GiB (32-bit Arrow offsets), and are bounded in bytes;
- the work waiting is bounded in bytes as well as spans (503 + Retry-After past it);
- a request that can never be written is retried a bounded number of times and quarantined,
  live or replayed from the spool, while the requests behind it are stored.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import requests

import ingest.span_ingestor
from inferledger.core.errors import QueueFullError
from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.storage import Storage
from inferledger.fixtures import make_export_request
from ingest.otlp_receiver import TraceReceiver
from ingest.span_ingestor import SpanIngestor
from ingest.span_writer import _split_map, decode_for_storage, decoded_nbytes, insert_spans
from ingest.spool import Spool

PB = {"Content-Type": "application/x-protobuf"}
POISON = "poison"


def _body(seed: int, n: int = 50, *, prompt_bytes: int = 0, name: str | None = None) -> bytes:
    req = make_export_request(n, seed=seed, id_offset=seed * n)
    for span in req.resource_spans[0].scope_spans[0].spans:
        if prompt_bytes:
            kv = span.attributes.add()
            kv.key = "gen_ai.prompt"
            kv.value.string_value = "p" * prompt_bytes
        if name:
            span.name = name
    return req.SerializeToString()


def _ids(body: bytes) -> set[tuple[str, str]]:
    spans = decode_for_storage(body).spans
    return set(
        zip(spans.column("trace_id").to_pylist(), spans.column("span_id").to_pylist(), strict=True)
    )


def _stored(storage: Storage) -> set[tuple[str, str]]:
    return set(storage.fetchall("select trace_id, span_id from spans"))


@pytest.fixture
def commits() -> list[int]:
    """Units of each group commit of the storage writer (one per span batch written)."""
    return []


@pytest.fixture
def storage(tmp_path: Path, commits: list[int]) -> Iterator[Storage]:
    with Storage(tmp_path / "db.duckdb", on_commit=lambda units, _s: commits.append(units)) as st:
        yield st


# --------------------------------------------------------------------------- merges
def test_attribute_lists_of_more_than_2_gib_do_not_overflow() -> None:
    """The merged batch that wedged the writer: two requests whose attribute text totals
    2.4 GiB. Combining them into one string column overflows its 32-bit offsets; the writer
    must split the attribute maps chunk by chunk. The 1.2 GB of text is calloc'ed zero pages
    that nothing reads, so this costs about 100 MB of memory."""
    n = 1_200_000_000
    text = pa.StringArray.from_buffers(
        1, pa.py_buffer(np.array([0, n], dtype=np.int32).tobytes()), pa.py_buffer(bytes(n))
    )
    maps = pa.MapArray.from_arrays(pa.array([0, 1], pa.int32()), pa.array(["gen_ai.prompt"]), text)
    merged = pa.table({"attributes": pa.chunked_array([maps, maps])})  # as concat_tables makes
    with pytest.raises(pa.ArrowInvalid, match="offset overflow"):
        merged.column("attributes").combine_chunks()  # what the writer used to do
    lists = _split_map(merged, "attributes", "attr_keys", "attr_values")
    assert lists.column("attr_keys").to_pylist() == [["gen_ai.prompt"], ["gen_ai.prompt"]]
    assert [len(c.values) for c in lists.column("attr_values").chunks] == [1, 1]


def test_merges_are_bounded_in_bytes(storage: Storage, commits: list[int], tmp_path: Path) -> None:
    bodies = [_body(seed, prompt_bytes=2000) for seed in range(4)]
    size = decoded_nbytes(decode_for_storage(bodies[0]))
    ingestor = SpanIngestor(
        storage, Spool(tmp_path / "spool"), ServiceMetrics(), merge_max_bytes=size + size // 2
    )
    for body in bodies:  # queued before the worker starts, so all four wait together
        ingestor.accept(body, decode_for_storage(body))
    ingestor.start()
    assert ingestor.flush(30)
    ingestor.stop()
    assert commits == [50, 50, 50, 50]
    assert len(_stored(storage)) == 200


# --------------------------------------------------------------------------- pending bound
def test_pending_work_is_bounded_in_bytes(storage: Storage, tmp_path: Path) -> None:
    bodies = [_body(seed, prompt_bytes=4000) for seed in range(4)]
    sizes = [decoded_nbytes(decode_for_storage(b)) for b in bodies]
    metrics = ServiceMetrics()
    ingestor = SpanIngestor(
        storage,
        Spool(tmp_path / "spool"),
        metrics,
        max_pending_bytes=sizes[0] + sizes[1] + sizes[2] // 2,
    )
    ingestor.accept(bodies[0], decode_for_storage(bodies[0]))
    ingestor.accept(bodies[1], decode_for_storage(bodies[1]))
    assert ingestor.pending_bytes == sizes[0] + sizes[1]
    assert ingestor.has_room()  # 2 of 2.5 requests' worth: the receiver still decodes
    with pytest.raises(QueueFullError, match=r"MiB of spans are waiting to be written"):
        ingestor.accept(bodies[2], decode_for_storage(bodies[2]))
    assert len(Spool(tmp_path / "spool").pending()) == 2, "a refused request was spooled"
    ingestor.start()
    assert ingestor.flush(30)
    assert ingestor.pending_bytes == 0
    ingestor.accept(bodies[3], decode_for_storage(bodies[3]))  # room again
    assert ingestor.flush(30)
    ingestor.stop()
    assert _stored(storage) == _ids(bodies[0]) | _ids(bodies[1]) | _ids(bodies[3])


def test_a_request_larger_than_the_byte_bound_is_admitted_alone(
    storage: Storage, tmp_path: Path
) -> None:
    body = _body(1, prompt_bytes=4000)
    ingestor = SpanIngestor(
        storage, Spool(tmp_path / "spool"), ServiceMetrics(), max_pending_bytes=1
    )
    ingestor.accept(body, decode_for_storage(body))
    assert not ingestor.has_room()
    with pytest.raises(QueueFullError):
        ingestor.accept(body, decode_for_storage(body))
    ingestor.start()
    assert ingestor.flush(30)
    ingestor.stop()
    assert _stored(storage) == _ids(body)


def test_overload_in_bytes_answers_503_over_http_and_loses_nothing(live_factory) -> None:
    live = live_factory(ingest__queue_max_bytes=1024 * 1024)
    bodies = [_body(seed, n=20, prompt_bytes=20_000) for seed in range(3)]  # ~0.4 MiB each
    gate = threading.Event()
    # A long write (a checkpoint, a slow disk) holds the single writer: accepted requests wait.
    blocker = live.service.storage.submit(lambda cur: gate.wait(30))
    try:
        url = live.url + "/v1/traces"
        first = requests.post(url, data=bodies[0], headers=PB, timeout=30)
        second = requests.post(url, data=bodies[1], headers=PB, timeout=30)
        third = requests.post(url, data=bodies[2], headers=PB, timeout=30)
    finally:
        gate.set()
    blocker.result(30)
    assert (first.status_code, second.status_code) == (200, 200)
    assert third.status_code == 503, third.content[:200]
    assert third.headers["Retry-After"] == "1"
    stored = _stored(live.storage)
    assert stored == _ids(bodies[0]) | _ids(bodies[1])
    metrics = requests.get(live.url + "/metrics", timeout=10).text
    assert 'inferledger_spans_rejected_total{reason="overloaded"} 20.0' in metrics
    # Past the overload the same request is stored.
    assert requests.post(url, data=bodies[2], headers=PB, timeout=30).status_code == 200
    assert _stored(live.storage) == stored | _ids(bodies[2])


# --------------------------------------------------------------------------- poison batches
@pytest.fixture
def poisoned_insert(monkeypatch) -> list[int]:
    """The real insert, failing (as the >2 GiB merge did) for any batch holding a span named
    'poison'. Returns the sizes of the batches that failed."""
    failures: list[int] = []

    def insert(cur, decoded):
        if POISON in decoded.spans.column("name").to_pylist():
            failures.append(decoded.spans.num_rows)
            raise pa.ArrowInvalid("offset overflow while concatenating arrays")
        return insert_spans(cur, decoded)

    monkeypatch.setattr(ingest.span_ingestor, "insert_spans", insert)
    return failures


def test_a_request_that_never_writes_is_quarantined_and_the_rest_flows(
    storage: Storage, tmp_path: Path, poisoned_insert: list[int], caplog
) -> None:
    spool = Spool(tmp_path / "spool")
    metrics = ServiceMetrics()
    ingestor = SpanIngestor(storage, spool, metrics, write_attempts=3, retry_backoff_s=0.01)
    good, bad, later = _body(1), _body(2, name=POISON), _body(3)
    for body in (good, bad, later):
        ingestor.accept(body, decode_for_storage(body))
    with caplog.at_level(logging.WARNING):
        ingestor.start()
        assert ingestor.flush(30), "the writer is wedged on the poison request"
        after = _body(4)  # requests accepted after the poison one are stored too
        ingestor.accept(after, decode_for_storage(after))
        assert ingestor.flush(30)
    ingestor.stop()
    assert _stored(storage) == _ids(good) | _ids(later) | _ids(after)
    assert poisoned_insert == [150, 50, 50, 50]  # the merge, then 3 attempts alone
    assert spool.pending() == []
    failed = list(spool.failed_directory.glob("*.otlp"))
    assert [p.read_bytes() for p in failed] == [bad]
    reason = failed[0].with_suffix(".reason.txt").read_text()
    assert reason == "insert failed 3 time(s): offset overflow while concatenating arrays\n"
    assert any("moved to" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    text = metrics.render().decode()
    assert "inferledger_ingest_requests_quarantined_total 1.0" in text
    assert 'inferledger_spans_rejected_total{reason="quarantined"} 50.0' in text


def test_a_poison_spool_replays_without_wedging(
    storage: Storage, tmp_path: Path, poisoned_insert: list[int]
) -> None:
    spool = Spool(tmp_path / "spool")  # what a crashed run left behind
    good, bad, later = _body(1), _body(2, name=POISON), _body(3)
    for body in (good, bad, b"\x0a\xff not protobuf", later):
        spool.append(body)
    metrics = ServiceMetrics()
    ingestor = SpanIngestor(storage, spool, metrics, write_attempts=2, retry_backoff_s=0.01)
    ingestor.start()
    assert ingestor.flush(30), "replaying the spool wedged the writer"
    live = _body(5)
    ingestor.accept(live, decode_for_storage(live))
    assert ingestor.flush(30)
    ingestor.stop()
    assert _stored(storage) == _ids(good) | _ids(later) | _ids(live)
    assert spool.pending() == []
    reasons = sorted(p.read_text() for p in spool.failed_directory.glob("*.reason.txt"))
    assert reasons[0].startswith("cannot replay: ")
    assert reasons[1].startswith("insert failed 2 time(s): offset overflow")
    assert "inferledger_ingest_requests_quarantined_total 2.0" in metrics.render().decode()


# --------------------------------------------------------------------------- bodies in flight
class _SlowClient(io.RawIOBase):
    """A request body that arrives only when the test says so (a slow or large upload)."""

    def __init__(self, body: bytes, go: threading.Event) -> None:
        self._body = io.BytesIO(body)
        self._go = go

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        assert self._go.wait(30)
        return self._body.read(n)


def test_bodies_being_received_are_bounded_in_bytes(storage: Storage, tmp_path: Path) -> None:
    """Many large uploads at once must not each hold their body and decoded copy: past the
    in-flight budget the next one gets 503 before it is read."""
    metrics = ServiceMetrics()
    ingestor = SpanIngestor(storage, Spool(tmp_path / "spool"), metrics).start()
    receiver = TraceReceiver(ingestor, metrics, inflight_max_bytes=1024 * 1024)
    big, small = _body(1, n=30, prompt_bytes=20_000), _body(2, n=5)  # 0.6 MiB and a few KiB

    def headers(body: bytes) -> dict[str, str]:
        return {**PB, "Content-Length": str(len(body))}

    go = threading.Event()
    answers: list[int] = []
    slow = threading.Thread(
        target=lambda: answers.append(
            receiver.handle("POST", headers(big), _SlowClient(big, go)).status
        )
    )
    slow.start()
    try:
        deadline = time.monotonic() + 30
        while receiver.inflight_bytes == 0:  # the slow upload holds its share
            assert time.monotonic() < deadline
            time.sleep(0.01)
        refused = receiver.handle("POST", headers(small), io.BytesIO(small))
        assert refused.status == 503
        assert refused.headers["Retry-After"] == "1"
    finally:
        go.set()
        slow.join(30)
    assert answers == [200]
    assert receiver.inflight_bytes == 0
    assert receiver.handle("POST", headers(small), io.BytesIO(small)).status == 200
    assert ingestor.flush(30)
    ingestor.stop()
    assert _stored(storage) == _ids(big) | _ids(small)
