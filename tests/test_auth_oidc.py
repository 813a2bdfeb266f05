"""Sign-in with an OIDC provider (docs/security.md): the settings' checks, the authorization-code
flow with PKCE against a provider that is a small real HTTP server here (the one true edge, since
no real provider is reachable), and the ID token's claims. Split from tests/test_auth.py, whose
users and helpers it shares."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from app.auth import oidc
from inferledger.core.errors import SettingsError
from inferledger.settings import load_settings
from ledger import users
from ledger.users import Role
from tests.test_auth import _get, _people, _sign_in


def test_oidc_settings_are_checked() -> None:
    for env, message in (
        ({"INFERLEDGER_AUTH_OIDC_ISSUER": "http://idp.example.com"}, "https:// URL"),
        ({"INFERLEDGER_AUTH_OIDC_ISSUER": "https://idp.example.com?x=1"}, "without query"),
        ({"INFERLEDGER_AUTH_SESSION_SECRET": "too-short"}, "at least 32 characters"),
        ({"INFERLEDGER_AUTH_SESSION_HOURS": "0"}, "from 1 to 720"),
    ):
        with pytest.raises(SettingsError, match=message) as exc:
            load_settings(env=env)
        assert "\n" not in str(exc.value)
    base = load_settings(env={})
    assert oidc.OidcConfig.from_settings(base) is None
    with pytest.raises(SettingsError, match=r"needs 'auth\.oidc_client_id'"):
        oidc.OidcConfig.from_settings(base.replace(auth__oidc_issuer="https://idp.example.com"))
    with pytest.raises(SettingsError, match=r"without 'auth\.oidc_issuer'"):
        oidc.OidcConfig.from_settings(base.replace(auth__oidc_client_id="inferledger"))
    config = oidc.OidcConfig.from_settings(
        base.replace(auth__oidc_issuer="https://idp.example.com/", auth__oidc_client_id="c")
    )
    assert config == oidc.OidcConfig("https://idp.example.com", "c", "")
    assert config.label == "idp.example.com"
    assert oidc.redirect_uri("http://h:8050/") == "http://h:8050/login/oidc/callback"
    # RFC 7636 appendix B
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert oidc.pkce_challenge(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


class FakeProvider:
    """A minimal OpenID provider on loopback: discovery, and a token endpoint that checks the
    PKCE verifier against the challenge of the authorization request it was shown."""

    def __init__(self) -> None:
        self.codes: dict[str, dict[str, Any]] = {}
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    self._json(200, provider.metadata())
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                grant = provider.codes.pop(form.get("code", ""), None)
                if grant is None or form.get("client_id") != "inferledger":
                    return self._json(400, {"error": "invalid_grant"})
                if oidc.pkce_challenge(form.get("code_verifier", "")) != grant["challenge"]:
                    return self._json(400, {"error": "invalid_grant"})
                if form.get("redirect_uri") != grant["redirect_uri"]:
                    return self._json(400, {"error": "invalid_grant"})
                claims = {
                    "iss": provider.issuer,
                    "aud": "inferledger",
                    "sub": grant["sub"],
                    "email": grant["email"],
                    "email_verified": True,
                    "nonce": grant["nonce"],
                    "exp": int(time.time()) + 300,
                }
                token = ".".join(
                    base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")
                    for part in ({"alg": "none"}, claims)
                )
                self._json(200, {"id_token": token + ".", "access_token": "a"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": self.issuer + "/authorize",
            "token_endpoint": self.issuer + "/token",
        }

    def grant(self, authorize_url: str, sub: str, email: str) -> tuple[str, str]:
        """The provider's user signs in: returns (code, state) for the redirect back."""
        query = {k: v[0] for k, v in parse_qs(urlsplit(authorize_url).query).items()}
        code = f"code-{len(self.codes)}-{sub}"
        self.codes[code] = {
            "challenge": query["code_challenge"],
            "redirect_uri": query["redirect_uri"],
            "nonce": query["nonce"],
            "sub": sub,
            "email": email,
        }
        return code, query["state"]


@pytest.fixture
def provider() -> Any:
    fake = FakeProvider()
    yield fake
    fake.server.shutdown()


def test_oidc_sign_in(live_factory, provider: FakeProvider) -> None:
    live = live_factory(
        auth__enabled=True, auth__oidc_issuer=provider.issuer, auth__oidc_client_id="inferledger"
    )
    _people(live.service.storage)
    url, storage = live.url, live.service.storage
    assert (
        f"Sign in with 127.0.0.1:{provider.server.server_address[1]}"
        in _get(requests, url + "/login").text
    )
    session = requests.Session()
    resp = _get(session, url + "/login/oidc?next=/spend")
    authorize = resp.headers["Location"]
    query = {k: v[0] for k, v in parse_qs(urlsplit(authorize).query).items()}
    assert resp.status_code == 302 and authorize.startswith(provider.issuer + "/authorize?")
    assert query["redirect_uri"] == url + "/login/oidc/callback"
    assert query["client_id"] == "inferledger" and query["response_type"] == "code"
    assert query["code_challenge_method"] == "S256" and "openid" in query["scope"].split()
    # a callback that does not answer this sign-in (wrong state) signs nobody in
    code, state = provider.grant(authorize, "sub-1", "New.Person@Example.com")
    resp = _get(session, url + f"/login/oidc/callback?code={code}&state=forged")
    assert "did not match" in resp.text and _get(session, url + "/").status_code == 302
    # the real one: a new user, a viewer, linked to the provider's subject
    resp = _get(session, url + "/login/oidc?next=/spend")
    code, state = provider.grant(resp.headers["Location"], "sub-1", "New.Person@Example.com")
    resp = _get(session, url + f"/login/oidc/callback?code={code}&state={state}")
    assert resp.status_code == 303 and resp.headers["Location"] == "/spend"
    assert _get(session, url + "/").status_code == 200
    person = users.get_user(storage, "new.person@example.com")
    assert person.role is Role.VIEWER and person.oidc_subject == "sub-1"
    assert not person.has_password
    # an existing local user is matched by e-mail and keeps its role
    users.add_user(storage, "ops@example.com", "admin", "ops-password-1", by="test")
    other = requests.Session()
    resp = _get(other, url + "/login/oidc")
    code, state = provider.grant(resp.headers["Location"], "sub-2", "ops@example.com")
    assert _get(other, url + f"/login/oidc/callback?code={code}&state={state}").status_code == 303
    assert _get(other, url + "/admin/users").status_code == 200
    assert users.get_user(storage, "ops@example.com").oidc_subject == "sub-2"
    # a user who signs in only through the provider has no password to guess
    assert (
        "Wrong user name or password." in _sign_in(url, "new.person@example.com", "x" * 12)[1].text
    )


def test_oidc_claims_are_checked() -> None:
    client = oidc.OidcClient(oidc.OidcConfig("https://idp.example.com", "me", ""))
    good = {
        "iss": "https://idp.example.com",
        "aud": ["me", "x"],
        "exp": 2000,
        "nonce": "n",
        "sub": "s",
    }
    client.check_claims(good, "n", now=1000)
    for change, message in (
        ({"iss": "https://other.example.com"}, "another provider"),
        ({"aud": "you"}, "another client"),
        ({"exp": 100}, "expired"),
        ({"nonce": "m"}, "nonce"),
        ({"sub": ""}, "no subject"),
    ):
        with pytest.raises(oidc.OidcError, match=message):
            client.check_claims({**good, **change}, "n", now=1000)
