"""A workload profile's pools for the capacity planner (issue #13): its apps grouped by SLO
class and model (make_pools), their pooled figures (pool_peak_rate, app_shares, pool_stats,
pool_burstiness), and the simulator's requests a pool makes (pool_requests). Pure.

Prefix sharing (pool_requests, pool_stats): an app's requests may carry one shared first
segment "{app}/prefix" of prefix_len tokens (a system prompt, a document). The simulator's
prefix cache then hits those tokens on every carrying request but the first. For the prompt
tokens hit to be prefix_hit_rate of all prompt tokens, a share f of the requests carries it:
    f = min(1, prefix_hit_rate * sum(prompt) / (prefix_len * eligible))
over the app's length samples, where only requests longer than prefix_len are eligible (a
prompt must keep >= 1 token of its own). prefix_len 0 with a hit rate > 0 means a prefix of
round(prefix_hit_rate * mean prompt) tokens carried by every request. A hit rate of 0 means no
sharing whatever prefix_len says. Hits are whole KV blocks (16 tokens) in the simulator, so
the simulated rate sits slightly below the target when prefix_len is not a multiple of 16.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from inferledger.core.errors import BadInputError
from models.capacity.profile import in_catalog
from models.capacity.types import AppProfile, Burst, Pool, Slo, SloClass, WorkloadProfile
from models.model_catalog import get_model, normalize_model_name
from models.serving.request import RequestSpec

# --- pools ----------------------------------------------------------------------------------


def make_pools(
    profile: WorkloadProfile, slos: Mapping[SloClass, Slo]
) -> tuple[tuple[Pool, ...], list[tuple[str, str]]]:
    """Apps grouped by (SLO class, model) for the models of the model catalog, pools sorted by
    name ("interactive/llama-3.1-8b"); and (app, reason) for the apps not planned here (a
    hosted model, no traffic)."""
    groups: dict[tuple[SloClass, str], list[AppProfile]] = {}
    unplanned: list[tuple[str, str]] = []
    for app in profile.apps:
        if not in_catalog(app.model):
            unplanned.append((app.app, f"model {app.model!r} is not in the model catalog"))
        elif max(app.hourly_requests) <= 0:
            unplanned.append((app.app, "no traffic"))
        else:
            groups.setdefault((app.slo_class, get_model(app.model).name), []).append(app)
    pools = []
    for (cls, model), apps in groups.items():
        if cls not in slos:
            raise BadInputError(f"slos: no SLO for class {cls} (app {apps[0].app!r} needs one)")
        name = f"{cls}/{normalize_model_name(model)}"
        pools.append(Pool(name, cls, model, tuple(apps), slos[cls]))
    return tuple(sorted(pools, key=lambda p: p.name)), unplanned


def _pool_hourly(pool: Pool) -> np.ndarray:
    return np.sum([a.hourly_requests for a in pool.apps], axis=0)


def pool_peak_rate(pool: Pool, burst: Burst | None = None) -> float:
    """Requests per second at the pool's busiest hour of the week (its apps summed hour by
    hour), times the burst's factor."""
    peak = float(np.max(_pool_hourly(pool))) / 3600.0
    return peak * (burst.factor if burst is not None else 1.0)


def app_shares(pool: Pool) -> dict[str, float]:
    """Each app's share of the pool's requests at the pool's busiest hour."""
    hourly = np.array([a.hourly_requests for a in pool.apps], dtype=float)
    at = hourly[:, int(np.argmax(hourly.sum(axis=0)))]
    total = at.sum()
    if total <= 0:
        raise BadInputError(f"pool {pool.name}: no traffic")
    return {a.app: float(v / total) for a, v in zip(pool.apps, at, strict=True)}


def prefix_plan(app: AppProfile) -> tuple[int, float]:
    """(prefix tokens, share of requests carrying the prefix): see the module docstring."""
    prompts = np.array([p for p, _ in app.lengths], dtype=float)
    if app.prefix_hit_rate <= 0:
        return 0, 0.0
    length = app.prefix_len or round(app.prefix_hit_rate * float(prompts.mean()))
    eligible = int(np.count_nonzero(prompts > length))
    if length <= 0 or eligible == 0:
        return 0, 0.0
    share = app.prefix_hit_rate * float(prompts.sum()) / (length * eligible)
    return int(length), min(1.0, share)


def pool_burstiness(pool: Pool, shares: Mapping[str, float] | None = None) -> float:
    """The pool's gamma shape: 1 / (peak-share-weighted mean of its apps' squared coefficients
    of variation, 1/shape). A conservative pick: merging independent streams makes them
    smoother, never burstier."""
    shares = shares or app_shares(pool)
    cv2 = sum(shares[a.app] / a.burstiness for a in pool.apps)
    return 1.0 / cv2


