"""The refresher isolates a failing hour (issue #17): a span near 2^63-1 ns, stored before ingest
checked span times, overflowed its hour's window and with it every refresh, so watermarks never
advanced and late outcomes were never folded in. Now the hour is logged, counted and retried,
and everything else refreshes; `inferledger refresh` says so in one line and exits 1."""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
import zlib
from pathlib import Path

from inferledger.cli import main
from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.storage import Storage
from inferledger.ledger_fixtures import S, SpanSet, worked_example
from ingest.outcome_parse import parse_outcomes_json
from ingest.outcome_writer import store_outcomes
from ledger.allocation import HOUR_NS
from ledger.marts import Refresher, _window_hooks

HOUR0 = 494_444 * HOUR_NS  # 2026-05-28 20:00 UTC
# Two kinds of poison an older version stored. In the very last hour of int64 nanoseconds, whose
# end does not fit in int64: no refresh can compute it, so it is reported once, not retried.
BEYOND_NS = 2**63 - 10**10  # its spans end by 2^63 - 7 s
BEYOND_HOUR = BEYOND_NS // HOUR_NS * HOUR_NS  # 2262-04-11T23:00Z
# An hour earlier, the marts' own arithmetic overflows: an ordinary failing hour, retried.
LATE_HOUR = BEYOND_HOUR - HOUR_NS  # 2262-04-11T22:00Z


def store_poison(storage: Storage, app: str, at_ns: int) -> str:
    """A request (app span, LLM call, vLLM engine span) as an older version stored it: ingest
    now rejects such times, so it is stored at an ordinary time and moved inside the spans
    table through the gateway, the way an upgrade finds it."""
    base = HOUR0 + 2 * HOUR_NS
    spans = SpanSet(base, _ids=itertools.count(zlib.crc32(app.encode()) << 8))  # ids of its own
    trace = spans.new_trace()
    root = spans.root(trace, 0, 3, app=app, route="/p")
    call = spans.llm_call(trace, root, 1, 2, model="m", input_tokens=5, output_tokens=5)
    spans.engine(
        trace, call, 1, 2, replica="r0", queue_s=0.0, ttft_s=0.5, prompt_tokens=5,
        completion_tokens=5,
    )  # fmt: skip
    spans.store(storage)
    rows = storage.fetchall(
        "select span_id, start_ns, end_ns from spans where trace_id = $t", {"t": trace.hex()}
    )
    assert len(rows) == 3
    for span_id, start, end in rows:  # shifted in Python: DuckDB may reorder the additions
        storage.execute_write(
            "update spans set start_ns = $1, end_ns = $2 where trace_id = $3 and span_id = $4",
            [at_ns + start - base, at_ns + end - base, trace.hex(), span_id],
        )
    return trace.hex()


def apps_with_requests(storage: Storage) -> list[str]:
    return [a for (a,) in storage.fetchall("select distinct app from mart_requests order by 1")]


def failed_records(storage: Storage) -> list[int]:
    return [
        h
        for (h,) in storage.fetchall(
            "select value_int from mart_refresh_state where name like 'failed_hour:%' order by 1"
        )
    ]


def post_outcome(storage: Storage, trace_hex: str, outcome: str) -> None:
    """As POST /v1/outcomes stores it (the same parser and writer)."""
    body = json.dumps({"trace_id": trace_hex, "outcome": outcome}).encode()
    store_outcomes(storage, parse_outcomes_json(body))


def task_outcomes(storage: Storage) -> dict[str, str]:
    return dict(storage.fetchall("select task_key, outcome from mart_tasks"))


TRACE_A = "00000000000000000000000000000001"  # the worked example's first trace (app a1)


