"""`inferledger outcomes import FILE.csv`: late outcomes from a CSV file.

The file is validated as a whole first (every problem named by file and line; any problem means
nothing is imported). Then, with --url, its rows are posted to a running InferLedger's
POST /v1/outcomes in batches of at most 10,000 — the usual case, since DuckDB lets one process
open the database file, and that process is the server. With --db they are written straight
into a database file that no server has open, in one transaction.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from inferledger.core.errors import BadInputError, InferLedgerError, StorageError
from inferledger.core.storage import Storage
from ingest.outcome_parse import MAX_OUTCOMES_PER_REQUEST, Outcome, parse_outcomes_csv
from ingest.outcome_receiver import ENDPOINT
from ingest.outcome_writer import StoreResult, store_outcomes, unique_outcomes

# Keep each request well under the server's body limit (ingest/outcome_receiver.py MAX_BODY_BYTES).
_BATCH_MAX_BYTES = 2 * 1024 * 1024
_RETRIES_503 = 5
_RETRY_AFTER_MAX_S = 10.0
_HTTP_TIMEOUT_S = 120.0
_BATCH_PLACE = re.compile(r"\boutcomes\[(\d+)\]")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `outcomes` command (with its `import` action) to the CLI's subparsers."""
    parser = subparsers.add_parser(
        "outcomes", help="import late outcomes (accepted, rejected, corrected) from CSV"
    )
    actions = parser.add_subparsers(dest="outcomes_command", required=True, metavar="ACTION")
    imp = actions.add_parser(
        "import",
        help="import outcomes from a CSV file",
        description=" ".join(__doc__.split("\n\n")[1].split()),
    )
    imp.add_argument(
        "csv", metavar="FILE.csv", help="header: task_id or trace_id, outcome, and optional fields"
    )
    target = imp.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--url", metavar="URL", help="a running InferLedger, e.g. http://127.0.0.1:8050"
    )
    target.add_argument(
        "--db", metavar="PATH", help="write into this database file (no server may have it open)"
    )
    imp.add_argument("--key", metavar="KEY", help="ingest key, when the server sets ingest.keys")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.key is not None and args.url is None:
        raise BadInputError("--key goes with --url (a database file needs no key)")
    outcomes = parse_outcomes_csv(args.csv)
    unique_outcomes(outcomes)  # an id used twice with other content fails before any batch
    if args.url is not None:
        result = post_outcomes(args.url, outcomes, key=args.key)
    else:
        result = _store_in_file(Path(args.db), outcomes)
    print(f"imported {result.inserted} outcomes ({result.duplicates} already present)")
    return 0


def _store_in_file(db: Path, outcomes: Sequence[Outcome]) -> StoreResult:
    if not db.exists():
        # A mistyped path must not quietly create an empty database.
        raise StorageError(f"database {str(db)!r} does not exist")
    storage = Storage(db)
    try:
        storage.open()
    except StorageError as exc:
        if "lock" not in str(exc).lower():
            raise
        raise StorageError(f"{exc} (is a server using it? Then import with --url)") from None
    try:
        return store_outcomes(storage, outcomes, timeout_s=None)
    finally:
        storage.close()


def _batches(outcomes: Sequence[Outcome]) -> Iterator[list[Outcome]]:
    batch: list[Outcome] = []
    size = 0
    for outcome in outcomes:
        doc_size = len(json.dumps(outcome.to_json())) + 2
        if batch and (len(batch) >= MAX_OUTCOMES_PER_REQUEST or size + doc_size > _BATCH_MAX_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(outcome)
        size += doc_size
    if batch:
        yield batch


def post_outcomes(url: str, outcomes: Sequence[Outcome], *, key: str | None = None) -> StoreResult:
    """POST outcomes to a server in batches; the totals of its answers. Each batch is stored
    whole or not at all; a failure stops the import after the batches already stored (running
    it again is safe: those are counted as already present)."""
    endpoint = url.rstrip("/")
    if not endpoint.endswith(ENDPOINT):
        endpoint += ENDPOINT
    if not endpoint.startswith(("http://", "https://")):
        raise BadInputError(f"--url must start with http:// or https://, got {url!r}")
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    inserted = duplicates = 0
    for batch in _batches(outcomes):
        body = json.dumps({"source": "csv", "outcomes": [o.to_json() for o in batch]}).encode()
        try:
            answer = _post(endpoint, body, headers)
        except InferLedgerError as exc:
            # The server names rows by their place in the request; the user knows file lines.
            message = _name_rows(str(exc), batch)
            if inserted or duplicates:
                message += (
                    f" (in that batch; the {inserted + duplicates} outcomes before it are "
                    "stored, and importing the file again is safe)"
                )
            raise InferLedgerError(message) from None
        inserted += int(answer["inserted"])
        duplicates += int(answer["duplicates"])
    return StoreResult(inserted, duplicates)


def _name_rows(message: str, batch: Sequence[Outcome]) -> str:
    """``outcomes[3]`` in a server's answer → ``file.csv line 5``."""

    def origin(m: re.Match[str]) -> str:
        i = int(m.group(1))
        return batch[i].origin if i < len(batch) else m.group(0)

    return _BATCH_PLACE.sub(origin, message)


def _post(endpoint: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """One batch; a 503 (the server's write queue is full) is retried after Retry-After."""
    attempt = 0
    while True:
        attempt += 1
        request = urllib.request.Request(endpoint, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT_S) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace")
            if exc.code == 503 and attempt <= _RETRIES_503:
                try:
                    wait = float(exc.headers.get("Retry-After") or 1)
                except ValueError:
                    wait = 1.0
                time.sleep(min(max(wait, 0.1), _RETRY_AFTER_MAX_S))
                continue
            try:
                message = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                message = text.strip()[:300] or exc.reason
            raise InferLedgerError(f"{endpoint} answered {exc.code}: {message}") from None
        except urllib.error.URLError as exc:
            raise InferLedgerError(f"cannot reach {endpoint}: {exc.reason}") from None
        except (OSError, ValueError) as exc:
            raise InferLedgerError(f"{endpoint}: no valid answer: {exc}") from None
