"""Channel senders for alert notifications (issue #12): a generic webhook (JSON, HMAC-SHA256
signature), a Slack-compatible incoming webhook, and email over SMTP (STARTTLS, auth).

Pure network: this module imports nothing of ours. The outbox (ledger/outbox.py) decides what
to send and when; the dispatcher (inferledger/alerting.py) calls :func:`send` and marks the
result. :func:`send` never raises for a delivery failure: a refused connection, a timeout, a
non-2xx answer, a missing secret all come back as ``DeliveryResult(ok=False, error=...)``.

The message is a flat JSON object (docs/alerts.md, "The message"): ``idempotency_key``,
``event``, ``rule``, ``kind``, ``severity``, ``summary``, ``scope``, ``value``, ``threshold``,
``peak_value``, ``since``, ``owner``, ``link``, ... Missing keys are tolerated (a "send test"
message carries only a few).

Webhook signature: ``X-InferLedger-Signature: sha256=<hex>``, the HMAC-SHA256 with the
channel's secret of ``f"{timestamp}.{body}"``, where ``timestamp`` is the
``X-InferLedger-Timestamp`` header (Unix seconds) and ``body`` the raw request body. A receiver
recomputes it, compares in constant time, and rejects old timestamps (replay).
"""

from __future__ import annotations

import hmac
import json
import os
import re
import smtplib
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import requests

KINDS: tuple[str, ...] = ("webhook", "slack", "email")
SIGNATURE_HEADER = "X-InferLedger-Signature"
TIMESTAMP_HEADER = "X-InferLedger-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"
_USER_AGENT = "InferLedger-alerts/1"


@dataclass(frozen=True)
class DeliveryResult:
    """One attempt's outcome. ``status_code``: the HTTP status, or the SMTP reply code."""

    ok: bool
    status_code: int | None = None
    error: str | None = None
    duration_s: float = 0.0


class _Undeliverable(Exception):
    """A channel that cannot be tried as configured (missing URL, unset secret variable)."""


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value: ``sha256=`` + hex HMAC-SHA256 of ``timestamp.body``."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, "sha256")
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: str, body: bytes, signature: str) -> bool:
    """What a receiver does (documented in docs/alerts.md): recompute and compare in constant
    time. Checking the timestamp's age is the receiver's choice."""
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


def send(
    kind: str,
    config: Mapping[str, Any],
    message: Mapping[str, Any],
    *,
    idempotency_key: str,
    timeout_s: float = 10.0,
) -> DeliveryResult:
    """Deliver `message` through a channel of `kind` configured by `config`. Never raises for a
    delivery failure; 2xx (HTTP) or an accepted message (SMTP) is ok."""
    started = time.perf_counter()
    try:
        if kind == "webhook":
            status, error = _webhook(config, message, idempotency_key, timeout_s)
        elif kind == "slack":
            status, error = _slack(config, message, idempotency_key, timeout_s)
        elif kind == "email":
            status, error = _email(config, message, idempotency_key, timeout_s)
        else:
            status, error = None, f"unknown channel kind {kind!r} (one of {', '.join(KINDS)})"
    except _Undeliverable as exc:
        status, error = None, str(exc)
    except requests.Timeout:
        status, error = None, f"no answer within {timeout_s:g} s (timeout)"
    except requests.ConnectionError as exc:
        status, error = None, f"cannot connect: {_one_line(exc)}"
    except requests.RequestException as exc:
        status, error = None, f"request failed: {_one_line(exc)}"
    except smtplib.SMTPResponseException as exc:
        status, error = exc.smtp_code, f"SMTP {exc.smtp_code}: {_smtp_text(exc.smtp_error)}"
    except smtplib.SMTPRecipientsRefused as exc:
        status, error = None, f"SMTP refused every recipient: {', '.join(exc.recipients)}"
    except (smtplib.SMTPException, OSError, ssl.SSLError) as exc:
        # socket.timeout and ConnectionRefusedError are OSErrors
        status, error = None, f"SMTP failed: {_one_line(exc) or type(exc).__name__}"
    duration = time.perf_counter() - started
    return DeliveryResult(ok=error is None, status_code=status, error=error, duration_s=duration)


# ---------------------------------------------------------------- formatting


def title(message: Mapping[str, Any]) -> str:
    """One line: ``[WARNING] firing: rule-name — summary``."""
    severity = str(message.get("severity") or "info").upper()
    event = message.get("event") or "notification"
    rule = message.get("rule") or "InferLedger"
    summary = message.get("summary") or ""
    head = f"[{severity}] {event}: {rule}"
    return f"{head} — {summary}" if summary else head


