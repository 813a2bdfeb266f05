"""Background jobs for the app process: work too long for a request (a capacity plan: seconds to
minutes of simulation, issue #13) runs on a worker thread while the page polls its status.

A job is a function ``fn(progress, cancelled)``: it reports with ``progress(fraction,
message="")`` (0..1) and stops promptly once ``cancelled()`` returns True (``progress`` also
raises :class:`JobCancelled` then, so work that only reports progress stops too). What it
returns is the job's result; what it raises, its error.

The registry is small on purpose: a fixed number of worker threads (started on the first
submit), a bounded queue (a full one refuses new work rather than letting it wait for ever),
at most one unfinished job per owner (a user waits for, or cancels, their plan before starting
another), and finished jobs are forgotten after ``expire_after_s``: the page saves a result it
wants to keep. One registry per app (app/pages/capacity.py keeps it in the Flask app's
extensions), so two apps in one process (two tests) never share jobs. No Dash here.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from inferledger.core.errors import BadInputError, one_line

log = logging.getLogger(__name__)

Progress = Callable[..., None]
Cancelled = Callable[[], bool]
JobFn = Callable[[Progress, Cancelled], Any]


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


class JobCancelled(Exception):
    """Raised inside a job (by its `progress`) once its cancellation was asked for."""


class JobRefusedError(BadInputError):
    """A submit the registry cannot take: the owner has a job unfinished, or the queue is full."""

    http_status = 429


class UnknownJobError(BadInputError):
    """No such job: never submitted, or finished so long ago that it was forgotten."""

    http_status = 404


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job as its owner sees it. `result` is set when done; `error` (one line) when failed."""

    job_id: str
    owner: str
    label: str
    state: JobState
    progress: float
    message: str
    result: Any = None
    error: str | None = None
    submitted_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None


class _Job:
    """A job's mutable record; only the registry touches it, under its lock."""

    def __init__(self, job_id: str, owner: str, label: str, fn: JobFn, now: float) -> None:
        self.job_id = job_id
        self.owner = owner
        self.label = label
        self.fn = fn
        self.state = JobState.QUEUED
        self.progress = 0.0
        self.message = "Queued"
        self.result: Any = None
        self.error: str | None = None
        self.cancel_requested = threading.Event()
        self.submitted_at = now
        self.started_at: float | None = None
        self.finished_at: float | None = None

    def status(self) -> JobStatus:
        return JobStatus(
            job_id=self.job_id,
            owner=self.owner,
            label=self.label,
            state=self.state,
            progress=self.progress,
            message=self.message,
            result=self.result,
            error=self.error,
            submitted_at=self.submitted_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
        )


