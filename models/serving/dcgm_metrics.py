"""A simulated replica's GPUs as NVIDIA dcgm-exporter shows them (reference §5a).

One series per GPU of the replica (its tensor-parallel group), with dcgm-exporter's labels
(gpu, UUID, pci_bus_id, device, modelName, Hostname) and its text layout: the HELP texts of
etc/default-counters.csv, integers for integer fields and Go's %f for float ones. Two field
sets: "compact" (six fields the ledger and the demo feed read) and "default-counters", every
field dcgm-exporter's default CSV turns on. What is modelled (utilization from the step log, a
linear power model, temperatures lagging toward a load-dependent target, clocks, tensor and DRAM
activity from the step mix, vLLM's preallocated KV cache in the framebuffer) is in
GpuMetricsTimeline's docstring, docs/simulator.md and docs/sim-server.md.

Sources (NVIDIA/dcgm-exporter): etc/default-counters.csv at e61056b (its last change before
d5e5f51, May 2026: field names, types, HELP texts); internal/pkg/rendermetrics/render_metrics.go
before d5e5f51 (the label order, `Hostname`; d5e5f51 renamed it `hostname`; the ledger reads both
spellings); internal/pkg/collector/gpu_collector.go toString (%d for int64 fields, %f for
doubles; blank values are skipped, which is why a GPU without XID errors shows no
DCGM_FI_DEV_XID_ERRORS sample). Family order follows DCGM field ids, as real pages show it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferledger.core.errors import BadInputError
from models.gpu_catalog import GpuSpec, default_gpu_catalog, get_gpu
from models.model_catalog import DEFAULT_OVERHEAD_BYTES, ModelProfile, make_profile
from models.serving.records import ReplicaRecord, StepLog
from models.serving.vllm_metrics import escape_label_value

MIB = 1 << 20
# Idle draw as a fraction of TDP: an assumption (no catalog field yet); H100/H200 boards idle
# around 70-100 W of their 700 W.
DEFAULT_IDLE_POWER_FRACTION = 0.12
# PCI bus ids of the eight GPUs of an HGX H100/H200 board, in nvidia-smi order.
_PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
FIELD_SETS = ("compact", "default-counters")
# (name, Prometheus type, HELP, DCGM value type: "i" int64 → %d, "f" double → %f)
_COMPACT_FIELDS = (
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "f"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ).", "i"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "i"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "i"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "i"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "f"),
)  # fmt: skip
# Every uncommented field of etc/default-counters.csv (e61056b) but XID_ERRORS (blank, so never
# written, until an XID happens), in DCGM field-id order as dcgm-exporter writes them.
_DEFAULT_COUNTER_FIELDS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "i"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "i"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "i"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "i"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "f"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ).", "i"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "i"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "i"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "i"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "i"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "i"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "i"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "i"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "i"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for uncorrectable errors", "i"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for correctable errors", "i"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "i"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
     "Total number of NVLink bandwidth counters for all lanes.", "i"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", "i"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "f"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
     "Ratio of cycles the tensor (HMMA) pipe is active.", "f"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data.", "f"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
     "The rate of data transmitted over the PCIe bus - including both protocol headers and data "
     "payloads - in bytes per second.", "i"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
     "The rate of data received over the PCIe bus - including both protocol headers and data "
     "payloads - in bytes per second.", "i"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class GpuThermals:
    """What the page needs of a GPU beyond the catalog: clocks (MHz, as nvidia-smi reports
    them) and temperatures (°C) idle and under full load. memory_temp 0 where the board has no
    memory sensor (GDDR boards report 0, as real L4/Ada pages show)."""

    sm_clock_idle: int
    sm_clock_max: int
    mem_clock: int
    gpu_temp_idle: float
    gpu_temp_load: float
    memory_temp_idle: float
    memory_temp_load: float


# Approximate values, not measurements of ours: max SM clocks are the datasheet boost clocks
# (A100 1410, H100/H200 1980, L40S 2520, B200 1965 MHz); memory clocks are what nvidia-smi shows
# for the memory type (HBM2e 1593, HBM3 2619, HBM3e 3201/3996, GDDR6 9001 MHz); idle clocks and
# temperatures are typical of datacenter boards under vLLM (assumptions).
GPU_THERMALS: dict[str, GpuThermals] = {
    "A100-80GB": GpuThermals(210, 1410, 1593, 31.0, 62.0, 33.0, 60.0),
    "H100-SXM": GpuThermals(345, 1980, 2619, 30.0, 66.0, 34.0, 60.0),
    "H200": GpuThermals(345, 1980, 3201, 30.0, 66.0, 34.0, 60.0),
    "L40S": GpuThermals(210, 2520, 9001, 28.0, 70.0, 0.0, 0.0),
    "B200": GpuThermals(345, 1965, 3996, 30.0, 68.0, 35.0, 62.0),
}
_FALLBACK_THERMALS = GpuThermals(300, 1800, 2000, 30.0, 66.0, 33.0, 60.0)
# A first-order thermal lag: a board settles within a few minutes of a load change.
THERMAL_TIME_CONSTANT_S = 45.0
_THERMAL_BIN_S = 5.0
_THERMAL_LOOKBACK_S = 6 * THERMAL_TIME_CONSTANT_S  # the initial state weighs e^-6 = 0.25 %
# Under full load boards run below their max boost clock (power and thermal limits): the SM
# clock drops linearly to this share of max at 100 % utilization (an assumption).
_SM_CLOCK_AT_FULL_LOAD = 0.9
# Framebuffer the driver reserves, as a share of the memory: ~591 MiB of an 80 GB H100's 81559
# (an observed nvidia-smi -q figure, scaled; an assumption for other boards).
_FB_RESERVED_SHARE = 0.0072
# PCIe traffic of a serving engine: a small idle rate (driver and monitoring) plus the inputs
# each step copies in (token ids, positions, slot mappings) and the sampled ids it copies out.
_PCIE_IDLE_TX_B_S = 100e3
_PCIE_IDLE_RX_B_S = 20e3
_PCIE_RX_BYTES_PER_TOKEN = 32
_PCIE_RX_BYTES_PER_STEP = 4096
_PCIE_TX_BYTES_PER_SEQ = 8
_PCIE_TX_BYTES_PER_STEP = 1024
_ACTIVATION_BYTES = 2  # bf16 activations in the tensor-parallel all-reduces


def max_catalog_tdp_w() -> float:
    """The largest TDP of any GPU in the catalog: the most power any simulated GPU can draw."""
    return max(g.tdp_w for g in default_gpu_catalog().gpus)


def restart_safe_energy_offset_mj(host_uptime_s: float) -> float:
    """A start value for DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION that no earlier run on this host
    can have reached: the most power any catalog GPU draws x the host's uptime (mJ).

    A real GPU's counter runs from driver load and survives an exporter or engine restart. The
    simulated counter advances by at most that power per wall-clock second (see `speed` in
    GpuMetricsTimeline), so a process that started with uptime U and ran L seconds ended below
    P_max x (U + L), which is at most P_max x the uptime at the next start: the counter never
    goes backwards across restarts without any state file. After a host reboot it starts low
    again, as a real one does after a driver reload."""
    if not host_uptime_s >= 0:
        raise BadInputError(f"host_uptime_s must be >= 0, got {host_uptime_s}")
    return max_catalog_tdp_w() * host_uptime_s * 1000.0


def fake_gpu_uuid(hostname: str, gpu: int) -> str:
    """A stable, made-up GPU UUID in NVIDIA's format (GPU-8-4-4-4-12 hex digits)."""
    h = hashlib.blake2b(f"{hostname}\x00{gpu}".encode(), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class GpuMetricsTimeline:
    """The dcgm-exporter page of one replica's GPUs (one series per tensor-parallel GPU) at any
    simulated time.

    Utilization is the fraction of the window [at_s - window_s, at_s] the replica spent in
    engine steps (every GPU of a tensor-parallel replica works in every step). Power is
    idle + (TDP - idle) x that fraction, idle = idle_power_fraction x TDP (an assumption), and
    the energy counter integrates the same model from boot_s, so energy differences and mean
    power agree exactly. Memory: vLLM allocates its whole KV cache at start-up, so the
    framebuffer holds weights + overhead + every KV block whatever the load (kv_memory
    "allocated", what DCGM shows); kv_memory "in_use" counts only the blocks in use at the
    last sample instead (not what a real GPU reports; for illustration).

    fields="default-counters" adds every other field of dcgm-exporter's default CSV:
    - GPU and memory temperature: a first-order lag (time constant THERMAL_TIME_CONSTANT_S)
      toward idle + (load - idle) x utilization (GPU_THERMALS), evaluated over 5 s bins;
    - SM clock: the idle clock when the window saw no step, else the max boost clock, drooping
      linearly to 90 % of it at full utilization; memory clock: fixed;
    - tensor-pipe activity: each step's matmul FLOPs (2 x matmul params / TP x tokens) at the
      GPU's dense peak, over the window; DRAM activity: each step reading every weight once at
      the memory bandwidth (KV-cache reads left out), over the window; MEM_COPY_UTIL the same
      share in %; both capped by the step's own duration;
    - NVLink counter: the bytes of the two all-reduces per layer and token a TP group sends and
      receives (ring: 2 (TP-1)/TP of the activations each way; 0 at TP 1). DCGM's docs give the
      field no unit; bytes is our choice;
    - PCIe TX/RX (B/s): an idle rate plus what each step copies in and out (see the constants);
    - FB_RESERVED a fixed share of memory (FB_FREE = total - used - reserved in this set);
      error counters, remapped rows, encoder/decoder and vGPU licence 0, as on a healthy board.

    speed: virtual seconds per wall second of the run (the stand-in's --speed). The energy
    counter advances by the simulated energy / speed, i.e. power x wall time, as a real GPU's
    does, so rate(energy) matches the power gauge in Prometheus at any speed (energy per token
    read from Prometheus is then off by the speed). energy_offset_mj is added to it (see
    restart_safe_energy_offset_mj).

    Labels: GPUs first_gpu.. of `hostname`, with made-up but stable UUIDs, the PCI bus ids of
    an HGX board, modelName "NVIDIA <catalog name>" unless device_name is given (NVML's name,
    e.g. "NVIDIA H100 80GB HBM3"), and DCGM_FI_DRIVER_VERSION when driver_version is given.
    """

    def __init__(
        self,
        replica: ReplicaRecord,
        *,
        gpu: str | GpuSpec,
        model: str | ModelProfile,
        hostname: str,
        gpu_count: int | None = None,
        dtype: str = "bf16",
        kv_cache_dtype: str | None = None,
        first_gpu: int = 0,
        block_size: int = 16,
        overhead_bytes: float = DEFAULT_OVERHEAD_BYTES,
        idle_power_fraction: float = DEFAULT_IDLE_POWER_FRACTION,
        boot_s: float = 0.0,
        kv_memory: str = "allocated",
        driver_version: str | None = None,
        device_name: str | None = None,
        fields: str = "compact",
        energy_offset_mj: float = 0.0,
        speed: float = 1.0,
    ) -> None:
        spec = get_gpu(gpu)
        if isinstance(model, ModelProfile):
            profile = model
        else:
            profile = make_profile(model, dtype, gpu_count or 1, kv_cache_dtype)
        count = gpu_count if gpu_count is not None else profile.tp
        if count != profile.tp:
            raise BadInputError(f"gpu_count {count} differs from the model's TP {profile.tp}")
        if kv_memory not in ("allocated", "in_use"):
            raise BadInputError(f"kv_memory must be 'allocated' or 'in_use', got {kv_memory!r}")
        if fields not in FIELD_SETS:
            raise BadInputError(f"fields must be one of {FIELD_SETS}, got {fields!r}")
        if not 0.0 <= idle_power_fraction <= 1.0:
            raise BadInputError("idle_power_fraction must be in [0, 1]")
        if not (speed > 0 and math.isfinite(speed)):
            raise BadInputError(f"speed must be a finite number > 0, got {speed}")
        if not (energy_offset_mj >= 0 and math.isfinite(energy_offset_mj)):
            raise BadInputError(f"energy_offset_mj must be >= 0, got {energy_offset_mj}")
        if first_gpu < 0 or first_gpu + count > len(_PCI_BUSES):
            raise BadInputError(
                f"GPUs {first_gpu}..{first_gpu + count - 1} do not fit one 8-GPU host"
            )
        self.boot_s = boot_s
        self.kv_memory = kv_memory
        self.fields = fields
        self.speed = speed
        self.energy_offset_mj = energy_offset_mj
        self.thermals = GPU_THERMALS.get(spec.name, _FALLBACK_THERMALS)
        self._total_mib = spec.memory_bytes / MIB
        self._base_mib = (profile.weight_bytes_per_gpu + overhead_bytes) / MIB
        self._block_mib = profile.kv_bytes_per_token_per_gpu * block_size / MIB
        self._num_blocks = replica.num_gpu_blocks
        self._idle_w = idle_power_fraction * spec.tdp_w
        self._dynamic_w = spec.tdp_w - self._idle_w
        log = replica.steps
        self._start = np.asarray(log.start_s, dtype=float)
        self._dur = np.asarray(log.duration_s, dtype=float)
        self._busy_before = _before(self._dur)
        self._t = np.asarray(replica.series["time_s"], dtype=float)
        self._kv = np.asarray(replica.series["kv_cache_usage"], dtype=float)
        if fields == "default-counters":
            self._step_loads(log, spec, profile)
        name = device_name if device_name is not None else f"NVIDIA {spec.name}"
        self._prefixes = []
        for i in range(count):
            index = first_gpu + i
            labels = (
                f'gpu="{index}",UUID="{fake_gpu_uuid(hostname, index)}",'
                f'pci_bus_id="00000000:{_PCI_BUSES[index]:02X}:00.0",'
                f'device="nvidia{index}",modelName="{escape_label_value(name)}",'
                f'Hostname="{escape_label_value(hostname)}"'
            )
            if driver_version is not None:
                labels += f',DCGM_FI_DRIVER_VERSION="{escape_label_value(driver_version)}"'
            self._prefixes.append("{" + labels + "} ")

    def _step_loads(self, log: StepLog, spec: GpuSpec, profile: ModelProfile) -> None:
        """Per step-log row: seconds of tensor-pipe and DRAM activity, NVLink and PCIe bytes."""
        steps = np.asarray(log.steps, dtype=float)
        decode = np.asarray(log.num_decode, dtype=float)
        prefill = np.asarray(log.prefill_tokens, dtype=float)
        seqs = decode + np.asarray(log.num_prefill_seqs, dtype=float)
        tokens = steps * (decode + prefill)
        flops_per_token = 2.0 * profile.config.matmul_params / profile.tp
        tensor_s = np.minimum(
            tokens * flops_per_token / spec.peak_flops(profile.weight_dtype), self._dur
        )
        dram_s = np.minimum(
            steps * profile.matmul_weight_bytes_per_gpu / spec.memory_bandwidth, self._dur
        )
        tp = profile.tp
        c = profile.config
        # two all-reduces per layer; a ring sends and receives 2 (TP-1)/TP of each tensor
        nvlink = tokens * c.num_layers * 2 * c.hidden_size * _ACTIVATION_BYTES
        nvlink *= 2 * 2 * (tp - 1) / tp
        rx = tokens * _PCIE_RX_BYTES_PER_TOKEN + steps * _PCIE_RX_BYTES_PER_STEP
        tx = steps * (seqs * _PCIE_TX_BYTES_PER_SEQ + _PCIE_TX_BYTES_PER_STEP)
        self._loads = {
            name: (values, _before(values))
            for name, values in (
                ("tensor", tensor_s),
                ("dram", dram_s),
                ("nvlink", nvlink),
                ("pcie_rx", rx),
                ("pcie_tx", tx),
            )
        }

    def busy_s(self, t: float) -> float:
        """Seconds the replica spent in engine steps up to simulated time t."""
        i = int(np.searchsorted(self._start, t, side="right")) - 1
        if i < 0:
            return 0.0
        return float(self._busy_before[i]) + min(
            max(t - float(self._start[i]), 0.0), float(self._dur[i])
        )

    def _cumulative(self, t: np.ndarray, before: np.ndarray, amount: np.ndarray) -> np.ndarray:
        """How much of a per-step quantity accrued up to each time in t, each step's amount
        spread evenly over its duration (busy_s, vectorized, for any quantity)."""
        if not len(self._start):
            return np.zeros_like(t)
        i = np.searchsorted(self._start, t, side="right") - 1
        inside = i >= 0
        j = np.where(inside, i, 0)
        dur = self._dur[j]
        elapsed = np.clip(t - self._start[j], 0.0, None)
        share = np.where(dur > 0, np.minimum(elapsed / np.where(dur > 0, dur, 1.0), 1.0), 1.0)
        return np.where(inside, before[j] + amount[j] * share, 0.0)

    def _window_mean(self, name: str, at_s: float, window_s: float) -> float:
        amount, before = self._loads[name]
        lo, hi = self._cumulative(np.array([at_s - window_s, at_s]), before, amount)
        return float(hi - lo) / window_s

    def _temperatures(self, at_s: float) -> tuple[float, float]:
        """GPU and memory temperature at at_s: a first-order lag of each 5 s bin's target."""
        th = self.thermals
        n = int(_THERMAL_LOOKBACK_S / _THERMAL_BIN_S)
        edges = at_s - _THERMAL_BIN_S * np.arange(n, -1, -1, dtype=float)
        busy = self._cumulative(edges, self._busy_before, self._dur)
        load = np.clip(np.diff(busy) / _THERMAL_BIN_S, 0.0, 1.0)
        # y_k = d y_(k-1) + (1 - d) x_k from y = 0 (idle) six time constants back, unrolled
        decay = math.exp(-_THERMAL_BIN_S / THERMAL_TIME_CONSTANT_S)
        weights = (1.0 - decay) * decay ** np.arange(n - 1, -1, -1, dtype=float)
        lagged = float(weights @ load)
        gpu = th.gpu_temp_idle + (th.gpu_temp_load - th.gpu_temp_idle) * lagged
        mem = th.memory_temp_idle + (th.memory_temp_load - th.memory_temp_idle) * lagged
        return gpu, mem

    def snapshot(self, at_s: float, window_s: float = 15.0) -> dict[str, float]:
        """The page's values at at_s (the same on every GPU of the replica)."""
        if not window_s > 0:
            raise BadInputError(f"window_s must be > 0, got {window_s}")
        if at_s < self.boot_s:
            raise BadInputError(f"at_s {at_s} is before boot_s {self.boot_s}")
        busy = self.busy_s(at_s)
        frac = (busy - self.busy_s(at_s - window_s)) / window_s
        frac = min(max(frac, 0.0), 1.0)
        if self.kv_memory == "allocated":
            blocks = float(self._num_blocks)
        else:
            i = int(np.searchsorted(self._t, at_s, side="right")) - 1
            blocks = float(self._kv[i]) * self._num_blocks if i >= 0 else 0.0
        used = min(self._base_mib + blocks * self._block_mib, self._total_mib)
        energy_j = self._idle_w * (at_s - self.boot_s) + self._dynamic_w * (
            busy - self.busy_s(self.boot_s)
        )
        values = {
            "DCGM_FI_DEV_POWER_USAGE": self._idle_w + self._dynamic_w * frac,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": self.energy_offset_mj
            + energy_j * 1000.0 / self.speed,
            "DCGM_FI_DEV_GPU_UTIL": frac * 100.0,
            "DCGM_FI_DEV_FB_FREE": self._total_mib - used,
            "DCGM_FI_DEV_FB_USED": used,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": frac,
        }
        if self.fields == "compact":
            return values
        th = self.thermals
        gpu_temp, mem_temp = self._temperatures(at_s)
        if frac > 0:
            sm_clock = th.sm_clock_max * (1.0 - (1.0 - _SM_CLOCK_AT_FULL_LOAD) * frac)
        else:
            sm_clock = float(th.sm_clock_idle)
        dram = min(self._window_mean("dram", at_s, window_s), 1.0)
        reserved = self._total_mib * _FB_RESERVED_SHARE
        nvlink_before, nvlink = self._loads["nvlink"][1], self._loads["nvlink"][0]
        nvlink_bytes = self._cumulative(np.array([at_s]), nvlink_before, nvlink)[0]
        values.update(
            {
                "DCGM_FI_DEV_SM_CLOCK": sm_clock,
                "DCGM_FI_DEV_MEM_CLOCK": float(th.mem_clock),
                "DCGM_FI_DEV_MEMORY_TEMP": mem_temp,
                "DCGM_FI_DEV_GPU_TEMP": gpu_temp,
                "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0.0,
                "DCGM_FI_DEV_MEM_COPY_UTIL": dram * 100.0,
                "DCGM_FI_DEV_ENC_UTIL": 0.0,
                "DCGM_FI_DEV_DEC_UTIL": 0.0,
                "DCGM_FI_DEV_FB_FREE": max(self._total_mib - used - reserved, 0.0),
                "DCGM_FI_DEV_FB_RESERVED": reserved,
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0.0,
                "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0.0,
                "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
                "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": float(nvlink_bytes),
                "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0.0,
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": min(
                    self._window_mean("tensor", at_s, window_s), 1.0
                ),
                "DCGM_FI_PROF_DRAM_ACTIVE": dram,
                "DCGM_FI_PROF_PCIE_TX_BYTES": _PCIE_IDLE_TX_B_S
                + self._window_mean("pcie_tx", at_s, window_s),
                "DCGM_FI_PROF_PCIE_RX_BYTES": _PCIE_IDLE_RX_B_S
                + self._window_mean("pcie_rx", at_s, window_s),
            }
        )
        return values

    def render(self, at_s: float, window_s: float = 15.0) -> str:
        """dcgm-exporter's text at at_s: integers for integer fields, %f for float ones."""
        values = self.snapshot(at_s, window_s)
        fields = _COMPACT_FIELDS if self.fields == "compact" else _DEFAULT_COUNTER_FIELDS
        out = []
        for name, typ, doc, kind in fields:
            out.append(f"# HELP {name} {doc}\n# TYPE {name} {typ}\n")
            value = _format(name, kind, values[name])
            out.extend(f"{name}{prefix}{value}\n" for prefix in self._prefixes)
        return "".join(out)


