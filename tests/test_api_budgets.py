"""GET /api/v1/budgets on a real server: token auth, the JSON, errors; and the token store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import requests

from app.api import register_api
from inferledger.core.net import free_port
from ledger import api_tokens, budgets, users
from ledger.api_tokens import TokenError, TokenRefused
from models.alert_config import budget_from_mapping

AT = datetime(2026, 11, 20, 12, 30, tzinfo=UTC)


@pytest.fixture
def api(tmp_path):
    """A real server with sign-in on, the API registered (the same call the server makes; a
    no-op once inferledger/server.py makes it itself, so the requests below pass ?at=), an
    analyst and a viewer with a token each, and two budgets with spend."""
    from inferledger.server import serve_in_thread
    from inferledger.settings import load_settings

    settings = load_settings(env={}).replace(
        port=free_port(),
        db=str(tmp_path / "api.duckdb"),
        auth__enabled=True,
        auth__public_url="https://il.example.com",
    )
    svc, thread, url = serve_in_thread(
        settings,
        before_serving=lambda s: register_api(
            s.dash_app.server, s.storage, clock=lambda: AT, base_url="https://il.example.com"
        ),
    )
    storage = svc.storage
    users.add_user(storage, "ana", "analyst", "a-long-password-1", by="test")
    users.add_user(storage, "vic", "viewer", "a-long-password-2", by="test")
    tokens = {
        "ana": api_tokens.create_token(storage, "ana", "ci", by="test"),
        "vic": api_tokens.create_token(storage, "vic", "gateway", by="test"),
    }
    for name, scope, amount in (("team-a", {"team": "a"}, 100.0), ("all", {}, 10000.0)):
        budgets.save_budget(
            storage,
            budget_from_mapping(
                {"name": name, "amount": amount, "period": "monthly", "owner": "o",
                 "scope": scope, "timezone": "Europe/Paris"}
            ),
            by="test",
        )  # fmt: skip
    storage.write(
        lambda tx: tx.execute(
            "insert into mart_spend_hourly (hour, environment, app, team, route, workflow, model,"
            " deployment, stage, requests, input_tokens, output_tokens, cost_separate,"
            " cost_usage, cost_even, cost_configured)"
            " select h, 'prod', 'chat', 'a', '/c', null, 'm', 'd1', 'decode', 1, 1, 1,"
            " 1, 1, 1, 1 from range($s::timestamptz, $e::timestamptz, interval 1 hour) t(h)",
            {"s": (AT - timedelta(days=30)).replace(minute=0), "e": AT},
        )
    )
    yield url, storage, tokens
    svc.request_stop()
    thread.join(30)


def _get(url: str, token: str | None = None, **params: str) -> requests.Response:
    """GET the budgets as of AT (unless `at` is given or empty)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    params.setdefault("at", AT.isoformat())
    params = {k: v for k, v in params.items() if v}
    return requests.get(f"{url}/api/v1/budgets", headers=headers, params=params, timeout=30)


def test_good_token_gets_every_budget(api) -> None:
    url, _storage, tokens = api
    resp = _get(url, tokens["vic"])  # viewers included
    assert resp.status_code == 200, resp.text
    assert resp.headers["Cache-Control"] == "no-store"
    assert resp.headers["Content-Type"].startswith("application/json")
    body = resp.json()
    assert body["as_of"] == AT.isoformat()
    by_name = {b["name"]: b for b in body["budgets"]}
    assert set(by_name) == {"team-a", "all"}
    a = by_name["team-a"]
    assert a["period_start"] == "2026-11-01T00:00:00+01:00"
    assert a["period_end"] == "2026-12-01T00:00:00+01:00"
    hours = (AT - datetime(2026, 10, 31, 23, tzinfo=UTC)) // timedelta(hours=1) + 1
    assert a["spent"] == pytest.approx(hours)
    assert a["status"] == "over" and a["threshold_crossed"] == 100
    assert a["spent_pct"] == pytest.approx(100 * hours / 100)
    assert set(a["forecast"]) == {"p10", "p50", "p90"}
    assert a["forecast"]["p10"] <= a["forecast"]["p50"] <= a["forecast"]["p90"]
    assert a["scope"] == {"team": "a"} and a["owner"] == "o" and a["source"] == "ui"
    assert a["link"].startswith("https://il.example.com/spend?range=custom&")
    for key in ("burn_rate_per_day", "days_to_exhaustion", "coverage_complete", "currency"):
        assert key in a
    assert by_name["all"]["status"] in ("ok", "warning", "at_risk")


