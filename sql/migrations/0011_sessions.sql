-- Schema version 11: server-side sessions (docs/security.md, "Sessions"). The session cookie
-- carries a random session id; a request is signed in only while its row exists, so signing
-- out (which deletes the row) ends the session even for a copy of the cookie taken before.
-- Only models/sessions.py and models/users.py write this table.

-- auth_sessions: one row per signed-in session. session_id is the SHA-256 (hex) of the id in
-- the cookie, so the table alone cannot be turned into working cookies. session_epoch is the
-- user's epoch at sign-in: a password change or disable moves the user's epoch on (and deletes
-- the user's rows in the same transaction), removing a user deletes its rows.
CREATE TABLE auth_sessions (
    session_id     VARCHAR PRIMARY KEY CHECK (length(session_id) = 64),
    user_name      VARCHAR NOT NULL,
    session_epoch  INTEGER NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL
);
