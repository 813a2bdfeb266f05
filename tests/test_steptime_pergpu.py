"""Per-GPU step-model terms: coefficient ladder, all-reduce tables, fp8-KV dequantisation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import models
from inferledger.core.errors import BadInputError
from models.allreduce import PROVENANCES, default_allreduce, load_allreduce
from models.execution_time import StepShape
from models.gpu_catalog import (
    COEFFICIENT_FAMILIES,
    Precision,
    default_gpu_catalog,
    get_gpu,
    load_gpu_catalog,
)
from models.step_calibration import held_out_mask, predict_whole_steps, read_step_timings
from models.step_coefficients import (
    coefficients_from_json,
    coefficients_to_json,
    default_coefficients,
)
from models.steptime import build_predictor, prefill_shape, steptime_command
from models.steptime_terms import (
    fp8_kv_dequant_s_per_element,
    kv_fp8_ops_per_element,
    ladder_coefficients,
)


def decode(batch: int, context: int) -> StepShape:
    return prefill_shape(0, 1, 0, batch, context)


# --- the ladder ------------------------------------------------------------------------------


def test_every_shipped_gpu_states_each_family_with_a_provenance() -> None:
    for gpu in default_gpu_catalog().gpus:
        stated = {r.family for r in gpu.ladder}
        assert stated == set(COEFFICIENT_FAMILIES), gpu.name
        for rung in gpu.ladder:
            assert rung.provenance in PROVENANCES
            assert rung.source
            if rung.provenance == "extrapolated":
                assert rung.scale == 1.0
    assert {r.provenance for r in get_gpu("h200").ladder} == {"measured"}
    assert get_gpu("a100").rung("linear_compute").provenance == "published"
    assert get_gpu("l40s").rung("linear_compute").provenance == "extrapolated"


def test_ladder_scales_the_h200_fractions_by_published_ratios() -> None:
    base = default_coefficients()
    assert ladder_coefficients(base, get_gpu("h200")) is base
    a100 = ladder_coefficients(base, get_gpu("a100"))
    assert a100.linear_bf16_flops_fraction == pytest.approx(base.linear_bf16_flops_fraction * 1.082)
    assert a100.linear_bf16_bw_fraction == base.linear_bf16_bw_fraction  # extrapolated: scale 1
    h100 = ladder_coefficients(base, get_gpu("h100"))
    assert h100.linear_bf16_flops_fraction == base.linear_bf16_flops_fraction
    assert h100.linear_fp8_flops_fraction == pytest.approx(base.linear_fp8_flops_fraction * 0.965)
    b200 = ladder_coefficients(base, get_gpu("b200"))
    assert b200.linear_fp8_flops_fraction == pytest.approx(base.linear_fp8_flops_fraction * 1.039)
    assert b200.linear_bf16_flops_fraction == pytest.approx(base.linear_bf16_flops_fraction * 0.966)


def test_h200_predictions_are_the_fitted_model_unchanged() -> None:
    """The H200 is the measured rung: the ladder is the identity there, so the whole-step fit
    (and its held-out error) cannot move."""
    shipped = build_predictor("llama-3.1-8b", "h200", "bf16")
    explicit = build_predictor("llama-3.1-8b", "h200", "bf16", coefficients=default_coefficients())
    assert shipped.ladder_applied and not explicit.ladder_applied
    for s in (
        decode(1, 128),
        decode(64, 2000),
        prefill_shape(4096),
        prefill_shape(512, 2, 0, 8, 900),
    ):
        assert shipped.step_time_s(s) == pytest.approx(explicit.step_time_s(s), rel=1e-12)


def test_h200_whole_step_held_out_error_is_unchanged() -> None:
    """Whole steps held out of the fit: same predictions with the ladder-carried coefficients,
    and the shipped fit's held-out error stays under issue #11's 5 %."""
    rows = read_step_timings(Path(models.__file__).parent / "data" / "h200-llama-steps.csv")
    held = held_out_mask(rows)
    base = default_coefficients()
    laddered = ladder_coefficients(base, get_gpu("h200"))
    a = predict_whole_steps(rows, "h200", base)
    b = predict_whole_steps(rows, "h200", laddered)
    assert b == pytest.approx(a, rel=1e-12)
    errors = [abs(p / r.seconds - 1) for p, r, h in zip(b, rows, held, strict=True) if h]
    assert len(errors) == 4 and float(np.median(errors)) < 0.05


def test_given_coefficients_are_not_rescaled() -> None:
    coef = default_coefficients()
    a100 = build_predictor("llama-3.1-8b", "a100", "bf16", coefficients=coef)
    assert a100.coefficients is coef
    assert build_predictor("llama-3.1-8b", "a100", "bf16").coefficients != coef


def _catalog_with(tmp_path: Path, extra: str, allreduce: str = "allreduce: nvlink4") -> Path:
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "gpus:\n  - name: X1\n    memory_gb: 80\n    memory_bandwidth_tb_s: 3\n"
        "    bf16_dense_tflops: 900\n    fp8_dense_tflops: null\n    interconnect: nvlink\n"
        f"    interconnect_bandwidth_gb_s: 900\n    tdp_w: 700\n    {allreduce}\n{extra}",
        "utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("    coefficients: {gemm: {provenance: published}}\n", "unknown family"),
        (
            "    coefficients: {linear_compute: {provenance: guessed}}\n",
            "provenance must be one of",
        ),
        (
            "    coefficients: {linear_compute: {provenance: published, scale: 1.1}}\n",
            "needs a source",
        ),
        (
            "    coefficients: {memory_bandwidth: {provenance: extrapolated, scale: 0.9}}\n",
            "keeps scale 1",
        ),
        (
            "    coefficients:\n"
            "      memory_bandwidth: {provenance: published, fp8_scale: 2, source: s}\n",
            "linear_compute only",
        ),
        (
            "    coefficients: {linear_compute: {provenance: published, scale: -1, source: s}}\n",
            "positive",
        ),
        ("    coefficients: [linear_compute]\n", "must map a family"),
    ],
)
def test_a_bad_ladder_entry_gives_one_clear_error(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(BadInputError, match=message) as err:
        load_gpu_catalog(_catalog_with(tmp_path, extra))
    assert "X1" in str(err.value)


def test_allreduce_generation_must_be_known(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="not a generation"):
        load_gpu_catalog(_catalog_with(tmp_path, "", "allreduce: nvlink9"))
    with pytest.raises(BadInputError, match="missing field allreduce"):
        load_gpu_catalog(_catalog_with(tmp_path, "", "aliases: []"))
    legacy = load_gpu_catalog(_catalog_with(tmp_path, "", "allreduce_latency_us: 6")).get("x1")
    model = legacy.allreduce_model()
    assert model.small_provenance == "assumed"
    assert float(model.latency_s(8192.0, 2)) == pytest.approx(6e-6 + 8191 / 315e9)
    assert legacy.rung("linear_compute").provenance == "extrapolated"  # no ladder stated


# --- all-reduce ------------------------------------------------------------------------------


def test_allreduce_matches_the_published_table_points() -> None:
    nvlink4 = default_allreduce()["nvlink4"]
    published = {  # sglang PR #2904, H100 custom all-reduce, µs
        2: {4096: 3.9, 32768: 4.5, 262144: 7.9, 1048576: 19.9},
        4: {4096: 3.7, 32768: 4.8, 262144: 13.9, 1048576: 31.1},
        8: {4096: 5.7, 32768: 7.8, 262144: 16.7, 1048576: 33.8},
    }
    for tp, points in published.items():
        sizes = np.array(list(points), dtype=np.float64)
        got = nvlink4.latency_s(sizes, tp) * 1e6
        assert got == pytest.approx(list(points.values()), rel=0.01)
    # Beyond the table: NCCL's 370 GB/s bus bandwidth on the extra bytes.
    big = 64 * 2**20
    expected = 31.1e-6 + 1.5 * (big - 2**20) / 370e9
    assert float(nvlink4.latency_s(float(big), 4)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("generation", ["nvlink3", "nvlink4", "nvlink5", "pcie4"])
@pytest.mark.parametrize("tp", [2, 3, 4, 6, 8, 16])
def test_allreduce_is_monotone_in_size(generation: str, tp: int) -> None:
    model = default_allreduce()[generation]
    sizes = np.geomspace(1024, 512 * 2**20, 200)
    t = model.latency_s(sizes, tp)
    assert np.all(np.diff(t) >= 0) and np.all(t > 0)
    assert float(model.latency_s(0.0, tp)) == 0.0
    assert float(model.latency_s(4096.0, 1)) == 0.0


def test_allreduce_generations_order_by_link_speed() -> None:
    ar = default_allreduce()
    for size in (256 * 1024.0, 8 * 2**20, 128 * 2**20):
        a100, h100, b200 = (
            float(ar[g].latency_s(size, 8)) for g in ("nvlink3", "nvlink4", "nvlink5")
        )
        assert a100 > h100 > b200
    assert ar["nvlink4"].provenance == {
        "small_messages": "published",
        "large_messages": "published",
    }
    assert ar["nvlink3"].small_provenance == "extrapolated"
    assert ar["pcie4"].large_provenance == "assumed"


def test_tp_step_uses_the_interconnect_table() -> None:
    p = build_predictor("llama-3.1-70b", "h100", "bf16", 4)
    s = decode(8, 1000)
    per_call = float(default_allreduce()["nvlink4"].latency_s(8 * 8192 * 2.0, 4))
    assert p.breakdown(s).allreduce_s == pytest.approx(2 * 80 * per_call, rel=1e-9)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "generations: {g: {points: {2: [[10, 5], [5, 6]]}, large_bus_bandwidth_gb_s: 1, "
            "small_provenance: published, large_provenance: published}}",
            "sizes must increase",
        ),
        (
            "generations: {g: {points: {2: [[10, 5], [20, 4]]}, large_bus_bandwidth_gb_s: 1, "
            "small_provenance: published, large_provenance: published}}",
            "must not fall",
        ),
        (
            "generations: {g: {points: {1: [[10, 5]]}, large_bus_bandwidth_gb_s: 1, "
            "small_provenance: published, large_provenance: published}}",
            "integer >= 2",
        ),
        (
            "generations: {g: {derived_from: h, link_ratio: 2, large_bus_bandwidth_gb_s: 1, "
            "small_provenance: published, large_provenance: published}}",
            "not a generation",
        ),
        (
            "generations: {g: {points: {2: [[10, 5]]}, large_bus_bandwidth_gb_s: 1, "
            "small_provenance: rumoured, large_provenance: published}}",
            "small_provenance",
        ),
    ],
)
def test_a_bad_allreduce_table_gives_one_clear_error(
    tmp_path: Path, body: str, message: str
) -> None:
    path = tmp_path / "ar.yaml"
    path.write_text(body, "utf-8")
    with pytest.raises(BadInputError, match=message):
        load_allreduce(path)


# --- fp8 KV ----------------------------------------------------------------------------------


def test_fp8_kv_dequant_is_derived_from_the_published_rows() -> None:
    # flashinfer #1753 on H20 (44 TFLOPS FP32): (0.437 - 0.339/2) ms and (0.760 - 0.633/2) ms
    # over 128 x L x 16 x 128 x 2 elements.
    rows = [(1024, 0.339, 0.437), (2048, 0.633, 0.760)]
    ops = [(f - b / 2) * 1e-3 * 44e12 / (128 * n * 16 * 128 * 2) for n, b, f in rows]
    assert kv_fp8_ops_per_element() == pytest.approx(sum(ops) / 2, rel=1e-9)
    assert 15 < kv_fp8_ops_per_element() < 25


def test_fp8_kv_cost_applies_only_with_an_fp8_cache() -> None:
    h100 = get_gpu("h100")
    assert fp8_kv_dequant_s_per_element(h100, Precision.BF16) == 0.0
    assert fp8_kv_dequant_s_per_element(h100, Precision.FP8) > 0.0
    s = decode(32, 4000)
    bf16 = build_predictor("llama-3.1-8b", "h100", "bf16")
    fp8w_bf16kv = build_predictor("llama-3.1-8b", "h100", "fp8")  # fp8 weights, bf16 cache
    fp8kv = build_predictor("llama-3.1-8b", "h100", "bf16", kv_dtype="fp8")
    assert fp8w_bf16kv.breakdown(s).decode_attention_s == pytest.approx(
        bf16.breakdown(s).decode_attention_s, rel=1e-12
    )
    assert bf16.breakdown(s).decode_attention_s / 2 < fp8kv.breakdown(s).decode_attention_s
    assert fp8kv.breakdown(s).decode_attention_s < bf16.breakdown(s).decode_attention_s
    # Linear layers and prefill attention do not see the cache dtype.
    assert fp8kv.breakdown(s).linear_s == pytest.approx(bf16.breakdown(s).linear_s)
    p = prefill_shape(2048)
    assert fp8kv.breakdown(p).prefill_attention_s == pytest.approx(
        bf16.breakdown(p).prefill_attention_s
    )


# --- exposure --------------------------------------------------------------------------------


def test_steptime_json_exposes_the_provenance() -> None:
    doc = json.loads(steptime_command("llama-3.1-70b", "a100", "bf16", 8, 1000, tp=4, as_json=True))
    prov = doc["provenance"]
    assert prov["gpu"] == "A100-80GB" and prov["ladder_applied"] is True
    fam = prov["families"]
    assert fam["linear_compute"]["provenance"] == "published"
    assert fam["linear_compute"]["scale"] == pytest.approx(1.082)
    assert fam["memory_bandwidth"]["provenance"] == "extrapolated"
    assert fam["allreduce"]["generation"] == "nvlink3"
    assert fam["allreduce"]["small_messages"] == "extrapolated"
    assert fam["engine_cpu"]["provenance"] == "assumed"
    assert "fp8_kv_dequant" not in fam
    single = json.loads(
        steptime_command("llama-3.1-8b", "h100", "bf16", 8, 1000, kv_dtype="fp8", as_json=True)
    )
    assert single["provenance"]["families"]["allreduce"] == {"provenance": "not used (TP 1)"}
    assert single["provenance"]["families"]["fp8_kv_dequant"]["provenance"] == "published"


def test_steptime_text_names_each_familys_provenance() -> None:
    text = steptime_command("llama-3.1-70b", "b200", "fp8", 8, 1000, tp=2, kv_dtype="fp8")
    line = next(x for x in text.splitlines() if x.startswith("coefficients: "))
    assert "linear_compute published" in line and "memory_bandwidth extrapolated" in line
    assert "allreduce nvlink5: small messages extrapolated, large extrapolated" in line
    assert "fp8_kv_dequant published" in line and "engine_cpu assumed" in line


def test_a_coefficients_file_with_the_retired_allreduce_fraction_still_loads():
    doc = json.loads(coefficients_to_json(default_coefficients()))
    doc["coefficients"]["allreduce_bw_fraction"] = 0.7  # as files written before 2026-12 carry
    assert coefficients_from_json(json.dumps(doc)) == default_coefficients()
    doc["coefficients"]["no_such_coefficient"] = 1.0
    with pytest.raises(BadInputError, match=r"unknown coefficient.*no_such_coefficient"):
        coefficients_from_json(json.dumps(doc))
