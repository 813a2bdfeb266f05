"""`inferledger export-focus`: the ledger's spend as a FOCUS 1.2 or 1.3 cost file (issue #14).

Writes the charges of the whole hours starting in [--from, --to) as CSV or Parquet (docs/focus.md):
token meters of hosted models, GPU-hours of self-hosted replicas split across apps and teams,
services and review, each with its unit price from the price book. The file is written whole or
not at all. DuckDB lets one process open the database, so stop `inferledger serve` first, or
download the same export from it (GET /download/focus, app/downloads.py).
"""

from __future__ import annotations

import argparse
from typing import Any

from inferledger.cli_text import add_ledger_flags, command_settings
from inferledger.core.errors import BadInputError
from inferledger.core.storage import open_for_command
from inferledger.core.times import parse_utc
from ledger.focus import FOCUS_FORMATS, FOCUS_VERSIONS, export_focus


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the `export-focus` command to the CLI's subparsers."""
    parser = sub.add_parser(
        "export-focus",
        help="write the ledger's spend as a FOCUS 1.2 or 1.3 cost file (CSV or Parquet)",
        description=" ".join(__doc__.split("\n\n")[1].split()),
    )
    parser.add_argument(
        "--version",
        dest="focus_version",
        required=True,
        choices=sorted(FOCUS_VERSIONS),
        help="FOCUS version: 1.3 adds the Allocated* columns of split GPU charges",
    )
    parser.add_argument(
        "--from", dest="start", metavar="ISO", required=True, help="first hour (UTC if no offset)"
    )
    parser.add_argument(
        "--to", dest="stop", metavar="ISO", required=True, help="end, exclusive (UTC if no offset)"
    )
    parser.add_argument("--out", "-o", metavar="FILE", required=True, help="file to write")
    parser.add_argument(
        "--format",
        dest="fmt",
        choices=FOCUS_FORMATS,
        default=None,
        help="csv or parquet [default: from the file name, else csv]",
    )
    add_ledger_flags(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    start = parse_utc(args.start, "--from")
    stop = parse_utc(args.stop, "--to")
    if stop <= start:
        raise BadInputError(f"--to ({args.stop}) must be after --from ({args.start})")
    fmt = args.fmt or ("parquet" if str(args.out).lower().endswith(".parquet") else "csv")
    settings = command_settings(args)
    storage = open_for_command(settings)
    try:
        done = export_focus(storage, args.focus_version, start, stop, args.out, fmt)
    finally:
        storage.close()
    print(
        f"wrote {done.rows} FOCUS {done.version} charges ({done.fmt}) of "
        f"{done.start:%Y-%m-%d %H:%M} to {done.stop:%Y-%m-%d %H:%M} UTC to {done.path}"
    )
    return 0
