"""`vllm bench serve`-style results of a simulation run.

summarize() returns the result keys of `vllm bench serve` (duration, completed, failed,
throughputs, mean/median/std/pNN of ttft, tpot, itl, e2el in ms) plus what the simulator knows
and a client does not (KV-cache occupancy, preemptions, prefix-cache hits, GPU busy time).
format_benchmark_result() lays them out as the "Serving Benchmark Result" block.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

import numpy as np

from inferledger.core.errors import BadInputError
from models.serving.records import RequestRecord, SimulationResult

METRICS = ("ttft", "tpot", "itl", "e2el")
_METRIC_HEADERS = {
    "ttft": ("Time to First Token", "TTFT"),
    "tpot": ("Time per Output Token (excl. 1st token)", "TPOT"),
    "itl": ("Inter-token Latency", "ITL"),
    "e2el": ("End-to-end Latency", "E2EL"),
}


def _pct_name(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """np.percentile (linear interpolation) of the array in which values[i] appears
    weights[i] times, without building that array."""
    order = np.argsort(values, kind="stable")
    v = values[order]
    cum = np.cumsum(weights[order])
    total = cum[-1]
    pos = q / 100.0 * (total - 1)
    lo = math.floor(pos)
    hi = math.ceil(pos)
    v_lo = v[np.searchsorted(cum, lo, side="right")]
    v_hi = v[np.searchsorted(cum, hi, side="right")]
    return float(v_lo + (v_hi - v_lo) * (pos - lo))


def _stats(
    name: str,
    values: np.ndarray,
    percentiles: Sequence[float],
    weights: np.ndarray | None = None,
) -> dict[str, float]:
    out: dict[str, float] = {}
    if weights is None:
        weights = np.ones(len(values))
    keep = weights > 0
    values, weights = values[keep] * 1000.0, weights[keep]
    total = float(weights.sum())
    if total == 0:
        out[f"mean_{name}_ms"] = out[f"median_{name}_ms"] = out[f"std_{name}_ms"] = 0.0
        for p in percentiles:
            out[f"p{_pct_name(p)}_{name}_ms"] = 0.0
        return out
    mean = float(np.dot(values, weights) / total)
    out[f"mean_{name}_ms"] = mean
    out[f"median_{name}_ms"] = weighted_percentile(values, weights, 50)
    out[f"std_{name}_ms"] = float(math.sqrt(np.dot((values - mean) ** 2, weights) / total))
    for p in percentiles:
        out[f"p{_pct_name(p)}_{name}_ms"] = weighted_percentile(values, weights, p)
    return out


def summarize(
    result: SimulationResult,
    *,
    percentiles: Sequence[float] = (99,),
    client_delay_s: Mapping[str, float] | None = None,
    warmup_s: float = 0.0,
    cooldown_s: float = 0.0,
) -> dict[str, float | int | None]:
    """Result keys of `vllm bench serve` for the run, plus simulator-only keys.

    client_delay_s: request id -> the client + network delay its client adds to the TTFT and
    E2E latency it measures (and to when it sees the response end); absent ids add nothing.
    warmup_s / cooldown_s: leave the first warmup_s after the first send and the last
    cooldown_s before the last response out, as benchmark tools measure a closed-loop run's
    steady state. Latencies are then those of the requests SENT inside the window; the
    throughputs count the requests (and their tokens) that FINISHED inside it, over its length
    (`duration`). measure_start_s / measure_end_s say which window was measured (seconds from
    the first send); peaks, KV-cache, preemption and GPU keys stay whole-run.
    """
    delays = client_delay_s or {}
    records = result.requests
    ok = [r for r in records if r.succeeded]

    def seen_done(r: RequestRecord) -> float:
        return r.finished_s + delays.get(r.request_id, 0.0)

    if records:
        t_first = min(r.arrival_s for r in records)
        run_duration = max(seen_done(r) for r in records) - t_first
    else:
        t_first, run_duration = result.start_s, 0.0
    if warmup_s < 0 or cooldown_s < 0:
        raise BadInputError("warmup_s and cooldown_s must be >= 0")
    start, end = t_first + warmup_s, t_first + run_duration - cooldown_s
    windowed = warmup_s > 0 or cooldown_s > 0
    if windowed and end <= start:
        raise BadInputError(
            f"warmup_s {warmup_s:g} + cooldown_s {cooldown_s:g} leave nothing of a "
            f"{run_duration:.2f} s run to measure"
        )
    if windowed:
        sent = [r for r in ok if start <= r.arrival_s <= end]
        done = [r for r in ok if start <= seen_done(r) <= end]
        failed = sum(1 for r in records if not r.succeeded and start <= r.arrival_s <= end)
    else:
        sent, done, failed = ok, ok, len(records) - len(ok)
    duration = end - start if windowed else run_duration
    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    per_s = 1.0 / duration if duration > 0 else 0.0
    summary: dict[str, float | int | None] = {
        "duration": duration,
        "completed": len(done),
        "failed": failed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) * per_s,
        "request_goodput": None,
        "output_throughput": total_out * per_s,
        "total_token_throughput": (total_in + total_out) * per_s,
        "measure_start_s": start - t_first,
        "measure_end_s": end - t_first if windowed else run_duration,
        "run_duration": run_duration,
        "measured_requests": len(sent),
        "mean_client_delay_ms": 1000.0 * float(np.mean([delays.get(r.request_id, 0.0) for r in ok]))
        if delays and ok
        else 0.0,
    }
    summary.update(_peaks(result, ok, t_first))

    delay = np.array([delays.get(r.request_id, 0.0) for r in sent], dtype=float)
    ttft = np.array([r.ttft_s for r in sent], dtype=float) + delay
    tpot = np.array([r.tpot_s for r in sent if r.tpot_s is not None], dtype=float)
    e2el = np.array([r.e2e_s for r in sent], dtype=float) + delay
    itl_values = [np.asarray(r.resume_gaps_s, dtype=float) for r in result.replicas]
    itl_weights = [np.ones(len(v)) for v in itl_values]
    chunk_steps = result.config.replica.scheduler.num_scheduler_steps
    for rep in result.replicas:
        values, weights = rep.steps.itl_observations(chunk_steps)
        if windowed:
            starts = rep.steps.start_s[rep.steps.num_decode > 0]
            inside = (starts >= start) & (starts <= end)
            values, weights = values[inside], weights[inside]
        itl_values.append(values)
        itl_weights.append(weights.astype(float))
    summary.update(_stats("ttft", ttft, percentiles))
    summary.update(_stats("tpot", tpot, percentiles))
    summary.update(
        _stats("itl", np.concatenate(itl_values), percentiles, np.concatenate(itl_weights))
    )
    summary.update(_stats("e2el", e2el, percentiles))
    summary.update(_engine_side(result, run_duration, ok))
    return summary


def _peaks(result: SimulationResult, ok: list, t0: float) -> dict[str, float]:
    """Peak output tokens per second and peak concurrent requests, over one-second buckets
    from the first send, as `vllm bench serve` counts them."""
    if not ok:
        return {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0}
    end = max(r.finished_s for r in ok)
    n_buckets = math.ceil(end - t0) + 1
    tokens = np.zeros(n_buckets)
    first = np.array([r.first_token_s for r in ok], dtype=float)
    np.add.at(tokens, np.clip((first - t0).astype(np.int64), 0, n_buckets - 1), 1)
    for rep in result.replicas:
        log = rep.steps
        mask = log.num_decode > 0
        steps = log.steps[mask]
        per_step = (log.duration_s[mask] / steps).repeat(steps)
        starts = log.start_s[mask].repeat(steps)
        index = np.arange(len(per_step)) - np.repeat(np.cumsum(steps) - steps, steps)
        ends = starts + (index + 1) * per_step
        buckets = np.clip((ends - t0).astype(np.int64), 0, n_buckets - 1)
        np.add.at(tokens, buckets, log.num_decode[mask].repeat(steps))
    active = np.zeros(n_buckets + 1)
    begin = np.array([int(r.arrival_s - t0) for r in ok])
    finish = np.array([int(r.finished_s - t0) for r in ok])
    np.add.at(active, begin, 1)
    np.add.at(active, finish + 1, -1)
    return {
        "max_output_tokens_per_s": float(tokens.max()),
        "max_concurrent_requests": int(np.cumsum(active).max()),
    }


def _engine_side(result: SimulationResult, duration: float, ok: list) -> dict[str, float | int]:
    reps = result.replicas
    usage = np.concatenate([rep.series["kv_cache_usage"] for rep in reps]) if reps else None
    queries = sum(rep.counters.prefix_cache_queries for rep in reps)
    hits = sum(rep.counters.prefix_cache_hits for rep in reps)
    busy = sum(rep.gpu_busy_s for rep in reps)
    e2e_sum = sum(r.e2e_s for r in result.requests)
    return {
        "mean_kv_cache_usage": float(usage.mean()) if usage is not None and len(usage) else 0.0,
        "p95_kv_cache_usage": float(np.percentile(usage, 95))
        if usage is not None and len(usage)
        else 0.0,
        "max_kv_cache_usage": max((rep.peak_kv_cache_usage for rep in reps), default=0.0),
        "num_preemptions": sum(rep.counters.num_preemptions for rep in reps),
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "prefix_cache_hit_rate": hits / queries if queries else 0.0,
        "gpu_busy_s": busy,
        "gpu_utilization": busy / (duration * len(reps)) if duration > 0 and reps else 0.0,
        "mean_concurrency": e2e_sum / duration if duration > 0 else 0.0,
        "num_steps": sum(rep.counters.num_steps for rep in reps),
    }


def format_benchmark_result(
    summary: Mapping[str, float | int | None],
    *,
    percentile_metrics: Sequence[str] = ("ttft", "tpot", "itl"),
    percentiles: Sequence[float] = (99,),
    max_concurrency: int | None = None,
    request_rate: float | None = None,
) -> str:
    """The text block `vllm bench serve` prints, from a summarize() dict."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]

    def row(label: str, value: object, fmt: str = "") -> None:
        lines.append(("{:<40} {:<10" + fmt + "}").format(label, value))

    row("Successful requests:", summary["completed"])
    row("Failed requests:", summary["failed"])
    if max_concurrency is not None:
        row("Maximum request concurrency:", max_concurrency)
    if request_rate is not None and not math.isinf(request_rate):
        row("Request rate configured (RPS):", request_rate, ".2f")
    row("Benchmark duration (s):", summary["duration"], ".2f")
    run = summary.get("run_duration")
    start, end = summary.get("measure_start_s"), summary.get("measure_end_s")
    if run is not None and start is not None and end is not None and (start > 0 or end < run):
        # the steady window a closed-loop benchmark measures (warm-up / cool-down left out)
        row("Measured window (s):", f"{start:.2f}-{end:.2f} of {run:.2f}")
        row("Requests sent in the window:", summary.get("measured_requests"))
    if summary.get("mean_client_delay_ms"):
        row("Mean client delay (ms):", summary["mean_client_delay_ms"], ".2f")
    row("Total input tokens:", summary["total_input_tokens"])
    row("Total generated tokens:", summary["total_output_tokens"])
    row("Request throughput (req/s):", summary["request_throughput"], ".2f")
    row("Output token throughput (tok/s):", summary["output_throughput"], ".2f")
    row("Peak output token throughput (tok/s):", summary["max_output_tokens_per_s"], ".2f")
    row("Peak concurrent requests:", float(summary["max_concurrent_requests"] or 0), ".2f")
    row("Total token throughput (tok/s):", summary["total_token_throughput"], ".2f")
    for metric in percentile_metrics:
        header, short = _METRIC_HEADERS[metric]
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        row(f"Mean {short} (ms):", summary[f"mean_{metric}_ms"], ".2f")
        row(f"Median {short} (ms):", summary[f"median_{metric}_ms"], ".2f")
        for p in percentiles:
            row(f"P{_pct_name(p)} {short} (ms):", summary[f"p{_pct_name(p)}_{metric}_ms"], ".2f")
    lines.append("=" * 50)
    return "\n".join(lines)


def print_benchmark_result(
    summary: Mapping[str, float | int | None], file: TextIO | None = None, **kwargs: object
) -> None:
    """Print format_benchmark_result(summary, **kwargs)."""
    print(format_benchmark_result(summary, **kwargs), file=file or sys.stdout)  # type: ignore[arg-type]


def preemption_warning(num_preemptions: int, num_requests: int, kv_cache_tokens: int) -> str | None:
    """A warning when a run preempted more often than it served requests (issue #11): its
    numbers then hang on how preemption and recompute play out, which swings throughput by
    tens of percent with small changes (prefix caching on or off, a slightly different KV
    size). None when preemptions are fewer than requests."""
    if num_requests <= 0 or num_preemptions <= num_requests:
        return None
    return (
        f"warning: {num_preemptions:,} preemptions for {num_requests:,} requests: the KV cache "
        f"({kv_cache_tokens:,} tokens per replica) is too small for this load, and the result "
        "depends on preemption and recompute; --admission reserve, a higher "
        "--gpu-memory-utilization or more GPUs avoid it (docs/simulator.md, 'A full KV cache')"
    )
