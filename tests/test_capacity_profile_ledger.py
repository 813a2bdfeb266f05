"""The capacity planner's workload profile measured from a real ledger (issue #13): spans built
by hand (inferledger.ledger_fixtures.SpanSet) go through the real ingest path and refresher;
load_profile's counts must equal what was put in, its means match within tolerance."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

import ledger.capacity_profile as cp
from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage
from inferledger.ledger_fixtures import S, SpanSet
from ledger.capacity_profile import hour_of_week, load_profile
from ledger.marts import refresh
from models.capacity.pools import pool_requests
from models.capacity.types import HOURS_OF_WEEK, Pool, Slo, Source

T0 = datetime(2026, 6, 1, 9, tzinfo=UTC)  # a Monday, 09:00 UTC
HOURS = 3
CHAT_RATE = (150, 300, 225)  # mean chat requests in each hour
CHAT_SHAPE = 0.5  # gamma shape of chat's gaps
PROMPTS = (800, 1200, 1600)
OUTPUTS = (100, 200)
PREFIX = 512  # cached tokens of every other chat request
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def chat_starts() -> list[float]:
    rng = np.random.default_rng(7)
    starts: list[float] = []
    for h, n in enumerate(CHAT_RATE):
        t = h * 3600.0
        while True:
            t += rng.gamma(CHAT_SHAPE, 3600.0 / n / CHAT_SHAPE)
            if t >= (h + 1) * 3600.0 - 5:
                break
            starts.append(t)
    return starts


def task_outcome(task: int) -> str | None:
    """Chat's tasks: every 5th pending, every 4th of the rest rejected, the others accepted."""
    if task % 5 == 0:
        return None
    return "rejected" if task % 4 == 0 else "accepted"


def build(storage: Storage) -> dict:
    """chat: self-hosted Llama 8B, gamma arrivals, two requests per task, half of them hitting a
    512-token cached prefix; support: hosted gpt-4o on /help, 10 evenly spaced requests an hour;
    mixed: 3 hosted calls and 2 self-hosted ones."""
    spans = SpanSet(int(T0.timestamp()) * S)
    truth: dict = {"chat": [], "support": [], "mixed": []}
    for i, t in enumerate(chat_starts()):
        task = i // 2
        prompt, output = PROMPTS[i % 3], OUTPUTS[i % 2]
        cached = PREFIX if i % 2 == 0 else 0
        trace = spans.new_trace()
        root = spans.root(
            trace, t, t + 2.2, app="chat", route="/ask", task_id=f"task-{task}",
            outcome=task_outcome(task) if i % 2 == 1 else None,
        )  # fmt: skip
        call = spans.llm_call(
            trace, root, t, t + 2.1, model=LLAMA, input_tokens=prompt, output_tokens=output,
            cached_tokens=cached, task_id=f"task-{task}",
        )  # fmt: skip
        spans.engine(
            trace, call, t + 0.01, t + 2.0, replica="r0", queue_s=0.0, ttft_s=0.2,
            prompt_tokens=prompt, completion_tokens=output,
        )  # fmt: skip
        truth["chat"].append((t, prompt, output, cached, task))
    for h in range(HOURS):
        for k in range(10):
            t = h * 3600 + 60 + k * 300
            trace = spans.new_trace()
            root = spans.root(trace, t, t + 3, app="support", route="/help")
            spans.llm_call(
                trace, root, t + 0.1, t + 2.9, model="gpt-4o", provider="openai",
                input_tokens=300, output_tokens=80,
            )  # fmt: skip
            truth["support"].append(t)
    for k, hosted in enumerate((True, True, True, False, False)):
        t = 1800 + k * 10
        trace = spans.new_trace()
        root = spans.root(trace, t, t + 3, app="mixed", route="/mix")
        call = spans.llm_call(
            trace, root, t, t + 2.5, model="gpt-4o-mini" if hosted else LLAMA,
            provider="openai" if hosted else "vllm", input_tokens=100, output_tokens=10,
        )  # fmt: skip
        if not hosted:
            spans.engine(
                trace, call, t + 0.01, t + 2.4, replica="r0", queue_s=0.0, ttft_s=0.1,
                prompt_tokens=100, completion_tokens=10,
            )  # fmt: skip
    spans.store(storage)
    refresh(storage)
    return truth


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    storage = Storage(tmp_path_factory.mktemp("capacity") / "ledger.duckdb").open()
    try:
        yield storage, build(storage)
    finally:
        storage.close()


