"""Late outcomes stored: validated rows written through the storage gateway's single writer.

An outcome's id names one decision (ingest/outcome_parse.py gives each its id): posting the same
id with the same content again is a duplicate (counted, not an error), with other content a
conflict (OutcomeConflictError, HTTP 409), and then nothing is stored. The incoming rows are
handed to DuckDB as one Arrow table; the comparison with stored rows and the insert run there,
in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage, Transaction
from ingest.outcome_parse import Outcome


class OutcomeConflictError(BadInputError):
    """An outcome id is already stored (or repeated in the input) with other content."""

    http_status = 409


@dataclass(frozen=True)
class StoreResult:
    inserted: int
    duplicates: int


_BATCH = "incoming_outcomes"
_SCHEMA = pa.schema(
    [
        ("ord", pa.int64()),
        ("outcome_id", pa.string()),
        ("task_id", pa.string()),
        ("trace_id", pa.string()),
        ("outcome", pa.string()),
        ("review_s", pa.float64()),
        ("reviewer", pa.string()),
        ("score", pa.float64()),
        ("decided_at", pa.timestamp("us", tz="UTC")),
        ("source", pa.string()),
    ]
)
_COMPARED = ("task_id", "trace_id", "outcome", "review_s", "reviewer", "score", "decided_at")

# Stored rows that an incoming id matches, side by side with what was posted (in _COMPARED's
# order). A row posted without decided_at matches any stored time: it was dated when stored.
_EXISTING_SQL = f"""
select
    i.ord,
    i.outcome_id,
    o.task_id, i.task_id,
    o.trace_id, i.trace_id,
    o.outcome, i.outcome,
    o.review_s, i.review_s,
    o.reviewer, i.reviewer,
    o.score, i.score,
    o.decided_at::varchar, i.decided_at::varchar,
    i.task_id is not distinct from o.task_id
    and i.trace_id is not distinct from o.trace_id
    and i.outcome = o.outcome
    and i.review_s is not distinct from o.review_s
    and i.reviewer is not distinct from o.reviewer
    and i.score is not distinct from o.score
    and (i.decided_at is null or i.decided_at = o.decided_at) as same
from {_BATCH} as i
inner join outcomes as o on o.outcome_id = i.outcome_id
order by i.ord
"""

_INSERT_SQL = f"""
insert into outcomes (
    outcome_id, task_id, trace_id, outcome, review_s, reviewer, score, decided_at, source
)
select
    i.outcome_id, i.task_id, i.trace_id, i.outcome, i.review_s, i.reviewer, i.score,
    coalesce(i.decided_at, current_timestamp), i.source
from {_BATCH} as i
where not exists (select 1 from outcomes as o where o.outcome_id = i.outcome_id)
order by i.ord
"""


def unique_outcomes(outcomes: Sequence[Outcome]) -> tuple[list[Outcome], int]:
    """Drop repeats of an id within the input, and count them; a repeat with other content is
    a conflict (OutcomeConflictError)."""
    seen: dict[str, Outcome] = {}
    for o in outcomes:
        first = seen.get(o.outcome_id)
        if first is None:
            seen[o.outcome_id] = o
        elif first.content() != o.content():
            raise OutcomeConflictError(
                f"{o.origin}: id {o.outcome_id!r} is also used by {first.origin} with other "
                "content; one id names one decision, nothing was stored"
            )
    return list(seen.values()), len(outcomes) - len(seen)


def _conflict_message(outcome: Outcome, row: tuple[Any, ...]) -> str:
    diffs = []
    for i, col in enumerate(_COMPARED):
        stored, posted = row[2 + 2 * i], row[3 + 2 * i]
        if col == "decided_at" and posted is None:
            continue  # dated when first stored; any stored time matches
        if stored != posted:
            diffs.append(f"{col} stored {stored!r}, posted {posted!r}")
    return (
        f"{outcome.origin}: id {outcome.outcome_id!r} is already stored with other content "
        f"({'; '.join(diffs)}); one id names one decision: post a new decision under a new id. "
        "Nothing was stored"
    )


def store_outcomes(
    storage: Storage, outcomes: Sequence[Outcome], *, timeout_s: float | None = 60.0
) -> StoreResult:
    """Store validated outcomes in one transaction: all of them, or none (on a conflict).

    Raises OutcomeConflictError when an id is stored (or repeated in ``outcomes``) with other
    content, QueueFullError when the writer's queue has no room, TimeoutError when the write
    did not commit within ``timeout_s`` (it may still commit; posting again is safe)."""
    unique, repeated = unique_outcomes(outcomes)
    if not unique:
        return StoreResult(0, repeated)
    table = pa.Table.from_pylist(
        [
            {
                "ord": i,
                "outcome_id": o.outcome_id,
                "task_id": o.task_id,
                "trace_id": o.trace_id,
                "outcome": o.outcome,
                "review_s": o.review_s,
                "reviewer": o.reviewer,
                "score": o.score,
                "decided_at": o.decided_at,
                "source": o.source,
            }
            for i, o in enumerate(unique)
        ],
        schema=_SCHEMA,
    )

    def op(tx: Transaction) -> StoreResult:
        with tx.arrow_inputs({_BATCH: table}):
            existing = tx.execute(_EXISTING_SQL).fetchall()
            for row in existing:
                if not row[-1]:
                    raise OutcomeConflictError(_conflict_message(unique[row[0]], row))
            tx.execute(_INSERT_SQL)
        return StoreResult(len(unique) - len(existing), repeated + len(existing))

    return storage.write(op, units=len(unique), timeout_s=timeout_s)
