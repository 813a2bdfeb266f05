"""Stage 2 of the calibration: fit the step model to whole-model steps.

Rows in the format of h200-llama-steps.csv: a 32-layer forward pass timed as a CUDA graph replay
or eagerly (shared/reference/README-h200-llama-steps.md). The step model in its HARNESS scope
(models.steptime: the forward pass as that harness runs it, no rotary, KV write, sampling or
engine CPU) is fitted to them with the operator values of stage 1 (models.calibration) held: the
in-step GEMM efficiency (a scale on the isolated FLOP/s fraction), the in-step decode attention
bandwidth, the GPU gap per kernel, and the eager launch time per kernel with the sharpness of its
smooth maximum against the GPU work. Some rows are held out of the fit (``held_out="auto"``: the
longest-context decode steps and the largest prefills) and reported apart. Levenberg-Marquardt on
log(predicted / measured) (models.least_squares). models.calibration runs both stages.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from inferledger.core.errors import BadInputError
from models.execution_time import StepShape
from models.gpu_catalog import GpuSpec, Precision, get_gpu, parse_precision
from models.least_squares import from_free, levenberg_marquardt, to_free
from models.model_catalog import ModelConfig, ModelProfile, get_model
from models.step_coefficients import StepTimeCoefficients
from models.steptime import (
    DEFAULT_CUDAGRAPH_MAX_TOKENS,
    RooflinePredictor,
    StepScope,
    prefill_shape,
)

STEP_COLUMNS = ("step", "mode", "model", "dtype", "seqs", "tokens_per_seq", "context", "ms")
STEP_KINDS = ("decode", "prefill")
STEP_MODES = ("graph", "eager")
HELD_OUT_RULES = ("auto", "none")
# Where the whole-step fit starts (stage 2).
START_STEP_VALUES = {
    "step_linear_flops_scale": 0.85,
    "step_attn_decode_bw_scale": 1.0,
    "graph_kernel_gap_s": 3e-6,
    "step_launch_s": 15e-6,
    "launch_sharpness": 4.0,
}


@dataclass(frozen=True, slots=True)
class WholeStep:
    """One validated row of a whole-step CSV (h200-llama-steps.csv format)."""

    line: int
    kind: str  # decode or prefill
    mode: str  # graph or eager
    model: ModelConfig
    dtype: Precision
    seqs: int
    tokens_per_seq: int
    context: int
    seconds: float

    @property
    def shape(self) -> StepShape:
        if self.kind == "decode":
            return StepShape(num_decode=self.seqs, decode_context_sum=self.seqs * self.context)
        tokens = self.seqs * self.tokens_per_seq
        return prefill_shape(tokens, self.seqs, self.context)

    @property
    def tokens(self) -> int:
        return self.seqs * (1 if self.kind == "decode" else self.tokens_per_seq)

    def describe(self) -> str:
        if self.kind == "decode":
            what = f"decode {self.mode} {self.seqs}×ctx {self.context}"
        else:
            what = f"prefill {self.mode} {self.seqs}×{self.tokens_per_seq}"
            what += f" after {self.context}" if self.context else ""
        return f"{self.model.name} {self.dtype} {what}"


@dataclass(frozen=True, slots=True)
class StepFit:
    """A whole-step row, the calibrated model's prediction for it, and whether it was fitted."""

    row: WholeStep
    predicted_s: float
    held_out: bool

    @property
    def error(self) -> float:
        """Signed relative error, (predicted − measured) / measured."""
        return self.predicted_s / self.row.seconds - 1.0


# --- reading and validating -----------------------------------------------------------------


def whole_number(value: str, column: str, where: str) -> int:
    """A CSV cell that must hold a whole number >= 0 ("3" or "3.0"); one-line errors. Both
    calibration CSV formats use it."""
    try:
        number = float(value)
    except ValueError:
        raise BadInputError(f"{where}: column {column} is not a number: {value!r}") from None
    if not math.isfinite(number) or number < 0 or number != int(number):
        raise BadInputError(f"{where}: column {column} must be a whole number >= 0, got {value!r}")
    return int(number)


