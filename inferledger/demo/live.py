"""Live traffic: what the simulated company does, sent as the wall clock passes it.

The simulation of the newest history day runs on into the first live hour; from then on each
day is simulated ahead (starting LIVE_LEAD_S before it is needed) and released as the clock
passes it: spans every LIVE_TICK_S, every target's page at each scrape time. `live_until` in
the state file records how far it got, so the next run backfills from there.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from inferledger.demo.senders import Feed
from inferledger.demo.state import DAY_S, SCRAPE_INTERVAL_S, DemoError

if TYPE_CHECKING:
    from models.workload.feed import SimulatedSegment
    from models.workload.segments import Segment

LIVE_SEGMENT_S = DAY_S  # later live traffic is simulated a day at a time...
LIVE_LEAD_S = 1_800.0  # ...starting this long before it is needed
LIVE_TICK_S = 5.0  # how often live spans are sent


class LiveFeeder:
    """Sends what the simulated company does as the wall clock passes it."""

    def __init__(self, feed: Feed, *, clock: Callable[[], float]) -> None:
        self.feed = feed
        self.state = feed.state
        self.clock = clock
        self.sender = feed.span_sender(workers=2, max_pending=8)
        self.replayer = feed.metric_replayer(workers=2)

    def close(self) -> None:
        # Live data already counted in live_until: let it reach the service before it stops.
        self.sender.drain()
        self.replayer.drain()
        self.sender.close()
        self.replayer.close()

    def run(self) -> None:
        # models.workload (numpy, ~0.2 s) loads when the demo runs, not with the CLI's parser
        from models.workload.segments import Segment

        feed, state, stop = self.feed, self.state, self.feed.stop
        first = feed.live_first
        active: list[tuple[Segment, SimulatedSegment]] = [(first, feed.source.acquire(first))]
        span_mark = feed.t0
        next_tick = feed.t0
        while not stop.is_set():
            now = self.clock()
            last_seg, _ = active[-1]
            if last_seg.end - now < LIVE_LEAD_S:
                nxt = Segment(last_seg.end, last_seg.end + LIVE_SEGMENT_S)
                active.append((nxt, feed.source.get(nxt)))
                continue
            for _, segment in active:
                for req, n in segment.export_requests(span_mark, now):
                    self.sender.submit(req.SerializeToString(), n, self._count_spans)
            span_mark = now
            while next_tick <= now and not stop.is_set():
                if not self._scrape(active, next_tick):
                    break
                next_tick += SCRAPE_INTERVAL_S
            self.replayer.drain()
            if self.sender.error or self.replayer.error:
                raise DemoError(self.sender.error or self.replayer.error or "")
            state.save(live_until=next_tick)
            # Segments whose time and tails have passed are done.
            while (
                len(active) > 1
                and active[0][0].end <= now
                and (active[0][1].last_end_unix_s < span_mark)
            ):
                if active[0][0] == first:
                    feed.source.release(first)
                active.pop(0)
            wait = min(LIVE_TICK_S, max(0.0, next_tick - self.clock())) or LIVE_TICK_S
            stop.wait(wait)

    def _scrape(self, active: list[tuple[Segment, SimulatedSegment]], at: float) -> bool:
        """Store every target's page at `at`; False when stopping before all were queued."""
        # A page the previous run stored just before it stopped is not stored twice.
        stored = {
            name
            for (name,) in self.feed.service.storage.fetchall(
                "select target from scrapes where ts = ?", [datetime.fromtimestamp(at, UTC)]
            )
        }
        state = self.state
        for seg, simulated in active:
            if seg.start <= at < seg.end:
                for target, text in simulated.pages(at):
                    if target.name in stored:
                        continue
                    if not self.replayer.submit(
                        self.feed.targets[target.name], text, at, lambda k: state.add_counts(0, k)
                    ):
                        return False
                return True
        raise DemoError(f"no simulated segment covers {at}")  # segments are prepared ahead

    def _count_spans(self, spans: int) -> None:
        self.state.add_counts(spans, 0)
