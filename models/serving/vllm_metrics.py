"""A simulated replica's vLLM `/metrics` page, at any simulated time.

The page is what vLLM's PrometheusStatLogger (vllm/v1/metrics/loggers.py) exports through
prometheus_client, in the classic text format 0.0.4: the same families in the same order, the
same HELP texts, labels model_name and engine, counters exported with `_total`, histograms with
vLLM's default buckets and `_bucket`/`_count`/`_sum`, label sets sorted by name, numbers written
by prometheus_client's own float formatter (../shared/reference/vllm-observability.md §1).

ReplicaMetricsTimeline precomputes cumulative arrays once per replica, so a render is a few
vectorized lookups plus string joins (a few hundred µs), cheap enough to scrape a week of
simulated traffic every 15 s. Where the values come from, and how they differ from a real
engine's, is in docs/simulator.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from prometheus_client.utils import floatToGoString

from inferledger.core.errors import BadInputError
from models.serving.config import ReplicaConfig, SchedulerConfig
from models.serving.records import ReplicaRecord, RequestRecord, SimulationResult

# Default buckets (reference §1c; vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)  # vllm/v1/metrics/buckets.py (0.33.0)
# vLLM 0.33.0's CacheHitSource (vllm/v1/metrics/cache_hit_source.py) and ADMISSION_REASONS
# (vllm/v1/metrics/loggers.py), in their order.
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")  # vLLM's enum order


def build_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's build_1_2_5_buckets)."""
    out: list[int] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(value)
        exponent += 1


def context_value(context: Any, key: str) -> Any:
    """A key of a request's context: a mapping, or an object with that attribute; else None."""
    if context is None:
        return None
    if isinstance(context, Mapping):
        return context.get(key)
    return getattr(context, key, None)


def escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: Mapping[str, str]) -> str:
    """Labels sorted by name, as prometheus_client writes them."""
    return ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in sorted(pairs.items()))


def _num(value: float) -> str:
    """prometheus_client's floatToGoString, with a fast path for the common small integers."""
    if type(value) is int and 0 <= value < 1_000_000:
        return f"{value}.0"
    return floatToGoString(value)


def _header(name: str, typ: str, doc: str) -> str:
    doc = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {typ}\n"


