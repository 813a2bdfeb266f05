"""Accuracy of the per-request GPU-share estimator against the simulator's true per-step shares.

For each load and seed: simulate a mixed workload on Llama-3.1-8B / H200 replicas
(models/serving/step_shares.py: ground_truth_run), store its engine spans through the real ingest
path into a temporary DuckDB file, run the estimators, and compare each request's estimated
prefill + decode GPU-seconds with the truth, under both truths (tokens: each step split by the
tokens each request processed in it; sequences: split equally per sequence). Printed per size
class (short/long prompt x short/long output) and overall:

- n, share of the GPU-seconds, bias (sum estimated / sum true - 1),
- median and p90 of |estimate - true| / true per request,
- misattributed: sum |estimate - true| / 2 / sum true (GPU-seconds given to the wrong request);
  overall also per stage (stage misattr.: wrong request or wrong stage).

Estimators: `allocation` (ledger.allocation.estimate_gpu_seconds, the product's SQL, when it
exists), `reference` (docs/cost-model.md's formula restated in numpy), and `tokens-only` (a
naive baseline: each replica's busy GPU-seconds split by uncached prompt + output tokens).

    .venv/bin/python bench/estimator_accuracy.py                      # 3 loads x 3 seeds
    .venv/bin/python bench/estimator_accuracy.py --rates 20 --seeds 0 --requests 5000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inferledger.core.storage import Storage
from ingest.span_writer import decode_for_storage, insert_spans
from models.serving.step_shares import (
    LONG_OUTPUT_TOKENS,
    LONG_PROMPT_TOKENS,
    SPAN_COLUMNS,
    GroundTruthRun,
    GroundTruthScenario,
    Split,
    error_stats,
    estimate_by_span,
    ground_truth_run,
    reference_estimate,
    truth_by_span,
)

CLASSES = (
    "short-prompt/short-output",
    "short-prompt/long-output",
    "long-prompt/short-output",
    "long-prompt/long-output",
)


def store(storage: Storage, run: GroundTruthRun) -> None:
    for body in run.otlp_bodies():
        storage.write(lambda cur, b=body: insert_spans(cur, decode_for_storage(b)))


def engine_spans_table(storage: Storage) -> pa.Table:
    return storage.query_arrow(
        f"select {', '.join(SPAN_COLUMNS)} from spans where name = 'llm_request'"
    )


def tokens_only(spans: pa.Table, busy: dict[str, float]) -> pa.Table:
    """Baseline: each replica's busy GPU-seconds split by (uncached prompt + output) tokens,
    prefill/decode by the same token counts."""
    replica = spans.column("service_instance_id").to_numpy(zero_copy_only=False).astype(str)
    cached = np.nan_to_num(spans.column("cached_input_tokens").to_numpy(zero_copy_only=False))
    pre = spans.column("input_tokens").to_numpy(zero_copy_only=False) - cached
    dec = spans.column("output_tokens").to_numpy(zero_copy_only=False).astype(float)
    prefill = np.zeros(len(replica))
    decode = np.zeros(len(replica))
    for name, gpu_s in busy.items():
        m = replica == name
        per_token = gpu_s / (pre[m].sum() + dec[m].sum())
        prefill[m] = pre[m] * per_token
        decode[m] = dec[m] * per_token
    return pa.table(
        {
            "trace_id": spans.column("trace_id"),
            "span_id": spans.column("span_id"),
            "replica": pa.array(replica),
            "prefill_gpu_s": pa.array(prefill),
            "decode_gpu_s": pa.array(decode),
        }
    )


def allocation_estimator() -> Callable[[Storage, int, int], pa.Table] | None:
    try:
        from ledger.allocation import estimate_gpu_seconds
    except ImportError:
        return None
    return estimate_gpu_seconds


def stage_bias(truth: pa.Table, estimate: pa.Table, split: Split) -> tuple[float, float]:
    """(sum est prefill / sum true prefill - 1, same for decode)."""
    t = truth_by_span(truth, split)
    e = estimate_by_span(estimate)
    tp = sum(v[0] for v in t.values())
    td = sum(v[1] for v in t.values())
    ep = sum(e.get(k, (0.0, 0.0))[0] for k in t)
    ed = sum(e.get(k, (0.0, 0.0))[1] for k in t)
    return ep / tp - 1, ed / td - 1


def report(name: str, run: GroundTruthRun, estimate: pa.Table, seconds: float) -> None:
    busy = sum(run.busy_gpu_s.values())
    est = estimate_by_span(estimate)
    total = sum(p + d for p, d in est.values())
    print(
        f"  {name}: {seconds * 1e3:.0f} ms, total {total:.6f} GPU-s vs busy {busy:.6f} "
        f"(rel {total / busy - 1:+.1e})"
    )
    classes = run.truth.column("size_class").to_pylist()
    header = f"    {'truth':<9} {'class':<26} {'n':>5} {'GPU-s %':>7} {'bias':>7} "
    print(header + f"{'med |rel|':>9} {'p90 |rel|':>9} {'misattr.':>8} {'stage m.':>8}")
    for split in Split:
        whole = error_stats(truth_by_span(run.truth, split), est)
        for cls in (*CLASSES, "all"):
            where = None if cls == "all" else [c == cls for c in classes]
            t = truth_by_span(run.truth, split, where)
            if not t:
                continue
            e = {k: est.get(k, (0.0, 0.0)) for k in t}
            s = error_stats(t, e)
            stage = f"{s.stage_misattributed_share:>8.2%}" if cls == "all" else ""
            print(
                f"    {split.value:<9} {cls:<26} {s.requests:>5} "
                f"{s.true_gpu_s / whole.true_gpu_s:>7.1%} "
                f"{s.estimated_gpu_s / s.true_gpu_s - 1:>+7.1%} "
                f"{s.median_abs_rel_error:>9.1%} {s.p90_abs_rel_error:>9.1%} "
                f"{s.misattributed_share:>8.2%} {stage}"
            )
        pb, db = stage_bias(run.truth, estimate, split)
        print(f"    {split.value:<9} stage bias: prefill {pb:+.1%}, decode {db:+.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--rates", type=float, nargs="+", default=[12.0, 20.0, 28.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--no-allocation",
        action="store_true",
        help="skip ledger.allocation.estimate_gpu_seconds even when it exists",
    )
    args = parser.parse_args(argv)

    allocation = None if args.no_allocation else allocation_estimator()
    d = GroundTruthScenario()
    print(
        f"workload: prompts log-uniform {d.prompt_tokens}, outputs log-uniform "
        f"{d.output_tokens}, {d.shared_prefix_share:.0%} starting with one of "
        f"{d.num_shared_prefixes} shared {d.shared_prefix_tokens}-token system prompts; "
        f"long prompt >= {LONG_PROMPT_TOKENS}, long output >= {LONG_OUTPUT_TOKENS} tokens"
    )
    if allocation is None:
        print("ledger.allocation.estimate_gpu_seconds: not run (reference and baseline only)")
    misattr: dict[tuple[str, str], list[float]] = {}
    for rate in args.rates:
        for seed in args.seeds:
            scenario = replace(
                GroundTruthScenario(),
                num_requests=args.requests,
                replicas=args.replicas,
                request_rate=rate,
            )
            t0 = time.perf_counter()
            run = ground_truth_run(scenario, seed)
            sim_s = time.perf_counter() - t0
            b = run.batch
            print(
                f"\n== {args.replicas} x Llama-3.1-8B on H200, {rate:g} req/s, seed {seed}: "
                f"{run.truth.num_rows} requests, {run.result.duration_s:.0f} s simulated "
                f"({sim_s:.1f} s wall), {b.engine_steps} steps; sequences per step "
                f"(time-weighted) p10/p50/p90/max {b.p10_batch:g}/{b.p50_batch:g}/"
                f"{b.p90_batch:g}/{b.max_batch}, mean {b.mean_batch:.1f}; busy time with "
                f"prefill beside decodes {b.mixed_share:.0%}"
            )
            with tempfile.TemporaryDirectory() as tmp:
                storage = Storage(Path(tmp) / "truth.duckdb").open()
                try:
                    store(storage, run)
                    spans = engine_spans_table(storage)
                    estimators: list[tuple[str, Callable[[], pa.Table]]] = []
                    if allocation is not None:
                        estimators.append(
                            (
                                "allocation",
                                lambda a=allocation, s=storage, r=run: a(s, r.from_ns, r.to_ns),
                            )
                        )
                    estimators.append(("reference", lambda s=spans: reference_estimate(s)))
                    estimators.append(
                        ("tokens-only", lambda s=spans, r=run: tokens_only(s, r.busy_gpu_s))
                    )
                    for name, estimate in estimators:
                        t0 = time.perf_counter()
                        table = estimate()
                        seconds = time.perf_counter() - t0
                        report(name, run, table, seconds)
                        for split in Split:
                            s = error_stats(
                                truth_by_span(run.truth, split), estimate_by_span(table)
                            )
                            misattr.setdefault((name, split.value), []).append(
                                s.misattributed_share
                            )
                finally:
                    storage.close()
    print("\nmisattributed share over every run (min / mean / max):")
    for (name, split), values in misattr.items():
        v = np.array(values)
        print(f"  {name:<12} vs {split:<9} {v.min():.2%} / {v.mean():.2%} / {v.max():.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
