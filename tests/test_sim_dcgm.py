"""The dcgm-exporter page of the stand-in (`inferledger simulate --serve`): every field of
dcgm-exporter's default counters, values that follow the simulated load, the numbers the ledger
reads unchanged, and an energy counter that never goes backwards across restarts.

Field names, types and HELP texts are those of NVIDIA/dcgm-exporter etc/default-counters.csv at
e61056b; the metric names NVIDIA's Grafana dashboard (grafana/dcgm-exporter-dashboard.json, same
repository) queries are listed in DASHBOARD_METRICS.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import numpy as np
import pytest

from inferledger.core.errors import BadInputError
from inferledger.sim_server import SimServeOptions, SimServer
from ingest.prom_text import parse_exposition
from models.gpu_catalog import default_gpu_catalog
from models.serving import (
    CacheConfig,
    Cluster,
    ClusterConfig,
    ReplicaConfig,
    RequestSpec,
    SchedulerConfig,
    SimulationOptions,
)
from models.serving.dcgm_metrics import (
    GPU_THERMALS,
    max_catalog_tdp_w,
    restart_safe_energy_offset_mj,
)
from models.serving.telemetry import GpuMetricsTimeline
from models.steptime import build_predictor
from tests.test_serving_telemetry import NOW

MODEL = "llama-3.1-8b"
LOAD_S = 90.0  # requests arrive for this long, then the replica idles

# Every uncommented row of etc/default-counters.csv (e61056b) with its Prometheus type, less
# DCGM_FI_DEV_XID_ERRORS (blank until an XID happens, so dcgm-exporter writes no sample) and
# the DCGM_FI_DRIVER_VERSION label row.
DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "gauge",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gauge",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "gauge",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "gauge",
}
# What the panels and variables of grafana/dcgm-exporter-dashboard.json query: temperature,
# average temperature, power, total power, SM clocks, utilization, framebuffer, tensor cores.
DASHBOARD_METRICS = {
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
}
# The fields the ledger reads (ledger/deployments.py, sql/marts/efficiency_cache.sql).
LEDGER_METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE")


def _workload() -> list[RequestSpec]:
    """A steady 6 requests/s for LOAD_S seconds (1000-token prompts, 150 tokens out)."""
    rng = np.random.default_rng(3)
    specs, t, i = [], 0.0, 0
    while True:
        t += float(rng.exponential(1 / 6))
        if t >= LOAD_S:
            return specs
        specs.append(RequestSpec(f"r{i}", t, ((f"p{i}", 1000),), 150, max_tokens=150))
        i += 1


@pytest.fixture(scope="module")
def replica():
    config = ClusterConfig(
        ReplicaConfig(CacheConfig(20000), SchedulerConfig(max_model_len=4096)), num_replicas=1
    )
    predictor = build_predictor(MODEL, "h200")
    result = Cluster(config, predictor, SimulationOptions(sample_interval_s=1.0)).run(_workload())
    return result.replicas[0]


def _timeline(replica, **kwargs) -> GpuMetricsTimeline:
    return GpuMetricsTimeline(
        replica, gpu="h200", model=MODEL, hostname="gpu-node-1", fields="default-counters", **kwargs
    )


def _page(text: str) -> tuple[dict[str, float], dict[str, str], set[frozenset[str]]]:
    """(value by metric of GPU 0, type by metric, label names seen) of a parsed page."""
    values: dict[str, float] = {}
    types: dict[str, str] = {}
    label_sets = set()
    for row in parse_exposition(text, "text/plain", NOW).to_pylist():
        labels = dict(row["labels"])
        label_sets.add(frozenset(labels))
        types[row["metric"]] = row["type"]
        if labels["gpu"] == "0":
            values[row["metric"]] = row["value"]
    return values, types, label_sets


def test_the_page_has_every_default_counter_with_dcgm_exporters_labels(replica) -> None:
    text = _timeline(replica, driver_version="570.133.20").render(LOAD_S / 2)
    values, types, label_sets = _page(text)
    assert types == DEFAULT_COUNTERS
    assert set(values) >= DASHBOARD_METRICS
    # in the order of dcgm-exporter's render template (render_metrics.go before d5e5f51)
    names = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
    assert label_sets == {frozenset((*names, "DCGM_FI_DRIVER_VERSION"))}
    order = {
        tuple(re.findall(r'([A-Za-z_]+)="', line)) for line in text.splitlines() if "{" in line
    }
    assert order == {(*names, "DCGM_FI_DRIVER_VERSION")}
    # dcgm-exporter's text: HELP/TYPE once per family, in DCGM field-id order; %f for doubles
    helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP")]
    assert helps == list(DEFAULT_COUNTERS)
    for line in text.splitlines():
        if line.startswith(("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")):
            assert line.rsplit(" ", 1)[1].count(".") == 1
            assert len(line.rsplit(".", 1)[1]) == 6
        elif line.startswith(("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY")):
            assert line.rsplit(" ", 1)[1].isdigit()


def test_the_fields_the_ledger_reads_are_those_of_the_compact_page(replica) -> None:
    """Switching the stand-in to the full set changes none of the numbers the ledger reads."""
    compact = GpuMetricsTimeline(replica, gpu="h200", model=MODEL, hostname="gpu-node-1")
    for at in (10.0, LOAD_S / 2, LOAD_S + 30):
        small, _, _ = _page(compact.render(at))
        full, _, _ = _page(_timeline(replica).render(at))
        for name in (*LEDGER_METRICS, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
            assert full[name] == small[name], (name, at)
        assert full["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == small["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    with pytest.raises(BadInputError, match="fields"):
        GpuMetricsTimeline(replica, gpu="h200", model=MODEL, hostname="n", fields="all")


def test_values_are_physically_plausible_and_follow_the_load(replica) -> None:
    timeline = _timeline(replica)
    th = GPU_THERMALS["H200"]
    busy = timeline.snapshot(LOAD_S - 5)
    idle = timeline.snapshot(LOAD_S + 600)
    early = timeline.snapshot(5.0)
    # the load keeps the GPU well busy, and it is idle ten minutes after the last request
    assert busy["DCGM_FI_DEV_GPU_UTIL"] > 30 and idle["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert 0.12 * 700 < busy["DCGM_FI_DEV_POWER_USAGE"] <= 700
    assert idle["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(0.12 * 700)
    # temperatures lag toward a load-dependent target: they rise through the load, stay below
    # the full-load value, and settle back to idle
    assert early["DCGM_FI_DEV_GPU_TEMP"] < busy["DCGM_FI_DEV_GPU_TEMP"] < th.gpu_temp_load
    assert busy["DCGM_FI_DEV_GPU_TEMP"] > th.gpu_temp_idle + 5
    assert busy["DCGM_FI_DEV_MEMORY_TEMP"] > th.memory_temp_idle + 3
    after = [timeline.snapshot(LOAD_S + dt)["DCGM_FI_DEV_GPU_TEMP"] for dt in (30, 60, 120, 600)]
    assert after == sorted(after, reverse=True)
    assert after[-1] == pytest.approx(th.gpu_temp_idle, abs=0.1)
    assert idle["DCGM_FI_DEV_MEMORY_TEMP"] == pytest.approx(th.memory_temp_idle, abs=0.1)
    # SM clock at boost (a little under max at high load) when busy, idle clock when idle
    assert 0.9 * th.sm_clock_max <= busy["DCGM_FI_DEV_SM_CLOCK"] <= th.sm_clock_max
    assert idle["DCGM_FI_DEV_SM_CLOCK"] == th.sm_clock_idle
    assert busy["DCGM_FI_DEV_MEM_CLOCK"] == idle["DCGM_FI_DEV_MEM_CLOCK"] == th.mem_clock
    # activity ratios: within the busy time, tensor pipe and DRAM share it per the step mix
    gr = busy["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert 0 < busy["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] <= gr
    assert 0 < busy["DCGM_FI_PROF_DRAM_ACTIVE"] <= gr
    assert busy["DCGM_FI_DEV_MEM_COPY_UTIL"] == pytest.approx(
        100 * busy["DCGM_FI_PROF_DRAM_ACTIVE"]
    )
    assert idle["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == idle["DCGM_FI_PROF_DRAM_ACTIVE"] == 0
    assert busy["DCGM_FI_PROF_PCIE_RX_BYTES"] > idle["DCGM_FI_PROF_PCIE_RX_BYTES"] > 0
    # memory: used + free + reserved is the whole board; TP 1 sends nothing over NVLink
    total = 141e9 / 2**20
    fb = busy["DCGM_FI_DEV_FB_USED"] + busy["DCGM_FI_DEV_FB_FREE"]
    assert fb + busy["DCGM_FI_DEV_FB_RESERVED"] == pytest.approx(total)
    assert busy["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == 0
    for name in ("XID", "ENC_UTIL", "DEC_UTIL", "REMAP", "REPLAY", "VGPU"):
        assert all(v == 0 for k, v in busy.items() if name in k)


def test_tensor_activity_follows_the_step_mix(replica) -> None:
    """Prefill-heavy steps keep the tensor pipe busier than decode-only ones: per busy second,
    the early window (every request still prefilling) beats the tail (only decodes left)."""
    timeline = _timeline(replica)
    log = replica.steps
    last_prefill = float(log.start_s[log.prefill_tokens > 0][-1])
    tail_end = float(log.start_s[-1] + log.duration_s[-1])
    assert tail_end - last_prefill > 0.5  # the fixture ends with a decode-only stretch
    ratio = []
    for at, window in ((LOAD_S / 2, 15.0), (tail_end, tail_end - last_prefill - 0.05)):
        snap = timeline.snapshot(at, window)
        ratio.append(
            snap["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] / snap["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
        )
    assert ratio[0] > 2 * ratio[1]


def test_nvlink_counts_tensor_parallel_traffic(replica) -> None:
    """A TP-2 group all-reduces its activations over NVLink: the counter grows with the load
    and stops when idle."""
    timeline = GpuMetricsTimeline(
        replica,
        gpu="h200",
        model="llama-3.1-70b",
        gpu_count=2,
        hostname="n",
        fields="default-counters",
    )
    counts = [
        timeline.snapshot(at)["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] for at in (10, 50, LOAD_S + 60)
    ]
    assert 0 < counts[0] < counts[1] < counts[2]
    assert timeline.snapshot(LOAD_S + 600)["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == counts[2]


@pytest.mark.parametrize("speed", [1.0, 20.0])
def test_energy_advances_at_wall_clock_power_whatever_the_speed(replica, speed) -> None:
    timeline = _timeline(replica, speed=speed, energy_offset_mj=5e9)
    before = timeline.snapshot(40.0, window_s=10.0)
    after = timeline.snapshot(50.0, window_s=10.0)
    wall_s = 10.0 / speed
    gained = (
        after["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
        - before["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    )
    assert gained == pytest.approx(after["DCGM_FI_DEV_POWER_USAGE"] * wall_s * 1000, rel=1e-9)
    assert timeline.snapshot(0.0)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 5e9


@pytest.mark.parametrize("speed", [1.0, 50.0])
def test_the_energy_counter_survives_a_restart(replica, speed) -> None:
    """A stand-in started at host uptime U runs until the end of the fixture (L wall seconds at
    `speed`) at up to full load; one restarted right after starts above where it ended, with
    no state carried over: the offset alone (P_max x uptime) guarantees it."""
    uptime = 12_345.0
    first = _timeline(replica, speed=speed, energy_offset_mj=restart_safe_energy_offset_mj(uptime))
    end_virtual = LOAD_S + 120.0
    last = first.snapshot(end_virtual)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    wall_s = end_virtual / speed
    assert last <= max_catalog_tdp_w() * (uptime + wall_s) * 1000
    restarted = _timeline(
        replica, speed=speed, energy_offset_mj=restart_safe_energy_offset_mj(uptime + wall_s)
    )
    assert restarted.snapshot(0.0)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] > last
    assert max_catalog_tdp_w() == max(g.tdp_w for g in default_gpu_catalog().gpus)
    with pytest.raises(BadInputError):
        restart_safe_energy_offset_mj(-1.0)


def test_the_stand_ins_page_starts_above_the_previous_process() -> None:
    """Two SimServers one after the other on this host (no HTTP needed: dcgm_page is what the
    dcgm listener serves): the second's energy counter starts above the first's."""
    options = SimServeOptions(
        cluster=ClusterConfig(
            ReplicaConfig(CacheConfig(2000), SchedulerConfig(max_model_len=4096)), num_replicas=2
        ),
        predictor=build_predictor(MODEL, "h200"),
        served_model_names=(MODEL,),
        port=0,
        speed=5.0,
    )
    first = SimServer(options)
    page, types, labels = _page(first.dcgm_page())
    assert types == DEFAULT_COUNTERS
    assert all("DCGM_FI_DRIVER_VERSION" in lab for lab in labels)
    energy = page["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    uptime = SimServer._host_uptime_s()
    assert energy == pytest.approx(max_catalog_tdp_w() * uptime * 1000, rel=1e-3)
    assert first.dcgm_page() == first.dcgm_page()  # the offset is read once
    time.sleep(0.02)
    second, _, _ = _page(SimServer(options).dcgm_page())
    assert second["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] > energy


# What promtool flags on dcgm-exporter's own pages: its camelCase labels (UUID, modelName,
# Hostname, DCGM_FI_DRIVER_VERSION) and counters named without `_total`.
_PROMTOOL_ON_DCGM_EXPORTER = re.compile(
    r"^DCGM_FI_\w+ (label names should be written in 'snake_case' not 'camelCase'"
    r'|counter metrics should have "_total" suffix'
    r"|metric name should not include type 'counter')$"
)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_flags_only_what_it_flags_on_dcgm_exporter(replica) -> None:
    text = _timeline(replica, driver_version="570.133.20").render(LOAD_S / 2)
    out = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    complaints = (out.stdout + out.stderr).splitlines()
    assert complaints and all(_PROMTOOL_ON_DCGM_EXPORTER.match(c) for c in complaints), complaints
