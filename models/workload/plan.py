"""What the apps will do over a window of time, decided before any engine runs.

A business task (one support ticket answered, one document extracted, one completion offered)
makes one or more attempts; each attempt is one request to the app (one trace, whose root is the
app's SERVER span) made of steps run one after another: a retrieval, one or more LLM calls run
in parallel (document chunks), a tool call. An attempt whose output is unusable is retried (a new
trace, same task id) after a backoff; when every self-hosted attempt failed, the task falls back
to a hosted API model. A conversation's turns are tasks that follow one another.

Everything random is drawn here, from the caller's numpy Generator, in a fixed order: the same
config, pools and generator state always give the same plan. Times are seconds from the window's
start; when each step actually starts and ends is known only once the engines have served the
LLM calls (models.workload.simulation).
"""

from __future__ import annotations

import enum
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from models.workload.arrivals import Burst, draw_arrivals
from models.workload.config import (
    AppConfig,
    HostedModelConfig,
    PoolSegment,
    RouteConfig,
    SharedSegment,
    WorkloadConfig,
)
from models.workload.distributions import (
    Distribution,
    LogNormal,
    WorkloadConfigError,
)

PromptSegment = tuple[str, int]

# App-side time around the work (seconds): request handling before the first step, between
# steps, and after the last one. Small next to the engine's time, but never zero, so that every
# parent span strictly encloses its children.
APP_PRE_S = LogNormal(0.004, 0.5, 0.001, 0.05)
APP_GAP_S = LogNormal(0.001, 0.5, 0.0002, 0.02)
APP_POST_S = LogNormal(0.003, 0.5, 0.001, 0.05)
NETWORK_S = 0.0008  # app -> engine (and back), one way
FANOUT_STAGGER_S = 0.002  # parallel calls leave the client one after another


class StepKind(enum.Enum):
    RETRIEVAL = "retrieval"
    LLM = "llm"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class LlmCall:
    """One call to a model: to a vLLM deployment (engine_index >= 0) or a hosted API."""

    span_id: bytes
    request_id: str
    prompt: tuple[PromptSegment, ...]
    output_tokens: int
    max_tokens: int
    temperature: float = 0.0
    deployment: str | None = None
    engine_index: int = -1
    hosted: str | None = None
    hosted_ttft_s: float = 0.0
    hosted_duration_s: float = 0.0
    hosted_cached_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return sum(n for _, n in self.prompt)

    @property
    def finish_reason(self) -> str:
        return "length" if self.output_tokens >= self.max_tokens else "stop"


@dataclass(frozen=True, slots=True)
class Step:
    """LLM steps run their calls in parallel; retrieval and tool steps last `duration_s`."""

    kind: StepKind
    gap_s: float  # app time between the previous step's end (or the attempt's start) and this
    span_id: bytes = b""
    duration_s: float = 0.0
    calls: tuple[LlmCall, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True, slots=True)
class Attempt:
    index: int  # position among all the plan's attempts
    number: int  # 1 for the first try, 2 for the first retry, ...
    trace_id: bytes
    root_span_id: bytes
    steps: tuple[Step, ...]
    delay_s: float  # backoff after the previous attempt ended (0 for the first)
    post_s: float
    fallback: bool
    error_type: str | None  # None: the attempt's output was used


@dataclass(frozen=True, slots=True)
class Task:
    task_id: str
    app: AppConfig
    route: RouteConfig
    start_s: float  # of the first attempt; a later turn starts after the previous one instead
    attempts: tuple[Attempt, ...]
    outcome: str
    review_s: float | None = None
    previous_turn: int | None = None  # index of the task this turn follows
    think_s: float = 0.0
    conversation_id: str | None = None
    turn: int = 0

    @property
    def succeeded(self) -> bool:
        return self.attempts[-1].error_type is None


@dataclass(frozen=True, slots=True)
class TaskPlan:
    """The tasks of one window. Times are seconds from start_unix_s."""

    config: WorkloadConfig
    start_unix_s: float
    duration_s: float
    tasks: tuple[Task, ...]
    engine_calls: tuple[LlmCall, ...]  # every call to a deployment; engine_index = position
    num_attempts: int
    bursts: Mapping[str, tuple[Burst, ...]]


