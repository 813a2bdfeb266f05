"""Fitting the step-time coefficients to operator timings, and the calibration CSV's validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields, replace
from importlib import resources
from pathlib import Path

import pytest

from inferledger.core.errors import BadInputError
from models.calibration import (
    START_COEFFICIENTS,
    CalibrationResult,
    calibrate,
    calibrate_command,
    predict_op_s,
    read_op_timings,
)
from models.execution_time import StepShape
from models.steptime import (
    StepTimeCoefficients,
    build_predictor,
    default_coefficients,
    load_coefficients,
)

OPS_CSV = Path(str(resources.files("models").joinpath("data", "h200-llama-ops.csv")))
HEADER = "op,model,dtype,T,B,L,ms,tflops,tbps"
FAMILIES = [
    f"{op}/{dtype}"
    for op in ("qkv", "o", "gate_up", "down", "lm_head")
    for dtype in ("bf16", "fp8")
] + ["attn_prefill", "attn_decode"]


# The fit is deterministic on one machine, but numpy's vectorised log and exp take a different
# code path (AVX-512, AVX2, baseline) on another CPU and differ in the last bits; the
# Levenberg-Marquardt fit carries that to ~1e-8 relative in its coefficients (issue #17). A
# refit is compared with the shipped numbers to 1e-6: far below anything the fit can tell
# (its median errors are ~5 %), far above what a CPU changes.
REL = 1e-6
# The shipped report's errors are rounded to 4 decimals: a CPU's last bits may round one the
# other way.
ROUNDED = 1.5e-4


@pytest.fixture(scope="module")
def fit() -> CalibrationResult:
    return calibrate(OPS_CSV, "h200")


def assert_same_fit(got: StepTimeCoefficients, want: StepTimeCoefficients) -> None:
    for f in fields(StepTimeCoefficients):
        assert getattr(got, f.name) == pytest.approx(getattr(want, f.name), rel=REL), f.name


def assert_same_errors(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for family, numbers in want.items():
        assert got[family]["rows"] == numbers["rows"], family
        for key in ("median_rel_error", "worst_rel_error"):
            assert got[family][key] == pytest.approx(numbers[key], abs=ROUNDED), (family, key)


def write(tmp_path: Path, text: str, name: str = "ops.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, "utf-8")
    return path


def test_shipped_csv_is_the_reference_measurement() -> None:
    reference = Path(__file__).resolve().parents[2] / "shared/reference/h200-llama-ops.csv"
    if not reference.exists():
        pytest.skip("shared/reference is not beside this checkout")
    assert OPS_CSV.read_bytes() == reference.read_bytes()


def test_fit_reproduces_every_operator_family(fit: CalibrationResult) -> None:
    """Median relative error under 10 % in every family. The CSV's own repeatability sets that
    bound: rows of one shape a few tokens apart differ by 5-15 % where nothing should change
    (o 8B bf16 runs 34 µs at T=1 and 30 µs at T=64), so a tighter median would be noise-fitting.
    Worst rows stay under 35 % (the worst is a 70B decode row 66 % slower than the same 8B one)."""
    assert [f.family for f in fit.families] == FAMILIES
    for family in fit.families:
        assert family.median_rel_error < 0.10, family
        assert family.worst_rel_error < 0.35, family
    assert sum(f.rows for f in fit.families) == 304
    assert fit.rows == 306


def test_fitted_fractions_are_physical(fit: CalibrationResult) -> None:
    c = fit.coefficients
    for name in (
        "linear_bf16_bw_fraction",
        "linear_fp8_bw_fraction",
        "linear_bf16_flops_fraction",
        "linear_fp8_flops_fraction",
        "attn_prefill_flops_fraction",
        "attn_decode_bw_fraction",
        "elementwise_bw_fraction",
    ):
        assert 0.4 < getattr(c, name) < 1.0, name
    # The 8192³ GEMM ceiling (768 TFLOP/s) bounds what the linear layers reach in bf16.
    assert fit.gemm_flops == pytest.approx(767.8e12, rel=1e-3)
    assert c.linear_bf16_flops_fraction * 989e12 <= fit.gemm_flops * 1.02
    assert c.elementwise_bw_fraction == pytest.approx(4.16955 / 4.8, rel=1e-4)  # the copy row
    assert 10e-6 < c.linear_launch_s < 40e-6  # the ~30 µs small-T floor


def test_shipped_coefficients_are_this_fit(fit: CalibrationResult) -> None:
    """models/data/steptime_coefficients.json must be regenerated when the model changes."""
    assert_same_fit(default_coefficients(), fit.coefficients)
    doc = json.loads(
        resources.files("models").joinpath("data", "steptime_coefficients.json").read_text()
    )
    assert_same_errors(doc["fit"], fit.fit_errors())


def test_round_trip_fit_save_load_predict(fit: CalibrationResult, tmp_path: Path) -> None:
    path = tmp_path / "coefficients.json"
    fit.save(path)
    loaded = load_coefficients(path)
    assert loaded == fit.coefficients
    shapes = [StepShape(1, 1000), StepShape(64, 64_000, 512, 131_072.0, 1), StepShape(0, 0, 8192)]
    before = build_predictor("llama-3.1-70b", "h100", "fp8", 2, coefficients=fit.coefficients)
    after = build_predictor("llama-3.1-70b", "h100", "fp8", 2, coefficients=loaded)
    assert [before.step_time_s(s) for s in shapes] == [after.step_time_s(s) for s in shapes]


def test_operator_model_matches_rows(fit: CalibrationResult) -> None:
    rows = read_op_timings(OPS_CSV)
    decode = next(r for r in rows if r.op == "attn_decode" and r.batch == 64 and r.context == 8192)
    assert predict_op_s(decode, "h200", fit.coefficients) == pytest.approx(decode.seconds, rel=0.05)
    gemv = next(r for r in rows if r.op == "lm_head" and r.tokens == 1 and r.dtype == "bf16")
    assert predict_op_s(gemv, "h200", fit.coefficients) == pytest.approx(gemv.seconds, rel=0.1)


def test_step_rows_refit_the_fixed_overhead(tmp_path: Path) -> None:
    """Whole-step measurements (e.g. TPOT from vllm bench) set the per-step overhead."""
    truth = replace(default_coefficients(), step_overhead_s=0.8e-3)
    predictor = build_predictor("llama-3.1-8b", "h200", coefficients=truth)
    lines = []
    for batch, context, prefill in ((1, 1000, 0), (32, 2000, 0), (128, 500, 0), (16, 1000, 256)):
        s = StepShape(batch, batch * context, prefill, prefill * prefill / 2, 1 if prefill else 0)
        ms = predictor.step_time_s(s) * 1e3
        lines.append(f"step,llama-3.1-8b,bf16,{prefill},{batch},{context},{ms!r},0,0")
    text = OPS_CSV.read_text() + "\n".join(lines) + "\n"
    result = calibrate(write(tmp_path, text), "h200")
    assert result.coefficients.step_overhead_s == pytest.approx(0.8e-3, rel=1e-6)
    assert "step_overhead_s" in result.fitted
    assert result.family("step").worst_rel_error < 1e-6
    # Whole-step timings alone (what most users can measure) refit just the overhead.
    only_steps = calibrate(write(tmp_path, "\n".join([HEADER, *lines]) + "\n", "steps.csv"))
    assert only_steps.fitted == ("step_overhead_s",)
    assert only_steps.coefficients == replace(
        truth, step_overhead_s=only_steps.coefficients.step_overhead_s
    )
    assert only_steps.coefficients.step_overhead_s == pytest.approx(0.8e-3, rel=1e-9)


def test_partial_csv_fits_only_what_it_measures(tmp_path: Path) -> None:
    decode_rows = [
        line for line in OPS_CSV.read_text().splitlines() if line.startswith("attn_decode,")
    ]
    result = calibrate(write(tmp_path, "\n".join([HEADER, *decode_rows]) + "\n"), "h200")
    assert set(result.fitted) == {
        "attn_decode_launch_s",
        "attn_decode_bw_fraction",
        "attn_decode_unit_bw_fraction",
    }
    shipped = default_coefficients()
    assert result.coefficients.linear_bf16_bw_fraction == shipped.linear_bf16_bw_fraction
    assert result.coefficients.attn_decode_bw_fraction == pytest.approx(
        shipped.attn_decode_bw_fraction, rel=0.02
    )


def test_fit_is_deterministic_and_independent_of_the_base(fit: CalibrationResult) -> None:
    # Exact on purpose: the same fit on the same CPU must give the same bits.
    again = calibrate(OPS_CSV, "h200", base=START_COEFFICIENTS)
    assert again.coefficients == fit.coefficients


def test_calibrate_command_reports_and_writes(tmp_path: Path) -> None:
    out = tmp_path / "fit.json"
    text = calibrate_command(str(OPS_CSV), str(out))
    assert text.splitlines()[0].startswith(f"Calibrated on {OPS_CSV}: 306 rows, as H200")
    for family in FAMILIES:
        assert f"\n{family} " in text
    assert "ceiling: copy 4.17 TB/s" in text
    assert text.endswith(f"wrote coefficients to {out}")
    assert_same_fit(load_coefficients(out), default_coefficients())
    assert "pass an output path" in calibrate_command(str(OPS_CSV), None)


# numpy's names for the AVX-512 code paths (2.x, then 1.x); unknown names are ignored.
NO_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR AVX512_SKX AVX512F"


def test_a_cpu_without_avx512_reproduces_the_shipped_fit(tmp_path: Path) -> None:
    """`inferledger calibrate` as on another CPU: numpy told not to use AVX-512 (where this one
    has it) refits the shipped coefficients to within REL, not to the bit."""
    out = tmp_path / "fit.json"
    code = (
        "import sys; from models.calibration import calibrate_command; "
        "print(calibrate_command(sys.argv[1], sys.argv[2]))"
    )
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": NO_AVX512}
    run = subprocess.run(
        [sys.executable, "-c", code, str(OPS_CSV), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert_same_fit(load_coefficients(out), default_coefficients())
    assert_same_errors(json.loads(out.read_text())["fit"], calibrate(OPS_CSV).fit_errors())


def test_rows_from_another_gpu_are_flagged(tmp_path: Path) -> None:
    """bf16 rows measured on an H200 but declared as A100: fractions above 100 % of its peak."""
    bf16 = [line for line in OPS_CSV.read_text().splitlines() if ",bf16," in line]
    text = calibrate_command(str(write(tmp_path, "\n".join([HEADER, *bf16]) + "\n")), None, "a100")
    assert "warning: " in text and "above 100% of A100-80GB's peak" in text


# --- bad input: each gives its exact one-line error -----------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "{path}: the file is empty"),
        (
            "op,model,dtype,T,L,tflops\n",
            "{path}: missing column(s) B, ms (expected op, model, dtype, T, B, L, ms)",
        ),
        (
            f"{HEADER}\nqkv,llama3.1-8b,bf16,1,0,0,fast,0,0\n",
            "{path} line 2: column ms is not a number: 'fast'",
        ),
        (
            f"{HEADER}\nqkv,llama3.1-8b,bf16,1,0,0,0.03,0,0\nqkv,llama3.1-8b,bf16,x,0,0,0.03,0,0\n",
            "{path} line 3: column T is not a number: 'x'",
        ),
        (
            f"{HEADER}\nqkv,llama3.1-8b,bf16,1.5,0,0,0.03,0,0\n",
            "{path} line 2: column T must be a whole number >= 0, got '1.5'",
        ),
        (
            f"{HEADER}\nqkv,llama3.1-8b,bf16,1,0,0,0,0,0\n",
            "{path} line 2: column ms must be a positive number, got '0'",
        ),
        (
            f"{HEADER}\n",
            "{path}: no usable rows (need operator timings with op in "
            "qkv, o, gate_up, down, lm_head, attn_prefill, attn_decode, or step rows)",
        ),
        (
            f"{HEADER}\ncopy,-,bf16,0,0,0,0.51504,0,4.16955\n",
            "{path}: no usable rows (need operator timings with op in "
            "qkv, o, gate_up, down, lm_head, attn_prefill, attn_decode, or step rows)",
        ),
        (
            f"{HEADER}\nrmsnorm,llama3.1-8b,bf16,1,0,0,0.01,0,0\n",
            "{path} line 2: unknown op 'rmsnorm' (expected one of qkv, o, gate_up, down, "
            "lm_head, attn_prefill, attn_decode, copy, gemm8192, step)",
        ),
        (
            f"{HEADER}\nqkv,gpt-5,bf16,1,0,0,0.03,0,0\n",
            "{path} line 2: unknown model 'gpt-5' (known: Llama-3.1-8B, Llama-3.1-70B)",
        ),
        (
            f"{HEADER}\nqkv,llama3.1-8b,int8,1,0,0,0.03,0,0\n",
            "unknown dtype 'int8' (expected bf16 or fp8)",
        ),
        (
            f"{HEADER}\nattn_decode,llama3.1-8b,bf16,1,0,512,0.03,0,0\n",
            "{path} line 2: attn_decode needs B >= 1 and L >= 1",
        ),
    ],
)
def test_bad_csv_inputs(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(BadInputError) as error:
        calibrate(path)
    assert str(error.value) == message.format(path=path)
    assert "\n" not in str(error.value)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    with pytest.raises(BadInputError) as error:
        calibrate_command(str(path), None)
    assert str(error.value) == f"calibration CSV not found: {path}"


def test_fp8_rows_on_a_gpu_without_fp8(tmp_path: Path) -> None:
    path = write(tmp_path, f"{HEADER}\nqkv,llama3.1-8b,fp8,16,0,0,0.03,0,0\n")
    with pytest.raises(BadInputError, match="A100-80GB has no fp8 tensor cores"):
        calibrate(path, "a100")


def test_bad_coefficients_file(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="not valid JSON"):
        load_coefficients(write(tmp_path, "{", "c.json"))
    doc = json.loads(
        resources.files("models").joinpath("data", "steptime_coefficients.json").read_text()
    )
    del doc["coefficients"]["linear_sharpness"]
    with pytest.raises(BadInputError, match="missing coefficient"):
        load_coefficients(write(tmp_path, json.dumps(doc), "c.json"))
    doc["coefficients"]["linear_sharpness"] = -1
    with pytest.raises(BadInputError, match="linear_sharpness must be finite and >= 0"):
        load_coefficients(write(tmp_path, json.dumps(doc), "c.json"))
