"""The history load: the days before this run's start, stored in the background while the
dashboard is already served.

Each segment (a day; the newest runs on into live traffic) becomes OTLP bodies and scrape rows
(batches.py). The newest segment is simulated here, since live traffic shares it; older ones
are simulated in worker processes (HISTORY_PROCESSES), so the simulation runs on other cores
while this process ingests. Traces go through the real ingest path (POST /v1/traces); a
segment's scrapes are stored an hour at a time in one write each (Scraper.store_scrapes), at
15 s for a region's newest 3 hours and 120 s before that. Newest first: the data is complete
from some time back to now, and ``load_status`` (ledger/load_status.py) says from when. Once
everything is stored, the loader refreshes the cost marts and clears the loading flag.

Resumable: a region's traces are marked done in the state file once all were accepted (sending
them again would be harmless: a span received twice is stored once), and a scrape already
stored is skipped, so a run stopped half-way leaves nothing the next run cannot finish (every
segment regenerates identically from the seed).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from inferledger.demo.batches import (
    MetricWindow,
    SegmentBatches,
    SegmentJob,
    TraceWindow,
    build_segment,
    history_windows,
    metric_windows,
    trace_windows,
)
from inferledger.demo.progress import Progress, duration
from inferledger.demo.senders import Feed
from inferledger.demo.state import DAY_S, DemoError, Region

if TYPE_CHECKING:
    from models.workload.segments import Segment

HISTORY_SENDERS = 4
HISTORY_PROCESSES = 2  # worker processes simulating older segments
METRIC_COST = 0.3  # a day of scrapes takes about this share of the time of a day of traces


class HistoryLoader:
    """Loads the state's regions, segment by segment, newest first (module docstring)."""

    def __init__(self, feed: Feed, *, done: threading.Event, err: TextIO) -> None:
        self.feed = feed
        self.state = feed.state
        self.done = done  # set once the history is loaded (or there was none)
        self.sender = feed.span_sender(workers=HISTORY_SENDERS, max_pending=HISTORY_SENDERS * 2)
        self.scraper = feed.service.scraper
        self.scrapes = 0
        self.samples = 0
        self._pool: Any = None
        self._pool_lock = threading.Lock()
        self._closed = False
        # Seconds from the load's start to each milestone (bench/demo_load.py reports them).
        self.timings: dict[str, float] = {}
        total = 0.0
        for r in self.state.regions:
            total += (r.end - r.start) / DAY_S * ((0 if r.traces_done else 1) + METRIC_COST)
        self.progress = Progress(err, total)
        self.progress.phase = "loading"
        # Everything from here to now is this demo's history once the load is done.
        self.history_start = feed.t0 - self.state.days * DAY_S

    def close(self) -> None:
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()  # a worker busy simulating holds nothing worth waiting for
        self.sender.close()

    def _check(self) -> bool:
        if self.sender.error:
            raise DemoError(self.sender.error)
        return not self.feed.stop.is_set()

    def _spans_stored(self, spans: int) -> None:
        self.state.add_counts(spans, 0)
        self.progress.advance(spans=spans)

    def run(self) -> None:
        if not self.state.regions:
            self.done.set()
            return
        self._load()

    # -- the load ---------------------------------------------------------------------------
    def _status(self, complete_from: float | None, detail: str, loading: bool = True) -> None:
        from ledger.load_status import set_load_status

        set_load_status(
            self.feed.service.storage,
            loading=loading,
            history_start=_utc(self.history_start),
            complete_from=None
            if complete_from is None
            else _utc(max(complete_from, self.history_start)),
            detail=detail,
        )

    def _load(self) -> None:
        # models.workload (numpy, ~0.2 s) loads when the demo runs, not with the CLI's parser
        from models.workload.segments import plan_segments

        state = self.state
        started = time.monotonic()
        self.progress.draw(force=True)
        self._status(None, "starting")
        plan: list[tuple[int, Segment, bool]] = []  # (region, segment, metrics left)
        for k, region in enumerate(state.regions):
            for seg in plan_segments(region.start, region.end)[0]:
                plan.append((k, seg, not self._metrics_stored(seg, region.end)))
        jobs = [
            SegmentJob(
                state.seed,
                state.rate_scale,
                seg.start,
                seg.end,
                state.regions[k].end,
                traces=not state.regions[k].traces_done,
                metrics=left,
            )
            for k, seg, left in plan
            if seg != self.feed.live_first and (left or not state.regions[k].traces_done)
        ]
        # The workers start first: the newest segment, simulated here, takes a while.
        results = self._start_workers(jobs)
        # The newest history's segment, if it ends now, is the first live hour's: live
        # traffic holds it too, so it is simulated once, here.
        shared = any(seg == self.feed.live_first for _, seg, _ in plan)
        if shared:
            self.feed.source.acquire(self.feed.live_first)
        # The scheduled 60-s refresh waits until the history is stored: each run would cost
        # the hours loaded since the last (a day's spans and scrapes a minute), competing with
        # the load for the same cores; the loader refreshes once at the end instead.
        service = self.feed.service
        paused = service.pause_refresh()
        try:
            self._segments(plan, results, started)
        finally:
            if shared:
                self.feed.source.release(self.feed.live_first)
            if paused and not self.feed.stop.is_set():
                service.resume_refresh()

    def _segments(
        self, plan: list[tuple[int, Segment, bool]], results: _Results, started: float
    ) -> None:
        state = self.state
        last_of_region = {k: i for i, (k, _, _) in enumerate(plan)}
        for i, (k, seg, left) in enumerate(plan):
            region = state.regions[k]
            if seg == self.feed.live_first:
                if not self._local_segment(seg, region, left):
                    return
            elif left or not region.traces_done:
                batches = self._next_result(results)
                if batches is None:
                    return
                assert (batches.job.start, batches.job.end) == (seg.start, seg.end)
                for window in batches.traces:
                    if not self._send(window):
                        return
                for mwindow in batches.metrics:
                    if not self._store(mwindow, region.end):
                        return
            self.sender.drain()
            if not self._check():
                return
            if last_of_region[k] == i and not region.traces_done:
                regions = list(state.regions)
                regions[k] = replace(region, traces_done=True)
                state.save(regions=regions)
            self._status(seg.start, f"{duration(time.monotonic() - started)} so far")
        self.sender.drain()
        if not self._check():
            return
        self.feed.service.ingestor.flush(600)
        loaded = self.timings["stored"] = time.monotonic() - started
        self._status(self.history_start, "costing the loaded history")
        self.feed.service.refresh_ledger()
        if not self._check():
            return
        self.timings["costed"] = time.monotonic() - started
        state.save(regions=[])
        from ledger.load_status import finish_load

        finish_load(self.feed.service.storage)
        self.timings["load_status cleared"] = time.monotonic() - started
        self.done.set()
        self.progress.finish(
            f"history loaded: {self.sender.spans:,} spans and {self.samples:,} samples "
            f"({self.scrapes:,} scrapes) in {duration(loaded)}; costed in "
            f"{duration(time.monotonic() - started)}"
        )

    def _start_workers(self, jobs: list[SegmentJob]) -> _Results:
        results = _Results(jobs)
        if not jobs:
            return results
        import multiprocessing

        # spawn: this process runs threads (the server, DuckDB), which fork would copy mid-state
        ctx = multiprocessing.get_context("spawn")
        with self._pool_lock:
            if self._closed:
                return results
            self._pool = ctx.Pool(min(HISTORY_PROCESSES, len(jobs)), initializer=_ignore_sigint)
            results.start(self._pool)
        return results

    def _next_result(self, results: _Results) -> SegmentBatches | None:
        import multiprocessing

        while True:
            if not self._check():
                return None
            try:
                return results.next(timeout_s=0.5)
            except multiprocessing.TimeoutError:
                continue

    def _local_segment(self, seg: Segment, region: Region, metrics_left: bool) -> bool:
        simulated = self.feed.source.get(seg)
        if not region.traces_done:
            for window in trace_windows(simulated, seg, region.end):
                if not self._send(window):
                    return False
        if metrics_left:
            for mwindow in metric_windows(simulated, seg, region.end):
                if not self._store(mwindow, region.end):
                    return False
        return True

    def _send(self, window: TraceWindow) -> bool:
        for body, n in window.bodies:
            if not self._check():
                return False
            self.sender.submit(body, n, self._spans_stored)
        self.progress.advance(window.weight)
        return self._check()

    def _metrics_stored(self, seg: Segment, region_end: float) -> bool:
        from models.workload.feed import ticks

        expected = sum(
            len(ticks(start, end, interval))
            for start, end, interval in history_windows(seg, region_end)
        ) * len(self.feed.targets)
        stored = self.feed.service.storage.scalar(
            "select count(*) from scrapes where ts >= ? and ts < ?",
            [_utc(seg.start), _utc(min(seg.end, region_end))],
        )
        return stored >= expected

    def _store(self, window: MetricWindow, region_end: float) -> bool:
        """Store one window's scrapes in one write, less any already stored."""
        if not self._check():
            return False
        storage = self.feed.service.storage
        stored = {
            (target, round(at))
            for target, at in storage.fetchall(
                "select target, epoch(ts) from scrapes where ts >= ? and ts < ?",
                [_utc(window.start), _utc(window.end)],
            )
        }
        scrapes, samples = window.scrapes, window.samples
        if stored:
            keep = np.array([(t, round(at)) not in stored for t, at, _ in scrapes], dtype=bool)
            counts = np.array([n for _, _, n in scrapes], dtype=np.int64)
            samples = samples.filter(np.repeat(keep, counts))
            scrapes = [s for s, k in zip(scrapes, keep.tolist(), strict=True) if k]
        if scrapes:
            targets = self.feed.targets
            self.scraper.store_scrapes([(targets[t], _utc(at), n) for t, at, n in scrapes], samples)
            self.scrapes += len(scrapes)
            self.samples += samples.num_rows
            self.state.add_counts(0, samples.num_rows)
            self.progress.advance(samples=samples.num_rows)
        self.progress.advance((window.end - window.start) / DAY_S * METRIC_COST)
        return self._check()


class _Results:
    """The workers' segments in job order, with at most HISTORY_PROCESSES + 1 asked ahead of
    the one being stored: a day's bodies and rows are ~0.4 GB, and this process (which ingests
    them) is the slower side, so results asked all at once would pile up in memory."""

    def __init__(self, jobs: list[SegmentJob]) -> None:
        self._jobs = list(jobs)
        self._pending: list[Any] = []
        self._pool: Any = None

    def start(self, pool: Any) -> None:
        self._pool = pool
        self._top_up()

    def _top_up(self) -> None:
        while self._jobs and len(self._pending) < HISTORY_PROCESSES + 1:
            self._pending.append(self._pool.apply_async(build_segment, (self._jobs.pop(0),)))

    def next(self, timeout_s: float) -> SegmentBatches:
        if not self._pending:
            raise DemoError("a history worker returned fewer segments than asked")
        batches = self._pending[0].get(timeout_s)  # multiprocessing.TimeoutError: not yet
        self._pending.pop(0)
        self._top_up()
        return batches


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _ignore_sigint() -> None:
    """A history worker ignores Ctrl-C: the terminal sends it to the whole process group, and
    the demo stops its workers itself (a worker's KeyboardInterrupt only printed tracebacks)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
