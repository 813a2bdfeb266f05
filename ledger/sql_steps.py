"""The one runner of the mart refreshes' SQL files: sql/marts/<file>.sql is a sequence of
statements, each after a ``-- step: <name>`` line, with ``$name`` parameters that are always
bound, never formatted in.

allocation (allocation.sql, spend.sql), unit_economics (tasks.sql) and efficiency
(efficiency_*.sql) all load and run their steps here, so a step file means the same thing
to each of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferledger.core.storage import Transaction

_STEP_RE = re.compile(r"^-- step: (\w+)\s*$", re.MULTILINE)
_PARAM_RE = re.compile(r"\$([a-z_]\w*)")
# Parameters are read from the SQL without its comments: a comment may say "$/GPU-hour".
_COMMENT_RE = re.compile(r"--[^\n]*")


@dataclass(frozen=True, slots=True)
class Step:
    """One statement of a step file and the parameters it names, in order of first use."""

    name: str
    sql: str
    params: tuple[str, ...]


@cache
def load_steps(file: str) -> tuple[Step, ...]:
    """The statements of sql/marts/<file>, in order."""
    text = resources.files("sql").joinpath("marts", file).read_text(encoding="utf-8")
    parts = _STEP_RE.split(text)  # [preamble, name1, body1, name2, body2, ...]
    steps = []
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        sql = body.strip().rstrip(";")
        params = tuple(dict.fromkeys(_PARAM_RE.findall(_COMMENT_RE.sub("", sql))))
        steps.append(Step(name, sql, params))
    return tuple(steps)


@cache
def steps_by_name(file: str) -> dict[str, Step]:
    """The steps of sql/marts/<file> by name."""
    return {step.name: step for step in load_steps(file)}


def run_step(tx: Transaction, step: Step, params: Mapping[str, Any]) -> Transaction:
    """Execute one step with the parameters it names (taken from ``params``); returns the
    transaction, to fetch what the statement returned."""
    return tx.execute(step.sql, {name: params[name] for name in step.params})


def run_steps(tx: Transaction, file: str, params: Mapping[str, Any]) -> None:
    """Run every step of sql/marts/<file>, in order."""
    for step in load_steps(file):
        run_step(tx, step, params)
