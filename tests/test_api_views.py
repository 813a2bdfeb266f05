"""GET /api/v1/views, /api/v1/views/NAME and /api/v1/openapi.json on a real server: roles,
pages that add up to the whole view, every format, every bad parameter, the OpenAPI document."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pyarrow.parquet as pq
import pytest
import requests

from app.api_views import encode_cursor
from ledger import api_tokens, users
from ledger.catalog import ANALYST_VIEWS

AT = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
HOURS = 30
#: spend_hourly has one row per mart row and idle policy (separate, usage, even, configured).
POLICIES = 4


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """A real server with sign-in on, an analyst, an admin and a viewer with a token each, and
    HOURS hours of spend (two teams and an unshared idle row, NULL app, per hour) in
    mart_spend_hourly."""
    from inferledger.core.net import free_port
    from inferledger.server import serve_in_thread
    from inferledger.settings import load_settings

    folder = tmp_path_factory.mktemp("api-views")
    settings = load_settings(env={}).replace(
        port=free_port(), db=str(folder / "api.duckdb"), auth__enabled=True
    )
    svc, thread, url = serve_in_thread(settings)
    storage = svc.storage
    tokens = {}
    for name, role in (("ana", "analyst"), ("adm", "admin"), ("vic", "viewer")):
        users.add_user(storage, name, role, f"a-long-password-{name}", by="test")
        tokens[name] = api_tokens.create_token(storage, name, "test", by="test")
    storage.write(
        lambda tx: tx.execute(
            "insert into mart_spend_hourly (hour, environment, app, team, route, workflow, model,"
            " deployment, stage, requests, input_tokens, output_tokens, cost_separate,"
            " cost_usage, cost_even, cost_configured)"
            " select h, 'prod', 'chat', t, '/c', null, 'm', 'd1', 'decode', 1, 10, 5,"
            " 1, 1.5, 2, 2.5 from range($s::timestamptz, $e::timestamptz, interval 1 hour) r(h),"
            " (values ('a'), ('b')) v(t)"
            " union all select h, 'prod', null, null, null, null, 'm', 'd1', 'idle', 0, 0, 0,"
            " 0.5, 0, 0, 0 from range($s::timestamptz, $e::timestamptz, interval 1 hour) r(h)",
            {"s": AT - timedelta(hours=HOURS), "e": AT},
        )
    )
    yield url, storage, tokens
    svc.request_stop()
    thread.join(30)


def _get(url: str, path: str, token: str | None, **params: str) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(f"{url}{path}", headers=headers, params=params, timeout=30)


def test_catalog_json_for_analysts_and_admins_not_viewers(api) -> None:
    url, _storage, tokens = api
    for who in ("ana", "adm"):
        resp = _get(url, "/api/v1/views", tokens[who])
        assert resp.status_code == 200, resp.text
        views = resp.json()["views"]
        assert [v["name"] for v in views] == list(ANALYST_VIEWS)
        costs = next(v for v in views if v["name"] == "request_costs")
        assert costs["time_column"] == "start_time" and costs["grain"].startswith("one row per")
        cost = next(c for c in costs["columns"] if c["name"] == "cost")
        assert cost == {"name": "cost", "type": "DOUBLE", "unit": "currency",
                        "meaning": cost["meaning"]}  # fmt: skip
        assert costs["examples"] and "from request_costs" in costs["examples"][0]["sql"]
    extra = _get(url, "/api/v1/views", tokens["ana"], limit="5")
    assert extra.status_code == 400
    assert extra.json()["error"] == "unknown parameter 'limit': this path takes none"
    viewer = _get(url, "/api/v1/views", tokens["vic"])
    assert viewer.status_code == 403
    assert "analyst role" in viewer.json()["error"] and "viewer" in viewer.json()["error"]
    page = _get(url, "/api/v1/views/spend_hourly", tokens["vic"])
    assert page.status_code == 403
    assert _get(url, "/api/v1/views/spend_hourly", None).status_code == 401


def test_pages_add_up_to_the_view_in_key_order(api) -> None:
    url, storage, tokens = api
    start, end = AT - timedelta(hours=20), AT - timedelta(hours=5)  # 15 hours
    rows, link, pages = [], None, 0
    params = {"from": start.isoformat(), "to": end.isoformat(), "limit": "7"}
    resp = _get(url, "/api/v1/views/spend_hourly", tokens["ana"], **params)
    while True:
        assert resp.status_code == 200, resp.text
        body = resp.json()
        pages += 1
        rows += body["rows"]
        assert body["count"] == len(body["rows"]) <= 7
        if body["next"] is None:
            assert "Link" not in resp.headers
            break
        assert resp.headers["Link"] == f'<{body["next"]}>; rel="next"'
        link = body["next"]
        resp = requests.get(link, headers={"Authorization": f"Bearer {tokens['ana']}"}, timeout=30)
    expected = storage.fetchall(
        "select hour, idle_policy, team, cost from spend_hourly where hour >= $1 and hour < $2"
        " order by hour, idle_policy, environment, app nulls first, team nulls first",
        [start, end],
    )
    assert len(rows) == len(expected) == 15 * 3 * POLICIES  # two teams and the idle row
    assert pages == -(-len(expected) // 7)
    got = [(r["hour"], r["idle_policy"], r["team"], r["cost"]) for r in rows]
    want = [(h.astimezone(UTC).isoformat(), p, t, c) for h, p, t, c in expected]
    assert [g[:3] for g in got] == [
        (datetime.fromisoformat(w[0]).isoformat(), *w[1:3]) for w in want
    ]
    assert [g[3] for g in got] == pytest.approx([w[3] for w in want])
    assert datetime.fromisoformat(rows[0]["hour"]) == start
    # the last link kept the query: from, to, limit, format and an opaque cursor
    query = parse_qs(urlsplit(link).query)
    assert set(query) == {"from", "to", "limit", "format", "cursor"}


def test_formats(api) -> None:
    url, _storage, tokens = api
    params = {"from": (AT - timedelta(hours=3)).isoformat(), "limit": "10"}
    path = "/api/v1/views/spend_hourly"
    csv_resp = _get(url, path, tokens["ana"], format="csv", **params)
    assert csv_resp.status_code == 200 and csv_resp.headers["Content-Type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(csv_resp.text)))
    assert len(table) == 10 and table[0]["workflow"] == ""  # NULL is an empty field
    assert 'rel="next"' in csv_resp.headers["Link"] and csv_resp.headers["X-Row-Count"] == "10"
    jsonl = _get(url, path, tokens["ana"], format="jsonl", **params)
    lines = [json.loads(line) for line in jsonl.text.splitlines()]
    assert len(lines) == 10 and lines[0]["hour"] == table[0]["hour"]
    parquet = _get(url, path, tokens["ana"], format="parquet", **params)
    assert parquet.headers["Content-Type"] == "application/vnd.apache.parquet"
    pt = pq.read_table(io.BytesIO(parquet.content))
    assert pt.num_rows == 10 and "cost" in pt.column_names
    assert pt.column("cost").to_pylist() == pytest.approx([float(r["cost"]) for r in table])
    head = requests.head(f"{url}{path}", headers={"Authorization": f"Bearer {tokens['ana']}"},
                         timeout=30)  # fmt: skip
    assert head.status_code == 200 and head.content == b""


def test_every_view_answers_in_every_format(api) -> None:
    url, _storage, tokens = api
    for name in ANALYST_VIEWS:
        for fmt in ("json", "csv", "jsonl", "parquet"):
            resp = _get(url, f"/api/v1/views/{name}", tokens["adm"], format=fmt, limit="5")
            assert resp.status_code == 200, (name, fmt, resp.text)


@pytest.mark.parametrize(
    ("path", "params", "status", "message"),
    [
        ("spend_hourly", {"team": "a"}, 400, "unknown parameter 'team'"),
        ("spend_hourly", {"format": "xml"}, 400, "use one of json, csv, jsonl, parquet"),
        ("spend_hourly", {"limit": "0"}, 400, "between 1 and 50,000"),
        ("spend_hourly", {"limit": "50001"}, 400, "between 1 and 50,000"),
        ("spend_hourly", {"limit": "ten"}, 400, "not a whole number"),
        ("spend_hourly", {"from": "yesterday"}, 400, "not an ISO 8601 instant"),
        ("spend_hourly", {"from": "2026-11-20", "to": "2026-11-19"}, 400, "to must be after"),
        ("spend_hourly", {"cursor": "%%%"}, 400, "cursor is not one this API gave"),
        ("spend_hourly", {"cursor": "eyJ4IjogMX0"}, 400, "cursor is not one this API gave"),
        ("deployment_replicas", {"from": "2026-11-20"}, 400, "has no time column"),
        ("spend_hourly;drop table users", {}, 404, "no analyst view named"),
        ("stg_spans", {}, 404, "no analyst view named"),
    ],
)
def test_bad_parameters_get_one_clear_message(api, path, params, status, message) -> None:
    url, _storage, tokens = api
    resp = _get(url, f"/api/v1/views/{path}", tokens["ana"], **params)
    assert resp.status_code == status, resp.text
    assert message in resp.json()["error"]
    assert resp.headers["Cache-Control"] == "no-store"


def test_cursor_of_another_query_and_repeated_parameters(api) -> None:
    url, _storage, tokens = api
    first = _get(url, "/api/v1/views/spend_hourly", tokens["ana"], limit="3").json()
    cursor = parse_qs(urlsplit(first["next"]).query)["cursor"][0]
    other = _get(url, "/api/v1/views/spend_daily", tokens["ana"], cursor=cursor)
    assert other.status_code == 400 and "another query" in other.json()["error"]
    shifted = _get(url, "/api/v1/views/spend_hourly", tokens["ana"], cursor=cursor,
                   **{"from": AT.isoformat()})  # fmt: skip
    assert shifted.status_code == 400
    forged = encode_cursor("spend_hourly", None, None, ["not a time", *[None] * 9])
    wrong_type = _get(url, "/api/v1/views/spend_hourly", tokens["ana"], cursor=forged)
    assert wrong_type.status_code == 400 and "cursor is not one" in wrong_type.json()["error"]
    short = encode_cursor("spend_hourly", None, None, [None])
    assert _get(url, "/api/v1/views/spend_hourly", tokens["ana"], cursor=short).status_code == 400
    auth = {"Authorization": f"Bearer {tokens['ana']}"}
    twice = requests.get(f"{url}/api/v1/views/spend_hourly?limit=1&limit=2", headers=auth,
                         timeout=30)  # fmt: skip
    assert twice.status_code == 400 and twice.json()["error"] == "give limit once"
    post = requests.post(f"{url}/api/v1/views/spend_hourly", headers=auth, timeout=30)
    assert post.status_code == 405 and post.headers["Allow"] == "GET, HEAD"


def test_date_time_column_takes_whole_days(api) -> None:
    url, _storage, tokens = api
    resp = _get(url, "/api/v1/views/outcome_economics", tokens["ana"],
                **{"from": "2026-11-01T00:00:00Z", "to": "2026-11-02T06:00:00+01:00"})  # fmt: skip
    assert resp.status_code == 200 and resp.json()["time_column"] == "day"


def _example(schema: dict) -> str:
    if "enum" in schema:
        return str(schema["enum"][-1])
    if schema.get("format") == "date-time":
        return (AT - timedelta(hours=2)).isoformat()
    if schema.get("type") == "integer":
        return str(schema.get("default", 1))
    return "x"


def test_openapi_document_is_valid_and_every_parameter_is_accepted(api) -> None:
    from openapi_spec_validator import validate

    url, _storage, tokens = api
    resp = requests.get(f"{url}/api/v1/openapi.json", timeout=30)  # no token needed
    assert resp.status_code == 200
    doc = json.loads(resp.text)
    validate(doc)  # OpenAPI 3.1 (openapi-spec-validator)
    assert doc["openapi"] == "3.1.0"
    assert {"/api/v1/budgets", "/api/v1/views", "/api/v1/views/{name}",
            "/api/v1/openapi.json"} <= set(doc["paths"])  # fmt: skip
    params = doc["paths"]["/api/v1/views/{name}"]["get"]["parameters"]
    name = next(p for p in params if p["name"] == "name")
    assert name["schema"]["enum"] == list(ANALYST_VIEWS)
    for path, item in doc["paths"].items():
        query = [p for p in item["get"].get("parameters", []) if p["in"] == "query"]
        for p in query:
            if p["name"] == "cursor":
                continue  # opaque: only one the API gave is accepted (checked above)
            concrete = path.replace("{name}", "spend_hourly")
            got = _get(url, concrete, tokens["adm"], **{p["name"]: _example(p["schema"])})
            assert got.status_code != 400, (path, p["name"], got.text)
            assert got.status_code in (200, 404), (path, p["name"], got.text)
    # the cursor too: the one the API gives back is accepted
    first = _get(url, "/api/v1/views/spend_hourly", tokens["adm"], limit="2").json()
    assert requests.get(first["next"], headers={"Authorization": f"Bearer {tokens['adm']}"},
                        timeout=30).status_code == 200  # fmt: skip
