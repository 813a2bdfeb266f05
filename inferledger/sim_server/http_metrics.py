"""The HTTP metrics of the stand-in's listeners, as vLLM's API server exports them.

vLLM instruments its FastAPI app with prometheus_fastapi_instrumentator
(vllm/entrypoints/serve/instrumentator/metrics.py in vLLM 0.33.0:
``Instrumentator(excluded_handlers=["/metrics", "/health", "/load", "/ping", "/version",
"/server_info"]).add()``), whose ``metrics.default()`` (prometheus-fastapi-instrumentator 8.0.2,
src/prometheus_fastapi_instrumentator/metrics.py and middleware.py) registers five families:

- ``http_requests_total{handler, method, status}`` (counter)
- ``http_request_size_bytes{handler}`` (summary of the request's Content-Length header, 0 without
  one)
- ``http_response_size_bytes{handler}`` (summary of the response's Content-Length header: 0 for a
  stream, which has none)
- ``http_request_duration_highr_seconds`` (histogram, no labels, 21 buckets .01 … 60)
- ``http_request_duration_seconds{handler, method}`` (histogram, buckets .1 .5 1)

The rules the middleware applies, and this module copies:

- handler: the matched route's path template (Starlette's, "/v1/responses/{response_id}"); a
  path that matches no route is "untemplated" and is labelled "none" (should_group_untemplated).
- excluded: the handler (the raw path when untemplated) is matched against every excluded
  pattern with ``re.search``, before the grouping to "none"; an excluded request is not observed
  at all. So /metrics, /health, /ping, /version and any path containing them count nowhere.
- status: grouped to its class, "2xx", "4xx", … (should_group_status_codes).
- duration: from the request's arrival at the middleware until the app has sent the whole
  response, so a stream's duration runs to its last chunk (or the client going away):
  should_exclude_streaming_duration is False.

Each listener (port) has its own registry, as each `vllm serve` process has its own; families are
written by prometheus_client itself (generate_latest), so names, HELP texts, label order, the
``_created`` samples and number formatting are the library's. The families are registered when a
listener is first seen, after the engine's, as vLLM registers the instrumentator after its
engine's stat loggers: a page is the vllm: families followed by these.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, Summary, generate_latest

#: The stand-in's fixed routes: a request to one of these paths whose route the app did not report
#: (a 405, where Flask matched no rule) is still "templated", as Starlette's partial match is.
KNOWN_PATHS = frozenset(
    {
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/models",
        "/tokenize",
        "/detokenize",
        "/health",
        "/ping",
        "/metrics",
        "/version",
    }
)
#: vLLM's excluded_handlers (regular expressions, matched with re.search).
EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")
#: metrics.default()'s buckets (+Inf is added by prometheus_client).
HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5,
    10, 30, 60,
)  # fmt: skip
LOWR_BUCKETS = (0.1, 0.5, 1)
# Methods written as sent; anything else (a client's invented token) as "other", so that a
# misbehaving client cannot grow the label set without bound (vLLM writes the raw token).
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_SIZE_HELP = (
    "Content length of {} by handler. Only value of header is respected. Otherwise ignored. "
    "No percentile calculated. "
)


class _ListenerMetrics:
    """The five families of one listener, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.total = Counter(
            "http_requests_total",
            "Total number of requests by method, status and handler.",
            ("method", "status", "handler"),
            registry=r,
        )
        self.in_size = Summary(
            "http_request_size_bytes",
            _SIZE_HELP.format("incoming requests"),
            ("handler",),
            registry=r,
        )
        self.out_size = Summary(
            "http_response_size_bytes",
            _SIZE_HELP.format("outgoing responses"),
            ("handler",),
            registry=r,
        )
        self.highr = Histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. "
            "Made for more accurate percentile calculations. ",
            buckets=HIGHR_BUCKETS,
            registry=r,
        )
        self.lowr = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. "
            "Made to be only used if aggregation by handler is important. ",
            ("method", "handler"),
            buckets=LOWR_BUCKETS,
            registry=r,
        )


_FLASK_PARAM = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")


def handler_label(
    path: str, route: str | None = None, excluded: Iterable[str] = EXCLUDED_HANDLERS
) -> str | None:
    """The handler label a request to `path` gets, or None when vLLM does not observe it.

    route: the rule the app matched (Flask's syntax, "/v1/responses/<response_id>"), written
    as Starlette writes the template ("/v1/responses/{response_id}"); None when no rule matched:
    then one of KNOWN_PATHS is its own template and any other path is untemplated."""
    if route is not None:
        handler, templated = _FLASK_PARAM.sub(r"{\1}", route), True
    else:
        handler, templated = path, path in KNOWN_PATHS
    if any(re.search(pattern, handler) for pattern in excluded):
        return None
    return handler if templated else "none"


class HttpMetrics:
    """The HTTP metrics of every listener, keyed by its port. Thread-safe: every waitress worker
    thread observes into it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: dict[str, _ListenerMetrics] = {}

    def _of(self, port: str) -> _ListenerMetrics:
        with self._lock:
            m = self._listeners.get(port)
            if m is None:
                m = self._listeners[port] = _ListenerMetrics()
            return m

    def observe(
        self,
        port: str,
        path: str,
        method: str,
        status: int,
        duration_s: float,
        request_bytes: int = 0,
        response_bytes: int = 0,
        *,
        route: str | None = None,
    ) -> None:
        """One answered request on the listener at `port`, once its response has been sent
        (a stream: its last chunk written, or the client gone).

        path: the request path (PATH_INFO); route: the app's rule that matched it, if any
        (flask.request.url_rule.rule); request_bytes / response_bytes: the values of the
        request's and the response's Content-Length headers, 0 where there is none."""
        handler = handler_label(path, route)
        if handler is None:
            return
        method = method if method in _METHODS else "other"
        m = self._of(str(port))
        duration = max(float(duration_s), 0.0)
        m.total.labels(method, f"{int(status) // 100}xx", handler).inc()
        m.in_size.labels(handler).observe(max(int(request_bytes), 0))
        m.out_size.labels(handler).observe(max(int(response_bytes), 0))
        m.highr.observe(duration)
        m.lowr.labels(method, handler).observe(duration)

    def render(self, port: str) -> str:
        """The five families of the listener at `port`, in exposition format 0.0.4."""
        return generate_latest(self._of(str(port)).registry).decode()
