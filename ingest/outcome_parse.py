"""Late outcomes parsed: a JSON body of POST /v1/outcomes or a CSV file becomes validated rows.

An outcome is a reviewer's or a downstream system's decision about a task — accepted,
rejected or corrected — made after the task's spans were sent (docs/cost-model.md, "Tasks and
outcomes"; docs/api.md, "Outcomes"). It names its task by task id or trace id; one for a task
whose spans have not arrived is kept, and the task_outcome_decisions view joins it when they do.

Rules, the same for JSON and CSV:
- every problem is reported, each with its place (``outcomes[3].outcome: ...`` or
  ``file.csv line 5: outcome: ...``), and any problem means nothing is stored;
- unknown fields are errors, so a misspelt ``reviewr`` is caught rather than dropped;
- an outcome's id is the client's ``id``, else a hash of its content (content_id), so a
  retried post or a re-imported file names the same decisions. A decision without
  ``decided_at`` is dated when it is stored.
Pure: no I/O but reading the CSV file it is given. ingest/outcome_writer.py stores the rows
(duplicates, conflicts), ingest/outcome_receiver.py answers HTTP — as ingest/otlp_decode.py,
ingest/span_writer.py and ingest/otlp_receiver.py do for spans.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from inferledger.core.errors import BadInputError

OUTCOME_VALUES = ("accepted", "rejected", "corrected")
SOURCES = ("api", "csv")
FIELDS = (
    "id",
    "task_id",
    "trace_id",
    "outcome",
    "review_seconds",
    "reviewer",
    "score",
    "decided_at",
)
MAX_OUTCOMES_PER_REQUEST = 10_000
MAX_TEXT_CHARS = 1024

_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")
# RFC 3339 date-time (section 5.6), with a space allowed for "T" as the RFC notes.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)


# ---------------------------------------------------------------------------- errors
class OutcomeValidationError(BadInputError):
    """One or more outcomes are invalid; ``errors`` lists every problem, nothing was stored."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        first = self.errors[0]
        more = len(self.errors) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more > 0 else ""
        super().__init__(f"{first}{suffix}; nothing was stored")


# ---------------------------------------------------------------------------- values
@dataclass(frozen=True)
class Outcome:
    """One decision about one task, validated."""

    outcome_id: str
    outcome: str
    task_id: str | None = None
    trace_id: str | None = None
    review_s: float | None = None
    reviewer: str | None = None
    score: float | None = None
    decided_at: datetime | None = None  # None: dated when stored
    source: str = "api"
    id_given: bool = field(default=False, compare=False)
    origin: str = field(default="", compare=False)  # where it came from, for messages

    def content(self) -> tuple[object, ...]:
        """What a repeated id must match to be a duplicate rather than a conflict."""
        return (
            self.task_id,
            self.trace_id,
            self.outcome,
            self.review_s,
            self.reviewer,
            self.score,
            self.decided_at,
        )

    def to_json(self) -> dict[str, object]:
        """The API's JSON form, with only the fields that were given."""
        doc: dict[str, object] = {}
        if self.id_given:
            doc["id"] = self.outcome_id
        for key, value in (
            ("task_id", self.task_id),
            ("trace_id", self.trace_id),
            ("outcome", self.outcome),
            ("review_seconds", self.review_s),
            ("reviewer", self.reviewer),
            ("score", self.score),
        ):
            if value is not None:
                doc[key] = value
        if self.decided_at is not None:
            doc["decided_at"] = self.decided_at.isoformat()
        return doc


