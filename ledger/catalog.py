"""The analyst view catalog (issue #14): which views analysts query, snapshot and export, and
what each holds.

The metadata (grain, what for, each column's unit and meaning, the time column, a stable key
order, example queries, sections with their prose) lives in sql/catalog.yaml; the column names
and types come from the views themselves (``DESCRIBE`` through the storage gateway on a
migrated database), so a view that gains a column without a line in the metadata, or metadata
that names a column a view lacks, is found by :func:`catalog_problems` (tests/test_catalog.py).
docs/views.md is :func:`catalog_markdown`'s output; regenerate it with
``python -m ledger.catalog --markdown > docs/views.md``.

:func:`page_statement` builds the read-only API's page query (app/api_views.py) from the
catalog alone: the view and its columns are identifiers taken from here, never from a request,
and every value (time range, limit, offset) is a bound parameter.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from inferledger.core.errors import BadInputError, InferLedgerError
from inferledger.core.storage import quote_ident
from inferledger.core.yaml_files import parse_yaml

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

#: The analyst-facing views of sql/views/ (staging views stay internal), in the catalog's
#: order (sql/catalog.yaml's sections; tests/test_catalog.py checks the two agree).
ANALYST_VIEWS: tuple[str, ...] = (
    "request_costs",
    "spend_hourly",
    "spend_daily",
    "spend_totals",
    "unpriced_requests",
    "prices_effective",
    "deployment_replicas",
    "task_outcomes",
    "outcome_economics",
    "false_economy_findings",
    "task_outcome_decisions",
    "cache_efficiency",
    "kv_cache_hourly",
    "cache_by_app",
    "latency_stages",
    "slo_attainment",
    "ingest_summary",
    "spans_by_service",
    "metric_counter_increases",
    "metric_histogram_quantiles",
    "scrape_health",
)

METADATA_FILE = "catalog.yaml"
#: Types whose values are compared with the time range as dates (whole UTC days).
_DATE_TYPES = ("DATE",)


class CatalogError(InferLedgerError):
    """sql/catalog.yaml is malformed (a packaging or editing mistake, not bad input)."""


class UnknownViewError(BadInputError):
    http_status = 404


@dataclass(frozen=True, slots=True)
class ColumnDoc:
    name: str
    unit: str
    meaning: str


@dataclass(frozen=True, slots=True)
class Example:
    title: str
    sql: str


@dataclass(frozen=True, slots=True)
class ViewDoc:
    """One analyst view as sql/catalog.yaml describes it."""

    name: str
    section: str
    grain: str
    what_for: str
    time_column: str | None
    order_by: tuple[str, ...]
    columns: tuple[ColumnDoc, ...]
    examples: tuple[Example, ...]

    def column(self, name: str) -> ColumnDoc | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    docs: str | None
    intro: str
    notes: str
    views: tuple[ViewDoc, ...]


@dataclass(frozen=True, slots=True)
class Catalog:
    preamble: str
    sections: tuple[Section, ...]

    @property
    def views(self) -> tuple[ViewDoc, ...]:
        return tuple(v for s in self.sections for v in s.views)

    def view(self, name: str) -> ViewDoc:
        """The view of that name; UnknownViewError (404) for any other name."""
        for v in self.views:
            if v.name == name:
                return v
        raise UnknownViewError(f"no analyst view named {name[:80]!r}: see GET /api/v1/views")


@dataclass(frozen=True, slots=True)
class Column:
    """A view's column: its real type (DESCRIBE) with the metadata's unit and meaning."""

    name: str
    type: str
    unit: str
    meaning: str


def _text(entry: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = entry.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise CatalogError(f"sql/catalog.yaml: {where}: {key} must be non-empty text")
    return value.strip()


def _column(name: Any, text: Any, where: str) -> ColumnDoc:
    if not isinstance(name, str) or not isinstance(text, str) or not text.strip():
        raise CatalogError(f"sql/catalog.yaml: {where}: column {name!r} needs a meaning")
    unit, sep, meaning = text.partition(" | ")
    if not sep:
        unit, meaning = "", text
    return ColumnDoc(name, unit.strip(), meaning.strip())


def _view(entry: Any, section: str) -> ViewDoc:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise CatalogError(f"sql/catalog.yaml: section {section!r}: a view without a name")
    name = entry["name"]
    columns = entry.get("columns")
    if not isinstance(columns, dict) or not columns:
        raise CatalogError(f"sql/catalog.yaml: {name}: columns must be a mapping")
    examples = entry.get("examples") or []
    if not isinstance(examples, list) or not 1 <= len(examples) <= 3:
        raise CatalogError(f"sql/catalog.yaml: {name}: give 1 to 3 examples")
    order_by = entry.get("order_by")
    if not isinstance(order_by, list) or not order_by:
        raise CatalogError(f"sql/catalog.yaml: {name}: order_by must list columns")
    docs = tuple(_column(k, v, name) for k, v in columns.items())
    known = {c.name for c in docs}
    time_column = entry.get("time_column")
    for col in [*order_by, *([time_column] if time_column else [])]:
        if col not in known:
            raise CatalogError(f"sql/catalog.yaml: {name}: {col!r} is not one of its columns")
    return ViewDoc(
        name=name,
        section=section,
        grain=_text(entry, "grain", name),
        what_for=_text(entry, "what_for", name),
        time_column=time_column,
        order_by=tuple(order_by),
        columns=docs,
        examples=tuple(
            Example(_text(e, "title", name), _text(e, "sql", name).rstrip(";").strip())
            for e in examples
        ),
    )


def parse_catalog(text: str) -> Catalog:
    """A catalog from the text of sql/catalog.yaml; CatalogError names what is wrong."""
    doc = parse_yaml(text, "sql/catalog.yaml", CatalogError)
    if not isinstance(doc, dict) or not isinstance(doc.get("sections"), list):
        raise CatalogError("sql/catalog.yaml: needs a list of sections")
    sections = []
    for s in doc["sections"]:
        title = _text(s, "title", "a section")
        views = s.get("views")
        if not isinstance(views, list) or not views:
            raise CatalogError(f"sql/catalog.yaml: section {title!r} lists no views")
        sections.append(
            Section(
                title=title,
                docs=s.get("docs"),
                intro=_text(s, "intro", title, required=False),
                notes=_text(s, "notes", title, required=False),
                views=tuple(_view(v, title) for v in views),
            )
        )
    names = [v.name for s in sections for v in s.views]
    if len(set(names)) != len(names):
        raise CatalogError("sql/catalog.yaml: a view is listed twice")
    return Catalog(_text(doc, "preamble", "the file"), tuple(sections))


@cache
def load_catalog() -> Catalog:
    """The bundled catalog (sql/catalog.yaml), read once."""
    return parse_catalog(resources.files("sql").joinpath(METADATA_FILE).read_text("utf-8"))


def describe_view(storage: Storage, name: str) -> list[tuple[str, str]]:
    """(column, type) of one catalog view, as DuckDB describes it. The name must be a catalog
    view's (checked here), so nothing from a request reaches the statement."""
    if name not in ANALYST_VIEWS:
        raise UnknownViewError(f"no analyst view named {name[:80]!r}")
    table = storage.query_arrow(f"describe {quote_ident(name)}")
    return list(
        zip(
            table.column("column_name").to_pylist(),
            table.column("column_type").to_pylist(),
            strict=True,
        )
    )


