"""The simulator run incrementally: requests submitted one at a time as they arrive, the clock
advanced on demand — what `inferledger simulate --serve` puts behind its OpenAI-compatible API.

LiveCluster drives the same ClusterState (replicas, router, event heap, sampling clock) as the
batch Cluster.run, under the same ordering rules: at equal times arrivals come first, then step
ends, then samples. So the same requests submitted at the same times give the same records, replica
counters and sampled series as a batch run (tests/test_sim_server.py checks it): advance_to(t)
applies the events before t only, so a request submitted at t still precedes the steps ending
at t.

No clock and no threads here: the caller maps wall time to virtual time (virtual = speed x
(wall - start)) and calls submit()/advance_to() from one thread.

Client disconnects: abort(handle) aborts one request as vLLM does when a client goes away
(AsyncLLM.abort -> EngineCore.abort_requests -> Scheduler.finish_requests(FINISHED_ABORTED)):
a waiting request leaves at once; a running one at the end of the step in flight, with the
tokens produced by then; its KV blocks are freed and its record says finish_reason "abort".

Timing noise: step_jitter_cv > 0 multiplies every step's predicted duration by a seeded
lognormal factor of mean 1 (models/serving/jitter.py), so token gaps vary as a real engine's
do; the default, 0, keeps the batch run's exact timings.

Streaming: tokens_produced(handle) is the number of output tokens a request has produced by the
current virtual time at engine-step granularity, including the steps already ended inside a
stretch of pure-decode steps that is still in flight (Replica.stretch_steps_done). For requests
submitted with track_tokens=True, token_times(handle) also gives when each token was produced
(the end of the step that sampled it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from models.execution_time import ExecutionTimePredictor, StepShape
from models.serving.cluster import ClusterState
from models.serving.config import ClusterConfig, SimulationOptions
from models.serving.records import ReplicaRecord, RequestRecord
from models.serving.replica import Replica
from models.serving.request import Request, RequestSpec, RequestStatus


class RequestHandle:
    """A submitted request: where it went and, once it has finished, its record."""

    __slots__ = ("record", "replica", "request", "spec", "token_times", "track_tokens")

    def __init__(self, spec: RequestSpec, request: Request, replica: int, track: bool) -> None:
        self.spec = spec
        self.request = request  # the engine's mutable state; read it only through LiveCluster
        self.replica = replica
        self.track_tokens = track
        self.token_times: list[float] = []  # only when track_tokens
        self.record: RequestRecord | None = None

    @property
    def request_id(self) -> str:
        return self.spec.request_id

    @property
    def done(self) -> bool:
        return self.record is not None

    def __repr__(self) -> str:
        state = "done" if self.record is not None else self.request.status.value
        return f"RequestHandle({self.request_id!r}, replica={self.replica}, {state})"


class LiveCluster:
    """A Cluster whose clock the caller advances; not thread-safe (one driving thread)."""

    def __init__(
        self,
        config: ClusterConfig,
        predictor: ExecutionTimePredictor,
        options: SimulationOptions | None = None,
        *,
        start_s: float = 0.0,
        step_jitter_cv: float = 0.0,
        seed: int = 0,
    ) -> None:
        options = options if options is not None else SimulationOptions()
        if options.horizon_s is not None:
            raise ValueError(
                "a live cluster has no horizon: leave SimulationOptions.horizon_s None"
            )
        if not math.isfinite(start_s):
            raise ValueError(f"start_s must be finite, got {start_s}")
        self.config = config
        self.predictor = predictor
        self.options = options
        self.start_s = start_s
        self._state = ClusterState(
            config, predictor, options, step_jitter_cv=step_jitter_cv, seed=seed
        )
        self._state.start_sampling(start_s)
        self._now = start_s
        self._live: dict[str, RequestHandle] = {}
        # Handles whose token times are tracked, per replica: only their replicas' events are
        # looked at one by one.
        self._tracked: list[dict[str, RequestHandle]] = [{} for _ in range(config.num_replicas)]
        self._finished: list[RequestRecord] = []

    # -- clock ------------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """The virtual time the cluster has been advanced to."""
        return self._now

    @property
    def replicas(self) -> Sequence[Replica]:
        return self._state.replicas

    @property
    def num_in_flight(self) -> int:
        """Requests submitted and not finished."""
        return len(self._live)

    def submit(
        self, spec: RequestSpec, *, replica: int | None = None, track_tokens: bool = False
    ) -> RequestHandle:
        """A request arrives at spec.arrival_s (>= now): every event before that instant is
        applied first, then the router places it (or `replica` gets it directly, as when a
        client talks to one vLLM server of several). A request that can never be served
        (prompt + max_tokens over max_model_len, or more KV than the replica holds) finishes at
        once with finish_reason "error", as vLLM rejects it."""
        t = spec.arrival_s
        if t < self._now:
            raise ValueError(
                f"{spec.request_id}: arrival_s {t} is before the cluster's time {self._now}"
            )
        if spec.request_id in self._live:
            raise ValueError(f"{spec.request_id}: a request with this id is in flight")
        if replica is not None and not 0 <= replica < len(self._state.replicas):
            raise ValueError(f"no replica {replica} (the cluster has {len(self._state.replicas)})")
        self._run_until(t, inclusive=False)
        self._now = t
        req, i = self._state.arrive(spec, t, replica)
        handle = RequestHandle(spec, req, i, track_tokens)
        self._live[spec.request_id] = handle
        if track_tokens:
            self._tracked[i][spec.request_id] = handle
        self._collect()
        return handle

    def advance_to(self, t: float) -> list[RequestRecord]:
        """Apply every event before `t`; return the records of the requests that finished since
        the last call (in the order they finished). Events at exactly `t` wait for the next
        call, so that a request submitted at `t` still comes before them, as in a batch run."""
        if t < self._now:
            raise ValueError(f"cannot go back in time from {self._now} to {t}")
        self._run_until(t, inclusive=False)
        self._now = t
        return self._take_finished()

    def run_until_idle(self) -> list[RequestRecord]:
        """Apply events until every submitted request has finished (a batch run's tail, at
        infinite speed); take the final samples as a batch run does. Returns the records."""
        heap = self._state.heap
        while heap:
            th = heap[0][0]
            self._run_until(th, inclusive=True)
            self._now = max(self._now, th)
        self._state.sample_final(self._now)
        return self._take_finished()

    def abort_all(self) -> list[RequestRecord]:
        """Finish every request in flight now with "abort" (server shutdown); the cluster stays
        usable. Returns the records finished since the last call."""
        for watch in self._tracked:
            for handle in watch.values():
                self.token_times(handle)  # the steps of a stretch in flight that have ended
        self._state.abort(self._now)
        self._collect()
        return self._take_finished()

    def abort(self, handle: RequestHandle) -> list[RequestRecord]:
        """The request's client went away: abort it now (see the module's docstring); nothing
        happens if it has finished. Returns the records finished since the last call (the
        aborted request's among them when it was waiting; a running one's comes with the end
        of the step in flight, from a later advance_to())."""
        if handle.record is None:
            self._state.abort_request(handle.request, handle.replica, self._now)
            self._collect()
        return self._take_finished()

    def next_event_s(self) -> float:
        """Time of the next replica event (a step or stretch ending, requests finishing with
        it): inf when idle. Rarely, the time of an entry a cut stretch superseded (nothing
        happens then; the caller just looks again)."""
        return self._state.next_event_s()

    def next_step_end_s(self) -> float:
        """When the next engine step of any replica ends after now (inf when all are idle):
        when streamed requests next get tokens."""
        now = self._now
        return min((rep.next_step_end_s(now) for rep in self._state.replicas), default=math.inf)

    def sample_now(self) -> None:
        """Record every replica's gauges and counters as of now, off the sampling grid (a live
        /metrics scrape wants current values, not the last grid sample's)."""
        for rep in self._state.replicas:
            rep.sample(self._now)

    # -- per request --------------------------------------------------------------------------

    def tokens_produced(self, handle: RequestHandle) -> int:
        """Output tokens the request has produced by now, at engine-step granularity."""
        record = handle.record
        if record is not None:
            return record.output_tokens
        r = handle.request
        if not r.decoding:
            return r.num_output_tokens
        rep = self._state.replicas[handle.replica]
        return (
            r.num_output_tokens
            + rep.scheduler.step_count
            - r.dec_step0
            + rep.stretch_steps_done(self._now)
        )

    def token_times(self, handle: RequestHandle) -> list[float]:
        """When each output token produced by now was produced (virtual seconds, the end of the
        step that sampled it). Only for requests submitted with track_tokens=True. The list is
        the handle's own and grows; copy it to keep a snapshot."""
        if not handle.track_tokens:
            raise ValueError(f"{handle.request_id} was not submitted with track_tokens=True")
        times = handle.token_times
        r = handle.request
        if handle.record is None and r.decoding:
            rep = self._state.replicas[handle.replica]
            done = rep.stretch_steps_done(self._now)
            if done:
                count = self.tokens_produced(handle)
                base = count - done  # tokens before the stretch in flight
                for idx in range(len(times), count):
                    times.append(rep.t0 + rep.shape_time(idx - base + 1))
        return times

    def status(self, handle: RequestHandle) -> RequestStatus:
        """The request's engine state: waiting, running, preempted or finished."""
        return handle.request.status

    # -- results --------------------------------------------------------------------------

    def replica_records(self) -> tuple[ReplicaRecord, ...]:
        """Every replica's counters, sampled series and step log so far (as a batch run's
        SimulationResult.replicas; built afresh on each call, O(history))."""
        return self._state.replica_records()

    # -- internals --------------------------------------------------------------------------

    def _run_until(self, t: float, *, inclusive: bool) -> None:
        state = self._state
        heap = state.heap
        replicas = state.replicas
        tracked = self._tracked
        while heap:
            th, i, version = heap[0]
            if th > t or (th == t and not inclusive):
                break
            if state.next_sample < th:
                state.sample_before(th)
            rep = replicas[i]
            watch = tracked[i]
            if watch and version == rep.version:
                stretch = rep.stretch_in_flight
                t0, k, shape, cum = rep.t0, rep.k, rep.shape, rep.stretch_cum
                state.pop_event()
                self._note_tokens(watch, th, stretch, t0, k, shape, cum)
            else:
                state.pop_event()
        state.sample_before(t)
        self._collect()

    def _note_tokens(
        self,
        watch: dict[str, RequestHandle],
        t_end: float,
        stretch: bool,
        t0: float,
        k: int,
        shape: StepShape,
        cum: np.ndarray | None,
    ) -> None:
        """A replica's event ending at t_end was applied: time the tokens it produced for the
        tracked requests there. A stretch of k steps gives a decoder k tokens, the last at
        t_end (a stretch ends at the first finish); a single step gives at most one."""
        predict = self.predictor.decode_steps_time_s
        finished = []
        for rid, handle in watch.items():
            r = handle.request
            count = r.num_output_tokens
            if r.decoding:
                count += self._state.replicas[handle.replica].scheduler.step_count - r.dec_step0
            times = handle.token_times
            have = len(times)
            if count > have:
                if stretch:
                    for idx in range(have, count):
                        j = k - (count - 1 - idx)
                        if j < 1:
                            times.append(t0)
                        elif cum is not None:  # jittered steps
                            times.append(t0 + float(cum[j - 1]))
                        else:
                            times.append(t0 + predict(shape, j))
                else:
                    times.extend([t_end] * (count - have))
            if r.status is RequestStatus.FINISHED:
                finished.append(rid)
        for rid in finished:
            del watch[rid]

    def _collect(self) -> None:
        sink = self._state.sink
        if not sink:
            return
        live = self._live
        tracked = self._tracked
        for record in sink:
            handle = live.pop(record.request_id, None)
            if handle is not None:
                handle.record = record
                if handle.track_tokens:
                    tracked[handle.replica].pop(record.request_id, None)
        self._finished.extend(sink)
        sink.clear()

    def _take_finished(self) -> list[RequestRecord]:
        out = self._finished
        self._finished = []
        return out
