"""`inferledger demo`: a small history through the real service (HTTP /v1/traces and the scrape
path), checked through the storage gateway; reuse, resume and --rebuild; the CLI process."""

from __future__ import annotations

import io
import itertools
import math
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from inferledger.core.storage import Storage
from inferledger.demo import DAY_S, Demo, DemoError, DemoOptions, DemoState, Progress, state_path
from ledger.load_status import load_status
from models.workload import load_workload, scrape_targets, ticks
from models.workload.segments import Segment, SegmentSource, plan_segments
from tests.conftest import ROOT, free_port, whole_days

DAYS = 0.01  # 14.4 minutes of history
RATE = 0.3
SEED = 4


def start_demo(db: Path, clock=time.time, **kw: object) -> tuple[Demo, io.StringIO]:
    out = io.StringIO()
    kw = {"days": DAYS, "rate_scale": RATE, "seed": SEED, **kw}
    options = DemoOptions(db=db, port=free_port(), **kw)  # type: ignore[arg-type]
    demo = Demo(options, out=out, err=io.StringIO(), clock=clock)
    demo.start()
    return demo, out


def storage_of(demo: Demo) -> Storage:
    assert demo.service is not None
    assert demo.service.ingestor.flush(30)
    return demo.service.storage


def demo_targets() -> tuple:
    return scrape_targets(SegmentSource(load_workload().scaled(RATE), SEED).config)


def ns(t: float) -> int:
    return round(t * 1e9)


def expected_history(demo: Demo, start: float) -> tuple[int, int]:
    """(attempts, llm calls to engines) that the history [start, t0) holds: regenerated from
    the seed, independently of what the demo sent."""
    source = SegmentSource(load_workload().scaled(RATE), SEED)
    attempts = calls = 0
    for segment in plan_segments(start, demo.t0)[0]:
        seg = source.get(segment)
        ended = seg.attempts_ending(-float("inf"), demo.t0)
        attempts += len(ended)
        refs = seg.builder._refs  # the test counts the engine calls of each attempt
        calls += sum(
            1
            for i in ended
            for step in refs[i].attempt.steps
            for call in step.calls
            if call.engine_index >= 0
        )
    return attempts, calls


@pytest.fixture
def loaded(tmp_path):
    demo, out = start_demo(tmp_path / "demo.duckdb")
    try:
        assert demo.wait_history(60), demo.failed
        yield demo, out
    finally:
        demo.stop()


def test_history_goes_through_the_real_ingest_path(loaded):
    demo, out = loaded
    assert "ready: the dashboard is at http://127.0.0.1:" in out.getvalue()
    st = storage_of(demo)
    t0, start = demo.t0, demo.t0 - DAYS * DAY_S
    # Traces: app spans and vLLM spans, joined CLIENT -> llm_request. The history is the
    # attempts whose root span ended before t0: an engine call can end before t0 inside an
    # attempt that ends after it, and live traffic sends that attempt while the test runs.
    engine, linked = st.fetchall(
        """
        select count(*), count(c.span_id)
        from spans e left join spans c
          on c.trace_id = e.trace_id and c.span_id = e.parent_span_id and c.kind = 3
             and c.gen_ai_operation = 'chat' and c.gen_ai_provider = 'vllm'
        where e.name = 'llm_request' and e.trace_id in (
            select trace_id from spans where parent_span_id is null and end_ns < $1
        )
        """,
        [ns(t0)],
    )[0]
    attempts, calls = expected_history(demo, start)
    roots = st.scalar(
        "select count(*) from spans where parent_span_id is null and name like 'POST /%' "
        "and end_ns < ?",
        [ns(t0)],
    )
    assert roots == attempts > 0
    assert engine == linked == calls > 0
    services = {r[0] for r in st.fetchall("select distinct service_name from spans")}
    assert {"vllm-llama-8b", "code-assistant"} <= services
    teams = st.scalar(
        "select count(distinct team) from spans where parent_span_id is null and end_ns < ?",
        [ns(t0)],
    )
    assert teams >= 2
    assert (
        st.scalar(
            "select count(*) from spans where task_id is null and kind = 2 and name like 'POST %'"
        )
        == 0
    )
    # Metrics: every target at every 15 s of the history, with historical timestamps.
    targets = scrape_targets(SegmentSource(load_workload().scaled(RATE), SEED).config)
    hist = st.fetchall(
        "select target, kind, deployment, count(*), bool_and(up) from scrapes "
        "where ts < ? group by all order by target",
        [datetime.fromtimestamp(t0, UTC)],
    )
    n = len(ticks(start, t0))
    assert {(t, k, d) for t, k, d, _, _ in hist} == {
        (t.name, t.kind, t.deployment) for t in targets
    }
    assert all(count == n and up for *_, count, up in hist)
    first, last = st.fetchall(
        "select min(ts), max(ts) from metric_samples where ts < ?",
        [datetime.fromtimestamp(t0, UTC)],
    )[0]
    assert first.timestamp() == pytest.approx(ticks(start, t0)[0])
    assert last.timestamp() == pytest.approx(t0 - 15)
    families = {
        r[0]
        for r in st.fetchall(
            "select distinct family from metric_samples where family in "
            "('vllm:prompt_tokens', 'vllm:time_to_first_token_seconds', "
            "'DCGM_FI_DEV_GPU_UTIL', 'DCGM_FI_DEV_POWER_USAGE')"
        )
    }
    assert len(families) == 4
    state = DemoState.load(state_path(demo.options.db))
    assert state is not None and state.status == "complete"
    assert state.spans >= roots and state.samples > 0
    # The load said how far it got, and that it is done (only after the marts were costed).
    status = load_status(st)
    assert status is not None and not status.loading
    assert status.history_start.timestamp() == pytest.approx(start)
    assert st.scalar("select count(*) from mart_refresh_state") > 0


