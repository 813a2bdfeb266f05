"""Which stretches of time to simulate, and simulating each once.

Time is simulated in segments, each one continuous run of the engines (they start empty, as
after a restart). The newest history segment runs on FIRST_LIVE_S past the start of live
traffic, so the engines do not restart when the demo starts; older history is a day per
segment; live traffic is simulated a day at a time. Every segment regenerates identically from
(seed, its start, its length), which is what lets an interrupted load be finished later.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from models.workload.config import WorkloadConfig
from models.workload.feed import SCRAPE_INTERVAL_S, SimulatedSegment
from models.workload.plan import build_pools
from models.workload.simulation import build_deployments

DAY_S = 86_400.0
FIRST_LIVE_S = 3_600.0  # the newest history segment runs on this far into live traffic


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of time simulated as one continuous run of the engines (Unix seconds)."""

    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


class SegmentSource:
    """Simulates segments of one workload and seed (the CPU-heavy part). A segment someone has
    acquired is kept until released; threads asking for the same segment at once share one
    simulation. Thread-safe."""

    def __init__(self, config: WorkloadConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.pools = build_pools(config, seed)
        # Deployments hold configs and predictors only (Cluster.run builds fresh replicas each
        # time), so threads can share them.
        self.deployments = build_deployments(config, sample_interval_s=SCRAPE_INTERVAL_S)
        self._kept: dict[Segment, SimulatedSegment] = {}
        self._refs: dict[Segment, int] = {}
        self._building: dict[Segment, threading.Event] = {}
        self._lock = threading.Lock()

    def acquire(self, segment: Segment) -> SimulatedSegment:
        """The simulated segment, kept until as many release() calls."""
        with self._lock:
            self._refs[segment] = self._refs.get(segment, 0) + 1
        return self.get(segment)

    def release(self, segment: Segment) -> None:
        with self._lock:
            left = self._refs.get(segment, 0) - 1
            if left > 0:
                self._refs[segment] = left
            else:
                self._refs.pop(segment, None)
                self._kept.pop(segment, None)

    def get(self, segment: Segment) -> SimulatedSegment:
        """The simulated segment: the kept one, or simulated now."""
        while True:
            with self._lock:
                if segment in self._kept:
                    return self._kept[segment]
                waiting = self._building.get(segment)
                if waiting is None:
                    self._building[segment] = threading.Event()
                    break
            waiting.wait()
        try:
            simulated = SimulatedSegment(
                self.config,
                self.pools,
                self.deployments,
                seed=self.seed,
                start_unix_s=segment.start,
                duration_s=segment.duration,
            )
            with self._lock:
                if self._refs.get(segment):
                    self._kept[segment] = simulated
            return simulated
        finally:
            with self._lock:
                self._building.pop(segment).set()


def plan_segments(history_start: float, t0: float) -> tuple[list[Segment], Segment]:
    """(the segments of [history_start, t0), newest first; the first live segment).

    The newest history segment is the first live segment: it runs on FIRST_LIVE_S past t0.
    Older segments are a day each (the engines restart between them, as after a deploy)."""
    first = Segment(max(history_start, t0 - DAY_S), t0 + FIRST_LIVE_S)
    segments = [first] if history_start < t0 else []
    end = first.start
    while end > history_start:
        start = max(history_start, end - DAY_S)
        segments.append(Segment(start, end))
        end = start
    return segments, first
