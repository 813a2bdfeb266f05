"""How the decision record and the plan comparison write numbers, money, durations and
times: "—" for a value that is unknown, so a plan saved by an earlier planner version still
renders (models/capacity/record.py, models/capacity/compare.py)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any


def usd(value: Any) -> str:
    """Dollars, with as many digits as the size of the figure needs ("—" when unknown)."""
    if not is_number(value):
        return "—"
    v = float(value)
    if abs(v) >= 100:
        return f"${v:,.0f}"
    if abs(v) >= 1 or v == 0:
        return f"${v:,.2f}"
    return f"${v:.3g}"


def number(value: Any, digits: int = 3) -> str:
    """A number with `digits` significant digits, thousands separated ("—" when unknown)."""
    if not is_number(value):
        return "—"
    v = float(value)
    if v != 0 and abs(v) < 10 ** (digits - 1):
        return f"{v:.{digits}g}"
    return f"{v:,.0f}"


def ms(seconds: Any) -> str:
    """Seconds as milliseconds ("—" when unknown)."""
    return f"{float(seconds) * 1000:,.0f} ms" if is_number(seconds) else "—"


def percent(fraction: Any) -> str:
    return f"{float(fraction) * 100:.1f} %" if is_number(fraction) else "—"


def count(n: Any, word: str) -> str:
    """'1 replica', '3 replicas' ('? replicas' when unknown)."""
    if not is_number(n):
        return f"? {word}s"
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def band(low: Any, high: Any, fmt: Any = str) -> str:
    """'low–high', or the one value when both ends agree."""
    return fmt(low) if low == high else f"{fmt(low)}–{fmt(high)}"


def is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def when(value: Any) -> str:
    """Unix seconds or ISO 8601 text as 'YYYY-MM-DD HH:MM UTC' (the text itself otherwise)."""
    if is_number(value):
        return f"{datetime.fromtimestamp(float(value), UTC):%Y-%m-%d %H:%M} UTC"
    if isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    return "—"


def compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "—"}[value]
    if is_number(value):
        return number(value) if isinstance(value, float) else f"{value}"
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), default=str)
