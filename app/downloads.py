"""``GET /download/views/<name>?from=<ISO>&to=<ISO>&format=csv|parquet|jsonl``: one analyst view's
rows over [from, to) as a file attachment, for a signed-in analyst or admin (issue #14;
docs/exports.md). The view catalog links here.

Sign-in: the guard (app/auth/guard.py) sends a signed-out browser to /login?next=... (this is a
page-like GET); this route then needs the analyst role: a viewer gets 403. While sign-in is off
everyone may download, as everyone may open every page.

The rows are written by DuckDB's COPY (ledger/exports.py) to a temporary file, which is opened,
unlinked at once (nothing is left behind whatever happens next) and sent in blocks. At most
:data:`MAX_CONCURRENT` downloads run at a time; another one is answered 503 with Retry-After.
Errors are one line of plain text: 400 a bad parameter, 404 an unknown view, 504 an export
that ran past exports.timeout_s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from datetime import datetime
from typing import TYPE_CHECKING, BinaryIO

import flask

from app.auth.pages import forbidden_message
from app.auth.session import current_user, enabled
from inferledger.core.errors import BadInputError, InferLedgerError, QueryTimeoutError, one_line
from inferledger.core.times import parse_utc
from ledger import exports
from ledger.catalog import ANALYST_VIEWS
from ledger.users import Role

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

log = logging.getLogger("app.downloads")

PATH = "/download/views/<name>"
_ENDPOINT = "download_view"
MAX_CONCURRENT = 2


def download_url(view: str, fmt: str, start: str | None = None, end: str | None = None) -> str:
    """The URL of a view's download (what the catalog links to)."""
    from urllib.parse import urlencode

    query = {k: v for k, v in (("from", start), ("to", end), ("format", fmt)) if v}
    return f"/download/views/{view}?{urlencode(query)}"


def _text(status: int, message: str, **headers: str) -> flask.Response:
    return flask.Response(
        message + "\n",
        status=status,
        content_type="text/plain; charset=utf-8",
        headers={"Cache-Control": "no-store", **headers},
    )


def register_downloads(server: flask.Flask, storage: Storage, *, timeout_s: float) -> None:
    """Add the download route to the Flask server (once; a second call is a no-op)."""
    if _ENDPOINT in server.view_functions:
        return
    slots = threading.BoundedSemaphore(MAX_CONCURRENT)

    def download(name: str) -> flask.Response:
        user = current_user()
        if enabled():
            if user is None:
                return _text(401, "Sign in first.")
            if not user.role.allows(Role.ANALYST):
                log.warning(
                    "refused download of %r for %s (%s)", name[:80], user.name, user.role.value
                )
                return _text(403, forbidden_message(user, Role.ANALYST, "Downloading a view"))
        args = flask.request.args
        try:
            exports.check_view(name)
            fmt = exports.check_format(args.get("format", "csv"))
            start = parse_utc(args["from"], "from") if args.get("from") else None
            end = parse_utc(args["to"], "to") if args.get("to") else None
            exports.check_range(name, start, end)
        except BadInputError as exc:
            status = 404 if name not in ANALYST_VIEWS else 400
            return _text(status, str(exc))
        if not slots.acquire(blocking=False):
            return _text(
                503, "Other downloads are running; try again in a minute.", **{"Retry-After": "30"}
            )
        try:
            handle = _export_to_unlinked_file(storage, name, fmt, start, end, timeout_s)
        except QueryTimeoutError as exc:
            return _text(504, f"The export took too long and was stopped: {exc}")
        except (InferLedgerError, OSError) as exc:
            log.error("download of %s failed: %s", name, one_line(exc))
            return _text(500, f"The export failed: {one_line(exc)}")
        finally:
            slots.release()
        log.info(
            "%s downloaded %s (%s) from %s to %s",
            user.name if user else "-", name, fmt,
            start.isoformat() if start else "the start", end.isoformat() if end else "now",
        )  # fmt: skip
        resp = flask.send_file(
            handle,
            mimetype=exports.MEDIA_TYPES[fmt],
            as_attachment=True,
            download_name=exports.file_name(name, fmt, start, end),
            max_age=0,
        )
        resp.headers["Cache-Control"] = "no-store"
        return resp

    server.add_url_rule(PATH, _ENDPOINT, download, methods=["GET"])


def _export_to_unlinked_file(
    storage: Storage,
    view: str,
    fmt: str,
    start: datetime | None,
    end: datetime | None,
    timeout_s: float,
) -> BinaryIO:
    """Export to a temporary file and return it opened for reading, already unlinked."""
    folder = tempfile.mkdtemp(prefix="inferledger-download-")
    path = os.path.join(folder, f"export.{fmt}")
    try:
        exports.export_view(
            storage, view, fmt, path, start, end, overwrite=True, timeout_s=timeout_s
        )
        return open(path, "rb")  # the response closes it
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(folder)