class CumulativeHistograms:
    """Histograms (and plain counters) over events stamped with a time, readable as of any
    time: per-bucket weights, sums and counters over the events at or before it.

    Built once in O(events × histograms log); a read is a few vectorized numpy calls whatever
    the number of events. Each histogram observes (value, weight) per event; weight 0 means
    the event is not observed by that histogram. Bucket i of a histogram with bounds b holds
    the values v with b[i-1] < v <= b[i] (Prometheus `le`); the last bucket is +Inf.
    """

    def __init__(
        self,
        times: np.ndarray,
        hists: Sequence[tuple[Sequence[float], np.ndarray, np.ndarray]],
        counters: Sequence[np.ndarray] = (),
    ) -> None:
        order = np.argsort(np.asarray(times, dtype=float), kind="stable")
        self.times = np.asarray(times, dtype=float)[order]
        n = len(self.times)
        stride = n + 1  # key = global bucket * stride + event position
        keys, weights, seg_first, sums = [], [], [], []
        self.offsets: list[int] = []
        self.sizes: list[int] = []
        offset = 0
        pos = np.arange(n, dtype=np.int64)
        for bounds, values, w in hists:
            nb = len(bounds) + 1
            w = np.asarray(w, dtype=np.int64)[order]
            keep = w > 0
            v = np.where(keep, np.asarray(values, dtype=float)[order], 0.0)
            b = np.searchsorted(np.asarray(bounds, dtype=float), v, side="left")
            keys.append((offset + b[keep]) * stride + pos[keep])
            weights.append(w[keep])
            seg_first.extend([offset] * nb)
            s = np.zeros(stride)
            np.cumsum(v * w, out=s[1:])
            sums.append(s)
            self.offsets.append(offset)
            self.sizes.append(nb)
            offset += nb
        k = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
        w = np.concatenate(weights) if weights else np.zeros(0, dtype=np.int64)
        sort = np.argsort(k, kind="stable")
        self.keys = k[sort]
        self.cw = np.zeros(len(k) + 1, dtype=np.int64)
        np.cumsum(w[sort], out=self.cw[1:])
        self.bucket_base = np.arange(offset, dtype=np.int64) * stride
        self.starts = self.cw[np.searchsorted(self.keys, self.bucket_base)]
        self.seg_first = np.array(seg_first, dtype=np.int64)
        self.sums = np.array(sums, dtype=float).reshape(len(hists), stride)
        self.counters = np.zeros((len(counters), stride), dtype=np.int64)
        for i, c in enumerate(counters):
            np.cumsum(np.asarray(c, dtype=np.int64)[order], out=self.counters[i, 1:])

    def position(self, at_s: float) -> int:
        """Number of events at or before at_s."""
        return int(np.searchsorted(self.times, at_s, side="right"))

    def per_bucket(self, p: int) -> np.ndarray:
        """Weight in each (histogram, bucket) over the first p events (not cumulative)."""
        return self.cw[np.searchsorted(self.keys, self.bucket_base + p)] - self.starts

    def cumulate(self, per_bucket: np.ndarray) -> np.ndarray:
        """Per-bucket weights → cumulative (`le`) counts, within each histogram."""
        cz = np.zeros(len(per_bucket) + 1, dtype=per_bucket.dtype)
        np.cumsum(per_bucket, out=cz[1:])
        return cz[1:] - cz[self.seg_first]

    def split(self, cumulative: np.ndarray, sums: np.ndarray) -> list[tuple[list[int], float]]:
        """(cumulative bucket counts, sum) per histogram."""
        return [
            (cumulative[off : off + size].tolist(), float(sums[j]))
            for j, (off, size) in enumerate(zip(self.offsets, self.sizes, strict=True))
        ]


# Columns of the replica's samples (ReplicaSeries) the page reads.
_GAUGE_COLUMNS = ("num_running", "num_waiting", "kv_cache_usage")
_COUNTER_COLUMNS = (
    "prefix_cache_queries",
    "prefix_cache_hits",
    "num_preemptions",
    "generation_tokens",
)
# Histograms observed when a request finishes, in the order they are built.
_FINISHED = (
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_n",
    "vllm:request_params_max_tokens",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_num_preemptions",
    "vllm:request_prefill_kv_computed_tokens",
)


