"""What a simulation produces: one record per request, one per replica, and the run itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from models.serving.config import ClusterConfig, SimulationOptions
from models.serving.request import FinishReason


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the engine saw it. Times are absolute simulated seconds.

    first_scheduled_s / first_token_s / last_token_s are None when the request never got that
    far (rejected, or aborted at the horizon). cached_tokens: prefix-cache hit of its first
    scheduling, in tokens (vLLM's num_cached_tokens). computed_tokens: every token the engine
    computed for it, recomputation after preemption included. gpu_prefill_s / gpu_decode_s: its
    exact share of replica busy time (each step's duration split among the requests in the step
    in proportion to the tokens each contributed; recomputation counts as prefill).
    """

    request_id: str
    replica: int
    arrival_s: float
    queued_s: float
    first_scheduled_s: float | None
    first_token_s: float | None
    last_token_s: float | None
    finished_s: float
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    finish_reason: FinishReason
    num_preemptions: int
    gpu_prefill_s: float
    gpu_decode_s: float
    computed_tokens: int
    context: Any = None

    @property
    def succeeded(self) -> bool:
        return self.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)

    @property
    def e2e_s(self) -> float:
        return self.finished_s - self.arrival_s

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def queue_s(self) -> float | None:
        return None if self.first_scheduled_s is None else self.first_scheduled_s - self.queued_s

    @property
    def tpot_s(self) -> float | None:
        """(e2e - ttft) / (output - 1), as `vllm bench serve` computes it; None for <= 1 token."""
        if self.first_token_s is None or self.output_tokens <= 1:
            return None
        return (self.finished_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def gpu_time_s(self) -> float:
        return self.gpu_prefill_s + self.gpu_decode_s

    @property
    def recomputed_tokens(self) -> int:
        """Tokens computed beyond the minimum (prompt - cached + output - 1): the cost of
        preemption by recompute. Zero for a request that was never preempted."""
        if not self.succeeded:
            return 0
        return (
            self.computed_tokens
            - (self.prompt_tokens - self.cached_tokens)
            - (self.output_tokens - 1)
        )


# The simulator builds one RequestRecord per request (Replica scheduler's _finish), on its hot
# path. The frozen dataclass's own __init__ sets each field through object.__setattr__ (1.9 us
# for these 17 fields); setting the same slots through their descriptors, which is what
# object.__setattr__ ends up doing, takes 1.0 us. Same signature, same result.
if RequestRecord.__slots__ != tuple(f.name for f in fields(RequestRecord)):
    raise RuntimeError("RequestRecord's slots are not its fields in order")
(
    _set_request_id,
    _set_replica,
    _set_arrival_s,
    _set_queued_s,
    _set_first_scheduled_s,
    _set_first_token_s,
    _set_last_token_s,
    _set_finished_s,
    _set_prompt_tokens,
    _set_cached_tokens,
    _set_output_tokens,
    _set_finish_reason,
    _set_num_preemptions,
    _set_gpu_prefill_s,
    _set_gpu_decode_s,
    _set_computed_tokens,
    _set_context,
) = (getattr(RequestRecord, name).__set__ for name in RequestRecord.__slots__)


def _request_record_init(
    self: RequestRecord,
    request_id: str,
    replica: int,
    arrival_s: float,
    queued_s: float,
    first_scheduled_s: float | None,
    first_token_s: float | None,
    last_token_s: float | None,
    finished_s: float,
    prompt_tokens: int,
    cached_tokens: int,
    output_tokens: int,
    finish_reason: FinishReason,
    num_preemptions: int,
    gpu_prefill_s: float,
    gpu_decode_s: float,
    computed_tokens: int,
    context: Any = None,
) -> None:
    _set_request_id(self, request_id)
    _set_replica(self, replica)
    _set_arrival_s(self, arrival_s)
    _set_queued_s(self, queued_s)
    _set_first_scheduled_s(self, first_scheduled_s)
    _set_first_token_s(self, first_token_s)
    _set_last_token_s(self, last_token_s)
    _set_finished_s(self, finished_s)
    _set_prompt_tokens(self, prompt_tokens)
    _set_cached_tokens(self, cached_tokens)
    _set_output_tokens(self, output_tokens)
    _set_finish_reason(self, finish_reason)
    _set_num_preemptions(self, num_preemptions)
    _set_gpu_prefill_s(self, gpu_prefill_s)
    _set_gpu_decode_s(self, gpu_decode_s)
    _set_computed_tokens(self, computed_tokens)
    _set_context(self, context)


setattr(RequestRecord, "__init__", _request_record_init)  # noqa: B010 (a method assignment)


SERIES_FIELDS: tuple[str, ...] = (
    "time_s",
    "num_running",
    "num_waiting",
    "kv_cache_usage",
    "prompt_tokens",
    "generation_tokens",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "num_preemptions",
    "request_success_stop",
    "request_success_length",
    "request_success_abort",
    "request_success_error",
    "iteration_tokens",
    "num_steps",
    "gpu_busy_s",
)


@dataclass(frozen=True, slots=True)
class ReplicaSeries:
    """A replica's gauges and cumulative counters sampled every sample_interval_s (plus a final
    sample at the end of the run), as a Prometheus scrape of vLLM would see them."""

    columns: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __len__(self) -> int:
        return len(self.columns["time_s"])


@dataclass(frozen=True, slots=True)
class StepLog:
    """Engine steps of one replica. One row is one step, or a stretch of `steps` identical
    pure-decode steps priced together (duration_s covers them all)."""

    start_s: np.ndarray
    steps: np.ndarray
    num_decode: np.ndarray
    prefill_tokens: np.ndarray
    num_prefill_seqs: np.ndarray
    duration_s: np.ndarray

    @property
    def iteration_tokens(self) -> np.ndarray:
        """Tokens per step for each row (vLLM's iteration_tokens_total histogram input)."""
        return self.num_decode + self.prefill_tokens

    def itl_observations(self, steps_per_chunk: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(value_s, weight): each step's duration, observed once per decoding sequence. Steps
        of a stretch are given the stretch's mean duration.

        steps_per_chunk > 1 (V0 multi-step scheduling, ``--num-scheduler-steps N``): a client
        receives one chunk of up to N tokens per pass, and benchmark clients record one
        inter-token gap per chunk (vLLM's benchmark_serving appends one ITL per streamed
        chunk), so each pass of N steps is observed once per sequence, as N times the mean
        step of its stretch. A pass cut short (its decoders all finished) counts as a whole one."""
        mask = self.num_decode > 0
        values = self.duration_s[mask] / self.steps[mask] * steps_per_chunk
        weights = self.steps[mask] * self.num_decode[mask] / steps_per_chunk
        return values, weights


@dataclass(frozen=True, slots=True)
class ReplicaCounters:
    """Final values of a replica's counters (vLLM metric names without the `vllm:` prefix)."""

    prompt_tokens: int
    prompt_tokens_cached: int
    generation_tokens: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    preempted_prefix_cache_queries: int
    preempted_prefix_cache_hits: int
    num_preemptions: int
    request_success_stop: int
    request_success_length: int
    request_success_abort: int
    request_success_error: int
    iteration_tokens: int
    num_steps: int
    prefill_computed_tokens: int
    decode_computed_tokens: int
    gpu_busy_s: float


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    """Everything one replica reports. resume_gaps_s: the inter-token gap a preempted request
    saw between its last token before preemption and its next one."""

    index: int
    label: str
    num_gpu_blocks: int
    counters: ReplicaCounters
    series: ReplicaSeries
    steps: StepLog
    resume_gaps_s: np.ndarray
    peak_kv_cache_usage: float

    @property
    def gpu_busy_s(self) -> float:
        return self.counters.gpu_busy_s


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """One simulation run: its inputs (config, options) beside its outputs."""

    config: ClusterConfig
    options: SimulationOptions
    requests: tuple[RequestRecord, ...]
    replicas: tuple[ReplicaRecord, ...]
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def config_dict(self) -> dict[str, Any]:
        """The config and options as plain data, to be written beside every result."""
        config = asdict(self.config)
        config["router"] = self.config.router.value
        return {"cluster": config, "options": asdict(self.options)}
