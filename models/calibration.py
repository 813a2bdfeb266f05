"""Fit the step-time model's coefficients: operator timings first, then whole-model steps.

Stage 1, operator rows (h200-llama-ops.csv format). Each row is one operator timed alone on one
GPU in eager PyTorch. The operator model is the step model's own term plus a fitted per-kernel
launch time (the CPU dispatch gap the harness pays around every kernel):

    qkv, o, gate_up, down, lm_head:  launch + roofline(bytes / (f_bw·BW), FLOPs / (f_fl·peak))
    attn_prefill:                    launch + 4·n_q·d·pairs / (f·peak_bf16)
    attn_decode:                     launch + KV bytes / (BW · min(f, units·u))
    copy, gemm8192:                  ceilings, reported; copy sets the elementwise fraction

Stage 2, whole-step rows (h200-llama-steps.csv format), is models.step_calibration: the in-step
GEMM efficiency, decode attention bandwidth, GPU gap per kernel and eager launch terms fitted to
whole forward passes with the stage-1 values held, some rows held out and reported apart.

Optional ``step`` rows in the operator format (a whole vLLM engine step measured, e.g. TPOT from
``vllm bench serve``: T prefill tokens of one new prompt, B decode sequences at context L each,
TP 1) refit the engine's per-step synchronisation (``engine_sync_s``). This module runs the
stages in that order (``calibrate``, ``fit_coefficients``) and reports the result (``inferledger
calibrate``). Both fits are Levenberg-Marquardt on log(predicted / measured), hand-written on
numpy (models.least_squares), started from fixed values so they are deterministic.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from inferledger.core.errors import BadInputError
from models.execution_time import StepShape
from models.gpu_catalog import GpuSpec, Precision, get_gpu, parse_precision
from models.least_squares import from_free, levenberg_marquardt, to_free
from models.model_catalog import ModelConfig, ModelProfile, get_model
from models.operator_roofline import attention_flops_per_pair, linear_gpu_time
from models.step_calibration import (
    HELD_OUT_RULES,
    StepFit,
    WholeStep,
    fit_whole_steps,
    held_out_mask,
    is_step_csv,
    read_step_timings,
    whole_number,
)
from models.step_coefficients import (
    ASSUMED_COEFFICIENTS,
    StepTimeCoefficients,
    coefficients_to_json,
    default_coefficients,
)
from models.steptime import RooflinePredictor

LINEAR_OPS = ("qkv", "o", "gate_up", "down", "lm_head")
ATTENTION_OPS = ("attn_prefill", "attn_decode")
CEILING_OPS = ("copy", "gemm8192")
STEP_OP = "step"
KNOWN_OPS = (*LINEAR_OPS, *ATTENTION_OPS, *CEILING_OPS, STEP_OP)
REQUIRED_COLUMNS = ("op", "model", "dtype", "T", "B", "L", "ms")
COPY_BYTES = 2 * (1 << 30)  # the copy row moves 1 GiB read + 1 GiB written
GEMM_CEILING_SIZE = 8192
FP8_TOKEN_PADDING = 16  # the harness pads fp8 GEMM inputs up to a multiple of 16 rows

# Where the fit starts, and the values of the assumed coefficients when nothing else is given.
START_COEFFICIENTS = StepTimeCoefficients(
    linear_launch_s=25e-6,
    attn_prefill_launch_s=25e-6,
    attn_decode_launch_s=25e-6,
    linear_bf16_bw_fraction=0.85,
    linear_fp8_bw_fraction=0.85,
    linear_bf16_flops_fraction=0.7,
    linear_fp8_flops_fraction=0.7,
    linear_sharpness=4.0,
    attn_prefill_flops_fraction=0.6,
    attn_decode_bw_fraction=0.9,
    attn_decode_unit_bw_fraction=0.01,
    elementwise_bw_fraction=0.85,
)


@dataclass(frozen=True, slots=True)
class OpTiming:
    """One validated CSV row. ``model`` is None for the ceiling rows."""

    line: int
    op: str
    model: ModelConfig | None
    dtype: Precision
    tokens: int
    batch: int
    context: int
    seconds: float

    @property
    def config(self) -> ModelConfig:
        """The model of an operator or step row (ceiling rows have none)."""
        if self.model is None:
            raise BadInputError(f"line {self.line}: {self.op} has no model")
        return self.model

    @property
    def family(self) -> str:
        return f"{self.op}/{self.dtype}" if self.op in LINEAR_OPS else self.op

    def describe(self) -> str:
        model = self.model.name if self.model else "-"
        if self.op in LINEAR_OPS:
            shape = f"T={self.tokens}"
        elif self.op == "attn_decode":
            shape = f"B={self.batch} L={self.context}"
        else:
            shape = f"T={self.tokens} B={self.batch} L={self.context}"
        return f"line {self.line}: {self.op} {model} {self.dtype} {shape}"


@dataclass(frozen=True, slots=True)
class FamilyFit:
    """How well the fitted model reproduces one operator family's rows."""

    family: str
    rows: int
    median_rel_error: float
    worst_rel_error: float
    worst_row: str


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    coefficients: StepTimeCoefficients
    families: tuple[FamilyFit, ...]
    gpu: GpuSpec
    source: str
    rows: int
    fitted: tuple[str, ...]  # coefficients fitted from these rows; the rest were kept
    copy_bandwidth: float | None  # achieved bytes/s of the copy row
    gemm_flops: float | None  # achieved FLOP/s of the gemm8192 row
    steps: tuple[StepFit, ...] = ()  # whole-step rows, fitted and held out
    step_sources: tuple[str, ...] = ()

    def step_errors(self, held_out: bool) -> list[float]:
        return [abs(s.error) for s in self.steps if s.held_out is held_out]

    def family(self, name: str) -> FamilyFit:
        for fit in self.families:
            if fit.family == name:
                return fit
        raise KeyError(name)

    def fit_errors(self) -> dict[str, dict[str, float]]:
        return {
            f.family: {
                "rows": f.rows,
                "median_rel_error": round(f.median_rel_error, 4),
                "worst_rel_error": round(f.worst_rel_error, 4),
            }
            for f in self.families
        }

    @property
    def calibrated_on(self) -> str:
        text = self.gpu.name
        if self.rows:
            text += f"; {Path(self.source).name} ({self.rows} rows)"
        for source in self.step_sources:
            fitted = sum(1 for s in self.steps if not s.held_out)
            text += f"; {Path(source).name} ({fitted} of {len(self.steps)} whole steps fitted)"
        return text

    def to_json(self) -> str:
        assumed = tuple(n for n in ASSUMED_COEFFICIENTS if n not in self.fitted)
        extra = None
        if self.steps:
            extra = {
                "whole_steps": [
                    {
                        "row": s.row.describe(),
                        "line": s.row.line,
                        "measured_ms": s.row.seconds * 1e3,
                        "predicted_ms": round(s.predicted_s * 1e3, 4),
                        "error": round(s.error, 4),
                        "held_out": s.held_out,
                    }
                    for s in self.steps
                ]
            }
        return coefficients_to_json(
            self.coefficients, self.calibrated_on, self.fit_errors(), assumed, extra
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), "utf-8")


