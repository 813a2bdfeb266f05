"""Per-GPU terms of the step-time model: the coefficient ladder, fp8-KV dequantisation, provenance.

* :func:`ladder_coefficients` turns the H200-fitted coefficients into another GPU's: each family's
  fractions are multiplied by that GPU's ``scale`` in models/data/gpus.yaml (published
  achieved-vs-peak ratios; 1 where the H200's fraction is extrapolated to the GPU's spec sheet).
* :func:`fp8_kv_dequant_s_per_element` prices turning fp8 K/V into the attention's working
  precision, from a published fp8-vs-bf16 decode-kernel comparison (models/data/kv_fp8.yaml).
* :func:`step_provenance` says, for ``inferledger steptime --json`` and the planner, which of a
  deployment's numbers are measured, published, extrapolated or assumed.

docs/simulator-calibration.md ("Per-GPU ladder", "All-reduce", "FP8 KV cache") has the sources.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import replace
from importlib import resources
from typing import Any

import yaml

from inferledger.core.errors import BadInputError
from models.gpu_catalog import COEFFICIENT_FAMILIES, GpuSpec, Precision
from models.step_coefficients import ASSUMED_COEFFICIENTS, StepTimeCoefficients

# Fractions of peak cannot exceed 1 whatever a ratio says.
_MAX_FRACTION = 0.98


def ladder_coefficients(base: StepTimeCoefficients, gpu: GpuSpec) -> StepTimeCoefficients:
    """``base`` (fitted on the H200) carried to ``gpu`` by its ladder's scales."""
    changes: dict[str, float] = {}
    for family, names in COEFFICIENT_FAMILIES.items():
        rung = gpu.rung(family)
        for name in names:
            scale = rung.scale
            if name == "linear_fp8_flops_fraction" and rung.fp8_scale is not None:
                scale = rung.fp8_scale
            if scale == 1.0:
                continue
            value = getattr(base, name) * scale
            if name.endswith("_fraction"):
                value = min(value, _MAX_FRACTION)
            changes[name] = value
    return replace(base, **changes) if changes else base


def _kv_fp8_ops(doc: Any, where: str) -> float:
    try:
        ref = float(doc["reference_fp32_tflops"]) * 1e12
        rows = doc["rows"]
        ops = []
        for row in rows:
            elements = row["batch"] * row["kv_len"] * row["kv_heads"] * row["head_dim"] * 2
            extra_s = (row["fp8_ms"] - row["bf16_ms"] / 2.0) * 1e-3
            ops.append(extra_s * ref / elements)
    except (KeyError, TypeError, ValueError):
        raise BadInputError(
            f"{where}: expected reference_fp32_tflops and rows of kernel times"
        ) from None
    if not ops or min(ops) <= 0:
        raise BadInputError(f"{where}: rows must show fp8 slower than half the bf16 time")
    return math.fsum(ops) / len(ops)  # fsum: the same bits on every Python version


@functools.cache
def kv_fp8_ops_per_element() -> float:
    """FP32-op equivalents of dequantisation work per fp8 KV element (models/data/kv_fp8.yaml)."""
    text = resources.files("models").joinpath("data", "kv_fp8.yaml").read_text("utf-8")
    return _kv_fp8_ops(yaml.safe_load(text), "models/data/kv_fp8.yaml")


def fp8_kv_dequant_s_per_element(gpu: GpuSpec, kv_dtype: Precision) -> float:
    """Seconds of dequantisation per KV element read in decode attention (0 for a bf16 cache,
    or a GPU whose catalog entry gives no FP32 rate)."""
    if kv_dtype is not Precision.FP8 or gpu.fp32_flops is None:
        return 0.0
    return kv_fp8_ops_per_element() / gpu.fp32_flops


def step_provenance(gpu: GpuSpec, tp: int, kv_dtype: Precision, ladder: bool) -> dict[str, Any]:
    """Where each family of a deployment's step-model numbers comes from."""
    families: dict[str, Mapping[str, Any]] = {}
    for family in COEFFICIENT_FAMILIES:
        rung = gpu.rung(family)
        entry: dict[str, Any] = {"provenance": rung.provenance, "source": rung.source}
        if ladder and rung.provenance != "measured":
            entry["scale"] = rung.scale
            if rung.fp8_scale is not None:
                entry["fp8_scale"] = rung.fp8_scale
        families[family] = entry
    model = gpu.allreduce_model()
    families["allreduce"] = (
        {"provenance": "not used (TP 1)"}
        if tp <= 1
        else {"generation": model.generation, **model.provenance, "source": model.sources}
    )
    if kv_dtype is Precision.FP8:
        families["fp8_kv_dequant"] = {
            "provenance": "published" if gpu.fp32_flops is not None else "not modelled",
            "source": "flashinfer-ai/flashinfer issue #1753 (H20 fp8 vs bf16 decode kernel), "
            "scaled by FP32 rate; models/data/kv_fp8.yaml",
        }
    families["engine_cpu"] = {
        "provenance": "assumed",
        "coefficients": list(ASSUMED_COEFFICIENTS[1:]),
    }
    return {"gpu": gpu.name, "ladder_applied": ladder, "families": families}


def provenance_line(doc: Mapping[str, Any]) -> str:
    """One line of :func:`step_provenance` for ``inferledger steptime``'s text output."""
    parts = []
    for family, entry in doc["families"].items():
        if "small_messages" in entry:
            what = (
                f"{entry['generation']}: small messages {entry['small_messages']}, "
                f"large {entry['large_messages']}"
            )
        else:
            what = str(entry["provenance"])
        parts.append(f"{family} {what}")
    return "coefficients: " + "; ".join(parts)
