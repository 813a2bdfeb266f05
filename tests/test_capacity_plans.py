"""Saved capacity plans (ledger/capacity_plans.py) on a real DuckDB, and the decision record
(models/capacity/record.py) and comparison (models/capacity/compare.py), on a result mapping
built by hand to common.md's schema of run_plan's result (tests/test_plan_cli.py runs the real
planner end to end)."""

from __future__ import annotations

import copy
import html
import json
import re
from typing import Any

import pytest

from inferledger.core.errors import BadInputError
from ledger import capacity_plans as store
from models.capacity.compare import compare_markdown
from models.capacity.record import TOP_CANDIDATES, decision_record_html, decision_record_markdown


def _point(rate: float, scale: float = 1.0) -> dict[str, Any]:
    return {
        "rate": rate,
        "replicas": 1,
        "ttft_p50_s": 0.05 * scale,
        "ttft_p95_s": 0.21 * scale,
        "itl_p50_s": 0.011 * scale,
        "itl_p95_s": 0.024 * scale,
        "e2e_p50_s": 2.1 * scale,
        "e2e_p95_s": 4.4 * scale,
        "throughput_rps": rate,
        "output_tokens_per_s": rate * 220,
        "kv_peak": 0.41,
        "preemptions": 0,
        "failed": 0,
        "meets_slo": True,
        "goodput_rps": rate,
    }


def _candidate(rank: int, gpu: str, *, verified: bool, replicas: int, price: float) -> dict:
    cand = {
        "model": "llama-3.1-8b",
        "gpu": gpu,
        "tensor_parallel_size": 1,
        "dtype": "auto",
        "kv_cache_dtype": "auto",
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "enable_prefix_caching": True,
        "price_per_gpu_hour": price,
    }
    cost = replicas * price * 730.0
    return {
        "rank": rank,
        "label": f"llama-3.1-8b 1x{gpu} seqs=256 tokens=8192",
        "candidate": cand,
        "verified": verified,
        "knee_rate": 6.5 if verified else None,
        "analytic_knee_rate": 6.9,
        "binding": "ttft",
        "replicas": replicas,
        "replicas_low": replicas,
        "replicas_high": replicas + 1,
        "gpus": replicas,
        "gpu_hours_per_month": replicas * 730.0,
        "monthly_cost": cost,
        "monthly_cost_low": cost,
        "monthly_cost_high": cost + price * 730.0,
        "at_peak": _point(6.0 * replicas) if verified else None,
        "curve": [_point(r) for r in (2.0, 4.0, 6.5)] if verified else [],
    }


def _app(name: str, peak_per_hour: float, *, measured: bool) -> dict[str, Any]:
    hourly = [peak_per_hour * (0.3 + 0.7 * ((h % 24) in range(9, 18))) for h in range(168)]
    sources = (
        {"hourly_requests": "measured", "lengths": "measured", "burstiness": "calibrated"}
        if measured
        else {}
    )
    return {
        "app": name,
        "model": "llama-3.1-8b",
        "hourly_requests": hourly,
        "lengths": [[900, 200], [1500, 260], [400, 120]],
        "burstiness": 0.8,
        "prefix_len": 512,
        "prefix_hit_rate": 0.4,
        "acceptance_rate": 0.75 if measured else None,
        "requests_per_task": 1.2,
        "slo_class": "interactive",
        "history": [],
        "history_start": 0.0,
        "sources": sources,
    }


