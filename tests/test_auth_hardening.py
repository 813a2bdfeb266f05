"""Issue #17, sign-in hardening: sign-out ends the session on the server (a copied cookie stops
working), the session cookie is Secure behind https, and password spraying is throttled per
account and per server whatever the source address. The attacks run against real servers on
loopback (real HTTP, real DuckDB files); the throttle's backoff runs on an injected clock."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import requests
from requests.adapters import HTTPAdapter

from app import auth
from app.auth.limits import SignInThrottle
from inferledger.core.errors import SettingsError
from inferledger.settings import load_settings
from ledger import users
from ledger.sessions import SessionStore
from ledger.sessions import _digest as sessions_digest
from tests.test_auth import (
    PASSWORDS,
    _get,
    _people,
    _post,
    _sign_in,
    signed_in,
    users_page_callback,
)

ADD = "admin-users-"


def _copy(session: requests.Session) -> requests.Session:
    """Another client holding a copy of `session`'s cookie (what a thief would hold)."""
    thief = requests.Session()
    thief.cookies.set(auth.SESSION_COOKIE, session.cookies[auth.SESSION_COOKIE])
    return thief


def _signed_out(resp: requests.Response) -> bool:
    return resp.status_code == 302 and resp.headers["Location"].startswith("/login")


# ------------------------------------------------------------------------------ sessions
def test_a_cookie_copied_before_sign_out_is_refused_after_it(secured) -> None:
    url, storage = secured.url, secured.service.storage
    vic = signed_in(url, "vic")
    thief = _copy(vic)
    assert _get(thief, url + "/").status_code == 200  # the copy works while vic is signed in
    assert SessionStore(storage).count("vic") == 1
    assert _post(vic, url + "/logout").status_code == 303
    # at once, for every copy: pages, Dash's endpoints, callbacks
    assert _signed_out(_get(thief, url + "/"))
    assert _get(thief, url + "/_dash-layout").status_code == 401
    resp = thief.post(url + "/_dash-update-component", json={"output": "x.y"}, timeout=10)
    assert resp.status_code == 401
    assert SessionStore(storage).count("vic") == 0
    # signing in again gives a new session; the old cookie stays dead
    again = signed_in(url, "vic")
    assert again.cookies[auth.SESSION_COOKIE] != thief.cookies[auth.SESSION_COOKIE]
    assert _get(again, url + "/").status_code == 200
    assert _signed_out(_get(thief, url + "/"))


def test_sign_out_survives_a_restart(live_factory, tmp_path) -> None:
    """The revocation is in the database, not only in the process's memory."""
    db = str(tmp_path / "revoked.duckdb")
    first = live_factory(auth__enabled=True, db=db)
    _people(first.service.storage)
    vic = signed_in(first.url, "vic")
    thief = _copy(vic)
    _post(vic, first.url + "/logout")
    first.service.request_stop()
    first.thread.join(30)
    second = live_factory(auth__enabled=True, db=db)
    assert _signed_out(_get(thief, second.url + "/"))


def test_a_removed_user_added_again_does_not_get_the_old_sessions(secured) -> None:
    url, storage = secured.url, secured.service.storage
    vic = signed_in(url, "vic")
    assert _get(vic, url + "/").status_code == 200
    users.remove_user(storage, "vic", by="test")
    users.add_user(storage, "vic", "admin", "a-new-vic-password", by="test")
    # same name, same epoch (0) as the old cookie carried: still not the same person
    assert _signed_out(_get(vic, url + "/"))
    assert _get(vic, url + "/admin/users").status_code == 302


def test_password_change_and_disable_end_every_session(secured) -> None:
    url, storage = secured.url, secured.service.storage
    for change in (
        lambda: users.set_password(storage, "vic", "vic-viewer-pass-2", by="test"),
        lambda: users.set_disabled(storage, "vic", True, by="test"),
    ):
        users.set_disabled(storage, "vic", False, by="test")
        sessions = [signed_in(url, "vic") for _ in range(2)]
        assert SessionStore(storage).count("vic") == 2
        change()
        assert SessionStore(storage).count("vic") == 0  # the rows go in the same transaction
        assert all(_signed_out(_get(s, url + "/")) for s in sessions)
        users.set_password(storage, "vic", PASSWORDS["vic"], by="test")


