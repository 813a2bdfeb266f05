"""The workload profile the capacity planner starts from (issue #13), measured from the ledger:
per app over a window and a scope (apps, routes, environment), from ``mart_requests`` and the
task outcome views, through the SQL files in sql/capacity.

Per app:
- hourly_requests: the mean requests in each of the 168 UTC hours of the week over the
  window's hours (a partial first or last hour counts for the part the window covers). An hour
  of the week the window never covered takes the mean of the same hour of day on the days it
  did, else the mean of every covered hour: the field is then CALIBRATED; MEASURED when the
  window covers the whole week. history: the counts of the window's whole hours.
- lengths: a deterministic sample of at most MAX_LENGTH_SAMPLES (input, output) pairs.
- burstiness: 1 / CV² of the gaps between consecutive arrivals within each hour (each gap over
  its hour's mean gap), clipped to [0.1, 10]; 1.0 and ASSUMED with fewer than MIN_GAPS gaps.
- prefix_hit_rate: cached / input tokens of the requests that report cache reads (MEASURED);
  prefix_len: the median cached tokens of the requests that hit (CALIBRATED: the shared
  prefix as the cache saw it). Both 0 and ASSUMED when no request reports cache reads.
- model: the most frequent self-hosted model, else the most frequent model, in the model
  catalog's spelling when it knows it.
- requests_per_task: requests / distinct tasks (>= 1); acceptance_rate: from the task outcome
  views (None and ASSUMED when no task of the app was decided).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from inferledger.core.errors import BadInputError
from ledger import price_book
from models.capacity.profile import MAX_LENGTH_SAMPLES, model_name
from models.capacity.types import HOURS_OF_WEEK, AppProfile, Source, WorkloadProfile

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

#: gaps an app needs before its burstiness is measured rather than assumed (Poisson)
MIN_GAPS = 20
BURSTINESS_RANGE = (0.1, 10.0)
#: cached / input tokens can reach 1 only by rounding; AppProfile wants < 1
MAX_HIT_RATE = 0.99
HOUR_S = 3600


@cache
def _sql(name: str) -> str:
    return resources.files("sql").joinpath("capacity", f"{name}.sql").read_text("utf-8")


def _aware(where: str, at: datetime) -> datetime:
    if not isinstance(at, datetime) or at.tzinfo is None:
        raise BadInputError(f"{where} must be a datetime with a time zone")
    return at.astimezone(UTC)


def hour_of_week(hour_s: int) -> int:
    """0 = Monday 00:00-01:00 UTC."""
    moment = datetime.fromtimestamp(hour_s, UTC)
    return moment.weekday() * 24 + moment.hour


def _coverage(start_s: float, end_s: float) -> dict[int, float]:
    """Window hour (Unix s of its start) -> the fraction of it inside [start_s, end_s)."""
    out = {}
    hour = math.floor(start_s / HOUR_S) * HOUR_S
    while hour < end_s:
        part = (min(end_s, hour + HOUR_S) - max(start_s, hour)) / HOUR_S
        if part > 0:
            out[hour] = part
        hour += HOUR_S
    return out


def weekly_means(
    counts: dict[int, int], coverage: dict[int, float]
) -> tuple[tuple[float, ...], Source]:
    """Mean requests per hour of week (see the module docstring) and their source."""
    total = [0.0] * HOURS_OF_WEEK
    covered = [0.0] * HOURS_OF_WEEK
    for hour, part in coverage.items():
        how = hour_of_week(hour)
        total[how] += counts.get(hour, 0)
        covered[how] += part
    means: list[float | None] = [
        total[h] / covered[h] if covered[h] > 0 else None for h in range(HOURS_OF_WEEK)
    ]
    if all(m is not None for m in means):
        return tuple(float(m) for m in means), Source.MEASURED  # type: ignore[arg-type]
    overall = sum(total) / sum(covered)
    filled = []
    for h, mean in enumerate(means):
        if mean is None:
            same = [h2 for h2 in range(h % 24, HOURS_OF_WEEK, 24) if covered[h2] > 0]
            mean = (
                sum(total[h2] for h2 in same) / sum(covered[h2] for h2 in same) if same else overall
            )
        filled.append(float(mean))
    return tuple(filled), Source.CALIBRATED


def _burstiness(row: dict[str, Any] | None) -> tuple[float, Source]:
    if row is None or row["gaps"] < MIN_GAPS or row["cv2"] is None:
        return 1.0, Source.ASSUMED
    low, high = BURSTINESS_RANGE
    cv2 = float(row["cv2"])
    return (high if cv2 <= 0 else min(high, max(low, 1.0 / cv2))), Source.MEASURED


def _rows(storage: Storage, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    return storage.query_arrow(_sql(name), params).to_pylist()


def load_profile(
    storage: Storage,
    start: datetime,
    end: datetime,
    *,
    apps: Sequence[str] = (),
    routes: Sequence[str] = (),
    environment: str | None = None,
) -> WorkloadProfile:
    """The workload profile of the scope's requests that started in [start, end)."""
    start = _aware("start", start)
    end = _aware("end", end)
    if end <= start:
        raise BadInputError("end must be after start")
    params: dict[str, Any] = {
        "start": start,
        "end": end,
        "apps": [str(a) for a in apps],
        "routes": [str(r) for r in routes],
        "environment": environment,
    }
    summary = _rows(storage, "profile_apps", params)
    if not summary:
        parts = [f"{k} {', '.join(v)}" for k, v in (("apps", apps), ("routes", routes)) if v]
        if environment is not None:
            parts.append(f"environment {environment}")
        scope = "; ".join(parts)
        raise BadInputError(
            f"no requests in [{start:%Y-%m-%d %H:%M}, {end:%Y-%m-%d %H:%M}) UTC for "
            f"{scope or 'any app'}"
        )
    hourly: dict[str, dict[int, int]] = {}
    for row in _rows(storage, "profile_hourly", params):
        hourly.setdefault(row["app"], {})[int(row["hour_s"])] = int(row["requests"])
    lengths: dict[str, list[tuple[int, int]]] = {}
    for row in _rows(storage, "profile_lengths", params | {"max_samples": MAX_LENGTH_SAMPLES}):
        lengths.setdefault(row["app"], []).append(
            (int(row["input_tokens"]), int(row["output_tokens"]))
        )
    gaps = {row["app"]: row for row in _rows(storage, "profile_gaps", params)}
    acceptance = {row["app"]: row for row in _rows(storage, "profile_acceptance", params)}
    start_s, end_s = start.timestamp(), end.timestamp()
    coverage = _coverage(start_s, end_s)
    whole = sorted(h for h, part in coverage.items() if part >= 1.0)
    profiles = []
    for row in summary:
        app = row["app"]
        if app not in lengths:
            raise BadInputError(
                f"app {app!r}: none of its {row['requests']} requests in the window reports "
                "both its input and output tokens"
            )
        counts = hourly.get(app, {})
        weekly, weekly_source = weekly_means(counts, coverage)
        burst, burst_source = _burstiness(gaps.get(app))
        sources = {
            "model": Source.MEASURED if row["model"] else Source.ASSUMED,
            "slo_class": Source.ASSUMED,
            "hourly_requests": weekly_source,
            "lengths": Source.MEASURED,
            "burstiness": burst_source,
            "requests_per_task": Source.MEASURED,
        }
        hit, prefix_len = 0.0, 0
        if row["cache_requests"] and row["cache_queried_tokens"]:
            hit = min(MAX_HIT_RATE, row["cache_hit_tokens"] / row["cache_queried_tokens"])
            prefix_len = round(row["prefix_len"] or 0) if hit > 0 else 0
            sources |= {"prefix_hit_rate": Source.MEASURED, "prefix_len": Source.CALIBRATED}
        else:
            sources |= {"prefix_hit_rate": Source.ASSUMED, "prefix_len": Source.ASSUMED}
        accept = acceptance.get(app, {}).get("acceptance_rate")
        # no decided task: unknown (a rate of 0, every decided task rejected, is measured)
        accept = float(accept) if accept is not None else None
        sources["acceptance_rate"] = Source.MEASURED if accept is not None else Source.ASSUMED
        profiles.append(
            AppProfile(
                app=app,
                model=model_name(row["model"]) if row["model"] else "unknown",
                hourly_requests=weekly,
                lengths=tuple(lengths[app]),
                burstiness=burst,
                prefix_len=prefix_len,
                prefix_hit_rate=hit,
                acceptance_rate=accept,
                requests_per_task=max(1.0, row["requests"] / max(1, row["tasks"])),
                history=tuple(float(counts.get(h, 0)) for h in whole),
                history_start=float(whole[0]) if whole else 0.0,
                sources=sources,
            )
        )
    scope = {"apps": tuple(apps), "routes": tuple(routes)}
    if environment is not None:
        scope["environment"] = (environment,)
    return WorkloadProfile(tuple(profiles), start_s, end_s, scope)


def book_prices(
    storage: Storage, gpus: Sequence[str], hosted_models: Sequence[str], at: datetime
) -> tuple[dict[str, float | None], dict[str, tuple[float, float]]]:
    """The price book's prices the planner needs at ``at``: $ per GPU-hour of each GPU (None
    when the book has none) and ($ per 1M input, $ per 1M output) of each hosted model a share
    is moved to (BadInputError when the book lacks either price: the move cannot be priced)."""
    gpu_prices = {gpu: price_book.price_at(storage, "gpu", gpu, "gpu_hour", at) for gpu in gpus}
    hosted: dict[str, tuple[float, float]] = {}
    for model in hosted_models:
        pin = price_book.price_at(storage, "model", model, "input_mtok", at)
        pout = price_book.price_at(storage, "model", model, "output_mtok", at)
        if pin is None or pout is None:
            raise BadInputError(f"move: the price book has no token prices for {model}")
        hosted[model] = (pin, pout)
    return gpu_prices, hosted
