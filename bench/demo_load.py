"""How long `inferledger demo` takes to load its history (issue #10: within 3 minutes).

Starts the demo as `scripts/run` does (inferledger.demo.Demo, default options: 7 days, seed 1,
traffic x1; a running clock, so live traffic flows meanwhile) on a fresh database and prints
the seconds from the start to each milestone:

- ready: the dashboard answers (Demo.start() returned);
- stored: every history span and scrape is in the database (the loader's own mark, checked
  against the database's counts);
- costed: the cost marts were refreshed over the whole history (the loader clears
  load_status.loading only after that refresh; checked against mart_refresh_state and the
  oldest hour in mart_spend_hourly);

with the spans, samples and scrapes stored, the database's size, peak RSS and CPU time of the
demo's process and of its worker processes, and the load average (on a shared machine the
CPU time is the figure that does not depend on the neighbours).

    .venv/bin/python bench/demo_load.py [--days 7] [--keep DIR]
"""

from __future__ import annotations

import argparse
import io
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inferledger.core.net import free_port  # noqa: E402
from inferledger.demo import Demo, DemoOptions  # noqa: E402
from ledger.load_status import load_status  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=float, default=None, help="days of history [the demo's: 7]")
    ap.add_argument("--keep", default=None, help="put the database here and keep it")
    ap.add_argument("--timeout", type=float, default=1800, help="give up after this many s")
    args = ap.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="demo-load-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "demo.duckdb"
    err = io.StringIO()
    started = time.monotonic()
    demo = Demo(DemoOptions(db=db, port=free_port(), days=args.days, rebuild=True), err=err)
    marks: dict[str, float] = {}
    try:
        demo.start()
        marks["ready"] = time.monotonic() - started
        assert demo.service is not None and demo.loader is not None
        storage = demo.service.storage
        offset = demo.loader.progress.started - started  # the loader's clock vs ours
        while time.monotonic() - started < args.timeout:
            if demo.failed:
                raise SystemExit(f"demo failed: {demo.failed}")
            status = load_status(storage)
            if status is not None and not status.loading:
                marks["costed (load_status cleared)"] = time.monotonic() - started
                break
            time.sleep(0.5)
        else:
            raise SystemExit(f"not costed after {args.timeout:g} s:\n{err.getvalue()[-2000:]}")
        for name, at in demo.loader.timings.items():
            marks[f"{name} (loader)"] = at + offset
        t0 = datetime.fromtimestamp(demo.t0, UTC)
        spans, roots = storage.fetchall(
            "select count(*), count(*) filter (where parent_span_id is null) from spans "
            "where end_ns < ?",
            [round(demo.t0 * 1e9)],
        )[0]
        scrapes = storage.scalar("select count(*) from scrapes where ts < ?", [t0])
        samples = storage.scalar("select count(*) from metric_samples where ts < ?", [t0])
        first_hour, last_hour, hours = storage.fetchall(
            "select min(hour), max(hour), count(distinct hour) from mart_spend_hourly"
        )[0]
        marks_state = storage.fetchall(
            "select name, value_ts from mart_refresh_state where value_ts is not null"
        )
        size = storage.size_bytes()
    finally:
        demo.stop()
    me, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    own, kids = me.ru_maxrss / 1024 / 1024, children.ru_maxrss / 1024 / 1024
    cpu_own, cpu_kids = me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime
    with open("/proc/loadavg", encoding="ascii") as f:
        load = f.read().split()[:3]
    days = demo.state.days if demo.state else args.days
    print(f"inferledger demo, {days:g} days of history, default options; database {db}")
    for name, at in sorted(marks.items(), key=lambda kv: kv[1]):
        print(f"  {name:<32} {at:8.1f} s")
    print(f"  spans {spans:,} ({roots:,} traces), scrapes {scrapes:,}, samples {samples:,}")
    print(f"  mart_spend_hourly: {hours} hours, {first_hour} .. {last_hour}")
    print(f"  refresh watermarks: {dict(marks_state)}")
    print(
        f"  database {size / 2**30:.2f} GiB; peak RSS: demo process {own:.2f} GiB, "
        f"largest worker {kids:.2f} GiB"
    )
    print(
        f"  CPU time: demo process {cpu_own:.0f} s, worker processes {cpu_kids:.0f} s; "
        f"load average at the end {' '.join(load)} (other jobs share the machine when > 2)"
    )
    print("  loader: " + err.getvalue().strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
