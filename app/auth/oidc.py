"""The optional OpenID Connect provider: the authorization code flow with PKCE over `requests`
(docs/security.md, "Sign-in with an OpenID Connect provider"). app/auth/routes.py owns the routes
and app/auth/session.py the session; this module only talks to the provider and checks what it
answers. Nothing here runs unless the auth.oidc_* settings name a provider.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import requests

from inferledger.core.errors import InferLedgerError, SettingsError
from inferledger.core.settings import Settings

CALLBACK_PATH = "/login/oidc/callback"
_CLOCK_SKEW_S = 300


class OidcError(InferLedgerError):
    """The OIDC provider could not be reached or its answer cannot be accepted."""

    http_status = 502


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    client_id: str
    client_secret: str

    @classmethod
    def from_settings(cls, settings: Settings) -> OidcConfig | None:
        """The provider's settings, checked together; None when no provider is configured."""
        issuer = settings["auth.oidc_issuer"]
        client_id = settings["auth.oidc_client_id"].strip()
        client_secret = settings["auth.oidc_client_secret"]
        if not issuer:
            if client_id or client_secret:
                raise SettingsError(
                    "setting 'auth.oidc_client_id'/'auth.oidc_client_secret' given without "
                    "'auth.oidc_issuer': set the provider's issuer URL too"
                )
            return None
        if not client_id:
            raise SettingsError(
                "setting 'auth.oidc_issuer' needs 'auth.oidc_client_id' (the client id "
                "registered at the provider)"
            )
        return cls(issuer, client_id, client_secret)

    @property
    def label(self) -> str:
        return urlsplit(self.issuer).netloc


def redirect_uri(host_url: str) -> str:
    """Where the provider sends the browser back: register this URI at the provider."""
    return host_url.rstrip("/") + CALLBACK_PATH


def pkce_challenge(verifier: str) -> str:
    """RFC 7636 S256: base64url(sha256(verifier)) without padding."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _jwt_claims(token: str) -> dict[str, Any]:
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        raise OidcError("the provider's ID token is not a JWT") from None
    if not isinstance(claims, dict):
        raise OidcError("the provider's ID token holds no claims")
    return claims


class OidcClient:
    """The authorization code flow with PKCE against one provider, over `requests`.

    The ID token comes straight from the token endpoint over the back channel, so its issuer
    is vouched for by that connection (OpenID Connect Core 1.0, 3.1.3.7, item 6) and its
    signature is not checked; its issuer, audience, expiry and nonce are."""

    METADATA_TTL_S = 3600.0

    def __init__(self, config: OidcConfig, *, timeout_s: float = 10.0) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self._metadata: dict[str, Any] | None = None
        self._fetched_at = 0.0
        self._lock = threading.Lock()

    def metadata(self) -> dict[str, Any]:
        with self._lock:
            if self._metadata and time.monotonic() - self._fetched_at < self.METADATA_TTL_S:
                return self._metadata
        url = self.config.issuer + "/.well-known/openid-configuration"
        try:
            resp = requests.get(url, timeout=self.timeout_s)
            resp.raise_for_status()
            doc = resp.json()
        except (requests.RequestException, ValueError) as exc:
            raise OidcError(f"cannot read {url}: {exc}") from None
        if not isinstance(doc, dict) or str(doc.get("issuer", "")).rstrip("/") != (
            self.config.issuer
        ):
            raise OidcError(f"{url} does not describe issuer {self.config.issuer}")
        for key in ("authorization_endpoint", "token_endpoint"):
            if not isinstance(doc.get(key), str):
                raise OidcError(f"{url} has no {key}")
        with self._lock:
            self._metadata, self._fetched_at = doc, time.monotonic()
        return doc

    def authorization_url(self, redirect: str, state: str, nonce: str, verifier: str) -> str:
        endpoint = self.metadata()["authorization_endpoint"]
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.config.client_id,
                "redirect_uri": redirect,
                "scope": "openid email profile",
                "state": state,
                "nonce": nonce,
                "code_challenge": pkce_challenge(verifier),
                "code_challenge_method": "S256",
            }
        )
        return endpoint + ("&" if "?" in endpoint else "?") + query

    def identity(self, code: str, redirect: str, verifier: str, nonce: str) -> tuple[str, str]:
        """Exchange the code; returns (email, subject) of the signed-in identity."""
        meta = self.metadata()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect,
            "client_id": self.config.client_id,
            "code_verifier": verifier,
        }
        if self.config.client_secret:
            form["client_secret"] = self.config.client_secret
        try:
            resp = requests.post(
                meta["token_endpoint"],
                data=form,
                headers={"Accept": "application/json"},
                timeout=self.timeout_s,
            )
            tokens = resp.json()
        except (requests.RequestException, ValueError) as exc:
            raise OidcError(f"the provider's token endpoint failed: {exc}") from None
        if resp.status_code != 200 or not isinstance(tokens, dict) or "id_token" not in tokens:
            error = tokens.get("error") if isinstance(tokens, dict) else None
            raise OidcError(f"the provider refused the sign-in ({error or resp.status_code})")
        claims = _jwt_claims(str(tokens["id_token"]))
        self.check_claims(claims, nonce)
        email = claims.get("email")
        if not email and isinstance(meta.get("userinfo_endpoint"), str):
            email = self._userinfo_email(
                meta["userinfo_endpoint"], tokens.get("access_token"), claims
            )
        if not isinstance(email, str) or not email:
            raise OidcError("the provider sent no email claim (ask for the 'email' scope)")
        if claims.get("email_verified") is False:
            raise OidcError(f"the provider has not verified {email}")
        return email, str(claims["sub"])

    def check_claims(self, claims: dict[str, Any], nonce: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if str(claims.get("iss", "")).rstrip("/") != self.config.issuer:
            raise OidcError("the ID token was issued by another provider")
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.config.client_id not in audiences:
            raise OidcError("the ID token is meant for another client")
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or exp < now - _CLOCK_SKEW_S:
            raise OidcError("the ID token has expired")
        if not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
            raise OidcError("the ID token does not answer this sign-in (nonce)")
        if not claims.get("sub"):
            raise OidcError("the ID token has no subject")

    def _userinfo_email(self, url: str, access_token: Any, claims: dict[str, Any]) -> Any:
        try:
            resp = requests.get(
                url, headers={"Authorization": f"Bearer {access_token}"}, timeout=self.timeout_s
            )
            info = resp.json()
        except (requests.RequestException, ValueError) as exc:
            raise OidcError(f"the provider's userinfo endpoint failed: {exc}") from None
        if not isinstance(info, dict) or info.get("sub") != claims.get("sub"):
            raise OidcError("the provider's userinfo does not match the ID token")
        if info.get("email_verified") is False:
            raise OidcError("the provider has not verified the email address")
        return info.get("email")