def test_session_store_expiry_and_cache(storage) -> None:
    """The stored session's own expiry, whether the process has it cached or not; and an
    ended session stays ended for a reader that loaded it just before."""
    users.add_user(storage, "vic", "viewer", PASSWORDS["vic"], by="test")
    vic = users.get_user(storage, "vic")
    store = SessionStore(storage, max_cached=2)
    t0 = 1_900_000_000.0
    session_id = store.start(vic, now=t0, hours=1)
    assert store.user(session_id, now=t0 + 3599).name == "vic"  # cached
    cold = SessionStore(storage)  # another process start: read from the table
    assert cold.user(session_id, now=t0 + 3599).name == "vic"
    assert store.user(session_id, now=t0 + 3600) is None
    assert SessionStore(storage).user(session_id, now=t0 + 3600) is None
    for bad in (None, "", 42, "not-a-session"):
        assert store.user(bad, now=t0) is None
    # the cache is bounded; an evicted session is read back from the table
    others = [store.start(vic, now=t0, hours=1) for _ in range(3)]
    assert len(store._cache) == 2 and store.user(session_id, now=t0 + 1).name == "vic"
    # an expired session's row goes at the next sign-in
    assert store.count("vic") == 4
    store.start(vic, now=t0 + 7200, hours=1)
    assert store.count("vic") == 1
    # a store that ends a session refuses it even if a concurrent read put it back
    live = store.start(vic, now=t0, hours=1)
    _, loaded = store._load(sessions_digest(live))  # a reader, just before the sign-out
    assert store.end(live) and not store.end(live)
    assert loaded is not None and store._remember(sessions_digest(live), loaded) is False
    assert store.user(live, now=t0 + 1) is None
    assert all(store.user(o, now=t0 + 7201) is None for o in others)


def test_own_password_change_keeps_this_session_only(secured) -> None:
    url = secured.url
    ann = signed_in(url, "ann")
    elsewhere = signed_in(url, "ann")
    thief = _copy(ann)
    resp = ann.post(
        url + "/_dash-update-component",
        json=users_page_callback("passwd", target=("ann", "ann-new-password-1")),
        timeout=10,
    )
    assert resp.status_code == 200 and "Set a new password for ann" in resp.text
    assert _get(ann, url + "/admin/users").status_code == 200  # a new session, by its cookie
    assert _signed_out(_get(elsewhere, url + "/"))
    assert _signed_out(_get(thief, url + "/"))  # the copy of the cookie before the change


# ------------------------------------------------------------------------------ cookies
def _cookie_of(live) -> str:
    return _get(requests, live.url + "/login").headers["Set-Cookie"]


@pytest.mark.parametrize(
    ("overrides", "secure"),
    [
        ({}, False),  # plain HTTP on loopback, nothing configured
        ({"auth__public_url": "https://ledger.example.com"}, True),
        ({"auth__public_url": "https://ledger.example.com", "auth__cookie_secure": "false"}, False),
        ({"auth__public_url": "http://ledger.internal:8050"}, False),
        ({"auth__cookie_secure": "true"}, True),
    ],
)
def test_session_cookie_secure_flag(live_factory, overrides: dict[str, str], secure: bool) -> None:
    cookie = _cookie_of(live_factory(auth__enabled=True, **overrides))
    assert cookie.startswith(auth.SESSION_COOKIE + "=")
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert ("; Secure" in cookie) is secure, cookie


def test_session_cookie_is_secure_over_tls_in_auto_mode(live_factory) -> None:
    """auto without auth.public_url: a request that came over TLS gets a Secure cookie."""
    server = live_factory(auth__enabled=True).service.dash_app.server
    plain = server.test_client().get("/login")
    tls = server.test_client().get("/login", base_url="https://ledger.example.com")
    assert "Secure" not in plain.headers["Set-Cookie"]
    assert "; Secure" in tls.headers["Set-Cookie"]