def _parse_step_row(raw: dict[str, str], where: str, line: int) -> WholeStep:
    kind, mode = raw["step"].strip(), raw["mode"].strip()
    if kind not in STEP_KINDS:
        raise BadInputError(f"{where}: unknown step {kind!r} (expected decode or prefill)")
    if mode not in STEP_MODES:
        raise BadInputError(f"{where}: unknown mode {mode!r} (expected graph or eager)")
    ms_text = raw["ms"].strip()
    try:
        ms = float(ms_text)
    except ValueError:
        raise BadInputError(f"{where}: column ms is not a number: {ms_text!r}") from None
    if not math.isfinite(ms) or ms <= 0:
        raise BadInputError(f"{where}: column ms must be a positive number, got {ms_text!r}")
    seqs, per_seq, context = (
        whole_number(raw[c].strip(), c, where) for c in ("seqs", "tokens_per_seq", "context")
    )
    try:
        model = get_model(raw["model"].strip())
    except BadInputError as exc:
        raise BadInputError(f"{where}: {exc}") from None
    dtype = parse_precision(raw["dtype"].strip())
    if seqs < 1 or per_seq < 1:
        raise BadInputError(f"{where}: a step needs seqs >= 1 and tokens_per_seq >= 1")
    if kind == "decode" and (per_seq != 1 or context < 1):
        raise BadInputError(f"{where}: a decode step has tokens_per_seq 1 and context >= 1")
    if kind == "prefill" and mode == "graph":
        raise BadInputError(f"{where}: prefill steps are eager (vLLM captures decode batches)")
    return WholeStep(line, kind, mode, model, dtype, seqs, per_seq, context, ms * 1e-3)


