"""The history load: the days before this run's start, sent through the real ingest path in
the background while the dashboard is already served.

Newest first: first the traces of every region (an hour at a time, newest hour first), then
its metrics. Resumable: a region's traces are marked done in the state file once all were
accepted, and a scrape already stored is skipped, so a run stopped half-way leaves nothing the
next run cannot finish (every segment regenerates identically from the seed).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO

from inferledger.demo.progress import Progress, duration
from inferledger.demo.senders import Feed
from inferledger.demo.state import DAY_S, DemoError

if TYPE_CHECKING:
    from models.workload.feed import ScrapePages, SimulatedSegment
    from models.workload.segments import Segment

HISTORY_WINDOW_S = 3_600.0  # history is sent an hour at a time, newest hour first
HISTORY_SENDERS = 4
HISTORY_METRIC_WORKERS = 8
METRIC_COST = 18.0  # a day of scrapes takes about this many times as long as a day of traces


class HistoryLoader:
    """Loads the state's regions: every segment's traces (newest first), then its metrics.

    Resumable: a region's traces are marked done once all were accepted (sending them again
    would be harmless: a span received twice is stored once), and a scrape already stored is
    skipped, so a run that stops half-way leaves nothing the next run cannot finish."""

    def __init__(self, feed: Feed, *, done: threading.Event, err: TextIO) -> None:
        self.feed = feed
        self.state = feed.state
        self.done = done  # set once the history is loaded (or there was none)
        self.sender = feed.span_sender(workers=HISTORY_SENDERS, max_pending=HISTORY_SENDERS * 2)
        self.replayer = feed.metric_replayer(workers=HISTORY_METRIC_WORKERS)
        # Progress units: a day of traces weighs 1, a day of scrapes METRIC_COST (roughly what
        # each costs: metrics dominate).
        total = 0.0
        for r in self.state.regions:
            total += (r.end - r.start) / DAY_S * ((0 if r.traces_done else 1) + METRIC_COST)
        self.progress = Progress(err, total)

    def close(self) -> None:
        self.sender.close()
        self.replayer.close()

    def _check(self) -> bool:
        if self.sender.error or self.replayer.error:
            raise DemoError(self.sender.error or self.replayer.error or "")
        return not self.feed.stop.is_set()

    def _segment(self, seg: Segment) -> SimulatedSegment:
        return self.feed.source.get(seg)

    def _spans_stored(self, spans: int) -> None:
        self.state.add_counts(spans, 0)
        self.progress.advance(spans=spans)

    def _samples_stored(self, samples: int) -> None:
        self.state.add_counts(0, samples)
        self.progress.advance(samples=samples)

    def run(self) -> None:
        if not self.state.regions:
            self.done.set()
            return
        # The newest history's segment, if it ends now, is the first live hour's: live
        # traffic holds it too, so it is simulated once.
        shared = any(r.end == self.feed.t0 for r in self.state.regions)
        if shared:
            self.feed.source.acquire(self.feed.live_first)
        try:
            self._load()
        finally:
            if shared:
                self.feed.source.release(self.feed.live_first)

    def _load(self) -> None:
        # models.workload (numpy, ~0.2 s) loads when the demo runs, not with the CLI's parser
        from models.workload.segments import plan_segments

        state = self.state
        started = time.monotonic()
        self.progress.draw(force=True)
        for k, region in enumerate(state.regions):
            if region.traces_done:
                continue
            for seg in plan_segments(region.start, region.end)[0]:
                if not self._send_traces(self._segment(seg), seg, region.end):
                    return
            self.sender.drain()
            if not self._check():
                return
            regions = list(state.regions)
            regions[k] = replace(region, traces_done=True)
            state.save(regions=regions)
        self.progress.phase = "metrics"
        for region in state.regions:
            for seg in plan_segments(region.start, region.end)[0]:
                if not self._replay_metrics(seg, region.end):
                    return
        self.replayer.drain()
        self.sender.drain()
        if not self._check():
            return
        self.feed.service.ingestor.flush(600)
        state.save(regions=[])
        self.done.set()
        self.progress.finish(
            f"history loaded: {self.sender.spans:,} spans and {self.replayer.samples:,} samples "
            f"({self.replayer.scrapes:,} scrapes) in {duration(time.monotonic() - started)}"
        )

    def _send_traces(self, simulated: SimulatedSegment, seg: Segment, region_end: float) -> bool:
        # Attempts whose root span ended before the region's end are history (later ones were
        # live traffic's), sent an hour at a time, newest first; the oldest window takes
        # everything before it too.
        upper = min(region_end, simulated.last_end_unix_s + 1.0)
        weight = (min(seg.end, region_end) - seg.start) / DAY_S
        whole = max(upper - seg.start, 1.0)
        end = upper
        while True:
            start = end - HISTORY_WINDOW_S
            oldest = start <= seg.start
            for req, n in simulated.export_requests(-math.inf if oldest else start, end):
                if not self._check():
                    return False
                self.sender.submit(req.SerializeToString(), n, self._spans_stored)
            self.progress.advance(weight * min(end - max(start, seg.start), whole) / whole)
            if oldest:
                return self._check()
            end = start

    def _replay_metrics(self, seg: Segment, region_end: float) -> bool:
        from models.workload.feed import ticks  # numpy: see _load

        storage = self.feed.service.storage
        targets = self.feed.targets
        end = min(seg.end, region_end)
        pages: ScrapePages | None = None
        while end > seg.start:
            start = max(seg.start, end - HISTORY_WINDOW_S)
            stored = {
                (target, round(at))
                for target, at in storage.fetchall(
                    "select target, epoch(ts) from scrapes where ts >= ? and ts < ?",
                    [datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)],
                )
            }
            for at in ticks(start, end).tolist():
                if all((name, round(at)) in stored for name in targets):
                    continue
                if pages is None:  # simulated only when something is left to replay
                    # Keep the pages only: the segment's tasks and records can go.
                    pages = self._segment(seg).scrape_pages()
                for target, text in pages.pages(at):
                    if (target.name, round(at)) in stored:
                        continue
                    if not self._check():
                        return False
                    self.replayer.submit(targets[target.name], text, at, self._samples_stored)
            self.progress.advance((end - start) / DAY_S * METRIC_COST)
            end = start
        return self._check()
