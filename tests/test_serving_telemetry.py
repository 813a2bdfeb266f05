"""What the simulator emits: vLLM's /metrics page, dcgm-exporter's page and vLLM's spans.

Every page is parsed by ingest.prom_text (what the scraper runs) and every span decoded by
ingest.otlp_decode. The /metrics page is checked against the simulator's own counters, against
the text prometheus_client itself writes for the same observations, over time (counters never
decrease, buckets are cumulative) and in a hand-worked case.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.utils import floatToGoString

from ingest import otlp_decode
from ingest.otlp_decode import decode_traces
from ingest.prom_text import parse_exposition
from models.model_catalog import DEFAULT_OVERHEAD_BYTES, make_profile
from models.serving import (
    AffineStepTimePredictor,
    CacheConfig,
    Cluster,
    ClusterConfig,
    FinishReason,
    ReplicaConfig,
    RequestSpec,
    RouterPolicy,
    SchedulerConfig,
    SimulationOptions,
)
from models.serving.telemetry import (
    GpuMetricsTimeline,
    ReplicaMetricsTimeline,
    engine_spans,
    parse_traceparent,
    render_dcgm_metrics,
    render_vllm_metrics,
)
from models.serving.vllm_metrics import (
    ADMISSION_REASONS,
    CACHE_HIT_SOURCES,
    FINISHED_REASONS,
    HELP_TEXTS,
    ITERATION_TOKENS_BUCKETS,
    ITL_BUCKETS,
    PARAMS_N_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    REQUEST_NUM_PREEMPTIONS_BUCKETS,
    TTFT_BUCKETS,
    build_1_2_5_buckets,
)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
EPOCH_NS = 1_780_000_000_000_000_000
NOW = datetime(2026, 5, 28, tzinfo=UTC)
PREDICTOR = AffineStepTimePredictor(
    base_s=0.005, per_decode_seq_s=2e-4, per_prefill_token_s=2e-5, per_context_token_s=1e-8
)
MAX_MODEL_LEN = 2048
TRACE = "0af7651916cd43dd8448eb211c80319c"


def _workload() -> list[RequestSpec]:
    """300 requests at ~40/s: shared prefixes, stop and length finishes, one too long to serve,
    traceparents on some, sampling parameters on others."""
    rng = np.random.default_rng(7)
    specs, t = [], 0.0
    for i in range(300):
        t += float(rng.exponential(1 / 40))
        prefix = ("sys", 256) if i % 3 else (f"doc-{i % 5}", 700)
        prompt = (prefix, (f"r{i}", int(rng.integers(20, 400))))
        out = int(rng.integers(1, 120))
        context: dict[str, object] = {"max_tokens": out if i % 4 else out + 50}
        if i % 7 == 0:
            context["traceparent"] = f"00-{TRACE[:-4]}{i:04x}-{i + 1:016x}-01"
            context["tracestate"] = "vendor=sim"
        context["temperature"] = 0.0 if i % 2 else 0.7
        context["top_p"] = 0.9
        if i == 150:
            prompt = (("huge", 3000),)  # longer than max_model_len: rejected
        specs.append(
            RequestSpec(
                f"r{i}", t, prompt, out, max_tokens=int(context["max_tokens"]), context=context
            )
        )
    return specs


def _run():
    config = ClusterConfig(
        ReplicaConfig(CacheConfig(400), SchedulerConfig(max_model_len=MAX_MODEL_LEN)),
        num_replicas=2,
        router=RouterPolicy.LEAST_OUTSTANDING_REQUESTS,
    )
    options = SimulationOptions(sample_interval_s=0.5)
    return Cluster(config, PREDICTOR, options).run(_workload())


@pytest.fixture(scope="module")
def result():
    res = _run()
    # The fixture must exercise preemption (resume gaps), the prefix cache and rejection.
    assert sum(r.counters.num_preemptions for r in res.replicas) > 0
    assert sum(len(r.resume_gaps_s) for r in res.replicas) > 0
    assert sum(r.counters.prefix_cache_hits for r in res.replicas) > 0
    assert any(r.finish_reason is FinishReason.ERROR for r in res.requests)
    assert {r.finish_reason for r in res.requests} >= {FinishReason.STOP, FinishReason.LENGTH}
    return res


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    table = parse_exposition(text, "text/plain; version=0.0.4", NOW).to_pylist()
    return {(row["metric"], tuple(sorted(row["labels"]))): row["value"] for row in table}


def _value(samples, metric: str, **labels: str) -> float:
    key = (metric, tuple(sorted({"model_name": MODEL, "engine": "0", **labels}.items())))
    return samples[key]


def _timeline(result, i: int, **kwargs) -> ReplicaMetricsTimeline:
    return ReplicaMetricsTimeline.from_result(result, i, model_name=MODEL, **kwargs)


# -- vLLM /metrics -----------------------------------------------------------------------------


@pytest.mark.parametrize("replica", [0, 1])
def test_final_page_equals_the_simulators_counters(result, replica):
    rep = result.replicas[replica]
    c = rep.counters
    s = _samples(_timeline(result, replica).render(result.end_s))
    v = lambda metric, **kw: _value(s, metric, **kw)  # noqa: E731
    assert v("vllm:prompt_tokens_total") == c.prompt_tokens
    assert v("vllm:prompt_tokens_cached_total") == c.prompt_tokens_cached
    assert v("vllm:prompt_tokens_by_source_total", source="local_cache_hit") == (
        c.prompt_tokens_cached
    )
    assert v("vllm:prompt_tokens_by_source_total", source="local_compute") == (
        c.prompt_tokens - c.prompt_tokens_cached
    )
    assert v("vllm:generation_tokens_total") == c.generation_tokens
    assert v("vllm:prefix_cache_queries_total") == c.prefix_cache_queries
    assert v("vllm:prefix_cache_hits_total") == c.prefix_cache_hits
    assert v("vllm:num_preemptions_total") == c.num_preemptions
    assert v("vllm:prompt_tokens_cached_by_source_total", source="device") == c.prefix_cache_hits
    assert v("vllm:prompt_tokens_cached_by_source_total", source="p2p") == 0
    rejections = (("model_name", MODEL), ("reason", "max_num_queued_reqs"))  # no engine label
    assert s[("vllm:admission_rejections_total", rejections)] == 0
    for reason in FINISHED_REASONS:
        expected = getattr(c, f"request_success_{reason}", 0)
        assert v("vllm:request_success_total", finished_reason=reason) == expected
    assert v("vllm:iteration_tokens_total_count") == c.num_steps
    assert v("vllm:iteration_tokens_total_sum") == c.iteration_tokens
    assert v("vllm:inter_token_latency_seconds_count") == (
        c.decode_computed_tokens + len(rep.resume_gaps_s)
    )
    mine = [r for r in result.requests if r.replica == replica and r.first_token_s is not None]
    assert v("vllm:e2e_request_latency_seconds_count") == len(mine)
    assert v("vllm:e2e_request_latency_seconds_sum") == pytest.approx(sum(r.e2e_s for r in mine))
    assert v("vllm:time_to_first_token_seconds_sum") == pytest.approx(sum(r.ttft_s for r in mine))
    assert v("vllm:request_queue_time_seconds_sum") == pytest.approx(sum(r.queue_s for r in mine))
    assert v("vllm:request_prefill_kv_computed_tokens_sum") == sum(
        r.prompt_tokens - r.cached_tokens for r in mine
    )
    assert v("vllm:request_params_max_tokens_sum") == sum(r.context["max_tokens"] for r in mine)
    assert v("vllm:request_params_n_count") == len(mine)
    assert v("vllm:request_num_preemptions_sum") == sum(r.num_preemptions for r in mine)
    assert v("vllm:kv_cache_usage_perc") == rep.series["kv_cache_usage"][-1]
    assert v("vllm:num_requests_running") == 0 and v("vllm:num_requests_waiting") == 0
    info = [k for k in s if k[0] == "vllm:cache_config_info"]
    assert len(info) == 1
    labels = dict(info[0][1])
    assert labels["num_gpu_blocks"] == "400" and labels["block_size"] == "16"
    assert labels["enable_prefix_caching"] == "True" and labels["engine"] == "0"


def _vllm_registry(timeline: ReplicaMetricsTimeline, result, at_s: float) -> CollectorRegistry:
    """vLLM's PrometheusStatLogger declarations (loggers.py), fed the simulator's observations
    as vLLM would record them."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    lv = (MODEL, "0")

    def gauge(name, extra=None):
        return Gauge(name, HELP_TEXTS[name], labels + ([extra] if extra else []), registry=reg)

    def counter(name, extra=None):
        return Counter(name, HELP_TEXTS[name], labels + ([extra] if extra else []), registry=reg)

    def hist(name, buckets):
        return Histogram(name, HELP_TEXTS[name], labels, buckets=buckets, registry=reg).labels(*lv)

    b125 = build_1_2_5_buckets(MAX_MODEL_LEN)
    rep = timeline.replica
    i = int(np.searchsorted(rep.series["time_s"], at_s, side="right")) - 1
    col = lambda name: rep.series[name][i]  # noqa: E731
    gauge("vllm:num_requests_running").labels(*lv).set(col("num_running"))
    gauge("vllm:num_requests_waiting").labels(*lv).set(col("num_waiting"))
    by_reason = gauge("vllm:num_requests_waiting_by_reason", "reason")
    by_reason.labels(*lv, "capacity").set(col("num_waiting"))
    by_reason.labels(*lv, "deferred").set(0)
    sleep = gauge("vllm:engine_sleep_state", "sleep_state")
    for state, value in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
        sleep.labels(*lv, state).set(value)
    gauge("vllm:kv_cache_usage_perc").labels(*lv).set(col("kv_cache_usage"))
    counter("vllm:prefix_cache_queries").labels(*lv).inc(col("prefix_cache_queries"))
    counter("vllm:prefix_cache_hits").labels(*lv).inc(col("prefix_cache_hits"))
    for name in ("external_prefix_cache_queries", "external_prefix_cache_hits"):
        counter(f"vllm:{name}").labels(*lv)
    counter("vllm:mm_cache_queries").labels(*lv)
    counter("vllm:mm_cache_hits").labels(*lv)
    counter("vllm:num_preemptions").labels(*lv).inc(col("num_preemptions"))
    mine = [r for r in result.requests if r.replica == rep.index]
    started = sorted(
        (r for r in mine if r.first_token_s is not None and r.first_token_s <= at_s),
        key=lambda r: r.first_token_s,
    )
    prompt = sum(r.prompt_tokens for r in started)
    cached = sum(r.cached_tokens for r in started)
    counter("vllm:prompt_tokens").labels(*lv).inc(prompt)
    by_source = counter("vllm:prompt_tokens_by_source", "source")
    by_source.labels(*lv, "local_compute").inc(prompt - cached)
    by_source.labels(*lv, "local_cache_hit").inc(cached)
    by_source.labels(*lv, "external_kv_transfer")
    counter("vllm:prompt_tokens_cached").labels(*lv).inc(cached)
    # vLLM 0.33.0: every tier's series exists; the device tier counts the scheduler's hits.
    by_tier = counter("vllm:prompt_tokens_cached_by_source", "source")
    for source in CACHE_HIT_SOURCES:
        by_tier.labels(*lv, source)
    by_tier.labels(*lv, "device").inc(col("prefix_cache_hits"))
    counter("vllm:generation_tokens").labels(*lv).inc(col("generation_tokens"))
    success = counter("vllm:request_success", "finished_reason")
    children = {reason: success.labels(*lv, reason) for reason in FINISHED_REASONS}
    # The API server's admission counter: model_name and reason, no engine label.
    rejections = Counter(
        "vllm:admission_rejections",
        HELP_TEXTS["vllm:admission_rejections"],
        ["model_name", "reason"],
        registry=reg,
    )
    for reason in ADMISSION_REASONS:
        rejections.labels(MODEL, reason)
    h = {
        "vllm:request_prompt_tokens": hist("vllm:request_prompt_tokens", b125),
        "vllm:request_generation_tokens": hist("vllm:request_generation_tokens", b125),
        "vllm:iteration_tokens_total": hist(
            "vllm:iteration_tokens_total", ITERATION_TOKENS_BUCKETS
        ),
        "vllm:request_max_num_generation_tokens": hist(
            "vllm:request_max_num_generation_tokens", b125
        ),
        "vllm:request_params_n": hist("vllm:request_params_n", PARAMS_N_BUCKETS),
        "vllm:request_params_max_tokens": hist("vllm:request_params_max_tokens", b125),
        "vllm:time_to_first_token_seconds": hist("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
        "vllm:inter_token_latency_seconds": hist("vllm:inter_token_latency_seconds", ITL_BUCKETS),
        "vllm:request_time_per_output_token_seconds": hist(
            "vllm:request_time_per_output_token_seconds", ITL_BUCKETS
        ),
    }
    for name in (
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "request_inference_time_seconds",
        "request_prefill_time_seconds",
        "request_decode_time_seconds",
    ):
        h[f"vllm:{name}"] = hist(f"vllm:{name}", REQUEST_LATENCY_BUCKETS)
    h["vllm:request_num_preemptions"] = hist(
        "vllm:request_num_preemptions", REQUEST_NUM_PREEMPTIONS_BUCKETS
    )
    h["vllm:request_prefill_kv_computed_tokens"] = hist(
        "vllm:request_prefill_kv_computed_tokens", b125
    )
    for r in started:
        h["vllm:time_to_first_token_seconds"].observe(r.ttft_s)
    for r in sorted((r for r in mine if r.finished_s <= at_s), key=lambda r: r.finished_s):
        children[r.finish_reason.value].inc()
        if r.first_token_s is None:
            continue
        h["vllm:e2e_request_latency_seconds"].observe(r.e2e_s)
        h["vllm:request_queue_time_seconds"].observe(r.queue_s)
        h["vllm:request_prefill_time_seconds"].observe(r.first_token_s - r.first_scheduled_s)
        h["vllm:request_inference_time_seconds"].observe(r.last_token_s - r.first_scheduled_s)
        decode = r.last_token_s - r.first_token_s
        h["vllm:request_decode_time_seconds"].observe(decode)
        h["vllm:request_num_preemptions"].observe(r.num_preemptions)
        h["vllm:request_prefill_kv_computed_tokens"].observe(r.prompt_tokens - r.cached_tokens)
        h["vllm:request_prompt_tokens"].observe(r.prompt_tokens)
        h["vllm:request_generation_tokens"].observe(r.output_tokens)
        tpot = decode / (r.output_tokens - 1) if r.output_tokens > 1 else 0
        h["vllm:request_time_per_output_token_seconds"].observe(tpot)
        h["vllm:request_max_num_generation_tokens"].observe(r.output_tokens)
        h["vllm:request_params_n"].observe(1)
        h["vllm:request_params_max_tokens"].observe(r.context["max_tokens"])
    log = rep.steps
    for k in range(len(log.start_s)):
        assert log.start_s[k] + log.duration_s[k] <= at_s  # render at the end: every step done
        steps = int(log.steps[k])
        for _ in range(steps):
            h["vllm:iteration_tokens_total"].observe(int(log.iteration_tokens[k]))
            for _ in range(int(log.num_decode[k])):
                h["vllm:inter_token_latency_seconds"].observe(log.duration_s[k] / steps)
    for gap in rep.resume_gaps_s:
        h["vllm:inter_token_latency_seconds"].observe(gap)
    # CacheConfig.metrics_info() (reference §1e), registered once the engine is up
    info = dict.fromkeys(CACHE_CONFIG_FIELDS, "None")
    info.update(
        block_size="16",
        gpu_memory_utilization="0.9",
        swap_space="4",
        cache_dtype="auto",
        is_attention_free="False",
        enable_prefix_caching="True",
        prefix_caching_hash_algo="sha256",
        cpu_offload_gb="0",
        calculate_kv_scales="False",
        mamba_cache_dtype="auto",
        mamba_ssm_cache_dtype="auto",
        num_gpu_blocks=str(rep.num_gpu_blocks),
        num_cpu_blocks="0",
        kv_sharing_fast_prefill="False",
        engine="0",
    )
    Gauge(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        list(info),
        registry=reg,
    ).labels(**info).set(1)
    return reg


CACHE_CONFIG_FIELDS = (
    "block_size",
    "gpu_memory_utilization",
    "swap_space",
    "cache_dtype",
    "is_attention_free",
    "num_gpu_blocks_override",
    "sliding_window",
    "enable_prefix_caching",
    "prefix_caching_hash_algo",
    "cpu_offload_gb",
    "calculate_kv_scales",
    "cpu_kvcache_space_bytes",
    "mamba_page_size_padded",
    "mamba_block_size",
    "mamba_cache_dtype",
    "mamba_ssm_cache_dtype",
    "num_gpu_blocks",
    "num_cpu_blocks",
    "kv_sharing_fast_prefill",
    "kv_cache_memory_bytes",
    "kv_offloading_size",
    "kv_offloading_backend",
)


def test_page_is_exactly_what_prometheus_client_writes(result):
    created = 1_780_000_000.0
    timeline = _timeline(result, 0, created_unix_s=created)
    at = result.end_s
    expected = generate_latest(_vllm_registry(timeline, result, at)).decode()
    # prometheus_client stamps _created with the wall clock; ours is the server's start.
    expected = re.sub(
        r"^(\S+_created\{[^}]*\}) \S+$",
        lambda m: f"{m.group(1)} {floatToGoString(created)}",
        expected,
        flags=re.MULTILINE,
    )
    lines = timeline.render(at).splitlines()
    want = expected.splitlines()
    assert len(lines) == len(want)
    for got, exp in zip(lines, want, strict=True):
        if got.startswith("#") or "_sum{" not in got:
            assert got == exp
        else:  # float sums: same terms, possibly added in another order
            g_name, g_value = got.rsplit(" ", 1)
            e_name, e_value = exp.rsplit(" ", 1)
            assert g_name == e_name and float(g_value) == pytest.approx(float(e_value), rel=1e-12)


def test_help_texts_and_buckets_are_vllms():
    # From vllm/v1/metrics/loggers.py (ea5790cc) and reference §1c.
    assert HELP_TEXTS["vllm:num_preemptions"] == "Cumulative number of preemption from the engine."
    assert HELP_TEXTS["vllm:prompt_tokens"] == "Number of prefill tokens processed."
    assert HELP_TEXTS["vllm:e2e_request_latency_seconds"] == (
        "Histogram of e2e request latency in seconds."
    )
    assert TTFT_BUCKETS[0] == 0.001 and TTFT_BUCKETS[-3:] == (160.0, 640.0, 2560.0)
    assert len(TTFT_BUCKETS) == 22 and len(ITL_BUCKETS) == 19
    assert len(REQUEST_LATENCY_BUCKETS) == 21 and REQUEST_LATENCY_BUCKETS[-1] == 7680.0
    assert build_1_2_5_buckets(100) == (1, 2, 5, 10, 20, 50, 100)
    assert build_1_2_5_buckets(131072)[-1] == 100000


def test_counters_never_decrease_and_buckets_are_cumulative(result):
    timeline = _timeline(result, 1)
    previous: dict = {}
    for at in np.linspace(result.start_s - 1, result.end_s + 1, 37):
        table = parse_exposition(timeline.render(float(at)), "text/plain", NOW).to_pylist()
        buckets: dict[str, list[tuple[float, float]]] = {}
        counts = {}
        for row in table:
            key = (row["metric"], row["series_key"], row["le"])
            if row["type"] in ("counter", "histogram"):
                assert row["value"] >= previous.get(key, 0.0), key
                previous[key] = row["value"]
            if row["le"] is not None:
                buckets.setdefault(row["family"], []).append((row["le"], row["value"]))
            if row["metric"].endswith("_count"):
                counts[row["family"]] = row["value"]
        assert len(buckets) == 16
        for family, series in buckets.items():
            les = [le for le, _ in series]
            values = [value for _, value in series]
            assert les == sorted(les) and les[-1] == math.inf
            assert values == sorted(values), family
            assert values[-1] == counts[family]


def test_pages_and_spans_are_identical_on_rerun(result):
    again = _run()
    for i in (0, 1):
        a, b = _timeline(result, i), _timeline(again, i)
        for at in (0.5, result.end_s / 2, result.end_s):
            assert a.render(at) == b.render(at)
    first = engine_spans(result.requests, epoch_ns=EPOCH_NS).SerializeToString()
    assert first == engine_spans(again.requests, epoch_ns=EPOCH_NS).SerializeToString()
    assert render_vllm_metrics(
        result.replicas[0],
        3.0,
        requests=result.requests,
        model_name=MODEL,
        config=result.config.replica,
    ) == _timeline(result, 0).render(3.0)


def test_hand_worked_page():
    # step time = 10 ms + 0.1 ms per prefill token + 1 ms per decoding sequence
    pred = AffineStepTimePredictor(base_s=0.010, per_prefill_token_s=1e-4, per_decode_seq_s=1e-3)
    specs = [
        RequestSpec("a", 0.0, (("pa", 100),), 6, max_tokens=6),
        RequestSpec("b", 0.015, (("pb", 50),), 2, max_tokens=2),
    ]
    config = ClusterConfig(ReplicaConfig(CacheConfig(1000)))
    res = Cluster(config, pred, SimulationOptions(sample_interval_s=0.01)).run(specs)
    # [0, .020) a prefills 100; [.020, .036) a decodes, b prefills 50 (b's first token);
    # [.036, .048) both decode (b done, 2 tokens); then a alone, 11 ms a step, done at .081.
    timeline = ReplicaMetricsTimeline.from_result(res, 0, model_name=MODEL)
    s = _samples(timeline.render(0.0505))
    v = lambda metric, **kw: _value(s, metric, **kw)  # noqa: E731
    assert v("vllm:prompt_tokens_total") == 150
    assert v("vllm:generation_tokens_total") == 5  # a: .020 .036 .048; b: .036 .048
    assert v("vllm:request_success_total", finished_reason="length") == 1
    assert v("vllm:e2e_request_latency_seconds_count") == 1
    assert v("vllm:e2e_request_latency_seconds_sum") == pytest.approx(0.033)
    assert v("vllm:time_to_first_token_seconds_count") == 2
    assert v("vllm:time_to_first_token_seconds_sum") == pytest.approx(0.020 + 0.021)
    assert v("vllm:time_to_first_token_seconds_bucket", le="0.01") == 0
    assert v("vllm:time_to_first_token_seconds_bucket", le="0.04") == 2
    # steps of 100, 51 and 2 tokens; a's stretch from .048 has no step done by .0505
    assert v("vllm:iteration_tokens_total_count") == 3
    assert v("vllm:iteration_tokens_total_sum") == 153
    assert v("vllm:iteration_tokens_total_bucket", le="1.0") == 0
    assert v("vllm:iteration_tokens_total_bucket", le="8.0") == 1
    assert v("vllm:iteration_tokens_total_bucket", le="64.0") == 2
    assert v("vllm:iteration_tokens_total_bucket", le="128.0") == 3
    # ITL: a 16 ms (step 2), a and b 12 ms (step 3)
    assert v("vllm:inter_token_latency_seconds_count") == 3
    assert v("vllm:inter_token_latency_seconds_sum") == pytest.approx(0.040)
    assert v("vllm:inter_token_latency_seconds_bucket", le="0.01") == 0
    assert v("vllm:inter_token_latency_seconds_bucket", le="0.025") == 3
    assert v("vllm:num_requests_running") == 1 and v("vllm:num_requests_waiting") == 0
    # inside a's stretch: at .0705 two of its three 11 ms steps are done
    s = _samples(timeline.render(0.0705))
    assert _value(s, "vllm:inter_token_latency_seconds_count") == 5
    assert _value(s, "vllm:iteration_tokens_total_count") == 5
    end = _samples(timeline.render(0.081))
    assert _value(end, "vllm:inter_token_latency_seconds_sum") == pytest.approx(0.073)
    assert _value(end, "vllm:request_success_total", finished_reason="length") == 2
    assert _value(end, "vllm:request_time_per_output_token_seconds_sum") == pytest.approx(
        (0.081 - 0.020) / 5 + (0.048 - 0.036) / 1
    )


def test_before_the_first_request_the_page_is_all_zero(result):
    s = _samples(_timeline(result, 0).render(-10.0))
    nonzero = {(m, dict(labels).get("sleep_state")) for (m, labels), value in s.items() if value}
    assert nonzero == {("vllm:engine_sleep_state", "awake"), ("vllm:cache_config_info", None)}


# -- spans -------------------------------------------------------------------------------------


def _decoded(request, use_c=False):
    out = decode_traces(request.SerializeToString(), use_c=use_c)
    assert out.rejected_spans == 0 and out.errors == ()
    return out


@pytest.mark.parametrize(
    "use_c",
    [
        False,
        pytest.param(
            True, marks=pytest.mark.skipif(not otlp_decode.ACCELERATED, reason="no C decoder")
        ),
    ],
)
def test_spans_decode_with_ids_parents_and_vllms_attributes(result, use_c):
    request = engine_spans(
        result.requests,
        epoch_ns=EPOCH_NS,
        model_name=MODEL,
        resource={"deployment.environment.name": "sim", "service.instance.id": "replica-0"},
    )
    decoded = _decoded(request, use_c)
    traced = [r for r in result.requests if r.succeeded]
    assert decoded.total_spans == len(traced) < len(result.requests)  # the rejection has none
    resource = dict(decoded.resources.to_pylist()[0]["resource_attributes"])
    assert resource == {
        "service.name": "vllm",
        "deployment.environment.name": "sim",
        "service.instance.id": "replica-0",
    }
    assert decoded.scopes.to_pylist()[0]["scope_name"] == "vllm.llm_engine"
    rows = {dict(row["attributes"])["gen_ai.request.id"]: row for row in decoded.spans.to_pylist()}
    assert len({row["span_id"] for row in rows.values()}) == len(traced)
    for r in traced:
        row = rows[r.request_id]
        a = dict(row["attributes"])
        assert row["name"] == "llm_request" and row["kind"] == 2  # SPAN_KIND_SERVER
        assert row["start_ns"] == EPOCH_NS + round(r.arrival_s * 1e9)
        assert row["end_ns"] == EPOCH_NS + round(r.finished_s * 1e9)
        assert float(a["gen_ai.latency.e2e"]) == r.e2e_s
        assert float(a["gen_ai.latency.time_to_first_token"]) == r.ttft_s
        assert float(a["gen_ai.latency.time_in_queue"]) == r.queue_s
        assert float(a["gen_ai.latency.time_in_model_prefill"]) == (
            r.first_token_s - r.first_scheduled_s
        )
        assert float(a["gen_ai.latency.time_in_model_decode"]) == r.last_token_s - r.first_token_s
        assert float(a["gen_ai.latency.time_in_model_inference"]) == (
            r.last_token_s - r.first_scheduled_s
        )
        assert int(a["gen_ai.usage.prompt_tokens"]) == r.prompt_tokens
        assert int(a["gen_ai.usage.completion_tokens"]) == r.output_tokens
        assert int(a["gen_ai.request.max_tokens"]) == r.context["max_tokens"]
        assert float(a["gen_ai.request.top_p"]) == 0.9
        if r.context["temperature"]:
            assert float(a["gen_ai.request.temperature"]) == 0.7
        else:
            assert "gen_ai.request.temperature" not in a  # vLLM drops falsy values
        assert "gen_ai.request.n" not in a and "gen_ai.usage.cached_tokens" not in a
        assert "gen_ai.response.finish_reasons" not in a and "gen_ai.response.model" not in a
        parent = r.context.get("traceparent")
        if parent:
            assert row["trace_id"] == parent.split("-")[1]
            assert row["parent_span_id"] == parent.split("-")[2]
            assert row["trace_state"] == "vendor=sim" and row["flags"] == 0x300
        else:
            assert row["parent_span_id"] is None and row["flags"] == 0x100


def test_branch_attributes_only_when_asked(result):
    request = engine_spans(result.requests, epoch_ns=EPOCH_NS, include_branch_attributes=True)
    rows = _decoded(request).spans.to_pylist()
    by_id = {r.request_id: r for r in result.requests}
    for row in rows:
        a = dict(row["attributes"])
        r = by_id[a["gen_ai.request.id"]]
        assert int(a["gen_ai.usage.cached_tokens"]) == r.cached_tokens
        assert json.loads(a["gen_ai.response.finish_reasons"]) == [r.finish_reason.value]


def test_aborted_requests_are_traced_only_on_the_branch():
    specs = [RequestSpec(f"q{i}", i * 0.01, ((f"p{i}", 500),), 400) for i in range(20)]
    config = ClusterConfig(ReplicaConfig(CacheConfig(5000), SchedulerConfig(max_num_seqs=4)))
    res = Cluster(config, PREDICTOR, SimulationOptions(horizon_s=0.5)).run(specs)
    aborted = [r for r in res.requests if r.finish_reason is FinishReason.ABORT]
    assert aborted and any(r.first_token_s is None for r in aborted)
    mainline = _decoded(engine_spans(res.requests, epoch_ns=EPOCH_NS))
    branch = _decoded(engine_spans(res.requests, epoch_ns=EPOCH_NS, include_branch_attributes=True))
    assert mainline.total_spans == len(res.requests) - len(aborted)
    assert branch.total_spans == len(res.requests)
    for row in branch.spans.to_pylist():
        a = dict(row["attributes"])
        assert float(a["gen_ai.latency.e2e"]) >= float(a["gen_ai.latency.time_in_queue"]) >= 0
        assert float(a["gen_ai.latency.time_in_model_inference"]) >= 0


def test_span_ids_depend_on_request_replica_and_salt(result):
    a = _decoded(engine_spans(result.requests[:20], epoch_ns=EPOCH_NS)).spans
    b = _decoded(engine_spans(result.requests[:20], epoch_ns=EPOCH_NS, id_salt="day-2")).spans
    assert set(a["span_id"].to_pylist()).isdisjoint(b["span_id"].to_pylist())


def test_traceparent_parsing():
    ok = f"00-{TRACE}-b7ad6b7169203331-01"
    assert parse_traceparent(ok) == (bytes.fromhex(TRACE), bytes.fromhex("b7ad6b7169203331"))
    assert parse_traceparent(f"01-{TRACE}-b7ad6b7169203331-01-future") is not None
    for bad in (
        None,
        42,
        "",
        ok.upper(),
        f"ff-{TRACE}-b7ad6b7169203331-01",
        f"00-{'0' * 32}-b7ad6b7169203331-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{TRACE}-b7ad6b7169203331-01-extra",
        f"00-{TRACE[:-1]}-b7ad6b7169203331-01",
    ):
        assert parse_traceparent(bad) is None, bad


# -- dcgm-exporter -----------------------------------------------------------------------------


def test_dcgm_page(result):
    rep = result.replicas[0]
    profile = make_profile("llama-3.1-70b", "bf16", 2)
    timeline = GpuMetricsTimeline(rep, gpu="h200", model=profile, hostname="gpu-node-1")
    mid = result.end_s / 2
    text = timeline.render(mid)
    assert text == render_dcgm_metrics(
        rep, mid, gpu_name="h200", gpu_count=2, hostname="gpu-node-1", model="llama-3.1-70b"
    )
    table = parse_exposition(text, "text/plain", NOW).to_pylist()
    assert {row["metric"] for row in table} == {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    }
    by_gpu: dict[str, dict[str, float]] = {}
    for row in table:
        labels = dict(row["labels"])
        assert set(labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
        assert labels["modelName"] == "NVIDIA H200" and labels["Hostname"] == "gpu-node-1"
        assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", labels["UUID"])
        by_gpu.setdefault(labels["gpu"], {})[row["metric"]] = row["value"]
        if row["metric"] == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
            assert row["type"] == "counter"
    assert set(by_gpu) == {"0", "1"} and by_gpu["0"] == by_gpu["1"]
    g = by_gpu["0"]
    total_mib = 141e9 / 2**20
    assert g["DCGM_FI_DEV_FB_USED"] + g["DCGM_FI_DEV_FB_FREE"] == pytest.approx(total_mib, abs=2)
    # vLLM holds its weights, the overhead and its whole KV cache (400 blocks here) all along
    block_bytes = profile.kv_bytes_per_token_per_gpu * 16
    used = profile.weight_bytes_per_gpu + DEFAULT_OVERHEAD_BYTES + rep.num_gpu_blocks * block_bytes
    assert g["DCGM_FI_DEV_FB_USED"] == math.ceil(used / 2**20)
    busy = (timeline.busy_s(mid) - timeline.busy_s(mid - 15)) / 15
    assert g["DCGM_FI_DEV_GPU_UTIL"] == round(busy * 100)
    assert g["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(busy, abs=1e-6)
    assert g["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(0.12 * 700 + 0.88 * 700 * busy, abs=1e-5)


def test_dcgm_energy_integrates_the_power_model(result):
    rep = result.replicas[1]
    timeline = GpuMetricsTimeline(rep, gpu="h200", model="llama-3.1-8b", hostname="n")
    energy = []
    for at in np.arange(0, result.end_s + 15, 5.0):
        snap = timeline.snapshot(float(at), window_s=5.0)
        energy.append(snap["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
        if at >= 5:
            # the energy of the last window is the window's mean power times its length
            assert energy[-1] - energy[-2] == pytest.approx(
                snap["DCGM_FI_DEV_POWER_USAGE"] * 5.0 * 1000, rel=1e-9
            )
    assert energy == sorted(energy)
    assert energy[-1] == pytest.approx(
        (0.12 * 700 * float(np.arange(0, result.end_s + 15, 5.0)[-1]) + 0.88 * 700 * rep.gpu_busy_s)
        * 1000
    )


def test_dcgm_memory_modes_and_bad_inputs(result):
    rep = result.replicas[0]
    allocated = GpuMetricsTimeline(rep, gpu="h200", model="llama-3.1-8b", hostname="n")
    in_use = GpuMetricsTimeline(
        rep, gpu="h200", model="llama-3.1-8b", hostname="n", kv_memory="in_use"
    )
    at = result.end_s / 2
    assert (
        in_use.snapshot(at)["DCGM_FI_DEV_FB_USED"] < allocated.snapshot(at)["DCGM_FI_DEV_FB_USED"]
    )
    from inferledger.core.errors import BadInputError

    with pytest.raises(BadInputError, match="kv_memory"):
        GpuMetricsTimeline(rep, gpu="h200", model="llama-3.1-8b", hostname="n", kv_memory="x")
    with pytest.raises(BadInputError, match="8-GPU host"):
        GpuMetricsTimeline(rep, gpu="h200", model="llama-3.1-8b", hostname="n", first_gpu=8)
    with pytest.raises(BadInputError, match="before boot"):
        allocated.render(-1.0)


def test_created_samples_can_be_left_out(result):
    without = _timeline(result, 0).render(result.end_s)
    with_created = _timeline(result, 0, created_unix_s=1.7e9).render(result.end_s)
    assert "_created" not in without and "vllm:prompt_tokens_created" in with_created
    # ingest drops _created samples: both pages store the same rows
    assert _samples(without) == _samples(with_created)


def test_a_page_without_histogram_buckets_keeps_everything_else(result):
    """render(histogram_buckets=False), the demo's coarse older history: the same page less
    every histogram's _bucket lines; _count and _sum (and every other sample) unchanged."""
    timeline = _timeline(result, 0)
    at = result.end_s / 2
    full, lean = _samples(timeline.render(at)), _samples(timeline.render(at, False))
    dropped = {key for key in full if key not in lean}
    assert dropped and all(metric.endswith("_bucket") for metric, _ in dropped)
    assert {key: full[key] for key in lean} == lean
    assert _value(lean, "vllm:e2e_request_latency_seconds_count") == _value(
        full, "vllm:e2e_request_latency_seconds_bucket", le="+Inf"
    )
