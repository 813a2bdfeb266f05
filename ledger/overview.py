"""The logic behind the Overview page: the month-end forecast, the budgets the filters fall
under (the budget tile), the top movers and why they moved, and the trend it plots (the Spend
page's charts and drill-down are ledger/spend.py, which buckets time as this module does).

The arithmetic here is pure (forecast_month_end, budgets_for, by_urgency, decompose); the
helpers that read take the storage gateway and run the named queries in sql/queries
(overview_*.sql and the shared spend_*.sql), so every number comes from the same marts as the
other pages; the budget tile's numbers are ledger.budget_status's, as on the Budgets page.

**Forecast to month end** (:data:`FORECAST_METHOD`): the month's spend so far plus a run rate
times the hours left. The run rate is the mean hourly spend over the last 7 days of complete
hours (168 hours: every hour of the week counts once, so the daily and weekly cycles average
out instead of the forecast swinging with the time of day), or over the complete hours since
the ledger's first hour when it holds less than a week.

**Why a mover moved** (:func:`decompose`): spend S of a key (a team, app, route or model) is
written as a product of factors the marts measure,

    S = R · (T / R) · (S / S') · (S' / T)

with R requests, T input tokens, S' the spend on first attempts (S minus the LLM calls of
retries). Each factor's share of the change S1 − S0 is the log-mean Divisia index (LMDI-I):
``L(S1, S0) · ln(x1 / x0)`` with ``L(a, b) = (a − b) / (ln a − ln b)``. The shares add up to the
change exactly, whatever the order of the factors, and need no interaction term. Traffic is R;
unit cost (cost per request) is the rest, split into context length (T / R), retries (S / S')
and cost per input token (S' / T: prices, output length, cache hits, idle share). A price
change in the window (price_book_changes) that applies to the key is named beside the
per-token effect. A factor the marts cannot measure for a key (no input tokens, every dollar a
retry) is folded into the per-token (then per-request) factor.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from inferledger.core.times import as_utc
from ledger import coverage as cov
from ledger.budget_status import BudgetStatus, budget_statuses
from ledger.budgets import list_budgets
from ledger.queries import Filters, QueryError, run
from models.alert_config import Budget, scope_contains

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

#: Dimensions the movers table offers.
MOVER_DIMENSIONS = ("team", "app", "route", "model")
#: Ranges up to this long are plotted by hour, longer ones by day.
HOURLY_UP_TO = timedelta(days=7)
#: The run-rate window of the forecast.
RUN_RATE_HOURS = 168
FORECAST_METHOD = (
    "Forecast = month to date + run rate × hours left in the month. Run rate = mean hourly "
    "spend over the last 7 days of complete hours (each hour of the week counts once, so daily "
    "and weekly cycles average out), or over the complete hours since the ledger began when it "
    "holds less than a week."
)


# ------------------------------------------------------------------------------ time buckets
def bucket_for(filters: Filters) -> str:
    """'hour' for ranges up to 7 days (at most 168 points), else 'day'."""
    return "hour" if filters.end - filters.start <= HOURLY_UP_TO else "day"


def bucket_starts(start: datetime, end: datetime, bucket: str) -> list[datetime]:
    """The UTC hour or day starts of the buckets that overlap [start, end)."""
    step = timedelta(hours=1) if bucket == "hour" else timedelta(days=1)
    first = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if bucket == "day":
        first = first.replace(hour=0)
    out = []
    while first < end:
        out.append(first)
        first += step
    return out


# ------------------------------------------------------------------------------ forecast
@dataclass(frozen=True, slots=True)
class Forecast:
    """Month-to-date spend and its forecast to the end of the month (UTC)."""

    now: datetime
    month_start: datetime
    month_end: datetime
    month_to_date: float
    run_rate_per_hour: float | None  # None: no complete hour of history yet
    rate_hours: int  # complete hours the run rate averages
    hours_left: float
    forecast: float | None
    method: str = FORECAST_METHOD
    #: complete hours left out of the run rate because their data is incomplete (coverage)
    excluded_hours: int = 0


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """The UTC month holding `now`: [first instant, first instant of the next month)."""
    now = as_utc(now)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def forecast_month_end(
    hourly: Iterable[tuple[datetime, float]],
    now: datetime,
    *,
    window_hours: int = RUN_RATE_HOURS,
    excluded: Collection[datetime] = (),
) -> Forecast:
    """Forecast the month's spend from hourly spend (hour start, $), which should cover the
    month so far and the `window_hours` before the current hour (extra hours are ignored).
    Hours in `excluded` (incomplete data: ledger.coverage) count neither their spend nor
    themselves in the run rate, so a half-loaded history does not drag it down.

    month_to_date = Σ spend of hours in [month start, now]; run rate = Σ spend of the complete
    hours in [max(current hour − window, first hour with spend), current hour) ÷ their count;
    forecast = month_to_date + run rate × hours from now to the month's end.
    """
    now = as_utc(now)
    month_start, month_end = month_bounds(now)
    current_hour = now.replace(minute=0, second=0, microsecond=0)
    rows = [(as_utc(h), float(c or 0.0)) for h, c in hourly]
    skip = {as_utc(h) for h in excluded}
    mtd = sum(c for h, c in rows if month_start <= h <= now)
    with_spend = [h for h, c in rows if c != 0 and h < current_hour and h not in skip]
    window_start = current_hour - timedelta(hours=window_hours)
    any_spend = [h for h, c in rows if c != 0 and h < current_hour]
    # incomplete hours of the window since the ledger's first spend, for the page to name
    skipped = sum(
        1 for h in skip if max(window_start, min(any_spend, default=h)) <= h < current_hour
    )
    if with_spend:
        window_start = max(window_start, min(with_spend))
    all_hours = max(0, int((current_hour - window_start) / timedelta(hours=1)))
    rate_hours = all_hours - sum(1 for h in skip if window_start <= h < current_hour)
    hours_left = (month_end - now) / timedelta(hours=1)
    if not with_spend or rate_hours <= 0:
        return Forecast(
            now, month_start, month_end, mtd, None, 0, hours_left, None, excluded_hours=skipped
        )
    spent = sum(c for h, c in rows if window_start <= h < current_hour and h not in skip)
    rate = spent / rate_hours
    forecast = mtd + rate * hours_left
    return Forecast(
        now, month_start, month_end, mtd, rate, rate_hours, hours_left, forecast, FORECAST_METHOD,
        skipped,
    )  # fmt: skip


# ------------------------------------------------------------------------------ budget tile
#: Which applicable budget the Overview's tile shows first: the most urgent status, then the
#: highest forecast share of its amount.
URGENCY = {"over": 3, "at_risk": 2, "warning": 1, "ok": 0}
#: The filter bar's dimensions a budget's scope is matched against (Filters' fields).
FILTER_DIMENSIONS = ("environment", "team", "app", "route", "model")


def filter_scope(filters: Filters) -> dict[str, str]:
    """The filters' selection as a scope: ``{dimension: value}`` of the set filters."""
    return {d: v for d in FILTER_DIMENSIONS if (v := getattr(filters, d))}