def view_columns(storage: Storage, name: str) -> list[Column]:
    """A view's columns in its own order, typed, with the metadata's unit and meaning (blank
    where the metadata lacks the column: catalog_problems reports that)."""
    doc = load_catalog().view(name)
    out = []
    for col, typ in describe_view(storage, name):
        meta = doc.column(col)
        out.append(Column(col, typ, meta.unit if meta else "", meta.meaning if meta else ""))
    return out


def catalog_problems(storage: Storage, catalog: Catalog | None = None) -> list[str]:
    """Every disagreement between the metadata (the bundled catalog unless given) and the
    real views, one line each."""
    problems = []
    catalog = catalog or load_catalog()
    if tuple(v.name for v in catalog.views) != ANALYST_VIEWS:
        problems.append("ANALYST_VIEWS and sql/catalog.yaml list different views (or orders)")
    for doc in catalog.views:
        if doc.name not in ANALYST_VIEWS:
            problems.append(f"{doc.name}: not an analyst view (ANALYST_VIEWS)")
            continue
        real = [c for c, _ in describe_view(storage, doc.name)]
        for col in real:
            if doc.column(col) is None:
                problems.append(f"{doc.name}.{col}: column has no entry in sql/catalog.yaml")
        for col in doc.columns:
            if col.name not in real:
                problems.append(f"{doc.name}.{col.name}: sql/catalog.yaml names a missing column")
    return problems


def catalog_json(storage: Storage) -> list[dict[str, Any]]:
    """The catalog as GET /api/v1/views returns it: every view with its columns."""
    return [view_json(storage, doc) for doc in load_catalog().views]


def view_json(storage: Storage, doc: ViewDoc) -> dict[str, Any]:
    return {
        "name": doc.name,
        "section": doc.section,
        "grain": doc.grain,
        "what_for": doc.what_for,
        "time_column": doc.time_column,
        "order_by": list(doc.order_by),
        "columns": [
            {"name": c.name, "type": c.type, "unit": c.unit or None, "meaning": c.meaning}
            for c in view_columns(storage, doc.name)
        ],
        "examples": [{"title": e.title, "sql": e.sql} for e in doc.examples],
    }


def time_bounds(
    kind: str, start: datetime | None, end: datetime | None
) -> tuple[datetime | date | None, datetime | date | None]:
    """The bound values for a time column of DuckDB type `kind`: instants as given, or for a
    DATE column the UTC days that [start, end) touches (a day counts when any of it is in)."""
    if kind not in _DATE_TYPES:
        return start, end
    lo = start.date() if start else None
    hi = None
    if end is not None:
        hi = end.date() + (timedelta(days=1) if end.time() != datetime.min.time() else timedelta())
    return lo, hi


