"""Prometheus exposition text (classic 0.0.4 and OpenMetrics 1.0) → one Arrow row per sample.

Parsing is prometheus_client's own parser; this module only decides the format, turns its
families into the columns of ``metric_samples`` (sql/migrations/0002_metrics.sql) and refuses
what it cannot store faithfully. The function is pure: the scraper calls it with the time of a
live scrape, and a replay of recorded or simulated text calls it with past timestamps.

What is kept and what is dropped (docs/metrics.md):
- every counter, gauge, histogram (``_bucket``, ``_sum``, ``_count``), summary, info, stateset
  and untyped sample, under the name it was exported with (``vllm:prompt_tokens_total``);
- ``_created`` samples are dropped: they hold a start time, not a measurement, and the
  counter-reset rule in sql/macros does not need them;
- exemplars and native-histogram samples are dropped (no column for them).

Samples Prometheus would not store, or that would poison the counter views, are dropped one by
one and counted by reason (``DropReason``); the rest of the scrape is kept:
- a sample timestamp more than 10 minutes after the scrape or more than an hour before it
  (Prometheus: scrape/target.go refuses samples over 10 minutes ahead, and its TSDB head refuses
  samples older than about an hour before its newest one as "out of bounds");
- a counter-like sample (a counter, or a histogram's or summary's ``_bucket``, ``_count`` or
  ``_sum``) that is NaN, infinite or negative: a counter only grows from zero, and such a value
  gives NaN or negative increases (issue #17). OpenMetrics text already forbids NaN and negative
  counter-like values, and prometheus_client's parser refuses the whole text for one.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

import pyarrow as pa
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample, Timestamp

from inferledger.core.errors import BadInputError

SAMPLE_SCHEMA = pa.schema(
    [
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("family", pa.string(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("labels", pa.map_(pa.string(), pa.string()), nullable=False),
        pa.field("series_key", pa.string(), nullable=False),
        pa.field("le", pa.float64()),
        pa.field("value", pa.float64(), nullable=False),
    ]
)

METRIC_TYPES = frozenset(
    {"counter", "gauge", "histogram", "summary", "info", "stateset", "gaugehistogram", "unknown"}
)
# Families whose exposition carries a `_created` sample (a start time, not a measurement).
_TYPES_WITH_CREATED = frozenset({"counter", "histogram", "summary"})
_BUCKETED_TYPES = frozenset({"histogram", "gaugehistogram"})
_MAX_ERROR_CHARS = 300
# Prometheus's bounds for a scraped sample's own timestamp, relative to the scrape (module doc).
MAX_SAMPLE_LEAD = timedelta(minutes=10)
MAX_SAMPLE_AGE = timedelta(hours=1)
_COUNTER_LIKE_SUFFIXES = ("_bucket", "_count", "_sum")

# "# TYPE name counter" lines of the classic format (name possibly quoted, for UTF-8 names).
_COUNTER_TYPE_LINE = re.compile(r'^#\s+TYPE\s+("(?:[^"\\]|\\.)*"|\S+)\s+counter\s*$', re.MULTILINE)


class ExpositionError(BadInputError):
    """The scraped text is not valid exposition text; nothing from it is stored."""


class DropReason(StrEnum):
    """Why one sample of an otherwise valid scrape was not kept (module docstring)."""

    TIMESTAMP_OUT_OF_BOUNDS = "timestamp_out_of_bounds"
    COUNTER_NOT_FINITE = "counter_not_finite"
    COUNTER_NEGATIVE = "counter_negative"


@dataclass(frozen=True)
class Exposition:
    """One parsed scrape: the rows to store and what was dropped from it."""

    samples: pa.Table
    # reason -> number of samples dropped for it (only reasons that occurred)
    dropped: Mapping[DropReason, int] = field(default_factory=dict)
    # reason -> the first sample dropped for it, as `name{labels} value [timestamp]`, for the log
    examples: Mapping[DropReason, str] = field(default_factory=dict)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


def is_openmetrics(content_type: str) -> bool:
    """True for ``application/openmetrics-text`` (any version); anything else is read as the
    classic text format, as Prometheus does for an unknown or missing Content-Type."""
    return content_type.split(";", 1)[0].strip().lower() == "application/openmetrics-text"


def parse_exposition(text: str, content_type: str, scrape_ts: datetime) -> pa.Table:
    """Parse one scrape's body into rows shaped like ``metric_samples`` (without ``target``);
    :func:`read_exposition` without the count of dropped samples."""
    return read_exposition(text, content_type, scrape_ts).samples


def read_exposition(text: str, content_type: str, scrape_ts: datetime) -> Exposition:
    """Parse one scrape's body into rows shaped like ``metric_samples`` (without ``target``)
    and the samples dropped from it (module docstring).

    ``scrape_ts`` (timezone-aware) stamps every sample that carries no timestamp of its own.
    Raises :class:`ExpositionError` on text that does not parse, an unknown metric type, a bad
    bucket bound or a series repeated within the same timestamp.
    """
    if scrape_ts.tzinfo is None or scrape_ts.utcoffset() is None:
        raise ValueError("scrape_ts must be timezone-aware")
    openmetrics = is_openmetrics(content_type)
    fmt = "OpenMetrics" if openmetrics else "Prometheus text format"
    try:
        if openmetrics:
            families = list(openmetrics_parser.text_string_to_metric_families(text))
        else:
            families = list(text_string_to_metric_families(text))
    # prometheus_client signals bad input with bare ValueErrors, and a few malformed lines
    # escape as IndexError/KeyError/TypeError from its tokenizer: all mean "not valid text".
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        detail = str(exc).strip() or type(exc).__name__
        raise ExpositionError(f"not valid {fmt}: {_shorten(detail)}") from None
    # The classic parser appends `_total` to the samples of a counter declared without it
    # (dcgm-exporter's DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION); undo that to keep exported names.
    plain_counters = frozenset() if openmetrics else _counters_declared_without_total(text)
    return _to_table(families, plain_counters, _epoch_us(scrape_ts))


def _counters_declared_without_total(text: str) -> frozenset[str]:
    names = set()
    for match in _COUNTER_TYPE_LINE.finditer(text):
        name = match.group(1)
        if name.startswith('"'):
            name = name[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        if not name.endswith("_total"):
            names.add(name)
    return frozenset(names)


def _to_table(families: list[Metric], plain_counters: frozenset[str], scrape_us: int) -> Exposition:
    earliest_us = scrape_us - _MAX_AGE_US
    latest_us = scrape_us + _MAX_LEAD_US
    dropped: Counter[DropReason] = Counter()
    examples: dict[DropReason, str] = {}
    created_owners = {f.name for f in families if f.type in _TYPES_WITH_CREATED}
    ts: list[int] = []
    metric: list[str] = []
    family: list[str] = []
    types: list[str] = []
    offsets: list[int] = [0]
    keys: list[str] = []
    values: list[str] = []
    series_keys: list[str] = []
    les: list[float | None] = []
    sample_values: list[float] = []
    seen: set[tuple[str, str, float | None, int]] = set()
    key_cache: dict[tuple[tuple[str, str], ...], str] = {}

    for fam in families:
        typ = "unknown" if fam.type == "untyped" else fam.type
        if typ not in METRIC_TYPES:
            raise ExpositionError(f"{fam.name}: unknown metric type {fam.type!r}")
        # The classic format exports a counter's or histogram's start time as a separate gauge
        # family named <family>_created.
        if fam.name.endswith("_created") and fam.name[: -len("_created")] in created_owners:
            continue
        created = fam.name + "_created"
        bucket = fam.name + "_bucket" if typ in _BUCKETED_TYPES else None
        unmunge = typ == "counter" and fam.name in plain_counters
        # What sql/macros/counter_increases.sql reads as counters (docs/metrics.md).
        counter_like = (
            frozenset(fam.name + suffix for suffix in _COUNTER_LIKE_SUFFIXES)
            if typ in ("histogram", "summary")
            else frozenset()
        )
        for sample in fam.samples:
            if sample.name == created or sample.native_histogram is not None:
                continue
            name = sample.name[: -len("_total")] if unmunge else sample.name
            labels = sorted(sample.labels.items())
            le: float | None = None
            if name == bucket:
                le = _bucket_bound(name, sample.labels.get("le"))
                identity = tuple(item for item in labels if item[0] != "le")
            else:
                identity = tuple(labels)
            series_key = key_cache.get(identity)
            if series_key is None:
                series_key = key_cache[identity] = _series_key(identity)
            at = scrape_us if sample.timestamp is None else _timestamp_us(sample.timestamp)
            value = float(sample.value)
            reason = None
            if at is None or not earliest_us <= at <= latest_us:
                reason = DropReason.TIMESTAMP_OUT_OF_BOUNDS
            elif typ == "counter" or sample.name in counter_like:
                if not math.isfinite(value):
                    reason = DropReason.COUNTER_NOT_FINITE
                elif value < 0:
                    reason = DropReason.COUNTER_NEGATIVE
            if reason is not None:
                dropped[reason] += 1
                if reason not in examples:
                    examples[reason] = _shorten(_describe(name, series_key, sample))
                continue
            fingerprint = (name, series_key, le, at)
            if fingerprint in seen:
                raise ExpositionError(
                    f"{name}{{{series_key}}} appears twice"
                    + (f" (le={sample.labels['le']})" if le is not None else "")
                )
            seen.add(fingerprint)
            ts.append(at)
            metric.append(name)
            family.append(fam.name)
            types.append(typ)
            for k, v in labels:
                keys.append(k)
                values.append(v)
            offsets.append(len(keys))
            series_keys.append(series_key)
            les.append(le)
            sample_values.append(value)

    labels_array = pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(values, pa.string())
    )
    table = pa.Table.from_arrays(
        [
            pa.array(ts, SAMPLE_SCHEMA.field("ts").type),
            pa.array(metric, pa.string()),
            pa.array(family, pa.string()),
            pa.array(types, pa.string()),
            labels_array,
            pa.array(series_keys, pa.string()),
            pa.array(les, pa.float64()),
            pa.array(sample_values, pa.float64()),
        ],
        schema=SAMPLE_SCHEMA,
    )
    return Exposition(table, dict(dropped), examples)


class PageTemplate:
    """Reads pages that differ from one parsed page only in their sample values, without the
    parser: what a replay of thousands of pages from one exporter needs (inferledger demo's
    history; Scraper.ingest_pages).

    The rows come from :func:`read_exposition` itself: :meth:`learn` parses the page once with
    every sample value replaced by its line number, which tells which text line each stored row
    came from (``_created`` samples and the rest the parser leaves out simply never appear).
    :meth:`read` then checks that a page has the same lines but for the values, reads the values
    with the parser's own rule (``float``, no ``_``), and returns the learned rows with them.
    It returns None for anything it cannot vouch for — another shape of page, a sample with its
    own timestamp, a counter-like value that the parser would drop, OpenMetrics text — and the
    caller parses that page the ordinary way. :meth:`learn` also checks its own reading of the
    page against the parser's, row for row, and refuses (None) unless they are equal.
    """

    __slots__ = ("_checks", "_counter_like", "_lines", "_row_lines", "_rows", "_values_at")

    def __init__(
        self,
        lines: list[str],
        checks: list[tuple[int, str, bool]],
        rows: pa.Table,
        row_lines: list[int],
    ) -> None:
        self._lines = len(lines)
        # (line index, the line's text (a comment) or its text up to the value, is a sample)
        self._checks = checks
        self._values_at = [i for i, _, sample in checks if sample]
        self._rows = rows  # metric, family, type, labels, series_key, le of every stored row
        # Rows in the order of the stored rows: the index into _values_at of each row's line.
        position = {line: k for k, line in enumerate(self._values_at)}
        self._row_lines = [position[line] for line in row_lines]
        typ = rows.column("type").to_pylist()
        metric = rows.column("metric").to_pylist()
        fam = rows.column("family").to_pylist()
        self._counter_like = [
            t == "counter"
            or (t in ("histogram", "summary") and m in {f + x for x in _COUNTER_LIKE_SUFFIXES})
            for t, m, f in zip(typ, metric, fam, strict=True)
        ]

    @classmethod
    def learn(cls, text: str, content_type: str, scrape_ts: datetime) -> PageTemplate | None:
        """The template of `text`'s shape, or None when the fast reading cannot be vouched for."""
        if is_openmetrics(content_type):
            return None  # its parser checks values across samples (bucket order, counts)
        lines = text.split("\n")
        checks: list[tuple[int, str, bool]] = []
        numbered = []
        for i, line in enumerate(lines):
            if not line.strip() or line.lstrip().startswith("#"):
                checks.append((i, line, False))
                numbered.append(line)
                continue
            cut = line.rfind(" ")
            if cut < 0:
                return None
            checks.append((i, line[: cut + 1], True))
            numbered.append(line[: cut + 1] + str(i))
        try:
            probe = read_exposition("\n".join(numbered), content_type, scrape_ts)
            parsed = read_exposition(text, content_type, scrape_ts)
        except ExpositionError:
            return None
        samples = probe.samples
        scrape_us = _epoch_us(scrape_ts)
        ts = samples.column("ts").cast(pa.int64()).to_pylist()
        line_of = samples.column("value").to_pylist()
        if (
            probe.dropped
            or parsed.dropped
            or any(t != scrape_us for t in ts)
            or any(v != int(v) or not checks[int(v)][2] for v in line_of)
            or len(set(line_of)) != len(line_of)
        ):
            return None
        rows = samples.drop_columns(["ts", "value"]).combine_chunks()
        template = cls(lines, checks, rows, [int(v) for v in line_of])
        mine = template.read(text, scrape_ts)
        if mine is None or not mine.samples.equals(parsed.samples):
            return None
        return template

    def read(self, text: str, scrape_ts: datetime) -> Exposition | None:
        """The page's rows, as read_exposition would return them; None when the page does not
        have the learned shape (or has a value the parser would treat differently)."""
        lines = text.split("\n")
        if len(lines) != self._lines:
            return None
        values: list[float] = []
        append = values.append
        for i, expected, sample in self._checks:
            line = lines[i]
            if not sample:
                if line != expected:
                    return None
                continue
            if not line.startswith(expected):
                return None
            token = line[len(expected) :]
            if not token or " " in token or "_" in token or token != token.strip():
                return None
            try:
                append(float(token))
            except ValueError:
                return None
        picked = [values[k] for k in self._row_lines]
        for value, counter in zip(picked, self._counter_like, strict=True):
            if counter and not (value >= 0 and math.isfinite(value)):
                return None
        n = len(picked)
        scrape = pa.scalar(_epoch_us(scrape_ts), pa.int64()).cast(SAMPLE_SCHEMA.field("ts").type)
        rows = self._rows
        table = pa.Table.from_arrays(
            [
                pa.repeat(scrape, n),
                rows.column("metric"),
                rows.column("family"),
                rows.column("type"),
                rows.column("labels"),
                rows.column("series_key"),
                rows.column("le"),
                pa.array(picked, pa.float64()),
            ],
            schema=SAMPLE_SCHEMA,
        )
        return Exposition(table)