def test_poison_hours_fail_alone_and_the_rest_moves_on(storage: Storage, caplog) -> None:
    worked_example(storage, HOUR0 + 100 * S)
    store_poison(storage, "beyond", BEYOND_NS)
    late = store_poison(storage, "late", LATE_HOUR + 10 * S)
    metrics = ServiceMetrics()
    refresher = Refresher(storage, metrics=metrics)
    with caplog.at_level(logging.ERROR, logger="ledger.marts"):
        first = refresher.refresh()
    # Before issue #17 this raised an int64 ConversionException and saved nothing.
    assert [f.hour_ns for f in first.failed] == [BEYOND_HOUR, LATE_HOUR]
    assert first.failed[0].error.startswith("spans start or end in the last hour int64")
    assert "Overflow" in first.failed[1].error and "\n" not in first.failed[1].error
    assert apps_with_requests(storage) == ["a1", "a2"]  # the good hour is computed
    assert failed_records(storage) == [LATE_HOUR]
    assert metrics.registry.get_sample_value("inferledger_ledger_failed_hours") == 2
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert lines[0].startswith("ledger refresh: hour 2262-04-11T23:00Z failed: spans start ")
    assert lines[1].startswith(
        "ledger refresh: hour 2262-04-11T22:00Z failed and is retried on the next run: "
    )
    assert len(lines) == 2

    # The watermarks moved on: a late outcome is folded in, new spans are refreshed, and the
    # failed hour is retried (and fails again) without holding them back.
    post_outcome(storage, TRACE_A, "accepted")
    later = SpanSet(HOUR0 + 5 * HOUR_NS)
    later.root(later.new_trace(), 0, 1, app="a3", route="/r")
    later.store(storage)
    second = refresher.refresh()
    assert task_outcomes(storage)[f"trace:{TRACE_A}"] == "accepted"
    assert [f.hour_ns for f in second.failed] == [LATE_HOUR]
    assert "failed before (1 h)" in second.reasons
    assert refresher.refresh().hours == 1  # only the failed hour is retried, nothing else

    # Once the bad span is gone, its hour succeeds and the record is cleared.
    storage.execute_write("delete from spans where trace_id = $1", [late])
    assert refresher.refresh().failed == ()
    assert failed_records(storage) == []
    assert metrics.registry.get_sample_value("inferledger_ledger_failed_hours") == 0
    assert refresher.refresh().hours == 0


def test_a_failing_hour_does_not_hold_back_its_window(storage: Storage) -> None:
    # Six contiguous hours are one window; when the window fails, it is retried hour by hour.
    spans = SpanSet(HOUR0)
    for h in range(6):
        spans.root(spans.new_trace(), h * 3600 + 10, h * 3600 + 20, app=f"h{h}", route="/r")
    spans.store(storage)
    bad = HOUR0 + 3 * HOUR_NS
    broken = [True]
    computed: list[int] = []

    def fails_in_hour_3(cur, h0: int, h1: int) -> None:
        if broken[0] and h0 <= bad < h1:
            raise ValueError("hour 3 cannot be computed")
        computed.extend(range(h0, h1, HOUR_NS))

    refresher = Refresher(
        storage, max_window_hours=6, hooks=[*_window_hooks(60.0), fails_in_hour_3]
    )
    result = refresher.refresh()
    assert result.windows == 1
    assert [(f.hour_ns, f.error) for f in result.failed] == [(bad, "hour 3 cannot be computed")]
    assert computed == [HOUR0 + h * HOUR_NS for h in (0, 1, 2, 4, 5)]
    assert failed_records(storage) == [bad]

    computed.clear()
    assert [f.hour_ns for f in refresher.refresh().failed] == [bad]  # retried, fails again
    assert computed == [] and failed_records(storage) == [bad]
    broken[0] = False
    again = refresher.refresh()
    assert again.failed == () and again.hours == 1 and computed == [bad]
    assert failed_records(storage) == []


def test_refresh_command_prints_one_line_and_exits_1(tmp_path: Path, capsys) -> None:
    db = tmp_path / "ledger.duckdb"
    with Storage(db) as storage:
        worked_example(storage, HOUR0 + 100 * S)
        store_poison(storage, "beyond", BEYOND_NS)
        store_poison(storage, "late", LATE_HOUR + 10 * S)

    def refresh_command() -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")}
        command = [sys.executable, "-m", "inferledger.cli", "refresh", "--db", str(db)]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    done = refresh_command()
    # Before issue #17: a ConversionException traceback, and nothing refreshed.
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("refreshed 3 h in 2 windows (2 requests)")
    assert done.stderr == (
        "inferledger: refresh failed for 2 h (the other hours were refreshed): 2262-04-11T23:00Z: "
        "spans start or end in the last hour int64 nanoseconds can hold, which the ledger cannot "
        "compute; they are left out (ingest rejects such times since issue #17) (and 1 more "
        "hour); failed hours are retried on the next run\n"
    )
    with Storage(db) as storage:
        assert apps_with_requests(storage) == ["a1", "a2"]
        storage.execute_write("delete from spans where start_ns >= $1", [LATE_HOUR])
    assert main(["refresh", "--db", str(db)]) == 0  # in-process: the same command, faster
    assert capsys.readouterr().out.startswith("refreshed 1 h in 1 windows (0 requests)")
