"""One replica as the event loop sees it: its scheduler, the step in flight, and what it logs.

A step in flight is either one step priced alone (prefill, preemption, ...) or a stretch of k
pure-decode steps priced at once with ExecutionTimePredictor.decode_steps_time_s. A stretch ends
early ("cut") at the first step boundary after a request arrives that could join the batch (or
after a running request's client goes away: the abort takes effect at that boundary); its
state at any instant inside is known in closed form, which is how samples are taken.

With a StepJitter (the served simulation only, models/serving/jitter.py) each step's duration is
the predicted one times its own random factor: a stretch (at most JITTER_MAX_STRETCH_STEPS
steps) then carries the cumulative times of its steps in an array instead of the closed form.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable

import numpy as np

from models.execution_time import ExecutionTimePredictor, StepShape
from models.serving.config import ReplicaConfig, SimulationOptions
from models.serving.jitter import JITTER_MAX_STRETCH_STEPS, StepJitter
from models.serving.records import (
    SERIES_FIELDS,
    ReplicaRecord,
    ReplicaSeries,
    RequestRecord,
    StepLog,
)
from models.serving.replica_scheduler import STEP_DECODE, STEP_IDLE, ReplicaScheduler
from models.serving.request import Request, RequestStatus

_IDLE = 0
_WAKE = 1  # woken by an arrival; schedules once every arrival at that instant is queued
_SINGLE = 2
_STRETCH = 3

# A StepShape for every step or stretch, built without its frozen dataclass __init__ (which
# sets each field through object.__setattr__: 0.64 us against 0.34 us through the slots'
# descriptors). Every field is set, as __init__ would: the same object.
_new_shape = object.__new__
_set_num_decode = StepShape.num_decode.__set__  # type: ignore[attr-defined]
_set_decode_context_sum = StepShape.decode_context_sum.__set__  # type: ignore[attr-defined]
_set_prefill_tokens = StepShape.prefill_tokens.__set__  # type: ignore[attr-defined]
_set_prefill_attention = StepShape.prefill_attention.__set__  # type: ignore[attr-defined]
_set_num_prefill_seqs = StepShape.num_prefill_seqs.__set__  # type: ignore[attr-defined]
if set(StepShape.__slots__) != {  # type: ignore[attr-defined]
    "num_decode",
    "decode_context_sum",
    "prefill_tokens",
    "prefill_attention",
    "num_prefill_seqs",
}:
    raise RuntimeError("StepShape's fields changed: update replica.py's _set_* list")

# An optional per-step observer (models/serving/step_shares.py): called with (replica index,
# start_s, end_s, steps, work) for each step or stretch of `steps` identical pure-decode steps,
# just before it is applied; work lists (request id, tokens processed, "prefill" | "decode"), a
# decoder's tokens being `steps`. Only the attribute test runs when none is attached.
StepObserver = Callable[[int, float, float, int, list[tuple[str, int, str]]], None]


class Replica:
    """A vLLM engine: scheduler + execution-time predictor + step log + sampled metrics."""

    def __init__(
        self,
        index: int,
        config: ReplicaConfig,
        predictor: ExecutionTimePredictor,
        options: SimulationOptions,
        sink: list[RequestRecord],
        step_observer: StepObserver | None = None,
        jitter: StepJitter | None = None,
    ) -> None:
        self.index = index
        self.jitter = jitter
        self.step_observer = step_observer
        self.config = config
        self.scheduler = ReplicaScheduler(index, config, sink)
        self.predictor = predictor
        # bound once: called for every step or stretch
        self._decode_steps_time_s = predictor.decode_steps_time_s
        self._step_time_s = predictor.step_time_s
        self.max_fast_forward_steps = options.max_fast_forward_steps
        if jitter is not None:
            cap = self.max_fast_forward_steps
            self.max_fast_forward_steps = min(
                cap or JITTER_MAX_STRETCH_STEPS, JITTER_MAX_STRETCH_STEPS
            )
        self.debug_checks = options.debug_checks
        # -- multi-step scheduling: vLLM V0 --num-scheduler-steps; 1 = off --
        self.block_steps = config.scheduler.num_scheduler_steps
        self.block_left = 0  # steps left in the multi-step pass in flight (0: at a boundary)
        # -- end multi-step --
        self.version = 0  # bumped whenever the pending event time changes
        self.state = _IDLE
        self.t0 = 0.0
        self.t_end = 0.0
        self.duration = 0.0
        self.k = 0
        self.shape = StepShape()
        # With jitter: cumulative durations of the stretch in flight's steps 1..k (a new array
        # for each stretch, never changed in place); None without jitter or for a single step.
        self.stretch_cum: np.ndarray | None = None
        self._aborting: list[Request] = []  # running requests to abort at the next boundary
        # Step log, one row per event, in a typed array: rows are not Python objects, so the
        # cyclic garbage collector never traverses them (it did, and it cost ~20 % of a run).
        # One row of six per event: start_s, duration_s, steps, num_decode, prefill_tokens,
        # num_prefill_seqs (the four counts are integers far below 2**53: exact as floats; one
        # extend per event instead of two).
        self._log = array("d")
        self._samples: list[tuple[float, ...]] = []

    @property
    def num_outstanding(self) -> int:
        """Requests sent to this replica and not finished (what the router balances)."""
        return self.scheduler.num_outstanding

    # -- events ---------------------------------------------------------------------------

    def accept(self, req: Request, now: float) -> float | None:
        """A request arrives. Returns the replica's new event time if it changed."""
        s = self.scheduler
        if not s.add_request(req, now):
            return None
        state = self.state
        if state == _IDLE:
            self.state = _WAKE
            self.t_end = now
            self.version += 1
            return now
        if (
            state == _STRETCH
            and self.block_steps == 1  # multi-step: an arrival waits for the pass's end
            and now < self.t_end
            and len(s.waiting) == 1
            and len(s.running) < s.max_num_seqs
            and s.n_dec < s.max_num_batched_tokens
        ):
            # It could be scheduled at the next step boundary: end the stretch there. (When
            # others wait, the head of the queue is blocked and so is this request, FCFS.)
            return self._cut(now)
        return None

    def abort_request(self, req: Request, now: float) -> float | None:
        """The request's client went away: abort it, as vLLM does. A waiting request leaves
        at once; a running one at the end of the step in flight (vLLM finishes the step it is
        in and drops it before scheduling the next), so a stretch is cut at its next step
        boundary. Returns the replica's new event time if it changed."""
        if req.status is RequestStatus.FINISHED:
            return None
        s = self.scheduler
        if req.status is not RequestStatus.RUNNING:
            s.abort_request(req, now)
            # The head of the queue may have blocked the others: let the scheduler look again.
            return self._cut(now) if s.waiting else None
        self._aborting.append(req)
        return self._cut(now)

    def _cut(self, now: float) -> float | None:
        """End the stretch in flight at its first step boundary at or after `now`."""
        if self.state != _STRETCH or now >= self.t_end:
            return None
        steps, elapsed = self._first_boundary(now - self.t0)
        if steps >= self.k:
            return None
        self.k = steps
        self.duration = elapsed
        self.t_end = self.t0 + elapsed
        self.version += 1
        return self.t_end

    def on_event(self, now: float) -> float | None:
        """The step (or stretch) in flight ends at `now`: apply it and start the next one.
        Returns the next event time, or None when the replica goes idle."""
        s = self.scheduler
        state = self.state
        duration = self.duration
        if state == _STRETCH:
            k = self.k
            if self.step_observer is not None:
                self._observe(k, duration)
            s.complete_stretch(now, k, duration)
            if self.block_left:  # multi-step
                self.block_left = max(0, self.block_left - k)
            self._log.extend((self.t0, duration, k, s.step_n, 0, 0))
        elif state == _SINGLE:
            if self.step_observer is not None:
                self._observe(1, duration)
            s.complete_step(now, duration)
            if self.block_left:  # multi-step
                self.block_left -= 1
            self._log.extend(
                (self.t0, duration, 1, s.step_n, s.step_prefill_tokens, len(s.step_chunks))
            )
        if self._aborting:
            for r in self._aborting:
                s.abort_request(r, now)  # a request that finished in this step stays finished
            self._aborting.clear()
        if self.debug_checks:
            s.check()
        return self._start(now)

    def _start(self, now: float) -> float | None:
        s = self.scheduler
        max_steps = self.max_fast_forward_steps
        if self.block_steps > 1:  # -- multi-step: admit and deliver only at boundaries --
            if self.block_left and not s.n_dec:
                self.block_left = 0  # every decoder of the pass has finished: the pass ends
            if not self.block_left:
                s.release_held(now)
            s.admit = not self.block_left
        kind = s.schedule(now)
        if self.block_steps > 1 and kind == STEP_DECODE:
            if not self.block_left:
                self.block_left = self.block_steps  # a pass of decode steps starts
            max_steps = min(max_steps or self.block_left, self.block_left)
        # -- end multi-step --
        if kind == STEP_DECODE:
            k = s.plan_stretch(max_steps)
            # StepShape(s.step_n, s.step_ctx), built the fast way (see _new_shape)
            shape = _new_shape(StepShape)
            _set_num_decode(shape, s.step_n)
            _set_decode_context_sum(shape, s.step_ctx)
            _set_prefill_tokens(shape, 0)
            _set_prefill_attention(shape, 0.0)
            _set_num_prefill_seqs(shape, 0)
            jitter = self.jitter
            if jitter is None:
                duration = self._decode_steps_time_s(shape, k)
            else:
                predict = self._decode_steps_time_s
                base = np.array([predict(shape, j) for j in range(1, k + 1)])
                steps = np.diff(base, prepend=0.0) * jitter.factors(k)
                cum = self.stretch_cum = np.cumsum(steps)
                duration = float(cum[-1])
            self.state = _STRETCH
            self.k = k
            self.shape = shape
        elif kind == STEP_IDLE:
            self.state = _IDLE
            self.stretch_cum = None
            return None
        else:
            shape = _new_shape(StepShape)
            _set_num_decode(shape, s.step_n)
            _set_decode_context_sum(shape, s.step_ctx)
            _set_prefill_tokens(shape, s.step_prefill_tokens)
            _set_prefill_attention(shape, s.step_prefill_attention)
            _set_num_prefill_seqs(shape, len(s.step_chunks))
            duration = self._step_time_s(shape)
            if self.jitter is not None:
                duration *= self.jitter.factor()
            self.stretch_cum = None
            self.state = _SINGLE
        if not duration > 0.0:
            raise ValueError(f"predictor returned a non-positive step time {duration} for {shape}")
        self.t0 = now
        self.duration = duration
        t_end = self.t_end = now + duration
        return t_end

    def _observe(self, steps: int, duration: float) -> None:
        """Tell the step observer what the step (or stretch) about to be applied computed."""
        s = self.scheduler
        work = [(r.spec.request_id, steps, "decode") for r in s.running if r.decoding]
        if not s.step_n and not s.chunked_prefill:  # V0 prompt-only step, decoders paused
            work = []
        if len(work) != s.step_n:
            raise RuntimeError(f"replica {self.index}: {len(work)} decoders, step has {s.step_n}")
        work.extend((r.spec.request_id, t, "prefill") for r, t, _ in s.step_chunks)
        observer = self.step_observer
        if observer is not None:
            observer(self.index, self.t0, self.t0 + duration, steps, work)

    def _first_boundary(self, elapsed: float) -> tuple[int, float]:
        """Smallest j in [1, k] whose first j steps of the stretch last >= elapsed, and their
        duration."""
        k = self.k
        cum = self.stretch_cum
        if cum is not None:
            # smallest j with cum[j-1] >= elapsed (jittered steps: no closed form)
            j = min(int(np.searchsorted(cum[:k], elapsed, side="left")) + 1, k)
            return j, float(cum[j - 1])
        predict = self._decode_steps_time_s
        shape = self.shape
        # Step times do not shrink as the context grows, so the first j-1 steps take at most
        # (j-1) mean steps: with j = ceil(elapsed / mean step), T(j-1) < elapsed holds and only
        # T(j) >= elapsed needs a look (usually true; otherwise j is a step or two short).
        mean_steps = elapsed * k / self.duration
        j = max(1, min(k, math.ceil(mean_steps)))
        t_j = self.duration if j == k else predict(shape, j)
        while t_j < elapsed and j < k:
            j += 1
            t_j = self.duration if j == k else predict(shape, j)
        if j > 1 and (self.debug_checks or mean_steps - (j - 1) < 1e-9 * j):
            # Too close to call in floating point (or checking in debug mode): look.
            t_prev = predict(shape, j - 1)
            if t_prev >= elapsed:
                if mean_steps - (j - 1) >= 1e-9 * j:
                    raise AssertionError("predicted decode step times shrink with context")
                j -= 1
                t_j = t_prev
        return j, t_j

    def abort(self, now: float) -> None:
        """End of a horizon-limited run: keep the decode steps completed by `now`, abort the
        rest."""
        s = self.scheduler
        if self.state == _STRETCH and now > self.t0:
            j, t_j = self._first_boundary(now - self.t0)
            if t_j > now - self.t0:
                j -= 1
                t_j = self.shape_time(j)
            if j > 0:
                self.k = j
                self.duration = t_j
                if self.step_observer is not None:
                    self._observe(j, t_j)
                s.complete_stretch(self.t0 + t_j, j, t_j)
                self._log.extend((self.t0, t_j, j, s.step_n, 0, 0))
        self.state = _IDLE
        self.version += 1
        self._aborting.clear()
        s.abort_all(now)

    # -- progress inside a stretch (live mode: streaming tokens as the steps end) ------------

    @property
    def stretch_in_flight(self) -> bool:
        """A stretch of pure-decode steps is in flight; its steps end one by one until t_end."""
        return self.state == _STRETCH

    def stretch_steps_done(self, now: float) -> int:
        """Steps of the stretch in flight that have ended by `now` (0 when none is in flight).
        They are final: a cut only ever drops steps that end after the cutting arrival."""
        if self.state != _STRETCH or now <= self.t0:
            return 0
        j, t_j = self._first_boundary(now - self.t0)
        return j if t_j <= now - self.t0 else j - 1

    def next_step_end_s(self, now: float) -> float:
        """When the next engine step ends after `now` (inf when idle)."""
        if self.state == _IDLE:
            return math.inf
        if self.state == _STRETCH:
            done = self.stretch_steps_done(now)
            if done < self.k:
                return self.t0 + self.shape_time(done + 1)
        return self.t_end

    def shape_time(self, steps: int) -> float:
        """Duration of the first `steps` steps of the stretch in flight."""
        if steps <= 0:
            return 0.0
        if self.stretch_cum is not None:
            return float(self.stretch_cum[steps - 1])
        return self.predictor.decode_steps_time_s(self.shape, steps)

    # -- metrics --------------------------------------------------------------------------

    def sample(self, now: float) -> None:
        """Record gauges and counters as of `now` (state after the last completed step)."""
        s = self.scheduler
        generation = s.generation_tokens
        iteration = s.iteration_tokens
        steps = s.num_steps
        busy = s.gpu_busy_s
        used = s.kv.used
        if self.state == _STRETCH and now > self.t0:
            j, t_j = self._first_boundary(now - self.t0)
            done = j if t_j <= now - self.t0 else j - 1
            n = s.n_dec
            generation += n * done
            iteration += n * done
            steps += done
            busy += t_j if done == j else self.shape_time(done)
            # blocks are allocated when a step is scheduled: steps 1..done+1 have been
            used += s.crossings(min(done + 1, self.k)) - s.step_cross
        self._samples.append(
            (
                now,
                len(s.running),
                len(s.waiting),
                used / s.kv.num_blocks,
                s.prompt_tokens,
                generation,
                s.prefix_cache_queries,
                s.prefix_cache_hits,
                s.num_preemptions,
                s.success_stop,
                s.success_length,
                s.success_abort,
                s.success_error,
                iteration,
                steps,
                busy,
            )
        )

    def record(self) -> ReplicaRecord:
        s = self.scheduler
        rows = np.array(self._samples, dtype=float).reshape(-1, len(SERIES_FIELDS))
        columns = {}
        for i, name in enumerate(SERIES_FIELDS):
            col = rows[:, i]
            columns[name] = (
                col
                if name in ("time_s", "kv_cache_usage", "gpu_busy_s")
                else (col.astype(np.int64))
            )
        log = np.frombuffer(self._log, dtype=np.float64).reshape(-1, 6)
        step_log = StepLog(
            start_s=log[:, 0].copy(),
            steps=log[:, 2].astype(np.int64),
            num_decode=log[:, 3].astype(np.int64),
            prefill_tokens=log[:, 4].astype(np.int64),
            num_prefill_seqs=log[:, 5].astype(np.int64),
            duration_s=log[:, 1].copy(),
        )
        return ReplicaRecord(
            index=self.index,
            label=self.config.label,
            num_gpu_blocks=s.kv.num_blocks,
            counters=s.counters(),
            series=ReplicaSeries(columns),
            steps=step_log,
            resume_gaps_s=np.array(s.resume_gaps, dtype=float),
            peak_kv_cache_usage=s.kv.peak_used / s.kv.num_blocks,
        )