@dataclass(frozen=True, slots=True)
class PromptPools:
    """Token counts and popularity of every pool item (knowledge-base chunks, repositories).
    Built once per seed so that an item has the same length in every window."""

    tokens: Mapping[str, np.ndarray]
    cdf: Mapping[str, np.ndarray]


def build_pools(config: WorkloadConfig, seed: int) -> PromptPools:
    """Pool tables for `seed`; each pool has its own stream (derived from its key), so adding
    a pool does not change the others."""
    tokens: dict[str, np.ndarray] = {}
    cdf: dict[str, np.ndarray] = {}
    sizes: dict[str, tuple[int, float, Distribution]] = {}
    for app in config.apps:
        for route in app.routes:
            for seg in route.prompt:
                if not isinstance(seg, PoolSegment):
                    continue
                shape = (seg.size, seg.zipf, seg.tokens)
                if sizes.setdefault(seg.key, shape) != shape:
                    raise WorkloadConfigError(
                        f"pool {seg.key!r} is declared twice with different size/zipf/tokens"
                    )
    for key, (size, zipf, dist) in sizes.items():
        rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
        tokens[key] = np.maximum(np.rint(dist.sample(rng, size)), 1).astype(np.int64)
        weights = 1.0 / np.arange(1, size + 1) ** zipf
        cdf[key] = np.cumsum(weights) / weights.sum()
    return PromptPools(tokens, cdf)


class _Draws:
    """Buffered draws from one Generator: scalar numpy draws cost ~1 µs each, a buffered one a
    tenth of that. Deterministic: refills happen at the same points for the same plan."""

    _BLOCK = 2048

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self._values: dict[int, tuple[Distribution, list[float]]] = {}
        self._uniform: list[float] = []
        self._bytes = b""
        self._pos = 0

    def value(self, dist: Distribution) -> float:
        entry = self._values.get(id(dist))
        if entry is None or not entry[1]:
            buf = dist.sample(self.rng, self._BLOCK).tolist()
            buf.reverse()
            entry = (dist, buf)
            self._values[id(dist)] = entry
        return entry[1].pop()

    def tokens(self, dist: Distribution, low: int = 1) -> int:
        return max(low, round(self.value(dist)))

    def uniform(self) -> float:
        if not self._uniform:
            self._uniform = self.rng.random(self._BLOCK).tolist()
        return self._uniform.pop()

    def chance(self, p: float) -> bool:
        return p > 0 and self.uniform() < p

    def raw(self, n: int) -> bytes:
        if self._pos + n > len(self._bytes):
            self._bytes = self.rng.bytes(8 * self._BLOCK)
            self._pos = 0
        out = self._bytes[self._pos : self._pos + n]
        self._pos += n
        if not any(out):  # W3C forbids all-zero ids; 2^-64 odds, but never emit one
            return self.raw(n)
        return out


