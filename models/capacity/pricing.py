"""What a pool's plan costs each of its apps (issue #13): $ per 1M input and per 1M output
tokens, $ per request and $ per accepted outcome.

A pool's monthly cost is split over its apps by the GPU time their tokens take on the chosen
candidate, the rule the ledger's cost model uses for measured requests (docs/cost-model.md:
a request pays for its prefill and decode GPU-seconds). Per token, on one replica:

- an input token the prefix cache does not hit costs ``t_prefill = t(chunk) / chunk``, the
  step time of a ``chunk``-token prefill (vLLM's chunked prefill) per token;
- an output token costs ``t_decode = t(B decodes at context L) / B``, a decode step's time
  shared by its batch, with B the mean number of sequences a replica runs at the knee (Little's
  law: the rate per replica × the mean end-to-end latency there) and L the pool's mean context.

App a's share is ``Σ_a (uncached input × t_prefill + output × t_decode)`` over the pool's
total, and that share splits into an input part and an output part the same way, so the two
$ per 1M figures add back to the app's cost. $ per accepted outcome divides the app's cost by
its accepted outcomes: requests / requests_per_task × acceptance_rate (None when the app's
acceptance rate is unknown). Pure arithmetic on the step-time model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from models.capacity.types import AppProfile, Candidate
from models.steptime import build_predictor, prefill_shape

PREFILL_CHUNK = 2048
_KV = {"auto": None, "bfloat16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


@dataclass(frozen=True, slots=True)
class TokenCosts:
    """GPU-seconds of one input token (uncached) and one output token on a replica."""

    prefill_s: float
    decode_s: float


def token_costs(candidate: Candidate, batch: float, context: float) -> TokenCosts:
    """Per-token GPU time on the candidate at a decode batch of ``batch`` sequences of
    ``context`` tokens (both rounded, at least 1)."""
    dtype = "bf16" if candidate.dtype == "auto" else candidate.dtype
    predictor = build_predictor(
        candidate.model,
        candidate.gpu,
        dtype,
        candidate.tensor_parallel_size,
        _KV.get(candidate.kv_cache_dtype),
    )
    b = max(1, round(batch))
    ctx = max(1, round(context))
    prefill = predictor.step_time_s(prefill_shape(PREFILL_CHUNK)) / PREFILL_CHUNK
    decode = predictor.step_time_s(prefill_shape(0, decode=b, decode_context=ctx)) / b
    return TokenCosts(prefill, decode)


def _mean_tokens(app: AppProfile) -> tuple[float, float]:
    prompts = sum(p for p, _ in app.lengths) / len(app.lengths)
    outputs = sum(o for _, o in app.lengths) / len(app.lengths)
    return prompts, outputs


def app_costs(
    apps: Sequence[AppProfile],
    monthly_cost: float,
    costs: TokenCosts,
    hours_per_month: float,
) -> list[dict[str, Any]]:
    """One row per app of a pool (the result's ``apps_cost`` keys). ``apps`` are the pool's
    apps as planned (knobs applied); their mean hourly rate × hours_per_month is a month."""
    rows = []
    parts = []
    for app in apps:
        requests = sum(app.hourly_requests) / len(app.hourly_requests) * hours_per_month
        prompt, output = _mean_tokens(app)
        uncached = prompt * (1.0 - app.prefix_hit_rate)
        input_tokens, output_tokens = requests * prompt, requests * output
        parts.append(
            (
                app,
                requests,
                input_tokens,
                output_tokens,
                requests * uncached * costs.prefill_s,
                output_tokens * costs.decode_s,
            )
        )
    total = sum(p[4] + p[5] for p in parts)
    for app, requests, input_tokens, output_tokens, gpu_in, gpu_out in parts:
        share_in = gpu_in / total if total > 0 else 0.0
        share_out = gpu_out / total if total > 0 else 0.0
        cost_in, cost_out = monthly_cost * share_in, monthly_cost * share_out
        cost = cost_in + cost_out
        accepted = (
            requests / app.requests_per_task * app.acceptance_rate
            if app.acceptance_rate is not None
            else None
        )
        rows.append(
            {
                "app": app.app,
                "requests_per_month": requests,
                "input_tokens_per_month": input_tokens,
                "output_tokens_per_month": output_tokens,
                "monthly_cost": cost,
                "usd_per_1m_input": _per(cost_in, input_tokens, 1e6),
                "usd_per_1m_output": _per(cost_out, output_tokens, 1e6),
                "usd_per_request": _per(cost, requests, 1.0),
                "usd_per_accepted_outcome": _per(cost, accepted, 1.0) if accepted else None,
            }
        )
    return rows


def _per(cost: float, quantity: float | None, unit: float) -> float | None:
    if not quantity or not math.isfinite(quantity) or quantity <= 0:
        return None
    return cost / quantity * unit


def hosted_cost(
    input_tokens: float,
    output_tokens: float,
    price: tuple[float, float] | None,
) -> float | None:
    """A month of moved traffic on a hosted API at (input, output) $ per 1M tokens; None when
    the price book has no price for it."""
    if price is None:
        return None
    return input_tokens / 1e6 * price[0] + output_tokens / 1e6 * price[1]
