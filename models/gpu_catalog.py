"""GPU profiles: memory, bandwidth, dense peaks, interconnect, power — read from shipped data.

The figures live in ``models/data/gpus.yaml`` with their sources (capacity-formulas.md §5.1), never
as constants in code, so a user can point :func:`load_gpu_catalog` at their own file. Everything is
stored in SI units (bytes, bytes/s, FLOP/s, seconds, watts) once, at load time.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from inferledger.core.errors import BadInputError
from models.allreduce import PROVENANCES, AllReduceModel, default_allreduce, legacy_allreduce


class Precision(StrEnum):
    """Number format of weights or of the KV cache."""

    BF16 = "bf16"
    FP8 = "fp8"

    @property
    def bytes_per_element(self) -> int:
        return 2 if self is Precision.BF16 else 1


_PRECISION_ALIASES = {
    "bf16": Precision.BF16,
    "bfloat16": Precision.BF16,
    "auto": Precision.BF16,  # vLLM's default dtype for Llama checkpoints is bf16
    "fp8": Precision.FP8,
    "fp8-e4m3": Precision.FP8,
    "float8": Precision.FP8,
    "float8-e4m3fn": Precision.FP8,
}


def parse_precision(value: str | Precision, what: str = "dtype") -> Precision:
    """Accept "bf16"/"bfloat16"/"fp8"/"fp8_e4m3" (any case); a clear error otherwise."""
    if isinstance(value, Precision):
        return value
    key = str(value).strip().lower().replace("_", "-")
    try:
        return _PRECISION_ALIASES[key]
    except KeyError:
        raise BadInputError(f"unknown {what} {value!r} (expected bf16 or fp8)") from None


class UnsupportedPrecisionError(BadInputError):
    """The GPU has no tensor cores for the requested number format (fp8 on A100)."""


class Interconnect(StrEnum):
    NVLINK = "nvlink"
    PCIE = "pcie"


# Coefficient families of the per-GPU ladder (docs/simulator-calibration.md, "Per-GPU ladder"):
# which H200-fitted fractions each scales.
COEFFICIENT_FAMILIES: Mapping[str, tuple[str, ...]] = {
    "linear_compute": ("linear_bf16_flops_fraction", "linear_fp8_flops_fraction"),
    "attention_compute": ("attn_prefill_flops_fraction",),
    "memory_bandwidth": (
        "linear_bf16_bw_fraction",
        "linear_fp8_bw_fraction",
        "attn_decode_bw_fraction",
        "elementwise_bw_fraction",
    ),
    "kernel_overheads": ("graph_kernel_gap_s", "step_launch_s"),
}
_EXTRAPOLATED_SOURCE = (
    "spec-sheet ratio: the H200 measurement's fraction applied to this GPU's peak"
)


@dataclass(frozen=True, slots=True)
class CoefficientRung:
    """Where one family of a GPU's step-model coefficients comes from: ``measured`` (fitted on
    this GPU's timings), ``published`` (someone's achieved-vs-peak figure for this GPU, cited;
    ``scale`` multiplies the H200's fraction by published ratio), ``extrapolated`` (the H200's
    fraction applied to this GPU's spec-sheet peak) or ``assumed``."""

    family: str
    provenance: str
    scale: float = 1.0
    fp8_scale: float | None = None  # linear_compute only: fp8 GEMMs' own ratio
    source: str = _EXTRAPOLATED_SOURCE


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model. Dense (non-sparse) datasheet figures in SI units."""

    name: str
    memory_bytes: float
    memory_type: str
    memory_bandwidth: float  # bytes/s
    bf16_flops: float  # dense FLOP/s
    fp8_flops: float | None  # dense FLOP/s; None where the GPU has no fp8 tensor cores
    interconnect: Interconnect
    interconnect_bandwidth: float  # bytes/s per GPU, both directions together
    tdp_w: float
    aliases: tuple[str, ...] = ()
    sources: str = ""
    allreduce: str | None = None  # interconnect generation in models/data/allreduce.yaml
    # Legacy catalogs: an assumed fixed cost of one small all-reduce instead of a generation.
    allreduce_latency_s: float | None = None
    fp32_flops: float | None = None  # non-tensor FP32 FLOP/s (datasheet); prices fp8-KV dequant
    ladder: tuple[CoefficientRung, ...] = ()

    def rung(self, family: str) -> CoefficientRung:
        """This GPU's provenance for one coefficient family (extrapolated when not stated)."""
        if family not in COEFFICIENT_FAMILIES:
            raise BadInputError(f"unknown coefficient family {family!r}")
        for r in self.ladder:
            if r.family == family:
                return r
        return CoefficientRung(family, "extrapolated")

    def allreduce_model(self) -> AllReduceModel:
        """The all-reduce cost model of this GPU's interconnect (models/data/allreduce.yaml)."""
        if self.allreduce is not None:
            return default_allreduce()[self.allreduce]
        latency = self.allreduce_latency_s if self.allreduce_latency_s is not None else 0.0
        return legacy_allreduce(latency, self.interconnect_bandwidth_per_direction * 0.7, self.name)

    def supports(self, precision: Precision) -> bool:
        return precision is Precision.BF16 or self.fp8_flops is not None

    def peak_flops(self, precision: Precision) -> float:
        """Dense tensor-core peak for matrix products in ``precision``."""
        if precision is Precision.BF16:
            return self.bf16_flops
        if self.fp8_flops is None:
            raise UnsupportedPrecisionError(
                f"{self.name} has no fp8 tensor cores; use bf16 weights and KV cache on it"
            )
        return self.fp8_flops

    def require(self, precision: Precision, what: str) -> None:
        """A clear error when ``precision`` (of ``what``: weights, KV cache) is unsupported."""
        if not self.supports(precision):
            # vLLM can emulate some fp8 paths on Ampere (weight-only Marlin kernels); we do not
            # model those, so saying no is better than predicting a speed-up that is not there.
            raise UnsupportedPrecisionError(
                f"{self.name} has no fp8 support in this model ({what} {precision}); use bf16"
            )

    @property
    def interconnect_bandwidth_per_direction(self) -> float:
        return self.interconnect_bandwidth / 2.0


