"""The SQL files InferLedger ships (sql/): migrations, views and macros, read as text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from inferledger.core.errors import StorageError

_MIGRATION_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(folder: str = "migrations") -> list[Migration]:
    """The schema migrations shipped in sql/<folder> (DuckDB's sql/migrations, ClickHouse's
    sql/clickhouse/migrations), in version order."""
    root = resources.files("sql")
    for part in folder.split("/"):
        root = root.joinpath(part)
    out = []
    for entry in root.iterdir():
        m = _MIGRATION_RE.match(entry.name)
        if m:
            out.append(Migration(int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    out.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in out]
    if versions != list(range(1, len(out) + 1)):
        raise StorageError(f"sql/{folder} must be numbered 1..N without gaps, got {versions}")
    return out


def load_view_sql() -> list[tuple[str, str]]:
    """The views in sql/views as (name, sql); the file name (without .sql) is the view name."""
    return [(name[: -len(".sql")], sql) for name, sql in _sql_files("views")]


def load_macro_sql() -> list[tuple[str, str]]:
    """Table macros in sql/macros: each file is one full CREATE OR REPLACE MACRO statement."""
    return _sql_files("macros")


def _sql_files(folder: str) -> list[tuple[str, str]]:
    """(file name, text) of every .sql file in sql/<folder>, sorted by name."""
    root = resources.files("sql").joinpath(folder)
    if not root.is_dir():
        return []
    return [
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in sorted(root.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".sql")
    ]
