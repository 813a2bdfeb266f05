"""Sign-in: password hashes, user rules, the `users` CLI, sessions, the rate limit, the guard's
answer for every kind of route, role rules for pages and callbacks (forged requests included)
and the `next` parameter (the OIDC provider flow: tests/test_auth_oidc.py). Real DuckDB files
and real HTTP against in-process servers with sign-in on."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from flask.sessions import SecureCookieSessionInterface

from app import auth
from app.auth import guard, limits, routes
from inferledger import cli
from inferledger.core.storage import Storage
from inferledger.settings import load_settings
from ledger import users
from ledger.users import Role, SignInError, UserError
from tests.conftest import ROOT, LiveService, free_port

PASSWORDS = {"ann": "ann-admin-password", "ada": "ada-analyst-password", "vic": "vic-viewer-pass"}
ROLES = {"ann": "admin", "ada": "analyst", "vic": "viewer"}
ADD = "admin-users-"


def _people(storage: Storage) -> None:
    for name, role in ROLES.items():
        users.add_user(storage, name, role, PASSWORDS[name], by="test")


@pytest.fixture
def secured(live_factory) -> LiveService:
    """A server with sign-in on and three users: ann (admin), ada (analyst), vic (viewer)."""
    live = live_factory(auth__enabled=True)
    _people(live.service.storage)
    return live


def _csrf(session: requests.Session, url: str) -> str:
    page = session.get(url + "/login", timeout=10).text
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, page
    return match.group(1)


def _sign_in(
    url: str, name: str, password: str | None = None, next_path: str = "/"
) -> tuple[requests.Session, requests.Response]:
    session = requests.Session()
    resp = session.post(
        url + "/login",
        data={
            "name": name,
            "password": PASSWORDS.get(name, "") if password is None else password,
            "csrf": _csrf(session, url),
            "next": next_path,
        },
        allow_redirects=False,
        timeout=10,
    )
    return session, resp


def signed_in(url: str, name: str) -> requests.Session:
    session, resp = _sign_in(url, name)
    assert resp.status_code == 303, resp.text
    return session


def _get(session: requests.Session | Any, url: str) -> requests.Response:
    return session.get(url, allow_redirects=False, timeout=10)


def _post(session: requests.Session | Any, url: str) -> requests.Response:
    return session.post(url, allow_redirects=False, timeout=10)


# ------------------------------------------------------------------------------ hashes, rules
def test_password_hash_format_and_verification() -> None:
    stored = users.hash_password("correct horse battery")
    algorithm, params, salt, key = stored.split("$")
    assert (algorithm, params) == ("scrypt", "n=16384,r=8,p=1")
    assert len(base64.b64decode(salt)) == 16 and len(base64.b64decode(key)) == 32
    assert users.verify_password("correct horse battery", stored)
    assert not users.verify_password("correct horse batterY", stored)
    assert users.hash_password("correct horse battery") != stored  # a fresh salt every time
    # the parameters travel with the hash: a cheaper one made elsewhere still verifies
    salt_bytes = b"0123456789abcdef"
    cheap_key = hashlib.scrypt(b"pw-1234567890", salt=salt_bytes, n=2**10, r=8, p=1, dklen=32)
    encoded = [base64.b64encode(b).decode() for b in (salt_bytes, cheap_key)]
    cheap = "scrypt$n=1024,r=8,p=1$" + "$".join(encoded)
    assert users.verify_password("pw-1234567890", cheap)
    for broken in (None, "", "plain", "md5$x$y$z", stored.replace("n=16384", "n=3"), stored[:-8]):
        assert not users.verify_password("correct horse battery", broken)
    # the same salt gives the same hash (deterministic given the salt)
    assert users.hash_password("abc", salt=salt_bytes) == users.hash_password(
        "abc", salt=salt_bytes
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: users.normalize_name(""), "user name '' is not valid"),
        (lambda: users.normalize_name("bad name"), "user name 'bad name' is not valid"),
        (lambda: users.normalize_name("-x"), "is not valid"),
        (lambda: users.parse_role("boss"), "role must be one of viewer, analyst, admin"),
        (lambda: users.check_password("short"), "password too short: use at least 10"),
        (lambda: users.check_password("x" * 1025), "password too long"),
        (lambda: users.check_password("Alice12345", "alice12345"), "must not be the user name"),
    ],
)
def test_validation_errors_are_one_line(call: Any, message: str) -> None:
    with pytest.raises(UserError) as exc:
        call()
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_user_rules(storage: Storage) -> None:
    ann = users.add_user(storage, "Ann", "admin", "ann-password-1", by="t")
    assert ann.name == "ann" and ann.role is Role.ADMIN and ann.has_password
    with pytest.raises(UserError, match="already exists"):
        users.add_user(storage, "ANN", "viewer", "another-password", by="t")
    # the last enabled admin stays an admin, stays enabled, stays
    for change in (
        lambda: users.set_role(storage, "ann", "viewer", by="t"),
        lambda: users.set_disabled(storage, "ann", True, by="t"),
        lambda: users.remove_user(storage, "ann", by="t"),
    ):
        with pytest.raises(UserError, match="last enabled admin"):
            change()
    users.add_user(storage, "bo", "admin", "bo-password-12", by="t")
    assert users.set_role(storage, "ann", "analyst", by="t").role is Role.ANALYST
    with pytest.raises(UserError, match="last enabled admin"):
        users.remove_user(storage, "bo", by="t")
    with pytest.raises(users.UnknownUserError, match="no user named 'zed'"):
        users.set_password(storage, "zed", "whatever-123", by="t")
    epoch = users.get_user(storage, "ann").session_epoch
    assert users.set_password(storage, "ann", "new-password-1", by="t").session_epoch == epoch + 1
    assert users.set_disabled(storage, "ann", True, by="t").session_epoch == epoch + 2
    with pytest.raises(SignInError, match="disabled"):
        users.authenticate(storage, "ann", "new-password-1")
    with pytest.raises(SignInError, match="Wrong user name or password") as wrong:
        users.authenticate(storage, "ann", "ann-password-1")
    assert wrong.value.reason == "wrong password"
    with pytest.raises(SignInError, match="Wrong user name or password") as unknown:
        users.authenticate(storage, "nobody", "ann-password-1")
    assert unknown.value.reason == "unknown user"
    assert users.authenticate(storage, " BO ", "bo-password-12").name == "bo"
    users.remove_user(storage, "ann", by="t")
    assert users.get_user(storage, "ann") is None
    actions = [(c.action, c.user_name, c.detail) for c in users.user_changes(storage)]
    assert actions == [
        ("remove", "ann", "analyst"),
        ("disable", "ann", None),
        ("passwd", "ann", None),
        ("set_role", "ann", "admin -> analyst"),
        ("add", "bo", "admin"),
        ("add", "ann", "admin"),
    ]
    # nothing secret in the audit trail
    dump = json.dumps(storage.fetchall("select * from user_changes"), default=str)
    assert "password-1" not in dump and "scrypt" not in dump


def test_demo_admin_and_session_secret_are_created_once(storage: Storage) -> None:
    password = users.ensure_demo_admin(storage)
    assert password and len(password) >= users.MIN_PASSWORD_LENGTH
    assert users.authenticate(storage, "admin", password).role is Role.ADMIN
    assert password not in json.dumps(storage.fetchall("select * from users"), default=str)
    assert users.ensure_demo_admin(storage) is None
    secret = users.session_secret(storage)
    assert len(secret) == 64 and users.session_secret(storage) == secret


def test_demo_prints_its_admin_once(tmp_path: Path) -> None:
    from inferledger.demo import Demo, DemoOptions
    from inferledger.server import Service

    db = tmp_path / "demo.duckdb"
    settings = load_settings(env={}).replace(db=str(db), port=free_port())
    demo = Demo(DemoOptions(db=db, port=settings["port"]), out=io.StringIO())
    demo.service = Service(settings).start()
    try:
        first = demo._demo_admin(settings)
        again = demo._demo_admin(settings)
        match = re.fullmatch(r"; sign in as admin with password (\S+) \(shown once\)", first)
        assert match, first
        assert users.authenticate(demo.service.storage, "admin", match.group(1)).role is Role.ADMIN
        assert again == (
            "; sign in as admin (the demo admin exists; to reset its password, stop the demo "
            f"and run `inferledger users passwd admin --db {db}`)"
        )
        assert demo._demo_admin(settings.replace(auth__enabled=False)) == ""
    finally:
        demo.service.stop()


# ------------------------------------------------------------------------------ CLI
def _cli(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *args: str,
    stdin: str = "",
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = cli.main(["users", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_add_list_set_role_passwd_remove(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "users.duckdb")

    def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
        return _cli(capsys, monkeypatch, *args, "--db", db, stdin=stdin)

    code, out, err = run("list")
    assert (code, err) == (2, f"inferledger: no database at {db!r} (give --db PATH)\n")
    assert not Path(db).exists()
    code, out, _ = run(
        "add", "Ann", "--role", "admin", "--password-stdin", stdin="ann-password-1\n"
    )
    assert (code, out) == (0, "added ann (admin)\n")
    code, out, _ = run("add", "vic", "--role", "viewer", "--password-stdin", stdin="vic-password-1")
    assert code == 0
    for args, stdin, message in (
        (("add", "bo", "--role", "viewer", "--password-stdin"), "short\n", "password too short"),
        (("add", "bo", "--role", "boss", "--password-stdin"), "long-enough-1\n", "role must be"),
        (("add", "b o", "--role", "viewer", "--password-stdin"), "long-enough-1\n", "not valid"),
        (("add", "vic", "--role", "viewer", "--password-stdin"), "long-enough-1\n", "exists"),
        (("add", "bo", "--role", "viewer"), "", "pipe it in with --password-stdin"),
        (("set-role", "zed", "admin"), "", "no user named 'zed'"),
        (("remove", "ann"), "", "last enabled admin"),
        (("passwd", "vic", "--password-stdin"), "tiny\n", "password too short"),
    ):
        code, out, err = run(*args, stdin=stdin)
        assert code == 2, (args, out, err)
        assert err.startswith("inferledger: ") and err.count("\n") == 1 and message in err, err
    code, out, _ = run("list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == [
        "name",
        "role",
        "status",
        "sign-in",
        "created",
        "last",
        "sign-in",
    ]
    assert [ln.split()[:4] for ln in lines[2:]] == [
        ["ann", "admin", "active", "password"],
        ["vic", "viewer", "active", "password"],
    ]
    assert run("set-role", "vic", "analyst")[1] == "vic is now analyst\n"
    code, out, _ = run("passwd", "vic", "--password-stdin", stdin="vic-password-2\n")
    assert code == 0 and "their sessions have ended" in out
    assert run("disable", "vic")[1] == "vic is disabled\n"
    assert run("enable", "vic")[1] == "vic is enabled\n"
    assert run("remove", "vic")[1] == "removed vic\n"
    code, out, _ = run("changes")
    assert [ln.split()[4:6] for ln in out.splitlines()[2:]] == [
        ["remove", "vic"],
        ["enable", "vic"],
        ["disable", "vic"],
        ["passwd", "vic"],
        ["set_role", "vic"],
        ["add", "vic"],
        ["add", "ann"],
    ]
    with Storage(db) as st:
        assert users.authenticate(st, "ann", "ann-password-1").role is Role.ADMIN
        assert users.get_user(st, "vic") is None


def test_cli_asks_twice_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    answers: list[str] = []
    # The terminal is the true edge here: getpass reads /dev/tty, which a test has not got.
    monkeypatch.setattr("getpass.getpass", lambda prompt="": answers.pop(0))
    db = str(tmp_path / "tty.duckdb")
    answers[:] = ["first-password-1", "other-password-1"]
    monkeypatch.setattr(sys, "stdin", Terminal())
    assert cli.main(["users", "add", "ann", "--role", "admin", "--db", db]) == 2
    assert "the two passwords differ" in capsys.readouterr().err
    answers[:] = ["first-password-1", "first-password-1"]
    assert cli.main(["users", "add", "ann", "--role", "admin", "--db", db]) == 0
    with Storage(db) as st:
        assert users.authenticate(st, "ann", "first-password-1").name == "ann"


def test_cli_says_when_the_database_is_in_use(tmp_path: Path) -> None:
    db = tmp_path / "busy.duckdb"
    with Storage(db):
        proc = subprocess.run(
            [sys.executable, "-m", "inferledger.cli", "users", "list", "--db", str(db)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "is in use by another process" in proc.stderr


# ------------------------------------------------------------------------------ the guard
def test_guard_answers_for_each_kind_of_route(live_factory) -> None:
    live = live_factory(auth__enabled=True, ingest__keys="ingest-key-123")
    _people(live.service.storage)
    url = live.url
    # pages: to the sign-in page, keeping where the user was going
    for path, target in (("/", "/"), ("/spend?range=7d&team=a%20b", "/spend?range=7d&team=a%20b")):
        resp = _get(requests, url + path)
        assert resp.status_code == 302
        location = resp.headers["Location"]
        assert urlsplit(location).path == "/login"
        assert parse_qs(urlsplit(location).query)["next"] == [target]
    # Dash's endpoints and assets: 401 JSON
    resp = requests.post(url + "/_dash-update-component", json={"output": "x.y"}, timeout=10)
    assert resp.status_code == 401 and resp.json()["error"] == "Sign in first."
    for path in ("/_dash-layout", "/_dash-dependencies", "/assets/anything.css"):
        resp = _get(requests, url + path)
        assert resp.status_code == 401 and resp.headers["Content-Type"] == "application/json"
    # public: sign-in, what its page loads, probes, metrics
    for path in ("/login", "/assets/auth.css", "/assets/inferledger.css", "/_favicon.ico"):
        assert _get(requests, url + path).status_code == 200, path
    for path in ("/healthz", "/readyz", "/metrics"):
        assert _get(requests, url + path).status_code == 200, path
    # ingest keeps its own keys: no key is 401 from the receiver, a session does not replace it
    from inferledger.fixtures import make_export_request

    body = make_export_request(2, seed=1).SerializeToString()
    proto = {"Content-Type": "application/x-protobuf"}
    vic = signed_in(url, "vic")
    for client in (requests, vic):
        resp = client.post(url + "/v1/traces", data=body, headers=proto, timeout=10)
        assert resp.status_code == 401 and "login" not in resp.text
    keyed = {**proto, "Authorization": "Bearer ingest-key-123"}
    assert requests.post(url + "/v1/traces", data=body, headers=keyed, timeout=10).ok
    assert _get(requests, url + "/v1/outcomes").status_code != 302
    # signed in: the UI answers
    for path in ("/", "/_dash-layout", "/_dash-dependencies"):
        assert _get(vic, url + path).status_code == 200, path
    assert "vic" in _get(vic, url + "/_dash-layout").text


def test_roles_for_pages_and_navigation(secured: LiveService) -> None:
    url = secured.url
    vic, ada, ann = (signed_in(url, n) for n in ("vic", "ada", "ann"))
    for session, status in ((vic, 403), (ada, 403), (ann, 200)):
        assert _get(session, url + "/admin/users").status_code == status
    resp = _get(vic, url + "/admin/users?x=1")
    assert resp.status_code == 403
    assert "needs the admin role; you are signed in as vic (viewer)" in resp.text
    # the navigation shows admin pages to admins only
    assert "/admin/users" not in _hrefs(_get(vic, url + "/_dash-layout").json())
    assert "/admin/users" in _hrefs(_get(ann, url + "/_dash-layout").json())
    # client-side navigation goes through Dash's router callback: refused there too
    router = {
        "output": ".._pages_content.children..._pages_store.data..",
        "outputs": [
            {"id": "_pages_content", "property": "children"},
            {"id": "_pages_store", "property": "data"},
        ],
        "inputs": [
            {"id": "_pages_location", "property": "pathname", "value": "/admin/users"},
            {"id": "_pages_location", "property": "search", "value": ""},
        ],
        "changedPropIds": ["_pages_location.pathname"],
        "state": [],
    }
    refused = vic.post(url + "/_dash-update-component", json=router, timeout=10)
    assert refused.status_code == 200
    assert "Not allowed" in refused.text and f"{ADD}new-name" not in refused.text
    opened = ann.post(url + "/_dash-update-component", json=router, timeout=10)
    assert opened.status_code == 200 and f"{ADD}new-name" in opened.text
    # a role change applies at the next request, without signing in again
    users.set_role(secured.service.storage, "vic", "admin", by="test")
    assert _get(vic, url + "/admin/users").status_code == 200


def test_every_page_role_is_enforced(secured: LiveService) -> None:
    """Whatever pages exist (the request explorer and traces need analyst, the Users page
    admin), a direct visit answers by the page's min_role."""
    import dash

    url = secured.url
    sessions = {name: signed_in(url, name) for name in ROLES}
    checked = set()
    for page in dash.page_registry.values():
        path = re.sub(r"<[^>]+>", "x", page.get("path_template") or page["path"])
        needed = auth.page_role(page)
        for name, role in ROLES.items():
            status = _get(sessions[name], url + path).status_code
            assert status == (200 if Role(role).allows(needed) else 403), (path, name)
        checked.add((page["path"], needed.value))
    assert ("/admin/users", "admin") in checked
    if any(p == "/requests" for p, _ in checked):
        assert ("/requests", "analyst") in checked
    assert ("/sql", "analyst") in checked  # the SQL console (issue #14)
    assert ("/views", "analyst") in checked  # the view catalog (issue #14)