def budgets_for(filters: Filters, candidates: Iterable[Budget]) -> list[Budget]:
    """The budgets the filters' selection falls under: those whose whole scope the selection
    holds (filters team=search: the organisation's budget and search's, not a budget of one
    of search's apps, which covers only part of what the page shows)."""
    selection = filter_scope(filters)
    return [b for b in candidates if scope_contains(b.scope, selection)]


def by_urgency(statuses: Iterable[BudgetStatus]) -> list[BudgetStatus]:
    """Most urgent first: over, at risk, warning, ok; then by forecast share, then name."""
    return sorted(
        statuses,
        key=lambda s: (-URGENCY.get(s.status, 0), -(s.forecast_pct or 0.0), s.budget.name),
    )


def budget_tile(storage: Storage, filters: Filters, now: datetime) -> list[BudgetStatus]:
    """The statuses of the budgets the filters fall under, most urgent first ([] if none).
    Each budget is judged on its own period, whatever the page's time range."""
    chosen = budgets_for(filters, list_budgets(storage))
    if not chosen:
        return []
    return by_urgency(budget_statuses(storage, now, budgets=chosen))


# ------------------------------------------------------------------------------ movers
@dataclass(frozen=True, slots=True)
class PeriodSpend:
    """One key's spend in one period and what it measured."""

    cost: float
    requests: int = 0
    input_tokens: int = 0
    retry_cost: float = 0.0  # LLM calls of attempts after the first


