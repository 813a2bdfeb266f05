"""Field validators shared by models/alert_config.py's budgets, rules and channels (issue #12):
names, texts, numbers, durations, lists of names, URLs and addresses. Each raises
:class:`ConfigError` as "<where>: <what is wrong>". Pure; no I/O.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from inferledger.core.errors import SettingsError

#: What a budget or a rule can be scoped and grouped by (the marts' attribution dimensions).
DIMENSIONS: tuple[str, ...] = (
    "environment",
    "team",
    "app",
    "route",
    "workflow",
    "model",
    "deployment",
)

#: A name of a budget, rule or channel: stored comma-separated in lists (channels), shown in
#: URLs and messages, so: letters, digits and . _ - : @ + / and spaces, 1 to 100 characters.
_NAME = re.compile(r"[^\W_][\w .:@+/-]{0,99}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
WEEKDAYS: tuple[str, ...] = (
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
)
#: Thresholds are percents of the amount, in (0, MAX_THRESHOLD].
MAX_THRESHOLD = 1000.0


class ConfigError(SettingsError, ValueError):
    """A budget, rule or channel that cannot be accepted; the message says which and why.
    A SettingsError (HTTP 400, CLI exit 2) and still a ValueError for callers that catch one."""


def fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def check_keys(d: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    if not isinstance(d, Mapping):
        raise fail(where, f"expected a mapping of fields, got {type(d).__name__}")
    for key in d:
        if not isinstance(key, str) or key not in allowed:
            hint = difflib.get_close_matches(str(key), allowed, n=1)
            tip = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise fail(where, f"unknown field {key!r}{tip}")


def validate_name(value: Any, where: str, what: str = "name") -> str:
    """A valid name (see :data:`_NAME`), stripped; ConfigError otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise fail(where, f"{what} is required (a non-empty text)")
    value = value.strip()
    if not _NAME.fullmatch(value):
        raise fail(
            where,
            f"{what} {value[:60]!r} may hold letters, digits, spaces and . _ - : @ + / "
            "(1 to 100 characters, starting with a letter or digit)",
        )
    return value


def text_value(value: Any, where: str, what: str, *, required: bool = True) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise fail(where, f"{what} is required")
        return None
    if not isinstance(value, str):
        raise fail(where, f"{what} must be text, got {value!r}")
    if len(value) > 2000:
        raise fail(where, f"{what} is longer than 2000 characters")
    return value.strip()


