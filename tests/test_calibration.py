"""Fitting the step-time coefficients to operator timings and whole-model steps, and the
calibration CSVs' validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields, replace
from importlib import resources
from pathlib import Path
from statistics import median

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
from models.step_calibration import held_out_mask, predict_whole_steps, read_step_timings
from models.step_coefficients import (
    StepTimeCoefficients,
    default_coefficients,
    load_coefficients,
)
from models.steptime import build_predictor

OPS_CSV = Path(str(resources.files("models").joinpath("data", "h200-llama-ops.csv")))
STEPS_CSV = Path(str(resources.files("models").joinpath("data", "h200-llama-steps.csv")))
HEADER = "op,model,dtype,T,B,L,ms,tflops,tbps"
STEP_HEADER = "step,mode,model,dtype,seqs,tokens_per_seq,context,ms"
FAMILIES = [
    f"{op}/{dtype}"
    for op in ("qkv", "o", "gate_up", "down", "lm_head")
    for dtype in ("bf16", "fp8")
] + ["attn_prefill", "attn_decode"]
STEP_FAMILIES = ["steps/fitted", "steps/held_out"]


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
    """The shipped fit: operator rows, then the whole steps with the default held-out rows."""
    return calibrate(OPS_CSV, "h200", steps_csv=STEPS_CSV)


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


@pytest.mark.parametrize("shipped", [OPS_CSV, STEPS_CSV], ids=["ops", "steps"])
def test_shipped_csv_is_the_reference_measurement(shipped: Path) -> None:
    reference = Path(__file__).resolve().parents[2] / "shared/reference" / shipped.name
    if not reference.exists():
        pytest.skip("shared/reference is not beside this checkout")
    assert shipped.read_bytes() == reference.read_bytes()


def test_fit_reproduces_every_operator_family(fit: CalibrationResult) -> None:
    """Median relative error under 10 % in every family. The CSV's own repeatability sets that
    bound: rows of one shape a few tokens apart differ by 5-15 % where nothing should change
    (o 8B bf16 runs 34 µs at T=1 and 30 µs at T=64), so a tighter median would be noise-fitting.
    Worst rows stay under 35 % (the worst is a 70B decode row 66 % slower than the same 8B one)."""
    assert [f.family for f in fit.families] == FAMILIES + STEP_FAMILIES
    operators = [f for f in fit.families if f.family in FAMILIES]
    for family in operators:
        assert family.median_rel_error < 0.10, family
        assert family.worst_rel_error < 0.35, family
    assert sum(f.rows for f in operators) == 304
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


def test_vllm_step_rows_refit_the_engine_synchronisation(tmp_path: Path) -> None:
    """Whole vLLM engine steps (e.g. TPOT from vllm bench) set the engine's per-step
    synchronisation, on top of the forward pass the other rows calibrate."""
    truth = replace(default_coefficients(), engine_sync_s=0.8e-3)
    predictor = build_predictor("llama-3.1-8b", "h200", coefficients=truth)
    lines = []
    for batch, context, prefill in ((1, 1000, 0), (32, 2000, 0), (128, 500, 0), (16, 1000, 256)):
        s = StepShape(batch, batch * context, prefill, prefill * prefill / 2, 1 if prefill else 0)
        ms = predictor.step_time_s(s) * 1e3
        lines.append(f"step,llama-3.1-8b,bf16,{prefill},{batch},{context},{ms!r},0,0")
    text = OPS_CSV.read_text() + "\n".join(lines) + "\n"
    result = calibrate(write(tmp_path, text), "h200")
    assert result.coefficients.engine_sync_s == pytest.approx(0.8e-3, rel=1e-6)
    assert "engine_sync_s" in result.fitted
    assert result.family("step").worst_rel_error < 1e-6
    # Whole-step timings alone (what most users can measure) refit just the synchronisation.
    only_steps = calibrate(write(tmp_path, "\n".join([HEADER, *lines]) + "\n", "steps.csv"))
    assert only_steps.fitted == ("engine_sync_s",)
    assert only_steps.coefficients == replace(
        truth, engine_sync_s=only_steps.coefficients.engine_sync_s
    )
    assert only_steps.coefficients.engine_sync_s == pytest.approx(0.8e-3, rel=1e-9)


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
    again = calibrate(OPS_CSV, "h200", base=START_COEFFICIENTS, steps_csv=STEPS_CSV)
    assert again.coefficients == fit.coefficients


def test_calibrate_command_reports_and_writes(tmp_path: Path) -> None:
    out = tmp_path / "fit.json"
    text = calibrate_command([str(OPS_CSV), str(STEPS_CSV)], str(out))
    assert text.splitlines()[0].startswith(f"Calibrated on {OPS_CSV}: 306 rows, as H200")
    for family in STEP_FAMILIES:
        assert f"\n{family} " in text
    assert "whole steps, held-out: 4 rows, median |error|" in text
    assert "decode graph 128×ctx 2048" in text and "held out" in text
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
        "print(calibrate_command(sys.argv[1:3], sys.argv[3]))"
    )
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": NO_AVX512}
    run = subprocess.run(
        [sys.executable, "-c", code, str(OPS_CSV), str(STEPS_CSV), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert_same_fit(load_coefficients(out), default_coefficients())
    assert_same_errors(
        json.loads(out.read_text())["fit"], calibrate(OPS_CSV, steps_csv=STEPS_CSV).fit_errors()
    )


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


# --- whole-model steps (stage 2) --------------------------------------------------------------


def test_whole_steps_reach_the_issue_goal(fit: CalibrationResult) -> None:
    """Issue #11: ≤ 5 % median error on whole steps not fitted to. The default held-out rows
    are the longest-context decode steps and the largest prefills (4 of 14)."""
    assert len(fit.steps) == 14
    held = [s for s in fit.steps if s.held_out]
    assert sorted(s.row.line for s in held) == [8, 9, 14, 15]
    fitted_errors, held_errors = fit.step_errors(False), fit.step_errors(True)
    assert median(fitted_errors) < 0.02 and max(fitted_errors) < 0.03
    assert median(held_errors) < 0.05 and max(held_errors) < 0.05
    assert fit.family("steps/held_out").rows == 4


def test_whole_step_coefficients_are_physical(fit: CalibrationResult) -> None:
    c = fit.coefficients
    # Linear layers inside a whole step reach ~61 % of bf16 peak (issue #11), below the ~75 %
    # of the same GEMMs timed alone and the 78 % of the 8192³ ceiling.
    in_step = c.linear_bf16_flops_fraction * c.step_linear_flops_scale
    assert 0.55 < in_step < 0.68
    assert 0.6 < c.attn_decode_bw_fraction * c.step_attn_decode_bw_scale <= 1.0
    assert 1e-6 < c.graph_kernel_gap_s < 10e-6
    # Eager launch per kernel well under the ~26 µs the single-operator harness showed.
    assert 5e-6 < c.step_launch_s < 25e-6 and c.launch_sharpness > 1
    for name in ("step_linear_flops_scale", "graph_kernel_gap_s", "step_launch_s"):
        assert name in fit.fitted


def test_held_out_rows_never_touch_the_fit(tmp_path: Path) -> None:
    """Change the held-out rows' times wildly: the fitted coefficients stay bit for bit."""
    lines = STEPS_CSV.read_text().splitlines()
    for number in (8, 9, 14, 15):  # 1-based line numbers of the held-out rows
        fields_ = lines[number - 1].split(",")
        fields_[-1] = str(float(fields_[-1]) * 3)
        lines[number - 1] = ",".join(fields_)
    changed = calibrate(OPS_CSV, steps_csv=write(tmp_path, "\n".join(lines) + "\n", "s.csv"))
    shipped = calibrate(OPS_CSV, steps_csv=STEPS_CSV)
    assert changed.coefficients == shipped.coefficients
    assert changed.family("steps/held_out").median_rel_error > 0.6  # 1 − 1/3