@dataclass(frozen=True, slots=True)
class PriceChange:
    """A price-book change effective inside the compared periods (price_book_changes)."""

    kind: str  # model | gpu
    subject: str
    unit: str
    old_price: float | None
    new_price: float | None
    effective_from: datetime
    deployment: str = ""

    def describe(self) -> str:
        unit = {
            "input_mtok": "input /1M",
            "cached_input_mtok": "cached input /1M",
            "output_mtok": "output /1M",
            "gpu_hour": "/GPU-hour",
        }.get(self.unit, self.unit)
        who = f"{self.subject} ({self.deployment})" if self.deployment else self.subject
        old = usd(self.old_price) if self.old_price is not None else "none"
        new = usd(self.new_price) if self.new_price is not None else "removed"
        return f"{who} {unit} {old} → {new} from {as_utc(self.effective_from):%m-%d %H:%M}"


@dataclass(frozen=True, slots=True)
class Effect:
    """The part of a mover's change one factor explains ($), and the factor before and after."""

    name: str  # traffic | context | retries | per_token | per_request | new | gone | other
    amount: float
    before: float | None = None
    after: float | None = None


TRAFFIC_EFFECTS = ("traffic", "new", "gone")
UNIT_COST_EFFECTS = ("context", "retries", "per_token", "per_request")


@dataclass(frozen=True, slots=True)
class Mover:
    key: str
    before: PeriodSpend
    after: PeriodSpend
    effects: tuple[Effect, ...]
    reason: str
    price_changes: tuple[PriceChange, ...] = field(default=())

    @property
    def delta(self) -> float:
        return self.after.cost - self.before.cost

    @property
    def traffic(self) -> float:
        """$ of the change explained by the number of requests (a new or gone key: all)."""
        return sum(e.amount for e in self.effects if e.name in TRAFFIC_EFFECTS)

    @property
    def unit_cost(self) -> float:
        """$ of the change explained by cost per request (context + retries + per token)."""
        return sum(e.amount for e in self.effects if e.name in UNIT_COST_EFFECTS)

    def effect(self, name: str) -> float:
        return sum(e.amount for e in self.effects if e.name == name)


def log_mean(a: float, b: float) -> float:
    """L(a, b) = (a − b) / (ln a − ln b), and a when a = b (its limit); a, b > 0."""
    if a <= 0 or b <= 0:
        raise ValueError("the logarithmic mean needs positive values")
    if math.isclose(a, b, rel_tol=1e-12):
        return a
    return (a - b) / (math.log(a) - math.log(b))


