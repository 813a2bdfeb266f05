"""`inferledger snapshot` (issue #14): the analyst views as a standalone DuckDB file.

    inferledger snapshot --db ledger.duckdb --out views.duckdb [--from 2026-03-01 --to 2026-04-01]

Every analyst view becomes a table of the new file, all read in one transaction (one moment);
the table ``snapshot_views`` says when, from where, and how many rows each view had. The file is
written under a temporary name and renamed, so it is whole or absent. DuckDB lets one process
open the database: while `inferledger serve` runs, use the snapshot it keeps for the SQL console
(console.snapshot_path; it is only ever replaced by a rename) instead. See docs/sql-console.md.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path

from inferledger.cli_text import command_settings
from inferledger.core.errors import BadInputError, StorageError
from inferledger.core.times import parse_utc


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the `snapshot` command to the CLI."""
    parser = sub.add_parser(
        "snapshot",
        help="write the analyst views as a standalone DuckDB file (one consistent moment)",
        description="Write every analyst view as a table of a new DuckDB file that any DuckDB, "
        "notebook or BI tool opens. All views are read in one transaction, so they agree; the "
        "file appears only when complete. --from/--to keep rows whose time column (the view "
        "catalog's, docs/views.md) lies in [FROM, TO); views without one are copied whole.",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="YAML config file (default: $INFERLEDGER_CONFIG)"
    )
    parser.add_argument("--db", dest="db", metavar="PATH", help="the ledger database file")
    parser.add_argument("--out", "-o", metavar="FILE", required=True, help="snapshot to write")
    parser.add_argument("--from", dest="start", metavar="TIME", help="ISO 8601 date or time")
    parser.add_argument("--to", dest="end", metavar="TIME", help="ISO 8601 date or time")


def _when(flag: str, text: str | None) -> datetime | None:
    return None if text is None else parse_utc(text, flag)


def run(args: argparse.Namespace) -> int:

    from inferledger.core.storage import open_for_command
    from ledger.snapshot import build_snapshot

    start, end = _when("--from", args.start), _when("--to", args.end)
    settings = command_settings(args)
    out = Path(args.out)
    if out.resolve() == Path(settings["db"]).resolve():
        raise BadInputError("--out is the database itself; name another file")
    try:
        storage = open_for_command(settings)
    except StorageError as exc:
        if "in use" not in str(exc):
            raise
        kept = settings["console.snapshot_path"] or f"{settings['db']}.snapshot.duckdb"
        raise StorageError(
            f"{exc}; or copy the snapshot the service keeps for its SQL console: {kept}"
        ) from None
    with storage:
        info = build_snapshot(storage, out, start=start, end=end)
    total = sum(info.rows.values())
    print(
        f"wrote {len(info.rows)} views ({total:,} rows) to {info.path} in {info.seconds:.2f} s "
        f"(as of {info.built_at:%Y-%m-%d %H:%M:%S} UTC)"
    )
    return 0