def normalize_gpu_name(name: str) -> str:
    """'NVIDIA H200', 'h200_141gb' and 'H200-141GB' all become 'h200' / 'h200-141gb'."""
    key = "-".join(str(name).strip().lower().replace("_", " ").replace("-", " ").split())
    return key.removeprefix("nvidia-")


@dataclass(frozen=True, slots=True)
class GpuCatalog:
    """GPUs by canonical name, with an alias index."""

    gpus: tuple[GpuSpec, ...]
    _index: Mapping[str, GpuSpec] = field(repr=False, compare=False, hash=False)

    @classmethod
    def from_specs(cls, gpus: tuple[GpuSpec, ...]) -> GpuCatalog:
        index: dict[str, GpuSpec] = {}
        for gpu in gpus:
            for alias in (gpu.name, *gpu.aliases):
                key = normalize_gpu_name(alias)
                other = index.get(key)
                if other is not None and other is not gpu:
                    raise BadInputError(
                        f"GPU name {alias!r} names both {other.name} and {gpu.name}"
                    )
                index[key] = gpu
        return cls(gpus, index)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.gpus)

    def get(self, name: str | GpuSpec) -> GpuSpec:
        if isinstance(name, GpuSpec):
            return name
        gpu = self._index.get(normalize_gpu_name(name))
        if gpu is None:
            raise BadInputError(f"unknown GPU {name!r} (known: {', '.join(self.names)})")
        return gpu


_REQUIRED = (
    "name",
    "memory_gb",
    "memory_bandwidth_tb_s",
    "bf16_dense_tflops",
    "fp8_dense_tflops",
    "interconnect",
    "interconnect_bandwidth_gb_s",
    "tdp_w",
)


