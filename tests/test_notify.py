"""Channel senders over real loopback servers (issue #12): the webhook's HMAC signature
verified on the receiving side, the Slack payload's shape, email through a real SMTP server
(aiosmtpd) with STARTTLS and AUTH, and failures that come back as results, never raised."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import socket
import ssl
import subprocess
from email import message_from_bytes, policy
from pathlib import Path

import pytest

from inferledger.core import notify

MESSAGE = {
    "event": "firing",
    "rule": "search failures",
    "kind": "failure_rate",
    "severity": "critical",
    "summary": "failure rate 12.5% over 5 min",
    "scope": {"team": "search", "route": "/ask"},
    "value": 12.5,
    "threshold": 10.0,
    "peak_value": 14.0,
    "since": "2026-03-02T12:02:00+00:00",
    "owner": "ops@example.com",
    "link": "https://ledger.example.com/requests?range=custom&team=search",
}


def test_webhook_signature_verifies_on_the_receiving_side(webhook, monkeypatch) -> None:
    h = webhook()
    monkeypatch.setenv("HOOK_SECRET", "s3cret")
    result = notify.send(
        "webhook",
        {"url": h.url, "secret_env": "HOOK_SECRET", "headers": {"X-Team": "search"}},
        MESSAGE,
        idempotency_key="7:firing:1:hook",
    )
    assert result.ok and result.status_code == 200 and result.error is None
    [(headers, body, _)] = h.posts
    assert headers["Idempotency-Key"] == "7:firing:1:hook"
    assert headers["X-Team"] == "search"
    # what a receiver does (docs/alerts.md): HMAC-SHA256 of "timestamp.body" with the secret
    timestamp = headers["X-InferLedger-Timestamp"]
    expected = (
        "sha256="
        + hmac.new(b"s3cret", timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    )
    assert hmac.compare_digest(headers["X-InferLedger-Signature"], expected)
    assert notify.verify("s3cret", timestamp, body, headers["X-InferLedger-Signature"])
    assert not notify.verify("wrong", timestamp, body, headers["X-InferLedger-Signature"])
    sent = json.loads(body)
    assert sent["idempotency_key"] == "7:firing:1:hook" and sent["value"] == 12.5


def test_webhook_without_secret_is_unsigned_and_a_missing_secret_variable_is_an_error(
    webhook, monkeypatch
) -> None:
    h = webhook()
    assert notify.send("webhook", {"url": h.url}, MESSAGE, idempotency_key="k").ok
    assert "X-InferLedger-Signature" not in h.posts[0].headers
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    result = notify.send(
        "webhook", {"url": h.url, "secret_env": "NOT_SET_ANYWHERE"}, MESSAGE, idempotency_key="k"
    )
    assert not result.ok and "NOT_SET_ANYWHERE" in result.error
    assert len(h.posts) == 1  # nothing unsigned was sent


def test_non_2xx_refused_and_unknown_kind_are_results_not_exceptions(webhook) -> None:
    h = webhook(default_status=500)
    result = notify.send("webhook", {"url": h.url}, MESSAGE, idempotency_key="k")
    assert (result.ok, result.status_code) == (False, 500) and result.error.startswith("HTTP 500")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    refused = notify.send(
        "webhook", {"url": f"http://127.0.0.1:{port}/"}, MESSAGE, idempotency_key="k", timeout_s=2
    )
    assert not refused.ok and "cannot connect" in refused.error
    assert "unknown channel kind" in notify.send("pager", {}, MESSAGE, idempotency_key="k").error
    assert "'url'" in notify.send("slack", {}, MESSAGE, idempotency_key="k").error


def test_slack_payload_shape(webhook) -> None:
    h = webhook()
    assert notify.send("slack", {"url": h.url}, MESSAGE, idempotency_key="7:firing:1:chat").ok
    payload = json.loads(h.posts[0].body)
    assert set(payload) == {"text", "blocks"}
    text = payload["text"]
    for fact in (
        "[CRITICAL] firing: search failures",
        "team=search",
        "12.5 (threshold 10)",
        "ops@example.com",
        MESSAGE["link"],
        "7:firing:1:chat",
    ):
        assert fact in text
    kinds = [b["type"] for b in payload["blocks"]]
    assert kinds == ["section", "section", "section", "context"]
    fields = payload["blocks"][1]["fields"]
    assert {"type": "mrkdwn", "text": "*Owner*\nops@example.com"} in fields
    assert MESSAGE["link"] in payload["blocks"][2]["text"]["text"]
    assert "7:firing:1:chat" in payload["blocks"][3]["elements"][0]["text"]


# ---------------------------------------------------------------- SMTP (aiosmtpd on loopback)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 made with the openssl CLI (the `cryptography`
    package is not installed here)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: STARTTLS is not tested")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], bytes]] = []
        self.logins: list[tuple[bytes, bytes]] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 OK"

    def authenticate(self, server, session, envelope, mechanism, auth_data):
        from aiosmtpd.smtp import AuthResult

        self.logins.append((auth_data.login, auth_data.password))
        return AuthResult(success=auth_data.password == b"pw", handled=False)


def start_smtp(mailbox: Mailbox, **kwargs):
    from aiosmtpd.controller import Controller

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    controller = Controller(
        mailbox, hostname="127.0.0.1", port=port, authenticator=mailbox.authenticate, **kwargs
    )
    controller.start()
    return controller, port


def test_email_over_starttls_with_login(certificate, monkeypatch) -> None:
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    mailbox = Mailbox()
    controller, port = start_smtp(
        mailbox,
        tls_context=server_tls,
        require_starttls=True,
        auth_required=True,
        auth_exclude_mechanism=["LOGIN"],
    )
    monkeypatch.setenv("SMTP_PW", "pw")
    config = {
        "host": "127.0.0.1",
        "port": port,
        "starttls": True,
        "ca_file": str(cert),
        "username": "alerts",
        "password_env": "SMTP_PW",
        "sender": "ledger@example.com",
        "to": ["ops@example.com", "lead@example.com"],
    }
    try:
        result = notify.send("email", config, MESSAGE, idempotency_key="7:firing:1:mail")
        assert result.ok, result.error
        assert result.status_code == 250
        [(sender, rcpts, raw)] = mailbox.messages
        assert sender == "ledger@example.com"
        assert rcpts == ["ops@example.com", "lead@example.com"]
        assert mailbox.logins == [(b"alerts", b"pw")]
        mail = message_from_bytes(raw, policy=policy.default)
        assert (
            mail["Subject"] == "[CRITICAL] firing: search failures — failure rate 12.5% over 5 min"
        )
        assert mail["Message-ID"] == "<7.firing.1.mail@inferledger>"
        assert mail["X-InferLedger-Idempotency-Key"] == "7:firing:1:mail"
        body = mail.get_content()
        for fact in (
            "Scope: team=search, route=/ask",
            "Owner: ops@example.com",
            f"Link: {MESSAGE['link']}",
            "Since: 2026-03-02T12:02:00+00:00",
        ):
            assert fact in body

        # a wrong password is a result with the server's code, not an exception
        monkeypatch.setenv("SMTP_PW", "nope")
        denied = notify.send("email", config, MESSAGE, idempotency_key="k")
        assert not denied.ok and denied.status_code == 535 and "SMTP 535" in denied.error
        # without STARTTLS the server refuses (it requires it)
        plain = notify.send("email", {**config, "starttls": False}, MESSAGE, idempotency_key="k")
        assert not plain.ok
        # an untrusted certificate fails the TLS handshake, clearly
        untrusted = notify.send("email", {**config, "ca_file": ""}, MESSAGE, idempotency_key="k")
        assert not untrusted.ok and "certificate" in untrusted.error.lower()
    finally:
        controller.stop()
    assert len(mailbox.messages) == 1


def test_email_refused_connection_is_a_result() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = notify.send(
        "email",
        {"host": "127.0.0.1", "port": port, "sender": "a@b", "to": ["c@d"]},
        MESSAGE,
        idempotency_key="k",
        timeout_s=2,
    )
    assert not result.ok and result.error.startswith("SMTP failed")
    no_rcpt = notify.send(
        "email", {"host": "127.0.0.1", "sender": "a@b"}, MESSAGE, idempotency_key="k"
    )
    assert not no_rcpt.ok and "no recipients" in no_rcpt.error