class Jobs:
    """The registry: ``submit`` -> job id, ``status``, ``cancel``. Thread-safe.

    workers: threads running jobs (a plan keeps one core busy; two let a second user's plan
        start while the first runs). max_queued: jobs waiting for a worker before submit
        refuses. expire_after_s: how long a finished job (and its result) is kept.
    clock: seconds, monotonic (tests pass a fake one to expire jobs without waiting).
    """

    def __init__(
        self,
        *,
        workers: int = 1,
        max_queued: int = 8,
        expire_after_s: float = 30 * 60,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if workers < 1:
            raise BadInputError(f"jobs: workers must be >= 1, got {workers}")
        if max_queued < 0:
            raise BadInputError(f"jobs: max_queued must be >= 0, got {max_queued}")
        self._workers = workers
        self._max_queued = max_queued
        self._expire_after_s = expire_after_s
        self._clock = clock
        self._lock = threading.Condition()
        self._jobs: dict[str, _Job] = {}
        self._queue: deque[_Job] = deque()
        self._threads: list[threading.Thread] = []
        self._ids = itertools.count(1)
        self._stopping = False

    # ------------------------------------------------------------------------------ the API
    def submit(self, fn: JobFn, *, owner: str, label: str = "") -> str:
        """Queue `fn` for a worker; returns the job's id. Refuses (JobRefusedError) when the
        owner already has a job queued or running, or when the queue is full."""
        with self._lock:
            if self._stopping:
                raise JobRefusedError("jobs: the app is shutting down; try again after restart")
            self._expire()
            mine = [j for j in self._jobs.values() if j.owner == owner and not j.state.finished]
            if mine:
                raise JobRefusedError(
                    f"{owner} already has a job {mine[0].state.value} ({mine[0].label or 'job'} "
                    f"{mine[0].job_id}): wait for it or cancel it first"
                )
            if len(self._queue) >= self._max_queued:
                raise JobRefusedError(
                    f"the planner is busy: {len(self._queue)} jobs already wait; try again "
                    "in a few minutes"
                )
            # unguessable: an id is what a page keeps in the browser and polls with
            job = _Job(f"job-{next(self._ids)}-{secrets.token_urlsafe(12)}", owner, label, fn,
                       self._clock())  # fmt: skip
            self._jobs[job.job_id] = job
            self._queue.append(job)
            self._start_workers()
            self._lock.notify()
            return job.job_id

    def status(self, job_id: str, *, owner: str | None = None) -> JobStatus:
        """The job's state, progress, message, and result or error (UnknownJobError when
        there is no such job, or it finished more than expire_after_s ago, or `owner` is given
        and is not the job's: another user's job is not theirs to see, nor to know of)."""
        with self._lock:
            self._expire()
            job = self._jobs.get(job_id)
            if job is None or (owner is not None and job.owner != owner):
                raise UnknownJobError(f"no job {job_id!r} (unknown, or finished and expired)")
            return job.status()

    def cancel(self, job_id: str, *, owner: str | None = None) -> JobStatus:
        """Ask a job to stop: a queued job is cancelled at once, a running one when it next
        checks `cancelled()` (or reports progress). `owner`, when given, must be the job's."""
        with self._lock:
            self._expire()
            job = self._jobs.get(job_id)
            if job is None or (owner is not None and job.owner != owner):
                raise UnknownJobError(f"no job {job_id!r} of yours to cancel")
            if job.state is JobState.QUEUED:
                self._queue.remove(job)
                self._finish(job, JobState.CANCELLED, "Cancelled before it started")
            elif job.state is JobState.RUNNING:
                job.cancel_requested.set()
                job.message = "Cancelling…"
            return job.status()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Cancel every job and stop the workers (waiting up to `timeout_s` for each)."""
        with self._lock:
            self._stopping = True
            for job in list(self._queue):
                self._finish(job, JobState.CANCELLED, "Cancelled: the app stopped")
            self._queue.clear()
            for job in self._jobs.values():
                job.cancel_requested.set()
            self._lock.notify_all()
            threads = list(self._threads)
        for t in threads:
            t.join(timeout_s)

    # ------------------------------------------------------------------------------ workers
    def _start_workers(self) -> None:
        while len(self._threads) < self._workers:
            t = threading.Thread(
                target=self._work, name=f"inferledger-job-{len(self._threads)}", daemon=True
            )
            self._threads.append(t)
            t.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._lock.wait()
                if self._stopping:
                    return
                job = self._queue.popleft()
                job.state = JobState.RUNNING
                job.started_at = self._clock()
                job.message = "Running"
            self._run(job)

    def _run(self, job: _Job) -> None:
        def progress(fraction: float, message: str = "") -> None:
            if job.cancel_requested.is_set():
                raise JobCancelled
            with self._lock:
                job.progress = min(1.0, max(job.progress, float(fraction)))
                if message:
                    job.message = message

        try:
            result = job.fn(progress, job.cancel_requested.is_set)
        except Exception as exc:  # any failure is the job's own, shown to its owner
            with self._lock:
                if job.cancel_requested.is_set():
                    self._finish(job, JobState.CANCELLED, "Cancelled")
                else:
                    log.warning(
                        "job %s (%s) failed:\n%s", job.job_id, job.label, traceback.format_exc()
                    )
                    job.error = one_line(exc)
                    self._finish(job, JobState.FAILED, "Failed")
            return
        with self._lock:
            if job.cancel_requested.is_set():
                # it finished anyway; the owner asked to stop, so its result is not offered
                self._finish(job, JobState.CANCELLED, "Cancelled")
            else:
                job.result = result
                job.progress = 1.0
                self._finish(job, JobState.DONE, "Done")

    def _finish(self, job: _Job, state: JobState, message: str) -> None:
        job.state = state
        job.message = message
        job.finished_at = self._clock()
        job.fn = _spent  # drop the closure (and what it holds) once it ran

    def _expire(self) -> None:
        cutoff = self._clock() - self._expire_after_s
        for job_id in [
            j.job_id
            for j in self._jobs.values()
            if j.finished_at is not None and j.finished_at < cutoff
        ]:
            del self._jobs[job_id]


def _spent(_progress: Progress, _cancelled: Cancelled) -> None:
    raise RuntimeError("a finished job ran again")
