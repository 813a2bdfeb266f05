"""The event loop: arrivals, a router, and replicas, on one global clock.

Events are (a) request arrivals, taken from the caller's iterable in arrival order, (b) the end
of each replica's step or stretch in flight, from one heap, and (c) metric samples every
sample_interval_s. At equal times arrivals come first (so a step starting at t sees every request
that arrived at t), then step ends, then samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from heapq import heappop, heappush, heapreplace

from models.execution_time import ExecutionTimePredictor
from models.serving.config import ClusterConfig, SimulationOptions
from models.serving.records import RequestRecord, SimulationResult
from models.serving.replica import Replica
from models.serving.request import Request, RequestSpec
from models.serving.router import make_router


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
        self, specs: Iterable[RequestSpec], *, max_concurrency: int | None = None
    ) -> SimulationResult:
        """Serve `specs` (sorted by arrival_s). max_concurrency: like `vllm bench serve
        --max-concurrency`, the client holds a request back until fewer than this many are in
        flight; its arrival is then the time it is actually sent."""
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        options = self.options
        sink: list[RequestRecord] = []
        replicas = [
            Replica(i, self.config.replica, self.predictor, options, sink)
            for i in range(self.config.num_replicas)
        ]
        router = make_router(self.config.router, replicas)
        horizon = options.horizon_s if options.horizon_s is not None else math.inf
        interval = options.sample_interval_s
        limit = max_concurrency if max_concurrency is not None else math.inf

        heap: list[tuple[float, int, int]] = []
        specs_iter = iter(specs)
        spec = next(specs_iter, None)
        if spec is None:
            records = tuple(rep.record() for rep in replicas)
            return SimulationResult(self.config, options, (), records, 0.0, 0.0)
        start = spec.arrival_s
        sample_base = math.floor(start / interval) * interval
        sample_idx = 0
        next_sample = sample_base
        last_arrival = -math.inf
        gate_open = -math.inf  # when the concurrency limit last let a request through
        sent = 0
        now = start
        limited = max_concurrency is not None
        while True:
            if spec is None or (limited and sent - len(sink) >= limit):
                ta = math.inf
            else:
                ta = spec.arrival_s
                if ta < gate_open:
                    ta = gate_open
            th = heap[0][0] if heap else math.inf
            t = ta if ta <= th else th
            if t == math.inf:
                break
            if t > horizon:
                while next_sample < horizon:
                    for rep in replicas:
                        rep.sample(next_sample)
                    sample_idx += 1
                    next_sample = sample_base + sample_idx * interval
                now = horizon
                for rep in replicas:
                    rep.abort(horizon)
                break
            while next_sample < t:
                for rep in replicas:
                    rep.sample(next_sample)
                sample_idx += 1
                next_sample = sample_base + sample_idx * interval
            now = t
            if ta <= th:
                if spec.arrival_s < last_arrival:  # type: ignore[union-attr]
                    raise ValueError(
                        f"request specs must be sorted by arrival_s: {spec.request_id}"  # type: ignore[union-attr]
                    )
                last_arrival = spec.arrival_s  # type: ignore[union-attr]
                req = Request(spec, sent, ta)  # type: ignore[arg-type]
                sent += 1
                i = router.route(req)
                rep = replicas[i]
                t_next = rep.accept(req, ta)
                if t_next is not None:
                    heappush(heap, (t_next, i, rep.version))
                spec = next(specs_iter, None)
            else:
                _, i, version = heap[0]
                rep = replicas[i]
                if version != rep.version:
                    heappop(heap)  # superseded (its stretch was cut short)
                    continue
                at_limit = limited and sent - len(sink) >= limit
                t_next = rep.on_event(th)
                if t_next is not None:
                    heapreplace(heap, (t_next, i, rep.version))
                else:
                    heappop(heap)
                if at_limit and sent - len(sink) < limit:
                    gate_open = th
        while next_sample <= now:
            for rep in replicas:
                rep.sample(next_sample)
            sample_idx += 1
            next_sample = sample_base + sample_idx * interval
        if sample_base + (sample_idx - 1) * interval < now:
            for rep in replicas:
                rep.sample(now)  # final values of every counter
        records = sorted(sink, key=_arrival_order)
        return SimulationResult(
            config=self.config,
            options=options,
            requests=tuple(records),
            replicas=tuple(rep.record() for rep in replicas),
            start_s=start,
            end_s=now,
        )


def _arrival_order(record: RequestRecord) -> float:
    return record.arrival_s
