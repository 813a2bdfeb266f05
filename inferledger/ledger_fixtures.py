"""Small, exact ledger scenarios for tests and docs: an app's spans, vLLM's engine spans and a
replica's scrapes, built with the real OTLP classes and stored through the real ingest path
(the decoder and the INSERT the receiver uses; the scraper's parser and writes).

Times are integer nanoseconds; helpers take seconds relative to a base for readability.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans, Span, Status

from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.settings import ScrapeTarget
from inferledger.core.storage import Storage
from ingest.scraper import Scraper
from ingest.span_writer import decode_for_storage, insert_spans
from models.otlp import add_attribute

S = 1_000_000_000  # ns per second


@dataclass
class SpanSet:
    """Spans grouped by service (one OTLP resource per service), in one export request."""

    base_ns: int
    _scopes: dict[tuple[str, str | None], ScopeSpans] = field(default_factory=dict)
    _req: ExportTraceServiceRequest = field(default_factory=ExportTraceServiceRequest)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def ns(self, seconds: float) -> int:
        return self.base_ns + round(seconds * S)

    def new_trace(self) -> bytes:
        return next(self._ids).to_bytes(16, "big")

    def _scope(self, service: str, instance: str | None, environment: str) -> ScopeSpans:
        key = (service, instance)
        if key not in self._scopes:
            rs = self._req.resource_spans.add()
            add_attribute(rs.resource.attributes, "service.name", service)
            add_attribute(rs.resource.attributes, "deployment.environment.name", environment)
            if instance is not None:
                add_attribute(rs.resource.attributes, "service.instance.id", instance)
            ss = rs.scope_spans.add()
            ss.scope.name = "vllm.llm_engine" if instance else "inferledger.test"
            self._scopes[key] = ss
        return self._scopes[key]

    def span(
        self,
        trace: bytes,
        name: str,
        start_s: float,
        end_s: float,
        *,
        parent: bytes | None = None,
        kind: int = Span.SPAN_KIND_INTERNAL,
        service: str = "app",
        instance: str | None = None,
        environment: str = "prod",
        error: bool = False,
        attributes: Sequence[tuple[str, object]] = (),
    ) -> bytes:
        """Add one span; returns its span id."""
        span = self._scope(service, instance, environment).spans.add()
        span_id = next(self._ids).to_bytes(8, "big")
        span.trace_id = trace
        span.span_id = span_id
        if parent is not None:
            span.parent_span_id = parent
        span.name = name
        span.kind = kind
        span.start_time_unix_nano = self.ns(start_s)
        span.end_time_unix_nano = self.ns(end_s)
        if error:
            span.status.code = Status.STATUS_CODE_ERROR
        for key, value in attributes:
            if value is not None:
                add_attribute(span.attributes, key, value)
        return span_id

    def root(
        self,
        trace: bytes,
        start_s: float,
        end_s: float,
        *,
        app: str,
        route: str,
        team: str | None = None,
        workflow: str | None = None,
        task_id: str | None = None,
        attempt: int | None = None,
        outcome: str | None = None,
        review_s: float | None = None,
        service: str | None = None,
        error: bool = False,
    ) -> bytes:
        """An app's SERVER span carrying InferLedger's task attributes."""
        return self.span(
            trace,
            f"POST {route}",
            start_s,
            end_s,
            kind=Span.SPAN_KIND_SERVER,
            service=service or app,
            error=error,
            attributes=[
                ("inferledger.app", app),
                ("inferledger.team", team),
                ("inferledger.route", route),
                ("inferledger.workflow", workflow),
                ("inferledger.task.id", task_id),
                ("inferledger.attempt", attempt),
                ("inferledger.outcome", outcome),
                ("inferledger.review.seconds", review_s),
            ],
        )

    def llm_call(
        self,
        trace: bytes,
        parent: bytes,
        start_s: float,
        end_s: float,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int | None = None,
        provider: str = "vllm",
        service: str = "app",
        task_id: str | None = None,
        attempt: int | None = None,
        fallback: bool | None = None,
        error: bool = False,
    ) -> bytes:
        """An app's GenAI CLIENT span (`chat <model>`)."""
        return self.span(
            trace,
            f"chat {model}",
            start_s,
            end_s,
            parent=parent,
            kind=Span.SPAN_KIND_CLIENT,
            service=service,
            error=error,
            attributes=[
                ("gen_ai.operation.name", "chat"),
                ("gen_ai.provider.name", provider),
                ("gen_ai.request.model", model),
                ("gen_ai.usage.input_tokens", input_tokens),
                ("gen_ai.usage.output_tokens", output_tokens),
                ("gen_ai.usage.cache_read.input_tokens", cached_tokens),
                ("inferledger.task.id", task_id),
                ("inferledger.attempt", attempt),
                ("inferledger.fallback", fallback),
            ],
        )

    def engine(
        self,
        trace: bytes,
        parent: bytes | None,
        arrival_s: float,
        end_s: float,
        *,
        replica: str,
        queue_s: float,
        ttft_s: float,
        prompt_tokens: int,
        completion_tokens: int,
        service: str = "vllm",
        error: bool = False,
    ) -> bytes:
        """vLLM's `llm_request` SERVER span on one replica, with its latency set."""
        e2e = end_s - arrival_s
        return self.span(
            trace,
            "llm_request",
            arrival_s,
            end_s,
            parent=parent,
            kind=Span.SPAN_KIND_SERVER,
            service=service,
            instance=replica,
            error=error,
            attributes=[
                ("gen_ai.usage.prompt_tokens", prompt_tokens),
                ("gen_ai.usage.completion_tokens", completion_tokens),
                ("gen_ai.latency.time_in_queue", queue_s),
                ("gen_ai.latency.time_to_first_token", ttft_s),
                ("gen_ai.latency.time_in_model_prefill", ttft_s - queue_s),
                ("gen_ai.latency.time_in_model_decode", e2e - ttft_s),
                ("gen_ai.latency.e2e", e2e),
            ],
        )

    def service_call(
        self,
        trace: bytes,
        parent: bytes,
        start_s: float,
        end_s: float,
        *,
        stage: str,
        key: str,
        service: str = "app",
        error: bool = False,
    ) -> bytes:
        """A retrieval (`gen_ai.data_source.id`) or tool (`gen_ai.tool.name`) span."""
        if stage == "retrieval":
            name, attrs = (
                f"retrieval {key}",
                [
                    ("gen_ai.operation.name", "retrieval"),
                    ("gen_ai.data_source.id", key),
                ],
            )
        else:
            name, attrs = (
                f"execute_tool {key}",
                [
                    ("gen_ai.operation.name", "execute_tool"),
                    ("gen_ai.tool.name", key),
                ],
            )
        return self.span(
            trace, name, start_s, end_s, parent=parent, service=service, error=error,
            attributes=attrs,
        )  # fmt: skip

    def payload(self) -> bytes:
        return self._req.SerializeToString()

    def store(self, storage: Storage) -> int:
        """Store the spans through the receiver's decode and INSERT; returns rows written."""
        decoded = decode_for_storage(self.payload())
        if decoded.errors:
            raise ValueError(f"fixture spans rejected: {decoded.errors}")
        return storage.write(lambda tx: insert_spans(tx, decoded))