# --- reading and validating -----------------------------------------------------------------


def _parse_row(raw: dict[str, str], where: str, line: int) -> OpTiming:
    op = raw["op"].strip()
    if op not in KNOWN_OPS:
        raise BadInputError(f"{where}: unknown op {op!r} (expected one of {', '.join(KNOWN_OPS)})")
    ms_text = raw["ms"].strip()
    try:
        ms = float(ms_text)
    except ValueError:
        raise BadInputError(f"{where}: column ms is not a number: {ms_text!r}") from None
    if not math.isfinite(ms) or ms <= 0:
        raise BadInputError(f"{where}: column ms must be a positive number, got {ms_text!r}")
    tokens, batch, context = (whole_number(raw[c].strip(), c, where) for c in ("T", "B", "L"))
    dtype = parse_precision(raw["dtype"].strip())
    model = None
    if op not in CEILING_OPS:
        try:
            model = get_model(raw["model"].strip())
        except BadInputError as exc:
            raise BadInputError(f"{where}: {exc}") from None
    if op in (*LINEAR_OPS, "attn_prefill") and tokens < 1:
        raise BadInputError(f"{where}: {op} needs T >= 1")
    if op == "attn_decode" and (batch < 1 or context < 1):
        raise BadInputError(f"{where}: attn_decode needs B >= 1 and L >= 1")
    if op == STEP_OP and tokens + batch < 1:
        raise BadInputError(f"{where}: a step needs T >= 1 or B >= 1")
    return OpTiming(line, op, model, dtype, tokens, batch, context, ms * 1e-3)


