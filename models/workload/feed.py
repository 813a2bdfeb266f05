"""What a simulated company's telemetry looks like, window by window: OTLP bodies and scrape pages.

A `SimulatedSegment` is one continuous run of the simulated deployments over a stretch of Unix
time (the engines start empty at its start, as after a restart): the workload's tasks that
arrive in it, served by the engines, laid out as spans. It answers two questions for any window
of time: which export requests an OpenTelemetry exporter would have sent (the attempts whose
root span ended in it), and what each scrape target's page showed at a scrape time. Pure: no
clock, no I/O; the same (config, seed, start, duration) always gives the same bytes.

Scrape targets name what they watch: one vLLM target per engine (`vllm-llama-8b-0`, the same
name the engine's spans carry as service.instance.id) and one dcgm-exporter target per GPU node
(`dcgm-gpu-node-a`), each tagged with its deployment.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from models.serving.records import ReplicaRecord, SimulationResult
from models.serving.telemetry import GpuMetricsTimeline, ReplicaMetricsTimeline
from models.workload.config import DeploymentConfig, WorkloadConfig
from models.workload.plan import PromptPools, TaskPlan, plan_tasks
from models.workload.simulation import Deployment, SimulatedPlan, simulate_plan
from models.workload.spans import DEFAULT_MAX_SPANS, SpanBuilder, engine_instance

SCRAPE_INTERVAL_S = 15.0
VLLM_PORT = 8000
DCGM_PORT = 9400


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """A scrape target of the simulated deployment (settings.ScrapeTarget's fields)."""

    name: str
    url: str
    kind: str  # vllm or dcgm
    deployment: str


def scrape_targets(config: WorkloadConfig) -> tuple[TargetInfo, ...]:
    """Every engine's vLLM /metrics and every GPU node's dcgm-exporter."""
    out = []
    nodes: dict[str, str] = {}
    for d in config.deployments:
        for i in range(d.replicas):
            name = engine_instance(d, i)
            out.append(TargetInfo(name, f"http://{name}:{VLLM_PORT}/metrics", "vllm", d.name))
        if d.node in nodes:
            raise ValueError(f"deployments {nodes[d.node]} and {d.name} share node {d.node}")
        nodes[d.node] = d.name
    for node, deployment in nodes.items():
        url = f"http://{node}:{DCGM_PORT}/metrics"
        out.append(TargetInfo(f"dcgm-{node}", url, "dcgm", deployment))
    return tuple(out)


def ticks(start_s: float, end_s: float, interval_s: float = SCRAPE_INTERVAL_S) -> np.ndarray:
    """Scrape times in [start_s, end_s): the multiples of interval_s (Unix seconds)."""
    first = np.ceil(start_s / interval_s) * interval_s
    if first >= end_s:
        return np.empty(0)
    return np.arange(first, end_s, interval_s)


def segment_rng(seed: int, start_unix_s: float) -> np.random.Generator:
    """The generator of the segment starting at start_unix_s (whole seconds)."""
    return np.random.default_rng([seed, round(start_unix_s)])


class SimulatedSegment:
    """The workload over [start_unix_s, start_unix_s + duration_s), served and laid out."""

    def __init__(
        self,
        config: WorkloadConfig,
        pools: PromptPools,
        deployments: dict[str, Deployment],
        *,
        seed: int,
        start_unix_s: float,
        duration_s: float,
    ) -> None:
        self.config = config
        self.start_unix_s = start_unix_s
        self.end_unix_s = start_unix_s + duration_s
        plan: TaskPlan = plan_tasks(
            config,
            pools,
            segment_rng(seed, start_unix_s),
            start_unix_s=start_unix_s,
            duration_s=duration_s,
        )
        self.sim: SimulatedPlan = simulate_plan(plan, deployments)
        self.builder = SpanBuilder(self.sim)
        self._pages: ScrapePages | None = None

    @property
    def plan(self) -> TaskPlan:
        return self.sim.plan

    @property
    def last_end_unix_s(self) -> float:
        """When the segment's last attempt ends (may be after end_unix_s)."""
        return self.start_unix_s + self.builder.last_end_s

    # -- spans ----------------------------------------------------------------------------
    def attempts_ending(self, start_unix_s: float, end_unix_s: float) -> np.ndarray:
        return self.builder.attempts_ending(
            start_unix_s - self.start_unix_s, end_unix_s - self.start_unix_s
        )

    def export_requests(
        self, start_unix_s: float, end_unix_s: float, *, max_spans: int = DEFAULT_MAX_SPANS
    ) -> Iterator[tuple[ExportTraceServiceRequest, int]]:
        """(request, spans in it) for the attempts whose root ended in the window."""
        attempts = self.attempts_ending(start_unix_s, end_unix_s)
        for req in self.builder.export_requests(attempts, max_spans=max_spans):
            yield req, sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)

    # -- metrics --------------------------------------------------------------------------
    def scrape_pages(self) -> ScrapePages:
        """The segment's scrape pages (built once). They keep no task or request objects, so
        a caller that only needs metrics can drop the segment and keep these."""
        if self._pages is None:
            self._pages = ScrapePages(
                self.config, self.sim.results, self.start_unix_s, self.end_unix_s
            )
        return self._pages

    def pages(
        self,
        at_unix_s: float,
        interval_s: float = SCRAPE_INTERVAL_S,
        histogram_buckets: bool = True,
    ) -> list[tuple[TargetInfo, str]]:
        """Every target's page at at_unix_s (which must lie in the segment), scraped every
        interval_s (ScrapePages.pages)."""
        return self.scrape_pages().pages(at_unix_s, interval_s, histogram_buckets)