def content_id(
    task_id: str | None,
    trace_id: str | None,
    outcome: str,
    decided_at: datetime | None,
    reviewer: str | None,
    review_s: float | None,
    score: float | None,
) -> str:
    """The id of an outcome posted without one: the same content always gets the same id, so
    a retried post or a re-imported file is stored once."""
    canonical = json.dumps(
        [
            task_id,
            trace_id,
            outcome,
            decided_at.astimezone(UTC).isoformat(timespec="microseconds") if decided_at else None,
            reviewer,
            review_s,
            score,
        ],
        separators=(",", ":"),
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


# ---------------------------------------------------------------------------- validation
def _parse_time(text: str) -> datetime:
    m = _RFC3339.fullmatch(text)
    if not m:
        raise ValueError("must be an RFC 3339 time with a UTC offset, e.g. 2026-05-28T14:03:00Z")
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    fraction = (m.group(7) or ".")[1:]
    micros = int((fraction + "000000")[:6])  # DuckDB keeps microseconds; finer is truncated
    zone = m.group(8)
    if zone in ("Z", "z"):
        tz = UTC
    else:
        sign = 1 if zone[0] == "+" else -1
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            raise ValueError(f"has an invalid UTC offset {zone!r}")
        tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
    try:
        when = datetime(year, month, day, hour, minute, second, micros, tzinfo=tz)
    except ValueError as exc:
        raise ValueError(f"is not a valid time: {exc}") from None
    try:
        # Stored and hashed in UTC: 0001-01-01T00:00:00+01:00 is a valid time whose UTC lies
        # before year 1, where the conversion raised OverflowError (a 500; issue #17).
        when.astimezone(UTC)
    except OverflowError:
        raise ValueError(
            f"is out of range: {text!r} in UTC lies outside years 0001 to 9999"
        ) from None
    return when


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {_json_type(value)}")
    if not value:
        raise ValueError("must not be empty (leave it out instead)")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"must be at most {MAX_TEXT_CHARS} characters, got {len(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # JSON's "\ud800" escape parses to a lone surrogate, which no UTF-8 text (nor the
        # database) can hold: it failed at storage time with a 500 (issue #17).
        raise ValueError("contains an unpaired surrogate (\\ud800-\\udfff)") from None
    return value


def _number(value: object, from_text: bool) -> float:
    if from_text and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"must be a number, got {value!r}") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            raise ValueError("must be a finite number") from None
    else:
        raise ValueError(f"must be a number, got {_json_type(value)}")
    if not math.isfinite(number):
        raise ValueError("must be a finite number")
    return number


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _validate(
    values: Mapping[str, object],
    where: str,
    *,
    from_text: bool,
    source: str,
    duplicated: Sequence[str] = (),
) -> tuple[Outcome | None, list[str]]:
    """One outcome from its fields (absent and None mean "not given"), or its problems.

    ``where`` prefixes every message: ``outcomes[3].`` or ``file.csv line 5: ``.
    """
    errors = [f"{where}{key}: given twice" for key in duplicated]
    for key in values:
        if key not in FIELDS:
            errors.append(f"{where}{key}: unknown field (fields: {', '.join(FIELDS)})")
    parsed: dict[str, Any] = {}

    def take(key: str, parse: Any) -> None:
        raw = values.get(key)
        if raw is None:
            return
        try:
            parsed[key] = parse(raw)
        except ValueError as exc:
            errors.append(f"{where}{key}: {exc}")

    def outcome_value(raw: object) -> str:
        text = _text(raw).lower()
        if text not in OUTCOME_VALUES:
            raise ValueError(f"must be one of {', '.join(OUTCOME_VALUES)}, got {raw!r}")
        return text

    def trace_value(raw: object) -> str:
        text = _text(raw)
        if not _TRACE_ID.fullmatch(text):
            raise ValueError(f"must be 32 hexadecimal characters, got {text!r}")
        if text.strip("0") == "":
            raise ValueError("must not be all zeros")
        return text.lower()

    def review_value(raw: object) -> float:
        number = _number(raw, from_text)
        if number < 0:
            raise ValueError(f"must be 0 or more, got {raw!r}")
        return number

    take("id", _text)
    take("task_id", _text)
    take("trace_id", trace_value)
    take("outcome", outcome_value)
    take("review_seconds", review_value)
    take("reviewer", _text)
    take("score", lambda raw: _number(raw, from_text))
    take("decided_at", lambda raw: _parse_time(_text(raw)))

    if values.get("outcome") is None:
        errors.append(f"{where}outcome: required (one of {', '.join(OUTCOME_VALUES)})")
    if values.get("task_id") is None and values.get("trace_id") is None:
        errors.append(f"{where}task_id: required unless trace_id is given")
    if errors:
        return None, errors
    id_given = "id" in parsed
    outcome_id = parsed.get("id") or content_id(
        parsed.get("task_id"),
        parsed.get("trace_id"),
        parsed["outcome"],
        parsed.get("decided_at"),
        parsed.get("reviewer"),
        parsed.get("review_seconds"),
        parsed.get("score"),
    )
    return (
        Outcome(
            outcome_id=outcome_id,
            outcome=parsed["outcome"],
            task_id=parsed.get("task_id"),
            trace_id=parsed.get("trace_id"),
            review_s=parsed.get("review_seconds"),
            reviewer=parsed.get("reviewer"),
            score=parsed.get("score"),
            decided_at=parsed.get("decided_at"),
            source=source,
            id_given=id_given,
            origin=where.rstrip(". :") or "the outcome",
        ),
        [],
    )


class _Object(dict[str, Any]):
    """A JSON object that remembers the keys it was given more than once."""

    duplicated: list[str]


def _object_pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object()
    obj.duplicated = []
    for key, value in pairs:
        if key in obj and key not in obj.duplicated:
            obj.duplicated.append(key)
        obj[key] = value
    return obj