def decompose(
    key: str,
    before: PeriodSpend,
    after: PeriodSpend,
    price_changes: Sequence[PriceChange] = (),
) -> Mover:
    """Split a key's spend change into traffic, context length, retries and cost per token
    (LMDI-I; see the module docstring), with a one-line reason."""
    prices = tuple(price_changes)
    s0, s1 = before.cost, after.cost
    delta = s1 - s0

    def mover(effects: list[Effect], reason: str) -> Mover:
        return Mover(key, before, after, tuple(effects), reason, prices)

    if s0 <= 0 and s1 <= 0:
        return mover([], "no spend in either period")
    if before.requests <= 0 and after.requests <= 0:
        what = (
            "unshared idle capacity: GPUs up with no requests to charge"
            if key == "(idle)"
            else "spend without requests (idle or unattributed service hours)"
        )
        return mover([Effect("other", delta, s0, s1)], f"{what} ({usd(s0)} → {usd(s1)})")
    if s0 <= 0 or before.requests <= 0:
        return mover(
            [Effect("new", delta, before.requests, after.requests)],
            f"new: no requests before, {after.requests:,} now",
        )
    if s1 <= 0 or after.requests <= 0:
        return mover(
            [Effect("gone", delta, before.requests, after.requests)],
            f"gone: {before.requests:,} requests before, none now",
        )

    weight = log_mean(s1, s0)
    r0, r1 = float(before.requests), float(after.requests)
    first0 = s0 - min(max(before.retry_cost, 0.0), s0)
    first1 = s1 - min(max(after.retry_cost, 0.0), s1)
    with_retries = first0 > 0 and first1 > 0
    if not with_retries:
        first0, first1 = s0, s1
    with_tokens = before.input_tokens > 0 and after.input_tokens > 0

    factors: list[tuple[str, float, float]] = [("traffic", r0, r1)]
    if with_tokens:
        t0, t1 = float(before.input_tokens), float(after.input_tokens)
        factors.append(("context", t0 / r0, t1 / r1))
    if with_retries:
        factors.append(("retries", 1 - first0 / s0, 1 - first1 / s1))  # shown as retry share
    if with_tokens:
        factors.append(("per_token", 1e6 * first0 / t0, 1e6 * first1 / t1))
    else:
        factors.append(("per_request", first0 / r0, first1 / r1))

    effects = []
    for name, x0, x1 in factors:
        # the retries factor is S / S' = 1 / (1 − retry share); x0, x1 show the share
        ratio = (s1 / first1) / (s0 / first0) if name == "retries" else x1 / x0
        effects.append(Effect(name, weight * math.log(ratio), x0, x1))
    return mover(effects, _reason(effects, prices))


def _reason(effects: Sequence[Effect], prices: Sequence[PriceChange]) -> str:
    ranked = sorted(effects, key=lambda e: abs(e.amount), reverse=True)
    if not ranked or abs(ranked[0].amount) < 1e-12:
        return "no change"
    shown = [ranked[0]] + [e for e in ranked[1:2] if abs(e.amount) >= 0.25 * abs(ranked[0].amount)]
    parts = [f"{_describe(e, prices)} {usd(e.amount, signed=True)}" for e in shown]
    if prices and not any(e.name in ("per_token", "per_request") for e in shown):
        parts.append("price change: " + prices[0].describe())
    return "; ".join(parts)


def _describe(effect: Effect, prices: Sequence[PriceChange]) -> str:
    a, b = effect.before or 0.0, effect.after or 0.0
    if effect.name == "traffic":
        return f"traffic {_pct(a, b)} ({a:,.0f} → {b:,.0f} requests)"
    if effect.name == "context":
        longer = "longer" if b > a else "shorter"
        return f"{longer} prompts {_pct(a, b)} ({a:,.0f} → {b:,.0f} input tokens/request)"
    if effect.name == "retries":
        return f"retries {a:.1%} → {b:.1%} of spend"
    priced = f"price change ({prices[0].describe()}); " if prices else ""
    if effect.name == "per_token":
        return f"{priced}cost per 1M input tokens {_pct(a, b)} ({usd(a)} → {usd(b)})"
    return f"{priced}cost per request {_pct(a, b)} ({usd(a)} → {usd(b)})"


def _pct(a: float, b: float) -> str:
    if a == 0:
        return "new"
    return f"{(b - a) / a:+.0%}".replace("-", "−")


def usd(value: float, *, signed: bool = False) -> str:
    sign = ("+" if value >= 0 else "−") if signed else ("−" if value < 0 else "")
    v = abs(value)
    text = f"${v:,.2f}" if v >= 0.995 or v == 0 else f"${v:.4f}"
    return sign + text


