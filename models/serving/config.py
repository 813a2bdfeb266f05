"""Typed, frozen configuration of the simulated serving deployment.

Field names follow vLLM's own config classes (SchedulerConfig, CacheConfig) so a simulated
deployment reads like the `vllm serve` flags it stands for. Every config is validated on
construction and never mutated afterwards; results carry the config they were produced with.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field


class RouterPolicy(enum.Enum):
    """How the router (global scheduler) picks a replica for each arriving request."""

    ROUND_ROBIN = "round_robin"
    LEAST_OUTSTANDING_REQUESTS = "least_outstanding_requests"


ADMISSION_POLICIES = ("vllm", "reserve")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """vLLM V1 scheduler knobs (`--max-num-seqs`, `--max-num-batched-tokens`, ...).

    Defaults are vLLM's OpenAI-server defaults on GPUs with at least 70 GiB that are not A100
    (H100, H200). Chunked prefill is always on, as in V1.

    long_prefill_token_threshold: cap on prompt tokens one request may prefill per step;
        0 disables the cap (vLLM's default unless max_num_partial_prefills > 1).
    max_model_len: longest sequence (prompt + output) a request may reach; longer requests
        are rejected with finish_reason "error", as the OpenAI server rejects them.
    admission: "vllm" admits a waiting request when its prompt's blocks are free (vLLM V1;
        a full cache preempts the last admitted request and recomputes it later); "reserve"
        admits it only when the KV blocks of its whole sequence (prompt + max_tokens, or up to
        max_model_len without max_tokens) fit beside every running request's reservation, the
        policy of engines that never preempt (TGI's and SGLang's conservative modes).
    num_scheduler_steps: vLLM V0's `--num-scheduler-steps` (multi-step scheduling, vLLM
        0.5.5-0.9): a batch of decoders runs this many steps per scheduling pass; requests are
        admitted only between passes and tokens reach the client in bursts at the end of each
        pass (a step with prefill is a pass of one step). 1 = schedule every step (V1, V0 default).
    enable_chunked_prefill: False is vLLM V0's scheduler without chunked prefill: a step either
        prefills whole prompts (waiting requests first, FCFS, while the token budget, max_num_seqs
        and KV blocks allow; the decoders wait the step out) or decodes every running request.
        True (V1, always) batches decode tokens and prompt chunks under one budget.
    """

    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    long_prefill_token_threshold: int = 0
    max_model_len: int = 131072
    admission: str = "vllm"
    num_scheduler_steps: int = 1
    enable_chunked_prefill: bool = True

    def __post_init__(self) -> None:
        if (
            isinstance(self.num_scheduler_steps, bool)
            or not isinstance(self.num_scheduler_steps, int)
            or self.num_scheduler_steps < 1
        ):
            raise ValueError(f"num_scheduler_steps must be >= 1, got {self.num_scheduler_steps}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            # vLLM V0's SchedulerConfig refuses it too: a prompt could never be scheduled.
            raise ValueError(
                f"without chunked prefill, max_num_batched_tokens ({self.max_num_batched_tokens})"
                f" must be >= max_model_len ({self.max_model_len})"
            )
        # vLLM refuses this combination too: every running sequence must fit one decode token.
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs})"
            )
        if self.long_prefill_token_threshold < 0:
            raise ValueError("long_prefill_token_threshold must be >= 0 (0 = no cap)")
        if self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.admission not in ADMISSION_POLICIES:
            raise ValueError(
                f"admission must be one of {', '.join(ADMISSION_POLICIES)}, got {self.admission!r}"
            )


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Paged KV cache of one replica.

    num_gpu_blocks: KV blocks the replica holds (computed elsewhere from GPU memory x
        gpu_memory_utilization - weights, per tensor-parallel rank); taken as given here.
    """

    num_gpu_blocks: int
    block_size: int = 16
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        if self.num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1, got {self.num_gpu_blocks}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")

    @property
    def num_tokens(self) -> int:
        """KV capacity of the replica in tokens."""
        return self.num_gpu_blocks * self.block_size


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """One vLLM engine (one replica, all its tensor-parallel GPUs)."""

    cache: CacheConfig
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    label: str = "replica"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Identical replicas behind one router."""

    replica: ReplicaConfig
    num_replicas: int = 1
    router: RouterPolicy = RouterPolicy.ROUND_ROBIN

    def __post_init__(self) -> None:
        if self.num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {self.num_replicas}")


@dataclass(frozen=True, slots=True)
class SimulationOptions:
    """How the simulation runs (not part of the simulated deployment).

    sample_interval_s: simulated seconds between samples of each replica's gauges and counters.
    horizon_s: stop at this simulated time; requests still in flight finish with "abort".
        None runs until every request has finished.
    max_fast_forward_steps: longest stretch of pure-decode steps priced as one event;
        None = unbounded, 1 = price every engine step separately (slow; for cross-checks).
    debug_checks: verify the KV-cache and scheduler invariants after every event (slow).
    """

    sample_interval_s: float = 1.0
    horizon_s: float | None = None
    max_fast_forward_steps: int | None = None
    debug_checks: bool = False

    def __post_init__(self) -> None:
        if not (self.sample_interval_s > 0 and math.isfinite(self.sample_interval_s)):
            raise ValueError(f"sample_interval_s must be > 0, got {self.sample_interval_s}")
        if self.horizon_s is not None and not self.horizon_s >= 0:
            raise ValueError(f"horizon_s must be >= 0, got {self.horizon_s}")
        if self.max_fast_forward_steps is not None and self.max_fast_forward_steps < 1:
            raise ValueError("max_fast_forward_steps must be >= 1 or None")