def pool_requests(
    pool: Pool, rate_per_s: float, num_requests: int, seed: int = 0
) -> list[RequestSpec]:
    """num_requests of the pool's traffic at rate_per_s, the first at 0 s.

    Common random numbers: every draw (unit gamma gaps of the pool's burstiness, app, length
    sample, prefix) comes from `seed` alone, each kind from its own stream, and the rate only
    divides the gaps: two rates see the same requests at stretched times, and a longer run
    begins with the requests of a shorter one. The app is drawn by its
    share at the pool's peak hour, (prompt, output) from its joint samples; a request of an
    app with prefix sharing starts with the segment "{app}/prefix" (prefix_plan)."""
    if not rate_per_s > 0 or not math.isfinite(rate_per_s):
        raise BadInputError(f"pool {pool.name}: rate must be > 0 requests/s, got {rate_per_s}")
    if num_requests < 1:
        raise BadInputError(f"pool {pool.name}: num_requests must be >= 1, got {num_requests}")
    shares = app_shares(pool)
    shape = pool_burstiness(pool, shares)
    # one stream per kind of draw, so the first k requests are the same for any count >= k
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)]
    gaps = streams[0].gamma(shape, 1.0 / shape, size=num_requests)
    pick = streams[1].random(num_requests)
    sample = streams[2].random(num_requests)
    carry = streams[3].random(num_requests)
    times = np.concatenate(([0.0], np.cumsum(gaps[:-1]))) / rate_per_s
    cumulative = np.cumsum([shares[a.app] for a in pool.apps])
    cumulative[-1] = 1.0
    which = np.minimum(np.searchsorted(cumulative, pick, side="right"), len(pool.apps) - 1)
    plans = [prefix_plan(a) for a in pool.apps]
    specs = []
    for i in range(num_requests):
        k = int(which[i])
        app = pool.apps[k]
        prompt, output = app.lengths[min(int(sample[i] * len(app.lengths)), len(app.lengths) - 1)]
        rid = f"{app.app}-{i}"
        length, share = plans[k]
        if length and prompt > length and carry[i] < share:
            segments: tuple[tuple[str, int], ...] = (
                (f"{app.app}/prefix", length),
                (rid, prompt - length),
            )
        else:
            segments = ((rid, prompt),)
        specs.append(
            RequestSpec(
                request_id=rid,
                arrival_s=float(times[i]),
                prompt=segments,
                output_tokens=output,
                max_tokens=output,
                context={"max_tokens": output, "traffic_class": app.app},
            )
        )
    return specs


@dataclass(frozen=True, slots=True)
class PoolStats:
    """Request-weighted figures of a pool at its peak hour (apps weighted by app_shares).
    mean_cached_prompt: prompt tokens a warm prefix cache saves per request (prefix_plan).
    mean_context: prompt + output / 2, the mean KV a running request holds. burstiness: the
    pool's gamma shape (pool_burstiness)."""

    mean_prompt: float
    mean_output: float
    mean_cached_prompt: float
    p95_prompt: float
    p95_output: float
    mean_context: float
    app_shares: dict[str, float]
    burstiness: float = 1.0


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    idx = int(np.searchsorted(cum, q * cum[-1], side="left"))
    return float(values[order][min(idx, len(values) - 1)])


def pool_stats(pool: Pool) -> PoolStats:
    """The pool's length figures, as pool_requests' draws would average them."""
    shares = app_shares(pool)
    prompts, outputs, weights = [], [], []
    mean_prompt = mean_output = cached = 0.0
    for app in pool.apps:
        lengths = np.array(app.lengths, dtype=float)
        w = shares[app.app]
        prompts.append(lengths[:, 0])
        outputs.append(lengths[:, 1])
        weights.append(np.full(len(lengths), w / len(lengths)))
        mean_prompt += w * float(lengths[:, 0].mean())
        mean_output += w * float(lengths[:, 1].mean())
        length, share = prefix_plan(app)
        if length:
            cached += w * share * length * float(np.mean(lengths[:, 0] > length))
    p, o, wt = np.concatenate(prompts), np.concatenate(outputs), np.concatenate(weights)
    return PoolStats(
        mean_prompt=mean_prompt,
        mean_output=mean_output,
        mean_cached_prompt=cached,
        p95_prompt=_weighted_quantile(p, wt, 0.95),
        p95_output=_weighted_quantile(o, wt, 0.95),
        mean_context=mean_prompt + mean_output / 2.0,
        app_shares=shares,
        burstiness=pool_burstiness(pool, shares),
    )
