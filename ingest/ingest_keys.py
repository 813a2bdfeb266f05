"""The ingest-key check shared by every ingest endpoint (/v1/traces, /v1/outcomes)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence

from inferledger.core.errors import UnauthorizedError

MISSING_KEY = "missing ingest key: send 'Authorization: Bearer <key>' or 'X-InferLedger-Key'"


def check_ingest_key(headers: Mapping[str, str], keys: Sequence[bytes]) -> None:
    """Raise UnauthorizedError unless the request carries one of `keys` (none configured:
    every request passes). ``headers`` must be case-insensitive."""
    if not keys:
        return
    given = headers.get("X-InferLedger-Key")
    auth = headers.get("Authorization") or ""
    if given is None and auth[:7].lower() == "bearer ":
        given = auth[7:].strip()
    if given is None:
        raise UnauthorizedError(MISSING_KEY)
    candidate = given.encode()
    ok = False
    for key in keys:  # no early exit: timing must not reveal which key matched
        ok |= hmac.compare_digest(candidate, key)
    if not ok:
        raise UnauthorizedError("invalid ingest key")
