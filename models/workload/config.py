"""Typed, frozen description of the apps in front of the engines, read from YAML.

A workload names the serving deployments (vLLM replicas of one model on one GPU type), the hosted
API models apps fall back to, and the apps: each with a team, an arrival process (a diurnal and
weekly curve plus bursts) and routes. A route says what one business task on it does: its prompt
(segments that prefix caching can share), how many tokens it generates, whether it retrieves
context, calls a tool, fans out over document chunks or continues a conversation, how often an
attempt fails (and is retried, then falls back to a hosted model), and how its outcomes are judged.

The shipped scenario is models/data/workload.yaml; docs/demo.md describes it. Every value is
validated at load time and a bad one raises WorkloadConfigError with one line naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from inferledger.core.yaml_files import parse_yaml, read_yaml_file
from models.workload.distributions import (
    Distribution,
    LogNormal,
    WorkloadConfigError,
    parse_distribution,
)

WORKLOAD_FORMAT = 1
OUTCOMES = ("accepted", "corrected", "rejected")
TOOL_MODES = ("between", "after")
# How a deployment's gateway picks a replica (models.workload.simulation): the router's
# least-outstanding-requests or round-robin, or prefix affinity (the replica is a hash of the
# prompt's leading shared segments, as prefix-cache-aware gateways route, whatever the load).
ROUTINGS = ("least_outstanding_requests", "round_robin", "prefix_affinity")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
WEEK_S = 7 * 86_400.0
# What a route's switch may change; everything else (prompt, tools, ...) stays the route's.
SWITCH_FIELDS = (
    "deployment",
    "output_tokens",
    "failure_rate",
    "failure_type",
    "max_attempts",
    "retry_backoff_s",
    "fallback",
    "outcomes",
    "review",
)


@dataclass(frozen=True, slots=True)
class DeploymentConfig:
    """One vLLM deployment: `replicas` identical engines of one model on one GPU type."""

    name: str
    model: str  # models/data/models.yaml name, for the step-time model
    served_model_name: str  # what apps send as "model" and vLLM reports as model_name
    gpu: str
    dtype: str = "bf16"
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int = 1
    replicas: int = 1
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    max_model_len: int = 32768
    gpu_memory_utilization: float = 0.9
    service_name: str = "vllm"  # OTEL_SERVICE_NAME of its engines
    server_address: str = "vllm"  # host the apps call
    node: str = "gpu-node"  # host of its GPUs (dcgm-exporter's Hostname)
    routing: str = "least_outstanding_requests"  # one of ROUTINGS

    @property
    def gpus(self) -> int:
        return self.replicas * self.tensor_parallel_size


@dataclass(frozen=True, slots=True)
class HostedModelConfig:
    """A model behind a hosted API (priced per token elsewhere); no engine spans, no metrics."""

    name: str
    provider: str  # gen_ai.provider.name, e.g. openai
    model: str  # gen_ai.request.model
    response_model: str
    server_address: str
    ttft_s: Distribution
    output_tokens_per_s: Distribution
    # Hosted APIs cache a prompt's leading shared part once it is long enough (OpenAI: 1024
    # tokens, then in steps of 128); the rest is billed as fresh input.
    cache_min_prefix_tokens: int = 1024
    cache_step_tokens: int = 128


@dataclass(frozen=True, slots=True)
class BurstConfig:
    """Bursts on top of the curve: a Poisson number per day, each multiplying the rate."""

    per_day: float
    multiplier: Distribution
    duration_s: Distribution


@dataclass(frozen=True, slots=True)
class ArrivalConfig:
    """A non-homogeneous Poisson process whose weekly mean is `mean_rate_per_s` tasks/s.

    hourly: relative intensity at the middle of each UTC hour (interpolated in between);
    weekday: relative intensity of each day, Monday first.
    """

    mean_rate_per_s: float
    hourly: tuple[float, ...]
    weekday: tuple[float, ...] = (1.0,) * 7
    bursts: BurstConfig | None = None


@dataclass(frozen=True, slots=True)
class SharedSegment:
    """The same tokens in every prompt of the route (a system prompt, a schema)."""

    key: str
    tokens: int


@dataclass(frozen=True, slots=True)
class PoolSegment:
    """`draws` items drawn from a pool of `size` (Zipf-popular) items: knowledge-base chunks,
    repositories. An item always has the same tokens, so prompts drawing it share them."""

    key: str
    size: int
    zipf: float
    draws: int
    tokens: Distribution


@dataclass(frozen=True, slots=True)
class UniqueSegment:
    """Tokens of this task only (the user's question, a document); retries resend them."""

    key: str
    tokens: Distribution


Segment = SharedSegment | PoolSegment | UniqueSegment


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """A vector-database query before the LLM call."""

    collection: str  # gen_ai.data_source.id
    system: str  # db.system.name
    server_address: str
    top_k: int
    latency_s: Distribution


@dataclass(frozen=True, slots=True)
class ToolConfig:
    """A tool call. mode "between": the model asks for the tool (a short first call), the tool
    runs, a second call answers with its result. mode "after": the tool runs on the answer
    (e.g. posting an extraction to the ERP)."""

    name: str
    probability: float
    latency_s: Distribution
    mode: str = "between"
    call_output_tokens: Distribution | None = None
    result_tokens: Distribution | None = None


@dataclass(frozen=True, slots=True)
class ConversationConfig:
    """Multi-turn chat: each turn is a task whose prompt carries the earlier turns."""

    turns: Distribution
    think_time_s: Distribution


@dataclass(frozen=True, slots=True)
class ReviewConfig:
    """Human review of a share of the tasks (time in seconds, priced per reviewer hour)."""

    probability: float
    seconds: Distribution


@dataclass(frozen=True, slots=True)
class RouteConfig:
    route: str
    workflow: str
    share: float  # of the app's tasks
    deployment: str
    prompt: tuple[Segment, ...]
    output_tokens: Distribution
    max_tokens: int
    temperature: float = 0.2
    fanout: Distribution | None = None  # parallel LLM calls per attempt (document chunks)
    retrieval: RetrievalConfig | None = None
    tool: ToolConfig | None = None
    conversation: ConversationConfig | None = None
    failure_rate: float = 0.0  # chance that one self-hosted attempt's output is unusable
    failure_type: str = "invalid_output"  # error.type on a failed attempt's root span
    max_attempts: int = 1  # self-hosted attempts before falling back
    retry_backoff_s: Distribution | None = None
    fallback: str | None = None  # a hosted model's name
    outcomes: tuple[tuple[str, float], ...] = (("accepted", 1.0),)
    review: ReviewConfig | None = None
    switch: RouteSwitch | None = None

    def at(self, unix_s: float) -> RouteConfig:
        """The route as it runs at `unix_s`: switched inside its switch's weekly window."""
        if self.switch is not None and self.switch.active(unix_s):
            return self.switch.route
        return self


@dataclass(frozen=True, slots=True)
class RouteSwitch:
    """A change of a route every week from `start_s` to `end_s` (seconds from Monday 00:00
    UTC): e.g. moved to a cheaper model on Wednesday afternoon, rolled back on Friday evening.
    The scenario is a week that repeats, so the change is a weekly window, not a date: any
    week of history holds one move and one rollback. `route` is the route as switched."""

    start_s: float
    end_s: float
    route: RouteConfig

    def active(self, unix_s: float) -> bool:
        # 1970-01-01 was a Thursday: the first Monday 00:00 UTC is 4 days after the epoch.
        into_week = (unix_s - 4 * 86_400.0) % WEEK_S
        return self.start_s <= into_week < self.end_s


@dataclass(frozen=True, slots=True)
class AppConfig:
    name: str
    team: str
    service_name: str
    namespace: str
    version: str
    arrivals: ArrivalConfig
    routes: tuple[RouteConfig, ...]


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    environment: str
    deployments: tuple[DeploymentConfig, ...]
    hosted_models: tuple[HostedModelConfig, ...]
    apps: tuple[AppConfig, ...]

    def deployment(self, name: str) -> DeploymentConfig:
        for d in self.deployments:
            if d.name == name:
                return d
        raise KeyError(name)

    def hosted_model(self, name: str) -> HostedModelConfig:
        for h in self.hosted_models:
            if h.name == name:
                return h
        raise KeyError(name)

    def scaled(self, rate_factor: float) -> WorkloadConfig:
        """The same scenario with every app's arrival rate multiplied by `rate_factor`."""
        if not rate_factor > 0:
            raise WorkloadConfigError(f"rate factor must be > 0, got {rate_factor!r}")
        apps = tuple(
            replace(
                app,
                arrivals=replace(
                    app.arrivals, mean_rate_per_s=app.arrivals.mean_rate_per_s * rate_factor
                ),
            )
            for app in self.apps
        )
        return replace(self, apps=apps)


# --- loading ------------------------------------------------------------------------------

_REQUIRED = object()


class _Fields:
    """Typed access to one YAML mapping, with errors that name the field's path."""

    def __init__(self, doc: Any, where: str, allowed: set[str]) -> None:
        if not isinstance(doc, Mapping):
            raise WorkloadConfigError(f"{where}: expected a mapping, got {doc!r}")
        unknown = sorted(str(k) for k in set(doc) - allowed)
        if unknown:
            raise WorkloadConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
        self.doc = doc
        self.where = where

    def has(self, key: str) -> bool:
        return self.doc.get(key) is not None

    def _get(self, key: str, default: Any) -> Any:
        value = self.doc.get(key)
        if value is None:
            if default is _REQUIRED:
                raise WorkloadConfigError(f"{self.where}: missing {key}")
            return default
        return value

    def text(self, key: str, default: Any = _REQUIRED) -> str:
        value = self._get(key, default)
        if value is default:
            return value
        if not isinstance(value, str) or not value.strip():
            raise WorkloadConfigError(f"{self.where}.{key}: expected text, got {value!r}")
        return value.strip()

    def integer(self, key: str, default: Any = _REQUIRED, low: int = 0) -> int:
        value = self._get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise WorkloadConfigError(
                f"{self.where}.{key}: expected an integer >= {low}, got {value!r}"
            )
        return value

    def number(
        self, key: str, default: Any = _REQUIRED, low: float = 0.0, high: float = math.inf
    ) -> float:
        value = self._get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WorkloadConfigError(f"{self.where}.{key}: expected a number, got {value!r}")
        if not (math.isfinite(value) and low <= value <= high):
            raise WorkloadConfigError(
                f"{self.where}.{key}: expected a number from {low:g} to {high:g}, got {value!r}"
            )
        return float(value)

    def dist(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        return parse_distribution(value, f"{self.where}.{key}")

    def items(self, key: str, parse: Callable[[Any, str], Any]) -> tuple[Any, ...]:
        value = self._get(key, _REQUIRED)
        if not isinstance(value, list) or not value:
            raise WorkloadConfigError(f"{self.where}.{key}: expected a non-empty list")
        return tuple(parse(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(value))

    def numbers(self, key: str, count: int, default: Any = _REQUIRED) -> tuple[float, ...]:
        value = self._get(key, default)
        if value is default:
            return value
        if (
            not isinstance(value, list)
            or len(value) != count
            or any(isinstance(v, bool) or not isinstance(v, int | float) for v in value)
            or any(not (math.isfinite(v) and v >= 0) for v in value)
            or not any(v > 0 for v in value)
        ):
            raise WorkloadConfigError(
                f"{self.where}.{key}: expected {count} numbers >= 0, not all zero"
            )
        return tuple(float(v) for v in value)


def _deployment(doc: Any, where: str) -> DeploymentConfig:
    f = _Fields(
        doc,
        where,
        {
            "name",
            "model",
            "served_model_name",
            "gpu",
            "dtype",
            "kv_cache_dtype",
            "tensor_parallel_size",
            "replicas",
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
            "gpu_memory_utilization",
            "service_name",
            "server_address",
            "node",
            "routing",
        },
    )
    name = f.text("name")
    routing = f.text("routing", "least_outstanding_requests")
    if routing not in ROUTINGS:
        raise WorkloadConfigError(
            f"{where}.routing: expected one of {', '.join(ROUTINGS)}, got {routing!r}"
        )
    return DeploymentConfig(
        name=name,
        model=f.text("model"),
        served_model_name=f.text("served_model_name"),
        gpu=f.text("gpu"),
        dtype=f.text("dtype", "bf16"),
        kv_cache_dtype=f.text("kv_cache_dtype", None),
        tensor_parallel_size=f.integer("tensor_parallel_size", 1, low=1),
        replicas=f.integer("replicas", 1, low=1),
        max_num_seqs=f.integer("max_num_seqs", 1024, low=1),
        max_num_batched_tokens=f.integer("max_num_batched_tokens", 8192, low=1),
        max_model_len=f.integer("max_model_len", 32768, low=2),
        gpu_memory_utilization=f.number("gpu_memory_utilization", 0.9, 0.05, 1.0),
        service_name=f.text("service_name", "vllm"),
        server_address=f.text("server_address", name),
        node=f.text("node", "gpu-node"),
        routing=routing,
    )


def _hosted(doc: Any, where: str) -> HostedModelConfig:
    f = _Fields(
        doc,
        where,
        {
            "name",
            "provider",
            "model",
            "response_model",
            "server_address",
            "ttft_s",
            "output_tokens_per_s",
            "cache_min_prefix_tokens",
            "cache_step_tokens",
        },
    )
    model = f.text("model")
    rate = f.dist("output_tokens_per_s")
    if not isinstance(rate, LogNormal) and _min_value(rate) <= 0:
        raise WorkloadConfigError(f"{where}.output_tokens_per_s: must stay above 0")
    return HostedModelConfig(
        name=f.text("name"),
        provider=f.text("provider"),
        model=model,
        response_model=f.text("response_model", model),
        server_address=f.text("server_address"),
        ttft_s=f.dist("ttft_s"),
        output_tokens_per_s=rate,
        cache_min_prefix_tokens=f.integer("cache_min_prefix_tokens", 1024),
        cache_step_tokens=f.integer("cache_step_tokens", 128, low=1),
    )


def _min_value(dist: Distribution) -> float:
    return float(getattr(dist, "value", getattr(dist, "low", 0.0)))


def _arrivals(doc: Any, where: str) -> ArrivalConfig:
    f = _Fields(doc, where, {"mean_rate_per_s", "hourly", "weekday", "bursts"})
    bursts = None
    if f.has("bursts"):
        b = _Fields(doc["bursts"], f"{where}.bursts", {"per_day", "multiplier", "duration_s"})
        bursts = BurstConfig(
            per_day=b.number("per_day"),
            multiplier=b.dist("multiplier"),
            duration_s=b.dist("duration_s"),
        )
    return ArrivalConfig(
        mean_rate_per_s=f.number("mean_rate_per_s", low=1e-9),
        hourly=f.numbers("hourly", 24),
        weekday=f.numbers("weekday", 7, (1.0,) * 7),
        bursts=bursts,
    )


def _segment(doc: Any, where: str) -> Segment:
    if not isinstance(doc, Mapping):
        raise WorkloadConfigError(f"{where}: expected a mapping, got {doc!r}")
    kinds = [k for k in ("shared", "pool", "unique") if k in doc]
    if len(kinds) != 1:
        raise WorkloadConfigError(f"{where}: give exactly one of shared, pool or unique")
    kind = kinds[0]
    key = doc.get(kind)
    if isinstance(key, str) and ":" in key:
        # ':' separates a task's id from its own segments (models/workload/plan.py).
        raise WorkloadConfigError(f"{where}.{kind}: a segment key must not contain ':'")
    if kind == "shared":
        f = _Fields(doc, where, {"shared", "tokens"})
        return SharedSegment(f.text("shared"), f.integer("tokens", low=1))
    if kind == "pool":
        f = _Fields(doc, where, {"pool", "size", "zipf", "draws", "tokens"})
        return PoolSegment(
            key=f.text("pool"),
            size=f.integer("size", low=1),
            zipf=f.number("zipf", 1.0),
            draws=f.integer("draws", 1, low=1),
            tokens=f.dist("tokens"),
        )
    f = _Fields(doc, where, {"unique", "tokens"})
    return UniqueSegment(f.text("unique"), f.dist("tokens"))


def _route(doc: Any, where: str) -> RouteConfig:
    f = _Fields(
        doc,
        where,
        {
            "route",
            "workflow",
            "share",
            "deployment",
            "prompt",
            "output_tokens",
            "max_tokens",
            "temperature",
            "fanout",
            "retrieval",
            "tool",
            "conversation",
            "failure_rate",
            "failure_type",
            "max_attempts",
            "retry_backoff_s",
            "fallback",
            "outcomes",
            "review",
            "switch",
        },
    )
    route = f.text("route")
    if not route.startswith("/"):
        raise WorkloadConfigError(f"{where}.route: must start with '/', got {route!r}")
    prompt = f.items("prompt", _segment)
    if not any(isinstance(s, UniqueSegment) for s in prompt):
        raise WorkloadConfigError(f"{where}.prompt: needs a unique segment (the task's own part)")
    retrieval = None
    if f.has("retrieval"):
        r = _Fields(
            doc["retrieval"],
            f"{where}.retrieval",
            {"collection", "system", "server_address", "top_k", "latency_s"},
        )
        retrieval = RetrievalConfig(
            collection=r.text("collection"),
            system=r.text("system"),
            server_address=r.text("server_address"),
            top_k=r.integer("top_k", 5, low=1),
            latency_s=r.dist("latency_s"),
        )
    tool = None
    if f.has("tool"):
        t = _Fields(
            doc["tool"],
            f"{where}.tool",
            {"name", "probability", "latency_s", "mode", "call_output_tokens", "result_tokens"},
        )
        mode = t.text("mode", "between")
        if mode not in TOOL_MODES:
            raise WorkloadConfigError(f"{where}.tool.mode: expected between or after, got {mode!r}")
        tool = ToolConfig(
            name=t.text("name"),
            probability=t.number("probability", 1.0, 0.0, 1.0),
            latency_s=t.dist("latency_s"),
            mode=mode,
            call_output_tokens=t.dist("call_output_tokens", None),
            result_tokens=t.dist("result_tokens", None),
        )
        if mode == "between" and (tool.call_output_tokens is None or tool.result_tokens is None):
            raise WorkloadConfigError(
                f"{where}.tool: mode between needs call_output_tokens and result_tokens"
            )
    conversation = None
    if f.has("conversation"):
        c = _Fields(doc["conversation"], f"{where}.conversation", {"turns", "think_time_s"})
        conversation = ConversationConfig(c.dist("turns"), c.dist("think_time_s"))
    review = None
    if f.has("review"):
        r = _Fields(doc["review"], f"{where}.review", {"probability", "seconds"})
        review = ReviewConfig(r.number("probability", 1.0, 0.0, 1.0), r.dist("seconds"))
    outcomes: tuple[tuple[str, float], ...] = (("accepted", 1.0),)
    if f.has("outcomes"):
        o = _Fields(doc["outcomes"], f"{where}.outcomes", set(OUTCOMES))
        outcomes = tuple((name, o.number(name, 0.0, 0.0, 1.0)) for name in OUTCOMES if o.has(name))
        total = sum(p for _, p in outcomes)
        if abs(total - 1.0) > 1e-6:
            raise WorkloadConfigError(f"{where}.outcomes: probabilities sum to {total:g}, not 1")
    max_attempts = f.integer("max_attempts", 1, low=1)
    failure_rate = f.number("failure_rate", 0.0, 0.0, 0.95)
    switch = _switch(doc, where) if f.has("switch") else None
    return RouteConfig(
        route=route,
        workflow=f.text("workflow"),
        share=f.number("share", 1.0),
        deployment=f.text("deployment"),
        prompt=prompt,
        output_tokens=f.dist("output_tokens"),
        max_tokens=f.integer("max_tokens", low=1),
        temperature=f.number("temperature", 0.2, 0.0, 2.0),
        fanout=f.dist("fanout", None),
        retrieval=retrieval,
        tool=tool,
        conversation=conversation,
        failure_rate=failure_rate,
        failure_type=f.text("failure_type", "invalid_output"),
        max_attempts=max_attempts,
        retry_backoff_s=f.dist("retry_backoff_s", None),
        fallback=f.text("fallback", None),
        outcomes=outcomes,
        review=review,
        switch=switch,
    )


def _week_time(doc: Any, where: str) -> float:
    """{weekday: wednesday, hour: 12} as seconds from Monday 00:00 UTC."""
    f = _Fields(doc, where, {"weekday", "hour"})
    day = f.text("weekday").lower()
    if day not in WEEKDAYS:
        raise WorkloadConfigError(f"{where}.weekday: expected a day name, got {day!r}")
    return WEEKDAYS.index(day) * 86_400.0 + f.number("hour", 0.0, 0.0, 24.0) * 3_600.0


def _switch(route_doc: Mapping[str, Any], where: str) -> RouteSwitch:
    """The route's `switch`: a weekly window (`from`, `until`) and the fields it changes, parsed
    and validated as the route itself is (the switched route is the route's own document with
    those fields replaced)."""
    where = f"{where}.switch"
    doc = route_doc["switch"]
    f = _Fields(doc, where, {"from", "until", *SWITCH_FIELDS})
    if not f.has("from"):
        raise WorkloadConfigError(f"{where}: missing from")
    start = _week_time(doc["from"], f"{where}.from")
    # without `until`, the change lasts to the end of the week (Sunday 24:00)
    end = _week_time(doc["until"], f"{where}.until") if f.has("until") else WEEK_S
    if not start < end:
        raise WorkloadConfigError(f"{where}: until must come after from in the same week")
    changes = {k: v for k, v in doc.items() if k in SWITCH_FIELDS}
    if not changes:
        raise WorkloadConfigError(
            f"{where}: changes nothing (give one of {', '.join(SWITCH_FIELDS)})"
        )
    merged = {k: v for k, v in route_doc.items() if k != "switch"} | changes
    return RouteSwitch(start, end, _route(merged, where))


def _app(doc: Any, where: str) -> AppConfig:
    f = _Fields(
        doc, where, {"name", "team", "service_name", "namespace", "version", "arrivals", "routes"}
    )
    name = f.text("name")
    routes = f.items("routes", _route)
    if not sum(r.share for r in routes) > 0:
        raise WorkloadConfigError(f"{where}.routes: shares must not all be 0")
    seen: set[str] = set()
    for r in routes:
        if r.route in seen:
            raise WorkloadConfigError(f"{where}.routes: route {r.route!r} is listed twice")
        seen.add(r.route)
    return AppConfig(
        name=name,
        team=f.text("team"),
        service_name=f.text("service_name", name),
        namespace=f.text("namespace", f.text("team")),
        version=f.text("version", "1.0.0"),
        arrivals=_arrivals(doc.get("arrivals"), f"{where}.arrivals"),
        routes=routes,
    )


def workload_from_dict(doc: Any, where: str = "workload") -> WorkloadConfig:
    """Validate a parsed workload document; raises WorkloadConfigError (one line)."""
    f = _Fields(doc, where, {"format", "environment", "deployments", "hosted_models", "apps"})
    if f.integer("format", WORKLOAD_FORMAT) != WORKLOAD_FORMAT:
        raise WorkloadConfigError(f"{where}: expected format {WORKLOAD_FORMAT}")
    deployments = f.items("deployments", _deployment)
    hosted = f.items("hosted_models", _hosted) if f.has("hosted_models") else ()
    apps = f.items("apps", _app)
    config = WorkloadConfig(f.text("environment", "prod"), deployments, hosted, apps)
    for label, names in (
        ("deployment", [d.name for d in deployments]),
        ("hosted model", [h.name for h in hosted]),
        ("app", [a.name for a in apps]),
    ):
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise WorkloadConfigError(f"{where}: {label} name(s) used twice: {', '.join(dupes)}")
    known_deployments = {d.name for d in deployments}
    known_hosted = {h.name for h in hosted}
    checks = [
        (f"{where}.apps[{i}].routes[{j}]", route)
        for i, app in enumerate(apps)
        for j, route in enumerate(app.routes)
    ]
    checks += [
        (f"{at}.switch", route.switch.route) for at, route in checks if route.switch is not None
    ]
    for at, route in checks:
        if route.deployment not in known_deployments:
            raise WorkloadConfigError(f"{at}.deployment: unknown deployment {route.deployment!r}")
        if route.fallback is not None and route.fallback not in known_hosted:
            raise WorkloadConfigError(f"{at}.fallback: unknown hosted model {route.fallback!r}")
        if route.max_attempts > 1 and route.retry_backoff_s is None:
            raise WorkloadConfigError(f"{at}: max_attempts > 1 needs retry_backoff_s")
        if route.fallback is not None and route.retry_backoff_s is None:
            raise WorkloadConfigError(f"{at}: a fallback needs retry_backoff_s")
    return config


def load_workload(path: str | Path | None = None) -> WorkloadConfig:
    """The workload in `path`, or the shipped models/data/workload.yaml."""
    if path is None:
        where = "models/data/workload.yaml"
        text = resources.files("models").joinpath("data", "workload.yaml").read_text("utf-8")
        doc = parse_yaml(text, where, WorkloadConfigError)
    else:
        where = str(path)
        doc = read_yaml_file(path, where, WorkloadConfigError)
    return workload_from_dict(doc, where)
