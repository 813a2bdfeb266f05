"""The step-time model's coefficients and the file that ships them.

One frozen dataclass of achieved fractions of peak and fixed costs (what models.steptime's
predictor divides its bytes and FLOPs by), and its JSON file. The shipped one,
models/data/steptime_coefficients.json, holds the H200 fit made by models.calibration (operator
rows) and models.step_calibration (whole steps) with the fit's errors; ``load_coefficients``
reads another (``inferledger calibrate CSV... -o FILE`` writes one). docs/simulator-calibration.md
explains each coefficient.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from inferledger.core.errors import BadInputError
from models.gpu_catalog import Precision

COEFFICIENTS_FORMAT = 2


@dataclass(frozen=True, slots=True)
class StepTimeCoefficients:
    """Achieved fractions of peak and fixed costs. Times in seconds.

    Three groups: fitted on operator timings (the first twelve, models.calibration stage 1);
    fitted on whole-model steps (``step_*``, ``graph_kernel_gap_s``, ``launch_sharpness``:
    models.step_calibration, stage 2; defaults when no step rows were given); and assumptions no
    single-GPU timing can measure (the ``engine_*`` CPU terms;
    ``engine_sync_s`` is refitted by ``step`` rows measured on vLLM itself)."""

    linear_launch_s: float  # eager dispatch gap per linear kernel, as the operator timings see it
    attn_prefill_launch_s: float
    attn_decode_launch_s: float
    linear_bf16_bw_fraction: float
    linear_fp8_bw_fraction: float
    linear_bf16_flops_fraction: float
    linear_fp8_flops_fraction: float
    linear_sharpness: float  # p of the p-norm (mem^p + compute^p)^(1/p); large p -> max
    attn_prefill_flops_fraction: float
    attn_decode_bw_fraction: float
    # Bandwidth one (sequence, KV head) work unit reaches in the measured decode kernel, which does
    # not split the KV across thread blocks. vLLM's kernels do, so the step model ignores it.
    attn_decode_unit_bw_fraction: float
    elementwise_bw_fraction: float  # from the 1 GiB copy row
    # Whole-step terms: a linear layer's FLOP/s inside a whole step relative to the same GEMM
    # timed alone; decode attention's bandwidth likewise; the GPU-side cost per kernel boundary
    # (ramp-up, tail and dependency wait); the CPU time to launch one kernel outside CUDA graphs
    # and the sharpness of the smooth maximum of launch and GPU time.
    step_linear_flops_scale: float = 1.0
    step_attn_decode_bw_scale: float = 1.0
    graph_kernel_gap_s: float = 3e-6
    step_launch_s: float = 15e-6
    launch_sharpness: float = 4.0
    # vLLM's engine CPU per step (assumed): scheduler, input preparation and output processing,
    # a constant plus a part per scheduled sequence; and what stays on the critical path with
    # async scheduling (sampled-token hand-off, state update).
    engine_step_cpu_s: float = 3e-4
    engine_seq_cpu_s: float = 2e-6
    engine_sync_s: float = 1e-4

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadInputError(f"coefficient {f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise BadInputError(f"coefficient {f.name} must be finite and >= 0, got {value!r}")
            if (f.name.endswith(("_fraction", "_scale"))) and value == 0:
                raise BadInputError(f"coefficient {f.name} must be positive")
        if self.launch_sharpness < 1 or self.linear_sharpness < 1:
            raise BadInputError("coefficients linear_sharpness and launch_sharpness must be >= 1")

    def linear_bw_fraction(self, precision: Precision) -> float:
        if precision is Precision.BF16:
            return self.linear_bf16_bw_fraction
        return self.linear_fp8_bw_fraction

    def linear_flops_fraction(self, precision: Precision) -> float:
        if precision is Precision.BF16:
            return self.linear_bf16_flops_fraction
        return self.linear_fp8_flops_fraction


ASSUMED_COEFFICIENTS = (
    "engine_step_cpu_s",
    "engine_seq_cpu_s",
    "engine_sync_s",
)


#: Coefficients older files may carry that are no longer read.
RETIRED_COEFFICIENTS = frozenset({"allreduce_bw_fraction"})


def coefficients_to_json(
    coefficients: StepTimeCoefficients,
    calibrated_on: str = "",
    fit: Mapping[str, Mapping[str, Any]] | None = None,
    assumed: tuple[str, ...] = ASSUMED_COEFFICIENTS,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The coefficients file: values, what they were fitted on, and the fit's errors."""
    doc: dict[str, Any] = {
        "format": COEFFICIENTS_FORMAT,
        "calibrated_on": calibrated_on,
        "coefficients": asdict(coefficients),
        "assumed": list(assumed),
    }
    if fit is not None:
        doc["fit"] = {k: dict(v) for k, v in fit.items()}
    if extra:
        doc.update(extra)
    return json.dumps(doc, indent=2) + "\n"


def coefficients_from_json(text: str, where: str = "coefficients") -> StepTimeCoefficients:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{where} is not valid JSON (line {exc.lineno})") from None
    if isinstance(doc, dict) and doc.get("format") == 1:
        raise BadInputError(
            f"{where}: a coefficients file of format 1 (before whole-step calibration); "
            "regenerate it with `inferledger calibrate`"
        )
    if not isinstance(doc, dict) or doc.get("format") != COEFFICIENTS_FORMAT:
        raise BadInputError(
            f"{where}: expected a coefficients file of format {COEFFICIENTS_FORMAT}"
        )
    values = doc.get("coefficients")
    if not isinstance(values, dict):
        raise BadInputError(f"{where}: missing the 'coefficients' mapping")
    names = {f.name for f in fields(StepTimeCoefficients)}
    # Retired coefficients that older files carry: read and ignored (allreduce_bw_fraction:
    # the all-reduce is priced from published tables since 2026-12, models/allreduce.py).
    values = {k: v for k, v in values.items() if k not in RETIRED_COEFFICIENTS}
    unknown = sorted(set(values) - names)
    if unknown:
        raise BadInputError(f"{where}: unknown coefficient(s) {', '.join(unknown)}")
    missing = [
        f.name
        for f in fields(StepTimeCoefficients)
        if f.default is MISSING and f.name not in values
    ]
    if missing:
        raise BadInputError(f"{where}: missing coefficient(s) {', '.join(missing)}")
    try:
        return StepTimeCoefficients(**values)
    except BadInputError as exc:
        raise BadInputError(f"{where}: {exc}") from None


def load_coefficients(path: str | Path | None = None) -> StepTimeCoefficients:
    """Read a coefficients JSON (the shipped H200 fit when ``path`` is None)."""
    if path is None:
        return default_coefficients()
    try:
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise BadInputError(f"coefficients file {path}: {exc.strerror or exc}") from None
    return coefficients_from_json(text, f"coefficients file {path}")


def save_coefficients(
    coefficients: StepTimeCoefficients,
    path: str | Path,
    calibrated_on: str = "",
    fit: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    Path(path).write_text(coefficients_to_json(coefficients, calibrated_on, fit), "utf-8")


@functools.cache
def default_coefficients() -> StepTimeCoefficients:
    """The shipped fit (models/data/steptime_coefficients.json), read on first use."""
    text = resources.files("models").joinpath("data", "steptime_coefficients.json").read_text()
    return coefficients_from_json(text, "models/data/steptime_coefficients.json")
