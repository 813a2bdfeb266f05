"""Scheduled exports (issue #14): the exports.schedules setting, runs of completed periods to
date partitions with a manifest, idempotent re-runs, bounded catch-up, and the server's job."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from inferledger.core.errors import SettingsError
from inferledger.core.storage import Storage
from inferledger.settings import load_settings
from ledger import exports
from ledger.scheduled_exports import (
    PARTITION_KEYS,
    ExportSchedule,
    completed_periods,
    manifest_path,
    parse_schedules,
    run_due,
    run_period,
)
from tests.test_view_exports import BASE, build_ledger

#: The fixture ledger's hours are 22:00, 23:00 (2026-11-20) and 00:00 (2026-11-21).
NOW = BASE + timedelta(hours=3, minutes=20)  # 01:20: 22:00, 23:00 and 00:00 have ended


@pytest.fixture(scope="module")
def ledger_db(tmp_path_factory) -> Path:
    return build_ledger(tmp_path_factory.mktemp("scheduled-ledger") / "ledger.duckdb")


@pytest.fixture
def st(ledger_db: Path, tmp_path: Path):
    copy = tmp_path / "ledger.duckdb"
    shutil.copy(ledger_db, copy)
    with Storage(copy, read_timeout_s=60) as storage:
        yield storage


def _schedule(folder: Path, **kw: object) -> ExportSchedule:
    raw = {"name": "lake", "views": ["request_costs", "spend_hourly", "spend_daily"],
           "format": "parquet", "every": "hourly", "folder": str(folder), "delay_s": 0,
           "catch_up": 2, **kw}  # fmt: skip
    return parse_schedules([raw])[0]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- the setting
def test_setting_from_yaml_and_env(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "exports:\n  schedules:\n    - name: lake\n      views: all\n      every: daily\n"
        f"      folder: {tmp_path}/x\n"
    )
    (lake,) = load_settings(config, env={})["exports.schedules"]
    want = ExportSchedule(
        "lake", exports.dated_views(), "parquet", "daily", f"{tmp_path}/x", 900, 7
    )
    assert lake == want
    assert "prices_effective" not in lake.views and "request_costs" in lake.views
    env = {"INFERLEDGER_EXPORTS_SCHEDULES": json.dumps(
        [{"name": "h", "views": "spend_hourly,latency_stages", "format": "csv",
          "every": "hourly", "folder": "/srv/x", "catch_up": 3}])}  # fmt: skip
    (h,) = load_settings(env=env)["exports.schedules"]
    assert (h.views, h.fmt, h.every, h.catch_up) == (
        ("spend_hourly", "latency_stages"), "csv", "hourly", 3)  # fmt: skip
    assert load_settings(env={})["exports.schedules"] == ()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "a", "every": "weekly", "folder": "/x"}, "every must be hourly or daily"),
        ({"name": "a", "every": "daily"}, "folder is required"),
        ({"name": "a", "every": "daily", "folder": "/x", "format": "xlsx"}, "format must be"),
        ({"name": "a", "every": "daily", "folder": "/x", "views": ["nope"]}, "unknown view"),
        ({"name": "a", "every": "daily", "folder": "/x", "views": ["prices_effective"]},
         "no time column"),
        ({"name": "a", "every": "daily", "folder": "/x", "when": 1}, "unknown field(s) when"),
        ({"name": "a b", "every": "daily", "folder": "/x"}, "name must be"),
        ({"name": "a", "every": "daily", "folder": "/x", "catch_up": 0}, "catch_up"),
    ],
)  # fmt: skip
def test_bad_schedules_are_one_clear_line(entry: dict, message: str) -> None:
    env = {"INFERLEDGER_EXPORTS_SCHEDULES": json.dumps([entry])}
    with pytest.raises(SettingsError, match=r"exports\.schedules") as err:
        load_settings(env=env)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_two_schedules_with_one_name_are_refused() -> None:
    entry = {"name": "a", "every": "daily", "folder": "/x"}
    with pytest.raises(ValueError, match="used twice"):
        parse_schedules([entry, entry])


def test_partition_keys_are_no_view_column(st: Storage) -> None:
    for view in exports.dated_views():
        names = {c["name"] for c in exports.view_schema(st, view)}
        assert not names & set(PARTITION_KEYS), view


def test_completed_periods_wait_for_the_delay() -> None:
    hourly = ExportSchedule("h", ("spend_hourly",), "csv", "hourly", "/x", 900, 3)
    at = datetime(2026, 11, 21, 1, 10, tzinfo=UTC)  # 00:55 after the delay: 00:00 not done
    assert completed_periods(hourly, at) == [
        datetime(2026, 11, 20, 21, tzinfo=UTC),
        datetime(2026, 11, 20, 22, tzinfo=UTC),
        datetime(2026, 11, 20, 23, tzinfo=UTC),
    ]
    daily = ExportSchedule("d", ("spend_daily",), "csv", "daily", "/x", 0, 2)
    assert completed_periods(daily, at) == [
        datetime(2026, 11, 19, tzinfo=UTC),
        datetime(2026, 11, 20, tzinfo=UTC),
    ]


# ---------------------------------------------------------------- runs
def test_two_periods_written_with_manifests(st: Storage, tmp_path: Path) -> None:
    folder = tmp_path / "lake"
    schedule = _schedule(folder)
    written = run_due(st, schedule, now=NOW)
    h23, h00 = datetime(2026, 11, 20, 23, tzinfo=UTC), datetime(2026, 11, 21, 0, tzinfo=UTC)
    assert written == [h23, h00]
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert files == [
        "_runs/date=2026-11-20/hour_utc=23/manifest.json",
        "_runs/date=2026-11-21/hour_utc=00/manifest.json",
        "request_costs/date=2026-11-20/hour_utc=23/part.parquet",
        "request_costs/date=2026-11-21/hour_utc=00/part.parquet",
        # the day's rows, written by the run of its last hour (23:00)
        "spend_daily/date=2026-11-20/part.parquet",
        "spend_hourly/date=2026-11-20/hour_utc=23/part.parquet",
        "spend_hourly/date=2026-11-21/hour_utc=00/part.parquet",
    ]
    manifest = json.loads(manifest_path(schedule, h23).read_text())
    assert manifest["schedule"] == "lake" and manifest["format"] == "parquet"
    assert manifest["every"] == "hourly"
    assert manifest["period"] == {"from": "2026-11-20T23:00:00Z", "to": "2026-11-21T00:00:00Z"}
    assert manifest["generated_at"] == "2026-11-21T01:20:00Z"
    assert manifest["inferledger_version"]
    by_view = {f["view"]: f for f in manifest["files"]}
    assert set(by_view) == {"request_costs", "spend_hourly", "spend_daily"}
    assert manifest["rows"] == sum(f["rows"] for f in manifest["files"])
    for item in manifest["files"]:
        path = folder / item["path"]
        assert item["sha256"] == _sha(path) and item["bytes"] == path.stat().st_size
        assert item["rows"] == pl.read_parquet(path).height
        assert [c["name"] for c in item["schema"]] == pl.read_parquet(path).columns
    rc = by_view["request_costs"]
    want = st.scalar(
        "select count(*) from request_costs where start_time >= ? and start_time < ?",
        [h23, h00],
    )
    assert rc["rows"] == want > 0 and rc["time_column"] == "start_time"
    assert (rc["from"], rc["to"]) == ("2026-11-20T23:00:00Z", "2026-11-21T00:00:00Z")
    daily = by_view["spend_daily"]
    assert (daily["from"], daily["to"]) == ("2026-11-20T00:00:00Z", "2026-11-21T00:00:00Z")
    assert daily["rows"] == st.scalar(
        "select count(*) from spend_daily where day = ?", [datetime(2026, 11, 20, tzinfo=UTC)]
    )
    # every request of the two hours, once, read back across the partitions
    both = pl.read_parquet(folder / "request_costs" / "**" / "*.parquet", hive_partitioning=True)
    assert both["hour"].dtype == pl.Datetime("us", "UTC")  # the view's column, not a folder's
    assert both["hour_utc"].to_list().count(23) == rc["rows"]
    assert both.height == st.scalar(
        "select count(*) from request_costs where start_time >= ? and start_time < ?",
        [h23, h00 + timedelta(hours=1)],
    )
    later = json.loads(manifest_path(schedule, h00).read_text())
    assert "spend_daily" not in {f["view"] for f in later["files"]}
    assert not any(p.name.endswith(".tmp") or p.name.startswith(".") for p in folder.rglob("*"))


def test_rerun_is_idempotent(st: Storage, tmp_path: Path) -> None:
    folder = tmp_path / "lake"
    schedule = _schedule(folder, format="csv")
    assert len(run_due(st, schedule, now=NOW)) == 2
    part = folder / "request_costs" / "date=2026-11-20" / "hour_utc=23" / "part.csv"
    before, inode = _sha(part), part.stat().st_ino
    assert run_due(st, schedule, now=NOW) == []  # the manifests say both are done
    h23 = datetime(2026, 11, 20, 23, tzinfo=UTC)
    manifest_path(schedule, h23).unlink()
    assert run_due(st, schedule, now=NOW) == [h23]  # a deleted manifest: written again
    assert _sha(part) == before and part.stat().st_ino != inode  # same rows, replaced whole
    again = run_period(st, schedule, h23, clock=lambda: NOW)
    first = json.loads(manifest_path(schedule, h23).read_text())
    assert again == first and again["files"][0]["sha256"] == before


def test_catch_up_after_downtime_is_bounded(st: Storage, tmp_path: Path) -> None:
    folder = tmp_path / "lake"
    schedule = _schedule(folder, catch_up=3, views=["spend_hourly"])
    first = run_due(st, schedule, now=NOW)
    assert first == [BASE, BASE + timedelta(hours=1), BASE + timedelta(hours=2)]
    # down for five hours: the last three completed hours are written, older ones are not
    later = NOW + timedelta(hours=5)
    caught = run_due(st, schedule, now=later)
    assert caught == [BASE + timedelta(hours=h) for h in (5, 6, 7)]
    assert not manifest_path(schedule, BASE + timedelta(hours=3)).exists()
    empty = json.loads(manifest_path(schedule, BASE + timedelta(hours=7)).read_text())
    assert empty["rows"] == 0 and empty["files"][0]["rows"] == 0  # no traffic: an empty part
    assert pl.read_parquet(folder / empty["files"][0]["path"]).columns == [
        c["name"] for c in exports.view_schema(st, "spend_hourly")
    ]


@pytest.mark.slow
def test_the_server_runs_its_schedules(live_factory, tmp_path: Path) -> None:
    folder = tmp_path / "lake"
    schedule = [{"name": "lake", "views": ["spend_hourly"], "format": "jsonl",
                 "every": "hourly", "folder": str(folder), "delay_s": 0,
                 "catch_up": 2}]  # fmt: skip
    live_factory(exports__schedules=schedule)
    runs = folder / "_runs"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(list(runs.rglob("manifest.json"))) < 2:
        time.sleep(0.2)
    manifests = sorted(runs.rglob("manifest.json"))
    assert len(manifests) == 2
    doc = json.loads(manifests[-1].read_text())
    assert doc["files"][0]["path"].startswith("spend_hourly/date=")
    end = datetime.fromisoformat(doc["period"]["to"])
    assert end <= datetime.now(UTC) < end + timedelta(hours=1, minutes=1)  # an hour may turn
