"""A whole capacity plan (issue #13): a workload profile, what-if knobs, SLOs per class and a
candidate space in; per pool, the ranked candidates with the fewest replicas meeting every SLO
at the peak, what the plan costs each app, and a 13-week replicas-over-time schedule out.

The steps (docs/capacity-planner.md):

1. apply the knobs to the profile (knobs.apply_knobs); moves to a hosted API leave it and
   are priced per token (pricing.hosted_cost);
2. group the apps into pools by SLO class and model (pools.make_pools); apps on a model the
   catalog does not know (a hosted API) are listed as unplanned;
3. per pool, screen every feasible candidate analytically (analytic.screen: instant), then
   verify the `verify_top` cheapest on the simulator (search.verify: the knee by bisection, the
   fewest replicas by simulating them at the peak), rank the verified ones by monthly cost and
   recommend the cheapest that met every SLO at the peak;
4. bound each verified answer by the serving model's measured error
   (models/data/planner_model_error.yaml, from docs/fidelity.md): the knee may be lower by
   the throughput error, or higher by the optimistic slack, and the replica count scales
   inversely;
5. price it per app (pricing.app_costs) and forecast each app's traffic 13 weeks ahead
   (forecast.forecast_traffic), turned into the pool's replicas over time beside the static
   plan (forecast.replica_schedule).

run_plan returns plain JSON-safe data (the *result mapping*), which is what is saved, compared,
rendered into a decision record and printed by `inferledger plan`. Deterministic per seed.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import numpy as np
import yaml

from inferledger.core.errors import BadInputError
from models.capacity import analytic, forecast, knobs, pricing, profile, search
from models.capacity import pools as pooling
from models.capacity.candidates import CandidateSpace, space_from_mapping, space_to_mapping
from models.capacity.types import (
    HOURS_OF_WEEK,
    PLANNER_VERSION,
    AppProfile,
    Candidate,
    Knobs,
    Pool,
    Slo,
    SloClass,
    WorkloadProfile,
)
from models.step_coefficients import default_coefficients

HOUR_S = 3600
DEFAULT_HOURS_PER_MONTH = 730.0
DEFAULT_VERIFY_TOP = 20
FORECAST_WEEKS = 13
#: the fields a plan file may hold (the profile comes inline or from the ledger)
PLAN_KEYS = (
    "name",
    "profile",
    "knobs",
    "slos",
    "candidates",
    "verify_top",
    "growth_per_month",
    "seed",
    "hours_per_month",
    "hosted_prices",
)

Progress = Callable[[float, str], None]


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """Everything a plan depends on. hosted_prices: hosted model -> ($ per 1M input, $ per 1M
    output tokens), for shares moved to a hosted API (from the price book)."""

    name: str
    profile: WorkloadProfile
    slos: Mapping[SloClass, Slo]
    space: CandidateSpace
    knobs: Knobs = field(default_factory=Knobs)
    verify_top: int = DEFAULT_VERIFY_TOP
    growth_per_month: float = 0.0
    seed: int = 0
    hours_per_month: float = DEFAULT_HOURS_PER_MONTH
    hosted_prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise BadInputError("plan: name must not be empty")
        if not self.slos:
            raise BadInputError("plan: slos needs a target for at least one class")
        if isinstance(self.verify_top, bool) or not isinstance(self.verify_top, int):
            raise BadInputError(f"plan: verify_top must be an integer, got {self.verify_top!r}")
        if not 1 <= self.verify_top <= 200:
            raise BadInputError(f"plan: verify_top must be 1..200, got {self.verify_top}")
        if not -0.5 <= self.growth_per_month <= 5:
            raise BadInputError(
                f"plan: growth_per_month must be in [-0.5, 5] (0.1 = +10 %/month), got "
                f"{self.growth_per_month}"
            )
        if not 24 <= self.hours_per_month <= 744:
            raise BadInputError(
                f"plan: hours_per_month must be in [24, 744], got {self.hours_per_month}"
            )


def _number(data: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadInputError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def _hosted_prices(raw: Any, where: str) -> dict[str, tuple[float, float]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise BadInputError(f"{where}: hosted_prices must map a model to [input, output] $/1M")
    out = {}
    for model, pair in raw.items():
        ok = (
            isinstance(pair, list | tuple)
            and len(pair) == 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)
            and all(v >= 0 for v in pair)
        )
        if not ok:
            raise BadInputError(
                f"{where}: hosted_prices[{model!r}] must be [input, output] $ per 1M tokens >= 0"
            )
        out[str(model)] = (float(pair[0]), float(pair[1]))
    return out


def plan_from_mapping(
    data: Any, where: str = "plan", loaded_profile: WorkloadProfile | None = None
) -> PlanInputs:
    """A plan from YAML/JSON data. ``loaded_profile`` replaces ``profile`` (the caller loaded
    it from the ledger, as ``profile: {from_ledger: ...}`` asks)."""
    if not isinstance(data, Mapping):
        raise BadInputError(f"{where} must be a mapping")
    profile.unknown(where, data, PLAN_KEYS)
    if loaded_profile is not None:
        prof = loaded_profile
    else:
        raw = data.get("profile")
        if raw is None:
            raise BadInputError(f"{where}: a profile is required (inline apps or from_ledger)")
        if isinstance(raw, Mapping) and "from_ledger" in raw:
            raise BadInputError(
                f"{where}: profile.from_ledger needs a database (--db, or the configured one)"
            )
        prof = profile.profile_from_mapping(raw, f"{where}: profile")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise BadInputError(f"{where}: seed must be an integer >= 0, got {seed!r}")
    name = data.get("name", "plan")
    if not isinstance(name, str):
        raise BadInputError(f"{where}: name must be text")
    return PlanInputs(
        name=name,
        profile=prof,
        slos=profile.slos_from_mapping(data.get("slos"), f"{where}: slos"),
        space=space_from_mapping(data.get("candidates") or {}, f"{where}: candidates"),
        knobs=knobs.knobs_from_mapping(data.get("knobs") or {}, f"{where}: knobs"),
        verify_top=data.get("verify_top", DEFAULT_VERIFY_TOP),
        growth_per_month=_number(data, "growth_per_month", 0.0, where),
        seed=seed,
        hours_per_month=_number(data, "hours_per_month", DEFAULT_HOURS_PER_MONTH, where),
        hosted_prices=_hosted_prices(data.get("hosted_prices"), where),
    )


def plan_to_mapping(inputs: PlanInputs) -> dict[str, Any]:
    """The inputs as plain data; plan_from_mapping(plan_to_mapping(x)) == x."""
    return {
        "name": inputs.name,
        "profile": profile.profile_to_mapping(inputs.profile),
        "knobs": knobs.knobs_to_mapping(inputs.knobs),
        "slos": profile.slos_to_mapping(inputs.slos),
        "candidates": space_to_mapping(inputs.space),
        "verify_top": inputs.verify_top,
        "growth_per_month": inputs.growth_per_month,
        "seed": inputs.seed,
        "hours_per_month": inputs.hours_per_month,
        "hosted_prices": {k: list(v) for k, v in inputs.hosted_prices.items()},
    }


@functools.cache
def model_error() -> dict[str, Any]:
    """The serving model's measured median |error| (models/data/planner_model_error.yaml)."""
    text = resources.files("models").joinpath("data", "planner_model_error.yaml").read_text()
    doc = yaml.safe_load(text)
    keys = ("e2e", "itl", "ttft", "throughput", "optimistic_slack")
    if not isinstance(doc, Mapping) or any(
        not isinstance(doc.get(k), int | float) or not 0 <= doc[k] < 1 for k in keys
    ):
        raise BadInputError(
            f"models/data/planner_model_error.yaml needs {', '.join(keys)} in [0, 1)"
        )
    return {**{k: float(doc[k]) for k in keys}, "source": str(doc.get("source", ""))}