def _read_rows(path: str | Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and the non-blank rows (line number, stripped keys) of a calibration CSV."""
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns = [c.strip() for c in reader.fieldnames or ()]
            rows = []
            for raw in reader:
                cleaned = {(k or "").strip(): (v or "") for k, v in raw.items()}
                if any(v.strip() for v in cleaned.values()):
                    rows.append((reader.line_num, cleaned))
    except FileNotFoundError:
        raise BadInputError(f"calibration CSV not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise BadInputError(f"cannot read calibration CSV {path}: {reason}") from None
    except csv.Error as exc:
        raise BadInputError(f"{path}: not a valid CSV ({exc})") from None
    if not columns:
        raise BadInputError(f"{path}: the file is empty")
    return columns, rows


def is_step_csv(path: str | Path) -> bool:
    """Whether a calibration CSV holds whole steps (a ``step`` and a ``mode`` column)."""
    columns, _ = _read_rows(path)
    return "step" in columns and "mode" in columns and "op" not in columns


def read_step_timings(path: str | Path) -> tuple[WholeStep, ...]:
    """Read and validate a CSV in the format of h200-llama-steps.csv; one-line errors."""
    columns, raw_rows = _read_rows(path)
    missing = [c for c in STEP_COLUMNS if c not in columns]
    if missing:
        raise BadInputError(
            f"{path}: missing column(s) {', '.join(missing)} (expected {', '.join(STEP_COLUMNS)})"
        )
    rows = tuple(_parse_step_row(raw, f"{path} line {line}", line) for line, raw in raw_rows)
    if not rows:
        raise BadInputError(f"{path}: no whole-step rows")
    return rows


def held_out_mask(rows: Sequence[WholeStep], rule: str = "auto") -> tuple[bool, ...]:
    """Which rows the fit must not see. ``auto``: the decode steps at the longest context and
    the prefills of the most tokens, each only where shorter ones remain to fit — the directions
    a calibrated model is asked to extrapolate in (longer contexts, larger prefills). ``none``:
    fit every row."""
    if rule not in HELD_OUT_RULES:
        raise BadInputError(f"unknown held-out rule {rule!r} (expected auto or none)")
    if rule == "none":
        return tuple(False for _ in rows)
    held = [False] * len(rows)
    for kind, size in (("decode", lambda r: r.context), ("prefill", lambda r: r.tokens)):
        sizes = {size(r) for r in rows if r.kind == kind}
        if len(sizes) > 1:
            top = max(sizes)
            for i, r in enumerate(rows):
                if r.kind == kind and size(r) == top:
                    held[i] = True
    return tuple(held)


# --- the fit --------------------------------------------------------------------------------------


def predict_whole_steps(
    rows: Sequence[WholeStep], gpu: str | GpuSpec, coefficients: StepTimeCoefficients
) -> np.ndarray:
    """The step model in its HARNESS scope for whole-step rows: seconds per row."""
    g = get_gpu(gpu)
    predictors: dict[tuple[str, Precision, str], RooflinePredictor] = {}
    out = []
    for row in rows:
        key = (row.model.name, row.dtype, row.mode)
        if key not in predictors:
            profile = ModelProfile(row.model, row.dtype, Precision.BF16, 1)
            predictors[key] = RooflinePredictor(
                profile,
                g,
                coefficients,
                DEFAULT_CUDAGRAPH_MAX_TOKENS if row.mode == "graph" else 0,
                table_tokens=1,
                scope=StepScope.HARNESS,
            )
        out.append(predictors[key].step_time_s(row.shape))
    return np.array(out)


def _step_parameters(rows: Sequence[WholeStep]) -> tuple[str, ...]:
    """The whole-step coefficients these (fitted) rows can tell apart."""
    names = ["graph_kernel_gap_s"]
    if any(r.tokens >= 256 for r in rows):  # compute-bound GEMMs
        names.append("step_linear_flops_scale")
    if any(r.kind == "decode" and r.seqs * r.context >= 32 * 1024 for r in rows):
        names.append("step_attn_decode_bw_scale")
    eager = [r for r in rows if r.mode == "eager" and r.kind == "decode"]
    if len(eager) >= 2:
        names.append("step_launch_s")
    if len(eager) >= 3:
        names.append("launch_sharpness")
    return tuple(names)


def fit_whole_steps(
    rows: Sequence[WholeStep],
    gpu: GpuSpec,
    coef: StepTimeCoefficients,
    held_out: Sequence[bool],
) -> tuple[StepTimeCoefficients, tuple[str, ...], tuple[StepFit, ...]]:
    """Stage 2: fit the whole-step coefficients to the rows not held out, keeping ``coef``'s
    operator values; return the coefficients, the names fitted and every row's prediction."""
    if any(not gpu.supports(r.dtype) for r in rows):
        raise BadInputError(f"whole-step rows use fp8 but {gpu.name} has no fp8 tensor cores")
    fitted_rows = [r for r, h in zip(rows, held_out, strict=True) if not h]
    if not fitted_rows:
        raise BadInputError("every whole-step row is held out: nothing left to fit")
    names = _step_parameters(fitted_rows)
    start = replace(coef, **{n: START_STEP_VALUES[n] for n in names})
    log_measured = np.log([r.seconds for r in fitted_rows])

    def coefficients_at(x: np.ndarray) -> StepTimeCoefficients:
        return replace(start, **{n: from_free(n, v) for n, v in zip(names, x, strict=True)})

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(predict_whole_steps(fitted_rows, gpu, coefficients_at(x))) - log_measured

    x0 = np.array([to_free(n, getattr(start, n)) for n in names])
    fitted = coefficients_at(levenberg_marquardt(residuals, x0))
    predicted = predict_whole_steps(rows, gpu, fitted)
    fits = tuple(
        StepFit(r, float(p), bool(h)) for r, p, h in zip(rows, predicted, held_out, strict=True)
    )
    return fitted, names, fits
