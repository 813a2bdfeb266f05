"""The dashboard's queries: named SQL files in sql/queries, run over the marts with bound
parameters (never raw spans, never SQL built from input). Pages call `run(storage, name, ...)`;
the benchmark (bench/bench_marts.py) times every query the pages name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from inferledger.core.errors import BadInputError
from models.idle_policy import DEFAULT_CHOICE, IDLE_CHOICES

if TYPE_CHECKING:
    import pyarrow as pa

    from inferledger.core.storage import Storage

DIMENSIONS = ("team", "app", "route", "model", "workflow", "deployment", "stage", "environment")
BUCKETS = ("hour", "day")
_PARAM_RE = re.compile(r"\$(\w+)")
_COMMENT_RE = re.compile(r"--[^\n]*")


class QueryError(BadInputError):
    """A dashboard query asked with a bad parameter (named in the message)."""


@dataclass(frozen=True, slots=True)
class Filters:
    """The global filters: a time range [start, end) and optional equality filters."""

    start: datetime
    end: datetime
    environment: str | None = None
    team: str | None = None
    app: str | None = None
    route: str | None = None
    model: str | None = None
    policy: str = DEFAULT_CHOICE.value

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise QueryError("start and end must carry a time zone")
        if self.end <= self.start:
            raise QueryError(f"the time range is empty: {self.start} to {self.end}")
        if self.policy not in IDLE_CHOICES:
            raise QueryError(f"idle policy must be one of {', '.join(IDLE_CHOICES)}")

    @classmethod
    def last(cls, days: float, now: datetime | None = None, **kw: Any) -> Filters:
        """The last `days` days up to the end of the current hour."""
        now = now or datetime.now(UTC)
        end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        return cls(start=end - timedelta(days=days), end=end, **kw)

    def with_(self, **kw: Any) -> Filters:
        return replace(self, **kw)

    def params(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "environment": self.environment,
            "team": self.team,
            "app": self.app,
            "route": self.route,
            "model": self.model,
            "policy": self.policy,
        }


@cache
def query_sql(name: str) -> tuple[str, tuple[str, ...]]:
    """The SQL of sql/queries/<name>.sql and the parameters it names."""
    try:
        text = resources.files("sql").joinpath("queries", f"{name}.sql").read_text("utf-8")
    except FileNotFoundError:
        raise QueryError(f"no dashboard query named {name!r}") from None
    names = tuple(dict.fromkeys(_PARAM_RE.findall(_COMMENT_RE.sub("", text))))
    return text, names


def query_names() -> list[str]:
    root = resources.files("sql").joinpath("queries")
    return sorted(e.name[: -len(".sql")] for e in root.iterdir() if e.name.endswith(".sql"))


def bind(name: str, filters: Filters, **extra: Any) -> tuple[str, dict[str, Any]]:
    """The SQL of a query and the parameters it takes, from the filters and `extra`."""
    sql, names = query_sql(name)
    if "dim" in extra and extra["dim"] not in DIMENSIONS:
        raise QueryError(f"dimension must be one of {', '.join(DIMENSIONS)}")
    if "bucket" in extra and extra["bucket"] not in BUCKETS:
        raise QueryError("bucket must be hour or day")
    values = {**filters.params(), "limit": 50, "offset": 0, **extra}
    missing = [n for n in names if n not in values]
    if missing:
        raise QueryError(f"query {name!r} needs {', '.join(missing)}")
    return sql, {n: values[n] for n in names}


def run(storage: Storage, name: str, filters: Filters, **extra: Any) -> pa.Table:
    """Run a dashboard query; the result as an Arrow table."""
    sql, params = bind(name, filters, **extra)
    return storage.query_arrow(sql, params)
