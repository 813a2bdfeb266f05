"""The Capacity planner page (issue #13). Its forms turn grid edits, knobs, SLOs and candidates
into a plan the planner accepts (edited figures become assumed; bad values are one-line
errors); and in a real browser on a real demo ledger an analyst loads the profile, runs a small
plan in the background, reads the ranked table and charts, saves it, and a bad SLO runs
nothing; a viewer reads the saved plan with no Run control."""

from __future__ import annotations

import shutil
from pathlib import Path
from statistics import fmean
from typing import Any

import pytest
from playwright.sync_api import expect

from app.pages import capacity_forms as forms
from app.pages.capacity_results import model_error_line
from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage
from ledger import users
from models.capacity.plan import model_error, plan_from_mapping
from models.capacity.types import AppProfile, Source, WorkloadProfile
from tests.conftest import PASSWORDS, sign_in

ANALYST = ("ava", "ava-analyst-pass")


def _profile() -> WorkloadProfile:
    hourly = tuple(100.0 + (h % 24) * 10 for h in range(168))
    app = AppProfile(
        app="chat",
        model="Llama-3.1-8B",
        hourly_requests=hourly,
        lengths=((1000, 200), (3000, 400)),
        prefix_len=500,
        prefix_hit_rate=0.3,
        history=hourly,
        history_start=0.0,
        sources={"hourly_requests": Source.MEASURED, "lengths": Source.MEASURED},
    )
    return WorkloadProfile(apps=(app,))


def test_grid_edits_become_assumed_and_scale_the_shape() -> None:
    profile = _profile()
    loaded = forms.profile_rows(profile)
    assert loaded[0]["peak_rph"] == 330 and loaded[0]["src_peak_rph"] == "measured"
    assert loaded[0]["mean_prompt"] == 2000 and loaded[0]["src_burstiness"] == "assumed"
    rows = [dict(loaded[0], peak_rph=660, mean_prompt=4000, prefix_hit_pct=50)]
    assert forms.mark_edited(rows, [{"colId": "peak_rph", "rowIndex": 0, "oldValue": 330,
                                     "value": 660}])  # fmt: skip
    assert rows[0]["src_peak_rph"] == "assumed"
    edited = forms.edited_profile(profile, rows, loaded).app("chat")
    assert max(edited.hourly_requests) == pytest.approx(660)
    assert edited.hourly_requests[5] / profile.app("chat").hourly_requests[5] == pytest.approx(2)
    assert edited.history == edited.hourly_requests  # the forecast follows the edit
    assert fmean(p for p, _ in edited.lengths) == pytest.approx(4000)
    assert [o for _, o in edited.lengths] == [200, 400]  # outputs untouched
    assert edited.prefix_hit_rate == pytest.approx(0.5)
    for field in ("hourly_requests", "lengths", "prefix_hit_rate"):
        assert edited.sources[field] == Source.ASSUMED
    # an unedited grid changes nothing
    assert forms.edited_profile(profile, loaded, loaded) == profile
    with pytest.raises(BadInputError, match="not both"):
        forms.edited_profile(profile, [dict(loaded[0], peak_rph=1, mean_rph=1)], loaded)
    with pytest.raises(BadInputError, match="prefix hit % must be in"):
        forms.edited_profile(profile, [dict(loaded[0], prefix_hit_pct=120)], loaded)


def test_forms_build_a_plan_the_planner_accepts() -> None:
    knobs = forms.knobs_mapping(
        {"traffic": 2, "traffic_by_app": "chat=1.5", "prefix_hit_delta": 10,
         "burst_factor": 3, "burst_minutes": 5, "move_app": "chat", "move_share": 20,
         "move_to": "hosted:gpt-4o-mini"}
    )  # fmt: skip
    slos = forms.slos_mapping({"interactive-ttft_p95_ms": 800, "interactive-e2e_p95_ms": 9000})
    assert "batch" not in slos  # no target: no batch pool
    space = forms.space_mapping(
        {"gpus": ["H100-SXM"], "tensor_parallel_sizes": [1, 2], "dtypes": ["bf16"],
         "kv_cache_dtypes": ["auto"], "max_num_seqs": "default, 128",
         "max_num_batched_tokens": "", "prefix_caching": ["on", "off"]},
        forms.what_if_prices(["H100-SXM"], {"H100-SXM": 3.0}, [2.5]),
    )  # fmt: skip
    inputs = plan_from_mapping(
        {"name": "x", "knobs": knobs, "slos": slos, "candidates": space,
         "hosted_prices": {"gpt-4o-mini": [0.15, 0.6]}},
        loaded_profile=_profile(),
    )  # fmt: skip
    assert inputs.knobs.traffic == 2 and inputs.knobs.traffic_by_app == {"chat": 1.5}
    assert inputs.knobs.prefix_hit_delta == pytest.approx(0.1)
    assert (inputs.knobs.burst.factor, inputs.knobs.burst.minutes) == (3, 5)
    assert inputs.knobs.moves[0].hosted == "gpt-4o-mini" and inputs.knobs.moves[0].share == 0.2
    assert inputs.space.max_num_seqs == (None, 128) and inputs.space.prices == {"H100-SXM": 2.5}
    assert inputs.space.prefix_caching == (True, False)
    assert inputs.slos["interactive"].ttft_p95_s == pytest.approx(0.8)

    with pytest.raises(BadInputError, match="ttft_p95_ms"):  # a bad SLO: one line, named
        plan_from_mapping(
            {"slos": forms.slos_mapping({"interactive-ttft_p95_ms": -5}), "candidates": space},
            loaded_profile=_profile(),
        )
    with pytest.raises(BadInputError, match="not a whole number"):
        forms.int_list("128, lots", "max_num_seqs")
    with pytest.raises(BadInputError, match="no price per GPU-hour for L40S"):
        forms.space_mapping({"gpus": ["L40S"]}, {"L40S": None})
    with pytest.raises(BadInputError, match="must be > 0"):
        forms.what_if_prices(["L40S"], {}, [0])


