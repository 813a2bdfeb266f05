"""`scripts/screenshots`: a PNG of every dashboard page into docs/screenshots/.

Without --db it builds a demo ledger first (the demo's traffic for --hours, through the real
ingest path, then a refresh), so the pictures show real numbers. Sign-in is switched off for the
run; the pictures show the pages, not the sign-in form.
"""

from __future__ import annotations

import argparse
import io
import tempfile
from pathlib import Path

from inferledger.browser_pages import screenshot_pages
from inferledger.core.errors import InferLedgerError
from inferledger.core.net import free_port
from inferledger.demo import Demo, DemoOptions

OUT = Path(__file__).resolve().parent.parent / "docs" / "screenshots"


def build_demo_ledger(db: Path, hours: float, seed: int = 1) -> None:
    from inferledger.core.storage import Storage
    from ledger.marts import Refresher

    demo = Demo(
        DemoOptions(db=db, port=free_port(), days=hours / 24, seed=seed),
        out=io.StringIO(),
        err=io.StringIO(),
    )
    demo.start()
    try:
        if not demo.wait_history(3600):
            raise InferLedgerError(f"the demo history did not load: {demo.failed}")
    finally:
        demo.stop()
    with Storage(db, read_timeout_s=600) as storage:
        Refresher(storage).refresh(full=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/screenshots", description=__doc__)
    parser.add_argument("--db", help="a ledger database to show (default: build a demo one)")
    parser.add_argument("--hours", type=float, default=12.0, help="demo history [12]")
    parser.add_argument("--out", default=str(OUT), help=f"folder [{OUT}]")
    args = parser.parse_args(argv)

    from inferledger.server import serve_in_thread
    from inferledger.settings import load_settings
    from ledger.budgets import list_budgets

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "demo.duckdb"
        if not args.db:
            print(f"building a demo ledger ({args.hours:g} h of traffic)…", flush=True)
            build_demo_ledger(db, args.hours)
        port = free_port()
        settings = load_settings(env={}).replace(
            db=str(db), port=port, log_level="warning", auth__enabled=False
        )
        service, thread, url = serve_in_thread(settings)
        trace = service.storage.scalar(
            "select trace_id from mart_requests where hosting = 'self_hosted' and app is not null"
            " order by prefill_cost + decode_cost desc limit 1"
        )
        # a budget's detail view too: the demo's smallest (its team budget)
        budgets = sorted(list_budgets(service.storage), key=lambda b: b.amount)
        budget = budgets[0].name if budgets else None
        try:
            files = screenshot_pages(url, Path(args.out), trace_id=trace, budget=budget)
        finally:
            service.request_stop()
            thread.join(30)
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
