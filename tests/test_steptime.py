"""Model and GPU profiles, KV capacity and the roofline step-time model.

The worked numbers come from shared/reference/capacity-formulas.md (§3.3 memory, §3.4 floors).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferledger.cli import main as cli_main
from inferledger.core.errors import BadInputError
from models.execution_time import ExecutionTimePredictor, StepShape
from models.gpu_catalog import (
    Interconnect,
    Precision,
    UnsupportedPrecisionError,
    default_gpu_catalog,
    get_gpu,
)
from models.model_catalog import (
    GIB,
    DoesNotFitError,
    ModelProfile,
    get_model,
    make_profile,
    num_gpu_blocks,
)
from models.step_coefficients import coefficients_from_json, default_coefficients
from models.steptime import (
    ExecutionMode,
    RooflinePredictor,
    StepScope,
    build_predictor,
    prefill_shape,
    steptime_command,
)

GB = 1e9


def shape(
    decode: int = 0, context: int = 0, prefill: int = 0, seqs: int | None = None
) -> StepShape:
    """``decode`` sequences at ``context`` tokens each plus one fresh prompt of ``prefill``."""
    return StepShape(
        num_decode=decode,
        decode_context_sum=decode * context,
        prefill_tokens=prefill,
        prefill_attention=prefill * prefill / 2.0,
        num_prefill_seqs=(1 if prefill else 0) if seqs is None else seqs,
    )


@pytest.fixture(scope="module")
def h200_8b() -> RooflinePredictor:
    return build_predictor("llama-3.1-8b", "h200", "bf16", 1)


# --- model shapes and memory (§3.2, §3.3) ----------------------------------------------------


def test_params_match_the_worked_numbers() -> None:
    small, large = get_model("llama-3.1-8b"), get_model("llama-3.1-70b")
    assert round(small.params / 1e9, 2) == 8.03
    assert round(large.params / 1e9, 2) == 70.55
    # §3.2 quotes 7.51 B and 69.50 B matmul params; the formula gives 7.505 B and 69.502 B.
    assert small.matmul_params / 1e9 == pytest.approx(7.51, rel=2e-3)
    assert large.matmul_params / 1e9 == pytest.approx(69.50, rel=2e-3)


@pytest.mark.parametrize(
    ("model", "dtype", "gb"),
    [
        ("llama-3.1-8b", "bf16", 16.1),
        ("llama-3.1-8b", "fp8", 8.0),
        ("llama-3.1-70b", "bf16", 141.1),
        ("llama-3.1-70b", "fp8", 70.6),
    ],
)
def test_weight_memory(model: str, dtype: str, gb: float) -> None:
    assert make_profile(model, dtype).weight_bytes / GB == pytest.approx(gb, abs=0.05)


def test_weight_memory_in_gib() -> None:
    assert make_profile("llama-3.1-8b").weight_bytes / GIB == pytest.approx(15.0, abs=0.05)
    assert make_profile("llama-3.1-70b").weight_bytes / GIB == pytest.approx(131.4, abs=0.05)


def test_kv_bytes_per_token() -> None:
    assert make_profile("llama-3.1-8b").kv_bytes_per_token == 131_072  # 128 KiB
    assert make_profile("llama-3.1-70b").kv_bytes_per_token == 327_680  # 320 KiB
    assert make_profile("llama-3.1-8b", kv_dtype="fp8").kv_bytes_per_token == 64 * 1024
    assert make_profile("llama-3.1-70b", kv_dtype="fp8").kv_bytes_per_token == 160 * 1024
    assert make_profile("llama-3.1-8b").kv_bytes_per_token * 8192 == 1 * GIB
    assert make_profile("llama-3.1-70b").kv_bytes_per_token * 8192 == 2.5 * GIB
    assert make_profile("llama-3.1-8b").kv_bytes_per_token * 128 * 1024 == 16 * GIB
    assert make_profile("llama-3.1-70b").kv_bytes_per_token * 128 * 1024 == 40 * GIB


def test_kv_precision_is_independent_of_weight_precision() -> None:
    assert make_profile("llama-3.1-70b", "fp8").kv_dtype is Precision.BF16  # vLLM's "auto"
    fp8_both = make_profile("llama-3.1-70b", "fp8", kv_dtype="fp8")
    assert fp8_both.kv_dtype is Precision.FP8
    assert make_profile("llama-3.1-70b", "bf16", kv_dtype="fp8").weight_dtype is Precision.BF16


def test_tensor_parallel_splits_kv_and_weights_per_gpu() -> None:
    tp2 = make_profile("llama-3.1-70b", tp=2)
    assert tp2.kv_bytes_per_token_per_gpu == 327_680 // 2
    assert tp2.weight_bytes_per_gpu == tp2.weight_bytes / 2
    # More GPUs than KV heads: each GPU keeps a replica of one KV head.
    tp16 = make_profile("llama-3.1-70b", tp=16)
    assert tp16.kv_heads_per_gpu == 1
    assert tp16.kv_bytes_per_token_per_gpu == 2 * 80 * 1 * 128 * 2


def test_tensor_parallel_degree_must_divide_heads() -> None:
    with pytest.raises(BadInputError, match="tensor-parallel degree 3 must divide"):
        make_profile("llama-3.1-8b", tp=3)
    with pytest.raises(BadInputError, match="positive integer"):
        make_profile("llama-3.1-8b", tp=0)


# --- KV capacity (§3.3 table) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "gpu", "dtype", "kv", "tp", "overhead", "tokens"),
    [
        # The table subtracts no overhead except in its last row ("after ~2 GB overhead").
        ("llama-3.1-8b", "H100", "bf16", None, 1, 0, 427_000),
        ("llama-3.1-8b", "H200", "bf16", None, 1, 0, 846_000),
        ("llama-3.1-8b", "L40S", "bf16", None, 1, 0, 207_000),
        ("llama-3.1-70b", "H100", "bf16", None, 2, 0, 9_000),
        ("llama-3.1-70b", "H200", "fp8", "bf16", 1, 2e9, 166_000),
        ("llama-3.1-70b", "H200", "fp8", "fp8", 1, 2e9, 332_000),
    ],
)
def test_kv_token_capacity_table(
    model: str, gpu: str, dtype: str, kv: str | None, tp: int, overhead: float, tokens: int
) -> None:
    blocks = num_gpu_blocks(model, gpu, dtype, tp, overhead_bytes=overhead, kv_dtype=kv)
    assert blocks * 16 == pytest.approx(tokens, rel=0.03)


def test_num_gpu_blocks_defaults_are_vllm_defaults() -> None:
    # 0.9 × 141 GB − 16.06 GB − 2 GiB, over 16 tokens × 128 KiB.
    expected = math.floor((0.9 * 141e9 - 8_030_261_248 * 2 - 2 * GIB) / (16 * 131_072))
    assert num_gpu_blocks("llama-3.1-8b", "h200") == expected
    assert build_predictor("llama-3.1-8b", "h200").num_gpu_blocks() == expected
    assert num_gpu_blocks("llama-3.1-8b", "h200", block_size=32) == expected // 2


def test_weights_that_do_not_fit_raise_a_clear_error() -> None:
    with pytest.raises(DoesNotFitError, match=r"does not fit on H200: weights need 141\.1 GB"):
        num_gpu_blocks("llama-3.1-70b", "h200", "bf16", 1)
    # 70B bf16 on 2×H100 leaves ~1.5 GB per GPU: gone once the default 2 GiB overhead is taken.
    with pytest.raises(DoesNotFitError, match="larger tensor-parallel degree"):
        num_gpu_blocks("llama-3.1-70b", "h100", "bf16", 2)
    assert num_gpu_blocks("llama-3.1-70b", "h100", "bf16", 4) > 0


def test_capacity_rejects_bad_settings() -> None:
    with pytest.raises(BadInputError, match="gpu_memory_utilization"):
        num_gpu_blocks("llama-3.1-8b", "h200", gpu_memory_utilization=1.5)
    with pytest.raises(BadInputError, match="block_size"):
        num_gpu_blocks("llama-3.1-8b", "h200", block_size=0)


# --- catalogs --------------------------------------------------------------------------------


def test_gpu_catalog_holds_dense_datasheet_figures_with_sources() -> None:
    catalog = default_gpu_catalog()
    assert catalog.names == ("A100-40GB", "A100-80GB", "H100-SXM", "H200", "L40S", "B200")
    h100, l40s, a100 = get_gpu("h100"), get_gpu("l40s"), get_gpu("a100")
    assert (h100.bf16_flops, h100.fp8_flops) == (989e12, 1979e12)  # dense, not 1,979 / 3,958
    assert (l40s.bf16_flops, l40s.fp8_flops) == (362e12, 733e12)
    assert a100.fp8_flops is None
    assert get_gpu("B200").memory_bytes == 180e9
    assert l40s.interconnect is Interconnect.PCIE
    assert get_gpu("h200").memory_bandwidth == 4.8e12
    assert all(g.sources and g.tdp_w > 0 for g in catalog.gpus)


@pytest.mark.parametrize("name", ["H200", "h200", "h200-141gb", "NVIDIA H200", "h200_sxm"])
def test_gpu_aliases(name: str) -> None:
    assert get_gpu(name).name == "H200"


@pytest.mark.parametrize(
    "name",
    [
        "llama-3.1-8b",
        "Llama-3.1-8B",
        "llama3.1-8b",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
    ],
)
def test_model_aliases(name: str) -> None:
    assert get_model(name).name == "Llama-3.1-8B"


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(BadInputError) as gpu_error:
        get_gpu("tpu-v5")
    assert str(gpu_error.value) == (
        "unknown GPU 'tpu-v5' (known: A100-40GB, A100-80GB, H100-SXM, H200, L40S, B200)"
    )
    with pytest.raises(BadInputError) as model_error:
        get_model("mistral-7b")
    assert str(model_error.value) == (
        "unknown model 'mistral-7b' (known: Llama-3.1-8B, Llama-3.1-70B)"
    )
    with pytest.raises(BadInputError, match="unknown weight dtype 'int4'"):
        make_profile("llama-3.1-8b", "int4")


def test_fp8_on_a100_is_a_clear_error() -> None:
    with pytest.raises(UnsupportedPrecisionError, match="A100-80GB has no fp8"):
        build_predictor("llama-3.1-8b", "a100", "fp8")
    with pytest.raises(UnsupportedPrecisionError, match="KV cache fp8"):
        build_predictor("llama-3.1-8b", "a100", "bf16", kv_dtype="fp8")
    with pytest.raises(UnsupportedPrecisionError):
        num_gpu_blocks("llama-3.1-8b", "a100", "fp8")


# --- roofline floors (§3.4) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "gpu", "dtype", "tp", "floor_ms"),
    [
        ("llama-3.1-8b", "a100", "bf16", 1, 7.9),
        ("llama-3.1-8b", "h100", "bf16", 1, 4.8),
        ("llama-3.1-8b", "h100", "fp8", 1, 2.4),
        ("llama-3.1-8b", "h200", "bf16", 1, 3.35),
        ("llama-3.1-8b", "l40s", "bf16", 1, 18.6),
        ("llama-3.1-8b", "l40s", "fp8", 1, 9.3),
        ("llama-3.1-8b", "b200", "fp8", 1, 1.0),
        ("llama-3.1-70b", "h100", "bf16", 4, 10.5),
        ("llama-3.1-70b", "h100", "fp8", 2, 10.5),
        ("llama-3.1-70b", "h200", "fp8", 1, 14.7),
        ("llama-3.1-70b", "b200", "fp8", 1, 8.8),
    ],
)
def test_decode_floor_matches_the_worked_numbers(
    model: str, gpu: str, dtype: str, tp: int, floor_ms: float
) -> None:
    predictor = build_predictor(model, gpu, dtype, tp)
    assert predictor.weight_read_floor_s * 1e3 == pytest.approx(floor_ms, rel=0.03)
    # The calibrated step can never beat the roofline floor by more than the embedding table
    # (which a step does not read) — in practice it is well above it.
    assert predictor.step_time_s(shape(decode=1, context=1)) > 0.9 * predictor.weight_read_floor_s


@pytest.mark.parametrize(("context", "gflop_8b", "gflop_70b"), [(1000, 0.52, 2.6), (8000, 4.2, 21)])
def test_attention_flops_per_token(context: int, gflop_8b: float, gflop_70b: float) -> None:
    assert get_model("llama-3.1-8b").attention_flops_per_token(context) / 1e9 == pytest.approx(
        gflop_8b, rel=0.02
    )
    assert get_model("llama-3.1-70b").attention_flops_per_token(context) / 1e9 == pytest.approx(
        gflop_70b, rel=0.02
    )
    assert get_model("llama-3.1-8b").linear_flops_per_token / 1e9 == pytest.approx(15.0, rel=0.01)
    assert get_model("llama-3.1-70b").linear_flops_per_token / 1e9 == pytest.approx(139.0, rel=0.01)


# --- the calibrated model --------------------------------------------------------------------


def test_predictor_satisfies_the_interface(h200_8b: RooflinePredictor) -> None:
    predictor: ExecutionTimePredictor = h200_8b
    assert predictor.step_time_s(StepShape()) == 0.0


def test_batch_one_decode_on_h200(h200_8b: RooflinePredictor) -> None:
    """3.35 ms floor; measured vLLM decode runs at 55-75 % of the bandwidth roofline (§3.2)."""
    step = h200_8b.step_time_s(shape(decode=1, context=1024))
    assert 4e-3 <= step <= 6e-3
    assert 0.55 <= h200_8b.weight_read_floor_s / step <= 0.8


def test_large_prefill_is_compute_bound(h200_8b: RooflinePredictor) -> None:
    """Prefill runs at 40-45 % of dense peak end to end on Hopper (§3.2 rule of thumb) or a bit
    better: the operator timings reach 75 % on the GEMMs alone."""
    tokens = 8192
    step = h200_8b.step_time_s(shape(prefill=tokens))
    flops = 2 * get_model("llama-3.1-8b").matmul_params * tokens
    mfu = flops / step / get_gpu("h200").bf16_flops
    assert 0.4 <= mfu <= 0.75
    assert h200_8b.mode(shape(prefill=tokens)) is ExecutionMode.EAGER


def test_breakdown_adds_up_to_step_time(h200_8b: RooflinePredictor) -> None:
    small_table = RooflinePredictor(h200_8b.profile, h200_8b.gpu, table_tokens=64)
    for s in (shape(1, 100), shape(64, 3000, 512), shape(600, 500), shape(0, 0, 8000)):
        for predictor in (h200_8b, small_table):
            b = predictor.breakdown(s)
            assert b.total_s == pytest.approx(predictor.step_time_s(s), rel=1e-12)


def test_tables_and_direct_computation_agree(h200_8b: RooflinePredictor) -> None:
    small_table = RooflinePredictor(h200_8b.profile, h200_8b.gpu, table_tokens=8)
    for s in (shape(4, 10), shape(16, 10), shape(300, 2000, 700, seqs=3)):
        assert small_table.step_time_s(s) == pytest.approx(h200_8b.step_time_s(s), rel=1e-12)


def test_cuda_graph_decode_pays_no_eager_launches(h200_8b: RooflinePredictor) -> None:
    graph = h200_8b.breakdown(shape(decode=8, context=100))
    assert graph.mode is ExecutionMode.FULL_GRAPH and graph.cpu_launch_s == 0.0
    assert graph.gpu_s == graph.gpu_work_s
    eager = RooflinePredictor(h200_8b.profile, h200_8b.gpu, cudagraph_max_tokens=0)
    launched = eager.breakdown(shape(decode=8, context=100))
    assert launched.mode is ExecutionMode.EAGER
    # The whole steps measured eager 9 % slower than the graph at 8 sequences, 0.5 % at 256:
    # launches (~15 µs a kernel) nearly match the GPU work of a small step and partly show.
    ratio = eager.step_time_s(shape(8, 1024)) / h200_8b.step_time_s(shape(8, 1024))
    assert 1.03 < ratio < 1.2
    assert launched.launch_exposed_s > 0
    big = eager.breakdown(shape(256, 1024))
    assert big.launch_exposed_s < 0.01 * big.gpu_work_s


def test_fp8_weights_halve_weight_reads() -> None:
    bf16 = build_predictor("llama-3.1-8b", "h200", "bf16")
    fp8 = build_predictor("llama-3.1-8b", "h200", "fp8")
    assert fp8.profile.matmul_weight_bytes_per_gpu == bf16.profile.matmul_weight_bytes_per_gpu / 2
    assert fp8.weight_read_floor_s == pytest.approx(bf16.weight_read_floor_s / 2)
    ratio = fp8.breakdown(shape(1, 100)).linear_s / bf16.breakdown(shape(1, 100)).linear_s
    # Half the bytes, read at the fitted fp8 rather than bf16 fraction of bandwidth.
    coef = default_coefficients()
    assert ratio == pytest.approx(
        0.5 * coef.linear_bf16_bw_fraction / coef.linear_fp8_bw_fraction, rel=0.02
    )
    # Compute-bound prefill gains from fp8's doubled peak too.
    assert fp8.step_time_s(shape(prefill=8192)) < 0.7 * bf16.step_time_s(shape(prefill=8192))


def test_fp8_kv_cache_halves_kv_bytes_and_adds_dequantisation() -> None:
    """Half the KV bytes, plus ~20 FP32 ops per KV element at the GPU's FP32 rate
    (models/data/kv_fp8.yaml, from flashinfer issue #1753)."""
    s = shape(64, 8000)
    for gpu in ("h100", "h200"):
        bf16 = build_predictor("llama-3.1-8b", gpu, "bf16")
        fp8_kv = build_predictor("llama-3.1-8b", gpu, "bf16", kv_dtype="fp8")
        elements = 64 * 8000 * 32 * 2 * 8 * 128  # sequences x context x layers x K,V x heads x dim
        dequant = elements * 20.05 / get_gpu(gpu).fp32_flops
        assert fp8_kv.breakdown(s).decode_attention_s == pytest.approx(
            bf16.breakdown(s).decode_attention_s / 2 + dequant, rel=1e-3
        )


def test_tensor_parallelism_splits_work_and_adds_all_reduce() -> None:
    tp2 = build_predictor("llama-3.1-70b", "h100", "fp8", 2)
    tp4 = build_predictor("llama-3.1-70b", "h100", "fp8", 4)
    decode, prefill = shape(32, 2000), shape(prefill=4096)
    assert tp4.breakdown(decode).linear_s == pytest.approx(tp2.breakdown(decode).linear_s / 2, 0.05)
    assert tp4.breakdown(prefill).linear_s == pytest.approx(
        tp2.breakdown(prefill).linear_s / 2, 0.05
    )
    assert tp4.breakdown(decode).decode_attention_s == pytest.approx(
        tp2.breakdown(decode).decode_attention_s / 2
    )
    assert tp4.breakdown(prefill).allreduce_s > tp2.breakdown(prefill).allreduce_s > 0
    single = build_predictor("llama-3.1-70b", "h200", "fp8", 1)
    assert single.breakdown(prefill).allreduce_s == 0.0
    assert tp4.step_time_s(prefill) < tp2.step_time_s(prefill)


def test_other_gpus_scale_with_their_peaks() -> None:
    """H200 fractions applied to other GPUs' peaks: a decode step follows memory bandwidth."""
    h100 = build_predictor("llama-3.1-8b", "h100").step_time_s(shape(1, 100))
    b200 = build_predictor("llama-3.1-8b", "b200").step_time_s(shape(1, 100))
    l40s = build_predictor("llama-3.1-8b", "l40s").step_time_s(shape(1, 100))
    assert b200 < h100 < l40s
    assert l40s / h100 == pytest.approx(3.35 / 0.864, rel=0.2)


# --- monotonicity and fast-forward -----------------------------------------------------------

counts = st.integers(min_value=0, max_value=20_000)


@settings(max_examples=300, deadline=None)
@given(
    decode=st.integers(0, 1500),
    mean_context=st.integers(0, 40_000),
    prefill=counts,
    extra_context=st.integers(0, 100_000),
    extra_decode_context=st.integers(0, 40_000),
    extra_prefill=st.integers(0, 3000),
    extra_pairs=st.floats(0, 1e8),
)
def test_more_work_never_makes_a_step_faster(
    h200_8b: RooflinePredictor,
    decode: int,
    mean_context: int,
    prefill: int,
    extra_context: int,
    extra_decode_context: int,
    extra_prefill: int,
    extra_pairs: float,
) -> None:
    base = shape(decode, mean_context, prefill)
    t = h200_8b.step_time_s(base)
    grown = [
        replace(base, decode_context_sum=base.decode_context_sum + extra_context),
        replace(
            base,
            num_decode=decode + 1,
            decode_context_sum=base.decode_context_sum + extra_decode_context,
        ),
        replace(
            base,
            prefill_tokens=prefill + extra_prefill,
            num_prefill_seqs=max(base.num_prefill_seqs, 1 if extra_prefill else 0),
        ),
        replace(base, prefill_attention=base.prefill_attention + extra_pairs),
        replace(base, num_prefill_seqs=base.num_prefill_seqs + 1),
    ]
    for other in grown:
        assert h200_8b.step_time_s(other) >= t


def test_monotone_across_execution_modes(h200_8b: RooflinePredictor) -> None:
    for tokens in (511, 512, 513, 16383, 16384, 16385, 16386):
        assert h200_8b.step_time_s(shape(tokens + 1, 100)) >= h200_8b.step_time_s(
            shape(tokens, 100)
        )
        assert h200_8b.step_time_s(shape(0, 0, tokens + 1)) >= h200_8b.step_time_s(
            shape(0, 0, tokens)
        )


def _summed(predictor: RooflinePredictor, first: StepShape, steps: int) -> float:
    total, s = [], first
    for _ in range(steps):
        total.append(predictor.step_time_s(s))
        s = replace(s, decode_context_sum=s.decode_context_sum + s.num_decode)
    return math.fsum(total)


@settings(max_examples=60, deadline=None)
@given(decode=st.integers(1, 2000), context=st.integers(0, 50_000), steps=st.integers(0, 400))
def test_decode_fast_forward_equals_summed_steps(
    h200_8b: RooflinePredictor, decode: int, context: int, steps: int
) -> None:
    first = shape(decode, context)
    expected = _summed(h200_8b, first, steps)
    assert h200_8b.decode_steps_time_s(first, steps) == pytest.approx(expected, rel=1e-9, abs=0)


def test_decode_fast_forward_across_the_launch_bound() -> None:
    """Eager decode that starts CPU-launch bound and becomes GPU bound as the context grows."""
    slow_launch = replace(default_coefficients(), step_launch_s=100e-6)
    predictor = build_predictor(
        "llama-3.1-8b", "h200", coefficients=slow_launch, cudagraph_max_tokens=0
    )
    first = shape(600, 10)
    assert predictor.breakdown(first).cpu_bound
    last = replace(first, decode_context_sum=first.decode_context_sum + 600 * 2999)
    assert not predictor.breakdown(last).cpu_bound
    expected = _summed(predictor, first, 3000)
    assert predictor.decode_steps_time_s(first, 3000) == pytest.approx(expected, rel=1e-9, abs=0)


def test_decode_fast_forward_is_constant_time(h200_8b: RooflinePredictor) -> None:
    first = shape(256, 1000)
    best = math.inf
    for _ in range(5):  # the best of 5: one descheduling on a busy machine is not the code
        start = time.perf_counter()
        value = h200_8b.decode_steps_time_s(first, 10**9)
        best = min(best, time.perf_counter() - start)
    assert best < 0.01
    assert value > 10**9 * h200_8b.step_time_s(first)


def test_decode_fast_forward_rejects_prefill(h200_8b: RooflinePredictor) -> None:
    assert h200_8b.decode_steps_time_s(shape(4, 10), 0) == 0.0
    with pytest.raises(ValueError, match="pure-decode"):
        h200_8b.decode_steps_time_s(shape(4, 10, prefill=16), 3)


def test_step_time_is_fast(h200_8b: RooflinePredictor) -> None:
    """The simulator prices ~1 M steps per simulated hour: budget 2 µs a call (guard at 5)."""
    shapes = [shape(1 + i % 256, 1000 + i, 512 if i % 4 == 0 else 0) for i in range(1000)]
    f = h200_8b.step_time_s
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        for s in shapes:
            f(s)
        best = min(best, (time.perf_counter() - start) / len(shapes))
    assert best < 5e-6


# --- CLI helper ------------------------------------------------------------------------------


def test_steptime_command_reports_the_breakdown() -> None:
    text = steptime_command("meta-llama/Llama-3.1-8B-Instruct", "h200-141gb", "bf16", 1, 1024)
    predicted = build_predictor("llama-3.1-8b", "h200").step_time_s(shape(1, 1024))
    assert f"predicted engine step time: {predicted * 1e3:.3f} ms" in text
    for term in ("linear layers", "decode attention", "LM head", "all-reduce", "engine CPU"):
        assert term in text
    assert "floor (all weights / peak HBM bandwidth): 3.346 ms" in text
    mixed = steptime_command("llama-3.1-70b", "h100", "fp8", 32, 2000, prefill_tokens=1024, tp=2)
    assert "+ 1,024 prefill tokens" in mixed and "2× H100-SXM" in mixed


def test_steptime_command_errors() -> None:
    with pytest.raises(BadInputError, match="nothing to compute"):
        steptime_command("llama-3.1-8b", "h200", "bf16", 0, 100)
    with pytest.raises(BadInputError, match="batch must be an integer >= 0"):
        steptime_command("llama-3.1-8b", "h200", "bf16", -1, 100)
    with pytest.raises(BadInputError, match="unknown GPU 'h300'"):
        steptime_command("llama-3.1-8b", "h300", "bf16", 1, 100)
    with pytest.raises(BadInputError, match="does not fit on H200"):
        steptime_command("llama-3.1-70b", "h200", "bf16", 1, 100)


# --- forward pass and engine CPU --------------------------------------------------------------


def test_breakdown_separates_forward_pass_and_engine(h200_8b: RooflinePredictor) -> None:
    coef = default_coefficients()
    b = h200_8b.breakdown(shape(64, 2000))
    assert b.total_s == pytest.approx(b.gpu_s + b.engine_s, rel=1e-12)
    assert b.engine_cpu_s == pytest.approx(coef.engine_step_cpu_s + 64 * coef.engine_seq_cpu_s)
    # Async scheduling (vLLM >= 0.14): the engine's CPU runs beside the forward pass; only the
    # synchronisation stays on the critical path.
    assert b.async_scheduling and b.engine_s == pytest.approx(coef.engine_sync_s)
    serial = RooflinePredictor(h200_8b.profile, h200_8b.gpu, async_scheduling=False)
    s = serial.breakdown(shape(64, 2000))
    assert s.gpu_s == pytest.approx(b.gpu_s, rel=1e-12)
    assert s.engine_s == pytest.approx(b.engine_cpu_s + coef.engine_sync_s)
    assert serial.step_time_s(shape(64, 2000)) == pytest.approx(s.total_s, rel=1e-12)


def test_engine_cpu_binds_when_the_forward_pass_is_shorter() -> None:
    """A forward pass shorter than the engine's CPU work waits for it even with async."""
    slow_engine = replace(default_coefficients(), engine_step_cpu_s=20e-3)
    predictor = build_predictor("llama-3.1-8b", "h200", coefficients=slow_engine)
    b = predictor.breakdown(shape(1, 100))
    assert b.gpu_s < 20e-3
    assert b.total_s == pytest.approx(20e-3 + slow_engine.engine_seq_cpu_s + 1e-4, rel=1e-9)
    assert predictor.step_time_s(shape(1, 100)) == pytest.approx(b.total_s, rel=1e-12)


def test_harness_scope_is_the_forward_pass_alone(h200_8b: RooflinePredictor) -> None:
    harness = RooflinePredictor(h200_8b.profile, h200_8b.gpu, scope=StepScope.HARNESS)
    b = harness.breakdown(shape(32, 1024))
    assert b.engine_s == 0.0 and b.engine_cpu_s == 0.0
    assert b.num_kernels == 32 * 11 + 3
    assert harness.step_time_s(shape(32, 1024)) == pytest.approx(b.gpu_s, rel=1e-12)
    # No sampling in the harness: its LM head term is the GEMM alone.
    assert b.lm_head_s < h200_8b.breakdown(shape(32, 1024)).lm_head_s


@pytest.mark.parametrize("async_scheduling", [True, False])
@pytest.mark.parametrize("graph_tokens", [512, 0])
@pytest.mark.parametrize("engine_ms", [0.3, 8.0])
def test_fast_forward_in_every_mode(
    async_scheduling: bool, graph_tokens: int, engine_ms: float
) -> None:
    coef = replace(default_coefficients(), engine_step_cpu_s=engine_ms * 1e-3)
    predictor = build_predictor(
        "llama-3.1-8b",
        "h200",
        coefficients=coef,
        cudagraph_max_tokens=graph_tokens,
        async_scheduling=async_scheduling,
    )
    for first, steps in ((shape(8, 10), 2000), (shape(300, 3000), 50), (shape(1, 0), 1)):
        expected = _summed(predictor, first, steps)
        got = predictor.decode_steps_time_s(first, steps)
        assert got == pytest.approx(expected, rel=1e-9, abs=0)


def test_prefill_shape_splits_prompts_evenly() -> None:
    one = prefill_shape(8192)
    four = prefill_shape(8192, 4)
    assert (one.num_prefill_seqs, four.num_prefill_seqs) == (1, 4)
    assert one.prefill_attention == 8192**2 / 2
    assert four.prefill_attention == 4 * 2048**2 / 2
    uneven = prefill_shape(10, 3, context_before=100)  # 4 + 3 + 3 tokens
    assert uneven.prefill_attention == 4 * (100 + 2) + 2 * 3 * (100 + 1.5)
    mixed = prefill_shape(512, 2, decode=16, decode_context=1000)
    assert (mixed.num_decode, mixed.decode_context_sum, mixed.num_tokens) == (16, 16_000, 528)
    assert prefill_shape(0, 1).num_prefill_seqs == 0
    with pytest.raises(BadInputError, match="between 1 and 3"):
        prefill_shape(3, 4)


def test_steptime_command_prefill_seqs_eager_and_json() -> None:
    args = ("llama-3.1-8b", "h200", "bf16", 0, 0)
    single = json.loads(steptime_command(*args, prefill_tokens=8192, as_json=True))
    split = json.loads(steptime_command(*args, prefill_tokens=8192, prefill_seqs=4, as_json=True))
    assert split["terms_ms"]["prefill_attention"] == pytest.approx(
        single["terms_ms"]["prefill_attention"] / 4
    )
    assert split["prefill_seqs"] == 4 and split["ms"] < single["ms"]
    for doc in (single, split):
        assert doc["ms"] == pytest.approx(doc["gpu_ms"] + doc["engine_ms"])
    graph = json.loads(steptime_command("llama-3.1-8b", "h200", "bf16", 8, 1024, as_json=True))
    eager = json.loads(
        steptime_command("llama-3.1-8b", "h200", "bf16", 8, 1024, enforce_eager=True, as_json=True)
    )
    assert (graph["mode"], eager["mode"]) == ("full CUDA graph", "eager")
    assert graph["terms_ms"]["cpu_launch"] == 0 and eager["terms_ms"]["cpu_launch"] > 4
    assert eager["gpu_ms"] > graph["gpu_ms"]
    text = steptime_command(*args, prefill_tokens=4096, prefill_seqs=2)
    assert "+ 4,096 prefill tokens (2 new prompts)" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prefill_tokens": 100, "prefill_seqs": 0}, "prefill sequences must be an integer >= 1"),
        ({"prefill_tokens": 3, "prefill_seqs": 4}, r"prefill sequences \(4\) must not exceed"),
        ({"prefill_tokens": 0, "prefill_seqs": 2}, r"prefill sequences \(2\) must not exceed"),
    ],
)
def test_steptime_command_rejects_bad_prefill_seqs(kwargs: dict, message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        steptime_command("llama-3.1-8b", "h200", "bf16", 1, 100, **kwargs)


def test_steptime_cli_flags(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["steptime", "--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "8"]
    assert cli_main([*base, "--context", "1024", "--enforce-eager", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "eager" and {"ms", "gpu_ms", "engine_ms"} <= set(doc)
    assert cli_main([*base, "--context", "0", "--prefill-tokens", "10", "--prefill-seqs", "20"])
    assert "must not exceed prefill tokens" in capsys.readouterr().err
    assert cli_main([*base, "--context", "10", "--prefill-tokens", "8", "--prefill-seqs", "-1"])
    assert "prefill sequences must be an integer >= 1" in capsys.readouterr().err


def test_old_coefficient_files_are_refused_with_a_hint() -> None:
    with pytest.raises(
        BadInputError, match=r"format 1 .*regenerate it with `inferledger calibrate`"
    ):
        coefficients_from_json('{"format": 1, "coefficients": {}}', "old.json")
    text = json.dumps({"format": 2, "coefficients": {"launch_sharpness": 0.5}})
    with pytest.raises(BadInputError, match="missing coefficient"):
        coefficients_from_json(text)


def test_profile_is_frozen() -> None:
    profile = ModelProfile(get_model("llama-3.1-8b"))
    with pytest.raises(AttributeError):
        profile.tp = 2  # type: ignore[misc]
