"""Efficiency and latency marts: prefix cache, KV cache, GPU utilization, latency by stage and
SLO targets (docs/efficiency.md; definitions in docs/cost-model.md "Efficiency").

Two refreshes, each run by the mart refresher inside one write op (a storage Transaction):

- :func:`refresh_cache_hours` — the metric side, from scrapes: ``mart_cache_hourly`` (hour x
  vLLM replica) and ``mart_gpu_hourly`` (hour x dcgm-exporter target). Which hours new scrapes
  touched: :func:`dirty_cache_hours`.
- :func:`refresh_latency_hours` — the request side, from ``mart_requests`` and
  ``mart_service_calls`` (so it runs after those hours are filled): ``mart_latency_hourly``,
  ``mart_latency_buckets`` and ``mart_cache_by_app``.

The SQL lives in sql/marts/efficiency_*.sql, one statement per ``-- step:``; each refresh
deletes and recomputes whole hours, so running it twice gives the same rows. Hours are
processed in runs of consecutive hours, one window per run, so a scattered list of hours never
scans what lies between them.

SLO targets are data: :func:`seed_slo_targets_if_empty` loads models/data/slo_targets.yaml into
``slo_targets`` on first start; the ``slo_attainment`` view reads the table at query time.

Per replica and over time (the GPU & cache page, issue #10): :func:`replica_table` (one row per
vLLM replica with its utilisation beside its deployment's mean), :func:`replica_over_time`
(KV occupancy, waiting requests and queue time per deployment and replica, at a resolution
chosen from the range by :func:`series_window_s`), over scraped time only
(sql/queries/replica_*.sql); right-sizing, over the same scrape instants, is ledger/rightsizing.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage, Transaction
from inferledger.core.yaml_files import parse_yaml
from ledger.queries import Filters, run
from ledger.schema import slo_target_changes, slo_targets
from ledger.sql_steps import load_steps, run_step

#: KV-cache usage (0..1) at or above which a waiting request counts as KV-bound.
KV_HIGH_USAGE = 0.9
#: A gauge sample stands for the time until its target's next scrape attempt, at most this long
#: (the cost model's ``cost.max_scrape_gap_s``).
MAX_SAMPLE_GAP_S = 300.0
#: Two counter samples further apart than this give no increase (the window looks back this far).
COUNTER_MAX_GAP_S = 3600.0

#: Latency stages of mart_latency_hourly / mart_latency_buckets / slo_targets.
LATENCY_STAGES = ("queue", "retrieval", "prefill", "ttft", "decode", "tpot", "tools", "e2e")

#: Histogram buckets: 0 below 1 ms, 1..288 log-spaced (48 per decade) up to 1000 s, 289 above.
BUCKETS_PER_DECADE = 48
BUCKET_FLOOR_S = 0.001
BUCKET_CEILING_S = 1000.0
OVERFLOW_BUCKET = 289
_GAMMA = 10 ** (1 / BUCKETS_PER_DECADE)
#: The largest relative error of a histogram percentile between 1 ms and 1000 s.
HISTOGRAM_RELATIVE_ERROR = (_GAMMA - 1) / (_GAMMA + 1)

_HOUR = timedelta(hours=1)


class SloTargetsError(BadInputError):
    """An SLO targets file that cannot be loaded; the message names the file, entry and field."""


# ---------------------------------------------------------------------------- refreshes
def refresh_cache_hours(
    tx: Transaction,
    hours: Iterable[datetime],
    *,
    max_gap_s: float = MAX_SAMPLE_GAP_S,
    kv_high: float = KV_HIGH_USAGE,
) -> int:
    """Recompute mart_cache_hourly and mart_gpu_hourly for ``hours`` (timezone-aware; any time
    inside an hour names that hour) from scrapes; returns the rows written to both. Run it
    inside a write op: ``storage.write(lambda tx: refresh_cache_hours(tx, hours))``."""
    params = {"max_gap_s": float(max_gap_s), "counter_max_gap_s": COUNTER_MAX_GAP_S}
    params["kv_high"] = float(kv_high)
    written = 0
    for h0, h1 in hour_runs(hours):
        results = _run_steps(tx, "efficiency_cache.sql", {**params, "h0": h0, "h1": h1})
        written += _inserted(results["e_insert_cache"]) + _inserted(results["e_insert_gpu"])
    return written


def refresh_latency_hours(tx: Transaction, hours: Iterable[datetime]) -> int:
    """Recompute mart_latency_hourly, mart_latency_buckets and mart_cache_by_app for ``hours``
    from mart_requests and mart_service_calls (fill those first); returns the rows written."""
    written = 0
    for h0, h1 in hour_runs(hours):
        results = _run_steps(tx, "efficiency_requests.sql", {"h0": h0, "h1": h1})
        written += sum(
            _inserted(results[step])
            for step in ("e_insert_latency", "e_insert_buckets", "e_insert_cache_by_app")
        )
    return written


def dirty_cache_hours(tx: Transaction, since_received_at: datetime | None) -> list[datetime]:
    """The hours whose metric-side marts change because of the vllm and dcgm scrapes received
    after ``since_received_at`` (None: every scrape), sorted.

    A scrape at ``ts`` changes: the hour its sample covers (``ts`` up to its successor, at most
    300 s: one or two hours); the hour of the counter increase that ends at it (intervals
    ``(a, b]`` belong to the hour of ``b``); and, since it becomes the successor of the scrape
    before it (``prev``) and the predecessor of the one after it (``next``), the hours of
    ``prev``'s sample and of the increase that ends at ``next``. Scrapes may arrive out of time
    order (history replays), so ``prev`` and ``next`` are looked up, not assumed.
    """
    sql = """
        with fresh as (
            select target, ts from scrapes
            where kind in ('vllm', 'dcgm') and ($since is null or received_at > $since)
        ),
        with_prev as (
            select f.target, f.ts, p.ts as prev_ts
            from fresh as f
            asof left join scrapes as p on p.target = f.target and p.ts < f.ts
        ),
        with_next as (
            select f.target, f.ts, f.prev_ts, n.ts as next_ts
            from with_prev as f
            asof left join scrapes as n on n.target = f.target and n.ts > f.ts
        ),
        touched as (
            select unnest([
                epoch_us(ts) // 3600000000,
                (epoch_us(ts) - 1) // 3600000000,
                (epoch_us(ts) + $gap_us - 1) // 3600000000,
                -- prev's own hour changes only if prev's coverage ended before this scrape
                -- (its old end was one median interval after it): with a regular cadence it
                -- ended exactly here, so a long step (> 60 s) is the only case to recompute
                case when epoch_us(ts) - epoch_us(prev_ts) > 60000000
                    then epoch_us(prev_ts) // 3600000000 end,
                (epoch_us(prev_ts) + $gap_us - 1) // 3600000000,
                (epoch_us(next_ts) - 1) // 3600000000
            ]) as hour_n
            from with_next
        )
        select distinct to_timestamp(hour_n * 3600) as hour
        from touched
        where hour_n is not null
        order by hour
    """
    params = {"since": since_received_at, "gap_us": int(MAX_SAMPLE_GAP_S * 1e6)}
    return [row[0] for row in tx.execute(sql, params).fetchall()]


def hour_runs(hours: Iterable[datetime]) -> list[tuple[datetime, datetime]]:
    """Runs of consecutive whole hours as windows [start, end) in UTC, sorted; each time is
    truncated to its hour. Naive datetimes are refused: an hour must be a UTC hour."""
    starts: set[datetime] = set()
    for h in hours:
        if h.tzinfo is None or h.utcoffset() is None:
            raise ValueError(f"hours must be timezone-aware, got {h!r}")
        u = h.astimezone(UTC)
        starts.add(u.replace(minute=0, second=0, microsecond=0))
    runs: list[tuple[datetime, datetime]] = []
    for start in sorted(starts):
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], start + _HOUR)
        else:
            runs.append((start, start + _HOUR))
    return runs


def _run_steps(
    tx: Transaction, file_name: str, params: dict[str, Any]
) -> dict[str, list[tuple[Any, ...]]]:
    """Run every step of sql/marts/<file_name> with the parameters it names; each step's rows."""
    return {step.name: run_step(tx, step, params).fetchall() for step in load_steps(file_name)}