def vllm_page(model: str = "test-model", running: int = 0) -> str:
    """A minimal vLLM /metrics page."""
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="{model}"}} {running}\n'
    )


def store_scrapes(
    storage: Storage,
    replica: str,
    deployment: str,
    base_ns: int,
    times_s: Sequence[float],
    *,
    down_at_s: Sequence[float] = (),
    model: str = "test-model",
) -> None:
    """Record scrapes of a replica's vLLM target at the given times (seconds from base_ns):
    successful ones, and failed ones (a page that does not parse) at ``down_at_s``."""
    scraper = Scraper(storage, ServiceMetrics(), 1 << 20)
    target = ScrapeTarget(replica, f"http://{replica}:8000/metrics", 15, 10, "vllm", deployment)
    down = set(down_at_s)
    for t in sorted({*times_s, *down}):
        ts = datetime.fromtimestamp((base_ns + round(t * S)) / S, UTC)
        text = "this is not exposition text {\n" if t in down else vllm_page(model)
        scraper.ingest_text(target, text, "text/plain; version=0.0.4", ts)
    scraper.close()


def worked_example(storage: Storage, base_ns: int) -> None:
    """docs/cost-model.md's worked example, `base_ns` being its second 0: one replica `r0` of
    deployment `dep` (1 x H200 at $3.60/GPU-hour) up for 100 s; request A (app a1) prefills
    1,000 tokens in [10, 12) and decodes 19 tokens until 30; request B (app a2) prefills 100
    tokens in [20, 21) and decodes 20 tokens until 40. Both on route /r of team t."""
    from ledger.deployments import sync_configured
    from ledger.price_book import set_price
    from models.deployment_config import Deployment

    set_price(storage, "gpu", "H200", "gpu_hour", 3.60, "2026-01-01", changed_by="fixture",
              source="cli")  # fmt: skip
    sync_configured(storage, [Deployment("dep", model="m", gpu_type="H200", gpus_per_replica=1)])
    store_scrapes(storage, "r0", "dep", base_ns, [10 * i for i in range(10)])
    spans = SpanSet(base_ns)
    for app, start, ttft, end, prompt, completion in (
        ("a1", 10, 2, 30, 1000, 19),
        ("a2", 20, 1, 40, 100, 20),
    ):
        trace = spans.new_trace()
        root = spans.root(trace, start - 0.5, end + 0.5, app=app, route="/r", team="t")
        call = spans.llm_call(
            trace, root, start - 0.1, end + 0.1, model="m", input_tokens=prompt,
            output_tokens=completion,
        )  # fmt: skip
        spans.engine(
            trace, call, start, end, replica="r0", queue_s=0.0, ttft_s=ttft,
            prompt_tokens=prompt, completion_tokens=completion,
        )  # fmt: skip
    spans.store(storage)


