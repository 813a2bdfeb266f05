"""The price book: effective-dated prices and their audit trail (docs/cost-model.md "Price book").

One row of ``price_book`` is one price *version*: ``(kind, subject, deployment, unit, price,
effective_from)``. The price in effect at time *t* is the version with the latest
``effective_from <= t`` (the ``prices_effective`` view adds each version's ``effective_to``: the
earlier of its explicit end, set by :func:`end_price`, and the next version's start). A mistaken
version is superseded (:func:`supersede_price`): a corrected price takes its place from the same
start and the old row is kept in ``price_book_superseded``. Every insert, update, delete, end and
supersede also appends one ``price_book_changes`` row in the same transaction, so the mart
refresher can re-price from the earliest time a change affects.

Prices arrive from a file (YAML or CSV, :func:`load_price_file`), the ``inferledger prices`` CLI,
and later the UI and API. Each is validated by one function (:func:`parse_price`) so a bad value
gets the same one-line error wherever it comes from; a bad file writes nothing.

GPU subjects are stored under the GPU catalog's canonical name when the catalog knows the GPU
(``h200`` and ``NVIDIA H200`` become ``H200``, ``H100`` becomes ``H100-SXM``); other GPU types
are kept as written.

Every statement is SQLAlchemy Core, built on ``price_book`` and ``price_book_changes`` from
:mod:`ledger.schema` and run through ``tx.run`` (writes, each in the caller's one transaction)
or ``storage.select`` (reads), so the same statements can run on PostgreSQL when the metadata
moves there. Reads of the book select from the ``prices_effective`` view (declared here as a Core
``table`` of price_book's columns plus ``effective_to``) rather than rebuild its window function:
the view in sql/views stays the one definition of when a version stops applying, shared with
the marts. No raw SQL string is left in this module.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml
from sqlalchemy.dialects.postgresql import insert

from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage, Transaction
from ledger.audit import audit_page
from ledger.schema import price_book, price_book_changes, price_book_superseded
from models.gpu_catalog import get_gpu

BUNDLED_PRICE_FILE = "models/data/prices.yaml"


class PriceBookError(BadInputError):
    """A price, price file or price-book change that cannot be accepted; nothing was written."""


class UnknownPriceError(PriceBookError):
    """No price version has the given price_id."""

    http_status = 404


class PriceKind(StrEnum):
    GPU = "gpu"
    MODEL = "model"
    SERVICE = "service"
    REVIEWER = "reviewer"


class PriceUnit(StrEnum):
    GPU_HOUR = "gpu_hour"
    INPUT_MTOK = "input_mtok"
    CACHED_INPUT_MTOK = "cached_input_mtok"
    OUTPUT_MTOK = "output_mtok"
    HOUR = "hour"
    CALL = "call"


class ServiceStage(StrEnum):
    """The stage a service's cost is reported under (an unattributed service hour included)."""

    RETRIEVAL = "retrieval"
    TOOLS = "tools"


class PriceSource(StrEnum):
    """Where a price version was entered."""

    SEED = "seed"
    CLI = "cli"
    UI = "ui"
    API = "api"