class PageReader:
    """Reads pages of many targets, each through the :class:`PageTemplate` learned from that
    target's first page, and with the parser whenever the template cannot vouch for a page.
    Not thread-safe: one per thread or process (the scraper guards its own)."""

    def __init__(self) -> None:
        self._templates: dict[str, PageTemplate | None] = {}

    def read(self, name: str, text: str, content_type: str, scrape_ts: datetime) -> Exposition:
        """Target `name`'s page as :func:`read_exposition` reads it (raises as it does)."""
        template = self._templates.get(name)
        if template is not None:
            exposition = template.read(text, scrape_ts)
            if exposition is not None:
                return exposition
        elif name not in self._templates:
            self._templates[name] = PageTemplate.learn(text, content_type, scrape_ts)
        return read_exposition(text, content_type, scrape_ts)


def _describe(name: str, series_key: str, sample: Sample) -> str:
    """A dropped sample as exposition-like text, for the log line that reports it."""
    labels = ",".join(filter(None, [series_key, _le_label(sample)]))
    stamp = "" if sample.timestamp is None else f" @{sample.timestamp}"
    return (
        f"{name}{{{labels}}} {sample.value}{stamp}" if labels else f"{name} {sample.value}{stamp}"
    )


def _le_label(sample: Sample) -> str:
    return f'le="{sample.labels["le"]}"' if "le" in sample.labels else ""