def test_the_scheduled_refresh_is_held_only_while_the_history_loads(loaded):
    """The loader holds the service's 60-s ledger refresh while it loads (it refreshes once at
    the end) and lets it run again afterwards, so live traffic is costed as it arrives."""
    demo, _ = loaded
    service = demo.service
    assert service is not None
    job = service.scheduler.get_job("ledger-refresh")
    assert job is not None and job.next_run_time is not None  # resumed after the load
    assert service.pause_refresh()
    assert service.scheduler.get_job("ledger-refresh").next_run_time is None
    service.resume_refresh()
    assert service.scheduler.get_job("ledger-refresh").next_run_time is not None


def test_live_traffic_continues(loaded):
    """Every target is scraped live. The pages of one tick are stored one by one, so this
    waits until all are in (not merely the first), with a deadline a loaded machine meets."""
    demo, _ = loaded
    st = storage_of(demo)
    t0 = datetime.fromtimestamp(demo.t0, UTC)
    want = len(demo_targets())
    live = 0
    deadline = time.monotonic() + 60
    while live < want and time.monotonic() < deadline:
        live = st.scalar("select count(distinct target) from scrapes where ts >= ?", [t0])
        if live < want:
            time.sleep(0.2)
    assert live == want


def test_a_demo_on_a_stopped_clock_ends_there(demo_ledger, ledger_end):
    """The UI tests' ledger is a demo whose clock stands still at `ledger_end` (conftest.py):
    no span or scrape in it is later, so a range derived from that instant holds all of it
    whenever a test runs. A running clock let live traffic add spans after it."""
    with Storage(demo_ledger, read_timeout_s=60) as st:
        first_ns, last_ns = st.fetchall("select min(start_ns), max(end_ns) from spans")[0]
        last_scrape = st.scalar("select max(ts) from scrapes")
    assert last_ns <= ns(ledger_end.timestamp())
    assert last_scrape <= ledger_end
    start, stop, _ = whole_days(ledger_end)
    assert ns(start.timestamp()) <= first_ns
    assert stop > ledger_end


def test_rerun_reuses_then_rebuild_regenerates(tmp_path):
    db = tmp_path / "demo.duckdb"
    demo, _ = start_demo(db)
    try:
        assert demo.wait_history(60), demo.failed
        t0 = demo.t0
        before = storage_of(demo).scalar("select count(*) from spans where end_ns < ?", [ns(t0)])
    finally:
        demo.stop()
    # The next run starts two minutes later (a clock ahead of the wall): a gap to backfill.
    demo, out = start_demo(db, seed=99, clock=lambda: time.time() + 120)
    try:
        assert demo.wait_history(60), demo.failed
        text = out.getvalue()
        assert f"reusing {db}" in text and "ignoring --seed 99" in text
        assert "filling the" in text
        st = storage_of(demo)
        assert st.scalar("select count(*) from spans where end_ns < ?", [ns(t0)]) == before
        # No scrape twice, none missing from the first run's start to this run's.
        rows = st.fetchall(
            "select target, count(*), count(distinct ts) from scrapes where ts < ? group by 1",
            [datetime.fromtimestamp(demo.t0, UTC)],
        )
        n = len(ticks(t0 - DAYS * DAY_S, demo.t0))
        assert all(count == distinct == n for _, count, distinct in rows)
    finally:
        demo.stop()
    demo, out = start_demo(db, rebuild=True, days=0.005, clock=lambda: time.time() + 240)
    try:
        assert "--rebuild: removed" in out.getvalue()
        assert demo.wait_history(60), demo.failed
        st = storage_of(demo)
        oldest = st.scalar("select min(ts) from scrapes").timestamp()
        assert oldest == pytest.approx(ticks(demo.t0 - 0.005 * DAY_S, demo.t0)[0])
    finally:
        demo.stop()