def _positive(entry: Mapping[str, Any], key: str, where: str) -> float:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInputError(f"{where}: {key} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise BadInputError(f"{where}: {key} must be positive, got {value!r}")
    return float(value)


def _gpu_from_entry(entry: Any, where: str) -> GpuSpec:
    if not isinstance(entry, Mapping):
        raise BadInputError(f"{where}: expected a mapping of GPU fields")
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise BadInputError(f"{where}: missing field(s) {', '.join(missing)}")
    where = f"{where} ({entry['name']})"
    try:
        interconnect = Interconnect(str(entry["interconnect"]).lower())
    except ValueError:
        raise BadInputError(
            f"{where}: interconnect must be one of {', '.join(i.value for i in Interconnect)}"
        ) from None
    fp8 = None if entry["fp8_dense_tflops"] is None else _positive(entry, "fp8_dense_tflops", where)
    aliases = entry.get("aliases") or ()
    if not isinstance(aliases, list | tuple):
        raise BadInputError(f"{where}: aliases must be a list")
    generation, latency = _allreduce_fields(entry, where)
    fp32 = entry.get("fp32_tflops")
    return GpuSpec(
        name=str(entry["name"]),
        memory_bytes=_positive(entry, "memory_gb", where) * 1e9,
        memory_type=str(entry.get("memory_type", "")),
        memory_bandwidth=_positive(entry, "memory_bandwidth_tb_s", where) * 1e12,
        bf16_flops=_positive(entry, "bf16_dense_tflops", where) * 1e12,
        fp8_flops=None if fp8 is None else fp8 * 1e12,
        interconnect=interconnect,
        interconnect_bandwidth=_positive(entry, "interconnect_bandwidth_gb_s", where) * 1e9,
        tdp_w=_positive(entry, "tdp_w", where),
        aliases=tuple(str(a) for a in aliases),
        sources=str(entry.get("sources", "")),
        allreduce=generation,
        allreduce_latency_s=latency,
        fp32_flops=None if fp32 is None else _positive(entry, "fp32_tflops", where) * 1e12,
        ladder=_ladder(entry.get("coefficients"), where),
    )


def _allreduce_fields(entry: Mapping[str, Any], where: str) -> tuple[str | None, float | None]:
    if "allreduce" in entry:
        generation = str(entry["allreduce"])
        known = default_allreduce()
        if generation not in known:
            raise BadInputError(
                f"{where}: allreduce {generation!r} is not a generation of "
                f"models/data/allreduce.yaml ({', '.join(known)})"
            )
        return generation, None
    if "allreduce_latency_us" in entry:
        return None, _positive(entry, "allreduce_latency_us", where) * 1e-6
    raise BadInputError(f"{where}: missing field allreduce (an interconnect generation)")


def _ladder(raw: Any, where: str) -> tuple[CoefficientRung, ...]:
    """The per-GPU coefficient ladder: one entry per family, each with its provenance."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise BadInputError(f"{where}: coefficients must map a family to its provenance")
    rungs = []
    for family, body in raw.items():
        here = f"{where} coefficients.{family}"
        if family not in COEFFICIENT_FAMILIES:
            raise BadInputError(
                f"{here}: unknown family (known: {', '.join(COEFFICIENT_FAMILIES)})"
            )
        if not isinstance(body, Mapping):
            raise BadInputError(f"{here}: expected a mapping with provenance, scale, source")
        provenance = body.get("provenance")
        if provenance not in PROVENANCES:
            raise BadInputError(
                f"{here}: provenance must be one of {', '.join(PROVENANCES)}, got {provenance!r}"
            )
        scale = _positive(body, "scale", here) if "scale" in body else 1.0
        fp8 = body.get("fp8_scale")
        if fp8 is not None and family != "linear_compute":
            raise BadInputError(f"{here}: fp8_scale applies to linear_compute only")
        source = str(body.get("source", "")).strip()
        if provenance in ("published", "measured") and not source:
            raise BadInputError(f"{here}: a {provenance} entry needs a source")
        if provenance == "extrapolated" and scale != 1.0:
            raise BadInputError(
                f"{here}: an extrapolated entry keeps scale 1 (the H200's fraction)"
            )
        rungs.append(
            CoefficientRung(
                family=str(family),
                provenance=str(provenance),
                scale=scale,
                fp8_scale=None if fp8 is None else _positive(body, "fp8_scale", here),
                source=source or _EXTRAPOLATED_SOURCE,
            )
        )
    return tuple(rungs)


def load_gpu_catalog(path: str | Path | None = None) -> GpuCatalog:
    """Read a GPU catalog YAML (the shipped ``models/data/gpus.yaml`` when ``path`` is None)."""
    if path is None:
        text = resources.files("models").joinpath("data", "gpus.yaml").read_text("utf-8")
        where = "models/data/gpus.yaml"
    else:
        where = str(path)
        try:
            text = Path(path).read_text("utf-8")
        except OSError as exc:
            raise BadInputError(f"GPU catalog {where}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        raise BadInputError(f"GPU catalog {where} is not valid YAML") from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("gpus"), list):
        raise BadInputError(f"GPU catalog {where} must hold a list under 'gpus'")
    gpus = tuple(_gpu_from_entry(e, f"{where} entry {i + 1}") for i, e in enumerate(doc["gpus"]))
    return GpuCatalog.from_specs(gpus)


@functools.cache
def default_gpu_catalog() -> GpuCatalog:
    """The shipped catalog, read on first use (not at import time)."""
    return load_gpu_catalog()


def get_gpu(name: str | GpuSpec) -> GpuSpec:
    """A GPU from the shipped catalog by name or alias ('H200', 'h200-141gb', 'NVIDIA H200')."""
    return default_gpu_catalog().get(name)
