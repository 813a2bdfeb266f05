"""Exports of the analyst views (issue #14): ledger/exports.py on a real ledger, the
`inferledger export` command as a subprocess, and GET /download/views/<name> on a real server."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
import requests

from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage
from inferledger.core.times import parse_utc
from inferledger.ledger_fixtures import S, SpanSet, store_scrapes
from ledger import exports, users
from ledger.catalog import ANALYST_VIEWS
from ledger.focus import focus_table
from models.deployment_config import Deployment
from tests.conftest import ROOT

#: The fixture ledger: 30 requests, one every 340 s from 22:05 UTC, over three hours that
#: cross midnight (22:00, 23:00 and 00:00), on one replica scraped every minute.
BASE = datetime(2026, 11, 20, 22, 0, tzinfo=UTC)
REQUESTS = 30
EVERY_S = 340
FROM = BASE + timedelta(hours=1)  # 23:00
TO = BASE + timedelta(hours=2, minutes=30)  # 00:30 the next day
ISO_FROM, ISO_TO = "2026-11-20T23:00:00Z", "2026-11-21T00:30:00Z"
DEPLOYMENT = Deployment("dep", model="m", gpu_type="H200", gpus_per_replica=1)


def build_ledger(path: Path) -> Path:
    """A real ledger through the real ingest path and a full refresh."""
    from ledger.deployments import sync_configured
    from ledger.marts import Refresher
    from ledger.price_book import set_price

    base_ns = int(BASE.timestamp()) * S
    with Storage(path, read_timeout_s=60) as st:
        set_price(st, "gpu", "H200", "gpu_hour", 3.60, "2026-01-01", changed_by="fixture",
                  source="cli")  # fmt: skip
        sync_configured(st, [DEPLOYMENT])
        store_scrapes(st, "r0", "dep", base_ns, [60 * i for i in range(181)])
        spans = SpanSet(base_ns)
        for i in range(REQUESTS):
            start = 300 + i * EVERY_S
            trace = spans.new_trace()
            root = spans.root(trace, start - 0.5, start + 20.5, app=f"a{i % 3}", route="/r",
                              team="t")  # fmt: skip
            call = spans.llm_call(trace, root, start - 0.1, start + 20.1, model="m",
                                  input_tokens=100 + i, output_tokens=10 + i)  # fmt: skip
            spans.engine(trace, call, start, start + 20, replica="r0", queue_s=0.0, ttft_s=1,
                         prompt_tokens=100 + i, completion_tokens=10 + i)  # fmt: skip
        spans.store(st)
        Refresher(st).refresh(full=True)
    return path


@pytest.fixture(scope="module")
def ledger_db(tmp_path_factory) -> Path:
    return build_ledger(tmp_path_factory.mktemp("exports-ledger") / "ledger.duckdb")


@pytest.fixture
def db_copy(ledger_db: Path, tmp_path: Path) -> Path:
    (tmp_path / "db").mkdir()
    copy = tmp_path / "db" / "ledger.duckdb"
    shutil.copy(ledger_db, copy)
    return copy


@pytest.fixture
def st(db_copy: Path):
    with Storage(db_copy, read_timeout_s=60) as storage:
        yield storage


def _expected(st: Storage) -> pl.DataFrame:
    return st.query(
        "select * from request_costs where start_time >= ? and start_time < ? order by span_id",
        [FROM, TO],
    )


# ---------------------------------------------------------------- ledger/exports.py
def test_every_time_column_is_a_time_of_its_view(st: Storage) -> None:
    for view in ANALYST_VIEWS:
        column = exports.time_column(view)
        if column is None:
            continue
        kinds = {c["name"]: c["type"] for c in exports.view_schema(st, view)}
        assert kinds.get(column.name) in ("DATE", "TIMESTAMP WITH TIME ZONE"), (view, column)
        assert column.whole_days == (column.name in ("day", "week")), view
    assert exports.time_column("request_costs") == exports.TimeColumn("start_time", False)
    assert exports.time_column("prices_effective") is None


@pytest.mark.parametrize("fmt", exports.FORMATS)
def test_round_trip_equals_the_view(st: Storage, tmp_path: Path, fmt: str) -> None:
    want = _expected(st)
    assert 0 < want.height < REQUESTS  # the range cuts the ledger on both sides
    out = tmp_path / f"rc.{fmt}"
    result = exports.export_view(st, "request_costs", fmt, out, FROM, TO)
    assert result.rows == want.height and result.bytes == out.stat().st_size > 0
    if fmt == "parquet":
        got = pl.read_parquet(out)
        meta = pq.read_metadata(out).metadata
        assert meta[b"inferledger.view"] == b"request_costs"
        assert meta[b"inferledger.from"] == ISO_FROM.encode()
        assert meta[b"inferledger.to"] == ISO_TO.encode()
        assert meta[b"inferledger.time_column"] == b"start_time"
    elif fmt == "csv":
        got = pl.read_csv(out, infer_schema_length=None)
    else:
        first = json.loads(out.read_text().splitlines()[0])
        assert list(first) == want.columns  # the file keeps the view's column order
        got = pl.read_ndjson(out).select(want.columns)
    assert got.columns == want.columns
    got = got.sort("span_id")
    assert got["span_id"].to_list() == want["span_id"].to_list()
    assert got["input_tokens"].to_list() == want["input_tokens"].to_list()
    assert got["start_ns"].to_list() == want["start_ns"].to_list()
    for a, b in zip(got["cost"].to_list(), want["cost"].to_list(), strict=True):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15)
    if fmt == "parquet":
        assert got["start_time"].to_list() == want["start_time"].to_list()
    else:  # text with its offset, e.g. "2026-11-20 23:02:39.9+00"
        parsed = [datetime.fromisoformat(v) for v in got["start_time"].to_list()]
        assert parsed == want["start_time"].to_list()
        assert all(FROM <= t < TO for t in parsed)


def test_csv_comments_follow_the_dashboard_form(st: Storage, tmp_path: Path) -> None:
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    out = tmp_path / "rc.csv"
    result = exports.export_view(st, "request_costs", "csv", out, FROM, TO, comments=True)
    lines = out.read_text().splitlines()
    assert lines[0] == "# InferLedger export: request_costs"
    assert lines[1] == "# range: 2026-11-20 23:00 to 2026-11-21 00:30 UTC (start_time)"
    assert lines[2] == f"# rows: {result.rows}"
    assert lines[3].startswith("# generated: ")
    assert lines[4].startswith("trace_id,span_id,")
    assert pl.read_csv(out, comment_prefix="#").height == result.rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rc.csv"]


def test_every_view_exports_whole_or_by_range(st: Storage, tmp_path: Path) -> None:
    for view in ANALYST_VIEWS:
        column = exports.time_column(view)
        bounds = (FROM, TO) if column else (None, None)
        out = tmp_path / f"{view}.parquet"
        result = exports.export_view(st, view, "parquet", out, *bounds)
        assert pq.read_metadata(out).num_rows == result.rows, view
    spend = pl.read_parquet(tmp_path / "spend_hourly.parquet")
    assert spend.height > 0 and set(spend["hour"].dt.hour().to_list()) == {23, 0}


def test_a_date_column_counts_each_day_the_range_touches(st: Storage) -> None:
    sql, params = exports.view_select(
        st,
        "outcome_economics",
        datetime(2026, 11, 20, 12, tzinfo=UTC),
        datetime(2026, 11, 22, tzinfo=UTC),
    )
    assert sql == 'SELECT * FROM "outcome_economics" WHERE "day" >= ? AND "day" < ?'
    assert params == [date(2026, 11, 20), date(2026, 11, 22)]
    sql, params = exports.view_select(st, "spend_hourly", None, TO)
    assert sql.endswith('WHERE "hour" < ?') and params == [TO]


def test_bad_requests_are_refused_before_anything_is_written(st: Storage, tmp_path: Path) -> None:
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    cases = [
        (("nope", "csv", tmp_path / "a.csv", FROM, TO), "unknown view 'nope'"),
        (("request_costs", "xlsx", tmp_path / "a.xlsx", FROM, TO), "unknown format 'xlsx'"),
        (("request_costs", "csv", tmp_path / "a.csv", TO, FROM), "the range is empty"),
        (("request_costs", "csv", tmp_path / "a.csv", FROM, FROM), "the range is empty"),
        (("prices_effective", "csv", tmp_path / "a.csv", FROM, TO), "has no time column"),
        (("request_costs", "csv", tmp_path / "no" / "a.csv", FROM, TO), "does not exist"),
        (("request_costs", "csv", tmp_path, FROM, TO), "is a folder"),
    ]
    for args, message in cases:
        with pytest.raises(BadInputError, match=re.escape(message)):
            exports.export_view(st, *args)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(BadInputError, match="not an ISO 8601"):
        parse_utc("yesterday", "--from")


# ---------------------------------------------------------------- the CLI, as a subprocess
def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")}
    return subprocess.run(
        [sys.executable, "-m", "inferledger.cli", "export", *map(str, args)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )  # fmt: skip


@pytest.mark.slow
def test_cli_exports_and_refuses_bad_input_in_one_line(db_copy: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "rc.parquet"
    ok = _cli("request_costs", "--format", "parquet", "--from", ISO_FROM, "--to", ISO_TO,
              "--out", out, "--db", db_copy)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    with Storage(db_copy) as st:
        want = _expected(st)
    assert re.fullmatch(
        rf"wrote {want.height} rows of request_costs \(parquet, [\d.,]+ [KM]?i?B\) to {out} "
        r"in [\d.]+ s\n",
        ok.stdout,
    )
    assert pl.read_parquet(out).sort("span_id")["span_id"].to_list() == want["span_id"].to_list()

    listed = _cli("--list")
    assert listed.returncode == 0 and "request_costs" in listed.stdout
    assert "prices_effective" in listed.stdout and "exported whole" in listed.stdout

    common = ("--db", db_copy)
    bad = [
        (("nope", "--from", ISO_FROM, "--to", ISO_TO, "--out", out_dir / "a.csv"), "unknown view"),
        (("request_costs", "--format", "xml", "--out", out_dir / "a.xml"), "unknown format"),
        (("request_costs", "--out", out_dir / "a.txt"), "give --format"),
        (("request_costs", "--from", "last tuesday", "--out", out_dir / "a.csv"), "--from: not"),
        (("request_costs", "--from", ISO_TO, "--to", ISO_FROM, "--out", out_dir / "a.csv"),
         "the range is empty"),
        (("request_costs", "--out", out_dir / "missing" / "a.csv"), "does not exist"),
        (("request_costs", "--out", out), "exists"),
        (("scrape_health", "--from", ISO_FROM, "--out", out_dir / "a.csv"), "no time column"),
        (("request_costs", "--out", out_dir / "a.csv", "--db", tmp_path / "none.duckdb"),
         "no database"),
    ]  # fmt: skip
    for args, message in bad:
        run = _cli(*args, *common) if "--db" not in args else _cli(*args)
        assert run.returncode == 2, (args, run.stdout, run.stderr)
        assert run.stderr.count("\n") == 1 and message in run.stderr, (args, run.stderr)
        assert run.stderr.startswith("inferledger: ")
    assert sorted(p.name for p in out_dir.iterdir()) == ["rc.parquet"]

    # A database another process holds (a running server): one line, nothing written.
    with Storage(db_copy):
        held = _cli("request_costs", "--out", out_dir / "b.csv", *common)
    assert held.returncode == 2 and "in use by another process" in held.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == ["rc.parquet"]


# ---------------------------------------------------------------- the download route
PASSWORDS = {"ada": "ada-analyst-password", "vic": "vic-viewer-password"}


def _signed_in(url: str, name: str) -> requests.Session:
    session = requests.Session()
    page = session.get(url + "/login", timeout=10).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf, page
    resp = session.post(
        url + "/login",
        data={"name": name, "password": PASSWORDS[name], "csrf": csrf.group(1), "next": "/"},
        allow_redirects=False,
        timeout=10,
    )
    assert resp.status_code in (302, 303), resp.text
    return session


@pytest.mark.slow
def test_download_route_for_analysts_only(db_copy: Path, live_factory, tmp_path: Path) -> None:
    # the fixture's deployment configured, as it was when the ledger was built: a start
    # without it would forget its GPU type, and the replica-hours would have no price
    live = live_factory(auth__enabled=True, db=str(db_copy), deployments=(DEPLOYMENT,))
    storage = live.service.storage
    users.add_user(storage, "ada", "analyst", PASSWORDS["ada"], by="test")
    users.add_user(storage, "vic", "viewer", PASSWORDS["vic"], by="test")
    want = _expected(storage)
    path = f"/download/views/request_costs?from={ISO_FROM}&to={ISO_TO}&format=parquet"

    ada = _signed_in(live.url, "ada")
    resp = ada.get(live.url + path, timeout=60)
    assert resp.status_code == 200, resp.text
    assert resp.headers["Content-Type"] == "application/vnd.apache.parquet"
    assert resp.headers["Cache-Control"] == "no-store"
    assert resp.headers["Content-Disposition"] == (
        "attachment; filename=inferledger-request_costs_2026-11-20T2300_2026-11-21T0030.parquet"
    )
    got = pl.read_parquet(resp.content).sort("span_id")
    assert got["span_id"].to_list() == want["span_id"].to_list()

    csv = ada.get(live.url + path.replace("parquet", "jsonl"), timeout=60)
    assert csv.status_code == 200 and len(csv.text.splitlines()) == want.height

    for query, status, message in (
        ("?format=xlsx", 400, "unknown format"),
        (f"?from={ISO_TO}&to={ISO_FROM}", 400, "the range is empty"),
        ("?from=soon", 400, "not an ISO 8601"),
    ):
        bad = ada.get(live.url + "/download/views/request_costs" + query, timeout=10)
        assert bad.status_code == status and message in bad.text, (query, bad.text)
    unknown = ada.get(live.url + "/download/views/secrets?format=csv", timeout=10)
    assert unknown.status_code == 404 and "unknown view" in unknown.text

    # the FOCUS export of the same hours, while the server holds the database
    focus = f"/download/focus?version=1.3&from={ISO_FROM}&to={ISO_TO}&format=parquet"
    resp = ada.get(live.url + focus, timeout=60)
    assert resp.status_code == 200, resp.text
    assert resp.headers["Content-Disposition"] == (
        "attachment; filename=inferledger-focus-1.3_2026-11-20T2300_2026-11-21T0030.parquet"
    )
    charges = pl.read_parquet(resp.content)
    want_focus = focus_table(storage, "1.3", FROM, TO)
    assert charges.height == want_focus.num_rows > 0
    assert float(charges["BilledCost"].sum()) == pytest.approx(
        float(pl.from_arrow(want_focus)["BilledCost"].sum()), abs=1e-9
    )
    for query, message in (
        ("?version=9&from=2026-11-20&to=2026-11-21", "unknown FOCUS version"),
        ("?version=1.2&format=jsonl&from=2026-11-20&to=2026-11-21", "unknown format"),
        ("?version=1.2", "give from and to"),
        ("?from=2026-11-21&to=2026-11-20", "must be after"),
    ):
        bad = ada.get(live.url + "/download/focus" + query, timeout=10)
        assert bad.status_code == 400 and message in bad.text, (query, bad.text)

    # every view as one DuckDB file, read in one transaction while the server runs
    snap = ada.get(live.url + "/download/snapshot", timeout=120)
    assert snap.status_code == 200, snap.text
    assert snap.headers["Content-Disposition"].startswith("attachment; filename=inferledger-views_")
    (tmp_path / "views.duckdb").write_bytes(snap.content)
    with duckdb.connect(str(tmp_path / "views.duckdb"), read_only=True) as con:
        tables = {r[0] for r in con.execute("select table_name from duckdb_tables()").fetchall()}
        assert set(ANALYST_VIEWS) <= tables
        got_rows = con.execute("select count(*) from request_costs").fetchone()
    assert got_rows == (storage.scalar("select count(*) from request_costs"),)
    bad = ada.get(live.url + "/download/snapshot?views=all", timeout=10)
    assert bad.status_code == 400 and "no parameters" in bad.text

    vic = _signed_in(live.url, "vic")
    refused = vic.get(live.url + path, timeout=10)
    assert refused.status_code == 403 and "analyst role" in refused.text
    assert vic.get(live.url + focus, timeout=10).status_code == 403
    assert vic.get(live.url + "/download/snapshot", timeout=10).status_code == 403

    anonymous = requests.get(live.url + path, allow_redirects=False, timeout=10)
    assert anonymous.status_code == 302
    assert anonymous.headers["Location"].startswith("/login?next=%2Fdownload%2Fviews%2F")


def test_an_export_and_the_api_select_the_same_rows(st: Storage, tmp_path: Path) -> None:
    from ledger.catalog import load_catalog, page_statement

    start, end = FROM - timedelta(days=1, minutes=30), TO
    for view in exports.dated_views():
        column = exports.time_column(view)
        assert column is not None
        kinds = {c["name"]: c["type"] for c in exports.view_schema(st, view)}
        stmt = page_statement(load_catalog().view(view), kinds[column.name], start=start,
                              end=end, limit=10**9)  # fmt: skip
        out = tmp_path / f"{view}.parquet"
        assert exports.export_view(st, view, "parquet", out, start, end).rows == len(
            st.select(stmt)
        ), view


def test_a_copy_that_fails_or_times_out_leaves_no_file(st: Storage, tmp_path: Path) -> None:
    from inferledger.core.errors import QueryError, QueryTimeoutError, StorageError

    out = tmp_path / "out"
    out.mkdir()
    failing = (
        "select case when i = 300000 then error('boom') else i end as i from range(400000) t(i)"
    )
    with pytest.raises(QueryError, match="boom"):
        st.copy_to(failing, None, out / "a.parquet", "parquet")
    slow = "select count(*) from range(100000000) a, range(100000000) b"
    with pytest.raises(QueryTimeoutError):
        st.copy_to(slow, None, out / "b.csv", "csv", timeout_s=0.5)
    with pytest.raises(StorageError, match="cannot copy to"):
        st.copy_to("select 1", None, Path("relative.csv"), "csv")
    with pytest.raises(StorageError, match="cannot copy to"):
        st.copy_to("select 1", None, out / "c.xml", "xml")
    assert list(out.iterdir()) == []
    assert st.copy_to("select ? as x", [7], out / "d.jsonl", "jsonl") == 1
    assert (out / "d.jsonl").read_text() == '{"x":7}\n'
