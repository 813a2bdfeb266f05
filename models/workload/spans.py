"""The apps' spans, as OTLP protobuf, laid out on the engines' timings.

Per attempt (one trace, W3C ids drawn in the plan):

    SERVER   POST /answer                  the app's root span: inferledger.* task attributes,
    │                                      the outcome on the task's final attempt
    ├─ CLIENT  retrieval support-kb        vector-database query (inferledger.stage=retrieval)
    ├─ CLIENT  chat <model>                one per LLM call (gen_ai.*); its span id is the
    │  └─ SERVER llm_request               traceparent the engine's span is parented on
    ├─ INTERNAL execute_tool lookup_order  (inferledger.stage=tools)
    └─ CLIENT  chat <model>                the answer after the tool result

A fallback attempt's CLIENT span goes to a hosted API (gen_ai.provider.name=openai) and has no
engine span. Keys follow the OpenTelemetry GenAI, HTTP and database conventions and
docs/attributes.md. The engine's `llm_request` spans come from models.serving.telemetry.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from models.otlp import add_attribute as _set
from models.serving.request import FinishReason
from models.serving.telemetry import engine_spans
from models.workload.config import AppConfig, DeploymentConfig
from models.workload.plan import Attempt, LlmCall, Step, StepKind, Task
from models.workload.simulation import SimulatedPlan, walk_attempt

APP_SCOPE = "inferledger.demo.app"
APP_SCOPE_VERSION = "1.0.0"
ENGINE_PORT = 8000
DEFAULT_MAX_SPANS = 3000


def engine_instance(deployment: DeploymentConfig, replica: int) -> str:
    """The name of one engine everywhere: its scrape target, and service.instance.id."""
    return f"{deployment.service_name}-{replica}"


@dataclass(frozen=True, slots=True)
class _AttemptRef:
    task: Task
    attempt: Attempt


class SpanBuilder:
    """Builds the export requests of a simulated plan, attempt by attempt."""

    def __init__(self, sim: SimulatedPlan) -> None:
        self.sim = sim
        plan = sim.plan
        self.config = plan.config
        # Integer ns of simulated second 0, so every timestamp is exact integer arithmetic.
        self.epoch_ns = round(plan.start_unix_s * 1e9)
        refs: list[_AttemptRef | None] = [None] * plan.num_attempts
        for task in plan.tasks:
            for attempt in task.attempts:
                refs[attempt.index] = _AttemptRef(task, attempt)
        self._refs: list[_AttemptRef] = refs  # type: ignore[assignment]
        self._by_end = np.argsort(sim.schedule.attempt_end, kind="stable")
        self._ends = sim.schedule.attempt_end[self._by_end]
        self._deployments = {d.name: d for d in self.config.deployments}

    # -- selection ------------------------------------------------------------------------
    def attempts_ending(self, start_s: float, end_s: float) -> np.ndarray:
        """Indices of the attempts whose root span ends in [start_s, end_s) (seconds from the
        plan's start), in order of their end: what an exporter has sent by end_s."""
        lo = int(np.searchsorted(self._ends, start_s, side="left"))
        hi = int(np.searchsorted(self._ends, end_s, side="left"))
        return self._by_end[lo:hi]

    @property
    def last_end_s(self) -> float:
        return float(self._ends[-1]) if len(self._ends) else 0.0

    def span_count(self, attempts: Sequence[int]) -> int:
        """Spans the attempts produce (app spans plus traced engine spans)."""
        return sum(self._spans_of(self._refs[i].attempt) for i in attempts)

    def _spans_of(self, attempt: Attempt) -> int:
        n = 1
        for step in attempt.steps:
            if step.kind is StepKind.LLM:
                n += len(step.calls)
                n += sum(1 for c in step.calls if c.engine_index >= 0 and self._traced(c))
            else:
                n += 1
        return n

    def _traced(self, call: LlmCall) -> bool:
        rec = self.sim.records[call.engine_index]
        return rec.first_token_s is not None and rec.finish_reason in (
            FinishReason.STOP,
            FinishReason.LENGTH,
        )

    # -- export requests ------------------------------------------------------------------
    def export_requests(
        self, attempts: Sequence[int], *, max_spans: int = DEFAULT_MAX_SPANS
    ) -> Iterator[ExportTraceServiceRequest]:
        """The attempts' app and engine spans, in requests of about max_spans spans each (a
        trace is never split across requests)."""
        batch: list[int] = []
        count = 0
        for i in attempts:
            n = self._spans_of(self._refs[int(i)].attempt)
            if batch and count + n > max_spans:
                yield self.export_request(batch)
                batch, count = [], 0
            batch.append(int(i))
            count += n
        if batch:
            yield self.export_request(batch)

    def export_request(self, attempts: Sequence[int]) -> ExportTraceServiceRequest:
        """One request: a resource per app with its spans, then one per engine replica."""
        req = ExportTraceServiceRequest()
        by_app: dict[str, list[_AttemptRef]] = {}
        engine_calls: dict[tuple[str, int], list[int]] = {}
        for i in attempts:
            ref = self._refs[i]
            by_app.setdefault(ref.task.app.name, []).append(ref)
            for step in ref.attempt.steps:
                for call in step.calls:
                    if call.engine_index >= 0:
                        rec = self.sim.records[call.engine_index]
                        engine_calls.setdefault((call.deployment or "", rec.replica), []).append(
                            call.engine_index
                        )
        for refs in by_app.values():
            rs = req.resource_spans.add()
            self._app_resource(rs, refs[0].task.app)
            ss = rs.scope_spans.add()
            ss.scope.name = APP_SCOPE
            ss.scope.version = APP_SCOPE_VERSION
            for ref in refs:
                self._attempt_spans(ss.spans, ref)
        for (name, replica), indices in sorted(engine_calls.items()):
            dep = self._deployments[name]
            indices.sort()
            part = engine_spans(
                [self.sim.records[k] for k in indices],
                epoch_ns=self.epoch_ns,
                resource={
                    "service.name": dep.service_name,
                    "service.instance.id": engine_instance(dep, replica),
                    "deployment.environment.name": self.config.environment,
                    "host.name": dep.node,
                },
            )
            req.resource_spans.extend(part.resource_spans)
        return req

    # -- app spans ------------------------------------------------------------------------
    def _app_resource(self, rs: ResourceSpans, app: AppConfig) -> None:
        a = rs.resource.attributes
        _set(a, "service.name", app.service_name)
        _set(a, "service.namespace", app.namespace)
        _set(a, "service.version", app.version)
        _set(a, "deployment.environment.name", self.config.environment)
        _set(a, "inferledger.app", app.name)
        _set(a, "inferledger.team", app.team)
        _set(a, "telemetry.sdk.language", "python")

    def _ns(self, t: float) -> int:
        return self.epoch_ns + round(t * 1e9)

    def _attempt_spans(self, spans: Any, ref: _AttemptRef) -> None:
        task, attempt = ref.task, ref.attempt
        sim = self.sim
        route = task.route
        trace_id = attempt.trace_id
        root_id = attempt.root_span_id
        final = attempt is task.attempts[-1]

        def visit(step: Step, start: float, end: float, calls: list[tuple[float, float]]) -> None:
            if step.kind is StepKind.LLM:
                for call, (c_start, c_end) in zip(step.calls, calls, strict=True):
                    self._llm_span(spans.add(), task, attempt, call, c_start, c_end)
                return
            span = spans.add()
            span.trace_id = trace_id
            span.span_id = step.span_id
            span.parent_span_id = root_id
            span.start_time_unix_nano = self._ns(start)
            span.end_time_unix_nano = self._ns(end)
            a = span.attributes
            if step.kind is StepKind.RETRIEVAL:
                r = route.retrieval
                assert r is not None
                span.name = f"retrieval {r.collection}"
                span.kind = Span.SPAN_KIND_CLIENT
                _set(a, "gen_ai.operation.name", "retrieval")
                _set(a, "gen_ai.data_source.id", r.collection)
                _set(a, "gen_ai.request.top_k", r.top_k)
                _set(a, "db.system.name", r.system)
                _set(a, "db.collection.name", r.collection)
                _set(a, "server.address", r.server_address)
                _set(a, "inferledger.stage", "retrieval")
            else:
                t = route.tool
                assert t is not None
                span.name = f"execute_tool {t.name}"
                span.kind = Span.SPAN_KIND_INTERNAL
                _set(a, "gen_ai.operation.name", "execute_tool")
                _set(a, "gen_ai.tool.name", t.name)
                _set(a, "gen_ai.tool.type", "function")
                _set(a, "gen_ai.tool.call.id", step.tool_call_id)
                _set(a, "inferledger.stage", "tools")

        root = spans.add()
        start = float(sim.schedule.attempt_start[attempt.index])
        _, end, _ = walk_attempt(
            attempt, start, sim.arrival, sim.finish, None, fixed=True, visit=visit
        )
        root.trace_id = trace_id
        root.span_id = root_id
        root.name = f"POST {route.route}"
        root.kind = Span.SPAN_KIND_SERVER
        root.start_time_unix_nano = self._ns(start)
        root.end_time_unix_nano = self._ns(end)
        a = root.attributes
        _set(a, "http.request.method", "POST")
        _set(a, "http.route", route.route)
        _set(a, "url.path", route.route)
        _set(a, "http.response.status_code", 200 if attempt.error_type is None else 502)
        _set(a, "inferledger.app", task.app.name)
        _set(a, "inferledger.team", task.app.team)
        _set(a, "inferledger.route", route.route)
        _set(a, "inferledger.workflow", route.workflow)
        _set(a, "inferledger.task.id", task.task_id)
        _set(a, "inferledger.attempt", attempt.number)
        _set(a, "inferledger.fallback", attempt.fallback)
        if task.conversation_id is not None:
            _set(a, "gen_ai.conversation.id", task.conversation_id)
        if attempt.error_type is not None:
            _set(a, "error.type", attempt.error_type)
            root.status.code = Status.STATUS_CODE_ERROR
            root.status.message = f"{attempt.error_type}: output rejected by the app"
        if final:
            _set(a, "inferledger.outcome", task.outcome)
            if task.review_s is not None:
                _set(a, "inferledger.review.seconds", round(task.review_s, 3))

    def _llm_span(
        self,
        span: Span,
        task: Task,
        attempt: Attempt,
        call: LlmCall,
        start: float,
        end: float,
    ) -> None:
        route = task.route
        span.trace_id = attempt.trace_id
        span.span_id = call.span_id
        span.parent_span_id = attempt.root_span_id
        span.kind = Span.SPAN_KIND_CLIENT
        span.start_time_unix_nano = self._ns(start)
        span.end_time_unix_nano = self._ns(end)
        a = span.attributes
        if call.hosted is not None:
            hosted = self.config.hosted_model(call.hosted)
            model, response_model = hosted.model, hosted.response_model
            provider, address, port = hosted.provider, hosted.server_address, 443
            input_tokens, output_tokens = call.prompt_tokens, call.output_tokens
            cached, finish = call.hosted_cached_tokens, call.finish_reason
        else:
            dep = self._deployments[call.deployment or ""]
            rec = self.sim.records[call.engine_index]
            model = response_model = dep.served_model_name
            provider, address, port = "vllm", dep.server_address, ENGINE_PORT
            input_tokens, output_tokens = rec.prompt_tokens, rec.output_tokens
            cached, finish = max(rec.cached_tokens, 0), rec.finish_reason.value
            if finish not in ("stop", "length"):
                span.status.code = Status.STATUS_CODE_ERROR
                span.status.message = f"engine finished the request with {finish}"
                _set(a, "error.type", finish)
        span.name = f"chat {model}"
        _set(a, "gen_ai.operation.name", "chat")
        _set(a, "gen_ai.provider.name", provider)
        _set(a, "gen_ai.request.model", model)
        _set(a, "gen_ai.request.max_tokens", call.max_tokens)
        _set(a, "gen_ai.request.temperature", route.temperature)
        _set(a, "gen_ai.response.id", call.request_id)
        _set(a, "gen_ai.response.model", response_model)
        _set(a, "gen_ai.response.finish_reasons", json.dumps([finish]))
        _set(a, "gen_ai.usage.input_tokens", input_tokens)
        _set(a, "gen_ai.usage.output_tokens", output_tokens)
        _set(a, "gen_ai.usage.cache_read.input_tokens", cached)
        _set(a, "server.address", address)
        _set(a, "server.port", port)
        _set(a, "inferledger.task.id", task.task_id)
        _set(a, "inferledger.attempt", attempt.number)
        _set(a, "inferledger.fallback", attempt.fallback)