def _inserted(rows: Sequence[tuple[Any, ...]]) -> int:
    """Rows an INSERT reported (DuckDB answers one row holding the count)."""
    return int(rows[0][0]) if rows else 0


# ---------------------------------------------------------------------------- histogram
def latency_bucket(value_s: float) -> int:
    """The histogram bucket of a latency, as sql/marts/efficiency_requests.sql computes it."""
    if value_s < BUCKET_FLOOR_S:
        return 0
    if value_s >= BUCKET_CEILING_S:
        return OVERFLOW_BUCKET
    b = 1 + math.floor(BUCKETS_PER_DECADE * (math.log10(value_s) + 3))
    return min(max(b, 1), OVERFLOW_BUCKET - 1)


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """[lower, upper) of a bucket in seconds (0 and 1 ms for bucket 0; inf above the last)."""
    if bucket <= 0:
        return 0.0, BUCKET_FLOOR_S
    if bucket >= OVERFLOW_BUCKET:
        return BUCKET_CEILING_S, math.inf
    lo = BUCKET_FLOOR_S * 10 ** ((bucket - 1) / BUCKETS_PER_DECADE)
    return lo, BUCKET_FLOOR_S * 10 ** (bucket / BUCKETS_PER_DECADE)


# ---------------------------------------------------------------------------- SLO targets
@dataclass(frozen=True)
class SloTarget:
    """One version of a latency objective (a row of slo_targets)."""

    objective: str
    route: str
    stage: str
    percentile: float
    target_s: float
    effective_from: datetime  # timezone-aware, UTC
    app: str | None = None
    environment: str | None = None
    note: str | None = None