def test_public_url_and_limit_settings_are_checked() -> None:
    for env, message in (
        ({"INFERLEDGER_AUTH_PUBLIC_URL": "ledger.example.com"}, "expected an http"),
        ({"INFERLEDGER_AUTH_PUBLIC_URL": "ftp://ledger.example.com"}, "expected an http"),
        ({"INFERLEDGER_AUTH_PUBLIC_URL": "https://h.example.com/app"}, "no path or query"),
        ({"INFERLEDGER_AUTH_PUBLIC_URL": "https://h.example.com:x"}, "expected an http"),
        ({"INFERLEDGER_AUTH_COOKIE_SECURE": "maybe"}, "expected one of auto, true, false"),
        ({"INFERLEDGER_AUTH_LOCKOUT_FAILURES": "0"}, "from 1 to 1000"),
        ({"INFERLEDGER_AUTH_FAILED_SIGN_INS_PER_MINUTE": "x"}, "expected an integer"),
    ):
        with pytest.raises(SettingsError, match=message) as exc:
            load_settings(env=env)
        assert "\n" not in str(exc.value)
    ok = load_settings(env={"INFERLEDGER_AUTH_PUBLIC_URL": "https://ledger.example.com/"})
    assert ok["auth.public_url"] == "https://ledger.example.com"
    assert auth.cookie_secure(ok) is True
    assert auth.cookie_secure(load_settings(env={})) is None  # auto: per request
    with pytest.raises(SettingsError, match=r"'auth\.lockout_max_s' \(30\) must be at least"):
        auth._throttle(ok.replace(auth__lockout_s=60, auth__lockout_max_s=30))


def test_oidc_redirect_uri_comes_from_public_url(live_factory) -> None:
    from tests.test_auth_oidc import FakeProvider

    provider = FakeProvider()
    try:
        live = live_factory(
            auth__enabled=True,
            auth__oidc_issuer=provider.issuer,
            auth__oidc_client_id="inferledger",
            auth__public_url="https://ledger.example.com",
        )
        location = _get(requests, live.url + "/login/oidc").headers["Location"]
        assert "redirect_uri=https%3A%2F%2Fledger.example.com%2Flogin%2Foidc%2Fcallback" in (
            location
        )
    finally:
        provider.server.shutdown()


# ------------------------------------------------------------------------------ spraying
class _SourceAddress(HTTPAdapter):
    """Connect from another loopback address (Linux answers all of 127.0.0.0/8)."""

    def __init__(self, address: str) -> None:
        self._address = address
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["source_address"] = (self._address, 0)
        super().init_poolmanager(*args, **kwargs)


def _from(address: str) -> requests.Session:
    session = requests.Session()
    session.mount("http://", _SourceAddress(address))
    return session


def _attempt(
    session: requests.Session, url: str, name: str, password: str, **headers: str
) -> requests.Response:
    """One sign-in attempt by `session` (its own form token)."""
    from tests.test_auth import _csrf

    return session.post(
        url + "/login",
        data={"name": name, "password": password, "csrf": _csrf(session, url), "next": "/"},
        headers=headers,
        allow_redirects=False,
        timeout=10,
    )


def test_spraying_many_names_is_throttled_server_wide(secured, caplog) -> None:
    """30 user names in quick succession, each from a new X-Forwarded-For address: past the
    server's limit (20 failures a minute) every sign-in is refused without checking a password,
    the right one too, until the minute's oldest failure ages out."""
    url = secured.url
    attacker = requests.Session()
    answers = [
        _attempt(attacker, url, f"user{i}", "Summer2026!!", **{"X-Forwarded-For": f"10.0.{i}.1"})
        for i in range(30)
    ]
    statuses = [r.status_code for r in answers]
    assert statuses == [200] * 20 + [429] * 10, statuses
    refused = answers[-1]
    assert "Too many failed sign-ins on this server; try again in" in refused.text
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert "Wrong user name or password." not in refused.text
    # the right password is refused too while the server is throttled (no hash is checked)
    session, resp = _sign_in(url, "ann")
    assert resp.status_code == 429 and _get(session, url + "/").status_code == 302
    assert "sign-in refused for 'user29' from 127.0.0.1" in caplog.text
    # the minute passes (the throttle's clock moves): sign-in works again
    throttle = secured.service.dash_app.server.extensions[auth.AUTH_KEY].throttle
    throttle._clock = lambda: time.monotonic() + 61
    assert _sign_in(url, "ann")[1].status_code == 303
    metrics = _get(requests, url + "/metrics").text
    for result, count in (("failed", 20), ("refused_server", 11), ("ok", 1)):
        assert f'inferledger_sign_ins_total{{result="{result}"}} {count}.0' in metrics