class _Planner:
    def __init__(
        self,
        config: WorkloadConfig,
        pools: PromptPools,
        rng: np.random.Generator,
        start_unix_s: float,
        label: str,
    ) -> None:
        self.config = config
        self.pools = pools
        self.draws = _Draws(rng)
        self.rng = rng
        self.start_unix_s = start_unix_s
        self.label = label
        self.tasks: list[Task] = []
        self.engine_calls: list[LlmCall] = []
        self.num_attempts = 0
        self.counters: dict[str, int] = {}
        self.max_prompt = {
            d.name: d.max_model_len for d in config.deployments
        }  # prompt + max_tokens must fit

    # -- ids ----------------------------------------------------------------------------
    def next_id(self, prefix: str) -> str:
        n = self.counters.get(prefix, 0) + 1
        self.counters[prefix] = n
        return f"{prefix}-{self.label}-{n:06d}"

    def request_id(self) -> str:
        return "chatcmpl-" + self.draws.raw(12).hex()

    # -- prompts ------------------------------------------------------------------------
    def pool_items(self, seg: PoolSegment) -> list[PromptSegment]:
        cdf = self.pools.cdf[seg.key]
        tokens = self.pools.tokens[seg.key]
        out = []
        for _ in range(seg.draws):
            i = min(int(np.searchsorted(cdf, self.draws.uniform(), side="right")), len(cdf) - 1)
            out.append((f"{seg.key}-{i}", int(tokens[i])))
        return out

    def base_prompt(
        self, route: RouteConfig, task_key: str
    ) -> tuple[list[PromptSegment], list[PromptSegment]]:
        """(context, own): the segments before the task's own part, and its own part."""
        context: list[PromptSegment] = []
        own: list[PromptSegment] = []
        for seg in route.prompt:
            if isinstance(seg, SharedSegment):
                (own if own else context).append((seg.key, seg.tokens))
            elif isinstance(seg, PoolSegment):
                (own if own else context).extend(self.pool_items(seg))
            else:
                own.append((f"{task_key}:{seg.key}", self.draws.tokens(seg.tokens)))
        return context, own

    # -- calls --------------------------------------------------------------------------
    def call(
        self,
        route: RouteConfig,
        prompt: list[PromptSegment],
        output_tokens: int,
        hosted: HostedModelConfig | None,
    ) -> LlmCall:
        max_tokens = route.max_tokens
        output_tokens = max(1, min(output_tokens, max_tokens))
        if hosted is not None:
            ttft = self.draws.value(hosted.ttft_s)
            rate = self.draws.value(hosted.output_tokens_per_s)
            return LlmCall(
                span_id=self.draws.raw(8),
                request_id=self.request_id(),
                prompt=tuple(prompt),
                output_tokens=output_tokens,
                max_tokens=max_tokens,
                temperature=route.temperature,
                hosted=hosted.name,
                hosted_ttft_s=ttft,
                hosted_duration_s=ttft + output_tokens / rate,
                hosted_cached_tokens=_hosted_cached(prompt, hosted),
            )
        limit = self.max_prompt[route.deployment] - max_tokens
        prompt = _fit(prompt, limit)
        call = LlmCall(
            span_id=self.draws.raw(8),
            request_id=self.request_id(),
            prompt=tuple(prompt),
            output_tokens=output_tokens,
            max_tokens=max_tokens,
            temperature=route.temperature,
            deployment=route.deployment,
            engine_index=len(self.engine_calls),
        )
        self.engine_calls.append(call)
        return call

    def attempt(
        self,
        route: RouteConfig,
        task_id: str,
        number: int,
        *,
        context: list[PromptSegment],
        chunks: list[list[PromptSegment]],
        uses_tool: bool,
        hosted: HostedModelConfig | None,
        error_type: str | None,
        result_tokens: int,
    ) -> tuple[Attempt, int]:
        """One attempt; returns it and the output tokens of its final answer."""
        d = self.draws
        steps: list[Step] = []
        gap = d.value(APP_PRE_S)
        if route.retrieval is not None:
            steps.append(
                Step(
                    StepKind.RETRIEVAL,
                    gap,
                    d.raw(8),
                    duration_s=d.value(route.retrieval.latency_s),
                )
            )
            gap = d.value(APP_GAP_S)
        tool = route.tool if uses_tool else None
        answer_tokens = d.tokens(route.output_tokens)
        if hosted is not None and len(chunks) > 1:
            # A hosted model with a long context window takes the whole document at once.
            chunks = [[seg for chunk in chunks for seg in chunk]]
        if tool is not None and tool.mode == "between":
            prompt = context + chunks[0]
            assert tool.call_output_tokens is not None  # validated with the config
            first = self.call(route, prompt, d.tokens(tool.call_output_tokens), hosted)
            steps.append(Step(StepKind.LLM, gap, calls=(first,)))
            call_id = "call_" + d.raw(8).hex()
            steps.append(
                Step(
                    StepKind.TOOL,
                    d.value(APP_GAP_S),
                    d.raw(8),
                    duration_s=d.value(tool.latency_s),
                    tool_call_id=call_id,
                )
            )
            follow = [
                *prompt,
                (f"{task_id}:{number}:tool-call", first.output_tokens),
                (f"{task_id}:{number}:tool-result", result_tokens),
            ]
            second = self.call(route, follow, answer_tokens, hosted)
            steps.append(Step(StepKind.LLM, d.value(APP_GAP_S), calls=(second,)))
            answer_tokens = second.output_tokens
        else:
            outputs = [answer_tokens] + [d.tokens(route.output_tokens) for _ in chunks[1:]]
            calls = [
                self.call(route, context + chunk, out, hosted)
                for chunk, out in zip(chunks, outputs, strict=True)
            ]
            steps.append(Step(StepKind.LLM, gap, calls=tuple(calls)))
            answer_tokens = calls[0].output_tokens
            if tool is not None:  # mode "after": act on the answer
                steps.append(
                    Step(
                        StepKind.TOOL,
                        d.value(APP_GAP_S),
                        d.raw(8),
                        duration_s=d.value(tool.latency_s),
                        tool_call_id="call_" + d.raw(8).hex(),
                    )
                )
        delay = 0.0
        if number > 1 and route.retry_backoff_s is not None:
            delay = d.value(route.retry_backoff_s)
        attempt = Attempt(
            index=self.num_attempts,
            number=number,
            trace_id=d.raw(16),
            root_span_id=d.raw(8),
            steps=tuple(steps),
            delay_s=delay,
            post_s=d.value(APP_POST_S),
            fallback=hosted is not None,
            error_type=error_type,
        )
        self.num_attempts += 1
        return attempt, answer_tokens

    def task(
        self,
        app: AppConfig,
        route: RouteConfig,
        start_s: float,
        *,
        history: list[PromptSegment] | None = None,
        previous_turn: int | None = None,
        think_s: float = 0.0,
        conversation_id: str | None = None,
        turn: int = 0,
    ) -> tuple[Task, list[PromptSegment], int]:
        """A task; returns it, its own prompt part and its answer's tokens (for the next
        turn of a conversation)."""
        d = self.draws
        task_id = self.next_id(route.workflow)
        context, own = self.base_prompt(route, task_id)
        if history:
            context = context + history
        fanout = d.tokens(route.fanout) if route.fanout is not None else 1
        chunks = [own]
        for i in range(1, fanout):
            _, more = self.base_prompt(route, f"{task_id}:{i}")
            chunks.append(more)
        tool = route.tool
        uses_tool = tool is not None and d.chance(tool.probability)
        result_tokens = 0
        if uses_tool and tool is not None and tool.result_tokens is not None:
            result_tokens = d.tokens(tool.result_tokens)
        attempts: list[Attempt] = []
        answer_tokens = 0
        for number in range(1, route.max_attempts + 1):
            failed = d.chance(route.failure_rate)
            attempt, answer_tokens = self.attempt(
                route,
                task_id,
                number,
                context=context,
                chunks=chunks,
                uses_tool=uses_tool,
                hosted=None,
                error_type=route.failure_type if failed else None,
                result_tokens=result_tokens,
            )
            attempts.append(attempt)
            if not failed:
                break
        if attempts[-1].error_type is not None and route.fallback is not None:
            attempt, answer_tokens = self.attempt(
                route,
                task_id,
                len(attempts) + 1,
                context=context,
                chunks=chunks,
                uses_tool=uses_tool,
                hosted=self.config.hosted_model(route.fallback),
                error_type=None,
                result_tokens=result_tokens,
            )
            attempts.append(attempt)
        if attempts[-1].error_type is None:
            outcome = _pick(route.outcomes, d.uniform())
        else:
            outcome = "rejected"
        review_s = None
        if route.review is not None and d.chance(route.review.probability):
            review_s = d.value(route.review.seconds)
        task = Task(
            task_id=task_id,
            app=app,
            route=route,
            start_s=start_s,
            attempts=tuple(attempts),
            outcome=outcome,
            review_s=review_s,
            previous_turn=previous_turn,
            think_s=think_s,
            conversation_id=conversation_id,
            turn=turn,
        )
        return task, own, answer_tokens

    def app_tasks(self, app: AppConfig, arrivals: np.ndarray) -> None:
        shares = np.array([r.share for r in app.routes], dtype=float)
        routes = self.rng.choice(len(app.routes), size=len(arrivals), p=shares / shares.sum())
        d = self.draws
        for t, r in zip((arrivals - self.start_unix_s).tolist(), routes.tolist(), strict=True):
            # a switched route (RouteConfig.switch) runs as switched for tasks arriving in
            # its weekly window; a conversation keeps the route it started on
            route = app.routes[r].at(self.start_unix_s + t)
            conv = route.conversation
            if conv is None:
                task, _, _ = self.task(app, route, t)
                self.tasks.append(task)
                continue
            conversation_id = self.next_id("conv")
            turns = d.tokens(conv.turns)
            history: list[PromptSegment] = []
            previous: int | None = None
            limit = self.max_prompt[route.deployment] - route.max_tokens
            for turn in range(1, turns + 1):
                think = d.value(conv.think_time_s) if previous is not None else 0.0
                task, own, answer = self.task(
                    app,
                    route,
                    t,
                    history=history,
                    previous_turn=previous,
                    think_s=think,
                    conversation_id=conversation_id,
                    turn=turn,
                )
                self.tasks.append(task)
                previous = len(self.tasks) - 1
                history = [*history, *own, (f"{task.task_id}:answer", answer)]
                if sum(n for _, n in history) > limit * 0.8:
                    break  # the chat app starts a new conversation rather than truncate