class ReplicaMetricsTimeline:
    """One replica's vLLM `/metrics` page at any simulated time, precomputed for fast renders.

    replica: the ReplicaRecord; requests: RequestRecords (other replicas' are skipped).
    config: the ReplicaConfig it ran with (block size, prefix caching, max_model_len; vLLM's
        defaults without it). max_model_len overrides the config's (it sets the 1-2-5 buckets).
    gpu_memory_utilization, cache_dtype, cache_info (extra or overriding CacheConfig labels)
        only label vllm:cache_config_info.
    created_unix_s: the server's start as Unix time; when given, the `_created` samples
        prometheus_client exports beside every counter and histogram are rendered too (ingest
        drops them either way).

    Sources: request-driven families (prompt tokens, request_success, per-request histograms,
    TTFT) come from the request records and are exact at any time; iteration_tokens_total and
    inter_token_latency_seconds from the step log (steps completed by at_s); what only the
    scheduler knows (generation tokens, prefix-cache queries and hits, preemptions) and the
    gauges from the replica's last sample at or before at_s.
    """

    def __init__(
        self,
        replica: ReplicaRecord,
        requests: Iterable[RequestRecord],
        *,
        model_name: str,
        engine: str = "0",
        config: ReplicaConfig | None = None,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.9,
        cache_dtype: str = "auto",
        cache_info: Mapping[str, str] | None = None,
        created_unix_s: float | None = None,
    ) -> None:
        if max_model_len is None:
            max_model_len = (config.scheduler if config else SchedulerConfig()).max_model_len
        if max_model_len < 1:
            raise BadInputError(f"max_model_len must be >= 1, got {max_model_len}")
        self.replica = replica
        self.model_name = model_name
        self.engine = str(engine)
        series = replica.series
        self._t = np.asarray(series["time_s"], dtype=float)
        self._gauges = np.stack(
            [np.asarray(series[c], dtype=float) for c in _GAUGE_COLUMNS]
        ).T.reshape(-1, len(_GAUGE_COLUMNS))
        self._counters = np.stack(
            [np.asarray(series[c], dtype=np.int64) for c in _COUNTER_COLUMNS]
        ).T.reshape(-1, len(_COUNTER_COLUMNS))
        b125 = build_1_2_5_buckets(max_model_len)
        self._build_requests([r for r in requests if r.replica == replica.index], b125)
        self._build_steps(replica)
        self._build_text(
            config, b125, gpu_memory_utilization, cache_dtype, cache_info, created_unix_s
        )

    @classmethod
    def from_result(
        cls, result: SimulationResult, replica: int, *, model_name: str, **kwargs: Any
    ) -> ReplicaMetricsTimeline:
        """The timeline of replica `replica` of a run, with the run's replica config."""
        kwargs.setdefault("config", result.config.replica)
        return cls(result.replicas[replica], result.requests, model_name=model_name, **kwargs)

    # -- precomputation -------------------------------------------------------------------

    def _build_requests(self, reqs: list[RequestRecord], b125: tuple[int, ...]) -> None:
        def times(attr: str) -> np.ndarray:
            values = (getattr(r, attr) for r in reqs)
            return np.array([math.nan if v is None else v for v in values], dtype=float)

        arrival, queued, finished = times("arrival_s"), times("queued_s"), times("finished_s")
        sched, first, last = (
            times("first_scheduled_s"),
            times("first_token_s"),
            times("last_token_s"),
        )
        prompt = np.array([r.prompt_tokens for r in reqs], dtype=np.int64)
        preemptions = np.array([r.num_preemptions for r in reqs], dtype=np.int64)
        cached = np.array([r.cached_tokens for r in reqs], dtype=np.int64)
        output = np.array([r.output_tokens for r in reqs], dtype=np.int64)
        n_param = np.array([int(context_value(r.context, "n") or 1) for r in reqs], dtype=np.int64)
        max_tokens = np.array(
            [int(context_value(r.context, "max_tokens") or 0) for r in reqs], dtype=np.int64
        )
        reasons = [r.finish_reason.value for r in reqs]
        # vLLM observes these for every request it finishes; the simulator for those that
        # produced a token (a rejected or never-scheduled request has no phases to observe).
        seen = (~np.isnan(first)).astype(np.int64)
        decode = last - first
        with np.errstate(invalid="ignore"):
            # Mean TPOT per request; vLLM records 0 for one generated token or none.
            tpot = np.where(output > 1, decode / np.maximum(output - 1, 1), 0.0)
        hists = (
            (b125, prompt, seen),
            (b125, output, seen),
            (b125, output, seen),  # max over the n samples of a request; n = 1 here
            (PARAMS_N_BUCKETS, n_param, seen),
            (b125, max_tokens, seen * (max_tokens > 0)),  # only when max_tokens is known
            (ITL_BUCKETS, tpot, seen),
            (REQUEST_LATENCY_BUCKETS, finished - arrival, seen),
            (REQUEST_LATENCY_BUCKETS, sched - queued, seen),
            (REQUEST_LATENCY_BUCKETS, last - sched, seen),
            (REQUEST_LATENCY_BUCKETS, first - sched, seen),
            (REQUEST_LATENCY_BUCKETS, decode, seen),
            (REQUEST_NUM_PREEMPTIONS_BUCKETS, preemptions, seen),
            (b125, prompt - cached, seen),
        )
        self._bounds = {name: h[0] for name, h in zip(_FINISHED, hists, strict=True)}
        success = [np.array([x == y for x in reasons], dtype=np.int64) for y in FINISHED_REASONS]
        self._finished = CumulativeHistograms(finished, hists, success)
        # TTFT and the prompt-token counters are recorded when the first token comes out.
        has = seen > 0
        ttft = (TTFT_BUCKETS, (first - arrival)[has], np.ones(int(has.sum()), dtype=np.int64))
        self._first = CumulativeHistograms(first[has], [ttft], [prompt[has], cached[has]])

    def _build_steps(self, replica: ReplicaRecord) -> None:
        log = replica.steps
        steps = np.asarray(log.steps, dtype=np.int64)
        n_dec = np.asarray(log.num_decode, dtype=np.int64)
        tokens = n_dec + np.asarray(log.prefill_tokens, dtype=np.int64)
        mean = np.asarray(log.duration_s, dtype=float) / np.maximum(steps, 1)
        start = np.asarray(log.start_s, dtype=float)
        self._rows = (start, mean, steps)
        self._row_dec, self._row_tokens = n_dec, tokens
        # iteration_tokens_total observes each step's tokens; inter_token_latency_seconds, for
        # each decoding sequence, the gap since its previous token: the step's duration (inside
        # a fast-forwarded stretch, the stretch's mean).
        self._steps = CumulativeHistograms(
            start + np.asarray(log.duration_s, dtype=float),
            [(ITERATION_TOKENS_BUCKETS, tokens, steps), (ITL_BUCKETS, mean, steps * n_dec)],
        )
        self._it_bucket = np.searchsorted(ITERATION_TOKENS_BUCKETS, tokens, side="left")
        self._itl_bucket = np.searchsorted(ITL_BUCKETS, mean, side="left")
        # A preempted request's first token after recompute is observed with the gap since its
        # last token before preemption. The record keeps the gaps but not when they happened:
        # the i-th gap is placed at the first sample that counts i preemptions, plus the gap,
        # and no later than the last sample (so the final page holds every gap).
        gaps = np.asarray(replica.resume_gaps_s, dtype=float)
        preempted = np.asarray(replica.series["num_preemptions"], dtype=np.int64)
        when = np.searchsorted(preempted, np.arange(1, len(gaps) + 1), side="left")
        t_last = self._t[-1] if len(self._t) else math.inf
        at = np.append(self._t, t_last)[np.minimum(when, len(self._t))] + gaps
        ones = np.ones(len(gaps), dtype=np.int64)
        self._resume = CumulativeHistograms(np.minimum(at, t_last), [(ITL_BUCKETS, gaps, ones)])

    def _build_text(
        self,
        config: ReplicaConfig | None,
        b125: tuple[int, ...],
        gpu_memory_utilization: float,
        cache_dtype: str,
        cache_info: Mapping[str, str] | None,
        created_unix_s: float | None,
    ) -> None:
        base = {"model_name": self.model_name, "engine": self.engine}
        lab = _labels(base)
        created_value = None if created_unix_s is None else floatToGoString(created_unix_s)

        def created(name: str, label_sets: Sequence[Mapping[str, str]]) -> str:
            if created_value is None:
                return ""
            text = _header(f"{name}_created", "gauge", HELP_TEXTS[name])
            return text + "".join(
                f"{name}_created{{{_labels(s)}}} {created_value}\n" for s in label_sets
            )

        # One entry per family: (header, line prefixes, trailer). A counter's prefixes are its
        # `_total` lines, a histogram's its buckets then _count then _sum.
        self._text: dict[str, tuple[str, tuple[str, ...], str]] = {}
        for name in _GAUGES:
            self._text[name] = (
                _header(name, "gauge", HELP_TEXTS[name]),
                (f"{name}{{{lab}}} ",),
                "",
            )
        for name in _COUNTERS:
            exported = f"{name}_total"
            self._text[name] = (
                _header(exported, "counter", HELP_TEXTS[name]),
                (f"{exported}{{{lab}}} ",),
                created(name, [base]),
            )
        for name, (key, values, typ) in _LABELLED.items():
            # admission_rejections is the API server's, not an engine's: no engine label.
            common = {"model_name": self.model_name} if name in _NO_ENGINE else base
            sets = [{**common, key: v} for v in values]
            exported = f"{name}_total" if typ == "counter" else name
            self._text[name] = (
                _header(exported, typ, HELP_TEXTS[name]),
                tuple(f"{exported}{{{_labels(s)}}} " for s in sets),
                created(name, sets) if typ == "counter" else "",
            )
        bounds = {
            **self._bounds,
            "vllm:iteration_tokens_total": ITERATION_TOKENS_BUCKETS,
            "vllm:time_to_first_token_seconds": TTFT_BUCKETS,
            "vllm:inter_token_latency_seconds": ITL_BUCKETS,
        }
        for name, bs in bounds.items():
            prefixes = [
                f"{name}_bucket{{{_labels({**base, 'le': floatToGoString(float(b))})}}} "
                for b in (*bs, math.inf)
            ]
            prefixes += [f"{name}_count{{{lab}}} ", f"{name}_sum{{{lab}}} "]
            self._text[name] = (
                _header(name, "histogram", HELP_TEXTS[name]),
                tuple(prefixes),
                created(name, [base]),
            )
        cache = config.cache if config is not None else None
        info = {
            # CacheConfig.metrics_info() of vLLM c1d86421: every field, stringified.
            "block_size": str(cache.block_size if cache else 16),
            "gpu_memory_utilization": str(gpu_memory_utilization),
            "swap_space": "4",
            "cache_dtype": cache_dtype,
            "is_attention_free": "False",
            "num_gpu_blocks_override": "None",
            "sliding_window": "None",
            "enable_prefix_caching": str(cache.enable_prefix_caching if cache else True),
            "prefix_caching_hash_algo": "sha256",
            "cpu_offload_gb": "0",
            "calculate_kv_scales": "False",
            "cpu_kvcache_space_bytes": "None",
            "mamba_page_size_padded": "None",
            "mamba_block_size": "None",
            "mamba_cache_dtype": "auto",
            "mamba_ssm_cache_dtype": "auto",
            "num_gpu_blocks": str(self.replica.num_gpu_blocks),
            "num_cpu_blocks": "0",
            "kv_sharing_fast_prefill": "False",
            "kv_cache_memory_bytes": "None",
            "kv_offloading_size": "None",
            "kv_offloading_backend": "None",
            **{str(k): str(v) for k, v in (cache_info or {}).items()},
            "engine": self.engine,
        }
        self._cache_info = (
            _header("vllm:cache_config_info", "gauge", HELP_TEXTS["vllm:cache_config_info"])
            + f"vllm:cache_config_info{{{_labels(info)}}} 1.0\n"
        )

    # -- reading --------------------------------------------------------------------------

    def snapshot(self, at_s: float) -> dict[str, Any]:
        """Every value of the page at at_s, keyed by family (what render() writes).

        Gauges and counters are numbers (request_success a dict by finished_reason);
        histograms are (cumulative bucket counts with +Inf last, sum).
        """
        i = int(np.searchsorted(self._t, at_s, side="right")) - 1
        running, waiting, kv = self._gauges[i].tolist() if i >= 0 else (0.0, 0.0, 0.0)
        queries, hits, preemptions, generation = (
            self._counters[i].tolist() if i >= 0 else (0, 0, 0, 0)
        )
        fin, first, steps, res = self._finished, self._first, self._steps, self._resume
        pf, p1, ps, pr = (h.position(at_s) for h in (fin, first, steps, res))
        per = steps.per_bucket(ps)
        sums = steps.sums[:, ps].copy()
        start, mean, count = self._rows
        if ps < len(start) and start[ps] < at_s:
            # The step or stretch in flight: its steps completed by at_s (at the stretch mean).
            done = min(int(count[ps]) - 1, int((at_s - start[ps]) / mean[ps]))
            if done > 0:
                per[steps.offsets[0] + self._it_bucket[ps]] += done
                sums[0] += done * float(self._row_tokens[ps])
                decoding = done * int(self._row_dec[ps])
                per[steps.offsets[1] + self._itl_bucket[ps]] += decoding
                sums[1] += decoding * float(mean[ps])
        per[steps.offsets[1] :] += res.per_bucket(pr)
        sums[1] += res.sums[0, pr]
        it, itl = steps.split(steps.cumulate(per), sums)
        finished = fin.split(fin.cumulate(fin.per_bucket(pf)), fin.sums[:, pf])
        prompt, cached = first.counters[:, p1].tolist()
        values: dict[str, Any] = {
            "vllm:num_requests_running": running,
            "vllm:num_requests_waiting": waiting,
            "vllm:kv_cache_usage_perc": kv,
            "vllm:prefix_cache_queries": queries,
            "vllm:prefix_cache_hits": hits,
            "vllm:num_preemptions": preemptions,
            "vllm:prompt_tokens": prompt,
            "vllm:prompt_tokens_cached": cached,
            "vllm:generation_tokens": generation,
            "vllm:request_success": dict(
                zip(FINISHED_REASONS, fin.counters[:, pf].tolist(), strict=True)
            ),
            "vllm:iteration_tokens_total": it,
            "vllm:inter_token_latency_seconds": itl,
            "vllm:time_to_first_token_seconds": first.split(
                first.cumulate(first.per_bucket(p1)), first.sums[:, p1]
            )[0],
        }
        values.update(zip(_FINISHED, finished, strict=True))
        return values

    def render(self, at_s: float, histogram_buckets: bool = True) -> str:
        """The `/metrics` text (Prometheus text format 0.0.4) at simulated time at_s.

        ``histogram_buckets=False`` leaves out the histograms' ``_bucket`` lines (their
        ``_count`` and ``_sum`` stay): the demo's coarse older history, which no page reads
        buckets from (inferledger/demo/batches.py says what it trades)."""
        v = self.snapshot(at_s)
        text = self._text
        out: list[str] = []
        waiting = v["vllm:num_requests_waiting"]
        prompt, cached = v["vllm:prompt_tokens"], v["vllm:prompt_tokens_cached"]
        labelled = {
            "vllm:num_requests_waiting_by_reason": (waiting, 0.0),
            "vllm:engine_sleep_state": (1.0, 0.0, 0.0),
            "vllm:prompt_tokens_by_source": (prompt - cached, cached, 0),
            # counted from the scheduler's prefix-cache hits, all from the device tier here
            "vllm:prompt_tokens_cached_by_source": (v["vllm:prefix_cache_hits"], 0, 0, 0, 0),
            "vllm:admission_rejections": (0, 0),  # no queue limits are set
            "vllm:request_success": tuple(v["vllm:request_success"].values()),
        }
        for name in _ORDER:
            header, prefixes, trailer = text[name]
            out.append(header)
            if name in labelled:
                values = labelled[name]
            elif name in _HISTOGRAMS:
                buckets, total = v[name]
                if not histogram_buckets:
                    prefixes = prefixes[-2:]  # _count, _sum
                    values = (buckets[-1], total)
                else:
                    values = (*buckets, buckets[-1], total)
            else:
                values = (v.get(name, 0),)
            out.extend([p + _num(x) + "\n" for p, x in zip(prefixes, values, strict=True)])
            out.append(trailer)
        out.append(self._cache_info)
        return "".join(out)