class ScrapePages:
    """What every scrape target of a simulated segment shows, at any time in the segment."""

    def __init__(
        self,
        config: WorkloadConfig,
        results: Mapping[str, SimulationResult],
        start_unix_s: float,
        end_unix_s: float,
    ) -> None:
        self.start_unix_s = start_unix_s
        self.end_unix_s = end_unix_s
        self._targets = scrape_targets(config)
        self._vllm: dict[str, ReplicaMetricsTimeline] = {}
        self._gpus: dict[str, list[GpuMetricsTimeline]] = {}
        for d in config.deployments:
            result = results[d.name]
            for i in range(d.replicas):
                self._vllm[engine_instance(d, i)] = ReplicaMetricsTimeline.from_result(
                    result,
                    i,
                    model_name=d.served_model_name,
                    gpu_memory_utilization=d.gpu_memory_utilization,
                )
                self._gpus.setdefault(d.node, []).append(_gpu_timeline(d, result.replicas[i], i))

    def pages(
        self,
        at_unix_s: float,
        interval_s: float = SCRAPE_INTERVAL_S,
        histogram_buckets: bool = True,
    ) -> list[tuple[TargetInfo, str]]:
        """Every target's page at at_unix_s (which must lie in the segment), as scraped every
        interval_s: dcgm-exporter's utilisation fields average over the interval, as a real
        exporter's do over its collection period (a coarser replay of history keeps the busy
        time exact). ``histogram_buckets=False``: vLLM pages without their histograms'
        ``_bucket`` lines (ReplicaMetricsTimeline.render)."""
        if not self.start_unix_s <= at_unix_s < self.end_unix_s:
            raise ValueError(f"{at_unix_s} is outside the segment")
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        at = at_unix_s - self.start_unix_s
        out = []
        for target in self._targets:
            if target.kind == "vllm":
                out.append((target, self._vllm[target.name].render(at, histogram_buckets)))
            else:
                node = target.name.removeprefix("dcgm-")
                pages = [g.render(at, interval_s) for g in self._gpus[node]]
                out.append((target, merge_pages(pages)))
        return out


def _gpu_timeline(d: DeploymentConfig, replica: ReplicaRecord, index: int) -> GpuMetricsTimeline:
    return GpuMetricsTimeline(
        replica,
        gpu=d.gpu,
        model=d.model,
        hostname=d.node,
        gpu_count=d.tensor_parallel_size,
        dtype=d.dtype,
        kv_cache_dtype=d.kv_cache_dtype,
        first_gpu=index * d.tensor_parallel_size,
    )


def merge_pages(pages: list[str]) -> str:
    """One exposition page from several with the same families in the same order (one
    dcgm-exporter per node shows every GPU of the node): each family's HELP and TYPE once,
    then the samples of every page."""
    if len(pages) == 1:
        return pages[0]
    blocks: list[list[str]] = []
    for p, page in enumerate(pages):
        fam = -1
        for line in page.splitlines(keepends=True):
            if line.startswith("# HELP "):
                fam += 1
                if p == 0:
                    blocks.append([line])
            elif line.startswith("#"):
                if p == 0:
                    blocks[fam].append(line)
            else:
                blocks[fam].append(line)
    return "".join(line for block in blocks for line in block)