# ------------------------------------------------------------------------------ reading
@dataclass(frozen=True, slots=True)
class OverviewKpis:
    spend: float
    idle_cost: float
    unshared_idle_cost: float
    requests: int
    input_tokens: int
    output_tokens: int
    failed: int
    failure_rate: float | None
    # failures at the levels users mean (sql/queries/overview_failures.sql): attempts (traces
    # with an LLM call) and tasks started in the range with no successful final attempt
    attempts: int
    failed_attempts: int
    attempt_failure_rate: float | None
    tasks: int
    failed_tasks: int
    task_failure_rate: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    e2e_p50_s: float | None
    e2e_p95_s: float | None
    gpu_util: float | None  # DCGM, 0..1
    busy_share: float | None  # ledger: GPU-seconds in prefill/decode ÷ GPU-seconds up
    # coverage (docs/cost-model.md): the part of `spend` estimated (GPU time with no scrape
    # behind it), the requests so costed, and the requests that could not be costed at all
    estimated_cost: float
    estimated_requests: int
    unpriced_requests: int
    outcome_cost: float  # cost of the tasks started in the range (idle policy applied)
    accepted_outcomes: int
    cost_per_accepted: float | None
    forecast: Forecast


def spend_kpis(storage: Storage, filters: Filters) -> dict[str, Any]:
    return run(storage, "spend_kpis", filters).to_pylist()[0]


def overview_kpis(
    storage: Storage,
    filters: Filters,
    *,
    now: datetime | None = None,
) -> OverviewKpis:
    """Every number on the Overview's tiles, for the filters' range (the forecast: this month)."""
    now = as_utc(now or datetime.now(UTC))
    spend = spend_kpis(storage, filters)
    failures = run(storage, "overview_failures", filters).to_pylist()[0]
    latency = {r["stage"]: r for r in run(storage, "overview_latency", filters).to_pylist()}
    gpu = run(storage, "overview_gpu", filters).to_pylist()[0]
    # the Unit economics page's totals (same query, so the two pages agree)
    outcomes = run(storage, "economics_totals", filters).to_pylist()[0]
    forecast = month_forecast(storage, filters, now)
    return OverviewKpis(
        spend=spend["cost"],
        idle_cost=spend["idle_cost"],
        unshared_idle_cost=spend["unshared_idle_cost"],
        requests=int(spend["requests"]),
        input_tokens=int(spend["input_tokens"]),
        output_tokens=int(spend["output_tokens"]),
        failed=int(failures["failed"]),
        failure_rate=failures["failure_rate"],
        attempts=int(failures["attempts"]),
        failed_attempts=int(failures["failed_attempts"]),
        attempt_failure_rate=failures["attempt_failure_rate"],
        tasks=int(failures["tasks"]),
        failed_tasks=int(failures["failed_tasks"]),
        task_failure_rate=failures["task_failure_rate"],
        ttft_p50_s=latency.get("ttft", {}).get("p50_s"),
        ttft_p95_s=latency.get("ttft", {}).get("p95_s"),
        e2e_p50_s=latency.get("e2e", {}).get("p50_s"),
        e2e_p95_s=latency.get("e2e", {}).get("p95_s"),
        gpu_util=gpu["gpu_util_mean"],
        busy_share=gpu["busy_share"],
        estimated_cost=float(spend["estimated_cost"]),
        estimated_requests=int(spend["estimated_requests"]),
        unpriced_requests=int(spend["unpriced_requests"]),
        outcome_cost=outcomes["total_cost"],
        accepted_outcomes=int(outcomes["accepted_outcomes"]),
        cost_per_accepted=outcomes["cost_per_accepted"],
        forecast=forecast,
    )


def month_forecast(storage: Storage, filters: Filters, now: datetime) -> Forecast:
    """This month's forecast for the filters' slice (their time range does not apply)."""
    month_start, _ = month_bounds(now)
    current_hour = now.replace(minute=0, second=0, microsecond=0)
    since = min(month_start, current_hour - timedelta(hours=RUN_RATE_HOURS))
    window = filters.with_(start=since, end=current_hour + HOUR)
    rows = run(storage, "overview_hourly_spend", window).to_pylist()
    incomplete = cov.coverage(storage, window).incomplete_hours
    return forecast_month_end(((r["hour"], r["cost"]) for r in rows), now, excluded=incomplete)