#: partial_scrapes' scenario, for tests and docs/cost-model.md's coverage example.
PARTIAL_GPU_PRICE = 3.60  # $/GPU-hour, H200
PARTIAL_GPUS = 2  # GPUs per replica of deployment `dep`
PARTIAL_REQUEST_S = 20.0  # each request's engine time
PARTIAL_EVERY_S = 600.0  # one request on each replica every 10 minutes


def partial_scrapes(
    storage: Storage,
    base_ns: int,
    *,
    hours: int = 4,
    scraped_hours: int = 1,
    scraped_s: int | None = None,
    priced: bool = True,
) -> None:
    """A ledger whose metrics are missing for most of its traffic (issue #10, §1): requests on
    replica `r0` of deployment `dep` (2 x H200, $3.60/GPU-hour when `priced`) every 10 minutes
    for `hours` hours from `base_ns` (an hour start), each 20 s of engine time (1 s to first
    token), but r0 is scraped (every 15 s) only in the last `scraped_hours` hours. Replica
    `rx`, never scraped and so of no known deployment, serves one request per hour at minute 5:
    it cannot be costed at all. Requests are on route /r of app a1 (r0) and a2 (rx), team t.
    `scraped_s`, when given, scrapes only the last that many seconds instead (issue #10's
    "busy 124 %": far more busy time than scraped time)."""
    from ledger.deployments import sync_configured
    from ledger.price_book import set_price
    from models.deployment_config import Deployment

    if priced:
        set_price(storage, "gpu", "H200", "gpu_hour", PARTIAL_GPU_PRICE, "2026-01-01",
                  changed_by="fixture", source="cli")  # fmt: skip
    sync_configured(
        storage,
        [Deployment("dep", model="m", gpu_type="H200", gpus_per_replica=PARTIAL_GPUS)],
    )
    first_scraped_s = hours * 3600 - (scraped_s if scraped_s is not None else scraped_hours * 3600)
    store_scrapes(
        storage, "r0", "dep", base_ns, [float(t) for t in range(first_scraped_s, hours * 3600, 15)]
    )
    spans = SpanSet(base_ns)
    starts = [(t, "r0", "a1") for t in range(30, hours * 3600, int(PARTIAL_EVERY_S))]
    starts += [(h * 3600 + 300, "rx", "a2") for h in range(hours)]
    for start, replica, app in starts:
        end = start + PARTIAL_REQUEST_S
        trace = spans.new_trace()
        root = spans.root(trace, start - 0.5, end + 0.5, app=app, route="/r", team="t")
        call = spans.llm_call(
            trace, root, start - 0.1, end + 0.1, model="m", input_tokens=500, output_tokens=50,
        )  # fmt: skip
        spans.engine(
            trace, call, start, end, replica=replica, queue_s=0.0, ttft_s=1.0,
            prompt_tokens=500, completion_tokens=50,
        )  # fmt: skip
    spans.store(storage)


# --------------------------------------------------------------- alerts (issue #12)
UNPRICED_MODEL = "mystery-model"


def unpriced_requests(storage: Storage, base_ns: int, n: int = 3) -> None:
    """`n` requests of chat's /ask (team search) to a model the price book does not know,
    one a second from `base_ns`, stored and the marts refreshed: unpriced usage an
    unpriced_usage rule fires on (the bundled prices are seeded first)."""
    from ledger.marts import refresh
    from ledger.price_book import seed_if_empty

    seed_if_empty(storage, None)
    spans = SpanSet(base_ns)
    for i in range(n):
        trace = spans.new_trace()
        root = spans.root(trace, i, i + 2, app="chat", route="/ask", team="search")
        spans.llm_call(
            trace,
            root,
            i + 0.1,
            i + 1.5,
            model=UNPRICED_MODEL,
            provider="mystery",
            input_tokens=100,
            output_tokens=20,
        )
    spans.store(storage)
    refresh(storage)


def watch_unpriced(
    storage: Storage, hook_url: str, *, by: str, name: str = "unpriced", per_model: bool = True
) -> None:
    """A webhook channel `hook` to `hook_url` and an unpriced_usage rule (1 request in an hour
    fires it, at once) notifying it, one alert per model unless `per_model` is off."""
    from ledger.alert_rules import save_channel, save_rule
    from models.alert_config import AlertRule, Channel

    save_channel(storage, Channel(name="hook", kind="webhook", config={"url": hook_url}), by=by)
    rule = AlertRule(
        name=name,
        kind="unpriced_usage",
        owner="ops@example.com",
        window_s=3600,
        threshold=1,
        resolve_threshold=0.5,
        pending_s=0,
        channels=("hook",),
        group_by=("model",) if per_model else (),
    )
    save_rule(storage, rule, by=by)
