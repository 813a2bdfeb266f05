"""The alert kinds over the serving fleet's scrapes (ledger/alert_signals_fleet.py, issue #12),
on ledgers written through the real path: vLLM pages through the real scraper, and the
refresher over partial_scrapes (inferledger/ledger_fixtures.py) for coverage and unpriced
usage. Each kind fires on a crafted scenario and stays silent on a near miss."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.settings import ScrapeTarget
from inferledger.ledger_fixtures import partial_scrapes, store_scrapes
from ingest.scraper import Scraper
from ledger.alert_signals import signal_observations
from ledger.marts import Refresher
from models.alert_config import AlertRule, scope_key

AT = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)
BASE = datetime(2026, 3, 30, 8, 0, tzinfo=UTC)
BASE_NS = int(BASE.timestamp()) * 1_000_000_000


def rule(kind: str, threshold: float, **kw) -> AlertRule:
    return AlertRule(
        name=f"test {kind}",
        kind=kind,
        owner="ops",
        window_s=kw.pop("window_s", 300),
        threshold=threshold,
        resolve_threshold=threshold,
        **kw,
    )


def vllm_page(kv: float, waiting: int, preemptions: int) -> str:
    labels = '{engine="0",model_name="m"}'
    return (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{labels} {kv}\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{labels} {waiting}\n"
        "# TYPE vllm:num_preemptions counter\n"
        f"vllm:num_preemptions_total{labels} {preemptions}\n"
    )


def scrape(storage, replica: str, deployment: str, pages: Sequence[str]) -> None:
    """One page every 15 s over the 5 minutes before AT (20 scrapes), through the scraper."""
    scraper = Scraper(storage, ServiceMetrics(), 1 << 20)
    target = ScrapeTarget(replica, f"http://{replica}:8000/metrics", 15, 10, "vllm", deployment)
    for i, page in enumerate(pages):
        ts = AT - timedelta(seconds=300) + timedelta(seconds=15 * i)
        scraper.ingest_text(target, page, "text/plain; version=0.0.4", ts)
    scraper.close()


@pytest.mark.parametrize(
    ("pressed", "waiting", "expected"),
    [
        (10, 3, 50.0),  # half the instants full with requests waiting: fires at 25
        (4, 3, 20.0),  # a short burst: silent
        (20, 0, 0.0),  # full all the time but nothing waits (a warm cache, not pressure)
    ],
)
def test_kv_pressure_share_of_instants_full_with_requests_waiting(
    storage, pressed, waiting, expected
):
    pages = [
        vllm_page(0.95 if i < pressed else 0.5, waiting if i < pressed else 0, 0) for i in range(20)
    ]
    scrape(storage, "big-0", "big", pages)
    scrape(storage, "small-0", "small", [vllm_page(0.1, 0, 0)] * 20)
    r = rule("kv_pressure", 25.0, group_by=("deployment",))
    values = {o.scope_key: o.value for o in signal_observations(storage, r, AT)}
    assert values == {
        scope_key({"deployment": "big"}): pytest.approx(expected),
        scope_key({"deployment": "small"}): 0.0,
    }


@pytest.mark.parametrize(("preempted", "fires"), [(12, True), (9, False)])
def test_kv_pressure_preemptions_in_the_window(storage, preempted, fires):
    # the counter restarts (100 -> 3: the engine restarted and counted 3 since), then
    # reaches `preempted`: `preempted` preemptions in the window
    counts = [100] * 10 + [3] * 5 + [preempted] * 5
    scrape(storage, "big-0", "big", [vllm_page(0.5, 0, c) for c in counts])
    [obs] = signal_observations(storage, rule("kv_pressure", 25.0, scope={"deployment": "big"}), AT)
    assert (obs.value == 100.0) is fires
    assert "replica big-0" in obs.summary and f"{preempted} preemptions" in obs.summary


def test_kv_pressure_without_samples_is_no_data(storage):
    scrape(storage, "big-0", "big", [vllm_page(0.99, 5, 0)] * 20)
    later = rule("kv_pressure", 25.0)
    [obs] = signal_observations(storage, later, AT + timedelta(hours=1))
    assert obs.value is None


@pytest.mark.parametrize(("down", "fires"), [(3, True), (2, False)])
def test_coverage_gap_target_down(storage, down, fires):
    times = [float(t) for t in range(0, 300, 15)]
    store_scrapes(storage, "r0", "dep", BASE_NS, times, down_at_s=times[-down:])
    store_scrapes(storage, "r1", "dep", BASE_NS, times)
    at = BASE + timedelta(seconds=300)
    [obs] = signal_observations(storage, rule("coverage_gap", 50.0, group_by=("deployment",)), at)
    assert obs.scope_key == scope_key({"deployment": "dep"})
    assert (obs.value == 100.0) is fires
    if fires:
        assert "target r0 is down: its last 3 scrapes failed" in obs.summary


@pytest.fixture
def partial(storage):
    """4 hours of requests on r0 (scraped only in the last hour) and rx (never scraped, no
    deployment, so unpriced), refreshed by the real refresher."""
    partial_scrapes(storage, BASE_NS, hours=4, scraped_hours=1)
    Refresher(storage).refresh(full=True)
    return storage


def test_coverage_gap_replica_time_not_scraped(partial):
    r = rule("coverage_gap", 50.0, window_s=1800, group_by=("deployment",))
    dep, rx = scope_key({"deployment": "dep"}), scope_key({"deployment": "rx"})
    # 10:00-11:00: r0 (deployment dep) served requests with no scrape behind them
    early = {o.scope_key: o for o in signal_observations(partial, r, BASE + timedelta(hours=2.5))}
    assert early[dep].value == 100.0
    assert "100.0 % of 120 expected replica-seconds not scraped" in early[dep].summary
    # 11:00-12:00 is scraped throughout: the same rule is silent for dep; rx, a replica that
    # serves requests and is never scraped, stays a gap
    late = {
        o.scope_key: o.value for o in signal_observations(partial, r, BASE + timedelta(hours=4))
    }
    assert late == {dep: 0.0, rx: 100.0}


def test_unpriced_usage_on_the_refreshed_ledger(partial):
    at = BASE + timedelta(hours=2)
    r = rule("unpriced_usage", 1.0, window_s=3600, group_by=("app",))
    values = {o.scope_key: o.value for o in signal_observations(partial, r, at)}
    # rx (app a2) serves one request an hour and has no price; r0's (app a1) are estimated
    assert values[scope_key({"app": "a2"})] == 1.0
    assert values[scope_key({"app": "a1"})] == 0.0