HOUR = timedelta(hours=1)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def trend(storage: Storage, filters: Filters) -> pa.Table:
    """Spend, requests and p95 TTFT per hour or day of the range, every bucket present (no
    spend: 0; no request: TTFT empty). Empty when the range holds nothing."""
    bucket = bucket_for(filters)
    rows = run(storage, "overview_trend", filters, bucket=bucket).to_pylist()
    if not rows:
        return pa.table({"bucket": [], "spend": [], "requests": [], "ttft_p95_ms": []})
    by_bucket = {as_utc(r["bucket"]): r for r in rows}
    starts = bucket_starts(filters.start, filters.end, bucket)
    return pa.table(
        {
            "bucket": pa.array(starts, pa.timestamp("us", tz="UTC")),
            "spend": [float(by_bucket.get(b, {}).get("cost") or 0.0) for b in starts],
            "requests": [int(by_bucket.get(b, {}).get("requests") or 0) for b in starts],
            "ttft_p95_ms": [_ms(by_bucket.get(b, {}).get("ttft_p95_s")) for b in starts],
        }
    )


def movers(storage: Storage, filters: Filters, dim: str, limit: int = 8) -> list[Mover]:
    """The keys of `dim` whose spend changed most against the previous period of the same
    length, each decomposed."""
    if dim not in MOVER_DIMENSIONS:
        raise QueryError(f"movers: dimension must be one of {', '.join(MOVER_DIMENSIONS)}")
    rows = run(storage, "overview_movers", filters, dim=dim, limit=limit).to_pylist()
    changes: dict[str, list[PriceChange]] = {}
    for c in run(storage, "overview_price_changes", filters, dim=dim).to_pylist():
        changes.setdefault(c["key"], []).append(
            PriceChange(
                c["kind"],
                c["subject"],
                c["unit"],
                c["old_price"],
                c["new_price"],
                c["effective_from"],
                c["deployment"],
            )
        )
    out = []
    for r in rows:
        before = PeriodSpend(
            r["cost_before"], r["requests_before"], r["input_tokens_before"], r["retry_cost_before"]
        )
        after = PeriodSpend(r["cost"], r["requests"], r["input_tokens"], r["retry_cost"])
        out.append(decompose(r["key"], before, after, changes.get(r["key"], ())))
    return out


def comparable_movers(
    storage: Storage, filters: Filters, dim: str, limit: int = 8
) -> tuple[list[Mover], cov.Comparison]:
    """The movers, or none when the previous period is itself incomplete (less of it scraped
    than of the current one, or the ledger's data begins inside it): comparing with a
    half-loaded baseline reads as growth. The comparison says why (``reason()``)."""
    comparison = cov.compare_previous(storage, filters)
    if not comparison.comparable:
        return [], comparison
    return movers(storage, filters, dim, limit), comparison


def movers_table(found: Sequence[Mover]) -> pa.Table:
    """The movers as the table (and CSV) shows them."""
    return pa.table(
        {
            "key": [m.key for m in found],
            "spend_before": [m.before.cost for m in found],
            "spend": [m.after.cost for m in found],
            "change": [m.delta for m in found],
            "traffic": [m.traffic for m in found],
            "unit_cost": [m.unit_cost for m in found],
            "context": [m.effect("context") for m in found],
            "retries": [m.effect("retries") for m in found],
            "per_token": [m.effect("per_token") + m.effect("per_request") for m in found],
            "other": [m.effect("other") for m in found],
            "reason": [m.reason for m in found],
        },
        schema=pa.schema(
            [("key", pa.string())]
            + [
                (c, pa.float64())
                for c in (
                    "spend_before",
                    "spend",
                    "change",
                    "traffic",
                    "unit_cost",
                    "context",
                    "retries",
                    "per_token",
                    "other",
                )
            ]
            + [("reason", pa.string())]
        ),
    )


def data_status(storage: Storage, filters: Filters) -> dict[str, Any]:
    """What the ledger holds: spans, the newest span, the ledger's hours and last refresh."""
    return run(storage, "overview_data_status", filters).to_pylist()[0]
