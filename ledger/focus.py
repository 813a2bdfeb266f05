"""FOCUS 1.2 and 1.3 cost exports of the ledger (issue #14; docs/focus.md).

The rows come from sql/exports/focus_charges.sql (the ledger's spend of whole hours, idle policy
`separate`, as priced meters in exact decimals), focus_base.sql (the values both versions share)
and focus_1_2.sql or focus_1_3.sql (the FOCUS column names). They are streamed into the file by
DuckDB's COPY (Storage.copy_to): written to a temporary name and renamed when complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import pyarrow as pa

from inferledger import __version__
from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage

#: FOCUS versions we write, each with its projection file in sql/exports.
FOCUS_VERSIONS: dict[str, str] = {"1.2": "focus_1_2.sql", "1.3": "focus_1_3.sql"}

#: File formats: the COPY format of Storage.copy_to.
FOCUS_FORMATS = ("csv", "parquet")

#: The idle policy of every FOCUS export: idle is its own charge (docs/cost-model.md).
FOCUS_IDLE_POLICY = "separate"

#: Date/time columns: typed in Parquet, 'YYYY-MM-DDTHH:mm:ssZ' text in CSV (FOCUS DateTimeFormat).
DATETIME_COLUMNS = (
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargePeriodEnd",
    "ChargePeriodStart",
)

#: The order rows are written in (deterministic for a given ledger).
_ORDER = (
    "ChargePeriodStart, x_Source, ResourceId, SkuPriceId, x_SplitOrigin, x_Stage, x_Environment, "
    "x_App, x_Team, x_Route, x_Workflow, x_Model, x_Service, x_Reviewer"
)


@dataclass(frozen=True)
class FocusExport:
    """What an export wrote."""

    path: Path
    version: str
    fmt: str
    rows: int
    start: datetime
    stop: datetime


def _sql_file(name: str) -> str:
    return resources.files("sql").joinpath("exports", name).read_text("utf-8")


def focus_sql(version: str, *, text_datetimes: bool = False) -> str:
    """The query of a FOCUS export of the hours [$start, $stop), its rows in write order.
    `text_datetimes`: date/time columns as ISO 8601 text with a Z (for CSV)."""
    if version not in FOCUS_VERSIONS:
        raise BadInputError(
            f"unknown FOCUS version {version!r} (one of {', '.join(FOCUS_VERSIONS)})"
        )
    query = (
        f"with charges as ({_sql_file('focus_charges.sql')}),\n"
        f"base as ({_sql_file('focus_base.sql')})\n"
        f"{_sql_file(FOCUS_VERSIONS[version])}"
    )
    outer = "*"
    if text_datetimes:
        replaced = ", ".join(
            f"strftime(timezone('UTC', {c}), '%Y-%m-%dT%H:%M:%SZ') as {c}" for c in DATETIME_COLUMNS
        )
        outer = f"* replace ({replaced})"
    return f"select {outer} from ({query}) order by {_ORDER}"


def _window(start: datetime, stop: datetime) -> dict[str, datetime]:
    for name, value in (("--from", start), ("--to", stop)):
        if value.tzinfo is None:
            raise BadInputError(f"{name} must carry a time zone (UTC is assumed by the CLI)")
    if stop <= start:
        raise BadInputError(f"--to ({stop.isoformat()}) must be after --from ({start.isoformat()})")
    return {"start": start.astimezone(UTC), "stop": stop.astimezone(UTC)}


def focus_table(storage: Storage, version: str, start: datetime, stop: datetime) -> pa.Table:
    """The export's rows as an Arrow table (typed: decimals, timestamps), for tests and the UI."""
    return storage.query_arrow(focus_sql(version), _window(start, stop))


def export_focus(
    storage: Storage,
    version: str,
    start: datetime,
    stop: datetime,
    path: str | Path,
    fmt: str = "csv",
) -> FocusExport:
    """Write the FOCUS `version` export of the hours starting in [start, stop) to `path` as CSV
    or Parquet; the file appears only when complete (a failure leaves no file)."""
    if fmt not in FOCUS_FORMATS:
        raise BadInputError(f"unknown format {fmt!r} (one of {', '.join(FOCUS_FORMATS)})")
    params = _window(start, stop)
    sql = focus_sql(version, text_datetimes=fmt == "csv")
    target = Path(path).expanduser().absolute()
    if not target.parent.is_dir():
        raise BadInputError(f"folder {str(target.parent)!r} does not exist")
    if target.is_dir():
        raise BadInputError(f"{str(target)!r} is a folder, not a file")
    metadata = {
        "focus_version": version,
        "generator": f"inferledger {__version__}",
        "idle_policy": FOCUS_IDLE_POLICY,
        "charge_period_grain": "hour",
        "from": params["start"].isoformat(),
        "to": params["stop"].isoformat(),
    }
    rows = storage.copy_to(
        sql, params, target, fmt, metadata=metadata if fmt == "parquet" else None, timeout_s=3600
    )
    return FocusExport(target, version, fmt, rows, params["start"], params["stop"])