@functools.cache
def model_version() -> str:
    """A short hash of the shipped step-time coefficients: plans made on another calibration
    say so."""
    blob = json.dumps(asdict(default_coefficients()), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _band(replicas: int, peak: float, knee: float, err: Mapping[str, float]) -> tuple[int, int]:
    """Replicas if the knee were as much lower / higher as the serving model's error allows."""
    low_knee = knee * (1.0 - err["throughput"])
    high_knee = knee * (1.0 + err["optimistic_slack"])
    high = max(replicas, math.ceil(peak / low_knee - 1e-9)) if low_knee > 0 else replicas
    low = min(replicas, max(1, math.ceil(peak / high_knee - 1e-9))) if high_knee > 0 else replicas
    return low, high


def _row_from_screen(s: analytic.Screen) -> dict[str, Any]:
    c = s.candidate
    return {
        "label": c.label(),
        "candidate": asdict(c),
        "verified": False,
        "knee_rate": None,
        "analytic_knee_rate": s.knee_rate,
        "binding": s.binding,
        "replicas": s.replicas,
        "replicas_low": s.replicas,
        "replicas_high": s.replicas,
        "gpus": s.replicas * c.gpus,
        "gpu_hours_per_month": s.gpu_hours_per_month,
        "monthly_cost": s.monthly_cost,
        "monthly_cost_low": s.monthly_cost,
        "monthly_cost_high": s.monthly_cost,
        "at_peak": None,
        "curve": [],
    }


def _row_from_verified(
    s: analytic.Screen, v: search.Verified, peak: float, hours: float, err: Mapping[str, float]
) -> dict[str, Any]:
    c = v.candidate
    row = _row_from_screen(s)
    low, high = _band(v.replicas, peak, v.knee_rate, err)
    per_replica = c.gpus * hours * c.price_per_gpu_hour
    row.update(
        verified=True,
        knee_rate=v.knee_rate,
        replicas=v.replicas,
        replicas_low=low,
        replicas_high=high,
        gpus=v.replicas * c.gpus,
        gpu_hours_per_month=v.replicas * c.gpus * hours,
        monthly_cost=v.replicas * per_replica,
        monthly_cost_low=low * per_replica,
        monthly_cost_high=high * per_replica,
        at_peak=v.at_peak.to_dict(),
        curve=[p.to_dict() for p in v.curve],
    )
    return row


def _history(app: AppProfile, end_s: float) -> tuple[np.ndarray, float]:
    """The app's hourly history, or (for a typed-in app) its weekly profile repeated over the
    two weeks before end_s."""
    if app.history:
        return np.asarray(app.history, dtype=float), app.history_start
    start = end_s - 2 * 168 * HOUR_S
    hours = start / HOUR_S + np.arange(2 * 168)
    # hour of week, Monday 00:00 UTC = 0 (1970-01-01 was a Thursday: +72 h)
    how = ((hours + 72) % HOURS_OF_WEEK).astype(int)
    return np.asarray(app.hourly_requests, dtype=float)[how], start


def _forecasts(
    planned: WorkloadProfile, original: WorkloadProfile, growth: float, end_s: float
) -> dict[str, forecast.TrafficForecast]:
    """Each planned app's 13-week forecast; an app the knobs scaled is scaled alike (its
    history is the traffic before the knob)."""
    before = {a.app: a for a in original.apps}
    out = {}
    for app in planned.apps:
        history, start = _history(before.get(app.app, app), end_s)
        fc = forecast.forecast_traffic(
            history, start, weeks=FORECAST_WEEKS, growth_per_month=growth
        )
        old = before.get(app.app)
        ratio = 1.0
        if old is not None and sum(old.hourly_requests) > 0:
            ratio = sum(app.hourly_requests) / sum(old.hourly_requests)
        if ratio != 1.0:
            fc = dataclasses.replace(
                fc,
                p10=fc.p10 * ratio,
                p50=fc.p50 * ratio,
                p90=fc.p90 * ratio,
                method=f"{fc.method}; × {ratio:.3g} (knobs)",
            )
        out[app.app] = fc
    return out


def _pool_schedule(
    pool: Pool,
    fcs: Mapping[str, forecast.TrafficForecast],
    row: Mapping[str, Any],
    hours_per_month: float,
) -> dict[str, Any] | None:
    knee = row.get("knee_rate") or row.get("analytic_knee_rate")
    if not knee:
        return None
    parts = [fcs[a.app] for a in pool.apps if a.app in fcs]
    if not parts:
        return None
    n = min(len(f.p50) for f in parts)
    start = max(f.start for f in parts)
    sums = [sum(np.asarray(getattr(f, q))[:n] for f in parts) for q in ("p10", "p50", "p90")]
    c = row["candidate"]
    sched = forecast.replica_schedule(
        sums[0],
        sums[1],
        sums[2],
        knee,
        c["tensor_parallel_size"],
        c["price_per_gpu_hour"],
        row["replicas"],
        hours_per_month=hours_per_month,
        start=start,
    )
    return sched.to_dict()


def _check(cancelled: Callable[[], bool] | None) -> None:
    if cancelled is not None and cancelled():
        raise search.PlanCancelled("the plan was cancelled")


def run_plan(
    inputs: PlanInputs,
    *,
    progress: Progress | None = None,
    cancelled: Callable[[], bool] | None = None,
    now: datetime | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Plan it (the module docstring's steps); the result mapping of docs/capacity-planner.md.
    progress(fraction, message) is called as pools and candidates finish; cancelled() is
    polled between simulations and raises search.PlanCancelled when it returns True.
    workers > 1 verifies a pool's candidates in that many processes (search.verify_many):
    the same answers, sooner on more cores."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise BadInputError(f"workers must be an integer >= 1, got {workers!r}")
    began = time.perf_counter()
    created = (now or datetime.now(UTC)).astimezone(UTC)
    report = progress or (lambda _f, _m: None)
    err = model_error()
    hours = inputs.hours_per_month
    planned = knobs.apply_knobs(inputs.profile, inputs.knobs)
    moved = knobs.hosted_moves(inputs.profile, inputs.knobs)
    pools, unplanned = pooling.make_pools(planned, inputs.slos)
    end_s = inputs.profile.window_end or math.floor(created.timestamp() / HOUR_S) * HOUR_S
    report(0.02, "forecasting traffic")
    fcs = _forecasts(planned, inputs.profile, inputs.growth_per_month, end_s)
    pool_rows: list[dict[str, Any]] = []
    total_steps = max(1, sum(1 for _ in pools)) * (inputs.verify_top + 1)
    step = 0
    for pool in pools:
        _check(cancelled)
        peak = pooling.pool_peak_rate(pool, inputs.knobs.burst)
        stats = pooling.pool_stats(pool)
        longest = max(p + o for a in pool.apps for p, o in a.lengths)
        feasible, infeasible = analytic.enumerate_candidates(
            pool.model, inputs.space, max_context=longest
        )
        report(step / total_steps, f"{pool.name}: screening {len(feasible)} candidates")
        screens = analytic.screen(pool, peak, feasible, hours_per_month=hours)
        ok = [s for s in screens if s.feasible]
        infeasible_rows = [{"label": c.label(), "reason": r} for c, r in infeasible]
        infeasible_rows += [
            {"label": s.candidate.label(), "reason": s.reason or "no rate meets the SLO"}
            for s in screens
            if not s.feasible
        ]
        step += 1
        top = ok[: inputs.verify_top]
        if workers > 1 and len(top) > 1:
            report(step / total_steps, f"{pool.name}: simulating {len(top)} on {workers} workers")
            verified = search.verify_many(
                pool,
                [s.candidate for s in top],
                peak,
                guesses=[s.knee_rate for s in top],
                seed=inputs.seed,
                workers=workers,
                cancelled=cancelled,
            )
            step += len(top)
        else:
            verified = []
            for s in top:
                _check(cancelled)
                report(step / total_steps, f"{pool.name}: simulating {s.candidate.label()}")
                verified.append(
                    search.verify(
                        pool,
                        s.candidate,
                        peak,
                        guess=s.knee_rate,
                        seed=inputs.seed,
                        cancelled=cancelled,
                    )
                )
                step += 1
        verified_rows = [
            _row_from_verified(s, v, peak, hours, err) for s, v in zip(top, verified, strict=True)
        ]
        verified_rows.sort(key=lambda r: (not r["at_peak"]["meets_slo"], r["monthly_cost"]))
        rows = verified_rows + [_row_from_screen(s) for s in ok[inputs.verify_top :]]
        for i, r in enumerate(rows):
            r["rank"] = i + 1
        best = 0 if verified_rows and verified_rows[0]["at_peak"]["meets_slo"] else None
        apps_cost: list[dict[str, Any]] = []
        schedule = None
        if best is not None:
            row = rows[best]
            point = row["at_peak"]
            batch = point["rate"] / row["replicas"] * point["e2e_p50_s"]
            costs = pricing.token_costs(row_candidate(row), batch=batch, context=stats.mean_context)
            apps_cost = pricing.app_costs(pool.apps, row["monthly_cost"], costs, hours)
            schedule = _pool_schedule(pool, fcs, row, hours)
        pool_rows.append(
            {
                "name": pool.name,
                "slo_class": str(pool.slo_class),
                "model": pool.model,
                "apps": [a.app for a in pool.apps],
                "slo": profile.slos_to_mapping({pool.slo_class: pool.slo})[str(pool.slo_class)],
                "peak_rate": peak,
                "screened": len(feasible),
                "infeasible": infeasible_rows,
                "candidates": rows,
                "best": best,
                "apps_cost": apps_cost,
                "schedule": schedule,
            }
        )
    hosted = []
    for app, share, model, traffic in moved:
        month = sum(traffic.hourly_requests) / len(traffic.hourly_requests) * hours
        mean_in = sum(p for p, _ in traffic.lengths) / len(traffic.lengths)
        mean_out = sum(o for _, o in traffic.lengths) / len(traffic.lengths)
        hosted.append(
            {
                "app": app,
                "share": share,
                "hosted": model,
                "requests_per_month": month,
                "monthly_cost": pricing.hosted_cost(
                    month * mean_in, month * mean_out, inputs.hosted_prices.get(model)
                ),
            }
        )
    total = sum(
        p["candidates"][p["best"]]["monthly_cost"] for p in pool_rows if p["best"] is not None
    )
    total += sum(h["monthly_cost"] or 0.0 for h in hosted)
    report(1.0, "done")
    return {
        "planner_version": PLANNER_VERSION,
        "model_version": model_version(),
        "name": inputs.name,
        "created_at": created.isoformat(),
        "duration_s": time.perf_counter() - began,
        "inputs": plan_to_mapping(inputs),
        "model_error": dict(err),
        "pools": pool_rows,
        "forecast": {name: fc.to_dict() for name, fc in fcs.items()},
        "unplanned": [{"app": a, "reason": r} for a, r in unplanned],
        "hosted": hosted,
        "totals": {
            "monthly_cost": total,
            "gpus": sum(
                p["candidates"][p["best"]]["gpus"] for p in pool_rows if p["best"] is not None
            ),
            "pools_without_plan": [p["name"] for p in pool_rows if p["best"] is None],
        },
    }


def row_candidate(row: Mapping[str, Any]) -> Candidate:
    """The Candidate of a result row."""
    return Candidate(**row["candidate"])
