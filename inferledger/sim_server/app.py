"""The HTTP face of the stand-in vLLM server: one Flask app behind every listener, served by
waitress through WaitressRunner as `inferledger serve` is (inferledger/core/http_server.py).

Which listener a request came in on (its SERVER_PORT) decides what it may see: the router and
each replica serve the OpenAI API, /v1/models, /health, /version and their own /metrics; the
dcgm listener serves its /metrics only. Everything a client can observe follows vLLM's
FastAPI server: `{"detail": ...}` bodies for unknown paths (404) and wrong methods (405, no
OPTIONS), OpenAI-style `{"error": {...}}` bodies for bad requests (sim_errors.ApiError), SSE
for streams, and the http_* metrics per listener as prometheus_fastapi_instrumentator keeps
them (inferledger/sim_server/http_metrics.py).

What every view does with a request (JSON in, engine requests submitted to the simulation
thread, records awaited or streamed) is inferledger/sim_server/exchange.py's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Protocol

import flask
from werkzeug.exceptions import HTTPException, NotFound
from werkzeug.http import HTTP_STATUS_CODES

from inferledger.sim_engine import PendingRequest
from inferledger.sim_openai import (
    DONE,
    ApiError,
    ChunkWriter,
    ParsedRequest,
    child_request_id,
    finish_reason,
    full_response,
    parse_request,
    plan_choices,
)
from inferledger.sim_server.exchange import (
    JSON,
    SIMULATION_FAILED,
    Listener,
    Served,
    json_body,
    json_response,
    stream_response,
    submit,
    wait_record,
    wakeups,
)
from inferledger.sim_server.http_metrics import HttpMetrics

PROM = "text/plain; version=0.0.4; charset=utf-8"


class Simulation(Served, Protocol):
    """What the HTTP face needs of the server (inferledger.sim_server.SimServer): what every
    view needs (exchange.Served), its listeners and its pages."""

    @property
    def created(self) -> int: ...
    @property
    def http_requests(self) -> HttpMetrics: ...

    def listener_at(self, port: str) -> Listener | None: ...
    def metrics_page(self, listener: Listener) -> str: ...
    def sim_metrics_page(self) -> str: ...
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
        flask.g.http_start = time.perf_counter()  # where the HTTP duration starts
        listener = sim.listener_at(str(flask.request.environ.get("SERVER_PORT")))
        if listener is None or (listener.role == "dcgm" and flask.request.endpoint != "metrics"):
            raise NotFound()
        flask.g.listener = listener

    @app.after_request
    def finish(resp: flask.Response) -> flask.Response:
        """Give the response uvicorn's status line ("404 Not Found", where Werkzeug writes
        "404 NOT FOUND"), and observe it in the http_* metrics once waitress has sent all of
        it: a stream's duration runs to its last chunk (or the client going away), as
        prometheus_fastapi_instrumentator's does (inferledger/sim_server/http_metrics.py)."""
        code = resp.status_code
        resp.status = f"{code} {HTTP_STATUS_CODES.get(code, 'Status')}"
        environ = flask.request.environ
        start = flask.g.get("http_start", time.perf_counter())
        port = str(environ.get("SERVER_PORT"))
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "")
        rule = flask.request.url_rule  # None when no route matched (404, 405)
        route = rule.rule if rule is not None else None
        try:
            request_bytes = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            request_bytes = 0
        # The header, as the instrumentator reads it: a stream has none (0). Never
        # resp.calculate_content_length(), which would drain a stream's generator.
        response_bytes = int(resp.headers.get("Content-Length") or 0)
        resp.call_on_close(
            lambda: sim.http_requests.observe(
                port,
                path,
                method,
                code,
                time.perf_counter() - start,
                request_bytes,
                response_bytes,
                route=route,
            )
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

    def health() -> flask.Response:
        resp = flask.Response(b"", status=200)
        del resp.headers["Content-Type"]  # vLLM's /health has no body and no content type
        return resp

    def metrics() -> flask.Response:
        listener: Listener = flask.g.listener
        page = sim.dcgm_page() if listener.role == "dcgm" else sim.metrics_page(listener)
        return flask.Response(page.encode(), status=200, content_type=PROM)

    route("/v1/completions", "completions", lambda: generate(sim, chat=False), "POST")
    route("/v1/chat/completions", "chat_completions", lambda: generate(sim, chat=True), "POST")
    route("/health", "health", health, "GET")
    route("/metrics", "metrics", metrics, "GET")

    def sim_metrics() -> flask.Response:
        # The simulator's own inferledger_sim_* series: the router only, off the vLLM page.
        if flask.g.listener.role != "router":
            raise NotFound()
        return flask.Response(sim.sim_metrics_page().encode(), status=200, content_type=PROM)

    route("/sim/metrics", "sim_metrics", sim_metrics, "GET")
    # /version, /v1/models, /ping, /tokenize, /detokenize and /v1/responses (imported here:
    # extra_routes builds on this module)
    from inferledger.sim_server.extra_routes import register

    register(app, sim)
    return app


# --- completions ------------------------------------------------------------------------------


def generate(sim: Simulation, *, chat: bool) -> flask.Response:
    """POST /v1/completions and /v1/chat/completions: validate, submit to the simulation, then
    answer once the records are ready, or stream the tokens as they are produced."""
    parsed = parse_request(json_body(), sim.limits, chat=chat)
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    # One engine request per choice (n per prompt, each prompt of a batch), as vLLM fans a
    # request with n > 1 out into child requests sharing the prompt. Each generates its plan's
    # tokens: to its EOS / stop (sim_outputs.plan_choice) or max_tokens.
    choices = plan_choices(parsed, rid)
    pendings = submit(
        sim,
        [
            (child_request_id(rid, c, len(choices)), c.prompt.segments, c.plan.length)
            for c in choices
        ],
        max_tokens=parsed.max_tokens,
        params=parsed.params,
        stream=parsed.stream,
    )
    created = int(time.time())
    if not parsed.stream:
        records = [wait_record(sim, p) for p in pendings]
        return json_response(200, full_response(parsed, records, rid, created))
    return stream_response(sim, _stream(sim, parsed, pendings, rid, created), pendings)


def _stream(
    sim: Simulation,
    parsed: ParsedRequest,
    pendings: list[PendingRequest],
    rid: str,
    created: int,
) -> Iterator[bytes]:
    """SSE events as the simulation produces tokens: per choice, one chunk per engine step
    that produced some (a step's tokens together when the client reads slower than the engine
    steps), each carrying the choice's index as serving_completion and serving_chat interleave
    them; one usage chunk and [DONE] once every choice has finished."""
    moments = wakeups(sim, pendings)

    def events() -> Iterator[bytes]:
        writers = [ChunkWriter(parsed, rid, created, i) for i in range(len(pendings))]
        done = [False] * len(pendings)
        for alive in moments:
            if not alive:
                yield b"data: " + ApiError(SIMULATION_FAILED, status=500).body() + b"\n\n"
                yield DONE
                return
            for i, (pending, writer) in enumerate(zip(pendings, writers, strict=True)):
                if done[i]:
                    continue
                record = pending.record
                n = record.output_tokens if record is not None else pending.tokens
                if n > writer.sent or record is not None:
                    yield from writer.tokens(n, finish_reason(record))
                done[i] = record is not None
            if all(done):
                yield from writers[0].usage([p.record for p in pendings if p.record is not None])
                return

    return events()