def number_value(value: Any, where: str, what: str) -> float:
    if isinstance(value, bool) or value is None:
        raise fail(where, f"{what} must be a number, got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.strip().replace("_", ""))
        except ValueError:
            raise fail(where, f"{what} must be a number, got {value!r}") from None
    if not isinstance(value, int | float):
        raise fail(where, f"{what} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise fail(where, f"{what} must be a finite number, got {value!r}")
    return number


def integer_value(value: Any, where: str, what: str, low: int, high: int) -> int:
    number = number_value(value, where, what)
    if number != int(number) or not low <= number <= high:
        raise fail(where, f"{what} must be a whole number from {low} to {high}, got {value!r}")
    return int(number)


def bool_value(value: Any, where: str, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in (
        "true",
        "yes",
        "on",
        "false",
        "no",
        "off",
    ):
        return value.strip().lower() in ("true", "yes", "on")
    raise fail(where, f"{what} must be true or false, got {value!r}")


def parse_duration(value: Any, where: str, what: str) -> int:
    """Seconds from a number of seconds or a text like "90", "5m", "1h", "2d", "1w"."""
    if isinstance(value, str):
        m = _DURATION.fullmatch(value.strip().lower())
        if m is None:
            raise fail(
                where, f"{what} must be seconds or a duration like 5m, 1h, 2d; got {value!r}"
            )
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    else:
        seconds = number_value(value, where, what)
    if seconds < 0 or seconds > 400 * 86400 or seconds != int(seconds):
        raise fail(where, f"{what} must be whole seconds from 0 to 400 days, got {value!r}")
    return int(seconds)


def name_list(value: Any, where: str, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [p for p in value.split(",") if p.strip()]
    if not isinstance(value, list | tuple):
        raise fail(where, f"{what} must be a list of names, got {value!r}")
    names = tuple(validate_name(v, where, f"{what} entry") for v in value)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise fail(where, f"{what} lists {dupes[0]!r} twice")
    return names


def url_value(value: Any, where: str, what: str) -> str:
    text = text_value(value, where, what) or ""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise fail(where, f"{what} must be an http(s) URL, got {text[:80]!r}")
    return text


def env_name(value: Any, where: str, what: str) -> str:
    text = text_value(value, where, what) or ""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", text):
        raise fail(where, f"{what} must name an environment variable, got {text[:60]!r}")
    return text


def email_address(value: Any, where: str, what: str) -> str:
    text = text_value(value, where, what) or ""
    if not re.fullmatch(r"[^@\s,<>]+@[^@\s,<>]+\.[^@\s,<>]+", text):
        raise fail(where, f"{what} {text[:80]!r} is not an email address")
    return text


def validate_scope(value: Any, where: str, what: str = "scope") -> dict[str, str]:
    """A scope {dimension: value} over :data:`DIMENSIONS` with non-empty text values; None or
    {} is the whole organisation. Returned with its keys in DIMENSIONS order."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail(where, f"{what} must be a mapping of dimension: value, got {value!r}")
    out: dict[str, str] = {}
    for key, v in value.items():
        if key not in DIMENSIONS:
            hint = difflib.get_close_matches(str(key), DIMENSIONS, n=1)
            tip = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise fail(
                where, f"{what} has unknown dimension {key!r}{tip}; use {', '.join(DIMENSIONS)}"
            )
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        if not isinstance(v, str) or not v.strip() or len(v) > 500:
            raise fail(where, f"{what} {key} must be a non-empty text, got {v!r}")
        out[key] = v.strip()
    return {k: out[k] for k in DIMENSIONS if k in out}


def parse_thresholds(value: Any, where: str) -> tuple[float, ...]:
    """Budget thresholds: percents of the amount, strictly ascending, each in (0, 1000]; a list
    or a comma-separated text ("50,80,100")."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [p for p in value.split(",") if p.strip()]
    if not isinstance(value, list | tuple):
        raise fail(where, f"thresholds must be a list of percents, got {value!r}")
    out = tuple(number_value(v, where, "threshold") for v in value)
    for t in out:
        if not 0 < t <= MAX_THRESHOLD:
            raise fail(where, f"threshold {t:g} must be a percent above 0 and at most 1000")
    if any(b <= a for a, b in itertools.pairwise(out)):
        shown = ", ".join(f"{t:g}" for t in out)
        raise fail(where, f"thresholds must be ascending without repeats, got {shown}")
    return out


def timezone_name(value: Any, where: str) -> str:
    name = text_value(value, where, "timezone", required=False) or "UTC"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise fail(where, f"unknown timezone {name!r} (an IANA name like Europe/Paris)") from None
    return name


def instant_value(value: Any, tz: str, where: str, what: str) -> datetime:
    """An instant from a datetime, a date (00:00 that day) or ISO text; naive ones are in the
    budget's time zone."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str) and value.strip():
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise fail(where, f"{what} must be a date or an ISO datetime, got {value!r}") from None
    else:
        raise fail(where, f"{what} is required for a custom period (a date or ISO datetime)")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(tz))
    return moment.astimezone(UTC)


def week_start_value(value: Any, where: str) -> int:
    if isinstance(value, str) and value.strip().lower() in WEEKDAYS:
        return WEEKDAYS.index(value.strip().lower())
    return integer_value(
        value, where, "week_start (0 = Monday ... 6 = Sunday, or a day name)", 0, 6
    )


def params_value(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail(where, f"params must be a mapping, got {value!r}")
    out: dict[str, Any] = {}
    for key, v in value.items():
        if not isinstance(key, str) or not key:
            raise fail(where, f"params has a key that is not a name: {key!r}")
        if isinstance(v, float) and not math.isfinite(v):
            raise fail(where, f"params {key} must be finite")
        if not isinstance(v, str | int | float | bool | list) or (
            isinstance(v, list) and not all(isinstance(x, str | int | float) for x in v)
        ):
            raise fail(where, f"params {key} must be a number, text, true/false or a list")
        out[key] = v
    return out
