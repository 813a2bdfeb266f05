"""One error hierarchy. The HTTP layer and the CLI each map it to one clear answer."""

from __future__ import annotations


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line of at most `limit` characters (its class name when it has no
    text), for logs and error records that must stay one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class InferLedgerError(Exception):
    """Base of every error the product raises on purpose. ``str(exc)`` is user-facing."""

    http_status = 500


class SettingsError(InferLedgerError):
    """A setting or config file is invalid; the CLI prints one line and exits 2."""

    http_status = 400


class StorageError(InferLedgerError):
    """The database cannot be opened, migrated, read or written."""


class QueryError(StorageError):
    """A statement failed in the engine (bad SQL, a type or conversion error); the engine's
    message is kept."""


class ConstraintError(QueryError):
    """A statement broke a key, uniqueness, NOT NULL or CHECK constraint."""


class SchemaTooNewError(StorageError):
    """The database file was written by a newer InferLedger."""


class QueryTimeoutError(StorageError):
    http_status = 504


class QueueFullError(StorageError):
    """The writer's bounded queue has no room; ingest answers 503 with Retry-After."""

    http_status = 503


class BadInputError(InferLedgerError):
    """Input that cannot be accepted; nothing from it was written."""

    http_status = 400


class PayloadTooLargeError(BadInputError):
    http_status = 413


class UnsupportedMediaTypeError(BadInputError):
    http_status = 415


class UnauthorizedError(InferLedgerError):
    http_status = 401