def sample_result(name: str = "chat-today", *, traffic: float = 1.0, pools: int = 1) -> dict:
    """A run_plan result as common.md lays it out: one or two pools, 12 ranked candidates in
    the first (3 verified), a forecast, an unplanned and a hosted app."""
    apps = [_app("chat", 36000 * traffic, measured=True), _app("support", 7200, measured=False)]
    candidates = [
        _candidate(1, "H100", verified=True, replicas=3, price=2.5),
        _candidate(2, "H200", verified=True, replicas=2, price=4.0),
        _candidate(3, "A100-80GB", verified=True, replicas=5, price=1.8),
        *(
            _candidate(4 + i, f"L40S-{i}", verified=False, replicas=8 + i, price=1.0)
            for i in range(9)
        ),
    ]
    pool = {
        "name": "interactive/llama-3.1-8b",
        "slo_class": "interactive",
        "model": "llama-3.1-8b",
        "apps": ["chat", "support"],
        "slo": {"ttft_p95_ms": 500.0, "itl_p95_ms": 50.0, "e2e_p95_ms": 10000.0},
        "peak_rate": 12.0 * traffic,
        "screened": 96,
        "infeasible": [{"label": "llama-3.1-8b 1xL4", "reason": "does not fit"}],
        "candidates": candidates,
        "best": 0,
        "apps_cost": [
            {
                "app": "chat",
                "requests_per_month": 2.1e7,
                "input_tokens_per_month": 1.9e10,
                "output_tokens_per_month": 4.2e9,
                "monthly_cost": 4600.0,
                "usd_per_1m_input": 0.19,
                "usd_per_1m_output": 0.25,
                "usd_per_request": 0.00022,
                "usd_per_accepted_outcome": 0.00035,
            },
            {
                "app": "support",
                "requests_per_month": 4.2e6,
                "input_tokens_per_month": 3.8e9,
                "output_tokens_per_month": 8.4e8,
                "monthly_cost": 875.0,
                "usd_per_1m_input": 0.19,
                "usd_per_1m_output": 0.25,
                "usd_per_request": 0.00021,
                "usd_per_accepted_outcome": None,
            },
        ],
        "schedule": {  # forecast.ReplicaSchedule.to_dict()
            "start": 1_765_152_000.0,
            "hours": 2184,
            "knee_rate": 6.5,
            "gpus_per_replica": 1,
            "price_per_gpu_hour": 2.5,
            "hours_per_month": 730.0,
            "replicas": [1, 2, 3, 2] * 546,
            "autoscaler": {
                "gpu_hours_per_month": {"p10": 1160.0, "p50": 1320.0, "p90": 1560.0},
                "monthly_cost": {"p10": 2900.0, "p50": 3300.0, "p90": 3900.0},
                "min_replicas": 1,
                "max_replicas": 3,
            },
            "static": {"replicas": 3, "gpu_hours_per_month": 2190.0, "monthly_cost": 5475.0},
            "peak_p90": {"hour": 2000, "replicas": 4},
            "hours_short_p90": 12,
        },
    }
    all_pools = [pool]
    if pools == 2:
        batch = copy.deepcopy(pool)
        batch.update(name="batch/llama-3.1-8b", slo_class="batch", best=None, apps=["nightly"])
        all_pools.append(batch)
    return {
        "planner_version": "1",
        "model_version": "0123456789ab",
        "name": name,
        "created_at": "2026-12-07T10:00:00+00:00",
        "duration_s": 41.5,
        "inputs": {
            "profile": {
                "apps": apps,
                "window_start": 1_764_547_200.0,
                "window_end": 1_765_152_000.0,
                "scope": {"apps": ["chat", "support"], "routes": []},
            },
            "knobs": {
                "traffic": traffic,
                "traffic_by_app": {},
                "context": 1.0,
                "output": 1.0,
                "prefix_hit_delta": 0.0,
                "remove_apps": [],
                "add_apps": [],
                "moves": [],
                "fallback": [],
                "burst": {"factor": 1.5, "minutes": 10},
            },
            "slos": {
                "interactive": {"ttft_p95_ms": 500.0, "itl_p95_ms": 50.0, "e2e_p95_ms": 10000.0},
                "batch": {"ttft_p95_ms": None, "itl_p95_ms": None, "e2e_p95_ms": 600000.0},
            },
            "candidates": {
                "gpus": ["H100", "H200"],
                "tensor_parallel_sizes": [1, 2],
                "dtypes": ["auto"],
                "kv_cache_dtypes": ["auto", "fp8"],
                "max_num_seqs": [256],
                "max_num_batched_tokens": [8192],
                "prefix_caching": [True],
                "prices": {"H100": 2.5, "H200": 4.0},
            },
            "verify_top": 20,
            "growth_per_month": 0.02,
            "seed": 0,
            "hours_per_month": 730.0,
        },
        "model_error": {
            "e2e": 0.143,
            "itl": 0.102,
            "ttft": 0.164,
            "throughput": 0.171,
            "source": "docs/fidelity.md (V1 + unstated / all)",
        },
        "pools": all_pools,
        "forecast": {
            "chat": {
                "start": 1_765_152_000.0,
                "p10": [90.0] * 2184,
                "p50": [100.0] * 2000 + [400.0] + [100.0] * 183,
                "p90": [120.0] * 2000 + [520.0] + [120.0] * 183,
                "method": "seasonal + trend",
            }
        },
        "unplanned": [{"app": "summarize", "reason": "model gpt-4o is hosted, not planned"}],
        "hosted": [{"app": "chat", "share": 0.1, "hosted": "gpt-4o-mini", "monthly_cost": 120.0}],
        "totals": {"monthly_cost": 5475.0, "gpus": 3},
    }


