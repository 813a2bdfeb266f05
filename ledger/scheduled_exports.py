"""Scheduled exports (issue #14): every completed hour or day, the chosen analyst views' rows of
that period go to a folder, partitioned by date, with a manifest per run (docs/exports.md).

    exports:
      schedules:
        - name: lake
          views: all                # or a list: [request_costs, spend_hourly]
          format: parquet           # csv | parquet | jsonl
          every: hourly             # hourly | daily
          folder: /srv/exports
          delay_s: 900              # wait after a period ends (late spans, the refresh)
          catch_up: 24              # most past periods written when missed

writes, for the hour 2026-11-20 13:00-14:00 UTC:

    /srv/exports/request_costs/date=2026-11-20/hour_utc=13/part.parquet
    /srv/exports/spend_hourly/date=2026-11-20/hour_utc=13/part.parquet
    ...
    /srv/exports/_runs/date=2026-11-20/hour_utc=13/manifest.json

(Hive-style partition folders: DuckDB, Spark, polars and pyarrow read them with the partition
keys as columns; `hour_utc`, not `hour`, which is a column of several views.) A view whose rows
are whole days (spend_daily, slo_attainment, ...) is written once a day,
`<view>/date=YYYY-MM-DD/part.<ext>`, by the run of the day's last hour.

The manifests are the state: a period is done when its manifest exists. Each tick writes the
missing ones among the last `catch_up` completed periods, oldest first, so a server that was
down catches up (at most `catch_up` periods back); a fresh folder gets those periods at the
first tick. A period is written again (each file replaced whole by a rename, the manifest last)
when its manifest is deleted, or by :func:`run_period` directly. Rows that reach the ledger
after their period was written are not in its files: `delay_s` sets how long to wait.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from inferledger import __version__
from inferledger.core.errors import InferLedgerError
from inferledger.core.storage import Storage
from ledger import exports
from ledger.catalog import ANALYST_VIEWS

log = logging.getLogger(__name__)

EVERY: dict[str, timedelta] = {"hourly": timedelta(hours=1), "daily": timedelta(days=1)}
_DEFAULT_CATCH_UP = {"hourly": 24, "daily": 7}
_FIELDS = {"name", "views", "format", "every", "folder", "delay_s", "catch_up"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
RUNS_FOLDER = "_runs"
#: The partition folders' keys; no analyst view has a column of these names (a test checks).
PARTITION_KEYS = ("date", "hour_utc")
#: How often the server checks each schedule for a period to write.
TICK_S = 300


@dataclass(frozen=True)
class ExportSchedule:
    name: str
    views: tuple[str, ...]
    fmt: str
    every: str
    folder: str
    delay_s: float = 900.0
    catch_up: int = 24

    @property
    def period(self) -> timedelta:
        return EVERY[self.every]


def _views(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None or raw == "all" or raw == ["all"]:
        return exports.dated_views()
    items = [p.strip() for p in raw.split(",")] if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(f"{where}: views must be 'all' or a list of view names")
    out: list[str] = []
    for item in items:
        name = str(item)
        if name not in ANALYST_VIEWS:
            raise ValueError(f"{where}: unknown view {name[:80]!r}")
        if exports.time_column(name) is None:
            raise ValueError(
                f"{where}: view {name} has no time column, so it has no periods to export"
            )
        if name not in out:
            out.append(name)
    return tuple(out)


def _number(raw: Any, lo: float, hi: float, where: str) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a number, got {raw!r}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{where}: must be between {lo:g} and {hi:g}, got {value:g}")
    return value


def parse_schedules(raw: Any) -> tuple[ExportSchedule, ...]:
    """The `exports.schedules` setting: a YAML list of mappings (a JSON list in env)."""
    if raw is None or raw == "" or raw == ():
        return ()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ValueError("expected a JSON list of schedules") from None
    if not isinstance(raw, list | tuple):
        raise ValueError(f"expected a list of schedules, got {raw!r}")
    out: list[ExportSchedule] = []
    for i, entry in enumerate(raw):
        if isinstance(entry, ExportSchedule):
            out.append(entry)
            continue
        where = f"schedule #{i + 1}"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: expected a mapping with name, every and folder")
        unknown = set(entry) - _FIELDS
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        name = str(entry.get("name") or "")
        if not _NAME.match(name):
            raise ValueError(f"{where}: name must be letters, digits, '.', '_' or '-'")
        where = f"schedule {name!r}"
        every = str(entry.get("every") or "")
        if every not in EVERY:
            raise ValueError(f"{where}: every must be hourly or daily, got {every!r}")
        fmt = str(entry.get("format") or "parquet")
        if fmt not in exports.FORMATS:
            raise ValueError(f"{where}: format must be one of {', '.join(exports.FORMATS)}")
        folder = str(entry.get("folder") or "").strip()
        if not folder or "\x00" in folder:
            raise ValueError(f"{where}: folder is required")
        out.append(
            ExportSchedule(
                name=name,
                views=_views(entry.get("views", "all"), where),
                fmt=fmt,
                every=every,
                folder=folder,
                delay_s=_number(entry.get("delay_s", 900), 0, 86_400, f"{where}: delay_s"),
                catch_up=int(
                    _number(
                        entry.get("catch_up", _DEFAULT_CATCH_UP[every]),
                        1,
                        10_000,
                        f"{where}: catch_up",
                    )
                ),
            )
        )
    names = [s.name for s in out]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"schedule name {name!r} is used twice")
    return tuple(out)


# ---------------------------------------------------------------------------- periods
def _floor(moment: datetime, period: timedelta) -> datetime:
    utc = moment.astimezone(UTC)
    if period >= timedelta(days=1):
        return utc.replace(hour=0, minute=0, second=0, microsecond=0)
    return utc.replace(minute=0, second=0, microsecond=0)


def completed_periods(schedule: ExportSchedule, now: datetime) -> list[datetime]:
    """The starts of the last `catch_up` periods that ended at least `delay_s` before `now`,
    oldest first."""
    period = schedule.period
    last_end = _floor(now - timedelta(seconds=schedule.delay_s), period)
    return [last_end - period * k for k in range(schedule.catch_up, 0, -1)]


def partition(start: datetime, period: timedelta) -> str:
    """`date=YYYY-MM-DD` or `date=YYYY-MM-DD/hour_utc=HH` of a period starting at `start`.
    Not `hour=`: readers that detect Hive partitions (DuckDB's read_parquet by default, polars'
    hive_partitioning) replace a column of the file with the partition key's value, and many
    views have an `hour` column (a timestamp that became '13')."""
    day = f"{PARTITION_KEYS[0]}={start:%Y-%m-%d}"
    if period >= timedelta(days=1):
        return day
    return f"{day}/{PARTITION_KEYS[1]}={start:%H}"


def manifest_path(schedule: ExportSchedule, start: datetime) -> Path:
    return Path(schedule.folder) / RUNS_FOLDER / partition(start, schedule.period) / "manifest.json"


def _files_of_period(
    schedule: ExportSchedule, start: datetime
) -> list[tuple[str, datetime, datetime, str]]:
    """(view, from, to, relative path) of each file the period's run writes."""
    period = schedule.period
    end = start + period
    out = []
    for view in schedule.views:
        column = exports.time_column(view)
        assert column is not None
        if column.whole_days and period < timedelta(days=1):
            if end.hour != 0:
                continue  # a day's rows are written by the day's last hour
            lo, hi, part = (
                end - timedelta(days=1),
                end,
                partition(end - timedelta(days=1), EVERY["daily"]),
            )
        else:
            lo, hi, part = start, end, partition(start, period)
        out.append((view, lo, hi, f"{view}/{part}/part.{schedule.fmt}"))
    return out


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _write_json(path: Path, doc: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_period(
    storage: Storage,
    schedule: ExportSchedule,
    start: datetime,
    *,
    timeout_s: float | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> dict[str, Any]:
    """Write (or rewrite) every file of the period starting at `start`, then its manifest;
    returns the manifest."""
    start = _floor(start, schedule.period)
    root = Path(schedule.folder)
    generated_at = clock()
    files = []
    for view, lo, hi, rel in _files_of_period(schedule, start):
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        result = exports.export_view(
            storage, view, schedule.fmt, target, lo, hi,
            overwrite=True, ordered=True, timeout_s=timeout_s, generated_at=generated_at,
        )  # fmt: skip
        column = exports.time_column(view)
        files.append(
            {
                "view": view,
                "path": rel,
                "rows": result.rows,
                "bytes": result.bytes,
                "sha256": _sha256(target),
                "from": _iso(lo),
                "to": _iso(hi),
                "time_column": column.name if column else None,
                "schema": exports.view_schema(storage, view),
            }
        )
    manifest = {
        "schedule": schedule.name,
        "format": schedule.fmt,
        "every": schedule.every,
        "period": {"from": _iso(start), "to": _iso(start + schedule.period)},
        "generated_at": _iso(generated_at),
        "inferledger_version": __version__,
        "rows": sum(f["rows"] for f in files),
        "files": files,
    }
    _write_json(manifest_path(schedule, start), manifest)
    return manifest


def run_due(
    storage: Storage,
    schedule: ExportSchedule,
    *,
    now: datetime | None = None,
    timeout_s: float | None = None,
) -> list[datetime]:
    """Write each completed period (of the last `catch_up`) that has no manifest yet, oldest
    first; returns the starts of the periods written."""
    now = now or datetime.now(UTC)
    done = []
    for start in completed_periods(schedule, now):
        if manifest_path(schedule, start).exists():
            continue
        run_period(storage, schedule, start, timeout_s=timeout_s, clock=lambda: now)
        done.append(start)
    return done


class ScheduledExports:
    """The server's scheduled exports: one APScheduler job per schedule, every TICK_S."""

    def __init__(
        self, storage: Storage, schedules: tuple[ExportSchedule, ...], timeout_s: float | None
    ) -> None:
        self.storage = storage
        self.schedules = schedules
        self.timeout_s = timeout_s

    def tick(self, schedule: ExportSchedule) -> list[datetime]:
        """One check of one schedule; a failure is logged and the period retried next tick."""
        try:
            written = run_due(self.storage, schedule, timeout_s=self.timeout_s)
        except (InferLedgerError, OSError) as exc:
            log.error("scheduled export %s failed (retried next tick): %s", schedule.name, exc)
            return []
        for start in written:
            log.info("scheduled export %s wrote %s", schedule.name, _iso(start))
        return written

    def schedule(self, scheduler: Any) -> None:
        """Add the jobs; the first tick runs at once (a restarted server catches up)."""
        for item in self.schedules:
            scheduler.add_job(
                self.tick,
                "interval",
                args=[item],
                seconds=TICK_S,
                id=f"export-{item.name}",
                next_run_time=datetime.now(UTC),
            )


def parse_timeout(raw: Any) -> float:
    """The `exports.timeout_s` setting: seconds, 1 to 86,400."""
    return _number(raw, 1, 86_400, "exports.timeout_s")


def parse_memory_limit(raw: Any) -> str:
    """The `exports.memory_limit` setting: a DuckDB size such as 512MB or 1GB."""
    text = str(raw).strip()
    if not re.fullmatch(r"\d+(\.\d+)?\s*(KB|MB|GB|KiB|MiB|GiB)", text):
        raise ValueError(f"expected a size such as 512MB or 1GB, got {raw!r}")
    return text