def test_interrupted_load_is_marked_and_resumed(tmp_path):
    db = tmp_path / "demo.duckdb"
    demo, _ = start_demo(db, days=0.03)
    first_t0 = demo.t0
    demo.stop()  # at once: the history cannot be loaded yet
    state = DemoState.load(state_path(db))
    assert state is not None and state.status == "loading"
    with Storage(db) as st:  # what the pages read: still loading, or not started
        status = load_status(st)
        assert status is None or status.loading
    demo, out = start_demo(db)
    try:
        assert "resuming the history load" in out.getvalue()
        assert demo.wait_history(60), demo.failed
        state = DemoState.load(state_path(db))
        assert state is not None and state.status == "complete" and state.regions == []
        st = storage_of(demo)
        status = load_status(st)
        assert status is not None and not status.loading
        oldest = st.scalar("select min(ts) from scrapes").timestamp()
        assert oldest == pytest.approx(ticks(first_t0 - 0.03 * DAY_S, first_t0)[0])
        assert st.scalar("select count(*) - count(distinct (target, ts)) from scrapes") == 0
        n = len(ticks(first_t0 - 0.03 * DAY_S, demo.t0))
        assert (
            st.scalar(
                "select count(*) from scrapes where ts < ?", [datetime.fromtimestamp(demo.t0, UTC)]
            )
            == len(demo_targets()) * n
        )
    finally:
        demo.stop()


def test_refuses_a_database_it_did_not_make(tmp_path):
    db = tmp_path / "mine.duckdb"
    Storage(db).open().close()
    with pytest.raises(DemoError, match="was not made by `inferledger demo`"):
        Demo(DemoOptions(db=db, port=free_port()), out=io.StringIO()).start()


def test_a_busy_port_is_one_clear_error(tmp_path):
    # Whatever answers on the port is not this demo's service: nothing may be sent to it.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        demo = Demo(DemoOptions(db=tmp_path / "d.duckdb", port=port, days=DAYS), out=io.StringIO())
        with pytest.raises(DemoError, match=r"cannot serve on http://127.0.0.1:\d+: .*in use"):
            demo.start()


@pytest.mark.parametrize(
    ("kw", "message"),
    [({"days": 0}, "--days"), ({"rate_scale": -1}, "--rate-scale"), ({"port": 0}, "--port")],
)
def test_bad_options(kw, message):
    with pytest.raises(DemoError, match=message):
        DemoOptions(db=Path("x"), **kw)


def test_segments_cover_the_history_newest_first():
    t0 = 1_780_000_020.0
    segments, live = plan_segments(t0 - 2.5 * DAY_S, t0)
    assert segments[0] == live and live.end == t0 + 3600 and live.start == t0 - DAY_S
    assert [s.duration for s in segments[1:]] == [DAY_S, DAY_S / 2]
    assert segments[-1].start == t0 - 2.5 * DAY_S
    assert all(a.start == b.end for a, b in itertools.pairwise(segments))
    assert plan_segments(t0, t0) == ([], Segment(t0, t0 + 3600))


def test_progress_without_a_terminal():
    stream = io.StringIO()
    progress = Progress(stream, 10.0)
    progress.draw(force=True)
    progress.advance(5, spans=1200, samples=34_000)
    progress.draw(force=True)
    progress.finish("history loaded")
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert "50%" in lines[1] and "1,200 spans" in lines[1] and lines[-1] == "history loaded"