# ---------------------------------------------------------------------------- store


def test_save_and_reopen_round_trip(storage) -> None:
    result = sample_result()
    plan_id = store.save_plan(storage, result, created_by="ann")
    got = store.get_plan(storage, plan_id)
    extra = {
        "plan_id",
        "saved_by",
        "saved_at",
        "owner",
        "decision",
        "decision_note",
        "decided_by",
        "decided_at",
        "archived_at",
    }
    assert {k: v for k, v in got.items() if k not in extra} == result
    assert (got["plan_id"], got["saved_by"], got["decision"], got["owner"]) == (
        plan_id,
        "ann",
        None,
        None,
    )
    assert got["saved_at"] and json.dumps(got)  # JSON-safe as a whole
    [summary] = store.list_plans(storage)
    assert (summary.plan_id, summary.name, summary.created_by) == (plan_id, "chat-today", "ann")
    assert (summary.monthly_cost, summary.gpus, summary.planner_version) == (5475.0, 3, "1")
    assert summary.best == (
        store.PoolChoice(
            pool="interactive/llama-3.1-8b",
            label="llama-3.1-8b 1xH100 seqs=256 tokens=8192",
            replicas=3,
            gpus=3,
            monthly_cost=3 * 2.5 * 730.0,
            verified=True,
        ),
    )


def test_name_override_no_recommendation_and_order(storage) -> None:
    first = store.save_plan(storage, sample_result(), created_by="ann")
    second = store.save_plan(
        storage, sample_result(pools=2), created_by="bob", name="  traffic x2  "
    )
    listed = store.list_plans(storage)
    assert [p.plan_id for p in listed] == [second, first]  # newest first
    assert (
        listed[0].name == "traffic x2" and store.get_plan(storage, second)["name"] == "traffic x2"
    )
    batch = listed[0].best[1]
    assert (batch.pool, batch.label, batch.replicas, batch.verified) == (
        "batch/llama-3.1-8b",
        None,
        None,
        False,
    )


def test_decision_needs_an_owner_and_is_audited(storage) -> None:
    plan_id = store.save_plan(storage, sample_result(), created_by="ann")
    with pytest.raises(BadInputError, match="has no owner"):
        store.set_decision(storage, plan_id, "advance", "go", by="carol")
    with pytest.raises(BadInputError, match="decision: one of advance, revise, stop"):
        store.set_decision(storage, plan_id, "maybe", by="carol", owner="dana")
    s = store.set_decision(storage, plan_id, "revise", " try fp8 ", by="carol", owner="dana")
    assert (s.decision, s.decision_note, s.owner, s.decided_by) == (
        "revise",
        "try fp8",
        "dana",
        "carol",
    )
    assert s.decided_at is not None
    # a later decision keeps the owner; clearing it clears who decided
    s = store.set_decision(storage, plan_id, "advance", None, by="erin")
    assert (s.decision, s.owner, s.decided_by, s.decision_note) == ("advance", "dana", "erin", None)
    s = store.set_decision(storage, plan_id, None, by="erin")
    assert (s.decision, s.decided_by, s.decided_at, s.owner) == (None, None, None, "dana")
    got = store.get_plan(storage, plan_id)
    assert (got["decision"], got["owner"]) == (None, "dana")
    actions = [(c.action, c.changed_by) for c in store.plan_changes(storage, plan_id)]
    assert actions == [
        ("decided", "erin"),
        ("decided", "erin"),
        ("decided", "carol"),
        ("saved", "ann"),
    ]
    assert store.plan_changes(storage, plan_id)[2].detail == {
        "decision": "revise",
        "note": "try fp8",
        "owner": "dana",
    }


