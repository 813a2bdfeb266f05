"""models/rightsizing.py on hand-computed cases: an idle deployment, a KV-bound one, saturated
ones (waiting, preemptions), one replica, several GPUs per replica, no price, no data, and the
inputs it refuses. docs/efficiency.md ("Right-sizing") states the method."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from models.rightsizing import (
    WAITING_THRESHOLD,
    Binding,
    Deployment,
    Verdict,
    Window,
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
