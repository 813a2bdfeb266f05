"""Where each budget stands (issue #12): spend to date in its own period, the forecast to the
period's end (P10/P50/P90, models.spend_forecast), burn rate, days to exhaustion, status, the
highest threshold crossed, data coverage of the period so far, and a link to the Spend page
filtered to it. The Budgets page, the Overview tile, the API, the CLI and the two budget alert
kinds (:func:`budget_observations`) all read it here.

Spend is ``mart_spend_hourly`` filtered by the budget's scope, in the cost column of its idle
policy (None: each deployment's configured policy, ``cost_configured``). Idle rows carry no
app, team, route or workflow (the idle nobody shares under ``separate``), so a budget scoped on
those dimensions counts its shared idle under usage/even but not the unshared idle
(docs/budgets.md). Hours are UTC hours: an hour belongs to the period its start falls in (a
time zone with a half-hour offset shifts the period's edges by that half hour).

One read serves many budgets: :class:`SpendFrame` loads the hourly spend of every slice over
the union of the budgets' windows (sql/alerts/budget_spend_hourly.sql) and each budget filters
it in memory.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from models.alert_config import AlertRule, Budget, ConfigError, scope_key
from models.alert_lifecycle import Observation
from models.budget_period import period_bounds
from models.dashboard_links import dashboard_link
from models.spend_forecast import SpendForecast, forecast_period, history_start

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

#: How much history the forecast sees before the period (its weekly seasonality needs weeks).
HISTORY = timedelta(weeks=5)
HOUR = timedelta(hours=1)
STATUSES = ("ok", "warning", "at_risk", "over")
#: Severity of a budget_threshold alert by the highest threshold crossed (percent of amount).
SEVERITY_FROM = (("critical", 100.0), ("warning", 80.0), ("info", 0.0))


@dataclass(frozen=True)
class BudgetStatus:
    budget: Budget
    period_start: datetime
    period_end: datetime
    spent: float
    forecast: SpendForecast
    spent_pct: float
    forecast_pct: float
    status: str  # ok | warning | at_risk | over
    threshold_crossed: float | None
    coverage_complete: bool
    coverage_pct: float | None  # None: no replica expected in the period so far
    incomplete_hours: tuple[datetime, ...]
    currency: str
    link: str

    @property
    def burn_rate_per_day(self) -> float:
        return self.forecast.burn_rate_per_day

    @property
    def days_to_exhaustion(self) -> float | None:
        return self.forecast.days_to_exhaustion


@dataclass(frozen=True)
class BudgetSeries:
    """For the detail chart and the sparkline: ``actual`` = (hour start, cumulative spend
    through that hour) from the period's start to now; ``band`` = the forecast's hourly
    cumulative (time, P10, P50, P90) from now to the period's end; ``limit`` = the amount;
    ``threshold_amounts`` = each threshold as an amount."""

    budget: Budget
    period_start: datetime
    period_end: datetime
    actual: list[tuple[datetime, float]]
    band: list[tuple[datetime, float, float, float]]
    limit: float
    threshold_amounts: tuple[float, ...]


@cache
def _sql(name: str) -> str:
    return resources.files("sql").joinpath("alerts", name).read_text("utf-8")


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _aware(at: datetime) -> datetime:
    if not isinstance(at, datetime) or at.tzinfo is None:
        raise ConfigError("budget status: `at` must be a datetime with a time zone")
    return at.astimezone(UTC)


def cost_column(budget: Budget) -> str:
    """The mart column a budget counts: its idle policy's, or each deployment's configured."""
    return f"cost_{budget.idle_policy}" if budget.idle_policy else "cost_configured"


class SpendFrame:
    """The hourly spend of every slice over [start, end), and the coverage rows, read once."""

    def __init__(self, storage: Storage, start: datetime, end: datetime) -> None:
        self.start, self.end = _floor_hour(start), end
        params = {"start": self.start, "end": end}
        self.spend: pa.Table = storage.query_arrow(_sql("budget_spend_hourly.sql"), params)
        self.coverage: pa.Table = storage.query_arrow(_sql("budget_coverage_hourly.sql"), params)
        self._memo: dict[tuple[str, str], tuple[list, list]] = {}
        self._rows_memo: dict[str, pa.Table] = {}

    def covers(self, start: datetime, end: datetime) -> bool:
        return self.start <= _floor_hour(start) and end <= self.end

    def _scope_rows(self, scope: Mapping[str, str]) -> pa.Table:
        """The frame's rows in the scope (all hours), filtered once per scope: budgets sharing
        a scope (a team's daily and monthly ones) share the work."""
        key = scope_key(scope)
        rows = self._rows_memo.get(key)
        if rows is None:
            table = self.spend
            mask = None
            for dim, value in scope.items():
                match = pc.fill_null(pc.equal(table[dim], value), False)
                mask = match if mask is None else pc.and_(mask, match)
            rows = table if mask is None else table.filter(mask)
            self._rows_memo[key] = rows
        return rows

    def _scope_hours(self, scope: Mapping[str, str], column: str) -> tuple[list, list]:
        """(hour starts, spend) of the scope over the whole frame, once per scope and column."""
        key = (scope_key(scope), column)
        found = self._memo.get(key)
        if found is None:
            rows = self._scope_rows(scope)
            if rows.num_rows == 0:
                found = ([], [])
            else:
                summed = (
                    rows.group_by("hour", use_threads=False)
                    .aggregate([(column, "sum")])
                    .sort_by("hour")
                )
                found = (
                    [h.astimezone(UTC) for h in summed["hour"].to_pylist()],
                    [float(c or 0.0) for c in summed[f"{column}_sum"].to_pylist()],
                )
            self._memo[key] = found
        return found

    def hourly(
        self, scope: Mapping[str, str], column: str, start: datetime, end: datetime
    ) -> list[tuple[datetime, float]]:
        """(hour start, spend) of the scope's hours in [start, end) that have rows, in order."""
        hours, costs = self._scope_hours(scope, column)
        lo, hi = bisect_left(hours, _floor_hour(start)), bisect_left(hours, end)
        return list(zip(hours[lo:hi], costs[lo:hi], strict=True))

    def deployments(self, scope: Mapping[str, str], start: datetime, end: datetime) -> set[str]:
        """The deployments that carried the scope's spend in [start, end)."""
        rows = self._scope_rows(scope)
        hour_type = rows["hour"].type
        mask = pc.and_(
            pc.greater_equal(rows["hour"], pa.scalar(_floor_hour(start), hour_type)),
            pc.less(rows["hour"], pa.scalar(end, hour_type)),
        )
        found = {d for d in pc.unique(rows.filter(mask)["deployment"]).to_pylist() if d}
        if scope.get("deployment"):
            found.add(scope["deployment"])
        return found

    def coverage_of(
        self, deployments: set[str] | None, start: datetime, end: datetime
    ) -> tuple[float | None, tuple[datetime, ...]]:
        """(coverage percent, the incomplete hours) of whole hours in [start, end), over
        `deployments` (None: all). The hour in progress is left out (its scrapes may lag)."""
        table = self.coverage
        if table.num_rows == 0:
            return None, ()
        hour_type = table["hour"].type
        mask = pc.and_(
            pc.greater_equal(table["hour"], pa.scalar(_floor_hour(start), hour_type)),
            pc.less(table["hour"], pa.scalar(_floor_hour(end), hour_type)),
        )
        if deployments is not None:
            chosen = pa.array(sorted(deployments), pa.string())
            mask = pc.and_(mask, pc.is_in(table["deployment"], value_set=chosen))
        rows = table.filter(mask)
        if rows.num_rows == 0:
            return None, ()
        summed = rows.group_by("hour", use_threads=False).aggregate(
            [("expected_s", "sum"), ("scraped_s", "sum"), ("uncovered_requests", "sum")]
        )
        hours = summed["hour"].to_pylist()
        expected = summed["expected_s_sum"].to_pylist()
        scraped = summed["scraped_s_sum"].to_pylist()
        uncovered = summed["uncovered_requests_sum"].to_pylist()
        total = sum(e or 0.0 for e in expected)
        pct = None if total <= 0 else min(100.0, 100.0 * sum(s or 0.0 for s in scraped) / total)
        bad = tuple(
            sorted(
                h.astimezone(UTC)
                for h, e, sc, u in zip(hours, expected, scraped, uncovered, strict=True)
                if (sc or 0.0) < (e or 0.0) - 1e-6 or (u or 0) > 0
            )
        )
        return pct, bad


def _window(budget: Budget, at: datetime) -> tuple[datetime, datetime, datetime]:
    """(period start, period end, history start) of `budget` at `at`: back far enough for the
    forecast's band to have past errors over the whole period's horizon (history_start)."""
    start, end = period_bounds(budget, at)
    return start, end, min(history_start(start, end), min(start, at) - HISTORY)


def _frame_for(
    storage: Storage, budgets: Sequence[Budget], at: datetime, cache_: dict | None
) -> SpendFrame:
    key = ("budget_status.frame", at)
    frame = cache_.get(key) if cache_ is not None else None
    windows = [_window(b, at) for b in budgets]
    start = min(w[2] for w in windows)
    end = max(min(at, w[1]) for w in windows) if windows else at
    end = max(end, at)
    if frame is None or not frame.covers(start, end):
        frame = SpendFrame(storage, start, end)
        if cache_ is not None:
            cache_[key] = frame
    return frame


def _status_of(budget: Budget, at: datetime, frame: SpendFrame, base_url: str) -> BudgetStatus:
    start, end, history_start = _window(budget, at)
    now = min(max(at, start), end)
    column = cost_column(budget)
    hourly = frame.hourly(budget.scope, column, history_start, now)
    forecast = forecast_period(hourly, start, end, now, amount=budget.amount)
    spent = forecast.spent  # the forecast's own count of the period so far
    spent_pct = 100.0 * spent / budget.amount
    forecast_pct = 100.0 * forecast.p50 / budget.amount
    crossed = [t for t in budget.thresholds if spent_pct >= t]
    threshold_crossed = max(crossed) if crossed else None
    if spent >= budget.amount:
        status = "over"
    elif forecast.p50 >= budget.amount:
        status = "at_risk"
    elif any(t < 100 for t in crossed):
        status = "warning"
    else:
        status = "ok"
    deployments = frame.deployments(budget.scope, start, now) if budget.scope else None
    coverage_pct, incomplete = frame.coverage_of(deployments, start, now)
    link_end = min(end, _floor_hour(at) + HOUR) if at > start else end
    return BudgetStatus(
        budget=budget,
        period_start=start,
        period_end=end,
        spent=spent,
        forecast=forecast,
        spent_pct=spent_pct,
        forecast_pct=forecast_pct,
        status=status,
        threshold_crossed=threshold_crossed,
        coverage_complete=not incomplete,
        coverage_pct=coverage_pct,
        incomplete_hours=incomplete,
        currency=budget.currency,
        link=budget_link(budget, start, link_end, base_url=base_url),
    )


def budget_link(budget: Budget, start: datetime, end: datetime, *, base_url: str = "") -> str:
    """The Spend page filtered to the budget's scope (the dimensions the filter bar has) and
    [start, end), under the budget's idle policy."""
    extra = {"idle": budget.idle_policy} if budget.idle_policy else None
    return dashboard_link(base_url, "/spend", scope=budget.scope, start=start, end=end, extra=extra)


def budget_statuses(
    storage: Storage,
    at: datetime,
    *,
    budgets: Iterable[Budget] | None = None,
    base_url: str = "",
    cache: dict | None = None,
) -> list[BudgetStatus]:
    """The status of `budgets` (default: every budget not archived) at `at`, in their order,
    from one read of the marts."""
    at = _aware(at)
    if budgets is None:
        from ledger.budgets import list_budgets

        budgets = list_budgets(storage)
    chosen = [b for b in budgets if b.archived_at is None]
    if not chosen:
        return []
    frame = _frame_for(storage, chosen, at, cache)
    return [_status_of(b, at, frame, base_url) for b in chosen]


def budget_status(
    storage: Storage, budget: Budget, at: datetime, *, base_url: str = "", cache: dict | None = None
) -> BudgetStatus:
    """One budget's status at `at` (archived ones too: as they would stand)."""
    at = _aware(at)
    frame = _frame_for(storage, [budget], at, cache)
    return _status_of(budget, at, frame, base_url)


def budget_series(
    storage: Storage, budget: Budget, at: datetime, *, cache: dict | None = None
) -> BudgetSeries:
    """The detail chart's lines: cumulative actual spend by hour, the forecast band, the limit."""
    at = _aware(at)
    frame = _frame_for(storage, [budget], at, cache)
    status = _status_of(budget, at, frame, "")
    start, now = status.period_start, min(max(at, status.period_start), status.period_end)
    running, actual = 0.0, []
    for hour, cost in frame.hourly(budget.scope, cost_column(budget), start, now):
        running += cost
        actual.append((hour, running))
    return BudgetSeries(
        budget=budget,
        period_start=start,
        period_end=status.period_end,
        actual=actual,
        band=list(status.forecast.band),
        limit=budget.amount,
        threshold_amounts=tuple(budget.amount * t / 100.0 for t in budget.thresholds),
    )


def threshold_severity(crossed: float | None) -> str | None:
    """The severity of a budget_threshold alert whose highest crossed threshold is `crossed`
    (percent): < 80 info, < 100 warning, >= 100 critical; None when none is crossed."""
    if crossed is None:
        return None
    return next(sev for sev, low in SEVERITY_FROM if crossed >= low)


def _money(amount: float, currency: str) -> str:
    return f"{amount:,.2f} {currency}"


def budget_observations(
    storage: Storage,
    rule: AlertRule,
    budget: Budget,
    at: datetime,
    *,
    base_url: str = "",
    cache: dict | None = None,
) -> list[Observation]:
    """The one observation of a budget rule: budget_threshold's value is the percent of the
    amount spent (severity by the highest budget threshold crossed), budget_forecast's the
    P50 forecast at period end as a percent of the amount. Labelled by the budget's scope.
    An archived budget has none. Pass the engine's per-tick `cache` to read the marts once."""
    if rule.kind not in ("budget_threshold", "budget_forecast"):
        raise ConfigError(f"rule {rule.name!r} is a {rule.kind} rule, not a budget rule")
    if budget.archived_at is not None:
        return []
    at = _aware(at)
    key = ("budget_status.status", budget.name, at)
    status = cache.get(key) if cache is not None else None
    if status is None:
        status = budget_status(storage, budget, at, base_url=base_url, cache=cache)
        if cache is not None:
            cache[key] = status
    money = status.currency
    period = f"{budget.period} period from {status.period_start:%Y-%m-%d %H:%M} UTC"
    if rule.kind == "budget_threshold":
        value = status.spent_pct
        severity = threshold_severity(status.threshold_crossed)
        summary = (
            f"budget {budget.name}: {_money(status.spent, money)} of "
            f"{_money(budget.amount, money)} spent ({value:.0f} %) in the {period}"
        )
    else:
        value = status.forecast_pct
        severity = None
        f = status.forecast
        when = (
            f"; P50 runs out {f.exhaustion_at:%Y-%m-%d %H:%M} UTC"
            if f.exhaustion_at is not None
            else ""
        )
        summary = (
            f"budget {budget.name}: forecast {_money(f.p50, money)} (P10 {f.p10:,.2f}, P90 "
            f"{f.p90:,.2f}) of {_money(budget.amount, money)} ({value:.0f} %) by "
            f"{status.period_end:%Y-%m-%d %H:%M} UTC{when}"
        )
    if not status.coverage_complete:
        summary += f" (coverage incomplete: {len(status.incomplete_hours)} h)"
    labels: dict[str, Any] = dict(budget.scope)
    return [
        Observation(
            scope_key=scope_key(budget.scope),
            value=value,
            severity=severity,
            threshold=rule.threshold,
            summary=summary,
            labels=labels,
        )
    ]
