"""Export time and peak memory of `inferledger export` on a big ledger (issue #14).

    .venv/bin/python bench/export_parquet.py --db /work/bench-10m/ledger.duckdb \\
        --out-dir /tmp/export-bench [--formats parquet,csv,jsonl] [--view request_costs]

Runs the real command, `inferledger export VIEW --format F --out FILE --db DB`, once per format
as a child process (as a user runs it: the database opened as `inferledger serve` opens it,
storage.memory_limit from the settings unless --memory-limit), times it wall-clock, and reads
the child's own peak RSS from wait4()'s rusage (the kernel's high-water mark of that process,
not a sample). Whole view by default (--from/--to to narrow it). Checks the file's row count
against the view's (Parquet from its footer, CSV and JSONL by counting lines).
Target: 10M request rows to Parquet in < 60 s with < 1 GB peak RSS.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET_S = 60.0
TARGET_RSS = 1 << 30


def run_export(
    db: Path,
    view: str,
    fmt: str,
    out: Path,
    start: str | None,
    end: str | None,
    memory_limit: str | None,
) -> tuple[float, int, str]:
    """(seconds, peak RSS bytes, stdout) of one `inferledger export` child."""
    out.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")}
    if memory_limit:
        env["INFERLEDGER_STORAGE_MEMORY_LIMIT"] = memory_limit
    cmd = [sys.executable, "-m", "inferledger.cli", "export", view, "--format", fmt,
           "--out", str(out), "--db", str(db)]  # fmt: skip
    if start:
        cmd += ["--from", start]
    if end:
        cmd += ["--to", end]
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    # wait4 before communicate: it reaps the child and returns that child's own rusage
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"export {fmt} failed ({proc.returncode}): {stderr.strip()}")
    return seconds, usage.ru_maxrss * 1024, stdout.strip()


def file_rows(path: Path, fmt: str) -> int:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_metadata(path).num_rows
    with path.open("rb") as handle:
        lines = sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 24), b""))
    return lines - 1 if fmt == "csv" else lines  # CSV: the header row


def view_rows(db: Path, view: str, start: str | None, end: str | None) -> int:
    from inferledger.core.storage import Storage
    from inferledger.core.times import parse_utc
    from ledger.exports import view_select

    with Storage(db, read_timeout_s=600) as st:
        sql, params = view_select(
            st, view, parse_utc(start) if start else None, parse_utc(end) if end else None
        )
        return int(st.scalar(f"SELECT count(*) FROM ({sql})", params))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", required=True, type=Path, help="a ledger (bench/ledger_data.py)")
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--view", default="request_costs")
    parser.add_argument("--formats", default="parquet,csv,jsonl")
    parser.add_argument("--from", dest="start", metavar="ISO")
    parser.add_argument("--to", dest="end", metavar="ISO")
    parser.add_argument("--memory-limit", help="storage.memory_limit for the export (e.g. 512MB)")
    parser.add_argument("--keep", action="store_true", help="keep the exported files")
    args = parser.parse_args(argv)

    args.out_dir.mkdir(parents=True, exist_ok=True)
    rows = view_rows(args.db, args.view, args.start, args.end)
    print(f"{args.view}: {rows:,} rows in the range; memory_limit {args.memory_limit or 'default'}")
    print(f"{'format':8} {'seconds':>8} {'rows/s':>12} {'peak RSS':>10} {'file':>10}")
    worst = 0
    for fmt in args.formats.split(","):
        out = args.out_dir / f"{args.view}.{fmt}"
        seconds, rss, _ = run_export(
            args.db, args.view, fmt, out, args.start, args.end, args.memory_limit
        )
        got = file_rows(out, fmt)
        if got != rows:
            print(f"{fmt}: the file holds {got:,} rows, the view {rows:,}")
            worst = 1
        size = out.stat().st_size
        flag = ""
        if fmt == "parquet" and (seconds >= TARGET_S or rss >= TARGET_RSS):
            flag = "  <- misses the target (< 60 s, < 1 GiB)"
        print(
            f"{fmt:8} {seconds:8.1f} {rows / seconds:12,.0f} {rss / 2**20:8,.0f} MiB "
            f"{size / 2**20:8,.0f} MiB{flag}"
        )
        if not args.keep:
            out.unlink()
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
