"""The HTTP face of the stand-in vLLM server: one Flask app behind every listener, served by
waitress through WaitressRunner as `inferledger serve` is (inferledger/core/http_server.py).

Which listener a request came in on (its SERVER_PORT) decides what it may see: the router and
each replica serve the OpenAI API, /v1/models, /health, /version and their own /metrics; the
dcgm listener serves its /metrics only. Everything a client can observe follows vLLM's
FastAPI server: `{"detail": ...}` bodies for unknown paths (404) and wrong methods (405, no
OPTIONS), OpenAI-style `{"error": {...}}` bodies for bad requests (sim_openai.ApiError), SSE
for streams, and http_requests_total per listener as prometheus_fastapi_instrumentator counts.

A view never touches the LiveCluster: it submits a PendingRequest to the simulation thread and
waits on its event (inferledger/sim_engine.py).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import flask
from werkzeug.exceptions import HTTPException, NotFound
from werkzeug.http import HTTP_STATUS_CODES

from inferledger.sim_engine import PendingRequest, SimEngine
from inferledger.sim_openai import (
    ApiError,
    ApiLimits,
    ChunkWriter,
    ParsedRequest,
    dumps,
    event,
    finish_reason,
    full_response,
    parse_request,
)
from models.serving.records import RequestRecord

JSON = "application/json"
PROM = "text/plain; version=0.0.4; charset=utf-8"
SSE = "text/event-stream; charset=utf-8"
WAIT_POLL_S = 1.0  # how often a waiting request thread checks the simulation thread is alive

#: Handlers http_requests_total names; any other path counts as "none", as in vLLM.
KNOWN_PATHS = frozenset(
    {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics", "/version"}
)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening socket and what it serves."""

    role: str  # "router", "replica", "dcgm"
    replica: int | None
    sock: socket.socket