# ------------------------------------------------------------------------------------ browser
def test_a_pool_no_candidate_can_serve_says_why_without_an_empty_table() -> None:
    from app.pages import capacity_results as results

    reason = "Llama-3.1-70B (weights bf16, TP 1) does not fit on H100-SXM"
    pool = {
        "name": "interactive/llama-3.1-70b",
        "apps": ["internal-chat"],
        "slo": {"ttft_p95_ms": 1000},
        "peak_rate": 0.64,
        "screened": 0,
        "infeasible": [{"label": "x", "reason": reason}, {"label": "y", "reason": reason}],
        "candidates": [],
        "best": None,
    }
    section = results.pool_section(pool, 0, lambda name: f"capacity-{name}")
    text = str(section)
    assert "No candidate can serve this pool" in text and text.count(reason) == 1
    assert "Table(" not in text


@pytest.fixture
def planner_server(demo_ledger: Path, server_factory: Any, tmp_path: Path) -> Any:
    """A real `inferledger serve` process with sign-in on, over a private copy of the demo
    ledger with an analyst and a viewer. Its own process: the plan's simulations run on the
    server's worker thread, and inside the test process they competed with every thread the
    earlier tests left there (CI saw a 2-second plan not finish in 3 minutes)."""
    copy = tmp_path / "ledger.duckdb"
    shutil.copy(demo_ledger, copy)
    with Storage(copy) as storage:  # before the server holds the file
        users.add_user(storage, ANALYST[0], "analyst", ANALYST[1], by="test")
        users.add_user(storage, "vic", "viewer", PASSWORDS["vic"], by="test")
    return server_factory(db=copy, env={"INFERLEDGER_AUTH_ENABLED": "true"})


@pytest.mark.browser
def test_analyst_plans_saves_and_a_viewer_reads(
    planner_server: Any, tab: Any, browser: Any
) -> None:
    page, _ = tab
    url = planner_server.url
    sign_in(page, url, *ANALYST, "/capacity")
    page.wait_for_selector("#capacity-load")
    page.click("#capacity-load")
    expect(page.locator("#capacity-message")).to_contain_text("Loaded", timeout=30_000)
    assert page.locator("#capacity-profile .ag-row").count() >= 1

    # a bad SLO: the validator's message, nothing runs
    page.fill("#capacity-interactive-ttft_p95_ms", "-5")
    page.click("#capacity-run")
    expect(page.locator("#capacity-status .auth-error")).to_contain_text("ttft_p95_ms")
    expect(page.locator("#capacity-progress")).to_be_hidden()
    expect(page.locator("#capacity-cancel")).to_be_disabled()

    # the default candidates (H100 and H200, TP 1-8, bf16 and fp8), one verified per pool
    page.fill("#capacity-interactive-ttft_p95_ms", "2000")
    page.fill("#capacity-verify_top", "1")
    page.fill("#capacity-name", "today")
    page.click("#capacity-run")
    expect(page.locator("#capacity-status")).to_contain_text("Done", timeout=180_000)
    # the shipped error (models/data/planner_model_error.yaml), as the page words it
    shipped = model_error_line({"model_error": model_error()})
    expect(page.locator("#capacity-model-error")).to_contain_text(shipped.split(" (")[0])
    for model in ("llama-3.1-70b", "llama-3.1-8b"):  # the demo's two models: a pool each
        pool = page.locator(f"section[aria-label='interactive/{model}']")
        expect(pool).to_contain_text("Recommended")
        expect(pool.locator("table").first).to_contain_text("✓")
    # the 70B needs more than one H100's memory: never a single-GPU recommendation
    expect(
        page.locator("section[aria-label='interactive/llama-3.1-70b'] .stat").first
    ).not_to_contain_text("1xH100")
    expect(page.locator("#capacity-results .js-plotly-plot").first).to_be_visible()

    page.fill("#capacity-save-owner", "platform-team")
    page.click("#capacity-save")
    expect(page.locator("#capacity-message")).to_contain_text("Saved plan #")
    saved = page.locator("#capacity-saved-table")
    for text in ("today", "ava", "platform-team"):  # name, who saved it, its owner
        expect(saved).to_contain_text(text)

    # a viewer: the saved plan, no Run control
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    viewer = context.new_page()
    errors: list[str] = []
    viewer.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        sign_in(viewer, url, "vic", PASSWORDS["vic"], "/capacity")
        expect(viewer.locator("#capacity-saved-table")).to_contain_text("today")
        expect(viewer.locator("#capacity-run")).to_be_hidden()
        expect(viewer.locator("#capacity-decide")).to_be_hidden()
    finally:
        context.close()
    assert errors == []
