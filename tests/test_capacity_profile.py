"""The capacity planner's workload profile (issue #13), pure: typed-in profiles, knobs and SLOs
(round trips and every validation error), applying knobs, pools, and the simulator requests
a pool makes (rates, determinism, prefix sharing measured by the simulator itself)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from inferledger.core.errors import BadInputError
from models.capacity.knobs import apply_knobs, hosted_moves, knobs_from_mapping, knobs_to_mapping
from models.capacity.pools import make_pools, pool_peak_rate, pool_requests, pool_stats, prefix_plan
from models.capacity.profile import (
    MAX_LENGTH_SAMPLES,
    SOURCE_FIELDS,
    edit_app,
    profile_from_mapping,
    profile_to_mapping,
    slos_from_mapping,
    slos_to_mapping,
)
from models.capacity.types import (
    HOURS_OF_WEEK,
    AppProfile,
    Burst,
    Knobs,
    Move,
    Pool,
    Slo,
    SloClass,
    Source,
    WorkloadProfile,
)
from models.serving.cluster import Cluster
from models.serving.scenario import ScenarioConfig
from models.serving.scenario_run import cluster_config, resolve_engine
from models.serving.summary import summarize

DAILY = [10.0 * (1 + h % 6) for h in range(24)]
WEEKDAY = [1, 1, 1, 1, 1, 0.5, 0.25]


def typed() -> dict:
    return {
        "apps": [
            {
                "app": "chat",
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "daily": DAILY,
                "weekday": WEEKDAY,
                "lengths": [[1000, 100], [1500, 200], [800, 50]],
                "prefix_len": 512,
                "prefix_hit_rate": 0.3,
                "acceptance_rate": 0.8,
                "requests_per_task": 1.5,
            },
            {
                "app": "extract",
                "model": "llama-3.1-8b",
                "slo_class": "batch",
                "requests_per_hour": 120,
                "prompt_tokens": 2000.4,
                "output_tokens": 300,
                "burstiness": 0.5,
            },
            {
                "app": "support",
                "model": "gpt-4o",
                "hourly_requests": [float(h % 24) for h in range(HOURS_OF_WEEK)],
                "prompt_tokens": 300,
                "output_tokens": 80,
                "sources": {"hourly_requests": "measured", "lengths": "calibrated"},
            },
        ],
        "scope": {"apps": ["chat"]},
    }


SLOS = {
    "interactive": {"ttft_p95_ms": 500, "itl_p95_ms": 50, "e2e_p95_ms": 20000},
    "batch": {"e2e_p95_ms": 120000},
}


@pytest.fixture
def profile() -> WorkloadProfile:
    return profile_from_mapping(typed())


# --- typed-in profiles ------------------------------------------------------------------


def test_typed_profile_reads_every_traffic_and_length_form(profile):
    chat, extract, support = profile.apps
    assert chat.model == extract.model == "Llama-3.1-8B"  # the catalog's spelling
    assert support.model == "gpt-4o"  # a hosted model stays as typed
    # daily x weekday: Saturday 03:00 is DAILY[3] x 0.5
    assert chat.hourly_requests[5 * 24 + 3] == DAILY[3] * 0.5
    assert chat.hourly_requests[:24] == tuple(DAILY)
    assert extract.hourly_requests == (120.0,) * HOURS_OF_WEEK
    assert extract.lengths == ((2000, 300),)  # typed means: one sample, rounded
    assert extract.slo_class is SloClass.BATCH and extract.burstiness == 0.5
    assert chat.peak_rate == pytest.approx(60 / 3600)
    # no sources typed: every field is an assumption; typed sources are kept as given
    assert chat.sources == dict.fromkeys(SOURCE_FIELDS, Source.ASSUMED)
    assert support.sources == {"hourly_requests": Source.MEASURED, "lengths": Source.CALIBRATED}


def test_profile_round_trips_exactly_through_json(profile):
    data = json.loads(json.dumps(profile_to_mapping(profile)))
    assert profile_from_mapping(data) == profile
    measured = replace(
        profile,
        apps=(
            replace(profile.apps[0], history=(1.0, 2.0, 3.5), history_start=7200.0),
            *profile.apps[1:],
        ),
        window_start=100.0,
        window_end=200.0,
    )
    data = json.loads(json.dumps(profile_to_mapping(measured)))
    assert profile_from_mapping(data) == measured
    assert data["apps"][2]["sources"] == {"hourly_requests": "measured", "lengths": "calibrated"}


def _app(**changes) -> dict:
    app = {"app": "a", "model": "llama-3.1-8b", "requests_per_hour": 10, "lengths": [[10, 5]]}
    app.update(changes)
    return {k: v for k, v in app.items() if v is not ...}


BAD_APPS = [
    (_app(app=""), "app must be a non-empty name"),
    (_app(model=None), "app 'a': model must be"),
    (_app(colour="red"), r"app 'a': unknown field\(s\) colour"),
    (_app(requests_per_hour=...), "app 'a': give exactly one of hourly_requests"),
    (_app(daily=[1] * 24), r"give exactly one .*\(got requests_per_hour, daily\)"),
    (_app(requests_per_hour=-1), "app 'a': requests_per_hour must be >= 0"),
    (_app(requests_per_hour="lots"), "app 'a': requests_per_hour must be a number"),
    (_app(requests_per_hour=..., hourly_requests=[1] * 167), "hourly_requests needs 168"),
    (_app(requests_per_hour=..., daily=[1] * 23), "app 'a': daily needs 24 values"),
    (_app(requests_per_hour=..., daily=[1] * 24, weekday=[1] * 6), "weekday needs 7 values"),
    (_app(weekday=[1] * 7), "app 'a': weekday factors go with daily"),
    (_app(requests_per_hour=..., daily=[1] * 23 + [-2]), r"app 'a': daily\[23\] must be >= 0"),
    (_app(lengths=[]), "app 'a': lengths must be a non-empty list"),
    (_app(lengths=[[10]]), r"app 'a': lengths\[0\] must be \[prompt_tokens, output_tokens\]"),
    (_app(lengths=[[10, 0]]), r"app 'a': lengths\[0\]\[1\] must be >= 1"),
    (_app(lengths=[[1.5, 2]]), r"app 'a': lengths\[0\]\[0\] must be an integer"),
    (_app(lengths=[[1, 1]] * (MAX_LENGTH_SAMPLES + 1)), "app 'a': lengths holds 2001 samples"),
    (_app(prompt_tokens=5), "app 'a': give lengths or prompt_tokens/output_tokens, not both"),
    (_app(lengths=..., prompt_tokens=5), "app 'a': give lengths, or both prompt_tokens and"),
    (_app(lengths=..., prompt_tokens=0, output_tokens=3), "app 'a': prompt_tokens must be >= 1"),
    (_app(slo_class="urgent"), "app 'a': slo_class must be interactive or batch"),
    (_app(burstiness=0), "app 'a': burstiness must be > 0"),
    (_app(prefix_len=-1), "app 'a': prefix_len must be >= 0"),
    (_app(prefix_hit_rate=1), "app 'a': prefix_hit_rate must be < 1"),
    (_app(acceptance_rate=-0.1), "app 'a': acceptance_rate must be >= 0"),
    (_app(acceptance_rate=1.5), "app 'a': acceptance_rate must be <= 1"),
    (_app(requests_per_task=0.5), "app 'a': requests_per_task must be >= 1"),
    (_app(history=[1, "x"]), r"app 'a': history\[1\] must be a number"),
    (_app(history_start=1800), "app 'a': history_start must be a whole UTC hour"),
    (_app(sources={"colour": "measured"}), "app 'a': sources: unknown field 'colour'"),
    (_app(sources={"lengths": "guessed"}), "app 'a': sources: lengths must be measured"),
]


@pytest.mark.parametrize(("app", "message"), BAD_APPS)
def test_every_bad_app_value_is_one_line_naming_app_and_field(app, message):
    with pytest.raises(BadInputError, match=message) as info:
        profile_from_mapping({"apps": [app]})
    assert "\n" not in str(info.value) and str(info.value).startswith("profile: apps")


def test_bad_profile_shapes():
    with pytest.raises(BadInputError, match="profile must be a mapping"):
        profile_from_mapping([])
    with pytest.raises(BadInputError, match="profile: apps must be a non-empty list"):
        profile_from_mapping({"apps": []})
    with pytest.raises(BadInputError, match="profile: a profile names each app once"):
        profile_from_mapping({"apps": [_app(), _app()]})
    with pytest.raises(BadInputError, match=r"profile: unknown field\(s\) windows"):
        profile_from_mapping({"apps": [_app()], "windows": 1})
    with pytest.raises(BadInputError, match="window_end must be >= window_start"):
        profile_from_mapping({"apps": [_app()], "window_start": 5, "window_end": 1})


def test_edit_app_marks_edited_fields_assumed():
    measured = replace(
        profile_from_mapping({"apps": [_app()]}).apps[0],
        sources=dict.fromkeys(SOURCE_FIELDS, Source.MEASURED),
    )
    profile = WorkloadProfile((measured,))
    edited = edit_app(profile, "a", {"prompt_tokens": 40, "output_tokens": 9, "daily": [2] * 24})
    app = edited.app("a")
    assert app.lengths == ((40, 9),) and app.hourly_requests == (2.0,) * HOURS_OF_WEEK
    assert app.sources["lengths"] is Source.ASSUMED
    assert app.sources["hourly_requests"] is Source.ASSUMED
    assert app.sources["burstiness"] is Source.MEASURED
    with pytest.raises(BadInputError, match="edit: app 'a': burstiness must be > 0"):
        edit_app(profile, "a", {"burstiness": -1})


# --- SLOs --------------------------------------------------------------------------------


def test_slos_are_milliseconds_outside_and_seconds_inside():
    slos = slos_from_mapping(SLOS)
    assert slos[SloClass.INTERACTIVE] == Slo(0.5, 0.05, 20.0)
    assert slos[SloClass.BATCH] == Slo(e2e_p95_s=120.0)
    back = slos_to_mapping(slos)
    assert back["interactive"] == {"ttft_p95_ms": 500, "itl_p95_ms": 50, "e2e_p95_ms": 20000}
    assert back["batch"]["ttft_p95_ms"] is None
    assert slos_from_mapping(json.loads(json.dumps(back))) == slos


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"urgent": {"ttft_p95_ms": 1}}, "slos: unknown class 'urgent'"),
        ({"batch": {"ttft_p95_s": 1}}, r"slos: batch: unknown field\(s\) ttft_p95_s"),
        ({"batch": {"ttft_p95_ms": 0}}, "slos: batch: ttft_p95_ms must be > 0"),
        ({"batch": {"ttft_p95_ms": None}}, "slos: batch: an SLO needs at least one target"),
        ({"batch": 5}, "slos: batch must be a mapping"),
    ],
)
def test_bad_slos(data, message):
    with pytest.raises(BadInputError, match=message):
        slos_from_mapping(data)


# --- knobs -------------------------------------------------------------------------------

KNOBS = {
    "traffic": 2,
    "traffic_by_app": {"extract": 0.5},
    "context": 1.5,
    "output": 0.5,
    "prefix_hit_delta": 0.1,
    "remove_apps": ["support"],
    "add_apps": [_app(app="new")],
    "moves": [
        {"app": "chat", "share": 0.25, "to_model": "llama-3.1-70b"},
        {"app": "chat", "share": 0.25, "hosted": "gpt-4o-mini"},
    ],
    "fallback": [
        {"app": "extract", "share": 0.1, "to_model": "llama-3.1-8b"},
        {"app": "x", "share": 1},
    ],
    "burst": {"factor": 1.5, "minutes": 10},
}


def test_knobs_round_trip():
    knobs = knobs_from_mapping(KNOBS)
    assert knobs.moves[1] == Move("chat", 0.25, hosted="gpt-4o-mini")
    assert knobs.fallback[1] == ("x", 1.0)  # no to_model: resolved against the profile later
    assert knobs.burst == Burst(1.5, 10.0)
    assert knobs_from_mapping(json.loads(json.dumps(knobs_to_mapping(knobs)))) == knobs
    assert knobs_from_mapping(None) == Knobs()
    assert knobs_from_mapping(knobs_to_mapping(Knobs())) == Knobs()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"traffic": 0}, "knobs: traffic must be > 0"),
        ({"context": "x"}, "knobs: context must be a number"),
        ({"prefix_hit_delta": 2}, r"knobs: prefix_hit_delta must be in \[-1, 1\]"),
        ({"traffic_by_app": {"chat": -1}}, "knobs: traffic_by_app: chat must be > 0"),
        ({"remove_apps": "chat"}, "knobs: remove_apps must be a list of names"),
        ({"add_apps": [_app(lengths=[])]}, "knobs: add_apps: app 'a': lengths must be"),
        ({"moves": [{"app": "c", "share": 0.5}]}, r"knobs: moves\[0\]: give exactly one of"),
        ({"moves": [{"app": "c", "share": 1.5, "hosted": "g"}]}, "share must be <= 1"),
        ({"moves": [{"app": "c", "share": 0, "hosted": "g"}]}, "share must be > 0"),
        ({"moves": [{"share": 0.5, "hosted": "g"}]}, r"moves\[0\]: app must be a non-empty"),
        ({"fallback": [{"app": "c", "share": 0.5, "hosted": "g"}]}, r"fallback\[0\]: unknown"),
        ({"burst": {"factor": 0.5, "minutes": 5}}, "knobs: burst: factor must be >= 1"),
        ({"burst": {"factor": 2, "minutes": 0}}, "knobs: burst: minutes must be > 0"),
        ({"speed": 2}, r"knobs: unknown field\(s\) speed"),
    ],
)
def test_bad_knobs(data, message):
    with pytest.raises(BadInputError, match=message):
        knobs_from_mapping(data)


def test_traffic_context_and_output_knobs(profile):
    knobs = Knobs(traffic=2, traffic_by_app={"chat": 1.5}, context=1.5, output=0.004)
    out = apply_knobs(profile, knobs)
    chat, extract = out.app("chat"), out.app("extract")
    base = profile.app("chat")
    assert chat.hourly_requests == tuple(v * 3 for v in base.hourly_requests)
    assert extract.hourly_requests == (240.0,) * HOURS_OF_WEEK
    # lengths scaled and rounded, never below 1 token; the prefix grows with the context
    assert chat.lengths == ((1500, 1), (2250, 1), (1200, 1))
    assert chat.prefix_len == 768 and chat.prefix_hit_rate == base.prefix_hit_rate
    assert chat.sources == base.sources  # knobs are recorded beside the plan, not here
    with pytest.raises(BadInputError, match="knobs: traffic_by_app: no app 'nope'"):
        apply_knobs(profile, Knobs(traffic_by_app={"nope": 2}))


def test_traffic_knob_scales_history_for_the_forecast(profile):
    chat = replace(profile.app("chat"), history=(10.0, 20.0), history_start=3600.0)
    out = apply_knobs(WorkloadProfile((chat,)), Knobs(traffic=2))
    assert out.app("chat").history == (20.0, 40.0)


def test_prefix_hit_delta(profile):
    up = apply_knobs(profile, Knobs(prefix_hit_delta=0.3)).app("chat")
    assert up.prefix_hit_rate == pytest.approx(0.6)
    assert up.prefix_len == 1024  # 512 x 0.6 / 0.3: the same share shares a longer prefix
    capped = apply_knobs(profile, Knobs(prefix_hit_delta=0.9)).app("chat")
    assert capped.prefix_hit_rate == 0.95
    assert capped.prefix_len == 1499  # 512 x 0.95 / 0.3, capped below the longest prompt
    off = apply_knobs(profile, Knobs(prefix_hit_delta=-0.5)).app("chat")
    assert off.prefix_hit_rate == 0 and off.prefix_len == 0
    # no sharing before: every request shares a prefix of rate x mean prompt
    fresh = apply_knobs(profile, Knobs(prefix_hit_delta=0.2)).app("extract")
    assert fresh.prefix_hit_rate == pytest.approx(0.2) and fresh.prefix_len == 400
    assert prefix_plan(fresh) == (400, 1.0)


def test_remove_add_and_moves(profile):
    knobs = Knobs(
        remove_apps=("support",),
        add_apps=(profile_from_mapping({"apps": [_app(app="new")]}).apps[0],),
        moves=(Move("chat", 0.25, to_model="llama-3.1-70b"), Move("chat", 0.5, hosted="gpt-4o")),
        traffic=2,
    )
    out = apply_knobs(profile, knobs)
    assert [a.app for a in out.apps] == ["chat", "extract", "new", "chat→Llama-3.1-70B"]
    base = profile.app("chat").hourly_requests
    assert out.app("chat").hourly_requests == pytest.approx([v * 2 * 0.25 for v in base])
    moved = out.app("chat→Llama-3.1-70B")
    assert moved.model == "Llama-3.1-70B" and moved.lengths == profile.app("chat").lengths
    assert moved.hourly_requests == pytest.approx([v * 2 * 0.25 for v in base])
    assert out.app("new").hourly_requests == (10.0,) * HOURS_OF_WEEK  # added apps as typed
    ((app, share, hosted, traffic),) = hosted_moves(profile, knobs)
    assert (app, share, hosted) == ("chat", 0.5, "gpt-4o")
    assert traffic.model == "gpt-4o" and traffic.app == "chat→gpt-4o"
    assert traffic.hourly_requests == pytest.approx([v * 2 * 0.5 for v in base])
    # a whole app moved away leaves the profile
    gone = apply_knobs(profile, Knobs(moves=(Move("extract", 1.0, hosted="gpt-4o"),)))
    assert "extract" not in [a.app for a in gone.apps]


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        (Knobs(remove_apps=("nope",)), "knobs: remove_apps: no app 'nope'"),
        (Knobs(moves=(Move("nope", 0.5, hosted="g"),)), "knobs: moves: no app 'nope'"),
        (
            Knobs(moves=(Move("chat", 0.6, hosted="g"), Move("chat", 0.6, hosted="h"))),
            "shares of app 'chat' add up to 1.2",
        ),
        (Knobs(moves=(Move("chat", 0.5, to_model="gpt-5"),)), "'gpt-5' is not in the model"),
        (Knobs(fallback=(Move("nope", 0.5, to_model="llama-3.1-8b"),)), "fallback: no app"),
        (Knobs(fallback=(Move("support", 0.5, to_model="gpt-5"),)), "'gpt-5' is not self-hosted"),
        (
            Knobs(add_apps=(AppProfile("chat", "x", (0.0,) * HOURS_OF_WEEK, ((1, 1),)),)),
            "add_apps: app 'chat' is already in the profile",
        ),
    ],
)
def test_bad_knobs_for_the_profile(profile, knobs, message):
    with pytest.raises(BadInputError, match=message):
        apply_knobs(profile, knobs)


def test_fallback_adds_the_share_on_a_self_hosted_model(profile):
    out = apply_knobs(profile, Knobs(fallback=(Move("support", 0.3, to_model="llama-3.1-70b"),)))
    assert out.app("support") == profile.app("support")  # the degraded provider still called
    fb = out.app("support→Llama-3.1-70B (fallback)")
    assert fb.model == "Llama-3.1-70B"
    assert fb.hourly_requests == pytest.approx(
        [v * 0.3 for v in profile.app("support").hourly_requests]
    )
    # (app, share) without a model: the profile's one self-hosted model
    plain = apply_knobs(profile, Knobs(fallback=(("support", 0.3),)))
    assert plain.app("support→Llama-3.1-8B (fallback)").model == "Llama-3.1-8B"
    two = apply_knobs(profile, Knobs(moves=(Move("chat", 0.1, to_model="llama-3.1-70b"),)))
    with pytest.raises(BadInputError, match="name to_model"):
        apply_knobs(two, Knobs(fallback=(("support", 0.3),)))


# --- pools -------------------------------------------------------------------------------


def test_make_pools_groups_by_class_and_model(profile):
    slos = slos_from_mapping(SLOS)
    pools, unplanned = make_pools(profile, slos)
    assert [p.name for p in pools] == ["batch/llama-3.1-8b", "interactive/llama-3.1-8b"]
    assert pools[1].model == "Llama-3.1-8B" and pools[1].slo == slos[SloClass.INTERACTIVE]
    assert [a.app for a in pools[1].apps] == ["chat"]
    assert unplanned == [("support", "model 'gpt-4o' is not in the model catalog")]
    with pytest.raises(BadInputError, match="slos: no SLO for class batch"):
        make_pools(profile, {SloClass.INTERACTIVE: Slo(1.0)})
    idle = replace(profile.app("extract"), hourly_requests=(0.0,) * HOURS_OF_WEEK)
    _, unplanned = make_pools(WorkloadProfile((idle,)), slos)
    assert unplanned == [("extract", "no traffic")]


def _pool(*apps: AppProfile) -> Pool:
    return Pool("interactive/llama-3.1-8b", SloClass.INTERACTIVE, "Llama-3.1-8B", apps, Slo(1.0))


def _flat(name: str, per_hour, lengths=((100, 10),), **kw) -> AppProfile:
    hourly = tuple(per_hour) if not isinstance(per_hour, int | float) else (per_hour,) * 168
    return AppProfile(name, "Llama-3.1-8B", tuple(float(v) for v in hourly), lengths, **kw)


def test_pool_peak_is_the_busiest_hour_of_the_sum():
    a = _flat("a", [3600.0 if h == 10 else 0.0 for h in range(168)])
    b = _flat("b", [1800.0 if h in (10, 11) else 7200.0 if h == 50 else 0.0 for h in range(168)])
    pool = _pool(a, b)
    # hour 10: 5400/h; hour 50: 7200/h (not 3600 + 7200 from the two apps' own peaks)
    assert pool_peak_rate(pool) == pytest.approx(2.0)
    assert pool_peak_rate(pool, Burst(1.5, 10)) == pytest.approx(3.0)
    assert pool_stats(pool).app_shares == {"a": 0.0, "b": 1.0}


def test_pool_stats_by_hand():
    a = _flat("a", 3000, ((1000, 100), (2000, 300)), prefix_len=500, prefix_hit_rate=0.2)
    b = _flat("b", 1000, ((400, 40),), burstiness=0.5)
    stats = pool_stats(_pool(a, b))
    assert stats.app_shares == {"a": 0.75, "b": 0.25}
    assert stats.mean_prompt == pytest.approx(0.75 * 1500 + 0.25 * 400)
    assert stats.mean_output == pytest.approx(0.75 * 200 + 0.25 * 40)
    # a: hit 0.2 of 1500 tokens = 300 per request: a 500-token prefix on 60 % of them
    assert prefix_plan(a) == (500, pytest.approx(0.6))
    assert stats.mean_cached_prompt == pytest.approx(0.75 * 300)
    assert stats.p95_prompt == 2000 and stats.p95_output == 300
    assert stats.mean_context == pytest.approx(stats.mean_prompt + stats.mean_output / 2)
    assert stats.burstiness == pytest.approx(1 / (0.75 / 1 + 0.25 / 0.5))


# --- the simulator's requests ------------------------------------------------------------


def test_requests_are_deterministic_and_share_draws_across_rates():
    a = _flat("a", 3000, ((1000, 100), (2000, 300)), prefix_len=500, prefix_hit_rate=0.2)
    b = _flat("b", 1000, ((400, 40),), burstiness=0.5)
    pool = _pool(a, b)
    one = pool_requests(pool, 2.0, 500, seed=3)
    assert one == pool_requests(pool, 2.0, 500, seed=3)
    assert one != pool_requests(pool, 2.0, 500, seed=4)
    four = pool_requests(pool, 8.0, 500, seed=3)
    assert one[0].arrival_s == 0.0
    # common random numbers: the same requests, times divided by the rate ratio
    assert [(s.request_id, s.prompt, s.output_tokens) for s in one] == [
        (s.request_id, s.prompt, s.output_tokens) for s in four
    ]
    assert np.allclose([s.arrival_s / 4 for s in one], [s.arrival_s for s in four])
    with pytest.raises(BadInputError, match="rate must be > 0"):
        pool_requests(pool, 0.0, 10)
    with pytest.raises(BadInputError, match="num_requests must be >= 1"):
        pool_requests(pool, 1.0, 0)


def test_requests_follow_rate_shares_lengths_and_burstiness():
    a = _flat("a", 3000, ((1000, 100), (2000, 300)))
    b = _flat("b", 1000, ((400, 40),), burstiness=0.25)
    pool = _pool(a, b)
    n = 20000
    specs = pool_requests(pool, 5.0, n, seed=0)
    times = np.array([s.arrival_s for s in specs])
    assert (n - 1) / times[-1] == pytest.approx(5.0, rel=0.05)
    share_a = sum(s.request_id.startswith("a-") for s in specs) / n
    assert share_a == pytest.approx(0.75, abs=0.015)
    assert {(s.prompt_tokens, s.output_tokens) for s in specs if s.request_id.startswith("a-")} == {
        (1000, 100),
        (2000, 300),
    }
    # the pool's gamma shape: 1 / (0.75 x 1 + 0.25 x 4) = 1/1.75
    gaps = np.diff(times)
    cv2 = gaps.var() / gaps.mean() ** 2
    assert 1 / cv2 == pytest.approx(1 / 1.75, rel=0.1)
    assert all(s.max_tokens == s.output_tokens for s in specs)


def _simulated_hit_rate(pool: Pool, rate: float = 1.0, n: int = 600) -> float:
    scenario = ScenarioConfig(model=pool.model, gpu="H100")
    engine, predictor = resolve_engine(scenario)
    result = Cluster(cluster_config(scenario, engine), predictor).run(
        pool_requests(pool, rate, n, seed=0)
    )
    return float(summarize(result)["prefix_cache_hit_rate"])


@pytest.mark.parametrize(
    ("prefix_len", "hit"),
    [(512, 0.3), (0, 0.25), (1024, 0.1)],
)
def test_simulated_prefix_cache_sees_the_hit_rate(prefix_len, hit):
    app = _flat(
        "a", 3600, ((1000, 50), (1500, 80), (2400, 40), (800, 60)),
        prefix_len=prefix_len, prefix_hit_rate=hit,
    )  # fmt: skip
    # whole 16-token blocks, one cold miss: slightly under the target, never far off
    assert _simulated_hit_rate(_pool(app)) == pytest.approx(hit, abs=0.02)


def test_no_prefix_no_sharing():
    app = _flat("a", 3600, ((1000, 50),), prefix_len=512, prefix_hit_rate=0.0)
    specs = pool_requests(_pool(app), 1.0, 50)
    assert all(len(s.prompt) == 1 for s in specs)
    assert _simulated_hit_rate(_pool(app), n=100) == 0.0
