"""``GET /download/views/<name>?from=<ISO>&to=<ISO>&format=csv|parquet|jsonl``: one analyst view's
rows over [from, to) as a file attachment, for a signed-in analyst or admin (issue #14;
docs/exports.md). The view catalog links here. ``GET /download/focus?version=1.2|1.3&from=&to=
&format=csv|parquet``: the FOCUS cost export of those hours (ledger/focus.py, docs/focus.md),
for the same roles, while the server holds the database (the CLI cannot then open it).
``GET /download/snapshot``: every analyst view as a table of a standalone DuckDB file, read in
one transaction (ledger/snapshot.py, docs/sql-console.md), for an analyst's own DuckDB, notebook
or BI tool while the service runs.

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
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, BinaryIO

import flask

from app.auth.pages import forbidden_message
from app.auth.session import current_user, enabled
from inferledger.core.errors import BadInputError, InferLedgerError, QueryTimeoutError, one_line
from inferledger.core.times import parse_utc
from ledger import exports
from ledger.catalog import ANALYST_VIEWS
from ledger.focus import FOCUS_FORMATS, FOCUS_VERSIONS, export_focus
from ledger.snapshot import build_snapshot
from ledger.users import Role

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

log = logging.getLogger("app.downloads")

PATH = "/download/views/<name>"
FOCUS_PATH = "/download/focus"
SNAPSHOT_PATH = "/download/snapshot"
_ENDPOINT = "download_view"
MAX_CONCURRENT = 2


def download_url(view: str, fmt: str, start: str | None = None, end: str | None = None) -> str:
    """The URL of a view's download (what the catalog links to)."""
    from urllib.parse import urlencode

    query = {k: v for k, v in (("from", start), ("to", end), ("format", fmt)) if v}
    return f"/download/views/{view}?{urlencode(query)}"


def focus_url(version: str, fmt: str, start: str, end: str) -> str:
    """The URL of a FOCUS export's download (what the Views page links to)."""
    from urllib.parse import urlencode

    query = {"version": version, "from": start, "to": end, "format": fmt}
    return f"{FOCUS_PATH}?{urlencode(query)}"


def _text(status: int, message: str, **headers: str) -> flask.Response:
    return flask.Response(
        message + "\n",
        status=status,
        content_type="text/plain; charset=utf-8",
        headers={"Cache-Control": "no-store", **headers},
    )


def register_downloads(server: flask.Flask, storage: Storage, *, timeout_s: float) -> None:
    """Add the download routes to the Flask server (once; a second call is a no-op)."""
    if _ENDPOINT in server.view_functions:
        return
    slots = threading.BoundedSemaphore(MAX_CONCURRENT)

    def refused(what: str) -> flask.Response | None:
        """401/403 for a signed-out user or one below analyst (sign-in on); None to go on."""
        user = current_user()
        if not enabled():
            return None
        if user is None:
            return _text(401, "Sign in first.")
        if not user.role.allows(Role.ANALYST):
            log.warning("refused download of %r for %s (%s)", what, user.name, user.role.value)
            return _text(403, forbidden_message(user, Role.ANALYST, "Downloading an export"))
        return None

    def send(write: Callable[[str], object], fmt: str, mimetype: str, name: str) -> flask.Response:
        """Run `write(path)` into a temporary file (one of MAX_CONCURRENT at a time) and send
        the file as an attachment named `name`; 503/504/500 as one line when it cannot."""
        if not slots.acquire(blocking=False):
            return _text(
                503, "Other downloads are running; try again in a minute.", **{"Retry-After": "30"}
            )
        try:
            handle = _to_unlinked_file(write, fmt)
        except QueryTimeoutError as exc:
            return _text(504, f"The export took too long and was stopped: {exc}")
        except (InferLedgerError, OSError) as exc:
            log.error("download of %s failed: %s", name, one_line(exc))
            return _text(500, f"The export failed: {one_line(exc)}")
        finally:
            slots.release()
        user = current_user()
        log.info("%s downloaded %s", user.name if user else "-", name)
        resp = flask.send_file(
            handle, mimetype=mimetype, as_attachment=True, download_name=name, max_age=0
        )
        resp.headers["Cache-Control"] = "no-store"
        return resp

    def download(name: str) -> flask.Response:
        refusal = refused(name[:80])
        if refusal is not None:
            return refusal
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
        return send(
            lambda path: exports.export_view(
                storage, name, fmt, path, start, end, overwrite=True, timeout_s=timeout_s
            ),
            fmt,
            exports.MEDIA_TYPES[fmt],
            exports.file_name(name, fmt, start, end),
        )

    def download_focus() -> flask.Response:
        refusal = refused("focus")
        if refusal is not None:
            return refusal
        args = flask.request.args
        version, fmt = args.get("version", "1.3"), args.get("format", "csv")
        try:
            if version not in FOCUS_VERSIONS:
                raise BadInputError(
                    f"unknown FOCUS version {version[:20]!r} (one of {', '.join(FOCUS_VERSIONS)})"
                )
            if fmt not in FOCUS_FORMATS:
                raise BadInputError(
                    f"unknown format {fmt[:20]!r} (one of {', '.join(FOCUS_FORMATS)})"
                )
            if not args.get("from") or not args.get("to"):
                raise BadInputError("give from and to (ISO 8601; the hours starting in [from, to))")
            start, end = parse_utc(args["from"], "from"), parse_utc(args["to"], "to")
            if end <= start:
                raise BadInputError(
                    f"to ({args['to'][:40]}) must be after from ({args['from'][:40]})"
                )
        except BadInputError as exc:
            return _text(400, str(exc))
        return send(
            lambda path: export_focus(storage, version, start, end, path, fmt),
            fmt,
            exports.MEDIA_TYPES[fmt],
            f"inferledger-focus-{version}_{start:%Y-%m-%dT%H%M}_{end:%Y-%m-%dT%H%M}.{fmt}",
        )

    def download_snapshot() -> flask.Response:
        refusal = refused("snapshot")
        if refusal is not None:
            return refusal
        if flask.request.args:
            return _text(400, "the snapshot takes no parameters: it holds every analyst view whole")
        return send(
            lambda path: build_snapshot(storage, path, timeout_s=timeout_s),
            "duckdb",
            "application/octet-stream",
            f"inferledger-views_{datetime.now(UTC):%Y-%m-%dT%H%M}.duckdb",
        )

    server.add_url_rule(PATH, _ENDPOINT, download, methods=["GET"])
    server.add_url_rule(SNAPSHOT_PATH, "download_snapshot", download_snapshot, methods=["GET"])
    server.add_url_rule(FOCUS_PATH, "download_focus", download_focus, methods=["GET"])


def _to_unlinked_file(write: Callable[[str], object], fmt: str) -> BinaryIO:
    """Run `write(path)` into a temporary file and return it opened for reading, already
    unlinked (nothing is left behind whatever happens next)."""
    folder = tempfile.mkdtemp(prefix="inferledger-download-")
    path = os.path.join(folder, f"export.{fmt}")
    try:
        write(path)
        return open(path, "rb")  # the response closes it
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(folder)
