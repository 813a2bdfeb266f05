"""Users, roles and password hashes: what sign-in knows about people (docs/security.md).

A user has a lower-case name, one role (viewer < analyst < admin), an scrypt password hash (or
none: then the user signs in only through the OIDC provider), a disabled flag and a session
epoch. Every change appends a ``user_changes`` row in the same transaction; passwords and
hashes are never logged or written anywhere else.

Rules every entry point shares (CLI, admin page, OIDC): names are 1-254 characters of
``a-z 0-9 . _ @ + -`` (so an e-mail address is a name), passwords are at least
:data:`MIN_PASSWORD_LENGTH` characters, and the last enabled admin can be neither demoted,
disabled nor removed, so nobody locks everyone out of the admin pages. Each check happens on the
writer thread inside the write's transaction, so two concurrent changes cannot both pass it.

Every statement is a SQLAlchemy Core statement built on ``ledger/schema.py``'s tables (users,
user_changes, auth_secrets, auth_sessions), run through ``Transaction.run`` inside a write op
or ``Storage.select`` for a read, so the same code runs on the engine the metadata moves to. No
hand-written SQL is left here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as upsert

from inferledger.core.errors import BadInputError
from ledger.audit import audit_page
from ledger.schema import auth_secrets, auth_sessions, users
from ledger.schema import user_changes as _changes

if TYPE_CHECKING:
    from inferledger.core.storage import Storage, Transaction

MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 1024
#: scrypt cost (RFC 7914): N=2^14, r=8, p=1 takes ~16 MiB and tens of milliseconds per hash.
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
KEY_BYTES = 32
_SCRYPT_MAXMEM = 64 * 1024 * 1024
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._@+-]{0,253}$")
SESSION_SECRET_NAME = "session"
DEMO_ADMIN = "admin"


class Role(StrEnum):
    """What a user may do; each role includes the ones below it (docs/security.md)."""

    VIEWER = "viewer"
    ANALYST = "analyst"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def allows(self, needed: Role) -> bool:
        """Whether this role includes `needed`."""
        return self.rank >= needed.rank


_RANKS = {Role.VIEWER: 0, Role.ANALYST: 1, Role.ADMIN: 2}


class UserError(BadInputError):
    """A user change or sign-in that cannot be accepted; nothing was written."""


class UnknownUserError(UserError):
    http_status = 404


class SignInError(UserError):
    """Sign-in refused. ``str(exc)`` is safe to show; ``reason`` (for the log) says why."""

    http_status = 401

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


WRONG_CREDENTIALS = "Wrong user name or password."


@dataclass(frozen=True)
class User:
    name: str
    role: Role
    disabled: bool
    session_epoch: int
    created_at: datetime
    updated_at: datetime
    last_sign_in_at: datetime | None
    oidc_subject: str | None
    has_password: bool


@dataclass(frozen=True)
class UserChange:
    change_id: int
    changed_at: datetime
    changed_by: str
    action: str
    user_name: str
    detail: str | None


@dataclass(frozen=True)
class UserChangePage:
    """One page of user_changes, newest first: ``total`` rows in all, these from ``offset``."""

    changes: list[UserChange]
    offset: int
    limit: int
    total: int


# --- validation -----------------------------------------------------------------------------


def parse_role(raw: object) -> Role:
    """A role from text; a bad one is one clear line."""
    try:
        return Role(str(raw).strip().lower())
    except ValueError:
        raise UserError(
            f"role must be one of {', '.join(r.value for r in Role)}, got {raw!r}"
        ) from None


def normalize_name(raw: object) -> str:
    """A user name, lower-cased; a bad one is one clear line."""
    name = str(raw or "").strip().lower()
    if not _NAME_RE.match(name):
        raise UserError(
            f"user name {str(raw or '')!r} is not valid: use 1-254 characters of a-z, 0-9 and "
            ". _ @ + -, starting with a letter or digit"
        )
    return name


def check_password(password: str, name: str | None = None) -> None:
    """Refuse a weak password with one line (never echoing it)."""
    if not isinstance(password, str) or len(password) < MIN_PASSWORD_LENGTH:
        raise UserError(f"password too short: use at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise UserError(f"password too long: use at most {MAX_PASSWORD_LENGTH} characters")
    if name is not None and password.strip().lower() == name.lower():
        raise UserError("password must not be the user name")


# --- password hashes ------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """``scrypt$n=16384,r=8,p=1$<salt>$<key>`` (base64): the parameters travel with the hash,
    so a later change of the cost still verifies old hashes."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    key = hashlib.scrypt(
        password.encode("utf-8"),
        salt=salt,
        n=SCRYPT_N,
        r=SCRYPT_R,
        p=SCRYPT_P,
        dklen=KEY_BYTES,
        maxmem=_SCRYPT_MAXMEM,
    )
    return f"scrypt$n={SCRYPT_N},r={SCRYPT_R},p={SCRYPT_P}${_b64(salt)}${_b64(key)}"


