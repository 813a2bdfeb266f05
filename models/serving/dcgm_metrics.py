"""A simulated replica's GPUs as NVIDIA dcgm-exporter shows them (reference §5a).

One series per GPU of the replica (its tensor-parallel group), with dcgm-exporter's labels
(gpu, UUID, pci_bus_id, device, modelName, Hostname) and its text layout: the HELP texts of
etc/default-counters.csv, integers for integer fields and Go's %f for float ones. What is
modelled (utilization from the step log, a linear power model, vLLM's preallocated KV cache in
the framebuffer) is in GpuMetricsTimeline's docstring and docs/simulator.md.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from inferledger.core.errors import BadInputError
from models.gpu_catalog import GpuSpec, get_gpu
from models.model_catalog import DEFAULT_OVERHEAD_BYTES, ModelProfile, make_profile
from models.serving.records import ReplicaRecord
from models.serving.vllm_metrics import escape_label_value

MIB = 1 << 20
# Idle draw as a fraction of TDP: an assumption (no catalog field yet); H100/H200 boards idle
# around 70-100 W of their 700 W.
DEFAULT_IDLE_POWER_FRACTION = 0.12
# PCI bus ids of the eight GPUs of an HGX H100/H200 board, in nvidia-smi order.
_PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_DCGM_FIELDS = (
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
)  # fmt: skip


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
        if not 0.0 <= idle_power_fraction <= 1.0:
            raise BadInputError("idle_power_fraction must be in [0, 1]")
        if first_gpu < 0 or first_gpu + count > len(_PCI_BUSES):
            raise BadInputError(
                f"GPUs {first_gpu}..{first_gpu + count - 1} do not fit one 8-GPU host"
            )
        self.boot_s = boot_s
        self.kv_memory = kv_memory
        self._total_mib = spec.memory_bytes / MIB
        self._base_mib = (profile.weight_bytes_per_gpu + overhead_bytes) / MIB
        self._block_mib = profile.kv_bytes_per_token_per_gpu * block_size / MIB
        self._num_blocks = replica.num_gpu_blocks
        self._idle_w = idle_power_fraction * spec.tdp_w
        self._dynamic_w = spec.tdp_w - self._idle_w
        log = replica.steps
        self._start = np.asarray(log.start_s, dtype=float)
        self._dur = np.asarray(log.duration_s, dtype=float)
        self._busy_before = np.concatenate(([0.0], np.cumsum(self._dur)))
        self._t = np.asarray(replica.series["time_s"], dtype=float)
        self._kv = np.asarray(replica.series["kv_cache_usage"], dtype=float)
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

    def busy_s(self, t: float) -> float:
        """Seconds the replica spent in engine steps up to simulated time t."""
        i = int(np.searchsorted(self._start, t, side="right")) - 1
        if i < 0:
            return 0.0
        return float(self._busy_before[i]) + min(
            max(t - float(self._start[i]), 0.0), float(self._dur[i])
        )

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
        return {
            "DCGM_FI_DEV_POWER_USAGE": self._idle_w + self._dynamic_w * frac,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": energy_j * 1000.0,
            "DCGM_FI_DEV_GPU_UTIL": frac * 100.0,
            "DCGM_FI_DEV_FB_FREE": self._total_mib - used,
            "DCGM_FI_DEV_FB_USED": used,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": frac,
        }

    def render(self, at_s: float, window_s: float = 15.0) -> str:
        """dcgm-exporter's text at at_s: integers for integer fields, %f for float ones."""
        values = self.snapshot(at_s, window_s)
        text = {
            "DCGM_FI_DEV_POWER_USAGE": f"{values['DCGM_FI_DEV_POWER_USAGE']:f}",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": str(
                int(values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
            ),
            "DCGM_FI_DEV_GPU_UTIL": str(round(values["DCGM_FI_DEV_GPU_UTIL"])),
            "DCGM_FI_DEV_FB_FREE": str(int(values["DCGM_FI_DEV_FB_FREE"])),
            "DCGM_FI_DEV_FB_USED": str(math.ceil(values["DCGM_FI_DEV_FB_USED"])),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": f"{values['DCGM_FI_PROF_GR_ENGINE_ACTIVE']:f}",
        }
        out = []
        for name, typ, doc in _DCGM_FIELDS:
            out.append(f"# HELP {name} {doc}\n# TYPE {name} {typ}\n")
            value = text[name]
            out.extend(f"{name}{prefix}{value}\n" for prefix in self._prefixes)
        return "".join(out)


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
