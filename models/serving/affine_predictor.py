"""A closed-form ExecutionTimePredictor: step time affine in the StepShape fields.

Not a calibrated model (that is models/steptime.py). It exists so the simulator can be tested
with exactly known step times, and benchmarked before the calibrated predictor is available.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.execution_time import StepShape


@dataclass(frozen=True, slots=True)
class AffineStepTimePredictor:
    """seconds = base_s + per_decode_seq_s * num_decode
    + per_context_token_s * decode_context_sum + per_prefill_token_s * prefill_tokens
    + per_attention_pair_s * prefill_attention + per_prefill_seq_s * num_prefill_seqs."""

    base_s: float
    per_decode_seq_s: float = 0.0
    per_context_token_s: float = 0.0
    per_prefill_token_s: float = 0.0
    per_attention_pair_s: float = 0.0
    per_prefill_seq_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.base_s > 0:
            raise ValueError("base_s must be > 0 so that every step takes time")
        for name in (
            "per_decode_seq_s",
            "per_context_token_s",
            "per_prefill_token_s",
            "per_attention_pair_s",
            "per_prefill_seq_s",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    def step_time_s(self, shape: StepShape) -> float:
        return (
            self.base_s
            + self.per_decode_seq_s * shape.num_decode
            + self.per_context_token_s * shape.decode_context_sum
            + self.per_prefill_token_s * shape.prefill_tokens
            + self.per_attention_pair_s * shape.prefill_attention
            + self.per_prefill_seq_s * shape.num_prefill_seqs
        )

    def decode_steps_time_s(self, shape: StepShape, steps: int) -> float:
        # sum over i < steps of step_time(context + i * num_decode), in closed form
        growth = self.per_context_token_s * shape.num_decode * (steps * (steps - 1) / 2)
        return steps * self.step_time_s(shape) + growth

    @classmethod
    def h200_llama_8b_like(cls) -> AffineStepTimePredictor:
        """Rough, UNCALIBRATED numbers shaped like Llama-3.1-8B bf16 on one H200: ~6 ms to read
        the weights per step, KV reads at ~3.4 TB/s (128 KiB per context token), prefill at
        ~45 % of 989 TFLOP/s (15 GFLOP per token), causal attention at the same rate."""
        return cls(
            base_s=6.0e-3,
            per_decode_seq_s=2.0e-5,
            per_context_token_s=3.9e-8,
            per_prefill_token_s=3.4e-5,
            per_attention_pair_s=1.2e-9,
            per_prefill_seq_s=5.0e-5,
        )