def test_archive_and_restore(storage) -> None:
    plan_id = store.save_plan(storage, sample_result(), created_by="ann")
    archived = store.archive_plan(storage, plan_id, by="ann")
    assert archived.archived_at is not None
    assert store.list_plans(storage) == []
    assert [p.plan_id for p in store.list_plans(storage, include_archived=True)] == [plan_id]
    assert store.get_plan(storage, plan_id)["archived_at"]  # still reopens
    with pytest.raises(BadInputError, match="already archived"):
        store.archive_plan(storage, plan_id, by="ann")
    with pytest.raises(BadInputError, match="archived; restore it"):
        store.set_decision(storage, plan_id, "stop", by="ann", owner="ann")
    assert store.restore_plan(storage, plan_id, by="bob").archived_at is None
    with pytest.raises(BadInputError, match="is not archived"):
        store.restore_plan(storage, plan_id, by="bob")
    assert [c.action for c in store.plan_changes(storage)] == ["restored", "archived", "saved"]


def test_unknown_ids(storage) -> None:
    store.save_plan(storage, sample_result(), created_by="ann")
    for bad_id in (0, -1, 999, "1", True, None):
        for call in (
            lambda i=bad_id: store.get_plan(storage, i),
            lambda i=bad_id: store.archive_plan(storage, i, by="ann"),
            lambda i=bad_id: store.set_decision(storage, i, "stop", by="ann", owner="ann"),
        ):
            with pytest.raises(store.UnknownPlanError) as err:
                call()
            assert err.value.http_status == 404 and isinstance(err.value, BadInputError)


def _broken(change) -> dict:
    r = sample_result()
    change(r)
    return r


BROKEN = [
    (_broken(lambda r: r.pop("pools")), "plan: missing pools"),
    (_broken(lambda r: r.pop("model_version")), "plan: missing model_version"),
    (_broken(lambda r: r.update(name="  ")), "plan.name: needs a non-empty text"),
    (_broken(lambda r: r["pools"][0].update(best=12)), r"plan.pools\[0\].best: 12"),
    (_broken(lambda r: r["totals"].update(gpus="3")), "plan.totals.gpus: needs a number"),
    (
        _broken(lambda r: r["pools"][0]["candidates"][1]["at_peak"].update(e2e_p95_s=float("nan"))),
        r"plan.pools\[0\].candidates\[1\].at_peak.e2e_p95_s: not a finite number",
    ),
    (
        _broken(lambda r: r["forecast"]["chat"].update(p90=[float("inf")])),
        r"plan.forecast.chat.p90\[0\]: not a finite number",
    ),
    ("not a mapping", "needs a result mapping"),
]


def test_a_result_that_cannot_be_saved_writes_nothing(storage) -> None:
    for result, message in BROKEN:
        with pytest.raises(BadInputError, match=message):
            store.save_plan(storage, result, created_by="ann")
    assert store.list_plans(storage, include_archived=True) == []
    assert store.plan_changes(storage) == []


def test_who_saves_is_required(storage) -> None:
    with pytest.raises(BadInputError, match="created_by: needs a non-empty text"):
        store.save_plan(storage, sample_result(), created_by=" ")


# ---------------------------------------------------------------------------- record

SECTIONS = (
    "Decision",
    "Workload evidence",
    "Knobs and assumptions",
    "SLOs",
    "Results",
    "Pool interactive/llama-3.1-8b",
    "Traffic forecast",
    "Model error and residual risk",
    "Versions",
)


def _md_sections(md: str) -> list[str]:
    return [re.sub(r"^#+ ", "", line) for line in md.splitlines() if re.match(r"^#{2,3} ", line)]