def page_statement(
    doc: ViewDoc,
    time_type: str | None,
    *,
    start: datetime | None,
    end: datetime | None,
    limit: int,
    after: Sequence[Any] | None = None,
) -> sa.Select:
    """One page of a view in its catalog order (``order_by``, ascending, NULLs first):
    ``time_column >= start and < end`` (either may be absent), and with `after` (the key
    values of the previous page's last row) only the rows after it (keyset pagination: a
    page costs the same however deep it is, and rows arriving before the cursor do not shift
    later pages). Identifiers come from the catalog; every value is a bound parameter."""
    table = sa.table(doc.name, *(sa.column(c.name) for c in doc.columns))
    stmt = sa.select(*(table.c[c.name] for c in doc.columns))
    if doc.time_column is not None:
        lo, hi = time_bounds(time_type or "", start, end)
        t = table.c[doc.time_column]
        if lo is not None:
            stmt = stmt.where(t >= sa.bindparam("start", lo))
        if hi is not None:
            stmt = stmt.where(t < sa.bindparam("end", hi))
    keys = [table.c[c] for c in doc.order_by]
    if after is not None:
        if len(after) != len(keys):
            raise BadInputError(f"a {doc.name} cursor carries {len(keys)} key values")
        stmt = stmt.where(_after(keys, list(after)))
    order = [k.asc().nulls_first() for k in keys]
    return stmt.order_by(*order).limit(sa.bindparam("limit", limit))


def _after(keys: list[sa.ColumnClause], values: list[Any]) -> sa.ColumnElement[bool]:
    """Rows after `values` in the order of `keys` ascending with NULLs first: for some i, the
    first i keys equal the values (NULL equals NULL) and key i is greater (any value is
    greater than NULL). The first key's bound is repeated as a plain range so DuckDB can skip
    row groups by their min/max."""
    alternatives, equal = [], []
    for key, value in zip(keys, values, strict=True):
        greater = key.is_not(None) if value is None else key > value
        alternatives.append(sa.and_(*equal, greater))
        equal.append(key.is_(None) if value is None else key == value)
    predicate = sa.or_(*alternatives)
    if values[0] is not None:
        predicate = sa.and_(keys[0] >= values[0], predicate)
    return predicate


def key_values(doc: ViewDoc, row: dict[str, Any]) -> list[Any]:
    """The order_by values of a row (to pass as the next page's `after`)."""
    return [row[c] for c in doc.order_by]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def catalog_markdown(storage: Storage) -> str:
    """docs/views.md: the catalog with each column's real type. Deterministic, so a test can
    compare the file with a fresh rendering."""
    catalog = load_catalog()
    out = [
        "# SQL views",
        "",
        "<!-- Generated from sql/catalog.yaml and the views' real column types: do not edit.",
        "     Regenerate: python -m ledger.catalog --markdown > docs/views.md -->",
        "",
        catalog.preamble,
        "",
    ]
    for section in catalog.sections:
        title = f"## {section.title}"
        if section.docs:
            title += f" (docs: [{section.docs}]({section.docs}))"
        out += [title, ""]
        if section.intro:
            out += [section.intro, ""]
        out += _table(
            ["View", "Grain", "What for"],
            [
                [f"[`{v.name}`](#{v.name})", v.grain.removeprefix("one row per "), v.what_for]
                for v in section.views
            ],
        )
        out.append("")
        if section.notes:
            out += [section.notes, ""]
        for doc in section.views:
            out += _view_markdown(storage, doc)
    return "\n".join(out).rstrip("\n") + "\n"


def _view_markdown(storage: Storage, doc: ViewDoc) -> list[str]:
    time = (
        f"`{doc.time_column}`" if doc.time_column else "none (the API and exports refuse from/to)"
    )
    out = [
        f"### {doc.name}",
        "",
        f"{_sentence(doc.grain)} {_sentence(doc.what_for)}",
        "",
        f"Time column: {time}. Key order: {', '.join(f'`{c}`' for c in doc.order_by)}.",
        "",
    ]
    cols = view_columns(storage, doc.name)
    out += _table(
        ["Column", "Type", "Unit", "Meaning"],
        [[f"`{c.name}`", f"`{c.type}`", c.unit, c.meaning] for c in cols],
    )
    out += ["", "```sql"]
    for i, example in enumerate(doc.examples):
        if i:
            out.append("")
        out += [f"-- {example.title}", example.sql + ";"]
    out += ["```", ""]
    return out


def _sentence(text: str) -> str:
    text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def main(argv: list[str] | None = None) -> int:
    """``python -m ledger.catalog --markdown|--check``: render docs/views.md from a fresh
    in-memory database, or list the catalog's problems (exit 1 when there are any)."""
    from inferledger.core.storage import Storage

    parser = argparse.ArgumentParser(prog="python -m ledger.catalog", description=main.__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--markdown", action="store_true", help="print docs/views.md")
    mode.add_argument("--check", action="store_true", help="list metadata/view mismatches")
    args = parser.parse_args(argv)
    with Storage(":memory:").open() as storage:
        if args.markdown:
            sys.stdout.write(catalog_markdown(storage))
            return 0
        problems = catalog_problems(storage)
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
