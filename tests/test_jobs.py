"""app/jobs.py: background jobs run off the caller's thread, report progress, stop when
cancelled, keep one unfinished job per owner, refuse work past a full queue, and forget
finished jobs after their expiry."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from app.jobs import (
    JobRefusedError,
    Jobs,
    JobState,
    UnknownJobError,
)

WAIT_S = 5.0


def wait_for(jobs: Jobs, job_id: str, *states: JobState) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        s = jobs.status(job_id)
        if s.state in states:
            return s
        time.sleep(0.005)
    raise AssertionError(f"{job_id} still {jobs.status(job_id).state} after {WAIT_S} s")


@pytest.fixture
def jobs() -> Any:
    registry = Jobs(workers=1, max_queued=2)
    yield registry
    registry.shutdown()


def test_a_job_runs_on_a_worker_and_reports_progress(jobs: Jobs) -> None:
    gate, reported = threading.Event(), threading.Event()
    ran_on: list[str] = []

    def work(progress: Any, cancelled: Any) -> dict[str, int]:
        ran_on.append(threading.current_thread().name)
        progress(0.4, "screening 40 candidates")
        reported.set()
        assert gate.wait(WAIT_S)
        return {"answer": 42}

    job_id = jobs.submit(work, owner="ann", label="plan")  # returns at once: the gate is shut
    assert reported.wait(WAIT_S)
    s = jobs.status(job_id)
    assert (s.state, s.progress, s.message) == (JobState.RUNNING, 0.4, "screening 40 candidates")
    assert s.owner == "ann" and s.result is None
    gate.set()
    s = wait_for(jobs, job_id, JobState.DONE)
    assert s.result == {"answer": 42} and s.progress == 1.0 and s.error is None
    assert ran_on and ran_on[0] != threading.current_thread().name


def test_a_failure_is_the_jobs_one_line_error(jobs: Jobs) -> None:
    def work(progress: Any, cancelled: Any) -> None:
        raise ValueError("SLO ttft_p95_s must be > 0\nsecond line")

    s = wait_for(jobs, jobs.submit(work, owner="ann"), JobState.FAILED)
    assert s.error == "SLO ttft_p95_s must be > 0 second line" and s.result is None
    # the registry still works after a failure
    s = wait_for(jobs, jobs.submit(lambda p, c: 7, owner="ann"), JobState.DONE)
    assert s.result == 7


def test_cancel_stops_a_running_job_promptly(jobs: Jobs) -> None:
    started = threading.Event()
    steps = [0]

    def polls_cancelled(progress: Any, cancelled: Any) -> str:
        started.set()
        while not cancelled():
            steps[0] += 1
            time.sleep(0.001)
        raise RuntimeError("stopped at the user's request")

    job_id = jobs.submit(polls_cancelled, owner="ann")
    assert started.wait(WAIT_S)
    assert jobs.cancel(job_id, owner="ann").message == "Cancelling…"
    s = wait_for(jobs, job_id, JobState.CANCELLED)
    assert s.error is None and s.result is None and steps[0] > 0

    # a job that only reports progress is stopped by its next report
    started.clear()
    reports = [0]

    def only_reports(progress: Any, cancelled: Any) -> str:
        started.set()
        for i in range(10_000):
            progress(i / 10_000)
            reports[0] += 1
            time.sleep(0.001)
        return "finished"

    job_id = jobs.submit(only_reports, owner="ann")
    assert started.wait(WAIT_S)
    jobs.cancel(job_id)
    s = wait_for(jobs, job_id, JobState.CANCELLED)
    assert s.result is None and reports[0] < 10_000


def test_one_unfinished_job_per_owner_and_a_bounded_queue(jobs: Jobs) -> None:
    gate = threading.Event()

    def blocked(progress: Any, cancelled: Any) -> str:
        assert gate.wait(WAIT_S)
        return "ok"

    first = jobs.submit(blocked, owner="ann")
    wait_for(jobs, first, JobState.RUNNING)
    with pytest.raises(JobRefusedError, match="ann already has a job running"):
        jobs.submit(blocked, owner="ann")
    # other users queue behind the one worker, up to max_queued
    queued = [jobs.submit(blocked, owner=name) for name in ("bea", "cy")]
    assert [jobs.status(j).state for j in queued] == [JobState.QUEUED] * 2
    with pytest.raises(JobRefusedError, match="busy: 2 jobs already wait"):
        jobs.submit(blocked, owner="dee")
    # a queued job cancels at once, and frees its place
    assert jobs.cancel(queued[1]).state is JobState.CANCELLED
    with pytest.raises(UnknownJobError):
        jobs.cancel(queued[0], owner="ann")  # not ann's
    last = jobs.submit(blocked, owner="dee")
    gate.set()
    for job_id in (first, queued[0], last):
        assert wait_for(jobs, job_id, JobState.DONE).result == "ok"
    # done: ann may start another
    assert wait_for(jobs, jobs.submit(lambda p, c: 1, owner="ann"), JobState.DONE).result == 1


def test_two_workers_run_two_jobs_at_once() -> None:
    registry = Jobs(workers=2)
    both = threading.Barrier(2, timeout=WAIT_S)  # breaks unless two run together
    try:
        ids = [
            registry.submit(lambda p, c: both.wait() is not None, owner=name)
            for name in ("ann", "bea")
        ]
        assert [wait_for(registry, j, JobState.DONE).result for j in ids] == [True, True]
    finally:
        registry.shutdown()


def test_finished_jobs_expire() -> None:
    now = [1000.0]
    registry = Jobs(expire_after_s=60, clock=lambda: now[0])
    try:
        job_id = registry.submit(lambda p, c: "kept a while", owner="ann")
        assert wait_for(registry, job_id, JobState.DONE).result == "kept a while"
        now[0] += 59
        assert registry.status(job_id).result == "kept a while"
        now[0] += 2
        with pytest.raises(UnknownJobError, match="expired"):
            registry.status(job_id)
        with pytest.raises(UnknownJobError):
            registry.status("job-999")
    finally:
        registry.shutdown()


def test_shutdown_cancels_queued_and_running_jobs() -> None:
    registry = Jobs(workers=1)
    started = threading.Event()

    def runs_until_cancelled(progress: Any, cancelled: Any) -> None:
        started.set()
        while not cancelled():
            time.sleep(0.001)
        raise RuntimeError("cancelled")

    running = registry.submit(runs_until_cancelled, owner="ann")
    assert started.wait(WAIT_S)
    queued = registry.submit(lambda p, c: 1, owner="bea")
    registry.shutdown()
    assert registry.status(queued).state is JobState.CANCELLED
    assert registry.status(running).state is JobState.CANCELLED
    with pytest.raises(JobRefusedError, match="shutting down"):
        registry.submit(lambda p, c: 1, owner="cy")


def test_a_job_is_its_owners_alone(jobs: Jobs) -> None:
    job_id = jobs.submit(lambda progress, cancelled: 42, owner="ana")
    assert wait_for(jobs, job_id, JobState.DONE).result == 42
    assert jobs.status(job_id, owner="ana").result == 42
    with pytest.raises(UnknownJobError):  # another user learns nothing, not even that it exists
        jobs.status(job_id, owner="bob")
    other = jobs.submit(lambda progress, cancelled: 1, owner="bob")
    # ids are not a counter one could walk: the part after the number is random
    mine, theirs = job_id.split("-", 2)[2], other.split("-", 2)[2]
    assert mine != theirs and len(mine) >= 16
