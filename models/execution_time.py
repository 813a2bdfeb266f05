"""The one interface between the serving simulator and whatever predicts engine step times.

A vLLM V1 engine step runs one forward pass over a batch that mixes decode sequences (one new
token each) and chunks of prompts being prefilled (chunked prefill under one token budget). The
simulator describes each step by aggregates only, so a step costs O(1) to price whatever the
batch size (per-sequence work per step would make an hour of simulated traffic far too slow).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one engine step computes.

    num_decode: sequences that produce one token each in this step.
    decode_context_sum: sum over those sequences of the tokens already in their KV cache
        (prompt, cached prefix included, plus tokens generated so far) that the new token
        attends to.
    prefill_tokens: prompt tokens computed in this step (prefix-cache hits excluded).
    prefill_attention: sum over prefill chunks of chunk_tokens * (context_before_chunk +
        chunk_tokens / 2): the query-key pairs of causal attention, in token pairs.
    num_prefill_seqs: sequences with a prefill chunk in this step.
    """

    num_decode: int = 0
    decode_context_sum: int = 0
    prefill_tokens: int = 0
    prefill_attention: float = 0.0
    num_prefill_seqs: int = 0

    @property
    def num_tokens(self) -> int:
        return self.num_decode + self.prefill_tokens


class ExecutionTimePredictor(Protocol):
    """Predicts the wall time of engine steps for one replica (all its tensor-parallel GPUs)."""

    def step_time_s(self, shape: StepShape) -> float:
        """Seconds for one step of the given shape."""
        ...

    def decode_steps_time_s(self, shape: StepShape, steps: int) -> float:
        """Seconds for `steps` consecutive pure-decode steps, the first of the given shape
        (prefill_tokens == 0) and each later one with decode_context_sum grown by num_decode.
        Lets the simulator fast-forward stretches where the batch does not change."""
        ...
