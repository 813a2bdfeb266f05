-- Schema version 9: sign-in. Local users and their roles, the audit trail of changes to them,
-- and the server's generated session secret (docs/security.md).
-- Only models/users.py writes these tables; every change of users appends one user_changes row
-- in the same transaction (DuckDB has no triggers).

CREATE SEQUENCE user_changes_change_id_seq START 1;

-- users: one row per user. Names are lower case (models/users.py normalises them). A NULL
-- password_hash means the user signs in only through the OIDC provider. session_epoch grows at
-- every password change and every disable: a session cookie carries the epoch it was issued
-- under, so raising it signs the user out everywhere (the role is read at every request).
CREATE TABLE users (
    name             VARCHAR PRIMARY KEY CHECK (name = lower(name) AND length(name) BETWEEN 1 AND 254),
    role             VARCHAR NOT NULL CHECK (role IN ('viewer', 'analyst', 'admin')),
    password_hash    VARCHAR,                       -- 'scrypt$n=..,r=..,p=..$salt$hash' (base64)
    created_at       TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    disabled         BOOLEAN NOT NULL DEFAULT false,
    session_epoch    INTEGER NOT NULL DEFAULT 0,
    oidc_subject     VARCHAR UNIQUE,                -- the provider's `sub`, once signed in through it
    last_sign_in_at  TIMESTAMPTZ
);

-- user_changes: append-only, one row per change of users (who, when, what). Never holds a
-- password or a hash.
CREATE TABLE user_changes (
    change_id   BIGINT PRIMARY KEY DEFAULT nextval('user_changes_change_id_seq'),
    changed_at  TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    changed_by  VARCHAR NOT NULL,                   -- a user name, 'cli:<os user>', 'demo' or 'oidc'
    action      VARCHAR NOT NULL CHECK (action IN ('add', 'set_role', 'passwd', 'disable',
                                                   'enable', 'remove', 'link_oidc')),
    user_name   VARCHAR NOT NULL,                   -- may name a removed user
    detail      VARCHAR                             -- e.g. 'viewer -> admin'
);

-- auth_secrets: secrets the server generates for itself, e.g. the session-signing key used when
-- the auth.session_secret setting is empty, so that sessions survive a restart.
CREATE TABLE auth_secrets (
    name        VARCHAR PRIMARY KEY,
    value       VARCHAR NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT current_timestamp
);