def plan_tasks(
    config: WorkloadConfig,
    pools: PromptPools,
    rng: np.random.Generator,
    *,
    start_unix_s: float,
    duration_s: float,
    label: str | None = None,
) -> TaskPlan:
    """Every task whose first attempt arrives in [start_unix_s, start_unix_s + duration_s).

    label: part of every task id (default: the window's start, YYYYMMDDHHMMSS UTC), so ids of
    different windows never collide.
    """
    if label is None:
        label = time.strftime("%Y%m%d%H%M%S", time.gmtime(start_unix_s))
    planner = _Planner(config, pools, rng, start_unix_s, label)
    bursts: dict[str, tuple[Burst, ...]] = {}
    for app in config.apps:
        arrivals, app_bursts = draw_arrivals(app.arrivals, rng, start_unix_s, duration_s)
        bursts[app.name] = app_bursts
        planner.app_tasks(app, arrivals)
    return TaskPlan(
        config=config,
        start_unix_s=start_unix_s,
        duration_s=duration_s,
        tasks=tuple(planner.tasks),
        engine_calls=tuple(planner.engine_calls),
        num_attempts=planner.num_attempts,
        bursts=bursts,
    )


def _pick(options: tuple[tuple[str, float], ...], u: float) -> str:
    acc = 0.0
    for name, p in options:
        acc += p
        if u < acc:
            return name
    return options[-1][0]


