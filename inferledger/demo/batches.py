"""A history segment as what the service must store: OTLP bodies and scrape rows, window by
window, newest first — built in a worker process so the simulation runs on another core.

Traces stay on the real ingest path: these are the protobuf bodies an exporter would POST, and
the history loader POSTs them to /v1/traces. Metrics take the bulk path: each target's page is
rendered as a live scrape would see it and read into ``metric_samples`` rows by
``ingest.prom_text.PageReader`` (rows identical to the parser's, which it falls back to), and the
loader stores a window's scrapes in one write (``Scraper.store_scrapes``).

Resolution: the newest FINE_S (3 h) of a region is scraped every 15 s like live traffic, with
every series; older history every 120 s (``OLDER_SCRAPE_INTERVAL_S``), whose dcgm-exporter
utilisation fields average over the 120 s, and without the vLLM histograms' ``_bucket`` series
(their ``_count`` and ``_sum`` stay). No page reads those buckets (latency percentiles come from
spans); they were three quarters of the samples. Analysts' ``metric_histogram_quantiles`` has
no rows for that stretch. docs/demo.md says what this trades.

Imported by the spawned worker processes: nothing here touches the service.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa

from inferledger.demo.state import SCRAPE_INTERVAL_S

if TYPE_CHECKING:
    from models.workload.feed import SimulatedSegment
    from models.workload.segments import Segment

WINDOW_S = 3_600.0  # history is built and sent an hour at a time, newest hour first
FINE_S = 3 * 3_600.0  # the newest history keeps the live scrape interval this far back...
OLDER_SCRAPE_INTERVAL_S = 120.0  # ...and older history is scraped this often
EXPOSITION = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class TraceWindow:
    """The export requests of the attempts whose root ended in [start, end) (the oldest
    window of a segment: everything before end)."""

    start: float
    end: float
    bodies: list[tuple[bytes, int]]  # (serialized ExportTraceServiceRequest, spans in it)
    weight: float  # the share of the segment's day this window stands for (progress)


@dataclass(frozen=True)
class MetricWindow:
    """Every target's scrapes at the scrape times in [start, end)."""

    start: float
    end: float
    scrapes: list[tuple[str, float, int]]  # (target, Unix time, samples), in row order
    samples: pa.Table  # their metric_samples rows, each with its target (scraper.sample_rows)


def scrape_interval(window_end: float, region_end: float) -> float:
    """The scrape interval of the history window ending at window_end: 15 s, like live
    scrapes, in the FINE_S before the region's end (the live hour's predecessors);
    OLDER_SCRAPE_INTERVAL_S before that."""
    return SCRAPE_INTERVAL_S if window_end > region_end - FINE_S else OLDER_SCRAPE_INTERVAL_S


def history_windows(seg: Segment, region_end: float) -> Iterator[tuple[float, float, float]]:
    """(start, end, scrape interval) of the segment's metric windows, newest first."""
    end = min(seg.end, region_end)
    while end > seg.start:
        start = max(seg.start, end - WINDOW_S)
        yield start, end, scrape_interval(end, region_end)
        end = start


def trace_windows(
    simulated: SimulatedSegment, seg: Segment, region_end: float
) -> Iterator[TraceWindow]:
    """The segment's history attempts (root ended before region_end), an hour at a time,
    newest first; the oldest window takes everything before it too."""
    upper = min(region_end, simulated.last_end_unix_s + 1.0)
    weight = (min(seg.end, region_end) - seg.start) / 86_400.0
    whole = max(upper - seg.start, 1.0)
    end = upper
    while True:
        start = end - WINDOW_S
        oldest = start <= seg.start
        bodies = [
            (req.SerializeToString(), n)
            for req, n in simulated.export_requests(-math.inf if oldest else start, end)
        ]
        yield TraceWindow(
            start, end, bodies, weight * min(end - max(start, seg.start), whole) / whole
        )
        if oldest:
            return
        end = start


def metric_windows(
    simulated: SimulatedSegment,
    seg: Segment,
    region_end: float,
) -> Iterator[MetricWindow]:
    """Every target's scrapes in the segment's history, an hour at a time, newest first."""
    from ingest.prom_text import PageReader
    from ingest.scraper import sample_rows
    from models.workload.feed import ticks

    pages = simulated.scrape_pages()
    # one reader per page shape: each learns a target's page from its first (PageTemplate)
    readers = {True: PageReader(), False: PageReader()}
    for start, end, interval in history_windows(seg, region_end):
        scrapes: list[tuple[str, float, int]] = []
        read = []
        buckets = interval == SCRAPE_INTERVAL_S  # the fine stretch keeps every series
        reader = readers[buckets]
        for at in ticks(start, end, interval).tolist():
            ts = datetime.fromtimestamp(at, UTC)
            for target, text in pages.pages(at, interval, histogram_buckets=buckets):
                exposition = reader.read(target.name, text, EXPOSITION, ts)
                scrapes.append((target.name, at, exposition.samples.num_rows))
                read.append((target.name, exposition))
        yield MetricWindow(start, end, scrapes, sample_rows(read))


@dataclass(frozen=True)
class SegmentJob:
    """What a worker process needs to rebuild one history segment identically."""

    seed: int
    rate_scale: float
    start: float
    end: float
    region_end: float
    traces: bool = True  # False: the region's traces are stored already
    metrics: bool = True  # False: every scrape of the segment is stored already


@dataclass(frozen=True)
class SegmentBatches:
    job: SegmentJob
    traces: list[TraceWindow]
    metrics: list[MetricWindow]


_SOURCE: dict[tuple[int, float], object] = {}


def build_segment(job: SegmentJob) -> SegmentBatches:
    """Run in a worker process: simulate the segment and build everything the loader stores."""
    from models.workload import load_workload
    from models.workload.segments import Segment, SegmentSource

    key = (job.seed, job.rate_scale)
    source = _SOURCE.get(key)
    if source is None:
        config = load_workload()
        if job.rate_scale != 1.0:
            config = config.scaled(job.rate_scale)
        source = _SOURCE[key] = SegmentSource(config, job.seed)
    assert isinstance(source, SegmentSource)
    seg = Segment(job.start, job.end)
    simulated = source.get(seg)
    traces = list(trace_windows(simulated, seg, job.region_end)) if job.traces else []
    metrics = list(metric_windows(simulated, seg, job.region_end)) if job.metrics else []
    return SegmentBatches(job, traces, metrics)