_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
_COUNTERS = (
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:external_prefix_cache_queries",  # no KV connector: always 0
    "vllm:external_prefix_cache_hits",
    "vllm:mm_cache_queries",  # text only: always 0
    "vllm:mm_cache_hits",
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:prompt_tokens_cached",
    "vllm:generation_tokens",
)
_LABELLED = {
    "vllm:num_requests_waiting_by_reason": ("reason", ("capacity", "deferred"), "gauge"),
    "vllm:engine_sleep_state": (
        "sleep_state",
        ("awake", "weights_offloaded", "discard_all"),
        "gauge",
    ),
    "vllm:prompt_tokens_by_source": (
        "source",
        ("local_compute", "local_cache_hit", "external_kv_transfer"),
        "counter",
    ),
    "vllm:request_success": ("finished_reason", FINISHED_REASONS, "counter"),
    "vllm:prompt_tokens_cached_by_source": ("source", CACHE_HIT_SOURCES, "counter"),
    "vllm:admission_rejections": ("reason", ADMISSION_REASONS, "counter"),
}
_NO_ENGINE = frozenset({"vllm:admission_rejections"})
_HISTOGRAMS = frozenset(
    (*_FINISHED, "vllm:iteration_tokens_total", "vllm:time_to_first_token_seconds",
     "vllm:inter_token_latency_seconds")
)  # fmt: skip
# Registration order of vLLM's PrometheusStatLogger (loggers.py at ea5790cc, and the families
# vLLM 0.33.0 added), which is the order prometheus_client exports in; vllm:cache_config_info
# comes last (log_engine_initialized).
_ORDER = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:engine_sleep_state",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits",
    "vllm:mm_cache_queries",
    "vllm:mm_cache_hits",
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:prompt_tokens_by_source",
    "vllm:prompt_tokens_cached",
    "vllm:prompt_tokens_cached_by_source",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:admission_rejections",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:iteration_tokens_total",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_n",
    "vllm:request_params_max_tokens",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_num_preemptions",
    "vllm:request_prefill_kv_computed_tokens",
)
HELP_TEXTS = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:num_requests_waiting_by_reason": (
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
        "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV "
        "transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting."
    ),
    "vllm:engine_sleep_state": (
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
        "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
    ),
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:external_prefix_cache_queries": (
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms "
        "of number of queried tokens."
    ),
    "vllm:external_prefix_cache_hits": (
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
        "number of cached tokens."
    ),
    "vllm:mm_cache_queries": "Multi-modal cache queries, in terms of number of queried items.",
    "vllm:mm_cache_hits": "Multi-modal cache hits, in terms of number of cached items.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:prompt_tokens_by_source": "Number of prompt tokens by source.",
    "vllm:prompt_tokens_cached": "Number of cached prompt tokens (local + external).",
    "vllm:prompt_tokens_cached_by_source": (
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
        "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
        "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
        "vllm:external_prefix_cache_hits."
    ),
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:admission_rejections": (
        "Number of admission attempts rejected by a queue limit, by reason."
    ),
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
    "vllm:request_max_num_generation_tokens": (
        "Histogram of maximum number of requested generation tokens."
    ),
    "vllm:request_params_n": "Histogram of the n request parameter.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:request_time_per_output_token_seconds": (
        "Histogram of time_per_output_token_seconds per request."
    ),
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:request_num_preemptions": "Histogram of the number of times a request was preempted.",
    "vllm:request_prefill_kv_computed_tokens": (
        "Histogram of new KV tokens computed during prefill (excluding cached tokens)."
    ),
    "vllm:cache_config_info": "Information of the LLMEngine CacheConfig",
}


def render_vllm_metrics(
    replica_record: ReplicaRecord,
    at_s: float,
    *,
    requests: Iterable[RequestRecord],
    model_name: str,
    engine: str = "0",
    max_model_len: int | None = None,
    config: ReplicaConfig | None = None,
) -> str:
    """One render of a replica's `/metrics` at at_s. It builds a ReplicaMetricsTimeline each
    call: to render many times, build the timeline once and call its render()."""
    timeline = ReplicaMetricsTimeline(
        replica_record,
        requests,
        model_name=model_name,
        engine=engine,
        config=config,
        max_model_len=max_model_len,
    )
    return timeline.render(at_s)
