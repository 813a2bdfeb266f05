"""What a client asks for (RequestSpec) and the engine's mutable view of it (Request).

A prompt carries no real tokens. It is a tuple of segments `(segment_key, tokens)`: two prompts
hold identical tokens up to the end of their longest common run of identical segments (same key
and same length, in the same order). That is all prefix caching needs to know.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

Segment = tuple[str, int]


class FinishReason(enum.Enum):
    """vLLM's `finished_reason` label values."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


class RequestStatus(enum.Enum):
    """vLLM V1 request states. A preempted request waits, in state PREEMPTED, at the front of
    the waiting queue and recomputes its KV cache when it is scheduled again."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


_TRANSITIONS: dict[RequestStatus, frozenset[RequestStatus]] = {
    RequestStatus.WAITING: frozenset({RequestStatus.RUNNING, RequestStatus.FINISHED}),
    RequestStatus.RUNNING: frozenset({RequestStatus.PREEMPTED, RequestStatus.FINISHED}),
    RequestStatus.PREEMPTED: frozenset({RequestStatus.RUNNING, RequestStatus.FINISHED}),
    RequestStatus.FINISHED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request as a client sends it.

    arrival_s: absolute send time in simulated seconds.
    prompt: segments of the prompt (see module docstring).
    output_tokens: tokens the model will generate before it stops.
    max_tokens: the request's max_tokens; when output_tokens reaches it the request finishes
        with "length", otherwise with "stop". None means no limit (finishes with "stop").
    context: the caller's trace context / attributes, passed through to the record untouched.
    """

    request_id: str
    arrival_s: float
    prompt: tuple[Segment, ...]
    output_tokens: int
    max_tokens: int | None = None
    context: Any = None

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError(f"{self.request_id}: prompt has no segments")
        for key, tokens in self.prompt:
            if not isinstance(key, str) or tokens < 1:
                raise ValueError(f"{self.request_id}: bad prompt segment {(key, tokens)!r}")
        if self.output_tokens < 1:
            raise ValueError(f"{self.request_id}: output_tokens must be >= 1")
        if self.max_tokens is not None and self.max_tokens < self.output_tokens:
            raise ValueError(f"{self.request_id}: output_tokens exceeds max_tokens")
        if not math.isfinite(self.arrival_s):
            raise ValueError(f"{self.request_id}: arrival_s must be finite")

    @property
    def prompt_tokens(self) -> int:
        return sum(tokens for _, tokens in self.prompt)


class Request:
    """The engine's state of one request (mutable; owned by one replica scheduler).

    Token bookkeeping follows vLLM: num_tokens = prompt + output tokens known so far;
    num_computed_tokens = tokens whose KV is computed or scheduled. While a request is decoding
    these fields are NOT updated every step: the scheduler advances all decoders at once with a
    per-replica step counter, and the request's values are `dec_*0 + (counter - dec_step0)`;
    they are written back when the request leaves the decode set (finish or preemption).
    """

    __slots__ = (
        "cached_tokens",
        "computed_total",
        "dec_computed0",
        "dec_finish_step",
        "dec_phase",
        "dec_share0",
        "dec_step0",
        "decoding",
        "first_scheduled_s",
        "first_token_s",
        "gen_segments",
        "gpu_decode_s",
        "gpu_prefill_s",
        "kv_held",
        "kv_node_idx",
        "kv_path",
        "kv_path_blocks",
        "kv_shared",
        "last_token_s",
        "num_computed_tokens",
        "num_output_tokens",
        "num_preemptions",
        "num_tokens",
        "prompt_tokens",
        "queued_s",
        "reserved_blocks",
        "seq_no",
        "spec",
        "status",
        "target_output_tokens",
    )

    def __init__(self, spec: RequestSpec, seq_no: int, arrival_s: float) -> None:
        self.spec = spec
        self.reserved_blocks = 0  # KV blocks reserved for its whole sequence (admission reserve)
        self.seq_no = seq_no  # unique within one simulation run, assigned by the cluster
        self.queued_s = arrival_s
        self.status = RequestStatus.WAITING
        prompt_tokens = 0
        for _, tokens in spec.prompt:
            prompt_tokens += tokens
        self.prompt_tokens = prompt_tokens
        self.target_output_tokens = spec.output_tokens
        self.num_tokens = prompt_tokens
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.gen_segments: list[Segment] = []  # generated tokens committed at preemptions
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.cached_tokens = -1  # prefix-cache hit of the first scheduling, as vLLM counts it
        self.num_preemptions = 0
        self.gpu_prefill_s = 0.0
        self.gpu_decode_s = 0.0
        self.computed_total = 0  # every token the engine computed for this request
        # KV-cache holding (managed by KVBlockPool)
        self.kv_path: list = []
        self.kv_path_blocks = 0
        self.kv_shared = 0
        self.kv_held = 0
        self.kv_node_idx = 0
        # decode-set membership (managed by ReplicaScheduler)
        self.decoding = False
        self.dec_step0 = 0
        self.dec_computed0 = 0
        self.dec_share0 = 0.0
        self.dec_phase = 0
        self.dec_finish_step = 0

    @property
    def request_id(self) -> str:
        return self.spec.request_id

    def transition(self, status: RequestStatus) -> None:
        if status not in _TRANSITIONS[self.status]:
            raise RuntimeError(f"{self.request_id}: illegal transition {self.status} -> {status}")
        self.status = status

    def __repr__(self) -> str:
        return f"Request({self.request_id!r}, {self.status.value})"