def _parse_hash(stored: str) -> tuple[int, int, int, bytes, bytes] | None:
    try:
        algorithm, params, salt_b64, key_b64 = stored.split("$")
        if algorithm != "scrypt":
            return None
        values = dict(part.split("=", 1) for part in params.split(","))
        n, r, p = int(values["n"]), int(values["r"]), int(values["p"])
        salt = base64.b64decode(salt_b64, validate=True)
        key = base64.b64decode(key_b64, validate=True)
    except (ValueError, KeyError):
        return None
    # Bounds keep a corrupted or hostile row from making one check cost gigabytes.
    if not (2 <= n <= 2**20 and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16):
        return None
    if not 8 <= len(salt) <= 64 or len(key) != KEY_BYTES:
        return None
    return n, r, p, salt, key


def verify_password(password: str, stored: str | None) -> bool:
    """Whether `password` matches a stored hash; a malformed or missing hash never matches.
    The comparison is constant-time (hmac.compare_digest)."""
    parsed = _parse_hash(stored) if stored else None
    if parsed is None:
        return False
    n, r, p, salt, key = parsed
    try:
        candidate = hashlib.scrypt(
            password.encode("utf-8"),
            salt=salt,
            n=n,
            r=r,
            p=p,
            dklen=len(key),
            maxmem=max(_SCRYPT_MAXMEM, 256 * n * r),
        )
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(candidate, key)


@cache
def _dummy_hash() -> str:
    """A hash to check unknown users' passwords against, so a wrong name costs as long as a
    wrong password (no timing signal of which names exist)."""
    return hash_password(secrets.token_urlsafe(16))


# --- reads ----------------------------------------------------------------------------------

#: The columns :func:`_user` reads, in its order (ledger/sessions.py selects them too, so a
#: session's user is the same User). The hash itself stays out: only whether there is one.
_USER_COLUMNS: tuple[sa.ColumnElement[Any], ...] = (
    users.c.name,
    users.c.role,
    users.c.disabled,
    users.c.session_epoch,
    users.c.created_at,
    users.c.updated_at,
    users.c.last_sign_in_at,
    users.c.oidc_subject,
    users.c.password_hash.is_not(None).label("has_password"),
)


def _user(row: Sequence[Any]) -> User:
    return User(
        name=row[0],
        role=Role(row[1]),
        disabled=bool(row[2]),
        session_epoch=int(row[3]),
        created_at=row[4],
        updated_at=row[5],
        last_sign_in_at=row[6],
        oidc_subject=row[7],
        has_password=bool(row[8]),
    )


def _user_by_name(name: str | None) -> sa.Select[Any]:
    return sa.select(*_USER_COLUMNS).where(users.c.name == name)


def _count_users() -> sa.Select[Any]:
    return sa.select(sa.func.count()).select_from(users)


def get_user(storage: Storage, name: str) -> User | None:
    rows = storage.select(_user_by_name(name.lower()))
    return _user(rows[0]) if rows else None


def list_users(storage: Storage) -> list[User]:
    return [_user(r) for r in storage.select(sa.select(*_USER_COLUMNS).order_by(users.c.name))]


def count_users(storage: Storage) -> int:
    rows = storage.select(_count_users())
    return int(rows[0][0] or 0) if rows else 0


def user_changes(storage: Storage, limit: int = 50) -> list[UserChange]:
    c = _changes.c
    rows = storage.select(
        sa.select(c.change_id, c.changed_at, c.changed_by, c.action, c.user_name, c.detail)
        .order_by(c.change_id.desc())
        .limit(limit)
    )
    return [UserChange(*row) for row in rows]


def user_changes_page(storage: Storage, offset: int = 0, limit: int = 20) -> UserChangePage:
    """One page of the audit trail, newest first, and its total: the Users page reads a page at
    a time on the server rather than sending the whole trail to the browser. An offset past the
    end gives the last page."""
    c = _changes.c
    columns = (c.change_id, c.changed_at, c.changed_by, c.action, c.user_name, c.detail)
    rows, start, total = audit_page(storage, _changes, columns, offset, limit, UserError)
    return UserChangePage([UserChange(*row) for row in rows], start, limit, total)


