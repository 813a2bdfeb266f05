"""Per-user API tokens for the read-only API (issue #12, ``GET /api/v1/budgets``).

A token is ``ilt_`` + 43 URL-safe characters (``secrets.token_urlsafe(32)``: 256 random bits),
shown once when made; only its SHA-256 is stored, with its first 8 characters (``prefix``) to
name it in lists. A request sends ``Authorization: Bearer <token>``. A token works while it is
not revoked and its user exists and is not disabled; it acts with its user's role. Its
``last_used_at`` is written at most once a minute, queued to the writer without waiting.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from inferledger.core.errors import BadInputError, StorageError, UnauthorizedError
from ledger.schema import api_tokens
from ledger.schema import users as users_table
from ledger.users import User, get_user, normalize_name

if TYPE_CHECKING:
    from inferledger.core.storage import Storage, Transaction

log = logging.getLogger("ledger.api_tokens")

TOKEN_PREFIX = "ilt_"
PREFIX_CHARS = 8
#: A well-formed token: the prefix and 43 URL-safe base64 characters.
_TOKEN = re.compile(r"ilt_[A-Za-z0-9_-]{43}")
#: last_used_at is not rewritten more often than this.
TOUCH_EVERY = timedelta(minutes=1)
MAX_LABEL = 100


class TokenError(BadInputError):
    """A token change that cannot be made; nothing was written."""


class UnknownTokenError(TokenError):
    http_status = 404


class TokenRefused(UnauthorizedError):
    """A request's token does not authenticate it; ``str(exc)`` is safe to send back."""


@dataclass(frozen=True)
class ApiToken:
    token_id: int
    user_name: str
    label: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


_COLUMNS = (
    api_tokens.c.token_id,
    api_tokens.c.user_name,
    api_tokens.c.label,
    api_tokens.c.prefix,
    api_tokens.c.created_at,
    api_tokens.c.last_used_at,
    api_tokens.c.revoked_at,
)


def _token(row: Sequence[Any]) -> ApiToken:
    return ApiToken(*row)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(storage: Storage, user: str, label: str, *, by: str) -> str:
    """Make a token for `user` (who must exist and not be disabled) and return it: the only
    time it is shown. TokenError when the user is unknown or disabled or the label is empty."""
    name = normalize_name(user)
    if not isinstance(label, str) or not label.strip():
        raise TokenError("a token needs a label (what uses it, e.g. 'ci-budget-gate')")
    label = label.strip()
    if len(label) > MAX_LABEL:
        raise TokenError(f"a token label is at most {MAX_LABEL} characters")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)

    def op(tx: Transaction) -> None:
        u = users_table.c
        row = tx.run(sa.select(u.disabled).where(u.name == name)).fetchone()
        if row is None:
            raise TokenError(f"no user {name!r}: add the user first")
        if row[0]:
            raise TokenError(f"user {name!r} is disabled: enable the user first")
        tx.run(
            sa.insert(api_tokens).values(
                user_name=name,
                label=label,
                token_hash=token_hash(token),
                prefix=token[:PREFIX_CHARS],
            )
        )

    storage.write(op)
    log.info("api token %s... made for %s (%s) by %s", token[:PREFIX_CHARS], name, label, by)
    return token


def list_tokens(storage: Storage, user: str | None = None) -> list[ApiToken]:
    """Tokens, newest first (all users', or one's), revoked ones included."""
    stmt = sa.select(*_COLUMNS).order_by(api_tokens.c.token_id.desc())
    if user is not None:
        stmt = stmt.where(api_tokens.c.user_name == normalize_name(user))
    return [_token(r) for r in storage.select(stmt)]


def revoke_token(storage: Storage, token_id: int, *, by: str) -> ApiToken:
    """Revoke a token: it stops working at once. UnknownTokenError / TokenError otherwise."""
    c = api_tokens.c

    def op(tx: Transaction) -> ApiToken:
        row = tx.run(sa.select(*_COLUMNS).where(c.token_id == token_id)).fetchone()
        if row is None:
            raise UnknownTokenError(f"no API token #{token_id}")
        if row[6] is not None:
            raise TokenError(f"API token #{token_id} is already revoked")
        tx.run(sa.update(api_tokens).where(c.token_id == token_id).values(revoked_at=sa.func.now()))
        again = tx.run(sa.select(*_COLUMNS).where(c.token_id == token_id)).fetchone()
        assert again is not None
        return _token(again)

    revoked = storage.write(op)
    log.info(
        "api token #%s (%s) of %s revoked by %s", token_id, revoked.prefix, revoked.user_name, by
    )
    return revoked


def authenticate_token(storage: Storage, token: str | None, *, now: datetime | None = None) -> User:
    """The user a bearer token acts for; TokenRefused saying why otherwise (missing,
    malformed, unknown, revoked, user removed or disabled). Touches last_used_at."""
    if not token:
        raise TokenRefused("An API token is required: send 'Authorization: Bearer <token>'.")
    if not _TOKEN.fullmatch(token):
        raise TokenRefused("This is not an InferLedger API token (they start with 'ilt_').")
    c = api_tokens.c
    rows = storage.select(
        sa.select(c.token_id, c.user_name, c.revoked_at, c.last_used_at).where(
            c.token_hash == token_hash(token)
        )
    )
    if not rows:
        raise TokenRefused("Unknown API token.")
    token_id, user_name, revoked_at, last_used_at = rows[0]
    if revoked_at is not None:
        raise TokenRefused("This API token was revoked.")
    user = get_user(storage, user_name)
    if user is None:
        raise TokenRefused("This API token's user no longer exists.")
    if user.disabled:
        raise TokenRefused(f"User {user.name!r} is disabled; their API tokens do not work.")
    now = now or datetime.now(UTC)
    if last_used_at is None or now - last_used_at >= TOUCH_EVERY:
        # Queued, not awaited: a request never waits on the writer for this, and a full
        # queue (ingest under load) skips this touch rather than refusing the request.
        try:
            storage.submit(
                lambda tx: tx.run(
                    sa.update(api_tokens).where(c.token_id == token_id).values(last_used_at=now)
                )
            )
        except StorageError as exc:
            log.warning("api token #%s: last_used_at not recorded (%s)", token_id, exc)
    return user


def user_for_token(storage: Storage, token: str | None) -> User | None:
    """The user a bearer token acts for, or None when it does not authenticate."""
    try:
        return authenticate_token(storage, token)
    except TokenRefused:
        return None