def facts(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The message's facts as (label, text) pairs, in reading order: what, where, how much,
    since when, who owns it, the link."""
    out: list[tuple[str, str]] = []
    if message.get("kind"):
        out.append(("Kind", str(message["kind"])))
    scope = message.get("scope") or {}
    if isinstance(scope, Mapping):
        where = ", ".join(f"{k}={v}" for k, v in scope.items() if v is not None)
        out.append(("Scope", where or "whole organisation"))
    value, threshold = message.get("value"), message.get("threshold")
    if value is not None:
        unit = message.get("unit") or ""
        text = f"{_num(value)}{unit}"
        if threshold is not None:
            text += f" (threshold {_num(threshold)}{unit})"
        if message.get("peak_value") is not None:
            text += f", peak {_num(message['peak_value'])}{unit}"
        out.append(("Value", text))
    if message.get("since"):
        out.append(("Since", str(message["since"])))
    if message.get("resolved_at"):
        out.append(("Resolved", str(message["resolved_at"])))
    if message.get("owner"):
        out.append(("Owner", str(message["owner"])))
    if message.get("link"):
        out.append(("Link", str(message["link"])))
    return out


def plain_text(message: Mapping[str, Any], idempotency_key: str) -> str:
    lines = [title(message), ""]
    lines += [f"{label}: {text}" for label, text in facts(message)]
    lines += ["", f"Idempotency key: {idempotency_key}"]
    return "\n".join(lines) + "\n"


def slack_payload(message: Mapping[str, Any], idempotency_key: str) -> dict[str, Any]:
    """A Slack incoming-webhook payload: ``text`` (the fallback, with every fact) and
    ``blocks`` (a section with the title and fields, the link, a context with the key)."""
    fact_list = facts(message)
    fields = [
        {"type": "mrkdwn", "text": f"*{label}*\n{_slack_escape(text)}"}
        for label, text in fact_list
        if label != "Link"
    ]
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"*{_slack_escape(title(message))}*"},
        }
    ]
    if fields:
        blocks.append({"type": "section", "fields": fields[:10]})  # Slack's limit per section
    if message.get("link"):
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"<{message['link']}|Open in InferLedger>"},
            }
        )
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"idempotency key `{idempotency_key}`"}],
        }
    )
    text = "\n".join(
        [title(message)]
        + [f"{label}: {value}" for label, value in fact_list]
        + [f"idempotency key {idempotency_key}"]
    )
    return {"text": text, "blocks": blocks}


# ---------------------------------------------------------------- senders


def _webhook(
    config: Mapping[str, Any], message: Mapping[str, Any], key: str, timeout_s: float
) -> tuple[int, str | None]:
    url = _required(config, "url")
    body_obj = dict(message)
    body_obj.setdefault("idempotency_key", key)
    body = json.dumps(body_obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    timestamp = str(int(time.time()))
    headers = {str(k): str(v) for k, v in (config.get("headers") or {}).items()}
    headers.update(
        {
            "Content-Type": "application/json",
            "User-Agent": _USER_AGENT,
            IDEMPOTENCY_HEADER: key,
            TIMESTAMP_HEADER: timestamp,
        }
    )
    secret = _secret(config, "secret", "secret_env")
    if secret:
        headers[SIGNATURE_HEADER] = sign(secret, timestamp, body)
    return _post(url, body, headers, timeout_s)


def _slack(
    config: Mapping[str, Any], message: Mapping[str, Any], key: str, timeout_s: float
) -> tuple[int, str | None]:
    url = _required(config, "url")
    body = json.dumps(slack_payload(message, key), separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "User-Agent": _USER_AGENT}
    return _post(url, body, headers, timeout_s)


def _post(
    url: str, body: bytes, headers: dict[str, str], timeout_s: float
) -> tuple[int, str | None]:
    resp = requests.post(url, data=body, headers=headers, timeout=timeout_s, allow_redirects=False)
    with resp:
        if 200 <= resp.status_code < 300:
            return resp.status_code, None
        snippet = " ".join(resp.text[:200].split())
        return resp.status_code, f"HTTP {resp.status_code}" + (f": {snippet}" if snippet else "")


def _email(
    config: Mapping[str, Any], message: Mapping[str, Any], key: str, timeout_s: float
) -> tuple[int, str | None]:
    host = _required(config, "host")
    port = int(config.get("port") or (465 if config.get("ssl") else 587))
    sender = _required(config, "sender")
    to = config.get("to") or []
    recipients = [to] if isinstance(to, str) else [str(x) for x in to]
    if not recipients:
        raise _Undeliverable("email channel has no recipients (config 'to')")
    username = config.get("username")
    password = _secret(config, "password", "password_env") if username else None
    context = ssl.create_default_context(cafile=config.get("ca_file") or None)

    mail = EmailMessage()
    mail["Subject"] = title(message)
    mail["From"] = sender
    mail["To"] = ", ".join(recipients)
    # The idempotency key travels as the Message-ID (mail systems drop duplicates by it) and
    # in its own header for filters.
    mail["Message-ID"] = f"<{_message_id_part(key)}@inferledger>"
    mail["X-InferLedger-Idempotency-Key"] = key
    mail.set_content(plain_text(message, key))

    smtp_cls = smtplib.SMTP_SSL if config.get("ssl") else smtplib.SMTP
    kwargs: dict[str, Any] = {"timeout": timeout_s}
    if config.get("ssl"):
        kwargs["context"] = context
    with smtp_cls(host, port, **kwargs) as smtp:
        smtp.ehlo()
        if config.get("starttls", not config.get("ssl")):
            smtp.starttls(context=context)
            smtp.ehlo()
        if username:
            if password is None:
                raise _Undeliverable("email channel has a username but no password")
            smtp.login(str(username), password)
        refused = smtp.send_message(mail, from_addr=sender, to_addrs=recipients)
    if refused:
        return 250, "SMTP refused some recipients: " + ", ".join(sorted(refused))
    return 250, None


# ---------------------------------------------------------------- helpers


def _required(config: Mapping[str, Any], name: str) -> str:
    value = config.get(name)
    if not value:
        raise _Undeliverable(f"channel config has no {name!r}")
    return str(value)


def _secret(config: Mapping[str, Any], name: str, env_name: str) -> str | None:
    """A secret given inline or, better, as the name of an environment variable, read at send
    time. A named variable that is unset is an error: sending unsigned would be worse."""
    if config.get(env_name):
        var = str(config[env_name])
        value = os.environ.get(var)
        if not value:
            raise _Undeliverable(f"environment variable {var} ({env_name}) is not set")
        return value
    value = config.get(name)
    return str(value) if value else None


def _message_id_part(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", ".", key) or "notification"


def _num(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{number:,.4g}" if abs(number) < 1e6 else f"{number:,.0f}"


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _smtp_text(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return " ".join(text.split())[:200]