def parse_outcomes_json(body: bytes) -> list[Outcome]:
    """Outcomes from a JSON body: one outcome object, or ``{"outcomes": [...]}`` (at most
    10,000), optionally with ``"source": "csv"`` for a file's rows posted by the importer.
    Raises OutcomeValidationError listing every problem."""
    try:
        doc = json.loads(body, object_pairs_hook=_object_pairs)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OutcomeValidationError([f"body is not valid JSON: {exc}"]) from None
    except RecursionError:  # json.loads recurses once per nested array or object
        raise OutcomeValidationError(["body is not valid JSON: it is nested too deeply"]) from None
    except ValueError as exc:  # an integer past Python's 4300 digits ("Exceeds the limit ...")
        reason = str(exc).split(":", 1)[0]
        raise OutcomeValidationError([f"body is not valid JSON: {reason}"]) from None
    if not isinstance(doc, dict):
        raise OutcomeValidationError(
            ['body must be a JSON object: one outcome, or {"outcomes": [...]}']
        )
    if "outcomes" not in doc:
        outcome, errors = _validate(
            doc, "", from_text=False, source="api", duplicated=doc.duplicated
        )
        if errors:
            raise OutcomeValidationError(errors)
        assert outcome is not None
        return [outcome]

    errors = [f"{key}: given twice" for key in doc.duplicated]
    errors += [
        f"{key}: unknown field (a batch has 'outcomes' and optionally 'source')"
        for key in doc
        if key not in ("outcomes", "source")
    ]
    source = doc.get("source", "api")
    if source not in SOURCES:
        errors.append(f"source: must be one of {', '.join(SOURCES)}, got {source!r}")
    items = doc["outcomes"]
    if not isinstance(items, list):
        raise OutcomeValidationError(
            [*errors, f"outcomes: must be a list, got {_json_type(items)}"]
        )
    if len(items) > MAX_OUTCOMES_PER_REQUEST:
        raise OutcomeValidationError(
            [
                f"outcomes: at most {MAX_OUTCOMES_PER_REQUEST} per request, got {len(items)}; "
                "send them in several requests"
            ]
        )
    out: list[Outcome] = []
    for i, item in enumerate(items):
        where = f"outcomes[{i}]."
        if not isinstance(item, dict):
            errors.append(f"outcomes[{i}]: must be an object, got {_json_type(item)}")
            continue
        outcome, problems = _validate(
            item,
            where,
            from_text=False,
            source=source if source in SOURCES else "api",
            duplicated=item.duplicated,
        )
        errors += problems
        if outcome is not None:
            out.append(outcome)
    if errors:
        raise OutcomeValidationError(errors)
    return out


def parse_outcomes_csv(path: str | Path) -> list[Outcome]:
    """Outcomes from a CSV file whose header names the API's fields (``task_id``, ``outcome``,
    ...; see FIELDS). An empty cell is a field not given. Raises OutcomeValidationError naming
    the file and line of every problem, BadInputError if the file cannot be read."""
    path = Path(path)
    name = path.name
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read: {exc.strerror}") from None
    reader = csv.reader(text.splitlines(keepends=True), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise OutcomeValidationError([f"{name}: empty file; the first line must be a header"])
        columns = [col.strip() for col in header]
        errors = [
            f"{name} line 1: unknown column {col!r} (columns: {', '.join(FIELDS)})"
            for col in columns
            if col not in FIELDS
        ]
        errors += [
            f"{name} line 1: column {col!r} given twice"
            for col in sorted({c for c in columns if columns.count(c) > 1})
        ]
        if "outcome" not in columns:
            errors.append(f"{name} line 1: the header needs an 'outcome' column")
        if "task_id" not in columns and "trace_id" not in columns:
            errors.append(f"{name} line 1: the header needs a 'task_id' or 'trace_id' column")
        if errors:
            raise OutcomeValidationError(errors)
        out: list[Outcome] = []
        line = reader.line_num + 1
        for row in reader:
            where = f"{name} line {line}: "
            line = reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue  # a blank line
            if len(row) != len(columns):
                errors.append(f"{where}{len(row)} cells, the header has {len(columns)}")
                continue
            values = {col: cell.strip() or None for col, cell in zip(columns, row, strict=True)}
            outcome, problems = _validate(values, where, from_text=True, source="csv")
            errors += problems
            if outcome is not None:
                out.append(outcome)
    except csv.Error as exc:
        raise OutcomeValidationError([f"{name} line {reader.line_num}: {exc}"]) from None
    if errors:
        raise OutcomeValidationError(errors)
    return out
