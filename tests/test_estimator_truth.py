"""Simulator ground truth for the per-request GPU-share estimator (docs/cost-model.md, "Replica
cost and its split"; models/serving/step_shares.py).

First the truth itself: hand-worked step shares, then a simulated run whose shares are checked
against the simulator's own accounting (busy time per replica, RequestRecord.gpu_prefill_s /
gpu_decode_s, the step log) and against the work each request must have done. Then the
estimator: the run's engine spans are stored through the real ingest path (decode_for_storage +
insert_spans on the storage gateway's writer) and the estimate is compared with the truth.

The error bounds were set from measurement (bench/estimator_accuracy.py: 2 H200 replicas of
Llama-3.1-8B, 3,000 requests, 12-28 req/s, seeds 0-2): the formula of docs/cost-model.md, seed
0 at 20 req/s, has a median |relative error| of 4.2 %, p90 15.7 % and misattributes 2.05 % of the
GPU-seconds against the token truth (1.8-2.8 % over every measured load and seed).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pyarrow as pa
import pytest

from inferledger.core.storage import Storage
from ingest.span_writer import decode_for_storage, insert_spans
from models.serving.config import SimulationOptions
from models.serving.step_shares import (
    DECODE,
    PREFILL,
    SPAN_COLUMNS,
    GpuShareLedger,
    GroundTruthRun,
    GroundTruthScenario,
    Split,
    StepRecord,
    StepRecorder,
    error_stats,
    estimate_by_span,
    ground_truth_run,
    reference_estimate,
    simulate,
    true_gpu_shares,
    truth_by_span,
)

SEED = 0
SMALL = replace(GroundTruthScenario(), num_requests=400)

# Bounds for the estimator against the token truth on the default run (measured: 4.2 %, 15.7 %,
# 2.05 %, 2.68 %), with room for an implementation that differs in rounding or hour splitting,
# not for one that weighs requests differently.
MAX_MEDIAN_REL_ERROR = 0.06
MAX_P90_REL_ERROR = 0.20
MAX_MISATTRIBUTED = 0.03
MAX_STAGE_MISATTRIBUTED = 0.04
# Against the sequence truth the token-weighted estimator is far off by design (measured 20.7 %
# misattributed): bounded so that the report stays what the docs say.
MAX_MISATTRIBUTED_SEQUENCES = 0.25


@pytest.fixture(scope="module")
def run() -> GroundTruthRun:
    return ground_truth_run(GroundTruthScenario(), SEED)


def store(storage: Storage, run: GroundTruthRun) -> None:
    for body in run.otlp_bodies():
        written = storage.write(lambda cur, b=body: insert_spans(cur, decode_for_storage(b)))
        assert written > 0


def stored_engine_spans(storage: Storage) -> pa.Table:
    return storage.query_arrow(
        f"select {', '.join(SPAN_COLUMNS)} from spans where name = 'llm_request'"
    )


# --- the truth, by hand ----------------------------------------------------------------------


def hand_steps() -> list[StepRecord]:
    return [
        # r1 prefills 98 tokens beside two decoders: 100 tokens in 10 ms
        StepRecord(0, 0.0, 0.010, 1, (("r1", 98, PREFILL), ("r2", 1, DECODE), ("r3", 1, DECODE))),
        # five pure-decode steps priced as one 30 ms stretch: 5 tokens each
        StepRecord(0, 0.010, 0.040, 5, (("r1", 5, DECODE), ("r2", 5, DECODE), ("r3", 5, DECODE))),
        StepRecord(1, 1.0, 1.5, 1, (("r9", 10, PREFILL),)),
    ]


def test_token_split_by_hand() -> None:
    shares = true_gpu_shares(hand_steps(), gpus_per_replica={0: 2, 1: 1})
    assert shares["r1"].replica == 0
    assert shares["r1"].prefill_gpu_s == pytest.approx(0.010 * 98 / 100 * 2)
    assert shares["r1"].decode_gpu_s == pytest.approx(0.030 / 3 * 2)
    for r in ("r2", "r3"):
        assert shares[r].prefill_gpu_s == 0.0
        assert shares[r].decode_gpu_s == pytest.approx((0.010 / 100 + 0.030 / 3) * 2)
    assert (shares["r9"].replica, shares["r9"].prefill_gpu_s) == (1, pytest.approx(0.5))
    assert shares["r9"].decode_gpu_s == 0.0
    total = math.fsum(s.gpu_s for s in shares.values())
    assert total == pytest.approx(0.040 * 2 + 0.5, rel=1e-12)


def test_sequence_split_by_hand() -> None:
    shares = true_gpu_shares(hand_steps(), split=Split.SEQUENCES, gpus_per_replica={0: 2})
    assert shares["r1"].prefill_gpu_s == pytest.approx(0.010 / 3 * 2)
    assert shares["r1"].decode_gpu_s == pytest.approx(0.030 / 3 * 2)
    assert shares["r2"].decode_gpu_s == pytest.approx((0.010 / 3 + 0.030 / 3) * 2)
    assert shares["r9"].prefill_gpu_s == pytest.approx(0.5)  # replica 1: default one GPU
    total = math.fsum(s.gpu_s for s in shares.values())
    assert total == pytest.approx(0.040 * 2 + 0.5, rel=1e-12)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([StepRecord(0, 1.0, 1.0, 1, (("a", 1, DECODE),))], "bad step"),
        ([StepRecord(0, 0.0, 1.0, 1, ())], "bad step"),
        ([StepRecord(0, 0.0, 1.0, 1, (("a", 1, "queue"),))], "unknown phase"),
        (
            [
                StepRecord(0, 0.0, 1.0, 1, (("a", 4, PREFILL),)),
                StepRecord(1, 0.0, 1.0, 1, (("a", 1, DECODE),)),
            ],
            "ran on replicas 0 and 1",
        ),
    ],
)
def test_ledger_rejects_impossible_steps(steps: list[StepRecord], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        true_gpu_shares(steps)


# --- the truth, against the simulator ----------------------------------------------------------


def test_truth_adds_up_to_busy_gpu_time(run: GroundTruthRun) -> None:
    result = run.result
    assert run.gpus_per_replica == 1
    assert run.untraced_gpu_s == 0.0
    assert run.truth.num_rows == run.scenario.num_requests  # every request traced
    for i, rep in enumerate(result.replicas):
        # the observer saw every step the simulator priced: the same busy time, bit for bit
        assert run.busy_gpu_s[f"replica-{i}"] == rep.counters.gpu_busy_s
    busy = math.fsum(run.busy_gpu_s.values())
    for split in Split:
        total = math.fsum(p + d for p, d in truth_by_span(run.truth, split).values())
        assert total == pytest.approx(busy, rel=1e-12), split
    by_replica: dict[str, float] = {}
    truth = run.truth.to_pydict()
    for replica, p, d in zip(
        truth["replica"], truth["prefill_gpu_s"], truth["decode_gpu_s"], strict=True
    ):
        by_replica[replica] = by_replica.get(replica, 0.0) + p + d
    assert by_replica == pytest.approx(run.busy_gpu_s, rel=1e-12)


def test_token_truth_matches_the_simulators_own_accounting(run: GroundTruthRun) -> None:
    # RequestRecord.gpu_prefill_s / gpu_decode_s are accumulated by the scheduler itself (a
    # running share per token); the observer's truth is computed step by step from the batch.
    records = {r.request_id: r for r in run.result.requests}
    truth = run.truth.to_pydict()
    for rid, p, d in zip(
        truth["request_id"], truth["prefill_gpu_s"], truth["decode_gpu_s"], strict=True
    ):
        assert p == pytest.approx(records[rid].gpu_prefill_s, rel=1e-9, abs=1e-15), rid
        assert d == pytest.approx(records[rid].gpu_decode_s, rel=1e-9, abs=1e-15), rid


def test_scenario_batches_prefill_beside_decodes(run: GroundTruthRun) -> None:
    """The default run is what the estimator must face: batches of several to dozens of
    sequences, chunked prefill beside decodes, prompts 100-8000 and outputs 20-800 tokens, a
    run crossing an hour boundary, no preemption (so prefill work is the prompt's)."""
    b = run.batch
    assert b.p10_batch >= 5 and b.p90_batch >= 20 and b.max_batch >= 30
    assert 0.2 <= b.mixed_share <= 0.8
    t = run.truth.to_pydict()
    assert min(t["prompt_tokens"]) < 200 and max(t["prompt_tokens"]) > 7000
    assert min(t["output_tokens"]) < 30 and max(t["output_tokens"]) > 700
    assert sum(1 for c in t["cached_tokens"] if c > 0) > 100
    assert len(set(t["size_class"])) == 4
    assert set(t["replica"]) == {"replica-0", "replica-1"}
    assert sum(t["num_preemptions"]) == 0
    first_ns = run.scenario.epoch_ns + round(run.result.start_s * 1e9)
    last_ns = run.scenario.epoch_ns + round(run.result.end_s * 1e9)
    hour = 3_600_000_000_000
    assert first_ns // hour != last_ns // hour
    assert run.from_ns <= first_ns and last_ns < run.to_ns


def test_observed_steps_are_the_step_log_and_the_requests_work() -> None:
    recorder = StepRecorder()
    result, _ = simulate(SMALL, SEED, recorder)
    for rep in result.replicas:
        steps = [s for s in recorder.steps if s.replica == rep.index]
        log = rep.steps
        assert len(steps) == len(log.start_s)
        for j, s in enumerate(steps):
            assert s.start_s == log.start_s[j]
            assert s.end_s - s.start_s == pytest.approx(log.duration_s[j], rel=1e-12)
            assert s.steps == log.steps[j]
            assert sum(1 for _, _, ph in s.work if ph == DECODE) == log.num_decode[j]
            prefill = [t for _, t, ph in s.work if ph == PREFILL]
            assert (len(prefill), sum(prefill)) == (
                log.num_prefill_seqs[j],
                log.prefill_tokens[j],
            )
    done: dict[str, list[int]] = {}
    for s in recorder.steps:
        for rid, tokens, phase in s.work:
            done.setdefault(rid, [0, 0])[phase == DECODE] += tokens
    assert sum(r.num_preemptions for r in result.requests) == 0
    for r in result.requests:
        # no preemption: the uncached prompt is prefilled once, and every output token but the
        # one sampled by the last prefill step is a decode step
        assert done[r.request_id] == [r.prompt_tokens - r.cached_tokens, r.output_tokens - 1]


def test_stretches_give_the_same_truth_as_single_steps() -> None:
    stretched, single = GpuShareLedger(), GpuShareLedger()
    simulate(SMALL, SEED, stretched)
    simulate(SMALL, SEED, single, SimulationOptions(max_fast_forward_steps=1))
    assert stretched.batch_stats().events < single.batch_stats().events  # it did fast-forward
    for split in Split:
        a, b = stretched.shares(split), single.shares(split)
        assert a.keys() == b.keys()
        for rid, share in a.items():
            assert share.prefill_gpu_s == pytest.approx(b[rid].prefill_gpu_s, rel=1e-9)
            assert share.decode_gpu_s == pytest.approx(b[rid].decode_gpu_s, rel=1e-9)


def test_observer_changes_nothing() -> None:
    plain, _ = simulate(SMALL, SEED, None)
    observed, _ = simulate(SMALL, SEED, GpuShareLedger())
    assert observed.requests == plain.requests
    for a, b in zip(observed.replicas, plain.replicas, strict=True):
        assert a.counters == b.counters
        assert (a.steps.start_s == b.steps.start_s).all()
        assert (a.steps.duration_s == b.steps.duration_s).all()


def test_ground_truth_run_is_deterministic(run: GroundTruthRun) -> None:
    small = replace(GroundTruthScenario(), num_requests=200)
    a, b = ground_truth_run(small, 7), ground_truth_run(small, 7)
    assert a.truth.equals(b.truth)
    assert a.otlp_bodies() == b.otlp_bodies()
    c = ground_truth_run(small, 8)
    assert not c.truth.equals(a.truth)


def test_truth_is_keyed_by_the_stored_engine_spans(storage: Storage, run: GroundTruthRun) -> None:
    store(storage, run)
    rows = storage.fetchall(
        "select trace_id, span_id, gen_ai_request_id, service_instance_id, input_tokens, "
        "cached_input_tokens, output_tokens from spans where name = 'llm_request'"
    )
    t = run.truth.to_pydict()
    expected = {
        (tr, sp): (rid, rep, p, c, o)
        for tr, sp, rid, rep, p, c, o in zip(
            t["trace_id"],
            t["span_id"],
            t["request_id"],
            t["replica"],
            t["prompt_tokens"],
            t["cached_tokens"],
            t["output_tokens"],
            strict=True,
        )
    }
    assert {(r[0], r[1]): tuple(r[2:]) for r in rows} == expected


# --- the estimator -------------------------------------------------------------------------------


def assert_within_bounds(run: GroundTruthRun, estimate: pa.Table) -> None:
    est = estimate_by_span(estimate)
    busy = math.fsum(run.busy_gpu_s.values())
    total = math.fsum(p + d for p, d in est.values())
    assert total == pytest.approx(busy, rel=1e-6), "estimated usage != busy GPU time"
    tok = error_stats(truth_by_span(run.truth, Split.TOKENS), est)
    assert tok.unmatched_estimates == 0
    assert set(est) == set(truth_by_span(run.truth)), "estimate misses engine spans"
    assert tok.median_abs_rel_error <= MAX_MEDIAN_REL_ERROR, tok
    assert tok.p90_abs_rel_error <= MAX_P90_REL_ERROR, tok
    assert tok.misattributed_share <= MAX_MISATTRIBUTED, tok
    assert tok.stage_misattributed_share <= MAX_STAGE_MISATTRIBUTED, tok
    seq = error_stats(truth_by_span(run.truth, Split.SEQUENCES), est)
    assert seq.misattributed_share <= MAX_MISATTRIBUTED_SEQUENCES, seq


def test_reference_formula_against_truth(storage: Storage, run: GroundTruthRun) -> None:
    """docs/cost-model.md's formula, restated in numpy over the stored spans, meets the bounds
    the SQL estimator is held to: the bounds are the formula's, not an implementation's."""
    store(storage, run)
    estimate = reference_estimate(stored_engine_spans(storage))
    assert_within_bounds(run, estimate)

    def replica_by_span(table: pa.Table) -> dict[str, str]:
        return dict(zip(*table.select(["span_id", "replica"]).to_pydict().values(), strict=True))

    assert replica_by_span(estimate) == replica_by_span(run.truth)


def test_estimator_against_truth(storage: Storage, run: GroundTruthRun) -> None:
    """ledger.allocation.estimate_gpu_seconds (the product's SQL) on the stored engine spans:
    its total is the busy GPU time, its per-request errors within the measured bounds, and it
    computes the formula of docs/cost-model.md (per request, as the numpy restatement)."""
    from ledger.allocation import estimate_gpu_seconds

    store(storage, run)
    estimate = estimate_gpu_seconds(storage, run.from_ns, run.to_ns)
    for column in ("trace_id", "span_id", "replica", "prefill_gpu_s", "decode_gpu_s"):
        assert column in estimate.column_names
    replicas = set(estimate.column("replica").to_pylist())
    assert replicas == {"replica-0", "replica-1"}
    assert_within_bounds(run, estimate)
    # 1e-4: room for times held as epoch seconds in doubles (a 240 ns grain); a weight that
    # ignores cached tokens, or counts every output token, is off by 0.1 % to 50 %.
    reference = estimate_by_span(reference_estimate(stored_engine_spans(storage)))
    for key, (p, d) in estimate_by_span(estimate).items():
        rp, rd = reference[key]
        assert p == pytest.approx(rp, rel=1e-4, abs=1e-7), key
        assert d == pytest.approx(rd, rel=1e-4, abs=1e-7), key