def _fit(prompt: list[PromptSegment], limit: int) -> list[PromptSegment]:
    """Shorten the last segment so the prompt fits the deployment (apps truncate documents)."""
    total = sum(n for _, n in prompt)
    if total <= limit or not prompt:
        return prompt
    key, n = prompt[-1]
    keep = n - (total - limit)
    if keep >= 1:
        return [*prompt[:-1], (f"{key}:truncated", keep)]
    return _fit(prompt[:-1], limit) or [(key, max(1, limit))]


def _hosted_cached(prompt: list[PromptSegment], hosted: HostedModelConfig) -> int:
    """Tokens a hosted API reports as cached: the shared leading part of the prompt (segments
    not owned by one task), counted from the minimum in steps (OpenAI's prompt caching)."""
    shared = 0
    for key, n in prompt:
        if ":" in key:  # a task's own segment
            break
        shared += n
    if shared < hosted.cache_min_prefix_tokens or hosted.cache_min_prefix_tokens == 0:
        return 0
    step = hosted.cache_step_tokens
    extra = (shared - hosted.cache_min_prefix_tokens) // step * step
    return min(hosted.cache_min_prefix_tokens + extra, shared)


__all__ = [
    "APP_GAP_S",
    "APP_POST_S",
    "APP_PRE_S",
    "FANOUT_STAGGER_S",
    "NETWORK_S",
    "Attempt",
    "LlmCall",
    "PromptPools",
    "Step",
    "StepKind",
    "Task",
    "TaskPlan",
    "build_pools",
    "plan_tasks",
]