def test_markdown_record_has_every_section_and_the_evidence() -> None:
    md = decision_record_markdown(sample_result())
    assert md.startswith("# Capacity plan: chat-today\n")
    assert _md_sections(md) == list(SECTIONS)
    # the decision is a blank to fill until someone decides
    assert "- **Decision:** " + "\\_" * 12 + " (advance / revise / stop)" in md
    assert "- **Owner:** " + "\\_" * 12 in md
    # workload evidence: the window, the scope, per app its figures and their sources
    assert "2025-12-01 00:00 UTC to 2025-12-08 00:00 UTC" in md
    assert "apps: chat, support" in md
    chat = next(line for line in md.splitlines() if line.startswith("| chat | llama"))
    assert "| 10 (measured) |" in chat  # 36,000 req/h at the peak
    assert "| 933 (measured) |" in chat and "| 0.8 (calibrated) |" in chat
    support = next(line for line in md.splitlines() if line.startswith("| support | llama"))
    assert "(assumed)" in support and support.rstrip().endswith("| unknown |")
    assert "Assumed, not measured: chat.prefix_len" in md and "support.hourly_requests" in md
    # knobs: only what changes the profile
    assert "| burst | peak × 1.5 for 10 min |" in md and "| traffic |" not in md
    assert "price per GPU-hour:** H100: $2.50, H200: $4.00" in md
    assert "| interactive | 500 | 50 | 10,000 |" in md
    # the pool: recommendation, ranked candidates (top 10 of 12), per-app prices
    assert (
        "Recommendation: llama-3.1-8b 1xH100 seqs=256 tokens=8192, 3 replicas, 3 GPUs, "
        "$5,475/month (within the model's error: 3–4 replicas, $5,475–$7,300)." in md
    )
    ranked = [line for line in md.splitlines() if re.match(r"^\| \d+( ★)? \| llama", line)]
    assert len(ranked) == TOP_CANDIDATES and ranked[0].startswith("| 1 ★ |")
    assert "2 more candidates ranked." in md
    assert "| 210 ms | 24 ms | 4,400 ms |" in ranked[0]
    assert "| chat | 21,000,000 | $4,600 | $0.19 | $0.25 | $0.00022 | $0.00035 |" in md
    assert "| support |" in md and md.count("| unknown |") == 2
    # the schedule, the forecast, the error and risk, the versions
    assert "| Static (the peak all month) | 3 | 2,190 | $5,475 |" in md
    assert "| Autoscaler, P50 traffic | 1–3 | 1,320 | $3,300 |" in md
    assert "| Autoscaler, P90 traffic | — | 1,560 | $3,900 |" in md
    assert "busiest hour of the 13 weeks needs 4 replicas; 12 hours need more" in md
    assert (
        "| chat | seasonal + trend | 2025-12-08 00:00 UTC | 13 weeks | 100 | 400 | 90–520 |" in md
    )
    assert "| ttft | 16.4 % |" in md and "| throughput | 17.1 % |" in md
    assert "up to 4 replicas ($7,300/month)" in md
    assert "Not planned: summarize (model gpt-4o is hosted, not planned)." in md
    assert "Hosted: 10.0 % of chat on gpt-4o-mini, $120/month" in md
    assert "**Planner version:** 1" in md and "**Serving model version:** 0123456789ab" in md


def test_a_decided_plan_shows_its_decision() -> None:
    plan = {
        **sample_result(pools=2),
        "plan_id": 7,
        "saved_by": "ann",
        "saved_at": "2026-12-07T11:00:00+00:00",
        "owner": "dana",
        "decision": "advance",
        "decision_note": "ship | it",
        "decided_by": "carol",
        "decided_at": "2026-12-08T09:30:00+00:00",
    }
    md = decision_record_markdown(plan)
    assert "- **Decision:** ADVANCE (of advance / revise / stop)" in md
    assert "- **Owner:** dana" in md and "- **Note:** ship \\| it" in md
    assert "- **Decided by:** carol on 2026-12-08 09:30 UTC" in md
    assert "- **Saved plan:** #7 by ann on 2026-12-07 11:00 UTC" in md
    assert "\\_" * 12 not in md
    assert "batch/llama-3.1-8b: no candidate meets the SLOs at the peak" in md
    assert "Pool batch/llama-3.1-8b" in _md_sections(md)