def _series_key(labels: Iterable[tuple[str, str]]) -> str:
    """Sorted labels as exposition text (`engine="0",model_name="m"`): readable, canonical."""
    return ",".join(f'{k}="{_escape(v)}"' for k, v in labels)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _bucket_bound(name: str, raw: str | None) -> float:
    if raw is None:
        raise ExpositionError(f"{name}: bucket without an le label")
    try:
        bound = float(raw)
    except ValueError:
        raise ExpositionError(f"{name}: bucket bound le={raw!r} is not a number") from None
    if math.isnan(bound):
        raise ExpositionError(f"{name}: bucket bound le={raw!r} is not a number")
    return bound


def _epoch_us(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _timestamp_us(stamp: float | Timestamp) -> int | None:
    """Microseconds since the epoch; None for a NaN or infinite timestamp (the classic parser
    reads `1e400` as inf), which no bound admits."""
    if isinstance(stamp, Timestamp):
        return stamp.sec * 1_000_000 + stamp.nsec // 1_000
    seconds = float(stamp)
    return round(seconds * 1_000_000) if math.isfinite(seconds) else None


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 1] + "…"


_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")
_MAX_LEAD_US = MAX_SAMPLE_LEAD // timedelta(microseconds=1)
_MAX_AGE_US = MAX_SAMPLE_AGE // timedelta(microseconds=1)