class HttpRequestCounts:
    """http_requests_total of each listener, as vLLM's prometheus_fastapi_instrumentator
    counts them: (port, handler, method, status class) → count. Thread-safe: every waitress
    worker thread adds to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str, str], int] = {}

    def add(self, port: str, path: str, method: str, status: int) -> None:
        key = (
            port,
            path if path in KNOWN_PATHS else "none",
            method if method in _METHODS else "other",
            f"{status // 100}xx",
        )
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def render(self, port: str) -> str:
        """The http_requests_total family of one listener (its port), in exposition format."""
        with self._lock:
            counts = sorted((k[1:], v) for k, v in self._counts.items() if k[0] == port)
        lines = [
            "# HELP http_requests_total Total number of requests by method, status and handler.",
            "# TYPE http_requests_total counter",
        ]
        for (handler, method, status), count in counts:
            lines.append(
                f'http_requests_total{{handler="{handler}",method="{method}",status="{status}"}} '
                f"{float(count)!r}"
            )
        return "\n".join(lines) + "\n"


class Simulation(Protocol):
    """What the HTTP face needs of the server (inferledger.sim_server.SimServer)."""

    @property
    def served_model_names(self) -> tuple[str, ...]: ...
    @property
    def engine(self) -> SimEngine: ...
    @property
    def limits(self) -> ApiLimits: ...
    @property
    def created(self) -> int: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def http_requests(self) -> HttpRequestCounts: ...

    def listener_at(self, port: str) -> Listener | None: ...
    def metrics_page(self, listener: Listener) -> str: ...
    def dcgm_page(self) -> str: ...


def create_app(sim: Simulation) -> flask.Flask:
    """The Flask app of every listener of `sim` (see the module's docstring)."""
    app = flask.Flask(__name__, static_folder=None)
    # Paths match exactly, as vLLM's do: no redirect from "/v1//models" to "/v1/models".
    app.url_map.merge_slashes = False

    def route(path: str, endpoint: str, view: Callable[[], flask.Response], method: str) -> None:
        # No automatic OPTIONS: vLLM answers it 405 (GET routes still answer HEAD).
        app.add_url_rule(path, endpoint, view, methods=[method], provide_automatic_options=False)

    @app.before_request
    def pick_listener() -> None:
        """The listener the request came in on; the dcgm one serves /metrics only."""
        listener = sim.listener_at(str(flask.request.environ.get("SERVER_PORT")))
        if listener is None or (listener.role == "dcgm" and flask.request.endpoint != "metrics"):
            raise NotFound()
        flask.g.listener = listener

    @app.after_request
    def finish(resp: flask.Response) -> flask.Response:
        """Count the response, and give it uvicorn's status line ("404 Not Found", where
        Werkzeug writes "404 NOT FOUND")."""
        code = resp.status_code
        resp.status = f"{code} {HTTP_STATUS_CODES.get(code, 'Status')}"
        environ = flask.request.environ
        sim.http_requests.add(
            str(environ.get("SERVER_PORT")),
            environ.get("PATH_INFO", ""),
            environ.get("REQUEST_METHOD", ""),
            code,
        )
        return resp

    @app.errorhandler(ApiError)
    def api_error(exc: ApiError) -> flask.Response:
        return flask.Response(exc.body(), status=exc.http_status, content_type=JSON)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> flask.Response:
        # FastAPI's shape: {"detail": "Not Found"}, {"detail": "Method Not Allowed"}; an
        # unexpected exception arrives here as a 500 (Flask has logged it).
        return json_response(exc.code or 500, {"detail": exc.name})

    def models() -> flask.Response:
        data = [
            {
                "id": name,
                "object": "model",
                "created": sim.created,
                "owned_by": "vllm",
                "root": name,
                "parent": None,
                "max_model_len": sim.max_model_len,
                "permission": [],
            }
            for name in sim.served_model_names
        ]
        return json_response(200, {"object": "list", "data": data})

    def health() -> flask.Response:
        resp = flask.Response(b"", status=200)
        del resp.headers["Content-Type"]  # vLLM's /health has no body and no content type
        return resp

    def version() -> flask.Response:
        return json_response(200, {"version": "inferledger-sim"})

    def metrics() -> flask.Response:
        listener: Listener = flask.g.listener
        page = sim.dcgm_page() if listener.role == "dcgm" else sim.metrics_page(listener)
        return flask.Response(page.encode(), status=200, content_type=PROM)

    route("/v1/completions", "completions", lambda: generate(sim, chat=False), "POST")
    route("/v1/chat/completions", "chat_completions", lambda: generate(sim, chat=True), "POST")
    route("/v1/models", "models", models, "GET")
    route("/health", "health", health, "GET")
    route("/metrics", "metrics", metrics, "GET")
    route("/version", "version", version, "GET")
    return app


def json_response(status: int, obj: object) -> flask.Response:
    """Compact UTF-8 JSON, as vLLM writes it."""
    return flask.Response(dumps(obj), status=status, content_type=JSON)


# --- completions ------------------------------------------------------------------------------


def generate(sim: Simulation, *, chat: bool) -> flask.Response:
    """POST /v1/completions and /v1/chat/completions: validate, submit to the simulation, then
    answer once the record is ready, or stream its tokens as they are produced."""
    req = flask.request
    try:
        body = json.loads(req.get_data(cache=False))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(f"the request body is not valid JSON: {exc}") from None
    parsed = parse_request(body, sim.limits, chat=chat)
    engine = sim.engine
    if engine.failure is not None:
        raise ApiError("the simulation stopped after an internal error", status=500)
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    context = dict(parsed.params)
    traceparent = req.headers.get("traceparent")
    if traceparent:
        context["traceparent"] = traceparent
        tracestate = req.headers.get("tracestate")
        if tracestate:
            context["tracestate"] = tracestate
    listener: Listener = flask.g.listener
    pending = PendingRequest(
        rid,
        parsed.prompt,
        parsed.max_tokens,  # ignore_eos: every request generates max_tokens tokens
        max_tokens=parsed.max_tokens,
        context=context,
        replica=listener.replica,
        stream=parsed.stream,
    )
    engine.submit(pending)
    created = int(time.time())
    if not parsed.stream:
        return json_response(200, full_response(parsed, _wait_record(sim, pending), rid, created))
    resp = flask.Response(
        _stream(sim, parsed, pending, rid, created),
        status=200,
        content_type=SSE,
        headers={"Cache-Control": "no-cache"},
    )
    # Runs when waitress is done with the body: finished, or the client went away mid-stream.
    resp.call_on_close(lambda: engine.abandon(pending))
    return resp


def _simulation_failed(sim: Simulation) -> bool:
    return sim.engine.failure is not None or not sim.engine.alive


def _wait_record(sim: Simulation, pending: PendingRequest) -> RequestRecord:
    while pending.record is None:
        if pending.event.wait(WAIT_POLL_S):
            pending.event.clear()
        elif _simulation_failed(sim):
            raise ApiError("the simulation stopped after an internal error", status=500)
    return pending.record


def _stream(
    sim: Simulation, parsed: ParsedRequest, pending: PendingRequest, rid: str, created: int
) -> Iterator[bytes]:
    """SSE events as the simulation produces tokens: one chunk per engine step that produced
    some (a step's tokens together when the client reads slower than the engine steps). Runs
    after the view has returned, outside Flask's request context."""
    writer = ChunkWriter(parsed, rid, created)
    while True:
        if pending.event.wait(WAIT_POLL_S):
            pending.event.clear()
        elif _simulation_failed(sim):
            error = ApiError("the simulation stopped after an internal error", status=500)
            yield event(json.loads(error.body()))
            yield b"data: [DONE]\n\n"
            return
        record = pending.record
        n = record.output_tokens if record is not None else pending.tokens
        if n > writer.sent or record is not None:
            yield from writer.tokens(n, finish_reason(record))
        if record is not None:
            yield from writer.usage(record)
            return
