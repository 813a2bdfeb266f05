"""Workload profiles for the capacity planner (issue #13): typed in (YAML/JSON mappings),
validated, edited, and written back; the SLO targets likewise. The scenario knobs that edit a
profile are knobs.py's; the pools it is grouped into and the simulator's requests, pools.py's.

A profile measured from the ledger comes from ledger/capacity_profile.py; this module is pure.

Typed-in apps (profile_from_mapping) give their traffic as ONE of
    hourly_requests: 168 values (Monday 00:00 UTC first)
    requests_per_hour: a flat number for every hour of the week
    daily: 24 values (00:00 UTC first), optionally with weekday: 7 factors (Monday first)
and their lengths as ONE of
    lengths: a list of [prompt_tokens, output_tokens] pairs (a joint sample)
    prompt_tokens + output_tokens: means; the app then has ONE sample of exactly those lengths
        (no spread is invented: a typed mean is simulated as a fixed length)
`sources` (field -> measured | calibrated | assumed) is optional; without it every field of
the app is "assumed" (a default is an assumption too). When given it is taken as it is, so
profile_to_mapping -> profile_from_mapping round-trips exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from inferledger.core.errors import BadInputError
from models.capacity.types import (
    HOURS_OF_WEEK,
    AppProfile,
    Slo,
    SloClass,
    Source,
    WorkloadProfile,
)
from models.model_catalog import get_model

#: joint (prompt, output) samples kept per app (the ledger's sample, typed-in lists)
MAX_LENGTH_SAMPLES = 2000
#: AppProfile fields a source can be recorded for
SOURCE_FIELDS = (
    "model",
    "slo_class",
    "hourly_requests",
    "lengths",
    "burstiness",
    "prefix_len",
    "prefix_hit_rate",
    "acceptance_rate",
    "requests_per_task",
)
_TRAFFIC_KEYS = ("hourly_requests", "requests_per_hour", "daily")
_APP_KEYS = frozenset(
    {
        "app",
        "model",
        "slo_class",
        *_TRAFFIC_KEYS,
        "weekday",
        "lengths",
        "prompt_tokens",
        "output_tokens",
        "burstiness",
        "prefix_len",
        "prefix_hit_rate",
        "acceptance_rate",
        "requests_per_task",
        "history",
        "history_start",
        "sources",
    }
)
_SLO_KEYS = {"ttft_p95_ms": "ttft_p95_s", "itl_p95_ms": "itl_p95_s", "e2e_p95_ms": "e2e_p95_s"}


# --- small checks: one line naming the field ------------------------------------------------


def number(where: str, value: Any, low: float | None = None, *, above: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadInputError(f"{where} must be a number, got {value!r}")
    if low is not None and (value < low or (above and value == low)):
        raise BadInputError(f"{where} must be {'>' if above else '>='} {low}, got {value}")
    return float(value)


def _integer(where: str, value: Any, low: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInputError(f"{where} must be an integer, got {value!r}")
    if value < low:
        raise BadInputError(f"{where} must be >= {low}, got {value}")
    return value


def _numbers(where: str, value: Any, count: int | None = None) -> tuple[float, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise BadInputError(f"{where} must be a list of numbers")
    if count is not None and len(value) != count:
        raise BadInputError(f"{where} needs {count} values, got {len(value)}")
    return tuple(number(f"{where}[{i}]", v, 0) for i, v in enumerate(value))


def mapping(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise BadInputError(f"{where} must be a mapping")
    return value


def names(where: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise BadInputError(f"{where} must be a list of names")
    for i, v in enumerate(value):
        if not isinstance(v, str) or not v.strip():
            raise BadInputError(f"{where}[{i}] must be a non-empty name, got {v!r}")
    return tuple(value)


def unknown(where: str, data: Mapping[str, Any], known: Sequence[str] | frozenset[str]) -> None:
    extra = sorted(str(k) for k in data if k not in known)
    if extra:
        raise BadInputError(
            f"{where}: unknown field(s) {', '.join(extra)} (known: {', '.join(sorted(known))})"
        )


# --- apps and profiles --------------------------------------------------------------------


def _hourly(where: str, data: Mapping[str, Any]) -> tuple[float, ...]:
    given = [k for k in _TRAFFIC_KEYS if k in data]
    if len(given) != 1:
        raise BadInputError(
            f"{where}: give exactly one of hourly_requests, requests_per_hour or daily"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if "weekday" in data and given[0] != "daily":
        raise BadInputError(f"{where}: weekday factors go with daily")
    key = given[0]
    if key == "hourly_requests":
        return _numbers(f"{where}: hourly_requests", data[key], HOURS_OF_WEEK)
    if key == "requests_per_hour":
        return (number(f"{where}: requests_per_hour", data[key], 0),) * HOURS_OF_WEEK
    daily = _numbers(f"{where}: daily", data[key], 24)
    weekday = _numbers(f"{where}: weekday", data.get("weekday", [1.0] * 7), 7)
    return tuple(daily[h] * weekday[d] for d in range(7) for h in range(24))


def _lengths(where: str, data: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    means = [k for k in ("prompt_tokens", "output_tokens") if k in data]
    if "lengths" in data:
        if means:
            raise BadInputError(f"{where}: give lengths or prompt_tokens/output_tokens, not both")
        raw = data["lengths"]
        if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
            raise BadInputError(f"{where}: lengths must be a non-empty list of [prompt, output]")
        if len(raw) > MAX_LENGTH_SAMPLES:
            raise BadInputError(
                f"{where}: lengths holds {len(raw)} samples, at most {MAX_LENGTH_SAMPLES}"
            )
        out = []
        for i, pair in enumerate(raw):
            if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
                raise BadInputError(f"{where}: lengths[{i}] must be [prompt_tokens, output_tokens]")
            out.append(
                (
                    _integer(f"{where}: lengths[{i}][0]", pair[0], 1),
                    _integer(f"{where}: lengths[{i}][1]", pair[1], 1),
                )
            )
        return tuple(out)
    if len(means) != 2:
        raise BadInputError(f"{where}: give lengths, or both prompt_tokens and output_tokens")
    prompt = number(f"{where}: prompt_tokens", data["prompt_tokens"], 1)
    output = number(f"{where}: output_tokens", data["output_tokens"], 1)
    return ((max(1, round(prompt)), max(1, round(output))),)


def _sources(where: str, raw: Any) -> dict[str, Source]:
    data = mapping(f"{where}: sources", raw)
    out = {}
    for key, value in data.items():
        if key not in SOURCE_FIELDS:
            raise BadInputError(
                f"{where}: sources: unknown field {key!r} (known: {', '.join(SOURCE_FIELDS)})"
            )
        try:
            out[str(key)] = Source(value)
        except ValueError:
            raise BadInputError(
                f"{where}: sources: {key} must be measured, calibrated or assumed, got {value!r}"
            ) from None
    return out


def model_name(name: str) -> str:
    """The model catalog's name for a model (any alias), else the name as given (a hosted API's
    model, planned elsewhere)."""
    try:
        return get_model(name).name
    except BadInputError:
        return name


def in_catalog(name: str) -> bool:
    try:
        get_model(name)
    except BadInputError:
        return False
    return True


def app_from_mapping(data: Any, where: str = "profile: apps[0]") -> AppProfile:
    """One typed-in app (see the module docstring for its fields). `where` locates the entry
    ("profile: apps[2]"); once its name is known errors name the app instead
    ("profile: apps: app 'chat': lengths ...")."""
    data = mapping(where, data)
    name = data.get("app")
    if not isinstance(name, str) or not name.strip():
        raise BadInputError(f"{where}: app must be a non-empty name, got {name!r}")
    where = f"{where.rsplit('[', 1)[0]}: app {name!r}"
    unknown(where, data, _APP_KEYS)
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise BadInputError(f"{where}: model must be a non-empty name, got {model!r}")
    try:
        slo_class = SloClass(data.get("slo_class", SloClass.INTERACTIVE))
    except ValueError:
        raise BadInputError(
            f"{where}: slo_class must be interactive or batch, got {data.get('slo_class')!r}"
        ) from None
    values: dict[str, Any] = {
        "app": name,
        "model": model_name(model),
        "slo_class": slo_class,
        "hourly_requests": _hourly(where, data),
        "lengths": _lengths(where, data),
    }
    if "burstiness" in data:
        values["burstiness"] = number(f"{where}: burstiness", data["burstiness"], 0, above=True)
    if "prefix_len" in data:
        values["prefix_len"] = _integer(f"{where}: prefix_len", data["prefix_len"], 0)
    if "prefix_hit_rate" in data:
        hit = number(f"{where}: prefix_hit_rate", data["prefix_hit_rate"], 0)
        if hit >= 1:
            raise BadInputError(f"{where}: prefix_hit_rate must be < 1, got {hit}")
        values["prefix_hit_rate"] = hit
    if data.get("acceptance_rate") is not None:
        rate = number(f"{where}: acceptance_rate", data["acceptance_rate"], 0)
        if rate > 1:
            raise BadInputError(f"{where}: acceptance_rate must be <= 1, got {rate}")
        values["acceptance_rate"] = rate
    if "requests_per_task" in data:
        values["requests_per_task"] = number(
            f"{where}: requests_per_task", data["requests_per_task"], 1
        )
    if "history" in data:
        values["history"] = _numbers(f"{where}: history", data["history"])
    if "history_start" in data:
        start = number(f"{where}: history_start", data["history_start"], 0)
        if start % 3600:
            raise BadInputError(f"{where}: history_start must be a whole UTC hour (Unix seconds)")
        values["history_start"] = start
    if "sources" in data:
        values["sources"] = _sources(where, data["sources"])
    else:
        values["sources"] = dict.fromkeys(SOURCE_FIELDS, Source.ASSUMED)
    try:
        return AppProfile(**values)
    except BadInputError as exc:  # the dataclass's own checks, named by where
        raise BadInputError(f"{where}: {exc}") from None


def app_to_mapping(app: AppProfile) -> dict[str, Any]:
    """JSON-safe, and app_from_mapping(app_to_mapping(a)) == a."""
    return {
        "app": app.app,
        "model": app.model,
        "slo_class": str(app.slo_class),
        "hourly_requests": list(app.hourly_requests),
        "lengths": [[p, o] for p, o in app.lengths],
        "burstiness": app.burstiness,
        "prefix_len": app.prefix_len,
        "prefix_hit_rate": app.prefix_hit_rate,
        "acceptance_rate": app.acceptance_rate,
        "requests_per_task": app.requests_per_task,
        "history": list(app.history),
        "history_start": app.history_start,
        "sources": {k: str(v) for k, v in app.sources.items()},
    }


def profile_from_mapping(data: Any, where: str = "profile") -> WorkloadProfile:
    """A WorkloadProfile from YAML/JSON-shaped data: {apps: [...], window_start, window_end,
    scope}. Every bad value is a BadInputError naming the app and the field."""
    data = mapping(where, data)
    unknown(where, data, ("apps", "window_start", "window_end", "scope"))
    raw = data.get("apps")
    if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
        raise BadInputError(f"{where}: apps must be a non-empty list")
    apps = tuple(app_from_mapping(a, f"{where}: apps[{i}]") for i, a in enumerate(raw))
    scope = {
        str(k): names(f"{where}: scope: {k}", v)
        for k, v in mapping(f"{where}: scope", data.get("scope") or {}).items()
    }
    start = number(f"{where}: window_start", data.get("window_start", 0.0), 0)
    end = number(f"{where}: window_end", data.get("window_end", 0.0), 0)
    if end < start:
        raise BadInputError(f"{where}: window_end must be >= window_start")
    try:
        return WorkloadProfile(apps, start, end, scope)
    except BadInputError as exc:
        raise BadInputError(f"{where}: {exc}") from None


def profile_to_mapping(profile: WorkloadProfile) -> dict[str, Any]:
    """JSON-safe, and profile_from_mapping(profile_to_mapping(p)) == p."""
    return {
        "apps": [app_to_mapping(a) for a in profile.apps],
        "window_start": profile.window_start,
        "window_end": profile.window_end,
        "scope": {k: list(v) for k, v in profile.scope.items()},
    }


def edit_app(profile: WorkloadProfile, app: str, changes: Mapping[str, Any]) -> WorkloadProfile:
    """The profile with one app's fields replaced (a user's edit on the Capacity page): each
    changed field is validated as typed in and marked assumed."""
    old = profile.app(app)
    base = app_to_mapping(old)
    merged = {**base, **changes}
    if any(k in changes for k in _TRAFFIC_KEYS):
        for key in _TRAFFIC_KEYS:
            if key not in changes:
                merged.pop(key, None)
    if "prompt_tokens" in changes or "output_tokens" in changes:
        merged.pop("lengths", None)
    new = app_from_mapping(merged, "edit")
    edited = {
        "hourly_requests" if k in _TRAFFIC_KEYS or k == "weekday" else k
        for k in changes
        if k != "sources"
    }
    edited = {"lengths" if k in ("prompt_tokens", "output_tokens") else k for k in edited}
    sources = dict(old.sources)
    sources.update(dict.fromkeys(edited & set(SOURCE_FIELDS), Source.ASSUMED))
    new = replace(new, sources=sources)
    return replace(profile, apps=tuple(new if a.app == app else a for a in profile.apps))


# --- SLOs -----------------------------------------------------------------------------------


def slos_from_mapping(data: Any, where: str = "slos") -> dict[SloClass, Slo]:
    """{interactive: {ttft_p95_ms, itl_p95_ms, e2e_p95_ms}, batch: {...}}, milliseconds."""
    data = mapping(where, data)
    out: dict[SloClass, Slo] = {}
    for key, raw in data.items():
        try:
            cls = SloClass(key)
        except ValueError:
            raise BadInputError(
                f"{where}: unknown class {key!r} (known: interactive, batch)"
            ) from None
        at = f"{where}: {key}"
        targets = mapping(at, raw)
        unknown(at, targets, tuple(_SLO_KEYS))
        values = {
            _SLO_KEYS[k]: number(f"{at}: {k}", v, 0, above=True) / 1000.0
            for k, v in targets.items()
            if v is not None
        }
        try:
            out[cls] = Slo(**values)
        except BadInputError as exc:
            raise BadInputError(f"{at}: {exc}") from None
    return out


def slos_to_mapping(slos: Mapping[SloClass, Slo]) -> dict[str, dict[str, float | None]]:
    """JSON-safe milliseconds (rounded to the nanosecond so that ms -> s -> ms is exact)."""
    return {
        str(cls): {
            ms: None if getattr(slo, s) is None else round(getattr(slo, s) * 1000.0, 6)
            for ms, s in _SLO_KEYS.items()
        }
        for cls, slo in slos.items()
    }