class ChangeAction(StrEnum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    END = "end"  # an explicit effective_to was set (migration 0014)
    SUPERSEDE = "supersede"  # a corrected price replaced the version from the same start


ALLOWED_UNITS: Mapping[PriceKind, tuple[PriceUnit, ...]] = {
    PriceKind.GPU: (PriceUnit.GPU_HOUR,),
    PriceKind.MODEL: (PriceUnit.INPUT_MTOK, PriceUnit.CACHED_INPUT_MTOK, PriceUnit.OUTPUT_MTOK),
    PriceKind.SERVICE: (PriceUnit.HOUR, PriceUnit.CALL),
    PriceKind.REVIEWER: (PriceUnit.HOUR,),
}

# Every reviewer without a price of their own is priced as this subject.
ANY_REVIEWER = "*"

_FIELDS = (
    "kind",
    "subject",
    "unit",
    "price",
    "effective_from",
    "deployment",
    "currency",
    "stage",
    "note",
)
_REQUIRED = ("kind", "subject", "unit", "price", "effective_from")
_CURRENCY_RE = re.compile(r"^[A-Z]{3}$")


@dataclass(frozen=True, slots=True)
class Price:
    """One price version as entered (validated; build it with :func:`parse_price`)."""

    kind: PriceKind
    subject: str
    unit: PriceUnit
    price: float
    effective_from: datetime  # timezone-aware, UTC
    deployment: str = ""  # gpu overrides only; '' = fleet-wide
    currency: str = "USD"
    stage: ServiceStage | None = None  # services only
    note: str | None = None
    # Where it came from ("price file 'p.yaml' entry 3"), for error messages; not part of equality.
    origin: str = field(default="", compare=False)

    @property
    def version_key(self) -> tuple[str, str, str, str, datetime]:
        """What identifies a version: the UNIQUE key of price_book."""
        return (self.kind, self.subject, self.deployment, self.unit, self.effective_from)

    def describe(self) -> str:
        return _describe(self.kind, self.subject, self.deployment, self.unit, self.effective_from)


@dataclass(frozen=True, slots=True)
class PriceVersion:
    """A stored price version, with the time it stops applying (None while current)."""

    price_id: int
    kind: PriceKind
    subject: str
    deployment: str
    unit: PriceUnit
    price: float
    currency: str
    stage: ServiceStage | None
    effective_from: datetime
    effective_to: datetime | None
    note: str | None
    source: PriceSource
    created_at: datetime

    def describe(self) -> str:
        return _describe(self.kind, self.subject, self.deployment, self.unit, self.effective_from)


@dataclass(frozen=True, slots=True)
class PriceChange:
    """One row of the audit trail (price_book_changes)."""

    change_id: int
    changed_at: datetime
    changed_by: str
    action: ChangeAction
    price_id: int
    kind: PriceKind
    subject: str
    deployment: str
    unit: PriceUnit
    old_price: float | None
    new_price: float | None
    effective_from: datetime  # the earliest time the change affects
    note: str | None
    old_effective_from: datetime | None
    new_effective_from: datetime | None
    old_effective_to: datetime | None = None
    new_effective_to: datetime | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ChangePage:
    """One page of the audit trail, newest first: ``total`` rows in all, these from ``offset``."""

    changes: list[PriceChange]
    offset: int
    limit: int
    total: int


@dataclass(frozen=True, slots=True)
class SupersededVersion:
    """A version replaced by a corrected price from the same start (price_book_superseded)."""

    version: PriceVersion
    superseded_at: datetime
    superseded_by: int  # the replacement's price_id
    changed_by: str
    reason: str


@dataclass(frozen=True, slots=True)
class PriceEnd:
    """What :func:`end_price` did: the ended version and the gap the end opens.

    ``until`` is the next version's start (None: no later version, the gap is open-ended), so
    a caller can say which hours lose this price instead of leaving a gap to be found later."""

    version: PriceVersion
    at: datetime  # the end set
    until: datetime | None
    next_price_id: int | None

    def gap(self) -> str:
        """One line naming the hours the end leaves to a fallback price or unpriced."""
        v = self.version
        what = _describe_key(v.kind, v.subject, v.deployment, v.unit)
        span = (
            f"from {format_time(self.at)} until price_id {self.next_price_id} starts at "
            f"{format_time(self.until)}"
            if self.until is not None
            else f"from {format_time(self.at)} on"
        )
        if v.deployment:
            fallback = f"the fleet-wide {v.subject} price applies there, if there is one"
        elif v.kind is PriceKind.REVIEWER and v.subject != ANY_REVIEWER:
            fallback = f"the '{ANY_REVIEWER}' reviewer rate applies, if there is one"
        else:
            fallback = "what it priced is unpriced"
        return f"no {what} price applies {span}: {fallback}"


@dataclass(frozen=True, slots=True)
class LoadSummary:
    """What :func:`load_prices` did: versions inserted, updated (replace=True) and unchanged."""

    inserted: int
    updated: int
    unchanged: int


def _money(price: float, currency: str, stage: str | None = None) -> str:
    return f"{format_price(price)} {currency}" + (f" (stage {stage})" if stage else "")


def _describe(kind: str, subject: str, deployment: str, unit: str, effective_from: datetime) -> str:
    return f"{_describe_key(kind, subject, deployment, unit)} from {format_time(effective_from)}"


def _describe_key(kind: str, subject: str, deployment: str, unit: str) -> str:
    where = f" on deployment {deployment}" if deployment else ""
    return f"{kind} {subject}{where} {unit}"


def _one_of(values: Iterable[StrEnum]) -> str:
    names = [v.value for v in values]
    return ", ".join(names[:-1]) + " or " + names[-1]


def format_time(ts: datetime) -> str:
    """'2026-01-01 00:00 UTC' (seconds shown only when not zero)."""
    ts = ts.astimezone(UTC)
    return ts.strftime(
        "%Y-%m-%d %H:%M:%S UTC" if ts.second or ts.microsecond else "%Y-%m-%d %H:%M UTC"
    )


def format_price(value: float) -> str:
    """Money without float noise: at least 2 decimals, more only when they carry a digit."""
    text = f"{value:.10f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


# ---------------------------------------------------------------------------- validation
def parse_time(value: Any, what: str = "effective_from") -> datetime:
    """A date (00:00 UTC that day) or an ISO datetime (UTC when it has no offset), as an aware
    UTC datetime; ValueError with a one-line reason otherwise."""
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, date):
        ts = datetime.combine(value, time(0), UTC)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            if len(text) == 10:
                ts = datetime.combine(date.fromisoformat(text), time(0), UTC)
            else:
                ts = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"{what} must be a date (2026-01-01) or an ISO datetime "
                f"(2026-01-01T12:00:00Z), got {value!r}"
            ) from None
    else:
        raise ValueError(f"{what} must be a date (2026-01-01) or an ISO datetime, got {value!r}")
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC)


def _parse_amount(value: Any) -> float:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"price must be a number, got {value!r}")
    if isinstance(value, int | float):
        amount = float(value)
    else:
        try:
            amount = float(str(value).strip().replace("_", ""))
        except ValueError:
            raise ValueError(f"price must be a number, got {value!r}") from None
    if not math.isfinite(amount):
        raise ValueError(f"price must be a finite number, got {value!r}")
    if amount < 0:
        raise ValueError(f"price must not be negative, got {value!r}")
    return amount


