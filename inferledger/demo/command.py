"""The `inferledger demo` command: its options, and running a `Demo` until SIGINT/SIGTERM.

inferledger.cli adds this parser and calls `run`; `python -m inferledger.demo` goes through the
same CLI (`__main__.py`), so nothing here imports the CLI back.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any

from inferledger.demo.runner import Demo
from inferledger.demo.state import DEFAULT_SEED, DemoError, DemoOptions

DEFAULT_DB = "data/demo.duckdb"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `demo` to the CLI's subparsers."""
    p = subparsers.add_parser(
        "demo",
        help="serve the dashboard over a simulated week of LLM traffic",
        description=(
            "Generate N days of traces and engine/GPU metrics from the serving simulator, load "
            "them through the real ingest path, and keep serving the dashboard with live "
            "traffic. Reuses an existing demo database unless --rebuild."
        ),
    )
    p.add_argument("--days", type=float, default=None, metavar="N", help="days of history [7]")
    p.add_argument("--db", default=DEFAULT_DB, metavar="PATH", help=f"database [{DEFAULT_DB}]")
    p.add_argument("--host", default="127.0.0.1", metavar="HOST", help="listen address")
    p.add_argument("--port", type=int, default=8050, metavar="N", help="listen port [8050]")
    p.add_argument(
        "--rebuild", action="store_true", help="delete the demo database and generate it again"
    )
    p.add_argument(
        "--seed", type=int, default=None, metavar="S", help=f"random seed [{DEFAULT_SEED}]"
    )
    p.add_argument(
        "--rate-scale",
        type=float,
        default=None,
        metavar="X",
        help="multiply every app's traffic by X [1]",
    )
    p.add_argument(
        "--log-level",
        default="warning",
        choices=("debug", "info", "warning", "error"),
        help="log level [warning]",
    )
    return p


def run(args: argparse.Namespace) -> int:
    """Run the demo until SIGINT/SIGTERM; returns the exit code (0 after a clean stop)."""
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options = DemoOptions.from_args(args)
    demo = Demo(options)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _SIGNALS}
    try:
        demo.start()
        while not stop.wait(0.5):
            if demo.failed is not None:
                break
    finally:
        # A second Ctrl-C while stopping quits at once; the state file already says whether
        # the history is complete, so nothing is left ambiguous.
        for sig in _SIGNALS:
            signal.signal(sig, _quit_now)
        demo.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if demo.failed is not None:
        raise DemoError(f"demo stopped: {demo.failed}")
    return 0


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _quit_now(*_: object) -> None:
    sys.stderr.write("\ninferledger demo: quitting at once\n")
    os._exit(130)