_TARGET_FIELDS = (
    "objective",
    "route",
    "stage",
    "percentile",
    "target_s",
    "app",
    "environment",
    "effective_from",
    "note",
)
_REQUIRED_FIELDS = ("objective", "route", "stage", "percentile", "target_s")


def bundled_slo_targets_file() -> Path:
    """The shipped default targets, models/data/slo_targets.yaml."""
    return Path(str(resources.files("models").joinpath("data", "slo_targets.yaml")))


def load_slo_targets(path: str | Path) -> list[SloTarget]:
    """Read and validate an SLO targets file (a ``targets:`` list of mappings and an optional
    file-wide ``effective_from``); raises SloTargetsError naming the file, entry and field."""
    name = f"SLO targets file {str(path)!r}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SloTargetsError(f"{name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SloTargetsError(f"{name}: not UTF-8 text") from None
    try:
        doc = parse_yaml(text, name, SloTargetsError)
    except ValueError as exc:  # PyYAML's bare error for an impossible date such as 2026-13-01
        raise SloTargetsError(f"{name}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("targets"), list):
        raise SloTargetsError(f"{name} must be a mapping with a `targets:` list")
    unknown = sorted(set(doc) - {"targets", "effective_from"})
    if unknown:
        raise SloTargetsError(f"{name}: unknown top-level key {unknown[0]!r}")
    default_from = datetime(2000, 1, 1, tzinfo=UTC)
    if "effective_from" in doc:
        try:
            default_from = _parse_time(doc["effective_from"])
        except ValueError as exc:
            raise SloTargetsError(f"{name}: effective_from: {exc}") from None
    targets = []
    for i, entry in enumerate(doc["targets"], start=1):
        try:
            targets.append(parse_slo_target(entry, default_from))
        except ValueError as exc:
            raise SloTargetsError(f"{name}, target {i}: {exc}") from None
    if not targets:
        raise SloTargetsError(f"{name} holds no targets")
    seen: dict[tuple[str, datetime], int] = {}
    for i, t in enumerate(targets, start=1):
        key = (t.objective, t.effective_from)
        if key in seen:
            raise SloTargetsError(
                f"{name}, target {i}: objective {t.objective!r} already has a version from "
                f"{t.effective_from.isoformat()} (target {seen[key]})"
            )
        seen[key] = i
    return targets


def parse_slo_target(entry: Any, default_from: datetime) -> SloTarget:
    """Validate one entry; raises ValueError with a message naming the field."""
    if not isinstance(entry, dict):
        raise ValueError("must be a mapping such as {objective: ..., route: ..., ...}")
    for key in entry:
        if key not in _TARGET_FIELDS:
            raise ValueError(f"unknown field {key!r} (fields: {', '.join(_TARGET_FIELDS)})")
    for key in _REQUIRED_FIELDS:
        if entry.get(key) is None:
            raise ValueError(f"{key} is missing")
    stage = _text(entry["stage"], "stage").lower()
    if stage not in LATENCY_STAGES:
        raise ValueError(f"stage must be one of {', '.join(LATENCY_STAGES)}, got {stage!r}")
    percentile = _number(entry["percentile"], "percentile")
    if not 0 < percentile <= 1:
        raise ValueError(f"percentile must be in (0, 1] (0.95 for p95), got {percentile:g}")
    target_s = _number(entry["target_s"], "target_s")
    if not target_s > 0:
        raise ValueError(f"target_s must be a positive number of seconds, got {target_s:g}")
    effective_from = default_from
    if entry.get("effective_from") is not None:
        try:
            effective_from = _parse_time(entry["effective_from"])
        except ValueError as exc:
            raise ValueError(f"effective_from: {exc}") from None
    return SloTarget(
        objective=_text(entry["objective"], "objective"),
        route=_text(entry["route"], "route"),
        stage=stage,
        percentile=percentile,
        target_s=target_s,
        effective_from=effective_from,
        app=_optional_text(entry.get("app"), "app"),
        environment=_optional_text(entry.get("environment"), "environment"),
        note=_optional_text(entry.get("note"), "note"),
    )


def seed_slo_targets_if_empty(storage: Storage, path: str | Path | None = None) -> int:
    """Load the targets file (the bundled models/data/slo_targets.yaml when ``path`` is None)
    into an empty slo_targets table; returns the rows inserted (0 when nothing was seeded). The
    file is validated before anything is written, and all rows go in one transaction, with one
    ``seeded`` row per target in the audit trail (slo_target_changes, changed_by 'seed').

    Seeds only while the table is empty AND the audit trail holds no change: a ledger whose
    targets an admin removed stays empty across restarts (restore them on the admin page), and
    a ledger that has targets but predates the trail (schema < 15) is left as it is."""
    targets = load_slo_targets(bundled_slo_targets_file() if path is None else path)

    def op(tx: Transaction) -> int:
        for table in (slo_targets, slo_target_changes):
            row = tx.run(sa.select(sa.func.count()).select_from(table)).fetchone()
            if row is not None and row[0]:
                return 0
        rows = [
            {
                "objective": t.objective,
                "route": t.route,
                "app": t.app,
                "environment": t.environment,
                "stage": t.stage,
                "percentile": t.percentile,
                "target_s": t.target_s,
                "effective_from": t.effective_from,
                "note": t.note,
            }
            for t in targets
        ]
        # One multi-row INSERT each: the file holds a handful of targets, and Transaction.run
        # takes one statement (SQLAlchemy's executemany form has no place in it).
        tx.run(sa.insert(slo_targets).values(rows))
        # The same JSON shape as ledger.deployments writes for the UI's changes.
        tx.run(
            sa.insert(slo_target_changes).values(
                [
                    {
                        "changed_by": "seed",
                        "action": "seeded",
                        "objective": r["objective"],
                        "new_values": json.dumps(
                            {k: v for k, v in r.items() if k != "objective"}
                            | {
                                "effective_from": r["effective_from"].astimezone(UTC).isoformat(),
                                "source": "config",
                            },
                            sort_keys=True,
                        ),
                    }
                    for r in rows
                ]
            )
        )
        return len(targets)

    return storage.write(op)


def _text(value: Any, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{field} must be text, got {value!r}")
    text = str(value).strip()
    if not text:
        raise ValueError(f"{field} must not be empty")
    return text


def _optional_text(value: Any, field: str) -> str | None:
    return None if value is None else _text(value, field)


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{field} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{field} must be a finite number, got {value!r}")
    return number


def _parse_time(value: Any) -> datetime:
    """A date (midnight UTC) or an ISO 8601 time; a time without an offset is UTC."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime.combine(value, time(0))
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"not a date or ISO 8601 time: {value!r}") from None
    else:
        raise ValueError(f"not a date or ISO 8601 time: {value!r}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


# ---------------------------------------------------------------------------- per replica
#: Resolutions the over-time charts may use (seconds), finest first; the scrape interval is
#: tried before them. A chart draws at most SERIES_MAX_POINTS windows per series.
SERIES_STEPS_S = (60, 300, 900, 3600, 21600, 86400)
SERIES_MAX_POINTS = 360
#: A replica whose utilisation is this many times its deployment's mean is marked hot.
HOT_REPLICA_RATIO = 1.5


def series_window_s(storage: Storage, filters: Filters) -> int:
    """The window of the over-time charts: the finest of the scrape interval, 1 min, 5 min,
    15 min, 1 h, 6 h and 1 day that draws the scraped part of the range in at most
    SERIES_MAX_POINTS windows (15 s scrapes: per scrape up to 1.5 h, 1 min up to 6 h, 5 min up
    to 30 h, 15 min up to 3.75 days, hourly up to 15 days)."""
    (row,) = run(storage, "replica_span", filters).to_pylist()
    first, last = row["first_scrape"], row["last_scrape"]
    span_s = (last - first).total_seconds() if first and last else 0.0
    interval = row["scrape_interval_s"]
    steps = [*([math.ceil(interval)] if interval and interval < 60 else []), *SERIES_STEPS_S]
    for step in steps:
        if span_s / step <= SERIES_MAX_POINTS:
            return int(step)
    return SERIES_STEPS_S[-1]


def replica_over_time(storage: Storage, filters: Filters) -> pa.Table:
    """KV-cache occupancy, waiting and running requests, preemptions, requests and queue-time
    p95 per deployment (replica NULL) and per replica x window (sql/queries/replica_windows.sql),
    with the window length in ``window_s``; only windows with scraped time."""
    window_s = series_window_s(storage, filters)
    table = _windows(storage, filters, window_s)
    return table.append_column("window_s", pa.array([window_s] * table.num_rows, pa.int64()))


def _windows(storage: Storage, filters: Filters, window_s: int) -> pa.Table:
    return run(
        storage, "replica_windows", filters, window_s=int(window_s), max_gap_s=MAX_SAMPLE_GAP_S
    )


def _range_s(filters: Filters) -> int:
    return math.ceil((filters.end - filters.start).total_seconds())


REPLICA_COLUMNS = (
    "deployment", "replica", "gpus", "utilization", "utilization_source", "deployment_mean",
    "vs_deployment", "hot", "busy_share", "gpu_util", "kv_mean", "kv_max", "waiting_mean",
    "waiting_max", "queue_p95_s", "preemptions", "requests", "total_cost", "idle_cost",
    "covered_hours",
)  # fmt: skip


def replica_table(storage: Storage, filters: Filters) -> pa.Table:
    """One row per vLLM replica over the range's scraped time: utilisation (DCGM of its GPUs
    where the GPU -> replica mapping is known, else its busy share: the share of scraped time
    a request was running), its deployment's mean utilisation and the ratio to it (``hot``
    from HOT_REPLICA_RATIO with two replicas or more), KV occupancy and waiting requests (mean,
    peak), queue-time p95, preemptions, requests and GPU cost. Sorted by deployment, hottest
    first."""
    windows = _windows(storage, filters, _range_s(filters)).to_pylist()
    gauges = {r["replica"]: r for r in windows if r["replica"] is not None}
    rows = []
    for c in run(storage, "replica_costs", filters).to_pylist():
        g = gauges.get(c["replica"])
        if g is None:
            continue  # no scrape of it in the range
        util, source = (
            (c["gpu_util"], "DCGM") if c["gpu_util"] is not None else (g["busy_share"], "busy")
        )
        rows.append(
            {
                "deployment": c["deployment"],
                "replica": c["replica"],
                "gpus": c["gpus"],
                "utilization": util,
                "utilization_source": source,
                "busy_share": g["busy_share"],
                "gpu_util": c["gpu_util"],
                "kv_mean": g["kv_mean"],
                "kv_max": g["kv_max"],
                "waiting_mean": g["waiting_mean"],
                "waiting_max": g["waiting_max"],
                "queue_p95_s": g["queue_p95_s"],
                "preemptions": g["preemptions"],
                "requests": g["requests"],
                "total_cost": c["total_cost"],
                "idle_cost": c["idle_cost"],
                "covered_hours": g["covered_s"] / 3600,
            }
        )
    by_deployment: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_deployment.setdefault(r["deployment"], []).append(r)
    for group in by_deployment.values():
        utils = [r["utilization"] for r in group if r["utilization"] is not None]
        mean = sum(utils) / len(utils) if utils else None
        for r in group:
            r["deployment_mean"] = mean
            ratio = r["utilization"] / mean if mean and r["utilization"] is not None else None
            r["vs_deployment"] = ratio
            r["hot"] = bool(len(group) > 1 and ratio is not None and ratio >= HOT_REPLICA_RATIO)
    rows.sort(key=lambda r: (r["deployment"], -(r["utilization"] or 0.0), r["replica"]))
    return rows_table(rows, REPLICA_COLUMNS, _REPLICA_TYPES)


_REPLICA_TYPES: dict[str, pa.DataType] = {
    "deployment": pa.string(), "replica": pa.string(), "gpus": pa.int64(),
    "utilization_source": pa.string(), "hot": pa.bool_(), "requests": pa.int64(),
}  # fmt: skip


def rows_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], types: dict[str, pa.DataType]
) -> pa.Table:
    """Rows as an Arrow table with these columns (float64 unless typed), also when empty."""
    return pa.table(
        {c: pa.array([r[c] for r in rows], types.get(c, pa.float64())) for c in columns}
    )