def _hrefs(node: Any) -> set[str]:
    """Every link target in a Dash layout (JSON)."""
    if isinstance(node, dict):
        found = {node["href"]} if isinstance(node.get("href"), str) else set()
        return found.union(*(_hrefs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_hrefs(v) for v in node))
    return set()


def users_page_callback(
    button: str,
    *,
    new: tuple[str, str, str] | None = None,
    target: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """What the browser sends when a button of the Users page is pressed: `new` fills the
    "Add user" fields (name, role, password), `target` the existing user's (name, password)."""
    buttons = ("add", "set-role", "passwd", "disable", "enable")

    def prop(suffix: str, prop: str, value: Any = None) -> dict[str, Any]:
        return {"id": ADD + suffix, "property": prop, "value": value}

    new_name, new_role, new_password = new or (None, "viewer", None)
    target_name, target_password = target or (None, None)
    outputs = [
        prop("message", "children"),
        prop("version", "data"),
        prop("new-password", "value"),
        prop("target-password", "value"),
    ]
    return {
        "output": "..admin-users-message.children...admin-users-version.data..."
        "admin-users-new-password.value...admin-users-target-password.value..",
        "outputs": [{k: v for k, v in o.items() if k != "value"} for o in outputs],
        "inputs": [
            *(prop(b, "n_clicks", int(b == button)) for b in buttons),
            prop("remove", "submit_n_clicks"),
        ],
        "changedPropIds": [ADD + button + ".n_clicks"],
        "state": [
            prop("new-name", "value", new_name),
            prop("new-role", "value", new_role),
            prop("new-password", "value", new_password),
            prop("target", "value", target_name),
            prop("target-role", "value", "viewer"),
            prop("target-password", "value", target_password),
            prop("version", "data", 0),
        ],
    }


def _add_user_callback(name: str, role: str = "admin") -> dict[str, Any]:
    """What the browser sends when the Users page's "Add user" button is pressed."""
    return users_page_callback("add", new=(name, role, "forged-password-1"))


def test_forged_admin_callback_is_refused(secured: LiveService) -> None:
    url, storage = secured.url, secured.service.storage
    for name in ("vic", "ada"):
        session = signed_in(url, name)
        resp = session.post(
            url + "/_dash-update-component", json=_add_user_callback("mallory"), timeout=10
        )
        assert resp.status_code == 403, resp.text
        assert resp.json()["role"] == "admin"
        assert f"you are signed in as {name}" in resp.json()["error"]
        assert users.get_user(storage, "mallory") is None
    # the very same request from an admin does it: the refusal above is the role, not the body
    resp = signed_in(url, "ann").post(
        url + "/_dash-update-component", json=_add_user_callback("mallory", "viewer"), timeout=10
    )
    assert resp.status_code == 200 and "Added mallory (viewer)." in resp.text
    assert users.get_user(storage, "mallory").role is Role.VIEWER
    # and without a session at all
    resp = requests.post(
        url + "/_dash-update-component", json=_add_user_callback("eve"), timeout=10
    )
    assert resp.status_code == 401 and users.get_user(storage, "eve") is None


def test_admin_callbacks_check_the_role_themselves(secured: LiveService) -> None:
    """Behind the guard, the Users page's own check: run for a viewer it changes nothing and
    says why (what a user demoted while the page is open would see)."""
    import dash
    import flask

    server = secured.service.dash_app.server
    module = next(p["module"] for p in dash.page_registry.values() if p["path"] == "/admin/users")
    page = sys.modules[module]  # the module Dash executed for this app
    with server.test_request_context("/_dash-update-component", method="POST"):
        flask.g.inferledger_user = users.get_user(secured.service.storage, "vic")
        with pytest.raises(auth.RoleRequiredError, match=r"needs the admin role.*vic \(viewer\)"):
            auth.require_role("admin")
        assert isinstance(auth.RoleRequiredError("x"), PermissionError)
        table, options, _changes, *pager = page._show(0)
        assert options == [] and "needs the admin role" in str(table)
        assert pager == ["", True, True]  # nothing to page through
        flask.g.inferledger_user = users.get_user(secured.service.storage, "ann")
        table, options, changes, *pager = page._show(0)
        assert [o["value"] for o in options] == ["ada", "ann", "vic"]
        # the audit rows and the pager's "Changes a–b of N" come from the same read
        shown = str(changes).count("Tr(") - 1  # less the header row
        assert pager == [f"Changes 1–{shown} of {shown}, newest first", True, True]


def test_chart_csv_downloads_are_viewer_level() -> None:
    """Issue #10: the people who browse dashboards download the numbers behind them too."""
    import dash

    from app.components import chart, ids
    from app.factory import reset_dash_registries

    reset_dash_registries()
    try:
        chart(ids("t"), "c", "T", lambda f: None, lambda t, f: None)  # type: ignore[arg-type,return-value]
        funcs = {k: v for k, v in dash._callback.GLOBAL_CALLBACK_MAP.items()}
        assert guard.callback_role(funcs["t-c-csv.data"]["callback"]) is Role.VIEWER
        draw = next(v["callback"] for k, v in funcs.items() if "t-c.figure" in k)
        assert guard.callback_role(draw) is Role.VIEWER
    finally:
        reset_dash_registries()


# ------------------------------------------------------------------------------ sessions
def test_sessions_end_with_password_change_disable_and_removal(secured: LiveService) -> None:
    url, storage = secured.url, secured.service.storage
    resp = _get(requests, url + "/login")
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
    for change in (
        lambda: users.set_password(storage, "vic", "vic-viewer-pass-2", by="test"),
        lambda: users.set_disabled(storage, "vic", True, by="test"),
        lambda: users.remove_user(storage, "vic", by="test"),
    ):
        if users.get_user(storage, "vic") is None:
            users.add_user(storage, "vic", "viewer", PASSWORDS["vic"], by="test")
        users.set_disabled(storage, "vic", False, by="test")
        users.set_password(storage, "vic", PASSWORDS["vic"], by="test")
        session = signed_in(url, "vic")
        assert _get(session, url + "/").status_code == 200
        change()
        resp = _get(session, url + "/")
        assert resp.status_code == 302 and resp.headers["Location"].startswith("/login")
    # sign-out ends the session
    ann = signed_in(url, "ann")
    assert _get(ann, url + "/").status_code == 200
    # a GET (a link, an image on another site) only asks; the page's button POSTs
    asked = _get(ann, url + "/logout")
    assert asked.status_code == 200 and 'method="post" action="/logout"' in asked.text
    assert _get(ann, url + "/").status_code == 200
    resp = _post(ann, url + "/logout")
    assert resp.status_code == 303 and resp.headers["Location"] == "/login?out=1"
    assert "You have signed out." in _get(ann, url + "/login?out=1").text
    assert _get(ann, url + "/").status_code == 302


def test_sessions_expire_and_survive_restarts(live_factory, tmp_path: Path) -> None:
    db = str(tmp_path / "restart.duckdb")
    first = live_factory(auth__enabled=True, db=db, auth__session_hours=1)
    _people(first.service.storage)
    session = signed_in(first.url, "vic")
    # a cookie signed with the server's own key but naming no stored session opens nothing
    server = first.service.dash_app.server
    serializer = SecureCookieSessionInterface().get_signing_serializer(server)
    forged = requests.Session()
    forged.cookies.set(
        auth.SESSION_COOKIE, serializer.dumps({"s": "made-up", "u": "vic", "t": int(time.time())})
    )
    assert _get(forged, first.url + "/").status_code == 302
    # the real session, its sign-in time moved 2 h back, has expired (auth.session_hours=1)
    real = serializer.loads(session.cookies[auth.SESSION_COOKIE])
    stale = requests.Session()
    stale.cookies.set(auth.SESSION_COOKIE, serializer.dumps({**real, "t": real["t"] - 7200}))
    assert _get(stale, first.url + "/").status_code == 302
    assert _get(session, first.url + "/").status_code == 200
    # and once its hour is over by the server's clock
    state = server.extensions[auth.AUTH_KEY]
    state.clock = lambda: time.time() + 3601
    assert _get(session, first.url + "/").status_code == 302
    state.clock = time.time
    assert _get(session, first.url + "/").status_code == 200
    first.service.request_stop()
    first.thread.join(30)
    # the generated key and the sessions are kept in the database: a restart keeps everyone
    # signed in
    second = live_factory(auth__enabled=True, db=db)
    assert _get(session, second.url + "/").status_code == 200
    second.service.request_stop()
    second.thread.join(30)
    # a configured key replaces it: sessions signed with the old one end
    third = live_factory(auth__enabled=True, db=db, auth__session_secret="k" * 40)
    assert _get(session, third.url + "/").status_code == 302


def test_sign_in_form(secured: LiveService, caplog: pytest.LogCaptureFixture) -> None:
    url = secured.url
    # the form's own token is required (no sign-in from another site's form)
    resp = requests.post(
        url + "/login", data={"name": "vic", "password": PASSWORDS["vic"]}, timeout=10
    )
    assert resp.status_code == 400 and "expired" in resp.text
    session, resp = _sign_in(url, "vic", "wrong-password")
    assert resp.status_code == 200 and "Wrong user name or password." in resp.text
    assert _get(session, url + "/").status_code == 302
    session, resp = _sign_in(url, "nobody", "wrong-password")
    assert "Wrong user name or password." in resp.text  # the same answer for unknown names
    # the name is kept in the form, escaped
    session, resp = _sign_in(url, '<b>"x', "wrong-password")
    assert 'value="&lt;b&gt;&#34;x"' in resp.text and "<b>" not in resp.text
    # disabled users learn it only with the right password
    users.set_disabled(secured.service.storage, "ada", True, by="test")
    assert "disabled" not in _sign_in(url, "ada", "not-her-password")[1].text
    assert "This account is disabled" in _sign_in(url, "ada")[1].text
    assert "sign-in failed for 'vic' from 127.0.0.1: wrong password" in caplog.text
    assert PASSWORDS["vic"] not in caplog.text


def test_failed_sign_ins_are_rate_limited(secured: LiveService) -> None:
    url = secured.url
    for _ in range(limits.MAX_FAILURES):
        assert _sign_in(url, "vic", "wrong-password")[1].status_code == 200
    session, resp = _sign_in(url, "vic")  # the right password, too late
    assert resp.status_code == 429 and "Too many failed sign-ins" in resp.text
    assert 1 <= int(resp.headers["Retry-After"]) <= 60
    assert _get(session, url + "/").status_code == 302
    assert _sign_in(url, "ann")[1].status_code == 303  # another user from the same address


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/spend?range=7d&team=a", "/spend?range=7d&team=a"),
        ("/admin/users", "/admin/users"),
        ("//evil.example/x", "/"),
        ("/\\evil.example", "/"),
        ("https://evil.example/", "/"),
        ("javascript:alert(1)", "/"),
        ("/%0d%0aSet-Cookie:x", "/%0d%0aSet-Cookie:x"),
        ("/ok\r\nLocation: //evil", "/"),
        ("/login?next=//evil", "/"),
        ("", "/"),
        (None, "/"),
    ],
)
def test_next_must_be_a_local_path(raw: str | None, expected: str) -> None:
    assert routes.safe_next(raw) == expected


def test_page_paths_match_templates() -> None:
    pattern = guard._template_regex("/trace/<trace_id>")
    assert pattern.match("trace/4bf92f3577b34da6")
    assert not pattern.match("trace/a/b") and not pattern.match("traces/a")


def test_next_round_trip_and_open_redirect(secured: LiveService) -> None:
    url = secured.url
    location = _get(requests, url + "/spend?range=7d").headers["Location"]
    next_path = parse_qs(urlsplit(location).query)["next"][0]
    assert _sign_in(url, "vic", next_path=next_path)[1].headers["Location"] == "/spend?range=7d"
    for evil in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        assert _sign_in(url, "vic", next_path=evil)[1].headers["Location"] == "/"
    # a signed-in user visiting the sign-in page goes on, and only to a local path too
    vic = signed_in(url, "vic")
    assert _get(vic, url + "/login?next=//evil.example").headers["Location"] == "/"
    assert _get(vic, url + "/login?next=/spend").headers["Location"] == "/spend"