END = T0 + timedelta(hours=HOURS)


def test_chat_is_measured_as_it_was_put_in(ledger):
    storage, truth = ledger
    profile = load_profile(storage, T0, END)
    assert [a.app for a in profile.apps] == ["chat", "mixed", "support"]
    chat = profile.app("chat")
    rows = truth["chat"]
    per_hour = Counter(int(t // 3600) for t, *_ in rows)
    # counts exact: the window's history, and the hours of the week it covered
    assert chat.history == tuple(float(per_hour[h]) for h in range(HOURS))
    assert chat.history_start == T0.timestamp()
    first = hour_of_week(int(T0.timestamp()))
    assert first == 9  # Monday 09:00
    for h in range(HOURS):
        assert chat.hourly_requests[first + h] == per_hour[h]
        # the same hour of day on the other days takes the measured mean
        assert chat.hourly_requests[first + h + 24 * 3] == per_hour[h]
    # hours of day never seen: the mean of every covered hour
    assert chat.hourly_requests[0] == pytest.approx(len(rows) / HOURS)
    assert chat.sources["hourly_requests"] is Source.CALIBRATED
    assert chat.model == "Llama-3.1-8B"
    # every request sampled (fewer than MAX_LENGTH_SAMPLES), the joint pairs kept
    assert Counter(chat.lengths) == Counter((p, o) for _, p, o, _, _ in rows)
    prompt_sum = sum(p for _, p, _, _, _ in rows)
    assert chat.prefix_hit_rate == pytest.approx(sum(c for *_, c, _ in rows) / prompt_sum)
    assert chat.prefix_len == PREFIX
    assert chat.sources["prefix_len"] is Source.CALIBRATED
    tasks = {task for *_, task in rows}
    assert chat.requests_per_task == pytest.approx(len(rows) / len(tasks))
    # a task's outcome rides on its second request (the last task may have only one)
    closed = {task for i, (*_, task) in enumerate(rows) if i % 2 == 1}
    decided = [task_outcome(k) for k in closed if task_outcome(k) is not None]
    assert chat.acceptance_rate == pytest.approx(decided.count("accepted") / len(decided))
    assert chat.sources["acceptance_rate"] is Source.MEASURED
    # gamma gaps of shape 0.5: 1/CV^2 of the gaps within each hour
    assert chat.burstiness == pytest.approx(CHAT_SHAPE, rel=0.2)
    assert chat.sources["burstiness"] is Source.MEASURED


def test_hosted_and_mixed_apps(ledger):
    storage, _ = ledger
    profile = load_profile(storage, T0, END)
    support = profile.app("support")
    assert support.model == "gpt-4o"  # not in the catalog: kept as the ledger names it
    assert support.history == (10.0, 10.0, 10.0)
    assert support.lengths == ((300, 80),) * 30
    assert support.requests_per_task == 1.0
    assert support.acceptance_rate is None
    assert support.sources["acceptance_rate"] is Source.ASSUMED
    assert support.prefix_hit_rate == 0 and support.sources["prefix_hit_rate"] is Source.ASSUMED
    # evenly spaced arrivals: as smooth as the clip allows
    assert support.burstiness == cp.BURSTINESS_RANGE[1]
    # mixed: three hosted calls, two self-hosted; the self-hosted model wins
    assert profile.app("mixed").model == "Llama-3.1-8B"
    # too few gaps to measure burstiness
    assert profile.app("mixed").sources["burstiness"] is Source.ASSUMED


def test_scope_filters(ledger):
    storage, _ = ledger
    only = load_profile(storage, T0, END, routes=["/help"])
    assert [a.app for a in only.apps] == ["support"]
    assert only.scope == {"apps": (), "routes": ("/help",)}
    by_app = load_profile(storage, T0, END, apps=["chat", "mixed"], environment="prod")
    assert [a.app for a in by_app.apps] == ["chat", "mixed"]
    assert by_app.scope["environment"] == ("prod",)
    with pytest.raises(BadInputError, match=r"no requests in .* for environment staging"):
        load_profile(storage, T0, END, environment="staging")
    with pytest.raises(BadInputError, match="no requests in"):
        load_profile(storage, END, END + timedelta(hours=1))
    with pytest.raises(BadInputError, match="time zone"):
        load_profile(storage, T0.replace(tzinfo=None), END)


def test_partial_hours_count_for_the_part_covered(ledger):
    storage, truth = ledger
    start = T0 + timedelta(minutes=30)
    profile = load_profile(storage, start, END)
    chat = profile.app("chat")
    in_first = sum(1 for t, *_ in truth["chat"] if 1800 <= t < 3600)
    assert chat.hourly_requests[9] == pytest.approx(in_first / 0.5)
    # history holds whole hours only
    assert chat.history_start == (T0 + timedelta(hours=1)).timestamp()
    assert len(chat.history) == HOURS - 1


def test_length_sample_is_capped_and_deterministic(ledger, monkeypatch):
    storage, truth = ledger
    monkeypatch.setattr(cp, "MAX_LENGTH_SAMPLES", 40)
    a = load_profile(storage, T0, END, apps=["chat"]).app("chat")
    b = load_profile(storage, T0, END, apps=["chat"]).app("chat")
    assert len(a.lengths) == 40 and a.lengths == b.lengths
    assert set(a.lengths) <= {(p, o) for _, p, o, _, _ in truth["chat"]}


def test_a_full_week_is_measured(tmp_path):
    monday = datetime(2026, 6, 1, tzinfo=UTC)
    storage = Storage(tmp_path / "week.duckdb").open()
    try:
        spans = SpanSet(int(monday.timestamp()) * S)
        for h in range(HOURS_OF_WEEK + 24):  # a week and a day: Monday counted twice
            for k in range(1 + h % 3):
                t = h * 3600 + 100 + k * 600
                trace = spans.new_trace()
                root = spans.root(trace, t, t + 2, app="bot", route="/b")
                spans.llm_call(
                    trace, root, t, t + 1, model="gpt-4o", provider="openai",
                    input_tokens=50, output_tokens=5,
                )  # fmt: skip
        spans.store(storage)
        refresh(storage)
        end = monday + timedelta(hours=HOURS_OF_WEEK + 24)
        bot = load_profile(storage, monday, end).app("bot")
    finally:
        storage.close()
    assert bot.sources["hourly_requests"] is Source.MEASURED
    for how in range(HOURS_OF_WEEK):
        counts = [1 + h % 3 for h in range(HOURS_OF_WEEK + 24) if h % HOURS_OF_WEEK == how]
        assert bot.hourly_requests[how] == pytest.approx(sum(counts) / len(counts))
    assert len(bot.history) == HOURS_OF_WEEK + 24


def test_a_measured_profile_drives_the_simulator_requests(ledger):
    """The chat app as measured: its pool's requests share the prefix at about its hit rate."""
    storage, _ = ledger
    chat = load_profile(storage, T0, END, apps=["chat"]).app("chat")
    pool = Pool("interactive/llama-3.1-8b", chat.slo_class, chat.model, (chat,), Slo(1.0))
    specs = pool_requests(pool, 2.0, 2000, seed=1)
    shared = sum(seg[1] for s in specs for seg in s.prompt if seg[0] == "chat/prefix")
    total = sum(s.prompt_tokens for s in specs)
    assert shared / total == pytest.approx(chat.prefix_hit_rate, rel=0.1)


@pytest.mark.slow
def test_the_demo_story_profiles_into_pools(story):
    """The demo's busiest 4 hours (tests/conftest.py `story`): every app is profiled, its
    arrivals add up to the ledger's requests, and its self-hosted apps plan into pools."""
    from models.capacity.pools import make_pools, pool_peak_rate
    from models.capacity.profile import slos_from_mapping

    db, end = story
    start = end - timedelta(hours=4)
    with Storage(db, read_timeout_s=120) as storage:
        profile = load_profile(storage, start, end)
        counts = dict(
            storage.fetchall(
                "select coalesce(app, '(none)'), count(*) from mart_requests"
                " where start_time >= $s and start_time < $e group by all",
                {"s": start, "e": end},
            )
        )
    assert {a.app: sum(a.history) for a in profile.apps} == counts
    slos = slos_from_mapping({"interactive": {"ttft_p95_ms": 1000}, "batch": {"e2e_p95_ms": 60000}})
    pools, _ = make_pools(profile, slos)
    assert pools and all(pool_peak_rate(p) > 0 for p in pools)
    for app in profile.apps:
        assert 1 <= len(app.lengths) <= 2000 and app.requests_per_task >= 1