def read_op_timings(path: str | Path) -> tuple[OpTiming, ...]:
    """Read and validate a CSV in the format of h200-llama-ops.csv; one-line errors."""
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns = [c.strip() for c in reader.fieldnames or ()]
            missing = [c for c in REQUIRED_COLUMNS if c not in columns]
            if not columns:
                raise BadInputError(f"{path}: the file is empty")
            if missing:
                raise BadInputError(
                    f"{path}: missing column(s) {', '.join(missing)} "
                    f"(expected {', '.join(REQUIRED_COLUMNS)})"
                )
            rows: list[OpTiming] = []
            for raw in reader:
                line = reader.line_num
                cleaned = {(k or "").strip(): (v or "") for k, v in raw.items()}
                if not any(v.strip() for v in cleaned.values()):
                    continue  # a blank line
                rows.append(_parse_row(cleaned, f"{path} line {line}", line))
    except FileNotFoundError:
        raise BadInputError(f"calibration CSV not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise BadInputError(f"cannot read calibration CSV {path}: {reason}") from None
    except csv.Error as exc:
        raise BadInputError(f"{path}: not a valid CSV ({exc})") from None
    if not any(r.op in LINEAR_OPS or r.op in ATTENTION_OPS or r.op == STEP_OP for r in rows):
        raise BadInputError(
            f"{path}: no usable rows (need operator timings with op in "
            f"{', '.join((*LINEAR_OPS, *ATTENTION_OPS))}, or {STEP_OP} rows)"
        )
    return tuple(rows)


# --- the operator model ---------------------------------------------------------------------


def _linear_shape(op: str, c: ModelConfig) -> tuple[int, int]:
    h, d = c.hidden_size, c.head_dim
    return {
        "qkv": (h, (c.num_q_heads + 2 * c.num_kv_heads) * d),
        "o": (c.num_q_heads * d, h),
        "gate_up": (h, 2 * c.ffn_size),
        "down": (c.ffn_size, h),
        "lm_head": (h, c.vocab_size),
    }[op]


class _OperatorModel:
    """Feature arrays of the operator rows, so one prediction of all rows is a few numpy ops."""

    def __init__(self, rows: Sequence[OpTiming], gpu: GpuSpec) -> None:
        self.gpu = gpu
        self.rows = tuple(r for r in rows if r.op in LINEAR_OPS or r.op in ATTENTION_OPS)
        self.measured = np.array([r.seconds for r in self.rows])
        self.linear: dict[Precision, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        for precision in Precision:
            idx = [
                i for i, r in enumerate(self.rows) if r.op in LINEAR_OPS and r.dtype is precision
            ]
            if not idx:
                continue
            if not gpu.supports(precision):
                raise BadInputError(
                    f"{self.rows[idx[0]].describe()}: {gpu.name} has no {precision} tensor cores"
                )
            shapes = [_linear_shape(self.rows[i].op, self.rows[i].config) for i in idx]
            pad = FP8_TOKEN_PADDING if precision is Precision.FP8 else 1
            tokens = [math.ceil(self.rows[i].tokens / pad) * pad for i in idx]
            self.linear[precision] = (
                np.array(idx),
                np.array(tokens, dtype=np.float64),
                np.array([k for k, _ in shapes], dtype=np.float64),
                np.array([n for _, n in shapes], dtype=np.float64),
            )
        pre = [i for i, r in enumerate(self.rows) if r.op == "attn_prefill"]
        self.prefill_idx = np.array(pre, dtype=np.intp)
        flops = []
        for i in pre:
            r, c = self.rows[i], self.rows[i].config
            keys = max(r.context, r.tokens)  # L = keys attended, the chunk included
            pairs = r.tokens * (keys - r.tokens) + r.tokens * r.tokens / 2
            flops.append(attention_flops_per_pair(c.num_q_heads, c.head_dim) * pairs)
        self.prefill_flops = np.array(flops, dtype=np.float64)
        dec = [i for i, r in enumerate(self.rows) if r.op == "attn_decode"]
        self.decode_idx = np.array(dec, dtype=np.intp)
        self.decode_bytes = np.array(
            [
                self.rows[i].batch
                * self.rows[i].context
                * 2
                * self.rows[i].config.num_kv_heads
                * self.rows[i].config.head_dim
                * self.rows[i].dtype.bytes_per_element
                for i in dec
            ],
            dtype=np.float64,
        )
        self.decode_units = np.array(
            [self.rows[i].batch * self.rows[i].config.num_kv_heads for i in dec],
            dtype=np.float64,
        )

    def predict(self, coef: StepTimeCoefficients) -> np.ndarray:
        gpu = self.gpu
        out = np.empty(len(self.rows))
        for precision, (idx, tokens, k, n) in self.linear.items():
            out[idx] = coef.linear_launch_s + linear_gpu_time(tokens, k, n, precision, gpu, coef)
        out[self.prefill_idx] = coef.attn_prefill_launch_s + self.prefill_flops / (
            gpu.bf16_flops * coef.attn_prefill_flops_fraction
        )
        fraction = np.minimum(
            coef.attn_decode_bw_fraction, self.decode_units * coef.attn_decode_unit_bw_fraction
        )
        out[self.decode_idx] = coef.attn_decode_launch_s + self.decode_bytes / (
            gpu.memory_bandwidth * fraction
        )
        return out

    def active_parameters(self) -> tuple[str, ...]:
        names: list[str] = []
        if self.linear:
            names += ["linear_launch_s", "linear_sharpness"]
        for precision in self.linear:
            names += [f"linear_{precision}_bw_fraction", f"linear_{precision}_flops_fraction"]
        if len(self.prefill_idx):
            names += ["attn_prefill_launch_s", "attn_prefill_flops_fraction"]
        if len(self.decode_idx):
            names += ["attn_decode_launch_s", "attn_decode_bw_fraction"]
            # The per-unit limit only shows where few (sequence, KV head) units run at once.
            if self.decode_units.min() * START_COEFFICIENTS.attn_decode_unit_bw_fraction < 0.5:
                names.append("attn_decode_unit_bw_fraction")
        return tuple(names)


# --- the fit --------------------------------------------------------------------------------


def _family_fits(rows: Sequence[OpTiming], predicted: np.ndarray) -> list[FamilyFit]:
    by_family: dict[str, list[tuple[float, OpTiming]]] = {}
    for row, pred in zip(rows, predicted, strict=True):
        by_family.setdefault(row.family, []).append((abs(float(pred) / row.seconds - 1.0), row))
    fits = []
    for family, items in by_family.items():
        errors = [e for e, _ in items]
        worst, worst_row = max(items, key=lambda item: item[0])
        fits.append(
            FamilyFit(family, len(items), float(np.median(errors)), worst, worst_row.describe())
        )
    return fits


def _step_shape(row: OpTiming) -> StepShape:
    return StepShape(
        num_decode=row.batch,
        decode_context_sum=row.batch * row.context,
        prefill_tokens=row.tokens,
        prefill_attention=row.tokens * row.tokens / 2.0,
        num_prefill_seqs=1 if row.tokens else 0,
    )


def _predict_steps(
    rows: Sequence[OpTiming], gpu: GpuSpec, coef: StepTimeCoefficients
) -> np.ndarray:
    """vLLM engine steps (``step`` rows in the operator format): the product's own model."""
    predictors: dict[tuple[str, Precision], RooflinePredictor] = {}
    out = []
    for row in rows:
        key = (row.config.name, row.dtype)
        if key not in predictors:
            profile = ModelProfile(row.config, row.dtype, Precision.BF16, 1)
            predictors[key] = RooflinePredictor(profile, gpu, coef, table_tokens=1)
        out.append(predictors[key].step_time_s(_step_shape(row)))
    return np.array(out)


def _step_family(name: str, fits: Sequence[StepFit]) -> FamilyFit:
    worst = max(fits, key=lambda f: abs(f.error))
    return FamilyFit(
        name,
        len(fits),
        float(np.median([abs(f.error) for f in fits])),
        abs(worst.error),
        f"line {worst.row.line}: {worst.row.describe()}",
    )


def fit_coefficients(
    rows: Sequence[OpTiming],
    gpu: GpuSpec,
    source: str = "",
    base: StepTimeCoefficients | None = None,
    whole_steps: Sequence[WholeStep] = (),
    held_out: str = "auto",
    step_sources: Sequence[str] = (),
) -> CalibrationResult:
    """Fit every coefficient the rows can tell; keep the others from ``base`` (the shipped fit).

    Operator rows first (stage 1), then whole steps (stage 2) on top of the stage-1 values, then
    ``step`` rows measured on vLLM refit the engine's synchronisation on top of both."""
    base = base if base is not None else default_coefficients()
    model = _OperatorModel(rows, gpu)
    names = model.active_parameters()
    start = replace(base, **{n: getattr(START_COEFFICIENTS, n) for n in names})
    log_measured = np.log(model.measured) if model.rows else np.zeros(0)

    def coefficients_at(x: np.ndarray) -> StepTimeCoefficients:
        return replace(start, **{n: from_free(n, v) for n, v in zip(names, x, strict=True)})

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(model.predict(coefficients_at(x))) - log_measured

    x0 = np.array([to_free(n, getattr(start, n)) for n in names])
    coef = coefficients_at(levenberg_marquardt(residuals, x0)) if names else start
    fitted = list(names)

    copies = [r for r in rows if r.op == "copy"]
    copy_bandwidth = None
    if copies:
        copy_bandwidth = float(np.median([COPY_BYTES / r.seconds for r in copies]))
        coef = replace(coef, elementwise_bw_fraction=copy_bandwidth / gpu.memory_bandwidth)
        fitted.append("elementwise_bw_fraction")
    gemms = [r for r in rows if r.op == "gemm8192"]
    gemm_flops = None
    if gemms:
        gemm_flops = float(np.median([2.0 * GEMM_CEILING_SIZE**3 / r.seconds for r in gemms]))

    families = _family_fits(model.rows, model.predict(coef)) if model.rows else []
    step_fits: tuple[StepFit, ...] = ()
    if whole_steps:
        mask = held_out_mask(whole_steps, held_out)
        coef, step_names, step_fits = fit_whole_steps(whole_steps, gpu, coef, mask)
        fitted += step_names
        families.append(_step_family("steps/fitted", [f for f in step_fits if not f.held_out]))
        if any(mask):
            families.append(_step_family("steps/held_out", [f for f in step_fits if f.held_out]))
    steps = [r for r in rows if r.op == STEP_OP]
    if steps:
        if any(not gpu.supports(r.dtype) for r in steps):
            raise BadInputError(f"step rows use fp8 but {gpu.name} has no fp8 tensor cores")
        measured = np.array([r.seconds for r in steps])
        without = _predict_steps(steps, gpu, replace(coef, engine_sync_s=0.0))
        coef = replace(coef, engine_sync_s=max(0.0, float(np.median(measured - without))))
        fitted.append("engine_sync_s")
        families += _family_fits(steps, _predict_steps(steps, gpu, coef))
    return CalibrationResult(
        coefficients=coef,
        families=tuple(families),
        gpu=gpu,
        source=source,
        rows=len(rows),
        fitted=tuple(fitted),
        copy_bandwidth=copy_bandwidth,
        gemm_flops=gemm_flops,
        steps=step_fits,
        step_sources=tuple(step_sources),
    )


def calibrate(
    ops_csv_path: str | Path,
    gpu: str | GpuSpec = "h200",
    base: StepTimeCoefficients | None = None,
    steps_csv: str | Path | None = None,
    held_out: str = "auto",
) -> CalibrationResult:
    """Fit the step-time coefficients to timings measured on ``gpu``: operator rows from
    ``ops_csv_path`` and, when given, whole steps from ``steps_csv``. ``ops_csv_path`` may
    itself be a whole-step CSV (recognised by its columns): the operator values then stay
    those of ``base``."""
    return calibrate_files(
        [ops_csv_path] + ([steps_csv] if steps_csv is not None else []), gpu, base, held_out
    )


def calibrate_files(
    paths: Sequence[str | Path],
    gpu: str | GpuSpec = "h200",
    base: StepTimeCoefficients | None = None,
    held_out: str = "auto",
) -> CalibrationResult:
    """Calibrate on any mix of operator and whole-step CSVs (at most one of each)."""
    if held_out not in HELD_OUT_RULES:
        raise BadInputError(f"unknown held-out rule {held_out!r} (expected auto or none)")
    if not paths:
        raise BadInputError("give at least one calibration CSV")
    ops_paths = [p for p in paths if not is_step_csv(p)]
    step_paths = [p for p in paths if p not in ops_paths]
    if len(ops_paths) > 1 or len(step_paths) > 1:
        raise BadInputError("give at most one operator CSV and one whole-step CSV")
    ops = read_op_timings(ops_paths[0]) if ops_paths else ()
    whole = read_step_timings(step_paths[0]) if step_paths else ()
    source = str(ops_paths[0]) if ops_paths else str(step_paths[0])
    return fit_coefficients(
        ops, get_gpu(gpu), source, base, whole, held_out, [str(p) for p in step_paths]
    )


def predict_op_s(
    row: OpTiming, gpu: str | GpuSpec, coefficients: StepTimeCoefficients | None = None
) -> float:
    """The operator model's time for one row (what the fit compares with the measurement)."""
    coef = coefficients if coefficients is not None else default_coefficients()
    g = get_gpu(gpu)
    if row.op == STEP_OP:
        return float(_predict_steps([row], g, coef)[0])
    if row.op in CEILING_OPS:
        raise BadInputError(f"{row.op} rows are ceilings, not modelled operators")
    return float(_OperatorModel([row], g).predict(coef)[0])


# --- report and CLI helper ------------------------------------------------------------------


def step_table(result: CalibrationResult) -> list[str]:
    """Per whole-step row: measured, predicted, signed error, fitted or held out; medians."""
    if not result.steps:
        return []
    lines = [
        f"{'whole step':<48}{'measured':>10}{'predicted':>11}{'error':>8}  set",
    ]
    for s in result.steps:
        lines.append(
            f"{s.row.describe():<48}{s.row.seconds * 1e3:>7.3f} ms{s.predicted_s * 1e3:>8.3f} ms"
            f"{s.error:>+8.1%}  {'held out' if s.held_out else 'fitted'}"
        )
    for label, held in (("fitted", False), ("held-out", True)):
        errors = result.step_errors(held)
        if errors:
            lines.append(
                f"whole steps, {label}: {len(errors)} rows, median |error| "
                f"{float(np.median(errors)):.1%}, worst {max(errors):.1%}"
            )
    return lines


def format_report(result: CalibrationResult) -> str:
    gpu, c = result.gpu, result.coefficients
    if result.rows:
        what = f"{result.source}: {result.rows} rows"
    else:
        what = f"{result.source}: whole steps only (operator coefficients kept)"
    lines = [
        f"Calibrated on {what}, as {gpu.name} "
        f"({gpu.memory_bandwidth / 1e12:.2f} TB/s, {gpu.bf16_flops / 1e12:,.0f} bf16"
        + (f" / {gpu.fp8_flops / 1e12:,.0f} fp8" if gpu.fp8_flops else "")
        + " dense TFLOP/s)",
        "",
        f"{'family':<15}{'rows':>5}{'median':>9}{'worst':>9}  worst row",
    ]
    for f in result.families:
        lines.append(
            f"{f.family:<15}{f.rows:>5}{f.median_rel_error:>9.1%}{f.worst_rel_error:>9.1%}"
            f"  {f.worst_row}"
        )
    lines.append("")
    if result.steps:
        lines += [*step_table(result), ""]
    if result.copy_bandwidth:
        lines.append(
            f"ceiling: copy {result.copy_bandwidth / 1e12:.2f} TB/s "
            f"({result.copy_bandwidth / gpu.memory_bandwidth:.0%} of peak bandwidth)"
        )
    if result.gemm_flops:
        lines.append(
            f"ceiling: gemm8192 {result.gemm_flops / 1e12:,.0f} TFLOP/s "
            f"({result.gemm_flops / gpu.bf16_flops:.0%} of bf16 peak)"
        )
    lines += [
        f"linear bf16: {c.linear_bf16_bw_fraction:.1%} of peak bandwidth, "
        f"{c.linear_bf16_flops_fraction:.1%} of peak FLOP/s; fp8: {c.linear_fp8_bw_fraction:.1%}, "
        f"{c.linear_fp8_flops_fraction:.1%}; roofline sharpness {c.linear_sharpness:.1f}; "
        f"launch {c.linear_launch_s * 1e6:.1f} µs",
        f"attention: prefill {c.attn_prefill_flops_fraction:.1%} of bf16 peak (launch "
        f"{c.attn_prefill_launch_s * 1e6:.1f} µs); decode {c.attn_decode_bw_fraction:.1%} of "
        f"peak bandwidth (launch {c.attn_decode_launch_s * 1e6:.1f} µs; without split-KV one "
        f"(sequence, KV head) reaches {c.attn_decode_unit_bw_fraction:.2%})",
        f"elementwise: {c.elementwise_bw_fraction:.1%} of peak bandwidth",
        f"in a whole step: linear layers at {c.step_linear_flops_scale:.1%} of their isolated "
        f"FLOP/s (bf16 {c.linear_bf16_flops_fraction * c.step_linear_flops_scale:.1%} of peak), "
        f"decode attention at {c.attn_decode_bw_fraction * c.step_attn_decode_bw_scale:.1%} of "
        f"peak bandwidth; {c.graph_kernel_gap_s * 1e6:.2f} µs GPU gap per kernel; eager launch "
        f"{c.step_launch_s * 1e6:.2f} µs per kernel (smooth max, sharpness "
        f"{c.launch_sharpness:.1f})",
        f"engine CPU per step: {c.engine_step_cpu_s * 1e6:.0f} µs + {c.engine_seq_cpu_s * 1e6:.1f}"
        f" µs per sequence (beside the forward pass with async scheduling), "
        f"{c.engine_sync_s * 1e6:.0f} µs on the critical path; tensor-parallel all-reduce "
        "from published tables per interconnect (models/data/allreduce.yaml), not fitted here",
    ]
    kept = [f.name for f in fields(StepTimeCoefficients) if f.name not in result.fitted]
    if kept:
        lines.append(f"not fitted by these rows (kept): {', '.join(kept)}")
    high = [
        n
        for n in result.fitted
        if n.endswith("_fraction") and getattr(c, n) > 1.0 and n != "attn_decode_unit_bw_fraction"
    ]
    if high:
        lines.append(
            f"warning: {', '.join(high)} above 100% of {gpu.name}'s peak — were these rows "
            "measured on another GPU? (pass the right --gpu)"
        )
    return "\n".join(lines)


def calibrate_command(
    csv_paths: str | Sequence[str],
    output: str | None = None,
    gpu: str = "h200",
    held_out: str = "auto",
) -> str:
    """Text for ``inferledger calibrate``: refit from operator and/or whole-step CSVs, report,
    optionally write the JSON."""
    paths = [csv_paths] if isinstance(csv_paths, str) else list(csv_paths)
    result = calibrate_files(paths, gpu, held_out=held_out)
    text = format_report(result)
    if output:
        try:
            result.save(output)
        except OSError as exc:
            raise BadInputError(f"cannot write {output}: {exc.strerror or exc}") from None
        return f"{text}\nwrote coefficients to {output}"
    return f"{text}\n(pass an output path to save these coefficients)"
