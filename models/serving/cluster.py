"""The event loop: arrivals, a router, and replicas, on one global clock.

Events are (a) request arrivals, taken from the caller's iterable in arrival order, (b) the end
of each replica's step or stretch in flight, from one heap, and (c) metric samples every
sample_interval_s. At equal times arrivals come first (so a step starting at t sees every request
that arrived at t), then step ends, then samples.

ClusterState holds one run's replicas, router, heap and sampling clock and applies single
events; Cluster.run drives it over a whole workload, models/serving/live.py one request and one
instant at a time.

When no replica can affect another (round-robin routing, no concurrency limit, no step
observer), Cluster.run runs the replicas one after the other instead, each over its own
arrivals with no heap (_run_independent): the same events in the same order per replica, the
same result bit for bit (tests/test_sim_speed_identity.py), 1.2-1.4x faster at 16 replicas.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterable, Iterator, Mapping
from heapq import heappop, heappush, heapreplace
from operator import attrgetter

from models.execution_time import ExecutionTimePredictor
from models.serving.config import ClusterConfig, RouterPolicy, SimulationOptions
from models.serving.jitter import StepJitter
from models.serving.records import ReplicaRecord, RequestRecord, SimulationResult
from models.serving.replica import Replica, StepObserver
from models.serving.request import Request, RequestSpec
from models.serving.router import make_router


class ClusterState:
    """One run's mutable state: replicas, router, the heap of replica event times, the sampling
    clock, and the sink of finished requests. The caller decides the order of events (arrivals
    before step ends at equal times); this class applies them one at a time."""

    def __init__(
        self,
        config: ClusterConfig,
        predictor: ExecutionTimePredictor,
        options: SimulationOptions,
        step_observer: StepObserver | None = None,
        *,
        step_jitter_cv: float = 0.0,
        seed: int = 0,
    ) -> None:
        """step_jitter_cv > 0: each replica's step durations get seeded lognormal noise of
        that coefficient of variation (models/serving/jitter.py; the served simulation only)."""
        self.sink: list[RequestRecord] = []
        self.replicas = [
            Replica(
                i,
                config.replica,
                predictor,
                options,
                self.sink,
                step_observer,
                StepJitter(step_jitter_cv, seed, i) if step_jitter_cv > 0 else None,
            )
            for i in range(config.num_replicas)
        ]
        self.router = make_router(config.router, self.replicas)
        # (event time, replica index, replica version); an entry whose version is stale was
        # superseded (its stretch was cut short) and is dropped when it reaches the top.
        self.heap: list[tuple[float, int, int]] = []
        self.sent = 0  # requests that have arrived; each one's seq_no
        self.interval = options.sample_interval_s
        self.sample_base = 0.0
        self.sample_idx = 0
        self.next_sample = math.inf  # no samples until start_sampling()

    def start_sampling(self, start: float) -> None:
        """Sample every interval on the grid that contains `start`, from its last point <=
        start."""
        self.sample_base = math.floor(start / self.interval) * self.interval
        self.sample_idx = 0
        self.next_sample = self.sample_base

    def next_event_s(self) -> float:
        """Time of the earliest pending replica event (possibly a superseded one), or inf."""
        return self.heap[0][0] if self.heap else math.inf

    def arrive(
        self, spec: RequestSpec, now: float, replica: int | None = None
    ) -> tuple[Request, int]:
        """A request arrives at `now`: route it (or send it straight to `replica`, bypassing the
        router) and hand it to its replica. Returns the engine's request and the replica
        index."""
        req = Request(spec, self.sent, now)
        self.sent += 1
        i = self.router.route(req) if replica is None else replica
        rep = self.replicas[i]
        t_next = rep.accept(req, now)
        if t_next is not None:
            heappush(self.heap, (t_next, i, rep.version))
        return req, i

    def abort_request(self, req: Request, replica: int, now: float) -> None:
        """Abort one request of `replica` at `now` (its client went away)."""
        rep = self.replicas[replica]
        t_next = rep.abort_request(req, now)
        if t_next is not None:
            heappush(self.heap, (t_next, replica, rep.version))

    def pop_event(self) -> int:
        """Apply the earliest pending replica event. Returns its replica index, or -1 when the
        entry was superseded (nothing happened). Cluster._loop inlines this: keep the two
        alike."""
        heap = self.heap
        th, i, version = heap[0]
        rep = self.replicas[i]
        if version != rep.version:
            heappop(heap)
            return -1
        t_next = rep.on_event(th)
        if t_next is not None:
            heapreplace(heap, (t_next, i, rep.version))
        else:
            heappop(heap)
        return i

    def sample_before(self, t: float) -> None:
        """Take every sample due strictly before `t`."""
        interval = self.interval
        while self.next_sample < t:
            for rep in self.replicas:
                rep.sample(self.next_sample)
            self.sample_idx += 1
            self.next_sample = self.sample_base + self.sample_idx * interval

    def sample_final(self, now: float) -> None:
        """The samples due up to `now` inclusive, then one at `now` itself (final values of
        every counter) unless a grid sample fell exactly there."""
        self.sample_before(math.nextafter(now, math.inf))
        if self.sample_base + (self.sample_idx - 1) * self.interval < now:
            for rep in self.replicas:
                rep.sample(now)

    def abort(self, now: float) -> None:
        """Finish every request in flight with "abort" (end of a horizon-limited run)."""
        for rep in self.replicas:
            rep.abort(now)

    def replica_records(self) -> tuple[ReplicaRecord, ...]:
        return tuple(rep.record() for rep in self.replicas)


class Cluster:
    """Replicas of one engine configuration behind a router.

    The predictor prices every replica's steps. run() builds fresh replicas each time, so one
    Cluster can run many workloads; the same inputs always give the same result.
    """

    def __init__(
        self,
        config: ClusterConfig,
        predictor: ExecutionTimePredictor,
        options: SimulationOptions | None = None,
    ) -> None:
        self.config = config
        self.predictor = predictor
        self.options = options if options is not None else SimulationOptions()

    def run(
        self,
        specs: Iterable[RequestSpec],
        *,
        max_concurrency: int | None = None,
        client_delay_s: Mapping[str, float] | None = None,
        step_observer: StepObserver | None = None,
    ) -> SimulationResult:
        """Serve `specs` (sorted by arrival_s). max_concurrency: like `vllm bench serve
        --max-concurrency`, the client holds a request back until fewer than this many are in
        flight; its arrival is then the time it is actually sent. client_delay_s: request id ->
        the client + network time a request's response takes to reach its client; under
        max_concurrency the request's slot is free only then (a closed-loop client sends its
        next request after reading the last response), not when the engine finishes it.
        step_observer: called for every engine step (see models/serving/replica.py;
        models/serving/step_shares.py)."""
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        options = self.options
        state = ClusterState(self.config, self.predictor, options, step_observer)
        sink = state.sink
        horizon = options.horizon_s if options.horizon_s is not None else math.inf

        specs_iter = iter(specs)
        spec = next(specs_iter, None)
        if spec is None:
            return SimulationResult(self.config, options, (), state.replica_records(), 0.0, 0.0)
        start = spec.arrival_s
        state.start_sampling(start)
        # The run allocates millions of objects and frees few cycles (requests, records and
        # trie nodes form none once released): the cyclic collector's passes over the growing
        # heap cost ~12 % of a long run and find nothing, so it is off until the run ends.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        independent = (
            max_concurrency is None
            and step_observer is None
            and self.config.router is RouterPolicy.ROUND_ROBIN
        )
        order: list[int] | None = None
        try:
            if independent:
                now, order = _run_independent(state, spec, specs_iter, start, horizon)
            else:
                now = self._loop(
                    state, spec, specs_iter, start, horizon, max_concurrency, client_delay_s or {}
                )
        finally:
            if gc_was_enabled:
                gc.enable()
        if independent:
            if order is not None:  # arrival ties: restore the one-loop sink order first
                sink[:] = [sink[k] for k in order]
        else:
            state.sample_final(now)
        records = sorted(sink, key=_arrival_order)  # stable: ties keep the sink's order
        return SimulationResult(
            config=self.config,
            options=options,
            requests=tuple(records),
            replicas=state.replica_records(),
            start_s=start,
            end_s=now,
        )

    @staticmethod
    def _loop(
        state: ClusterState,
        spec: RequestSpec | None,
        specs_iter: Iterator[RequestSpec],
        start: float,
        horizon: float,
        max_concurrency: int | None,
        client_delay_s: Mapping[str, float],
    ) -> float:
        """Run's event loop; returns the time the run ends. ClusterState.pop_event is inlined
        here (it is the hot path: one call per step or stretch).

        Under max_concurrency, a finished request's slot is released at its finish time plus
        its client delay (`slots`, a heap of release times); a request held back by the limit
        is sent when a slot is released (`gate_open`)."""
        sink = state.sink
        heap = state.heap
        replicas = state.replicas
        limit = max_concurrency if max_concurrency is not None else math.inf
        limited = max_concurrency is not None
        delay_of = client_delay_s.get
        slots: list[float] = []  # release times of finished requests' slots
        seen = 0  # records in sink whose slot release is in `slots` or done
        released = 0  # slots released
        specs_next = specs_iter.__next__
        last_arrival = -math.inf
        gate_open = -math.inf  # when the concurrency limit last let a request through
        now = start
        inf = math.inf
        while True:
            if limited:
                while seen < len(sink):
                    rec = sink[seen]
                    heappush(slots, rec.finished_s + delay_of(rec.request_id, 0.0))
                    seen += 1
                while slots and slots[0] <= now:
                    t_free = heappop(slots)
                    if state.sent - released >= limit:
                        gate_open = t_free
                    released += 1
            if spec is None:
                ta = inf
            elif limited and state.sent - released >= limit:
                ta = slots[0] if slots else inf  # the next release lets it go
                if ta < spec.arrival_s:
                    ta = spec.arrival_s
            else:
                ta = spec.arrival_s
                if ta < gate_open:
                    ta = gate_open
            th = heap[0][0] if heap else inf
            t = ta if ta <= th else th
            if t == inf:
                break
            if t > horizon:
                state.sample_before(horizon)
                now = horizon
                state.abort(horizon)
                break
            if state.next_sample < t:
                state.sample_before(t)
            now = t
            if ta <= th:
                arrival = spec.arrival_s  # type: ignore[union-attr]
                if arrival < last_arrival:
                    raise ValueError(
                        f"request specs must be sorted by arrival_s: {spec.request_id}"  # type: ignore[union-attr]
                    )
                last_arrival = arrival
                if limited and state.sent - released >= limit:
                    # sent at a slot's release: release it first
                    t_free = heappop(slots)
                    gate_open = t_free
                    released += 1
                state.arrive(spec, ta)  # type: ignore[arg-type]
                try:
                    spec = specs_next()
                except StopIteration:
                    spec = None
            else:
                # state.pop_event(), inlined
                _, i, version = heap[0]
                rep = replicas[i]
                if version != rep.version:
                    heappop(heap)
                else:
                    t_next = rep.on_event(th)
                    if t_next is not None:
                        heapreplace(heap, (t_next, i, rep.version))
                    else:
                        heappop(heap)
        return now


_arrival_order = attrgetter("arrival_s")  # RequestRecord -> arrival_s (a C key: 30 % faster)


def _run_independent(
    state: ClusterState,
    spec0: RequestSpec,
    specs_iter: Iterator[RequestSpec],
    start: float,
    horizon: float,
) -> tuple[float, list[int] | None]:
    """Cluster.run's loop when the replicas cannot affect one another: round-robin routing
    (request j goes to replica j mod n whatever the load), no concurrency limit, no step
    observer. Each replica then runs alone over its own arrivals, one replica after the other,
    with no heap between them; the result is the one Cluster._loop gives, event for event:

    * a replica's events are applied in the same order (its arrival before its step end at
      equal times, as in _loop), and each of its samples at grid time g is taken after its
      events at times <= g and before the later ones, as _loop's sample_before does;
    * the run ends where _loop's does: at the horizon if any arrival or step end falls after
      it (every replica is then aborted there), else at the last arrival or step end;
    * the sink is filled replica by replica; the records are later sorted by arrival time,
      stably, so only requests with equal arrival times could come out in another order.
      When the specs hold such ties, each record gets the key of the event that wrote it
      (time, arrivals before step ends before horizon aborts, then the arriving request or the
      replica index: _loop's order) and the returned permutation restores _loop's sink order.

    Also takes the final samples (ClusterState.sample_final's). Returns (end time, the sink
    permutation or None)."""
    replicas = state.replicas
    n = len(replicas)
    sink = state.sink
    inf = math.inf
    # Deal the arrivals out as RoundRobinRouter would. _loop never reaches an arrival after
    # the horizon (nor checks the order of what follows it).
    dealt: list[list[RequestSpec]] = [[] for _ in range(n)]
    last = -inf
    ties = False
    beyond = False  # an arrival falls after the horizon
    i = 0
    spec: RequestSpec | None = spec0
    while spec is not None:
        a = spec.arrival_s
        if a > horizon:
            beyond = True
            break
        if a <= last:
            if a < last:
                raise ValueError(f"request specs must be sorted by arrival_s: {spec.request_id}")
            ties = True
        last = a
        dealt[i].append(spec)
        i += 1
        if i == n:
            i = 0
        spec = next(specs_iter, None)
    state.sent = sum(len(d) for d in dealt)
    keys: list[tuple[float, int, int]] | None = [] if ties else None
    interval = state.interval
    base = state.sample_base
    end = start  # _loop's `now`: the last event applied
    cut = beyond  # the run stops at the horizon
    next_idx = [0] * n
    for i, rep in enumerate(replicas):
        on_event = rep.on_event
        accept = rep.accept
        sample = rep.sample
        t_end = inf  # the replica's pending event (a superseded one is simply forgotten)
        idx = 0
        next_sample = base
        seq = i
        # The step-end block below is written out twice (before each arrival, then up to the
        # horizon) on purpose: a shared function costs a call per event on the hottest path.
        for spec in dealt[i]:
            ta = spec.arrival_s
            while t_end < ta:  # a step end strictly before the arrival comes first
                while next_sample < t_end:
                    sample(next_sample)
                    idx += 1
                    next_sample = base + idx * interval
                m = len(sink)
                t = on_event(t_end)
                if keys is not None and len(sink) > m:
                    keys.extend([(t_end, 1, i)] * (len(sink) - m))
                if t_end > end:
                    end = t_end
                t_end = inf if t is None else t
            while next_sample < ta:
                sample(next_sample)
                idx += 1
                next_sample = base + idx * interval
            m = len(sink)
            t = accept(Request(spec, seq, ta), ta)
            if keys is not None and len(sink) > m:
                keys.extend([(ta, 0, seq)] * (len(sink) - m))
            if ta > end:
                end = ta
            seq += n
            if t is not None:
                t_end = t
        while t_end <= horizon and t_end != inf:
            while next_sample < t_end:
                sample(next_sample)
                idx += 1
                next_sample = base + idx * interval
            m = len(sink)
            t = on_event(t_end)
            if keys is not None and len(sink) > m:
                keys.extend([(t_end, 1, i)] * (len(sink) - m))
            if t_end > end:
                end = t_end
            t_end = inf if t is None else t
        if t_end != inf:
            cut = True
        next_idx[i] = idx
    if cut:
        end = horizon
        for i, rep in enumerate(replicas):
            idx = next_idx[i]
            while base + idx * interval < horizon:
                rep.sample(base + idx * interval)
                idx += 1
            next_idx[i] = idx
            m = len(sink)
            rep.abort(horizon)
            if keys is not None and len(sink) > m:
                keys.extend([(horizon, 2, i)] * (len(sink) - m))
    # ClusterState.sample_final(end), replica by replica
    for i, rep in enumerate(replicas):
        idx = next_idx[i]
        while base + idx * interval <= end:
            rep.sample(base + idx * interval)
            idx += 1
        if base + (idx - 1) * interval < end:
            rep.sample(end)
        next_idx[i] = idx
    state.sample_idx = next_idx[0]
    state.next_sample = base + next_idx[0] * interval
    if keys is None:
        return end, None
    return end, sorted(range(len(sink)), key=lambda k: (*keys[k], k))
