"""`inferledger export VIEW --format {csv,parquet,jsonl} --from ISO --to ISO --out FILE`: one
analyst view's rows over [from, to) to a file, streamed by DuckDB (ledger/exports.py,
docs/exports.md); `inferledger export --list` lists the views and their time columns.

Like `inferledger prices`, the command opens the database itself (--db, else the `db` setting
of --config / $INFERLEDGER_CONFIG / the environment). DuckDB lets one process open a database
file for writing and then no other process may open it at all, not even to read: while
`inferledger serve` runs on the file this command stops with one line saying so. Export from
the running server instead (GET /download/views/VIEW?from=&to=&format= signed in as an analyst,
or the read-only API with a token), or from a snapshot file opened in your own DuckDB.
Errors print one line and exit 2; nothing is left behind on failure.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from inferledger.cli_text import add_ledger_flags, command_settings


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `export` to the CLI's subparsers."""
    parser = subparsers.add_parser(
        "export",
        help="export an analyst view to CSV, Parquet or JSON Lines",
        description="Write one analyst view's rows whose time column is in [--from, --to) to "
        "--out, streamed (bounded memory). Stop `inferledger serve` first or download from the "
        "server: DuckDB lets one process open the database (docs/exports.md).",
    )
    parser.add_argument("view", metavar="VIEW", nargs="?", help="an analyst view (see --list)")
    parser.add_argument("--list", action="store_true", help="list the views and time columns")
    parser.add_argument(
        "--format",
        dest="fmt",
        default=None,
        metavar="FORMAT",
        help="csv, parquet or jsonl [default: from --out's extension]",
    )
    parser.add_argument(
        "--from", dest="start", metavar="ISO", help="first instant (inclusive; no offset = UTC)"
    )
    parser.add_argument("--to", dest="end", metavar="ISO", help="end instant (exclusive)")
    parser.add_argument("--out", "-o", metavar="FILE", help="the file to write")
    parser.add_argument(
        "--force", action="store_true", help="replace --out if it exists [default: refuse]"
    )
    parser.add_argument(
        "--comments",
        action="store_true",
        help="CSV only: '#' comment lines (view, range, rows) above the header row",
    )
    add_ledger_flags(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from inferledger.core.errors import BadInputError
    from inferledger.core.storage import open_for_command
    from inferledger.core.times import parse_utc
    from ledger import exports
    from ledger.catalog import ANALYST_VIEWS

    if args.list:
        for view in ANALYST_VIEWS:
            column = exports.time_column(view)
            when = "- (exported whole)" if column is None else column.name
            if column is not None and column.whole_days:
                when += " (whole days)"
            print(f"{view:28} {when}")
        return 0
    if not args.view:
        raise BadInputError("give a VIEW (inferledger export --list names them)")
    if not args.out:
        raise BadInputError("give --out FILE")
    exports.check_view(args.view)
    fmt = args.fmt or _format_from_name(args.out)
    exports.check_format(fmt)
    start = parse_utc(args.start, "--from") if args.start else None
    end = parse_utc(args.end, "--to") if args.end else None
    exports.check_range(args.view, start, end)
    if fmt != "csv" and args.comments:
        raise BadInputError("--comments is for --format csv only")
    settings = command_settings(args)
    # The export's own DuckDB memory limit (exports.memory_limit, 512MB): DuckDB keeps what it
    # reads cached up to its limit, and the server's 2GB would make this process 2 GB.
    settings = settings.replace(storage__memory_limit=settings["exports.memory_limit"])
    began = time.perf_counter()
    with open_for_command(settings) as storage:
        result = exports.export_view(
            storage,
            args.view,
            fmt,
            args.out,
            start,
            end,
            comments=args.comments,
            overwrite=args.force,
            timeout_s=settings["exports.timeout_s"],
        )
    seconds = time.perf_counter() - began
    print(
        f"wrote {result.rows:,} rows of {result.view} ({fmt}, {_size(result.bytes)}) to "
        f"{result.path} in {seconds:.1f} s"
    )
    return 0


def _format_from_name(out: str) -> str:
    from inferledger.core.errors import BadInputError
    from ledger.exports import FORMATS

    ext = os.path.splitext(out)[1].lstrip(".").lower()
    if ext in FORMATS:
        return ext
    raise BadInputError(f"give --format ({', '.join(FORMATS)}): --out {out!r} does not say which")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} B"
    if n < 1 << 20:
        return f"{n / 1024:,.1f} KiB"
    if n < 1 << 30:
        return f"{n / 2**20:,.1f} MiB"
    return f"{n / 2**30:,.2f} GiB"