def test_cli_reaches_ready_and_exits_0_on_sigterm(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inferledger.demo",
            "--db",
            str(tmp_path / "cli.duckdb"),
            "--days",
            "0.003",
            "--rate-scale",
            "0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 40
        lines = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("ready:"):
                break
        assert any(f"http://127.0.0.1:{port}/" in ln for ln in lines if ln.startswith("ready:"))
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(40)
        rest = proc.stdout.read()
        assert rc == 0, proc.stderr.read()
        assert "Traceback" not in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def stored_metrics(storage: Storage) -> tuple[list[tuple], list[tuple]]:
    """Every scrapes row (without when it was received) and every sample, in a fixed order."""
    scrapes = storage.fetchall("select * exclude (received_at) from scrapes order by target, ts")
    samples = storage.fetchall(
        "select ts, target, metric, family, type, map_entries(labels)::varchar, series_key, "
        "le, value from metric_samples order by target, ts, metric, series_key, le"
    )
    return scrapes, samples


def test_history_batches_store_the_rows_of_the_scrape_path(tmp_path):
    """The history's bulk path (pages read through the page template in a worker process,
    one write per window) stores exactly the rows the scrape path (prometheus_client's parser,
    Scraper.ingest_text) stores for the same pages: at 15 s for the newest history and 120 s
    for older, whose dcgm-exporter pages average over the 120 s and whose vLLM pages leave out
    the histograms' _bucket lines (their _count and _sum stay)."""
    import multiprocessing

    from inferledger.core.settings import ScrapeTarget
    from inferledger.demo.batches import (
        EXPOSITION,
        FINE_S,
        OLDER_SCRAPE_INTERVAL_S,
        SegmentJob,
        build_segment,
        metric_windows,
    )
    from ingest.scraper import Scraper

    start = 1_795_000_000.0 // 3600 * 3600 + 9 * 3600  # 09:00 UTC on a weekday, 15 minutes
    seg = Segment(start, start + 900)
    source = SegmentSource(load_workload().scaled(RATE), SEED)
    simulated = source.get(seg)
    targets = {
        t.name: ScrapeTarget(t.name, t.url, 15, 10, t.kind, t.deployment)
        for t in scrape_targets(source.config)
    }
    older = seg.end + FINE_S  # a region ending this late makes the segment "older" history
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        job = SegmentJob(SEED, RATE, seg.start, seg.end, older, traces=False)
        from_worker = pool.apply(build_segment, (job,))
    for interval, windows in (
        (15.0, list(metric_windows(simulated, seg, seg.end))),
        (OLDER_SCRAPE_INTERVAL_S, from_worker.metrics),
    ):
        with (
            Storage(tmp_path / f"bulk{interval:g}.duckdb") as bulk,
            Storage(tmp_path / f"parsed{interval:g}.duckdb") as parsed,
        ):
            scraper = Scraper(parsed)
            for at in ticks(seg.start, seg.end, interval).tolist():
                ts = datetime.fromtimestamp(at, UTC)
                fine = interval == 15.0
                for target, text in simulated.pages(at, interval, histogram_buckets=fine):
                    assert scraper.ingest_text(targets[target.name], text, EXPOSITION, ts).up
            for w in windows:
                Scraper(bulk).store_scrapes(
                    [(targets[t], datetime.fromtimestamp(at, UTC), n) for t, at, n in w.scrapes],
                    w.samples,
                )
            want, got = stored_metrics(parsed), stored_metrics(bulk)
        assert len(want[0]) == len(targets) * math.ceil(seg.duration / interval)
        assert len(want[1]) > (100 if interval == 15.0 else 40) * len(want[0])
        assert got == want
        metrics = {row[2] for row in want[1]}
        buckets = {m for m in metrics if m.endswith("_bucket")}
        # older history keeps every histogram's _count and _sum but none of its buckets
        assert (len(buckets) > 10) if interval == 15.0 else buckets == set()
        assert "vllm:e2e_request_latency_seconds_count" in metrics
    assert from_worker.traces == []


def test_load_status_says_how_far_the_history_is_complete(tmp_path):
    from ledger.load_status import finish_load, load_status, set_load_status

    start = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
    with Storage(tmp_path / "s.duckdb") as st:
        assert load_status(st) is None
        set_load_status(st, loading=True, history_start=start, complete_from=None)
        assert load_status(st).message().startswith("history loading: no complete data yet")
        later = datetime(2026, 11, 29, 17, 0, tzinfo=UTC)
        set_load_status(st, loading=True, history_start=start, complete_from=later, detail="x")
        status = load_status(st)
        assert status is not None and status.loading and status.complete_from == later
        assert status.message() == "history loading: data complete back to 2026-11-29 17:00 UTC (x)"
        with pytest.raises(Exception, match="complete_from must not be before"):
            set_load_status(st, loading=True, history_start=later, complete_from=start)
        assert load_status(st).complete_from == later  # the bad call wrote nothing
        finish_load(st)
        status = load_status(st)
        assert status is not None and not status.loading and status.message() == ""
        assert status.complete_from == status.history_start == start