def _text(value: Any, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{name} must be text, got {value!r}")
    return str(value).strip()


def canonical_subject(kind: PriceKind | str, subject: str) -> str:
    """A GPU type under its catalog name when the catalog knows it; anything else unchanged."""
    subject = subject.strip()
    if kind != PriceKind.GPU:
        return subject
    try:
        return get_gpu(subject).name
    except BadInputError:
        return subject


def parse_price(fields: Mapping[str, Any], where: str) -> Price:
    """Validate one price entry (a YAML mapping, a CSV row or CLI arguments). A bad one raises
    PriceBookError: one line that starts with ``where`` and names the field."""
    try:
        return _parse_price(fields, where)
    except ValueError as exc:
        raise PriceBookError(f"{where}: {exc}") from None


def _parse_price(fields: Mapping[str, Any], where: str) -> Price:
    unknown = sorted(str(k) for k in fields if k not in _FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)} (expected {', '.join(_FIELDS)})")
    present = {k: v for k, v in fields.items() if v is not None and v != ""}
    missing = [k for k in _REQUIRED if k not in present]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    kind_text = _text(present["kind"], "kind").lower()
    try:
        kind = PriceKind(kind_text)
    except ValueError:
        raise ValueError(
            f"unknown kind {present['kind']!r} (expected {_one_of(PriceKind)})"
        ) from None
    subject = canonical_subject(kind, _text(present["subject"], "subject"))
    if not subject:
        raise ValueError("subject must not be empty")
    unit_text = _text(present["unit"], "unit").lower()
    try:
        unit = PriceUnit(unit_text)
    except ValueError:
        raise ValueError(
            f"unknown unit {present['unit']!r} (expected {_one_of(PriceUnit)})"
        ) from None
    if unit not in ALLOWED_UNITS[kind]:
        allowed = ", ".join(u.value for u in ALLOWED_UNITS[kind])
        raise ValueError(
            f"unit {unit.value} is not allowed for kind {kind.value} (allowed: {allowed})"
        )
    amount = _parse_amount(present["price"])
    effective_from = parse_time(present["effective_from"])
    deployment = _text(present.get("deployment", ""), "deployment")
    if deployment and kind is not PriceKind.GPU:
        raise ValueError(
            f"deployment is only allowed for kind gpu (an override of a GPU price), "
            f"not for kind {kind.value}"
        )
    currency = _text(present.get("currency", "USD"), "currency").upper()
    if not _CURRENCY_RE.match(currency):
        raise ValueError(f"currency must be a 3-letter code such as USD, got {currency!r}")
    stage: ServiceStage | None = None
    if "stage" in present:
        if kind is not PriceKind.SERVICE:
            raise ValueError(f"stage is only allowed for kind service, not for kind {kind.value}")
        try:
            stage = ServiceStage(_text(present["stage"], "stage").lower())
        except ValueError:
            raise ValueError(
                f"stage must be retrieval or tools, got {present['stage']!r}"
            ) from None
    elif kind is PriceKind.SERVICE:
        raise ValueError("a service needs a stage (retrieval or tools)")
    note = _text(present["note"], "note") if "note" in present else None
    return Price(
        kind=kind,
        subject=subject,
        unit=unit,
        price=amount,
        effective_from=effective_from,
        deployment=deployment,
        currency=currency,
        stage=stage,
        note=note or None,
        origin=where,
    )