def test_name_and_at_filters(api) -> None:
    url, _storage, tokens = api
    one = _get(url, tokens["ana"], name="team-a").json()["budgets"]
    assert [b["name"] for b in one] == ["team-a"]
    earlier = _get(url, tokens["ana"], name="team-a", at="2026-11-02T00:00:00+01:00").json()
    assert earlier["budgets"][0]["spent"] == pytest.approx(24)
    missing = _get(url, tokens["ana"], name="nope")
    assert missing.status_code == 404 and missing.json() == {"error": "no budget named 'nope'"}
    assert _get(url, tokens["ana"], at="yesterday").status_code == 400
    assert "unknown parameter 'team'" in _get(url, tokens["ana"], team="a").json()["error"]


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (None, "API token is required"),
        ("not-a-token", "not an InferLedger API token"),
        ("ilt_" + "x" * 43, "Unknown API token"),
    ],
)
def test_missing_or_wrong_tokens_get_401(api, token, message) -> None:
    url, _storage, _tokens = api
    resp = _get(url, token)
    assert resp.status_code == 401
    assert message in resp.json()["error"]
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert resp.headers["Cache-Control"] == "no-store"


def test_revoked_token_and_disabled_user(api) -> None:
    url, storage, tokens = api
    (vic_token,) = api_tokens.list_tokens(storage, "vic")
    api_tokens.revoke_token(storage, vic_token.token_id, by="test")
    resp = _get(url, tokens["vic"])
    assert resp.status_code == 401 and "revoked" in resp.json()["error"]
    users.set_disabled(storage, "ana", True, by="test")
    resp = _get(url, tokens["ana"])
    assert resp.status_code == 401 and "'ana' is disabled" in resp.json()["error"]


def test_only_get_and_the_rest_stays_guarded(api) -> None:
    url, _storage, tokens = api
    headers = {"Authorization": f"Bearer {tokens['ana']}"}
    post = requests.post(f"{url}/api/v1/budgets", headers=headers, timeout=30)
    assert post.status_code == 405 and "read-only" in post.json()["error"]
    assert "GET" in post.headers["Allow"]
    other = requests.get(f"{url}/api/v1/nothing", headers=headers, timeout=30)
    assert other.status_code == 404 and other.json()["error"].startswith("no API at")
    # A token is no session: the dashboard still asks to sign in.
    page = requests.get(f"{url}/spend", headers=headers, timeout=30, allow_redirects=False)
    assert page.status_code == 302 and "/login" in page.headers["Location"]


def test_last_used_is_recorded(api) -> None:
    url, storage, tokens = api
    assert _get(url, tokens["ana"], at="").status_code == 200  # as of now
    storage.write(lambda tx: None)  # the touch is queued before this: wait for it
    (ana,) = api_tokens.list_tokens(storage, "ana")
    assert ana.last_used_at is not None


def test_token_store_rules(storage) -> None:
    users.add_user(storage, "ana", "viewer", "a-long-password-1", by="t")
    token = api_tokens.create_token(storage, "ana", "ci", by="t")
    assert token.startswith("ilt_") and len(token) == 47
    (stored,) = api_tokens.list_tokens(storage)
    assert stored.prefix == token[:8] and stored.active
    raw = storage.fetchall("select token_hash from api_tokens")
    assert raw[0][0] == api_tokens.token_hash(token) and token not in raw[0][0]
    assert api_tokens.user_for_token(storage, token).name == "ana"
    tampered = token[:-1] + ("A" if token[-1] != "A" else "B")
    assert api_tokens.user_for_token(storage, tampered) is None
    with pytest.raises(TokenError, match="no user 'bob'"):
        api_tokens.create_token(storage, "bob", "x", by="t")
    with pytest.raises(TokenError, match="needs a label"):
        api_tokens.create_token(storage, "ana", " ", by="t")
    api_tokens.revoke_token(storage, stored.token_id, by="t")
    with pytest.raises(TokenError, match="already revoked"):
        api_tokens.revoke_token(storage, stored.token_id, by="t")
    with pytest.raises(TokenError, match="no API token #99"):
        api_tokens.revoke_token(storage, 99, by="t")
    with pytest.raises(TokenRefused, match="revoked"):
        api_tokens.authenticate_token(storage, token)
    users.set_disabled(storage, "ana", True, by="t")
    with pytest.raises(TokenError, match="disabled"):
        api_tokens.create_token(storage, "ana", "x", by="t")
