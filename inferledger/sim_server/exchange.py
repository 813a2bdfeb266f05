"""What every view of the stand-in vLLM server does with a request, whatever its endpoint: read
its JSON (one answer to a body that does not parse, as vLLM has), submit engine requests to the
simulation thread, wait for their records or wake up as they produce tokens, and answer JSON or
an SSE stream whose close aborts what is still running.

A view never touches the LiveCluster: it submits PendingRequests to the simulation thread and
waits on their event (inferledger/sim_engine.py). inferledger/sim_server/app.py (completions and
chat) and inferledger/sim_server/extra_routes.py (the other endpoints) build on this module.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import flask

from inferledger.sim_engine import PendingRequest, SimEngine
from inferledger.sim_errors import ApiError, dumps, parse_json
from inferledger.sim_requests import ApiLimits
from models.serving.records import RequestRecord
from models.serving.request import Segment

JSON = "application/json"
SSE = "text/event-stream; charset=utf-8"
POLL_S = 0.25  # how often a waiting thread checks the simulation is alive and the client there
SIMULATION_FAILED = "the simulation stopped after an internal error"


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening socket and what it serves."""

    role: str  # "router", "replica", "dcgm"
    replica: int | None
    sock: socket.socket


class Served(Protocol):
    """What a view needs of the server (inferledger.sim_server.SimServer)."""

    @property
    def served_model_names(self) -> tuple[str, ...]: ...
    @property
    def engine(self) -> SimEngine: ...
    @property
    def limits(self) -> ApiLimits: ...
    @property
    def max_model_len(self) -> int: ...


def json_response(status: int, obj: object) -> flask.Response:
    """Compact UTF-8 JSON, as vLLM writes it."""
    return flask.Response(dumps(obj), status=status, content_type=JSON)


def json_body() -> Any:
    """The request's JSON (sim_errors.parse_json: the same 400 on every endpoint when it does
    not parse)."""
    return parse_json(flask.request.get_data(cache=False))


def simulation_failed(sim: Served) -> bool:
    return sim.engine.failure is not None or not sim.engine.alive


def submit(
    sim: Served,
    prompts: Sequence[tuple[str, tuple[Segment, ...], int]],
    *,
    max_tokens: int,
    params: dict[str, Any],
    stream: bool,
) -> list[PendingRequest]:
    """Submit one engine request per (request id, prompt segments, planned output length), to
    the replica of the listener the request came in on (the router's: None, it places them).
    Each carries the sampling `params` and the client's trace context (traceparent and
    tracestate headers) for its span; one event wakes the thread waiting on any of them."""
    engine = sim.engine
    if engine.failure is not None:
        raise ApiError(SIMULATION_FAILED, status=500)
    context = dict(params)
    traceparent = flask.request.headers.get("traceparent")
    if traceparent:
        context["traceparent"] = traceparent
        tracestate = flask.request.headers.get("tracestate")
        if tracestate:
            context["tracestate"] = tracestate
    listener: Listener = flask.g.listener
    shared = threading.Event()
    pendings = []
    for request_id, segments, length in prompts:
        pending = PendingRequest(
            request_id,
            segments,
            length,
            max_tokens=max_tokens,
            context=dict(context),
            replica=listener.replica,
            stream=stream,
        )
        pending.event = shared
        pendings.append(pending)
    for pending in pendings:
        engine.submit(pending)
    return pendings


def wait_record(sim: Served, pending: PendingRequest) -> RequestRecord:
    """The finished record of a non-streamed request. A client that goes away meanwhile gets
    its request aborted, as vLLM's `with_cancellation` handlers do
    (vllm/entrypoints/utils.py): waitress reports the vanished client while the view waits
    (channel_request_lookahead > 0); the answer, its record with finish_reason "abort", then
    goes nowhere."""
    gone = flask.request.environ.get("waitress.client_disconnected")
    while pending.record is None:
        if pending.event.wait(POLL_S):
            pending.event.clear()
        elif simulation_failed(sim):
            raise ApiError(SIMULATION_FAILED, status=500)
        elif gone is not None and gone():
            sim.engine.abandon(pending)
    return pending.record


def wakeups(sim: Served, pendings: Sequence[PendingRequest]) -> Iterator[bool]:
    """The moments a stream's body looks at its requests again: True after each engine step
    that produced tokens (or POLL_S without one); False, once and last, when the simulation
    has failed. It ends when the client is gone (waitress reports the connection closed while
    no token comes, the requests still queued); a failed write ends the body too. Either way
    the body's close (stream_response) aborts the requests in the simulation.

    Called in the view, where the request is known; iterated after the view has returned,
    outside Flask's request context."""
    gone: Callable[[], bool] | None = flask.request.environ.get("waitress.client_disconnected")
    event = pendings[0].event  # shared by all of them (submit)

    def moments() -> Iterator[bool]:
        while True:
            if event.wait(POLL_S):
                event.clear()
            elif simulation_failed(sim):
                yield False
                return
            elif gone is not None and gone():
                return
            yield True

    return moments()


def stream_response(
    sim: Served, body: Iterator[bytes], pendings: Sequence[PendingRequest]
) -> flask.Response:
    """An SSE answer. Its close runs when waitress is done with the body: finished (nothing to
    do), or the client went away mid-stream: then every request still running is aborted in
    the simulation, as vLLM aborts it."""
    resp = flask.Response(body, status=200, content_type=SSE, headers={"Cache-Control": "no-cache"})
    engine = sim.engine
    resp.call_on_close(lambda: [engine.abandon(p) for p in pendings])
    return resp
