"""Server-side sessions: what makes a session cookie worth anything (docs/security.md).

A sign-in stores one ``auth_sessions`` row and gives the browser a random session id in the
signed cookie; a request is signed in only while that row exists, belongs to an existing user
with the same session epoch, and has not expired. Signing out deletes the row, so a copy of the
cookie taken before stops working at once (issue #17: a signed cookie alone stayed valid for
its whole lifetime). The table keeps the SHA-256 of the id, never the id itself.

A password change, disable or removal deletes the user's rows in the same transaction
(ledger/users.py); the epoch check catches any row written before that.

Every statement is a SQLAlchemy Core statement on ``ledger/schema.py``'s ``auth_sessions`` and
``users`` tables, run through ``Transaction.run`` or ``Storage.select``; no hand-written SQL is
left here.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

from ledger.schema import auth_sessions, users

# The same row shape as ledger/users.py reads, so a session's user is the same User.
from ledger.users import _USER_COLUMNS, User, _user, get_user

if TYPE_CHECKING:
    from inferledger.core.storage import Storage, Transaction

#: Random bytes in a session id (256 bits: never guessed, never collides).
SESSION_ID_BYTES = 32


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def _at(unix_s: float) -> datetime:
    return datetime.fromtimestamp(unix_s, UTC)


@dataclass(frozen=True)
class _Live:
    """What the cache knows of a live session: enough to check it against the user's row."""

    user_name: str
    epoch: int
    user_created_at: datetime
    expires_at: float  # Unix seconds


class SessionStore:
    """Sessions in the ``auth_sessions`` table, with a bounded in-memory cache in front.

    The guard checks the session at every request, and the user's row is read anyway (roles
    and disabling apply at once), so a cached session costs no read of its own: a request reads
    the session row only the first time this process sees the session (0.8 ms; the user's row,
    0.6 ms, is read either way). The cache cannot go stale, because one process owns the
    database (DESIGN.md) and every way a session ends shows in what is checked at each request:
    sign-out deletes the row and the cache entry together; a password change or disable moves
    the user's epoch on; a removed user is gone, and one added again under the same name has
    another ``created_at``."""

    def __init__(self, storage: Storage, *, max_cached: int = 10_000) -> None:
        self._storage = storage
        self._max_cached = max_cached
        self._cache: OrderedDict[str, _Live] = OrderedDict()
        # Sessions ended by this process: a request that read the row just before the sign-out
        # deleted it must not put it back in the cache (ids are random, so one never returns).
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, user: User, *, now: float, hours: int) -> str:
        """Store a new session of `user` lasting `hours` from `now` (Unix seconds); returns the
        session id for the cookie. Also records the sign-in time and drops expired sessions."""
        session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
        expires = now + hours * 3600

        def op(tx: Transaction) -> None:
            # Deleting expired rows at each sign-in keeps the table as small as the number of
            # live sessions, without a scheduled job.
            tx.run(sa.delete(auth_sessions).where(auth_sessions.c.expires_at <= _at(now)))
            tx.run(
                sa.insert(auth_sessions).values(
                    session_id=_digest(session_id),
                    user_name=user.name,
                    session_epoch=user.session_epoch,
                    created_at=_at(now),
                    expires_at=_at(expires),
                )
            )
            tx.run(
                sa.update(users)
                .where(users.c.name == user.name)
                .values(last_sign_in_at=sa.func.current_timestamp())
            )

        self._storage.write(op)
        self._remember(
            _digest(session_id), _Live(user.name, user.session_epoch, user.created_at, expires)
        )
        return session_id

    def user(self, session_id: object, *, now: float) -> User | None:
        """The user of a live session; None when the session is unknown (signed out, never
        issued), expired, or its user is gone, disabled or on another session epoch."""
        if not isinstance(session_id, str) or not session_id:
            return None
        digest = _digest(session_id)
        with self._lock:
            live = self._cache.get(digest)
            if live is not None:
                self._cache.move_to_end(digest)
        if live is None:
            user, live = self._load(digest)
            if live is None or not self._remember(digest, live):
                return None
        else:
            user = get_user(self._storage, live.user_name) if live.expires_at > now else None
        if (
            user is None
            or user.disabled
            or user.session_epoch != live.epoch
            or user.created_at != live.user_created_at
            or live.expires_at <= now
        ):
            self._forget(digest)
            return None
        return user

    def end(self, session_id: object) -> bool:
        """Delete one session (sign-out); whether it existed. It ends at once for every copy
        of its cookie."""
        if not isinstance(session_id, str) or not session_id:
            return False
        digest = _digest(session_id)
        with self._lock:
            self._cache.pop(digest, None)
            self._ended[digest] = None
            while len(self._ended) > self._max_cached:
                self._ended.popitem(last=False)

        def op(tx: Transaction) -> bool:
            found = tx.run(
                sa.delete(auth_sessions)
                .where(auth_sessions.c.session_id == digest)
                .returning(auth_sessions.c.session_id)
            ).fetchall()
            return bool(found)

        return self._storage.write(op)

    def count(self, name: str | None = None) -> int:
        """Stored sessions (of one user, or of everyone), expired ones not yet dropped
        included."""
        stmt = sa.select(sa.func.count()).select_from(auth_sessions)
        if name is not None:
            stmt = stmt.where(auth_sessions.c.user_name == name)
        rows = self._storage.select(stmt)
        return int(rows[0][0] or 0) if rows else 0

    def _load(self, digest: str) -> tuple[User | None, _Live | None]:
        # The session row and its user's row in one read; an inner join, so a session whose
        # user is gone reads as no session.
        rows = self._storage.select(
            sa.select(*_USER_COLUMNS, auth_sessions.c.session_epoch, auth_sessions.c.expires_at)
            .select_from(users.join(auth_sessions, users.c.name == auth_sessions.c.user_name))
            .where(auth_sessions.c.session_id == digest)
        )
        if not rows:
            return None, None
        user = _user(rows[0])
        epoch, expires = rows[0][-2], rows[0][-1]
        return user, _Live(user.name, int(epoch), user.created_at, expires.timestamp())

    def _remember(self, digest: str, live: _Live) -> bool:
        """Cache a live session; False when this process has ended it meanwhile."""
        with self._lock:
            if digest in self._ended:
                return False
            self._cache[digest] = live
            self._cache.move_to_end(digest)
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
            return True

    def _forget(self, digest: str) -> None:
        with self._lock:
            self._cache.pop(digest, None)