def test_held_out_rules() -> None:
    rows = read_step_timings(STEPS_CSV)
    auto = held_out_mask(rows, "auto")
    assert [r.describe() for r, h in zip(rows, auto, strict=True) if h] == [
        "Llama-3.1-8B bf16 decode graph 128×ctx 2048",
        "Llama-3.1-8B bf16 decode eager 128×ctx 2048",
        "Llama-3.1-8B bf16 prefill eager 4×2048",
        "Llama-3.1-8B bf16 prefill eager 8×1024",
    ]
    assert not any(held_out_mask(rows, "none"))
    # A file of one context keeps every row: nothing shorter would be left to fit.
    assert not any(held_out_mask([r for r in rows if r.context == 1024], "auto"))
    with pytest.raises(BadInputError, match="unknown held-out rule 'some'"):
        held_out_mask(rows, "some")
    all_fitted = calibrate(OPS_CSV, steps_csv=STEPS_CSV, held_out="none")
    assert all_fitted.family("steps/fitted").rows == 14
    assert median(all_fitted.step_errors(False)) < 0.02


def test_a_whole_step_csv_alone_refits_only_the_step_terms() -> None:
    """The steps file by itself: operator values stay the shipped ones (its base), the step terms
    refit to the shipped values (they were fitted on the same rows on top of the same base)."""
    alone = calibrate(STEPS_CSV, "h200")
    assert alone.rows == 0 and len(alone.steps) == 14
    assert_same_fit(alone.coefficients, default_coefficients())
    text = calibrate_command(str(STEPS_CSV))
    assert "whole steps only (operator coefficients kept)" in text