# --- writes ---------------------------------------------------------------------------------


def _audit(tx: Transaction, by: str, action: str, name: str, detail: str | None = None) -> None:
    # inline(): the new change_id is not wanted back (no RETURNING).
    tx.run(
        sa.insert(_changes)
        .inline()
        .values(changed_by=by, action=action, user_name=name, detail=detail)
    )


def _end_sessions(tx: Transaction, name: str) -> None:
    """Delete every server-side session of a user (ledger/sessions.py), in the transaction
    of the change that ends them."""
    tx.run(sa.delete(auth_sessions).where(auth_sessions.c.user_name == name))


def _fetch(tx: Transaction, name: str) -> User:
    row = tx.run(_user_by_name(name)).fetchone()
    if row is None:
        raise UnknownUserError(f"no user named {name!r}")
    return _user(row)


def _update_user(name: str, **values: Any) -> sa.Update:
    """An update of one user's row that also stamps ``updated_at`` (every change does)."""
    return (
        sa.update(users)
        .where(users.c.name == name)
        .values(**values, updated_at=sa.func.current_timestamp())
    )


def _keep_an_admin(tx: Transaction, user: User, doing: str) -> None:
    """Refuse to take away the last enabled admin."""
    if user.role is not Role.ADMIN or user.disabled:
        return
    row = tx.run(
        _count_users().where(
            users.c.role == Role.ADMIN.value, sa.not_(users.c.disabled), users.c.name != user.name
        )
    ).fetchone()
    if not row or not row[0]:
        raise UserError(
            f"cannot {doing} {user.name!r}: it is the last enabled admin; add or enable another "
            "admin first"
        )


def add_user(
    storage: Storage,
    name: str,
    role: Role | str,
    password: str | None,
    *,
    by: str,
) -> User:
    """Add a user (password None: signs in only through the OIDC provider)."""
    name = normalize_name(name)
    role = parse_role(role)
    password_hash = None
    if password is not None:
        check_password(password, name)
        password_hash = hash_password(password)

    def op(tx: Transaction) -> User:
        if tx.run(sa.select(users.c.name).where(users.c.name == name)).fetchone():
            raise UserError(f"user {name!r} already exists")
        tx.run(sa.insert(users).values(name=name, role=role.value, password_hash=password_hash))
        _audit(tx, by, "add", name, role.value)
        return _fetch(tx, name)

    return storage.write(op)


def set_role(storage: Storage, name: str, role: Role | str, *, by: str) -> User:
    """Change a user's role; it applies at the user's next request (roles are never cached)."""
    name = normalize_name(name)
    role = parse_role(role)

    def op(tx: Transaction) -> User:
        user = _fetch(tx, name)
        if user.role is role:
            return user
        if role is not Role.ADMIN:
            _keep_an_admin(tx, user, f"make {role.value} of")
        tx.run(_update_user(name, role=role.value))
        _audit(tx, by, "set_role", name, f"{user.role.value} -> {role.value}")
        return _fetch(tx, name)

    return storage.write(op)


def set_password(storage: Storage, name: str, password: str, *, by: str) -> User:
    """Set a new password; every session of the user ends (its rows are deleted and its epoch
    moves on)."""
    name = normalize_name(name)
    check_password(password, name)
    password_hash = hash_password(password)

    def op(tx: Transaction) -> User:
        _fetch(tx, name)
        tx.run(
            _update_user(name, password_hash=password_hash, session_epoch=users.c.session_epoch + 1)
        )
        _end_sessions(tx, name)
        _audit(tx, by, "passwd", name)
        return _fetch(tx, name)

    return storage.write(op)


def set_disabled(storage: Storage, name: str, disabled: bool, *, by: str) -> User:
    """Disable (ending every session) or enable a user."""
    name = normalize_name(name)

    def op(tx: Transaction) -> User:
        user = _fetch(tx, name)
        if user.disabled == disabled:
            return user
        if disabled:
            _keep_an_admin(tx, user, "disable")
        tx.run(_update_user(name, disabled=disabled, session_epoch=users.c.session_epoch + 1))
        _end_sessions(tx, name)
        _audit(tx, by, "disable" if disabled else "enable", name)
        return _fetch(tx, name)

    return storage.write(op)