def test_html_record_is_self_contained_and_escaped() -> None:
    plan = sample_result(name="<script>alert(1)</script> & co")
    plan["inputs"]["profile"]["apps"][0]["app"] = '<img src=x onerror="y">'
    plan["pools"][0]["apps_cost"][0]["app"] = '<img src=x onerror="y">'
    page = decision_record_html(plan)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<style>") == 1 and "<script" not in page.lower()
    assert "<img" not in page and "onerror=&quot;y&quot;" in page
    assert "<title>Capacity plan: &lt;script&gt;alert(1)&lt;/script&gt; &amp; co</title>" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched
    for title in SECTIONS:
        assert f">{html.escape(title)}</h" in page
    assert page.count('<span class="blank">') == 4  # owner, decision, signature, note
    md = decision_record_markdown(plan)
    assert "<img" not in md and "&lt;script&gt;" in md


def test_a_record_of_an_empty_plan_still_renders() -> None:
    md = decision_record_markdown({"name": "x", "pools": []})
    assert "No pool was planned." in md and "The plan holds no profile." in md
    with pytest.raises(BadInputError):
        decision_record_html("nope")  # type: ignore[arg-type]


def test_compare_side_by_side() -> None:
    today = {**sample_result(), "plan_id": 1}
    doubled = sample_result("traffic x2", traffic=2.0)
    doubled["totals"] = {"monthly_cost": 10950.0, "gpus": 6}
    doubled["pools"][0]["candidates"][0].update(replicas=6, gpus=6, monthly_cost=10950.0)
    fp8 = sample_result("fp8 on H200", pools=2)
    fp8["decision"] = "revise"
    fp8["inputs"]["candidates"].update(gpus=["H200"], dtypes=["fp8"])
    md = compare_markdown([today, doubled, fp8])
    lines = md.splitlines()
    assert lines[2] == "|  | chat-today | traffic x2 | fp8 on H200 |"
    assert "| Saved plan | #1 | not saved | not saved |" in lines
    assert "| Monthly cost | $5,475 | $10,950 (+100 %) | $5,475 (+0 %) |" in lines
    assert "| GPUs | 3 | 6 | 3 |" in lines
    assert "| knob: traffic | — | × 2 | — |" in lines
    assert "| candidates: gpus | H100, H200 | H100, H200 | H200 |" in lines
    assert "| candidates: dtypes | auto | auto | fp8 |" in lines
    assert not any(line.startswith(("| candidates: prices", "| SLO")) for line in lines)
    pool = next(line for line in lines if line.startswith("| pool interactive"))
    assert "× 3 (3 GPUs), $5,475/month" in pool and "× 6 (6 GPUs), $10,950/month" in pool
    batch = next(line for line in lines if line.startswith("| pool batch"))
    assert batch.count("not in this plan") == 2 and "nothing meets the SLOs" in batch
    assert "| Decision | undecided | undecided | revise |" in lines
    for wrong in ([today], [today] * 5):
        with pytest.raises(BadInputError, match="compare 2 to 4 plans"):
            compare_markdown(wrong)


def test_the_capacity_page_compares_as_the_record_does() -> None:
    """The page's comparison (app/pages/capacity_results.py) draws compare_table's rows: the
    same figures as the Markdown, not a shorter list of its own."""
    from app.pages.capacity_results import comparison

    today = {**sample_result(), "plan_id": 1}
    doubled = sample_result("traffic x2", traffic=2.0)
    doubled["totals"] = {"monthly_cost": 10950.0, "gpus": 6}
    table = comparison([today, doubled])
    head, body = table.children
    assert [th.children for th in head.children.children] == ["", "chat-today", "traffic x2"]
    rows = {
        tr.children[0].children: [td.children for td in tr.children[1:]] for tr in body.children
    }
    assert rows["Monthly cost"] == ["$5,475", "$10,950 (+100 %)"]
    assert rows["knob: traffic"] == ["—", "× 2"]
    assert rows["Saved plan"] == ["#1", "not saved"]
    with pytest.raises(BadInputError, match="compare 2 to 4 plans"):
        comparison([today])
