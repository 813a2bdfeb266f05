"""Coverage as data (issue #10, §1): a ledger whose GPU metrics cover only part of its traffic.

Requests run for 4 hours on replica r0 but r0 is scraped only in the last hour
(inferledger.ledger_fixtures.partial_scrapes, through the real ingest path and refresher). Time
with no scrape behind it is costed from the deployment's size and price and marked estimated;
what cannot be costed is unpriced, never $0; every share any page shows stays within 100 %."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from app.coverage import MAX_LISTED, banner_text, stretch_href
from app.filters import parse
from inferledger.ledger_fixtures import (
    PARTIAL_EVERY_S,
    PARTIAL_GPU_PRICE,
    PARTIAL_GPUS,
    PARTIAL_REQUEST_S,
    SpanSet,
    partial_scrapes,
    store_scrapes,
)
from ledger import coverage as cov
from ledger import efficiency
from ledger import overview as ov
from ledger.allocation import HOUR_NS
from ledger.deployments import sync_configured
from ledger.marts import refresh
from ledger.price_book import set_price
from ledger.queries import Filters, QueryError, query_names, run
from models.deployment_config import Deployment

HOUR0 = 494_444 * HOUR_NS  # 2026-05-28 20:00 UTC
T0 = datetime.fromtimestamp(HOUR0 // 1_000_000_000, UTC)
RATE = PARTIAL_GPUS * PARTIAL_GPU_PRICE / 3600  # $/s of one r0 replica
PER_HOUR = int(3600 // PARTIAL_EVERY_S)  # r0 requests per hour


def whole(hours: int = 4, start: int = 0, **kw) -> Filters:
    return Filters(T0 + timedelta(hours=start), T0 + timedelta(hours=start + hours), **kw)


@pytest.fixture
def partial(storage):
    partial_scrapes(storage, HOUR0)
    refresh(storage)
    return storage


def test_unscraped_time_is_estimated_from_size_and_price(partial):
    rows = partial.fetchall(
        """
        select replica, cost_basis, count(*), sum(prefill_cost + decode_cost),
            sum(estimated_cost)
        from mart_requests group by all order by all
        """
    )
    by = {(r, b): (n, cost, est) for r, b, n, cost, est in rows}
    n, cost, est = by[("r0", "estimated")]
    assert n == 3 * PER_HOUR  # the three unscraped hours
    # GPUs x $/GPU-hour x the time the requests ran (20 s each, alone)
    assert cost == pytest.approx(n * RATE * PARTIAL_REQUEST_S, rel=1e-9)
    assert est == pytest.approx(cost, rel=1e-9) and est > 0
    n, cost, est = by[("r0", "measured")]
    assert (n, est) == (PER_HOUR, 0) and cost == pytest.approx(PER_HOUR * RATE * 20, rel=1e-9)
    # rx was never scraped: no deployment, no size, no price — unpriced, not a silent $0
    n, cost, _ = by[("rx", "unpriced")]
    assert n == 4 and cost == 0
    assert partial.fetchall("select sum(requests), any_value(reason) from unpriced_requests") == [
        (4, "replica never scraped: deployment, GPU type and size unknown")
    ]
    # replica-hours: estimated seconds and cost, and usage only inside scraped up time
    rh = partial.fetchall(
        "select epoch_ns(hour), est_s, est_cost, up_s, busy_s, gpu_s, usage_gpu_s, total_cost "
        "from mart_replica_hours where replica = 'r0' order by 1"
    )
    for _hour, est_s, est_cost, up_s, busy_s, gpu_s, usage_gpu_s, total in rh[:3]:
        assert est_s == pytest.approx(PER_HOUR * PARTIAL_REQUEST_S)
        assert est_cost == pytest.approx(RATE * est_s) and total == pytest.approx(est_cost)
        assert (up_s, busy_s, gpu_s, usage_gpu_s) == (0, 0, 0, 0)
    *_, (_, est_s, est_cost, up_s, busy_s, gpu_s, usage_gpu_s, total) = rh
    assert (est_s, est_cost) == (0, 0) and up_s == pytest.approx(3600)
    assert usage_gpu_s == pytest.approx(PARTIAL_GPUS * busy_s) and usage_gpu_s <= gpu_s
    # the hourly spend mart says how much is estimated, and counts requests by basis
    spend = run(partial, "spend_kpis", whole()).to_pylist()[0]
    assert spend["estimated_cost"] == pytest.approx(3 * PER_HOUR * RATE * PARTIAL_REQUEST_S)
    assert (spend["estimated_requests"], spend["unpriced_requests"]) == (3 * PER_HOUR, 4)
    (estimated_total,) = partial.fetchall("select sum(estimated_cost) from spend_totals")[0]
    assert estimated_total == pytest.approx(spend["estimated_cost"])
    # the GPU page's deployment table: estimated cost and hours beside the measured ones
    gpu = {r["deployment"]: r for r in run(partial, "gpu_by_deployment", whole()).to_pylist()}
    assert gpu["dep"]["estimated_cost"] == pytest.approx(spend["estimated_cost"])
    assert gpu["dep"]["estimated_h"] == pytest.approx(3 * PER_HOUR * PARTIAL_REQUEST_S / 3600)
    assert gpu["dep"]["gpu_hours"] == pytest.approx(PARTIAL_GPUS * 1.0)  # the scraped hour


def test_overlapping_unscraped_requests_split_the_union_of_their_time(storage):
    """Two requests overlapping on an unscraped replica: the estimate covers the union of their
    intervals (30 s, not 40 s nor the hour), split by the same sweep as measured cost."""
    set_price(storage, "gpu", "H200", "gpu_hour", 3.60, "2026-01-01", changed_by="t",
              source="cli")  # fmt: skip
    sync_configured(storage, [Deployment("dep", model="m", gpu_type="H200", gpus_per_replica=1)])
    # r0 is known (scraped an hour later), so its deployment and size are
    store_scrapes(storage, "r0", "dep", HOUR0 + HOUR_NS, [0, 15])
    spans = SpanSet(HOUR0)
    for app, start, end in (("a1", 100, 120), ("a2", 110, 130)):
        trace = spans.new_trace()
        root = spans.root(trace, start - 0.5, end + 0.5, app=app, route="/r")
        call = spans.llm_call(trace, root, start - 0.1, end + 0.1, model="m", input_tokens=100,
                              output_tokens=21)  # fmt: skip
        spans.engine(trace, call, start, end, replica="r0", queue_s=0.0, ttft_s=1.0,
                     prompt_tokens=100, completion_tokens=21)  # fmt: skip
    spans.store(storage)
    refresh(storage)
    rows = storage.fetchall(
        "select cost_basis, sum(prefill_cost + decode_cost), sum(estimated_cost), count(*) "
        "from mart_requests group by all"
    )
    assert len(rows) == 1
    basis, cost, est, n = rows[0]
    assert (basis, n) == ("estimated", 2)
    assert cost == pytest.approx(0.001 * 30, rel=1e-9) and est == pytest.approx(cost)


def test_no_gpu_price_means_unpriced_not_free(storage):
    partial_scrapes(storage, HOUR0, priced=False)
    refresh(storage)
    rows = dict(storage.fetchall("select cost_basis, count(*) from mart_requests group by all"))
    assert rows == {"unpriced": 4 * PER_HOUR + 4}
    reasons = dict(
        storage.fetchall("select reason, sum(requests) from unpriced_requests group by all")
    )
    assert reasons == {
        "no GPU price for the deployment": 4 * PER_HOUR,
        "replica never scraped: deployment, GPU type and size unknown": 4,
    }
    spend = run(storage, "spend_kpis", whole()).to_pylist()[0]
    assert spend["unpriced_requests"] == 4 * PER_HOUR + 4 and spend["estimated_cost"] == 0


def test_coverage_of_a_range(partial):
    c = cov.coverage(partial, whole())
    busy = PER_HOUR * PARTIAL_REQUEST_S
    # dep: 3 unscraped hours expected only for their busy time, then a scraped hour; rx: busy
    assert c.expected_s == pytest.approx(3 * busy + 3600 + 4 * PARTIAL_REQUEST_S)
    assert c.scraped_s == pytest.approx(3600)
    assert c.fraction == pytest.approx(3600 / (3 * busy + 3600 + 80))
    assert (c.requests, c.uncovered_requests, c.unpriced_requests) == (4 * PER_HOUR + 4, 22, 4)
    assert c.estimated_cost == pytest.approx(3 * busy * RATE)
    got = [(s.deployment, s.start, s.end, s.uncovered_requests) for s in c.stretches]
    assert got == [
        ("dep", T0, T0 + timedelta(hours=3), 3 * PER_HOUR),
        ("rx", T0, T0 + timedelta(hours=4), 4),
    ]
    assert c.incomplete_hours == {T0 + timedelta(hours=h) for h in range(4)}
    # the scraped hour alone, filtered to dep's model: complete
    last = cov.coverage(partial, whole(1, start=3, model="m"))
    assert last.complete and last.fraction == pytest.approx(1.0)


def test_merge_stretches_merges_contiguous_hours_only():
    def row(h, dep, scraped=0.0, uncovered=1):
        return {
            "hour": T0 + timedelta(hours=h), "deployment": dep, "expected_s": 3600.0,
            "scraped_s": scraped, "requests": 1, "uncovered_requests": uncovered,
            "estimated_cost": 0.5, "unpriced_requests": 0,
        }  # fmt: skip

    rows = [row(0, "a"), row(1, "a"), row(3, "a"), row(2, "a", 3600.0, 0), row(1, "b")]
    got = [(s.deployment, s.start.hour, s.end.hour, s.requests) for s in cov.merge_stretches(rows)]
    assert got == [("a", 20, 22, 2), ("b", 21, 22, 1), ("a", 23, 0, 1)]


def _shares(name: str, table: pa.Table) -> list[tuple[str, str, float]]:
    """Every value of a column that is a share, a utilisation or a rate of a whole."""
    out = []
    for col in table.column_names:
        low = col.lower()
        words = set(low.split("_"))
        if words & {"per", "cost", "s", "h", "tokens"} or "run_rate" in low:
            continue  # money, seconds, hours, tokens or a run rate: not a share
        if words & {"share", "util", "rate", "occupancy", "fraction"} or "kv_usage" in low:
            for v in table.column(col).to_pylist():
                if isinstance(v, float) and not math.isnan(v):
                    out.append((name, col, v))
    return out


@pytest.mark.parametrize("scraped_s", [3600, 300])
def test_no_share_on_any_page_exceeds_100_percent(storage, scraped_s):
    """Every page's data on a partial ledger: all shares within [0, 1] (+1e-9). With the last
    5 minutes scraped, busy time outside them once read as a busy share of 320 %."""
    partial_scrapes(storage, HOUR0, scraped_s=scraped_s)
    refresh(storage)
    partial = storage
    found: list[tuple[str, str, float]] = []
    extras = {"dim": "route", "bucket": "hour", "limit": 50, "offset": 0, "key": "/r"}
    for f in (whole(), whole(model="m"), whole(app="a1"), whole(2, start=2)):
        for name in query_names():
            try:
                table = run(partial, name, f, **extras)
            except QueryError:
                continue  # a query that needs an id (a trace, a task): not a page-wide figure
            found += _shares(name, table)
        k = ov.overview_kpis(partial, f, now=f.end)
        found += [("overview_kpis", n, getattr(k, n)) for n in ("gpu_util", "busy_share")]
        found += [("overview_kpis", n, getattr(k, n)) for n in dir(k) if n.endswith("_rate")]
        for fn in (efficiency.replica_table, efficiency.replica_over_time):
            found += _shares(fn.__name__, fn(partial, f))
    checked = [(n, c, v) for n, c, v in found if v is not None]
    assert any(c == "busy_share" for _, c, _ in checked)
    assert any(c == "usage_share" for _, c, _ in checked)
    bad = [(n, c, v) for n, c, v in checked if not (-1e-9 <= v <= 1 + 1e-9)]
    assert not bad, bad
    k = ov.overview_kpis(partial, whole(), now=whole().end)
    # busy share = busy ÷ up over the scraped time only: 2 requests x 20 s of the last hour
    expected_busy = 120 / 3600 if scraped_s == 3600 else 0.0
    assert k.busy_share == pytest.approx(expected_busy, abs=1e-9)
    assert k.estimated_cost > 0 and k.unpriced_requests == 4


def test_incomplete_comparison_period_hides_movers(partial):
    # the last 2 hours against the first 2: the baseline is mostly unscraped
    found, comparison = ov.comparable_movers(partial, whole(2, start=2), "route")
    assert not comparison.comparable and found == []
    assert "incomplete" in comparison.reason()
    # a baseline before the ledger's first hour: its data begins inside it
    _, comparison = ov.comparable_movers(partial, whole(1, start=0), "route")
    assert comparison.starts_inside and "data begins" in comparison.reason()


def test_forecast_leaves_incomplete_hours_out():
    now = T0 + timedelta(hours=4, minutes=30)
    hourly = [(T0 + timedelta(hours=h), c) for h, c in enumerate([1.0, 1.0, 10.0, 10.0])]
    full = ov.forecast_month_end(hourly, now)
    assert full.run_rate_per_hour == pytest.approx(22 / 4)
    part = ov.forecast_month_end(hourly, now, excluded=[T0, T0 + timedelta(hours=1)])
    assert part.run_rate_per_hour == pytest.approx(10.0)
    assert (part.rate_hours, part.excluded_hours) == (2, 2)


def test_banner_names_stretches_with_links(partial):
    c = cov.coverage(partial, whole())
    text = banner_text(c, "History loading: complete back to 2026-05-28 20:00 UTC")
    assert text.startswith("History loading")
    assert "dep 2026-05-28 20:00–23:00 UTC" in text and "rx 2026-05-28 20:00–" in text
    assert "unpriced: 4 requests" in text and "$" in text
    state = parse("?range=7d&team=t&idle=usage")
    href = stretch_href(state, c.stretches[0])
    assert href.startswith("/gpu?range=custom&start=2026-05-28T20:00&end=2026-05-28T23:00")
    assert "team=t" in href and "idle=usage" in href
    assert banner_text(cov.coverage(partial, whole(1, start=3, model="m"))) is None
    zero = {"requests": 0, "uncovered_requests": 0, "estimated_cost": 0.0, "unpriced_requests": 0}
    rows = [
        {"hour": T0 + timedelta(hours=2 * h), "deployment": "d", "expected_s": 10.0,
         "scraped_s": 0.0, **zero}
        for h in range(MAX_LISTED + 3)
    ]  # fmt: skip
    many = cov.summarize(rows, T0, T0 + timedelta(days=1))
    assert "and 3 more" in banner_text(many)


@pytest.mark.parametrize("incremental", [True, False])
def test_a_silent_outage_is_an_incomplete_stretch(storage, incremental):
    """No scrape and no request for three hours (the collector down, say), then scrapes again:
    the replica was expected all along (first to last successful scrape), so the three silent
    hours are coverage rows with nothing scraped and the banner names them. They have no data
    of their own, so the refresh must find them from the scrape that ends the silence."""
    sync_configured(storage, [Deployment("dep", model="m", gpu_type="H200", gpus_per_replica=1)])
    every = [float(t) for t in range(0, 3600, 15)]
    store_scrapes(storage, "r0", "dep", HOUR0, every)
    if incremental:
        refresh(storage)
    store_scrapes(storage, "r0", "dep", HOUR0 + 4 * HOUR_NS, every)
    refresh(storage)
    rows = storage.fetchall(
        "select hour, expected_s, scraped_s from mart_coverage_hourly "
        "where deployment = 'dep' order by hour"
    )
    by_hour = {h: (e, s) for h, e, s in rows}
    # hour 1: the last scrape (at 59:45) stands for at most 300 s, 285 s of them in hour 1
    assert by_hour[T0 + timedelta(hours=1)] == (pytest.approx(3600), pytest.approx(285))
    for h in (2, 3):
        assert by_hour[T0 + timedelta(hours=h)] == (pytest.approx(3600), 0)
    c = cov.coverage(storage, whole(5))
    assert not c.complete
    assert [(s.deployment, s.start, s.end) for s in c.stretches] == [
        ("dep", T0 + timedelta(hours=1), T0 + timedelta(hours=4))
    ]
