"""Roofline terms of single operators, shared by the step model and its calibration.

models.steptime sums them over a whole step; models.calibration fits their fractions of peak to
operators timed alone. One formula in one place, so the fit and the prediction cannot drift
apart. Arrays or floats: the predictor evaluates them over a table of token counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.gpu_catalog import GpuSpec, Precision
from models.model_catalog import ModelConfig, ModelProfile
from models.step_coefficients import StepTimeCoefficients


def roofline(memory_s: Any, compute_s: Any, sharpness: float) -> Any:
    """Smooth maximum (p-norm) of a memory and a compute time; arrays or floats, both >= 0."""
    top = np.maximum(memory_s, compute_s)
    safe = np.where(top > 0, top, 1.0)
    return top * ((memory_s / safe) ** sharpness + (compute_s / safe) ** sharpness) ** (
        1.0 / sharpness
    )


def smooth_max(a: float, b: float, sharpness: float) -> float:
    """(a^p + b^p)^(1/p) for floats >= 0, without overflow; the hot path's scalar roofline."""
    top = a if a > b else b
    if top <= 0.0:
        return 0.0
    return top * ((a / top) ** sharpness + (b / top) ** sharpness) ** (1.0 / sharpness)


def linear_bytes(tokens: Any, k: float, n: float, precision: Precision) -> Any:
    """Weights (K×N) + input (T×K, fp8 when the GEMM is fp8) + bf16 output (T×N)."""
    b = precision.bytes_per_element
    return k * n * b + tokens * k * b + tokens * n * 2


def linear_gpu_time(
    tokens: Any,
    k: float,
    n: float,
    precision: Precision,
    gpu: GpuSpec,
    coefficients: StepTimeCoefficients,
    flops_scale: float = 1.0,
) -> Any:
    """GPU time of x[T,K]·W[K,N], launch excluded. ``flops_scale`` is the in-step efficiency
    relative to the GEMM timed alone (1 for the operator model)."""
    memory = linear_bytes(tokens, k, n, precision) / (
        gpu.memory_bandwidth * coefficients.linear_bw_fraction(precision)
    )
    compute = (
        (2.0 * k * n)
        * tokens
        / (gpu.peak_flops(precision) * coefficients.linear_flops_fraction(precision) * flops_scale)
    )
    return roofline(memory, compute, coefficients.linear_sharpness)


def attention_flops_per_pair(num_q_heads: int, head_dim: int) -> int:
    """QKᵀ and AV for one (query, key) pair, one layer."""
    return 4 * num_q_heads * head_dim


def layer_linear_shapes(config: ModelConfig, tp: int) -> tuple[tuple[int, int], ...]:
    """(K, N) per GPU of qkv, o, gate_up and down (column- then row-parallel under TP)."""
    h, d = config.hidden_size, config.head_dim
    kv_heads = max(1, config.num_kv_heads // tp)
    return (
        (h, (config.num_q_heads // tp + 2 * kv_heads) * d),
        (config.num_q_heads // tp * d, h),
        (h, 2 * config.ffn_size // tp),
        (config.ffn_size // tp, h),
    )


def elementwise_bytes_per_token(profile: ModelProfile) -> float:
    """Activation bytes one token moves per layer outside the GEMMs and attention, per GPU:
    two fused residual+RMSNorm (read x and residual, write both), rotary on q and k, the
    KV-cache write, and SiLU·mul over the gate/up output. bf16 activations."""
    c, tp = profile.config, profile.tp
    kv_heads = profile.kv_heads_per_gpu
    norms = 2 * 4 * c.hidden_size * 2
    rotary = 2 * (c.num_q_heads // tp + kv_heads) * c.head_dim * 2
    kv_write = 2 * kv_heads * c.head_dim * (2 + profile.kv_dtype.bytes_per_element)
    silu = 3 * (c.ffn_size // tp) * 2
    return float(norms + rotary + kv_write + silu)


def harness_elementwise_bytes_per_token(profile: ModelProfile) -> float:
    """The same for the reference harness's unfused layer: two RMSNorms (read, write), two
    residual adds (read two, write one), SiLU (read F, write F) and mul (read 2F, write F)."""
    c, tp = profile.config, profile.tp
    return float((2 * 2 * c.hidden_size + 2 * 3 * c.hidden_size + 5 * (c.ffn_size // tp)) * 2)