def _before(amount: np.ndarray) -> np.ndarray:
    """Running totals before each row: [0, a0, a0 + a1, ...]."""
    return np.concatenate(([0.0], np.cumsum(amount)))


def _format(name: str, kind: str, value: float) -> str:
    """Go's %f for doubles; int64 fields as integers: counters and free memory truncated,
    used memory rounded up (a partly used MiB is used), the rest rounded."""
    if kind == "f":
        return f"{value:f}"
    if name in ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_FB_FREE") or name.endswith(
        ("_TOTAL", "_COUNTER", "_ROWS")
    ):
        return str(int(value))
    if name == "DCGM_FI_DEV_FB_USED":
        return str(math.ceil(value))
    return str(round(value))


def render_dcgm_metrics(
    replica_record: ReplicaRecord,
    at_s: float,
    *,
    gpu_name: str,
    gpu_count: int,
    hostname: str,
    model: str | ModelProfile,
    window_s: float = 15.0,
    **kwargs: Any,
) -> str:
    """One render of the replica's dcgm-exporter page (see GpuMetricsTimeline for the model and
    the keyword arguments; build the timeline once to render many times)."""
    timeline = GpuMetricsTimeline(
        replica_record, gpu=gpu_name, model=model, hostname=hostname, gpu_count=gpu_count, **kwargs
    )
    return timeline.render(at_s, window_s)
