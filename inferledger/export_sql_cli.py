"""`inferledger export-sql --dialect {postgres,clickhouse,snowflake,bigquery,spark,trino}
[--out FILE|DIR] [--view NAME ...] [--force]`: the analyst views as DDL for a warehouse
(models/portable_sql.py, docs/portable-views.md): the base tables' CREATE TABLE, then the
views in dependency order. Reads only the SQL files shipped in sql/, no database.

Without --out the script goes to standard output. --out FILE writes it to FILE (through a
temporary file renamed into place); --out DIR (an existing folder, or a name ending in '/')
writes one numbered file per table and view (001_table_spans.sql, ...), in the order to run
them. Errors print one line and exit 2; nothing is written then.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from inferledger.core.sql_files import load_macro_sql, load_migrations, load_view_sql
from ledger.catalog import ANALYST_VIEWS
from models import portable_sql
from models.portable_sql import DIALECTS, Export, PortableSqlError, Sources, object_script


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the `export-sql` command to the CLI's subparsers."""
    parser = sub.add_parser(
        "export-sql",
        help="write the analyst views as SQL DDL for another engine",
        description="Translate the analyst views (and the tables they read) into CREATE TABLE "
        "and CREATE VIEW statements for a warehouse, with sqlglot and hand fixes; views a "
        "dialect cannot run are written commented out with the reason "
        "(docs/portable-views.md).",
    )
    parser.add_argument("--dialect", required=True, choices=DIALECTS, help="the target engine")
    parser.add_argument(
        "--out",
        "-o",
        metavar="FILE|DIR",
        help="a file for one script, or a folder (existing, or ending in /) for one file per "
        "object [default: standard output]",
    )
    parser.add_argument(
        "--view",
        action="append",
        metavar="NAME",
        help="only this analyst view and what it needs (repeatable) [default: all]",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace existing files [default: refuse]"
    )
    return parser


def read_sources() -> Sources:
    """The views, macros and migrations shipped in sql/, each under its file's stem."""
    macros = {name.removesuffix(".sql"): text for name, text in load_macro_sql()}
    migrations = [(f"{m.version:04d}_{m.name}", m.sql) for m in load_migrations()]
    return Sources(dict(load_view_sql()), macros, migrations)


def _build(dialect: str, views: list[str] | None) -> Export:
    wanted = views or list(ANALYST_VIEWS)
    unknown = [v for v in wanted if v not in ANALYST_VIEWS]
    if unknown:
        raise PortableSqlError(
            f"not an analyst view: {', '.join(unknown)} (one of {', '.join(ANALYST_VIEWS)})"
        )
    return portable_sql.export(read_sources(), dialect, wanted)


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_folder(folder: Path, result: Export, force: bool) -> list[Path]:
    names = [f"{i:03d}_{s.kind}_{s.name}.sql" for i, s in enumerate(result.statements, start=1)]
    folder.mkdir(parents=True, exist_ok=True)
    clash = [n for n in names if (folder / n).exists()]
    if clash and not force:
        raise PortableSqlError(f"{folder / clash[0]} exists (--force replaces it)")
    # every file is written to a temporary name first, then all are renamed into place
    staged: list[tuple[str, Path]] = []
    try:
        for name, st in zip(names, result.statements, strict=True):
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(object_script(st) + "\n")
            staged.append((name, Path(tmp)))
    except BaseException:
        for _, tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
    for name, tmp in staged:
        os.replace(tmp, folder / name)
    return [folder / n for n in names]


def run(args: argparse.Namespace) -> int:
    from inferledger.core.errors import BadInputError

    try:
        result = _build(args.dialect, args.view)
    except PortableSqlError as exc:
        raise BadInputError(str(exc)) from None
    tables = sum(1 for s in result.statements if s.kind == "table")
    skipped = result.skipped
    summary = f"{args.dialect}: {tables} tables, {len(result.views)} views"
    if skipped:
        summary += f" ({len(skipped)} not ported, commented out: {', '.join(skipped)})"
    if not args.out:
        sys.stdout.write(result.script())
        print(summary, file=sys.stderr)
        return 0
    out = Path(args.out)
    if out.is_dir() or args.out.endswith(("/", os.sep)):
        try:
            files = _write_folder(out, result, args.force)
        except OSError as exc:
            raise BadInputError(f"cannot write to {out}: {exc.strerror or exc}") from None
        except PortableSqlError as exc:
            raise BadInputError(str(exc)) from None
        print(f"{summary} -> {len(files)} files in {out}", file=sys.stderr)
        return 0
    if out.exists() and not args.force:
        raise BadInputError(f"{out} exists (--force replaces it)")
    if not out.parent.is_dir():
        raise BadInputError(f"no folder {out.parent} for --out")
    try:
        _write_atomic(out, result.script())
    except OSError as exc:
        raise BadInputError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"{summary} -> {out}", file=sys.stderr)
    return 0
