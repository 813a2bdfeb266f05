"""models/rightsizing.py on hand-computed cases: an idle deployment, a KV-bound one, saturated
ones (waiting, preemptions), one replica, several GPUs per replica, no price, no data, the
inputs it refuses; the compute (step-time) load of a batching pool, and waiting judged at the
scrape resolution. docs/efficiency.md ("Right-sizing") states the method."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from models.rightsizing import (
    LONE_WAIT_S,
    WAITING_THRESHOLD,
    Binding,
    Deployment,
    StepModel,
    Verdict,
    Window,
    compute_replicas,
    compute_utilization,
    is_saturated,
    rightsize,
    rightsize_all,
    window_need,
)

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def window(
    i: int,
    *,
    up: int,
    busy: float,
    kv: float = 0.0,
    waiting: float = 0.0,
    preemptions: float = 0.0,
) -> Window:
    """Window i (5 min) with `up` replicas each covered the whole window; `busy` replicas'
    worth of busy time spread over them."""
    return Window(
        start=T0 + timedelta(minutes=5 * i),
        replicas_up=up,
        busy_replicas=busy,
        kv_replicas=kv,
        waiting=waiting,
        preemptions=preemptions,
        busy_s=busy * 300,
        covered_s=up * 300,
    )


def test_idle_deployment_is_cut_to_its_peak():
    # 4 replicas x 1 GPU at $4/GPU-hour. Window 0: 1.0 busy replica -> 1.0 / 0.8 = 1.25 ->
    # 2 replicas; window 1: 0.4 -> 0.5 -> 1. Peak need 2, so 2 GPUs go: 2 x $4 x 168 h.
    # Idle: 1 - (300 + 120) / (1200 + 1200) = 0.825.
    d = Deployment("chat", 1, 4.0, [window(0, up=4, busy=1.0, kv=0.2), window(1, up=4, busy=0.4)])
    f = rightsize(d)
    assert f.verdict is Verdict.CUT and f.binding is Binding.BUSY
    assert (f.replicas_held, f.peak_need_replicas, f.gpus_to_cut) == (4, 2, 2)
    assert f.peak_start == T0
    assert math.isclose(f.idle_share, 0.825)
    assert math.isclose(f.saving_per_week, 1344.0)
    assert math.isclose(f.covered_hours, 2400 / 3600)
    assert f.message.startswith("chat was 82% idle; 2 fewer GPUs (4 → 2 replicas of 1 GPU)")
    assert "$1,344.00 a week at $4.00/GPU-hour" in f.message


def test_kv_bound_peak_needs_every_replica():
    # busy 0.9 but 2.5 replicas' worth of KV cache: 2.5 / 0.8 = 3.125 -> 4 of 4 held
    d = Deployment("rag", 1, 4.0, [window(0, up=4, busy=0.9, kv=2.5), window(1, up=4, busy=0.1)])
    f = rightsize(d)
    assert f.verdict is Verdict.RIGHT_SIZED and f.binding is Binding.KV
    assert f.peak_need_replicas == 4 and f.gpus_to_cut == 0 and f.saving_per_week == 0
    assert "nothing to cut" in f.message


@pytest.mark.parametrize("extra", [{"waiting": 0.75}, {"preemptions": 3.0}])
def test_saturated_deployment_is_never_cut(extra):
    # mostly idle (0.2 busy replicas of 4), but one window had a request waiting or preempted:
    # that window needed all 4 replicas and more; the finding is "add capacity"
    windows = [
        window(0, up=4, busy=0.2),
        window(1, up=4, busy=0.6, **extra),
        window(2, up=4, busy=0),
    ]
    f = rightsize(Deployment("70b", 1, 4.0, windows))
    assert f.verdict is Verdict.ADD_CAPACITY and f.binding is Binding.SATURATED
    assert f.gpus_to_cut == 0 and f.saving_per_week == 0
    assert f.saturated_windows == 1 and f.first_saturated == T0 + timedelta(minutes=5)
    assert f.peak_need_replicas == 4
    assert "add capacity" in f.message and "1 of 3 windows" in f.message
    assert window_need(windows[1]) == 4


def test_one_replica_is_the_minimum():
    # 0.1 busy -> need ceil(0.125) = 1: one replica cannot be cut
    f = rightsize(Deployment("solo", 1, 4.0, [window(0, up=1, busy=0.1)]))
    assert f.verdict is Verdict.RIGHT_SIZED and f.gpus_to_cut == 0
    assert f.peak_need_replicas == 1 and math.isclose(f.idle_share, 0.9)
    assert "one replica" in f.message


def test_one_replica_running_hot_says_so():
    # 0.95 busy on one replica: 0.95 / 0.8 -> 2 replicas to keep the headroom; none waited
    f = rightsize(Deployment("hot", 1, 4.0, [window(0, up=1, busy=0.95)]))
    assert f.verdict is Verdict.RIGHT_SIZED and f.peak_need_replicas == 2
    assert "ran above the 80% target" in f.message


def test_gpus_per_replica_multiply_the_cut():
    # 6 replicas x 4 GPUs (TP 4), peak 1.6 busy -> 1.6 / 0.8 = 2 exactly -> 2 replicas: 16 GPUs
    f = rightsize(Deployment("70b-tp4", 4, 3.5, [window(0, up=6, busy=1.6)]))
    assert (f.peak_need_replicas, f.gpus_held, f.gpus_to_cut) == (2, 24, 16)
    assert math.isclose(f.saving_per_week, 16 * 3.5 * 168)


def test_exact_multiples_round_down_not_up():
    # 2.4 / 0.8 is 2.9999999999999996 in floating point: 3 replicas, not 4
    assert window_need(window(0, up=5, busy=2.4)) == 3
    assert window_need(window(0, up=5, busy=0)) == 0


def test_no_price_gives_no_saving():
    f = rightsize(Deployment("free", 1, None, [window(0, up=3, busy=0.3)]))
    assert f.verdict is Verdict.CUT and f.gpus_to_cut == 2 and f.saving_per_week is None
    assert "no GPU price" in f.message


def test_no_scraped_time_is_no_finding():
    f = rightsize(Deployment("dark", 1, 4.0, []))
    assert f.verdict is Verdict.NO_DATA and f.idle_share is None and f.gpus_to_cut == 0


def test_headroom_is_a_parameter():
    d = Deployment("chat", 1, 4.0, [window(0, up=4, busy=1.0)])
    assert rightsize(d, target_utilization=1.0).peak_need_replicas == 1
    assert rightsize(d, target_utilization=0.5).peak_need_replicas == 2
    assert rightsize(d, min_replicas=3).peak_need_replicas == 3


def test_rightsize_all_orders_saturated_then_largest_saving():
    saturated = Deployment("a", 1, 4.0, [window(0, up=2, busy=0.1, waiting=1)])
    small = Deployment("b", 1, 4.0, [window(0, up=2, busy=0.1)])
    big = Deployment("c", 2, 4.0, [window(0, up=4, busy=0.1)])
    names = [f.deployment for f in rightsize_all([small, big, saturated])]
    assert names == ["a", "c", "b"]


@pytest.mark.parametrize(
    ("kwargs", "complaint"),
    [
        ({"busy": -0.1}, "busy_replicas must be >= 0"),
        ({"busy": float("nan")}, "busy_replicas must be >= 0"),
        ({"busy": 5.0}, "exceeds covered_s"),
    ],
)
def test_bad_windows_are_refused(kwargs, complaint):
    with pytest.raises(ValueError, match=complaint):
        window(0, up=2, **kwargs)


def test_bad_options_are_refused():
    d = Deployment("chat", 1, 4.0, [window(0, up=2, busy=0.1)])
    with pytest.raises(ValueError, match="target_utilization"):
        rightsize(d, target_utilization=0)
    with pytest.raises(ValueError, match="min_replicas"):
        rightsize(d, min_replicas=0)
    with pytest.raises(ValueError, match="gpus_per_replica"):
        Deployment("chat", 0, 4.0, [])
    with pytest.raises(ValueError, match="price_per_gpu_hour"):
        Deployment("chat", 1, -1.0, [])


def test_share_text_never_rounds_to_a_whole_or_to_nothing():
    from models.rightsizing import share_text

    assert [share_text(v) for v in (0.0, 0.004, 0.5, 0.996, 1.0, None)] == [
        "0%", "<1%", "50%", ">99%", "100%", "?",
    ]  # fmt: skip


def test_a_wait_of_a_scheduler_step_does_not_saturate():
    # a burst caught at a scrape: 0.01 requests waiting on average over the window, no
    # preemption -- an idle pool is still cut, not called saturated
    windows = [window(0, up=4, busy=0.2, waiting=0.01), window(1, up=4, busy=0.3)]
    f = rightsize(Deployment("pool", 1, 4.0, windows))
    assert f.verdict is Verdict.CUT and f.saturated_windows == 0
    assert window_need(windows[0]) == 1
    # at the threshold it is saturated
    assert (
        rightsize(
            Deployment("pool", 1, 4.0, [window(0, up=4, busy=0.2, waiting=WAITING_THRESHOLD)])
        ).verdict
        is Verdict.ADD_CAPACITY
    )


# ---------------------------------------------------------------- the compute (step-time) load
# A step-time predictor with exactly known times (models/serving/affine_predictor.py): 5 ms a
# step, + 0.02 ms per decode sequence, + 0.02 ms per prompt token computed.
def affine_model(**extra: float) -> StepModel:
    from models.serving.affine_predictor import AffineStepTimePredictor

    predictor = AffineStepTimePredictor(
        base_s=5e-3, per_decode_seq_s=2e-5, per_prefill_token_s=2e-5, **extra
    )
    return StepModel(predictor, "affine test model")


def batching_window(i: int = 0, **extra: float) -> Window:
    """4 replicas each running 1.5 requests all window (busy 4.0, running 6) that generated
    360,000 tokens: about what batches of 1.5 at ~5 ms a step produce in 5 minutes."""
    fields = {
        "busy": 4.0, "running": 6.0, "generation_tokens": 360_000.0, "prompt_tokens": 0.0,
        "prefix_hit_tokens": 0.0, "requests_finished": 0.0, **extra,
    }  # fmt: skip
    busy, kv = fields.pop("busy"), fields.pop("kv", 0.0)
    return replace(window(i, up=4, busy=busy, kv=kv), **fields)


def test_capacity_batch_and_token_costs_by_hand():
    m = affine_model()
    # t(b) = 5 ms + 0.02 ms b <= 2 x t(1) = 10.04 ms  ->  b <= 252: a token costs t(252) / 252
    assert m.capacity_batch(0) == 252
    assert math.isclose(m.decode_token_s(0), (5e-3 + 252 * 2e-5) / 252)
    # with 0.01 us per context token at 1,000 tokens: t(b) = 5 ms + 0.03 ms b <= 10.06 ms
    # -> b <= 168; a KV cache of 100,000 tokens holds 100 such sequences
    mc = affine_model(per_context_token_s=1e-8)
    assert mc.capacity_batch(1000) == 168
    assert mc.capacity_batch(1000, kv_capacity_tokens=100_000) == 100
    # a prompt token: one 8,192-token chunk's step over its tokens
    assert math.isclose(m.prefill_token_s(0), (5e-3 + 8192 * 2e-5) / 8192)


def test_a_batching_pool_is_cut_to_one_replica():
    # 360,000 tokens x (10.04 ms / 252) = 14.34 s of steps at capacity batch over 300 s: 0.048
    # replicas -> 1 replica at 80 %; the busy basis (4 busy replicas / 0.8) needs 5 of 4.
    # Idle: 1 - (1200 + 600) / 2400 busy replica-seconds
    windows = [batching_window(0), batching_window(1, busy=2.0, generation_tokens=90_000.0)]
    f = rightsize(Deployment("pool", 1, 4.0, windows, step_model=affine_model()))
    assert f.verdict is Verdict.CUT and f.binding is Binding.COMPUTE and f.basis == "compute"
    assert (f.replicas_held, f.peak_need_replicas, f.gpus_to_cut) == (4, 1, 3)
    assert f.peak_start == T0
    assert f.peak_compute_replicas == pytest.approx(360_000 * 10.04e-3 / 252 / 300, rel=1e-9)
    assert f.message.startswith("pool was 25% idle; 3 fewer GPUs (4 → 1 replicas of 1 GPU)")
    assert "0.05 replicas' worth of engine steps at full batch (affine test model)" in f.message
    assert "Sized on busy time" not in f.message
    busy = rightsize(Deployment("pool", 1, 4.0, windows))
    assert busy.verdict is Verdict.RIGHT_SIZED and busy.peak_need_replicas == 5


def test_prefill_counts_the_prompt_tokens_the_cache_did_not_hold():
    # 1,000,000 prompt tokens, 200,000 of them prefix-cache hits: 800,000 computed at one
    # chunk's step / 8,192 each, over 300 s
    w = batching_window(generation_tokens=0.0, prompt_tokens=1e6, prefix_hit_tokens=2e5,
                        requests_finished=100.0)  # fmt: skip
    expected = 800_000 * (5e-3 + 8192 * 2e-5) / 8192 / 300
    assert compute_replicas(w, affine_model()) == pytest.approx(expected, rel=1e-9)


def test_compute_utilization_falls_with_every_replica_added():
    m, w = affine_model(per_context_token_s=1e-8), batching_window(requests_finished=120.0)
    u = [compute_utilization(w, m, n) for n in range(1, 9)]
    assert all(a > b > 0 for a, b in itertools.pairwise(u))
    assert u[3] == pytest.approx(u[0] / 4)
    with pytest.raises(ValueError, match="replicas"):
        compute_utilization(w, m, 0)


def test_kv_still_binds_on_the_compute_basis():
    # 2.5 replicas' worth of KV cache: 2.5 / 0.8 -> 4 of 4, however cheap the steps
    d = Deployment("rag", 1, 4.0, [batching_window(kv=2.5)], step_model=affine_model())
    f = rightsize(d)
    assert f.verdict is Verdict.RIGHT_SIZED and f.binding is Binding.KV
    assert f.peak_need_replicas == 4


def test_a_saturated_pool_stays_add_capacity_on_the_compute_basis():
    windows = [batching_window(0), batching_window(1, preemptions=2.0)]
    f = rightsize(Deployment("pool", 1, 4.0, windows, step_model=affine_model()))
    assert f.verdict is Verdict.ADD_CAPACITY and f.binding is Binding.SATURATED
    assert f.gpus_to_cut == 0 and f.saturated_windows == 1
    assert f.peak_need_replicas == 4 and "add capacity" in f.message


def test_unknown_model_falls_back_to_busy_replicas_and_says_so():
    windows = [batching_window(0, busy=1.0)]
    f = rightsize(Deployment("pool", 1, 4.0, windows, step_model_note="its model is not known"))
    # 1 busy replica / 0.8 -> 2 of 4
    assert f.basis == "busy" and f.binding is Binding.BUSY and f.peak_compute_replicas is None
    assert (f.verdict, f.peak_need_replicas) == (Verdict.CUT, 2)
    assert "Sized on busy time (its model is not known)" in f.message
    # a model but no token counters scraped at all: busy basis too
    bare = [replace(w, generation_tokens=None) for w in windows]
    g = rightsize(Deployment("pool", 1, 4.0, bare, step_model=affine_model()))
    assert g.basis == "busy" and g.peak_need_replicas == 2 and g.step_model is None
    assert "vLLM's token counters were not scraped" in g.message


def test_a_window_without_counters_does_not_set_a_compute_peak():
    # the range's first window has no counter pair yet: its 4 busy replicas do not count
    first = replace(batching_window(0), generation_tokens=None)
    f = rightsize(Deployment("pool", 1, 4.0, [first, batching_window(1)],
                             step_model=affine_model()))  # fmt: skip
    assert f.verdict is Verdict.CUT and f.peak_need_replicas == 1


def test_a_coarse_waiting_blip_is_not_saturation():
    # 2 replicas scraped every 120 s: 6 samples over 720 covered s; one sample caught 2
    # requests waiting: a mean of 2 x 120 / 360 = 0.67 on that replica, over the threshold
    blip = replace(window(0, up=2, busy=0.3), covered_s=720.0, busy_s=108.0, samples=6,
                   waiting=2 / 3, waiting_held=0.0)  # fmt: skip
    # gone at the next scrape: it stands for 15 s, not 120 -> 0.67 x 15 / 120 = 0.083
    assert blip.sustained_waiting == pytest.approx(2 / 3 * 15 / 120)
    assert not is_saturated(blip)
    assert rightsize(Deployment("batch", 1, 4.0, [blip])).verdict is Verdict.CUT
    # still there at the next scrape: it counts whole
    held = replace(blip, waiting_held=2 / 3)
    assert held.sustained_waiting == pytest.approx(2 / 3) and is_saturated(held)
    # scraped every 15 s (48 samples), a lone sample stands for its whole 15 s, as before
    fine = replace(blip, samples=48)
    assert fine.sustained_waiting == pytest.approx(2 / 3) and is_saturated(fine)
    assert LONE_WAIT_S == 15.0