def test_whole_step_predictions_use_the_harness_scope(fit: CalibrationResult) -> None:
    rows = read_step_timings(STEPS_CSV)
    predicted = predict_whole_steps(rows, "h200", fit.coefficients)
    assert list(predicted) == [s.predicted_s for s in fit.steps]
    # vLLM's own step: rotary, KV writes, sampling and the engine added, norms fused and fewer
    # kernels (326 against the harness's 355) — within a few per cent of the harness.
    vllm = build_predictor("llama-3.1-8b", "h200", coefficients=fit.coefficients)
    for row, harness_s in zip(rows, predicted, strict=True):
        if row.mode == "graph":
            b = vllm.breakdown(row.shape)
            assert b.engine_s > 0 and b.num_kernels == 326
            assert b.total_s == pytest.approx(harness_s, rel=0.05)


def test_shipped_json_lists_every_whole_step(fit: CalibrationResult) -> None:
    doc = json.loads(
        resources.files("models").joinpath("data", "steptime_coefficients.json").read_text()
    )
    assert len(doc["whole_steps"]) == 14
    for row, step in zip(doc["whole_steps"], fit.steps, strict=True):
        assert row["line"] == step.row.line and row["held_out"] == step.held_out
        assert row["predicted_ms"] == pytest.approx(step.predicted_s * 1e3, abs=2e-4)
    assert sum(row["held_out"] for row in doc["whole_steps"]) == 4
    assert "h200-llama-steps.csv (10 of 14 whole steps fitted)" in doc["calibrated_on"]
    assert "step_linear_flops_scale" not in doc["assumed"]
    assert "engine_step_cpu_s" in doc["assumed"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "step,mode,model,dtype,seqs,ms\n",
            "{path}: missing column(s) tokens_per_seq, context (expected step, mode, model, "
            "dtype, seqs, tokens_per_seq, context, ms)",
        ),
        (f"{STEP_HEADER}\n", "{path}: no whole-step rows"),
        (
            f"{STEP_HEADER}\nverify,graph,llama-3.1-8b,bf16,1,1,1024,5.2\n",
            "{path} line 2: unknown step 'verify' (expected decode or prefill)",
        ),
        (
            f"{STEP_HEADER}\ndecode,compiled,llama-3.1-8b,bf16,1,1,1024,5.2\n",
            "{path} line 2: unknown mode 'compiled' (expected graph or eager)",
        ),
        (
            f"{STEP_HEADER}\nprefill,graph,llama-3.1-8b,bf16,1,512,0,14.5\n",
            "{path} line 2: prefill steps are eager (vLLM captures decode batches)",
        ),
        (
            f"{STEP_HEADER}\ndecode,graph,llama-3.1-8b,bf16,1,4,1024,5.2\n",
            "{path} line 2: a decode step has tokens_per_seq 1 and context >= 1",
        ),
        (
            f"{STEP_HEADER}\ndecode,graph,llama-3.1-8b,bf16,0,1,1024,5.2\n",
            "{path} line 2: a step needs seqs >= 1 and tokens_per_seq >= 1",
        ),
        (
            f"{STEP_HEADER}\ndecode,graph,llama-3.1-8b,bf16,1,1,1024,-5\n",
            "{path} line 2: column ms must be a positive number, got '-5'",
        ),
        (
            f"{STEP_HEADER}\ndecode,graph,mixtral,bf16,1,1,1024,5.2\n",
            "{path} line 2: unknown model 'mixtral' (known: Llama-3.1-8B, Llama-3.1-70B)",
        ),
    ],
)
def test_bad_step_csv_inputs(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path, body, "steps.csv")
    with pytest.raises(BadInputError) as error:
        calibrate(OPS_CSV, steps_csv=path)
    assert str(error.value) == message.format(path=path)


def test_step_files_in_the_wrong_combination(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="at most one operator CSV and one whole-step CSV"):
        calibrate_command([str(OPS_CSV), str(OPS_CSV)])
    fp8 = write(tmp_path, f"{STEP_HEADER}\ndecode,graph,llama-3.1-8b,fp8,1,1,1024,3.1\n", "s.csv")
    with pytest.raises(BadInputError, match="A100-80GB has no fp8 tensor cores"):
        calibrate(fp8, "a100")


def test_calibrate_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from inferledger.cli import main

    out = tmp_path / "c.json"
    assert main(["calibrate", str(OPS_CSV), str(STEPS_CSV), "-o", str(out)]) == 0
    assert "whole steps, held-out: 4 rows" in capsys.readouterr().out
    assert_same_fit(load_coefficients(out), default_coefficients())
    assert main(["calibrate", str(STEPS_CSV), "--held-out", "none"]) == 0
    assert "whole steps, fitted: 14 rows" in capsys.readouterr().out
    assert main(["calibrate", str(tmp_path / "missing.csv")]) == 2
    assert "calibration CSV not found" in capsys.readouterr().err
