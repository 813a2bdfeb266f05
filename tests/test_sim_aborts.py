"""Client disconnects abort the request in the simulated engine (as vLLM does), connections stay
open after streams (as uvicorn keeps them), and requests beyond the HTTP threads are counted.

The LiveCluster tests drive the engine directly; the server tests run a real SimServer on free
loopback ports and real sockets (nothing of ours is mocked).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from inferledger.core.http_server import wait_until
from inferledger.sim_server import SimServeOptions
from models.serving import (
    CacheConfig,
    ClusterConfig,
    ReplicaConfig,
    RouterPolicy,
    SchedulerConfig,
    SimulationOptions,
)
from models.serving.live import LiveCluster
from models.serving.request import FinishReason, RequestSpec, RequestStatus
from models.steptime import build_predictor
from tests.conftest import RunningSim, exposition_samples, sample_sum, serving_sim

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def predictor():
    return build_predictor(MODEL, "h200")


def _config(predictor, *, max_num_seqs: int = 256, replicas: int = 1) -> ClusterConfig:
    return ClusterConfig(
        ReplicaConfig(
            CacheConfig(predictor.num_gpu_blocks()),
            SchedulerConfig(
                max_num_seqs=max_num_seqs, max_num_batched_tokens=2048, max_model_len=8192
            ),
        ),
        num_replicas=replicas,
        router=RouterPolicy.LEAST_OUTSTANDING_REQUESTS,
    )


def _spec(rid: str, prompt: int, output: int, at: float = 0.0) -> RequestSpec:
    return RequestSpec(rid, at, ((f"prompt-{rid}", prompt),), output, output, None)


# -- the engine ------------------------------------------------------------------------------


def test_aborting_a_decoding_request_frees_its_blocks_and_keeps_its_tokens(predictor) -> None:
    live = LiveCluster(_config(predictor), predictor, SimulationOptions(debug_checks=True))
    others = [live.submit(_spec(f"r{i}", 300, 200)) for i in range(3)]
    victim = live.submit(_spec("victim", 1000, 2000))
    assert live.advance_to(0.4) == []
    kv = live.replicas[0].scheduler.kv
    produced, used = live.tokens_produced(victim), kv.used
    assert 0 < produced < 2000
    # Running: it leaves at the end of the step in flight (vLLM drops it before the next one).
    records = live.abort(victim) + live.advance_to(0.45)
    (record,) = [r for r in records if r.request_id == "victim"]
    assert record.finish_reason is FinishReason.ABORT
    assert produced <= record.output_tokens <= produced + 1
    assert record.first_token_s is not None and record.last_token_s == record.finished_s
    # its blocks are free: what is held is the others' (debug_checks verified the pool's
    # accounting after every event, the abort's included)
    assert kv.used <= 3 * -(-(300 + 200) // kv.block_size) < used
    assert live.abort(victim) == []  # a second abort does nothing
    rest = live.run_until_idle()
    assert sorted(r.request_id for r in rest) == ["r0", "r1", "r2"]
    assert all(h.record.finish_reason is FinishReason.LENGTH for h in others)
    assert all(h.record.output_tokens == 200 for h in others)
    assert kv.used == 0
    counters = live.replica_records()[0].counters
    assert counters.request_success_abort == 1 and counters.request_success_length == 3


def test_aborting_a_waiting_request_takes_it_out_of_the_queue_at_once(predictor) -> None:
    live = LiveCluster(_config(predictor, max_num_seqs=1), predictor)
    first = live.submit(_spec("first", 200, 300))
    queued = live.submit(_spec("queued", 200, 300))
    live.advance_to(0.2)
    assert live.status(queued) is RequestStatus.WAITING
    (record,) = live.abort(queued)
    assert record.request_id == "queued" and record.finish_reason is FinishReason.ABORT
    assert record.output_tokens == 0 and record.first_token_s is None
    assert live.replicas[0].scheduler.waiting == type(live.replicas[0].scheduler.waiting)()
    (done,) = live.run_until_idle()
    assert done is first.record and done.output_tokens == 300
    # the queued request never ran: the other one's timing is as if it had never come
    alone = LiveCluster(_config(predictor, max_num_seqs=1), predictor)
    h = alone.submit(_spec("first", 200, 300))
    alone.run_until_idle()
    assert h.record.finished_s == done.finished_s


def test_an_aborted_prompt_stays_in_the_prefix_cache(predictor) -> None:
    """vLLM frees an aborted request's blocks like any finished one's: blocks of its prompt
    stay cached (evictable), and the same prompt sent again hits them."""
    live = LiveCluster(_config(predictor), predictor, SimulationOptions(debug_checks=True))
    victim = live.submit(_spec("same", 4000, 500))
    live.advance_to(0.3)
    assert live.tokens_produced(victim) > 0
    live.abort(victim)
    live.advance_to(0.35)
    assert victim.record.finish_reason is FinishReason.ABORT
    again = live.submit(RequestSpec("again", 0.35, (("prompt-same", 4000),), 10, 10, None))
    live.run_until_idle()
    assert again.record.cached_tokens >= 4000 - 16


# -- the server ------------------------------------------------------------------------------


Sim = RunningSim


@pytest.fixture
def sim_factory(predictor) -> Iterator:
    stack = contextlib.ExitStack()

    def make(**overrides: object) -> Sim:
        options = SimServeOptions(
            **{
                "cluster": _config(predictor),
                "predictor": predictor,
                "served_model_names": (MODEL,),
                "port": 0,
                "dcgm_port": None,
                "speed": 5.0,
                "threads": 16,
                "drain_timeout_s": 1.0,
                **overrides,
            }
        )
        return Sim(*stack.enter_context(serving_sim(options)))

    with stack:
        yield make


def _body(max_tokens: int, *, stream: bool, prompt: str = "hello") -> dict:
    body = {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _kv_blocks_used(sim: Sim) -> int:
    with sim.server.engine.sim_lock:
        return sum(rep.scheduler.kv.used for rep in sim.server.live.replicas)


def test_a_client_gone_mid_stream_aborts_its_request_and_no_other(sim_factory) -> None:
    sim = sim_factory()  # 2000 tokens take ~3 s of wall time at 5x
    done: list[dict] = []

    def other() -> None:
        body = _body(60, stream=False, prompt="another client")
        done.append(requests.post(sim.url + "/v1/completions", json=body, timeout=30).json())

    with requests.post(
        sim.url + "/v1/completions", json=_body(2000, stream=True), stream=True, timeout=30
    ) as resp:
        rid = None
        for line in resp.iter_lines():
            if line.startswith(b"data: {"):
                rid = json.loads(line[6:])["id"]
                break
        neighbour = threading.Thread(target=other)
        neighbour.start()
        time.sleep(0.2)
    # the client is gone: the request is aborted long before its 2000 tokens
    assert wait_until(lambda: sim.server.engine.in_flight <= 1, 5.0)
    neighbour.join(30)
    record = sim.record(rid)
    assert record.finish_reason is FinishReason.ABORT
    assert 0 < record.output_tokens < 2000
    assert sim.server.engine.client_aborts == 1
    # the other client is served in full
    (choice,) = done[0]["choices"]
    assert choice["finish_reason"] == "length" and done[0]["usage"]["completion_tokens"] == 60
    assert wait_until(lambda: sim.server.engine.in_flight == 0, 5.0)
    assert _kv_blocks_used(sim) == 0
    page = exposition_samples(requests.get(sim.replica_urls[0] + "/metrics", timeout=10).text)
    assert sample_sum(page, "vllm:num_requests_running") == 0
    assert sample_sum(page, "vllm:kv_cache_usage_perc") == 0
    # counted as vLLM's finish reason "abort" (see docs/sim-server.md on what mainline vLLM
    # counts), its tokens in the generation counter
    router = exposition_samples(requests.get(sim.url + "/metrics", timeout=10).text)
    assert sample_sum(router, "vllm:request_success_total", finished_reason="abort") == 1
    assert sample_sum(router, "vllm:generation_tokens_total") == record.output_tokens + 60


def _send_raw(sim: Sim, body: dict) -> socket.socket:
    payload = json.dumps(body).encode()
    sock = socket.create_connection((sim.host, sim.port), timeout=10)
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    return sock


def test_a_client_gone_while_waiting_for_a_whole_answer_aborts_it(sim_factory) -> None:
    sim = sim_factory()
    sock = _send_raw(sim, _body(2000, stream=False))
    assert wait_until(lambda: sim.server.engine.in_flight == 1, 5.0)
    time.sleep(0.3)
    sock.close()
    assert wait_until(lambda: sim.server.engine.in_flight == 0, 5.0)  # not ~3 s later
    (record,) = sim.server.engine.records
    assert record.finish_reason is FinishReason.ABORT and 0 < record.output_tokens < 2000
    assert _kv_blocks_used(sim) == 0
    assert requests.post(sim.url + "/v1/completions", json=_body(3, stream=False)).ok


def test_a_queued_request_whose_client_leaves_never_runs(sim_factory, predictor) -> None:
    sim = sim_factory(cluster=_config(predictor, max_num_seqs=1))
    first = requests.post(
        sim.url + "/v1/completions", json=_body(400, stream=True), stream=True, timeout=30
    )
    lines = first.iter_lines()
    assert next(lines).startswith(b"data: ")
    sock = _send_raw(sim, _body(50, stream=False, prompt="queued"))
    assert wait_until(lambda: sim.server.engine.in_flight == 2, 5.0)
    sock.close()
    assert wait_until(lambda: sim.server.engine.client_aborts == 1, 5.0)
    (queued,) = [r for r in sim.server.engine.records if r.finish_reason is FinishReason.ABORT]
    assert queued.output_tokens == 0 and queued.first_token_s is None
    events = [json.loads(line[6:]) for line in lines if line.startswith(b"data: {")]
    first.close()
    assert events[-1]["usage"]["completion_tokens"] == 400


# -- keep-alive and the thread pool ----------------------------------------------------------


def test_streamed_and_whole_answers_keep_the_connection(sim_factory) -> None:
    sim = sim_factory(speed=50.0)
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    ports = set()
    try:
        for i, stream in enumerate((False, True, True, False, True)):
            body = json.dumps(_body(5 + i, stream=stream)).encode()
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            assert resp.status == 200, data
            assert resp.getheader("Connection") is None  # HTTP/1.1: open unless "close"
            if stream:
                assert resp.getheader("Transfer-Encoding") == "chunked"
                assert data.endswith(b"data: [DONE]\n\n")
            else:
                assert json.loads(data)["usage"]["completion_tokens"] == 5 + i
            assert conn.sock is not None, "the server closed the connection"
            ports.add(conn.sock.getsockname()[1])
        assert len(ports) == 1
        # a client that asks to close still gets its connection closed
        conn.request("GET", "/v1/models", headers={"Connection": "close"})
        resp = conn.getresponse()
        resp.read()
        assert resp.getheader("Connection") == "close" and conn.sock is None
    finally:
        conn.close()


def test_requests_beyond_the_threads_are_counted(sim_factory) -> None:
    sim = sim_factory(speed=20.0, threads=2)
    results: list[int] = []

    def one(i: int) -> None:
        body = _body(100, stream=True, prompt=f"burst {i}")
        with requests.post(sim.url + "/v1/completions", json=body, stream=True) as resp:
            results.append(sum(1 for line in resp.iter_lines() if line.startswith(b"data: ")))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 5
    runner = sim.server.http_runner
    assert runner.queued_total >= 3  # two threads: at least three of five waited for one
    assert runner.queued_now == 0