# ---------------------------------------------------------------------------- files
def load_price_file(path: str | Path) -> list[Price]:
    """Read and validate a price file: YAML (.yaml/.yml, a ``prices:`` list of mappings) or CSV
    (.csv, a header row naming the fields). Raises PriceBookError naming the file, the entry
    (YAML) or line (CSV) and the field."""
    p = Path(path)
    name = f"price file {str(p)!r}"
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".csv"):
        raise PriceBookError(f"{name}: unknown format (the name must end in .yaml, .yml or .csv)")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise PriceBookError(f"{name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PriceBookError(f"{name}: not UTF-8 text") from None
    read = _prices_from_csv if suffix == ".csv" else _prices_from_yaml
    prices = read(text, name)
    if not prices:
        raise PriceBookError(f"{name} holds no prices")
    _check_no_duplicates(prices)
    return prices


def bundled_price_file() -> Path:
    """The shipped default price book, models/data/prices.yaml."""
    return Path(str(resources.files("models").joinpath("data", "prices.yaml")))


class _PriceFileLoader(yaml.SafeLoader):
    """SafeLoader that leaves timestamps as text: PyYAML turns 2026-13-01 into a bare
    ValueError with no line, so parse_time reads them instead and names the entry."""


_PriceFileLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _prices_from_yaml(text: str, name: str) -> list[Price]:
    try:
        doc = yaml.load(text, Loader=_PriceFileLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise PriceBookError(f"{name} is not valid YAML{at}") from None
    if not isinstance(doc, Mapping) or set(doc) != {"prices"}:
        raise PriceBookError(f"{name} must hold one key, prices: a list of price entries")
    entries = doc["prices"]
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise PriceBookError(f"{name}: prices must be a list of price entries")
    out = []
    for i, entry in enumerate(entries, start=1):
        where = f"{name} entry {i}"
        if not isinstance(entry, Mapping):
            raise PriceBookError(f"{where}: expected a mapping of {', '.join(_REQUIRED)}, ...")
        out.append(parse_price(entry, where))
    return out


def _prices_from_csv(text: str, name: str) -> list[Price]:
    reader = csv.DictReader(text.splitlines(keepends=True))
    header = reader.fieldnames or []
    stripped = [h.strip() for h in header]
    unknown = [h for h in stripped if h not in _FIELDS]
    if unknown:
        raise PriceBookError(
            f"{name} line 1: unknown column(s) {', '.join(unknown)} (expected {', '.join(_FIELDS)})"
        )
    missing = [h for h in _REQUIRED if h not in stripped]
    if missing:
        raise PriceBookError(f"{name} line 1: missing column(s) {', '.join(missing)}")
    out = []
    for row in reader:
        where = f"{name} line {reader.line_num}"
        if None in row:  # more cells than header columns
            raise PriceBookError(f"{where}: more cells than the header has columns")
        cells = {k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in row.items()}
        if not any(cells.values()):
            continue  # a blank line
        out.append(parse_price(cells, where))
    return out


def _short_origin(origin: str) -> str:
    """'entry 3' / 'line 4' out of "price file 'p.yaml' entry 3"."""
    m = re.search(r"(entry|line) \d+$", origin)
    return m.group(0) if m else (origin or "another price")


def _check_no_duplicates(prices: Sequence[Price]) -> None:
    seen: dict[tuple[Any, ...], Price] = {}
    for price in prices:
        other = seen.get(price.version_key)
        if other is not None:
            raise PriceBookError(
                f"{price.origin or price.describe()}: {price.describe()} is given twice "
                f"(also by {_short_origin(other.origin)})"
            )
        seen[price.version_key] = price


# ---------------------------------------------------------------------------- statements
# The prices_effective view (sql/views) as a Core selectable: price_book's columns plus
# effective_to. The view stays the one definition of effective_to (the marts join on it too), so
# reads of the book select from it rather than repeat its window function here.
_effective = sa.table(
    "prices_effective",
    *(sa.column(c.name, c.type) for c in price_book.c if c.name != "effective_to"),
    # the view's effective_to: the earlier of price_book.effective_to and the next version's start
    sa.column("effective_to", sa.DateTime(timezone=True)),
)
_VERSION_COLUMNS = tuple(
    _effective.c[name]
    for name in (
        "price_id", "kind", "subject", "deployment", "unit", "price", "currency", "stage",
        "effective_from", "effective_to", "note", "source", "created_at",
    )
)  # fmt: skip
_CHANGE_COLUMNS = tuple(
    price_book_changes.c[name]
    for name in (
        "change_id", "changed_at", "changed_by", "action", "price_id", "kind", "subject",
        "deployment", "unit", "old_price", "new_price", "effective_from", "note",
        "old_effective_from", "new_effective_from", "old_effective_to", "new_effective_to",
        "reason",
    )
)  # fmt: skip
_KEY_COLUMNS = (
    price_book.c.kind,
    price_book.c.subject,
    price_book.c.deployment,
    price_book.c.unit,
    price_book.c.effective_from,
)


def _is_version(key: Sequence[Any]) -> sa.ColumnElement[bool]:
    """price_book's rows with this (kind, subject, deployment, unit, effective_from)."""
    return sa.and_(*(col == value for col, value in zip(_KEY_COLUMNS, key, strict=True)))


def _in_effective_at(ts: datetime) -> sa.ColumnElement[bool]:
    """prices_effective's versions in effect at ``ts``."""
    return sa.and_(
        _effective.c.effective_from <= ts,
        sa.or_(_effective.c.effective_to.is_(None), _effective.c.effective_to > ts),
    )


# ---------------------------------------------------------------------------- writes


def _utc(ts: datetime | None) -> datetime | None:
    return None if ts is None else ts.astimezone(UTC)


def _version(row: Sequence[Any]) -> PriceVersion:
    (pid, kind, subject, deployment, unit, price, currency, stage) = row[:8]
    (effective_from, effective_to, note, source, created_at) = row[8:]
    return PriceVersion(
        int(pid), PriceKind(kind), subject, deployment, PriceUnit(unit), float(price), currency,
        ServiceStage(stage) if stage else None, effective_from.astimezone(UTC),
        _utc(effective_to), note, PriceSource(source), created_at.astimezone(UTC),
    )  # fmt: skip


def _change(row: Sequence[Any]) -> PriceChange:
    (cid, changed_at, changed_by, action, pid, kind, subject, deployment, unit) = row[:9]
    (old_price, new_price, effective_from, note, old_from, new_from) = row[9:15]
    (old_to, new_to, reason) = row[15:]
    return PriceChange(
        int(cid), changed_at.astimezone(UTC), changed_by, ChangeAction(action), int(pid),
        PriceKind(kind), subject, deployment, PriceUnit(unit), old_price, new_price,
        effective_from.astimezone(UTC), note, _utc(old_from), _utc(new_from), _utc(old_to),
        _utc(new_to), reason,
    )  # fmt: skip


def _check_changed_by(changed_by: str) -> None:
    if not str(changed_by or "").strip():
        raise PriceBookError("changed_by must name who makes the change")


def _check_who(changed_by: str, source: PriceSource | str) -> PriceSource:
    _check_changed_by(changed_by)
    try:
        return PriceSource(source)
    except ValueError:
        raise PriceBookError(
            f"unknown source {source!r} (expected {_one_of(PriceSource)})"
        ) from None


def _find_version(tx: Transaction, price: Price) -> tuple[Any, ...] | None:
    c = price_book.c
    stmt = sa.select(c.price_id, c.price, c.currency, c.stage, c.note).where(
        _is_version(price.version_key)
    )
    return tx.run(stmt).fetchone()


def _stored_row(tx: Transaction, price_id: int) -> tuple[Any, ...]:
    c = price_book.c
    stmt = sa.select(
        c.price_id, c.kind, c.subject, c.deployment, c.unit, c.price, c.currency, c.stage,
        c.effective_from, c.note,
    ).where(c.price_id == price_id)  # fmt: skip
    row = tx.run(stmt).fetchone()
    if row is None:
        raise UnknownPriceError(f"no price with price_id {price_id}")
    return row


def _stored_end(tx: Transaction, price_id: int) -> datetime | None:
    """A stored version's explicit end (price_book.effective_to), None when it has none."""
    row = tx.run(
        sa.select(price_book.c.effective_to).where(price_book.c.price_id == price_id)
    ).fetchone()
    return None if row is None else _utc(row[0])


def _check_currency(tx: Transaction, prices: Sequence[Price]) -> None:
    """The ledger sums money across the whole book, so it holds one currency."""
    existing = tx.run(sa.select(price_book.c.currency).distinct()).fetchall()
    book = existing[0][0] if existing else prices[0].currency
    for price in prices:
        if price.currency != book:
            raise PriceBookError(
                f"{price.origin or price.describe()}: currency {price.currency} differs from the "
                f"price book's {book}; convert the price to {book} first"
            )


def _insert(tx: Transaction, price: Price, changed_by: str, source: PriceSource) -> int:
    stage = price.stage.value if price.stage else None
    stmt = (
        insert(price_book)
        .values(
            **{col.name: value for col, value in zip(_KEY_COLUMNS, price.version_key, strict=True)},
            price=price.price,
            currency=price.currency,
            stage=stage,
            note=price.note,
            source=source.value,
        )
        .returning(price_book.c.price_id)
    )
    row = tx.run(stmt).fetchone()
    assert row is not None  # RETURNING always yields the row
    price_id = int(row[0])
    new = (price.price, price.effective_from)
    _audit(
        tx, ChangeAction.INSERT, changed_by, price_id, price.version_key[:4], None, new, price.note
    )
    return price_id


def _audit(
    tx: Transaction,
    action: ChangeAction,
    changed_by: str,
    price_id: int,
    key: Sequence[str],
    old: tuple[float, datetime] | None,
    new: tuple[float, datetime] | None,
    note: str | None,
) -> None:
    """Append the change's row; its effective_from is the earliest time the change affects."""
    old_price, old_from = old or (None, None)
    new_price, new_from = new or (None, None)
    earliest = min(t for t in (old_from, new_from) if t is not None)
    kind, subject, deployment, unit = map(str, key)
    tx.run(
        insert(price_book_changes).values(
            changed_by=changed_by,
            action=action.value,
            price_id=price_id,
            kind=kind,
            subject=subject,
            deployment=deployment,
            unit=unit,
            old_price=old_price,
            new_price=new_price,
            effective_from=earliest,
            note=note,
            old_effective_from=old_from,
            new_effective_from=new_from,
        )
    )


def _update(
    tx: Transaction,
    price_id: int,
    changed_by: str,
    *,
    price: float | None = None,
    effective_from: datetime | None = None,
    note: str | None = None,
    stage: ServiceStage | None = None,
) -> bool:
    """Change one stored version (None: keep); False, and no audit row, when nothing changes."""
    row = _stored_row(tx, price_id)
    _, kind, subject, deployment, unit, old_price, _, old_stage, old_from, old_note = row
    old_from = old_from.astimezone(UTC)
    new_price = old_price if price is None else price
    new_from = old_from if effective_from is None else effective_from
    new_note = old_note if note is None else note
    new_stage = old_stage if stage is None else stage.value
    if (new_price, new_from, new_note, new_stage) == (old_price, old_from, old_note, old_stage):
        return False
    key = (kind, subject, deployment, unit)
    end = _stored_end(tx, price_id)
    if end is not None and new_from >= end:
        raise PriceBookError(
            f"price_id {price_id} cannot move to {format_time(new_from)}: it ends at "
            f"{format_time(end)}, and a version must start before its end"
        )
    if new_from != old_from:
        stmt = sa.select(price_book.c.price_id).where(_is_version((*key, new_from)))
        clash = tx.run(stmt).fetchone()
        if clash is not None:
            raise PriceBookError(
                f"price_id {price_id} cannot move to {format_time(new_from)}: price_id "
                f"{clash[0]} is already the {_describe(*key, new_from)}"
            )
    tx.run(
        sa.update(price_book)
        .where(price_book.c.price_id == price_id)
        .values(price=new_price, effective_from=new_from, note=new_note, stage=new_stage)
    )
    old, new = (old_price, old_from), (new_price, new_from)
    _audit(tx, ChangeAction.UPDATE, changed_by, price_id, key, old, new, new_note)
    return True


def load_prices(
    storage: Storage,
    prices: Iterable[Price],
    *,
    changed_by: str,
    source: PriceSource | str,
    replace: bool = False,
) -> LoadSummary:
    """Insert many versions in one transaction (all or nothing). A version already stored with
    the same price, currency and stage is left alone (reloading a file is idempotent); one with
    a different price is an error naming it, unless ``replace``, which updates it."""
    batch = list(prices)
    src = _check_who(changed_by, source)
    _check_no_duplicates(batch)
    if not batch:
        return LoadSummary(0, 0, 0)

    def op(tx: Transaction) -> LoadSummary:
        return _load(tx, batch, changed_by, src, replace)

    return storage.write(op)


def _load(
    tx: Transaction,
    batch: Sequence[Price],
    changed_by: str,
    source: PriceSource,
    replace: bool,
) -> LoadSummary:
    _check_currency(tx, batch)
    inserted = updated = unchanged = 0
    for price in batch:
        found = _find_version(tx, price)
        if found is None:
            _insert(tx, price, changed_by, source)
            inserted += 1
            continue
        price_id, old_price, old_currency, old_stage, old_note = found
        stage = price.stage.value if price.stage else None
        same = (old_price, old_currency, old_stage) == (price.price, price.currency, stage)
        if same and (not replace or old_note == price.note):
            unchanged += 1
            continue
        if not replace:
            was = _money(old_price, old_currency, old_stage if old_stage != stage else None)
            now = _money(price.price, price.currency, stage if old_stage != stage else None)
            raise PriceBookError(
                f"{price.origin or 'price'}: the price book already has {price.describe()} at "
                f"{was} (price_id {price_id}), not {now}; replace it explicitly (--replace)"
            )
        if _update(tx, price_id, changed_by, price=price.price, note=price.note, stage=price.stage):
            updated += 1
        else:
            unchanged += 1
    return LoadSummary(inserted, updated, unchanged)


def seed_if_empty(storage: Storage, path: str | Path | None = None) -> int:
    """Load the seed file (the bundled models/data/prices.yaml when ``path`` is None) into a
    price book that has never held a price; returns the versions inserted (0 when it has).

    "Never held" means no audit rows: a book whose prices were all deleted on purpose is not
    seeded again at the next start."""
    prices = load_price_file(bundled_price_file() if path is None else path)

    def op(tx: Transaction) -> int:
        row = tx.run(sa.select(sa.func.count()).select_from(price_book_changes)).fetchone()
        if row is not None and row[0]:
            return 0
        return _load(tx, prices, "seed", PriceSource.SEED, replace=False).inserted

    return storage.write(op)


def set_price(
    storage: Storage,
    kind: PriceKind | str,
    subject: str,
    unit: PriceUnit | str,
    price: float | str,
    effective_from: datetime | date | str,
    deployment: str = "",
    note: str | None = None,
    *,
    changed_by: str,
    source: PriceSource | str,
    stage: ServiceStage | str | None = None,
    currency: str = "USD",
) -> int:
    """Add a price version, or change the version with the same key and effective_from (an
    update in the audit trail); returns its price_id. Validated like a file entry."""
    fields: dict[str, Any] = {
        "kind": kind,
        "subject": subject,
        "unit": unit,
        "price": price,
        "effective_from": effective_from,
        "deployment": deployment,
        "currency": currency,
        "stage": stage,
        "note": note,
    }
    new = parse_price(fields, f"{kind} {subject}")
    src = _check_who(changed_by, source)

    def op(tx: Transaction) -> int:
        _check_currency(tx, [new])
        found = _find_version(tx, new)
        if found is None:
            return _insert(tx, new, changed_by, src)
        price_id = int(found[0])
        _update(tx, price_id, changed_by, price=new.price, note=new.note, stage=new.stage)
        return price_id

    return storage.write(op)


def update_price(
    storage: Storage,
    price_id: int,
    *,
    changed_by: str,
    price: float | str | None = None,
    effective_from: datetime | date | str | None = None,
    note: str | None = None,
) -> PriceVersion:
    """Change a stored version's price, effective_from and/or note; the audit row's
    effective_from is the earlier of the old and new effective_from. Returns the version."""
    _check_changed_by(changed_by)
    if price is None and effective_from is None and note is None:
        raise PriceBookError("nothing to update: give a price, effective_from or note")
    try:
        amount = None if price is None else _parse_amount(price)
        new_from = None if effective_from is None else parse_time(effective_from)
    except ValueError as exc:
        raise PriceBookError(f"price_id {price_id}: {exc}") from None

    def op(tx: Transaction) -> None:
        _update(tx, price_id, changed_by, price=amount, effective_from=new_from, note=note)

    storage.write(op)
    return get_price(storage, price_id)


def delete_price(storage: Storage, price_id: int, *, changed_by: str) -> PriceVersion:
    """Delete a stored version (the previous one then applies from its effective_from on);
    returns what was deleted."""
    _check_changed_by(changed_by)
    before = get_price(storage, price_id)

    def op(tx: Transaction) -> None:
        row = _stored_row(tx, price_id)
        _, kind, subject, deployment, unit, old_price, _, _, old_from, old_note = row
        tx.run(sa.delete(price_book).where(price_book.c.price_id == price_id))
        key = (kind, subject, deployment, unit)
        old = (old_price, old_from.astimezone(UTC))
        _audit(tx, ChangeAction.DELETE, changed_by, price_id, key, old, None, old_note)

    storage.write(op)
    return before


def _check_reason(reason: str | None, what: str) -> str:
    text = str(reason or "").strip()
    if not text:
        raise PriceBookError(f"{what} needs a reason: say why (it is kept in the audit trail)")
    return text


def _next_version(tx: Transaction, key: Sequence[str], after: datetime) -> tuple[Any, ...] | None:
    """(price_id, effective_from) of the first version of ``key`` that starts after ``after``."""
    c = price_book.c
    stmt = (
        sa.select(c.price_id, c.effective_from)
        .where(*(col == v for col, v in zip(_KEY_COLUMNS[:4], key, strict=True)))
        .where(c.effective_from > after)
        .order_by(c.effective_from)
        .limit(1)
    )
    return tx.run(stmt).fetchone()


def end_price(
    storage: Storage,
    price_id: int,
    at: datetime | date | str,
    *,
    changed_by: str,
    reason: str,
) -> PriceEnd:
    """End a version at ``at`` (its effective_to): the ledger stops applying it from then on and
    re-prices from the earliest hour the end changes. Refused, with nothing written, when ``at``
    is not after the version's start, is after the next version's start (the next version
    already ends it there), or is the end it already has. Ending again at a later time moves
    the end (only up to the next version's start). Returns the ended version and the gap."""
    _check_changed_by(changed_by)
    why = _check_reason(reason, f"ending price_id {price_id}")
    try:
        end = parse_time(at, "end")
    except ValueError as exc:
        raise PriceBookError(f"price_id {price_id}: {exc}") from None

    def op(tx: Transaction) -> tuple[int, datetime] | None:
        row = _stored_row(tx, price_id)
        _, kind, subject, deployment, unit, old_price, _, _, start, note = row
        start = start.astimezone(UTC)
        key = (kind, subject, deployment, unit)
        if end <= start:
            raise PriceBookError(
                f"price_id {price_id} ({_describe(*key, start)}) cannot end at "
                f"{format_time(end)}: an end must be after the version's start"
            )
        following = _next_version(tx, key, start)
        if following is not None:
            next_id, next_from = int(following[0]), following[1].astimezone(UTC)
            if end >= next_from:
                raise PriceBookError(
                    f"price_id {price_id} cannot end at {format_time(end)}: price_id {next_id} "
                    f"already replaces it from {format_time(next_from)}; end it before then, "
                    f"or end price_id {next_id} instead"
                )
        old_end = _stored_end(tx, price_id)
        if old_end == end:
            raise PriceBookError(f"price_id {price_id} already ends at {format_time(end)}")
        tx.run(
            sa.update(price_book).where(price_book.c.price_id == price_id).values(effective_to=end)
        )
        # A moved end changes the hours between the old and the new end; a first end, those after
        # it (the next version's start bounds them, but re-pricing a little more is harmless).
        earliest = end if old_end is None else min(old_end, end)
        tx.run(
            insert(price_book_changes).values(
                changed_by=changed_by,
                action=ChangeAction.END.value,
                price_id=price_id,
                kind=kind,
                subject=subject,
                deployment=deployment,
                unit=unit,
                old_price=old_price,
                new_price=None,  # no price of this version from the end on (Overview's movers)
                effective_from=earliest,
                note=note,
                old_effective_from=start,
                new_effective_from=start,
                old_effective_to=old_end,
                new_effective_to=end,
                reason=why,
            )
        )
        return None if following is None else (int(following[0]), following[1].astimezone(UTC))

    following = storage.write(op)
    version = get_price(storage, price_id)
    if following is None:
        return PriceEnd(version, end, None, None)
    return PriceEnd(version, end, following[1], following[0])


def supersede_price(
    storage: Storage,
    price_id: int,
    price: float | str,
    *,
    changed_by: str,
    reason: str,
    source: PriceSource | str,
    note: str | None = None,
) -> PriceVersion:
    """Replace a mistaken version by a corrected price from the same start (and the same end).

    The replacement gets a new price_id and takes the version's place in the book; the old one
    moves to price_book_superseded (kept, never deleted, with who, when, why and its
    replacement), and one 'supersede' row in the audit trail makes the refresher re-price from
    the version's start. ``note`` None keeps the old note. Returns the replacement."""
    src = _check_who(changed_by, source)
    why = _check_reason(reason, f"superseding price_id {price_id}")
    try:
        amount = _parse_amount(price)
    except ValueError as exc:
        raise PriceBookError(f"price_id {price_id}: {exc}") from None
    c = price_book.c
    columns = [col for col in price_book.c]

    def op(tx: Transaction) -> int:
        row = tx.run(sa.select(*columns).where(c.price_id == price_id)).fetchone()
        if row is None:
            raise UnknownPriceError(f"no price with price_id {price_id}")
        old = dict(zip([col.name for col in columns], row, strict=True))
        if old["price"] == amount:
            raise PriceBookError(
                f"price_id {price_id} is already {format_price(amount)} {old['currency']}: a "
                "correction must change the price (change only the note with `prices set`)"
            )
        new_note = old["note"] if note is None else (note.strip() or None)
        tx.run(sa.delete(price_book).where(c.price_id == price_id))
        values = {k: v for k, v in old.items() if k not in ("price_id", "created_at")}
        values.update(price=amount, note=new_note, source=src.value)
        new_id = tx.run(insert(price_book).values(**values).returning(c.price_id)).fetchone()
        assert new_id is not None  # RETURNING always yields the row
        tx.run(
            insert(price_book_superseded).values(
                **old, superseded_by=int(new_id[0]), changed_by=changed_by, reason=why
            )
        )
        start = old["effective_from"].astimezone(UTC)
        tx.run(
            insert(price_book_changes).values(
                changed_by=changed_by,
                action=ChangeAction.SUPERSEDE.value,
                price_id=price_id,
                kind=old["kind"],
                subject=old["subject"],
                deployment=old["deployment"],
                unit=old["unit"],
                old_price=old["price"],
                new_price=amount,
                effective_from=start,
                note=f"superseded by price_id {int(new_id[0])}",
                old_effective_from=start,
                new_effective_from=start,
                old_effective_to=old["effective_to"],
                new_effective_to=old["effective_to"],
                reason=why,
            )
        )
        return int(new_id[0])

    return get_price(storage, storage.write(op))


# ---------------------------------------------------------------------------- reads
def get_price(storage: Storage, price_id: int) -> PriceVersion:
    rows = storage.select(sa.select(*_VERSION_COLUMNS).where(_effective.c.price_id == price_id))
    if not rows:
        raise UnknownPriceError(f"no price with price_id {price_id}")
    return _version(rows[0])


def list_prices(storage: Storage, at: datetime | None = None) -> list[PriceVersion]:
    """Every version (``at`` None), or the versions in effect at ``at`` (naive means UTC)."""
    e = _effective.c
    stmt = sa.select(*_VERSION_COLUMNS).order_by(
        e.kind, e.subject, e.deployment, e.unit, e.effective_from
    )
    if at is not None:
        stmt = stmt.where(_in_effective_at(parse_time(at, "at")))
    return [_version(r) for r in storage.select(stmt)]


def price_at(
    storage: Storage,
    kind: PriceKind | str,
    subject: str,
    unit: PriceUnit | str,
    at: datetime,
    deployment: str = "",
) -> float | None:
    """The price in effect at ``at``: a GPU's deployment override first, then its fleet-wide
    price; a named reviewer's own rate first, then the '*' rate. None when nothing applies."""
    kind = PriceKind(kind)
    ts = parse_time(at, "at")
    subjects = [canonical_subject(kind, subject)]
    if kind is PriceKind.REVIEWER and subjects[0] != ANY_REVIEWER:
        subjects.append(ANY_REVIEWER)
    deployments = [deployment, ""] if deployment else [""]
    e = _effective.c
    unit_value = PriceUnit(unit).value
    for subj in subjects:
        for dep in deployments:
            rows = storage.select(
                sa.select(e.price).where(
                    e.kind == kind.value,
                    e.subject == subj,
                    e.deployment == dep,
                    e.unit == unit_value,
                    _in_effective_at(ts),
                )
            )
            if rows and rows[0][0] is not None:
                return float(rows[0][0])
    return None


def superseded_versions(storage: Storage) -> list[SupersededVersion]:
    """Every superseded version, the latest superseded first."""
    t = price_book_superseded.c
    stmt = sa.select(
        t.price_id, t.kind, t.subject, t.deployment, t.unit, t.price, t.currency, t.stage,
        t.effective_from, t.effective_to, t.note, t.source, t.created_at,
        t.superseded_at, t.superseded_by, t.changed_by, t.reason,
    ).order_by(t.superseded_at.desc(), t.price_id.desc())  # fmt: skip
    return [
        SupersededVersion(_version(r[:13]), r[13].astimezone(UTC), int(r[14]), r[15], r[16])
        for r in storage.select(stmt)
    ]


def history_page(storage: Storage, offset: int = 0, limit: int = 20) -> ChangePage:
    """One page of the audit trail, newest change first, and the total number of changes: the
    UI pages through it on the server instead of sending the whole trail to the browser."""
    rows, start, total = audit_page(
        storage, price_book_changes, _CHANGE_COLUMNS, offset, limit, PriceBookError
    )
    return ChangePage([_change(r) for r in rows], start, limit, total)


def history(storage: Storage, limit: int = 100) -> list[PriceChange]:
    """The audit trail, newest change first."""
    stmt = (
        sa.select(*_CHANGE_COLUMNS)
        .order_by(price_book_changes.c.change_id.desc())
        .limit(max(0, int(limit)))
    )
    rows = storage.select(stmt)
    return [_change(r) for r in rows]