def remove_user(storage: Storage, name: str, *, by: str) -> None:
    """Remove a user; its sessions end (the guard finds no user). The audit trail stays."""
    name = normalize_name(name)

    def op(tx: Transaction) -> None:
        user = _fetch(tx, name)
        _keep_an_admin(tx, user, "remove")
        tx.run(sa.delete(users).where(users.c.name == name))
        # A user added again later under this name starts at epoch 0 again: without this, a
        # cookie of the removed user (epoch 0) would open the new user's session.
        _end_sessions(tx, name)
        _audit(tx, by, "remove", name, user.role.value)

    storage.write(op)


# --- sign-in --------------------------------------------------------------------------------


def authenticate(storage: Storage, name: str, password: str) -> User:
    """The user whose name and password these are, or SignInError. A disabled user is refused
    only after the right password, so the answer never tells which names exist."""
    try:
        key: str | None = normalize_name(name)
    except UserError:
        key = None
    rows = storage.select(_user_by_name(key).add_columns(users.c.password_hash)) if key else []
    user = _user(rows[0]) if rows else None
    stored = rows[0][-1] if rows else None
    if len(password) > MAX_PASSWORD_LENGTH:
        raise SignInError(WRONG_CREDENTIALS, "password over the length limit")
    matched = verify_password(password, stored or _dummy_hash())
    if user is None:
        raise SignInError(WRONG_CREDENTIALS, "unknown user")
    if stored is None:
        raise SignInError(WRONG_CREDENTIALS, "user has no password (OIDC only)")
    if not matched:
        raise SignInError(WRONG_CREDENTIALS, "wrong password")
    if user.disabled:
        raise SignInError("This account is disabled; ask an admin to enable it.", "disabled")
    return user


def oidc_user(storage: Storage, *, email: str, subject: str) -> User:
    """The local user for an identity the OIDC provider vouched for: the user linked to its
    subject, else the user named as its e-mail address (linked now), else a new viewer (no
    password). The caller refuses a disabled user."""
    if not subject:
        raise UserError("the provider's ID token has no subject")
    name = normalize_name(email)

    def op(tx: Transaction) -> User:
        row = tx.run(sa.select(users.c.name).where(users.c.oidc_subject == subject)).fetchone()
        if row:
            return _fetch(tx, row[0])
        existing = tx.run(sa.select(users.c.oidc_subject).where(users.c.name == name)).fetchone()
        if existing is None:
            tx.run(sa.insert(users).values(name=name, role=Role.VIEWER.value, oidc_subject=subject))
            _audit(tx, "oidc", "add", name, "viewer (first sign-in through the provider)")
        elif existing[0] is None:
            tx.run(_update_user(name, oidc_subject=subject))
            _audit(tx, "oidc", "link_oidc", name)
        else:
            raise UserError(f"user {name!r} is linked to another identity at the provider")
        return _fetch(tx, name)

    return storage.write(op)


# --- secrets and the demo -------------------------------------------------------------------


def session_secret(storage: Storage) -> str:
    """The generated session-signing key kept in the database (created at first use), used
    when the auth.session_secret setting is empty: sessions survive restarts."""
    read = sa.select(auth_secrets.c.value).where(auth_secrets.c.name == SESSION_SECRET_NAME)
    rows = storage.select(read)
    if rows:
        return str(rows[0][0])
    fresh = secrets.token_hex(32)

    def op(tx: Transaction) -> str:
        # Another caller may have written it since the read: the first value written wins.
        tx.run(
            upsert(auth_secrets)
            .values(name=SESSION_SECRET_NAME, value=fresh)
            .on_conflict_do_nothing()
        )
        row = tx.run(read).fetchone()
        assert row is not None
        return str(row[0])

    return storage.write(op)


def ensure_demo_admin(storage: Storage) -> str | None:
    """When no user exists, add the admin `admin` with a random password and return the
    password (to print once; only its hash is stored). None when users exist already."""
    if count_users(storage):
        return None
    password = secrets.token_urlsafe(12)
    password_hash = hash_password(password)

    def op(tx: Transaction) -> bool:
        row = tx.run(_count_users()).fetchone()
        if row and row[0]:
            return False
        tx.run(
            sa.insert(users).values(
                name=DEMO_ADMIN, role=Role.ADMIN.value, password_hash=password_hash
            )
        )
        _audit(tx, "demo", "add", DEMO_ADMIN, "admin (demo admin)")
        return True

    return password if storage.write(op) else None