def test_a_new_source_address_gets_no_fresh_budget_for_a_name(secured) -> None:
    url = secured.url
    first, second = _from("127.0.0.1"), _from("127.0.0.2")
    for _ in range(5):
        assert _attempt(first, url, "vic", "not-the-password").status_code == 200
    # from another address, and with a forged X-Forwarded-For: the name stays locked, even
    # with the right password; the message is the same for a name that does not exist
    for session in (second, first):
        resp = _attempt(session, url, "Vic", PASSWORDS["vic"], **{"X-Forwarded-For": "10.9.9.9"})
        assert resp.status_code == 429, resp.text
        wait = re.search(
            r"Too many failed sign-ins for this user name; try again in (\d+) s\.", resp.text
        )
        assert wait and 1 <= int(wait.group(1)) <= 60
        assert resp.headers["Retry-After"] == wait.group(1)
    for _ in range(5):
        _attempt(second, url, "nobody", "not-the-password")
    resp = _attempt(first, url, "nobody", "not-the-password")
    assert resp.status_code == 429 and "for this user name" in resp.text
    # another name is not locked by vic's failures
    assert _attempt(second, url, "ann", PASSWORDS["ann"]).status_code == 303


def test_throttle_backs_off_per_account() -> None:
    now = [1000.0]
    throttle = SignInThrottle(
        max_failures=3, lockout_s=10, max_lockout_s=35, global_failures=1000, clock=lambda: now[0]
    )
    for _ in range(3):
        assert throttle.begin("Vic") is None  # counted: the password check failed
    refusal = throttle.begin(" vic ")
    assert refusal is not None and refusal.scope == "account"
    assert refusal.retry_after_s == 10 and refusal.seconds == 10
    assert throttle.begin("ann") is None  # another name
    throttle.succeeded("ann")
    # each failure after a lock doubles the next lock, up to the cap
    for lock in (20, 35, 35):
        now[0] += throttle.begin("vic").retry_after_s  # type: ignore[union-attr]
        assert throttle.begin("vic") is None
        assert throttle.begin("vic").retry_after_s == lock  # type: ignore[union-attr]
    assert throttle.failures("vic") == 6
    # refused attempts do not count
    for _ in range(10):
        throttle.begin("vic")
    assert throttle.failures("vic") == 6
    # a lock that runs out gives no fresh free attempts; a day without failures does
    now[0] += 35
    assert throttle.begin("vic") is None and throttle.begin("vic") is not None
    now[0] += 86_401
    assert throttle.begin("vic") is None and throttle.failures("vic") == 1
    # a success forgets the name's failures
    throttle.succeeded("vic")
    assert throttle.failures("vic") == 0


def test_throttle_limits_the_server_in_a_sliding_window() -> None:
    now = [0.0]
    throttle = SignInThrottle(
        max_failures=100, global_failures=3, global_window_s=60, clock=lambda: now[0]
    )
    for i in range(3):
        assert throttle.begin(f"user{i}") is None
        now[0] += 10
    refusal = throttle.begin("user9")
    assert refusal is not None and refusal.scope == "server"
    assert refusal.retry_after_s == 30  # the first failure (t=0) leaves the window at t=60
    assert "on this server" in refusal.message
    now[0] = 60.0
    assert throttle.begin("user9") is None
    throttle.succeeded("user9")  # a right password does not use up the server's budget
    assert throttle.begin("user10") is None
    assert throttle.begin("user11") is not None


def test_throttle_counts_an_attempt_before_its_password_is_checked() -> None:
    """Concurrent attempts cannot all pass the check while their hashes run: each is counted
    when it begins."""
    throttle = SignInThrottle(max_failures=5, global_failures=1000, clock=lambda: 0.0)
    began = [throttle.begin("vic") for _ in range(8)]  # none has finished checking
    assert began[:5] == [None] * 5 and all(r is not None for r in began[5:])


def test_throttle_memory_is_bounded() -> None:
    throttle = SignInThrottle(global_failures=10**6, clock=lambda: 0.0, max_keys=100)
    for i in range(1000):
        throttle.begin(f"made-up-{i}")
    assert len(throttle._accounts) == 100
