"""The capacity plan's decision record (issue #13), in Markdown and print-ready HTML (the
side-by-side comparison of saved plans is models/capacity/compare.py).

Both documents come from one list of sections built from a plan's result mapping (what
models/capacity/plan.py's run_plan returns, or a saved plan from ledger/capacity_plans.py,
which adds the owner and decision fields): what was decided and by whom, the workload
evidence with each figure's source (measured, calibrated, assumed), the knobs and
assumptions, the SLOs, each pool's recommendation and ranked candidates, the price per app,
the forecast's schedule, the model's measured error and the residual risk, and the versions
that produced the numbers. models/capacity/record_render.py renders the sections: the HTML is
one self-contained page (one <style>, no script, every value escaped) that prints on A4 or
Letter.

Values are read with defaults, so a plan saved by an earlier planner version still renders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inferledger.core.errors import BadInputError
from models.capacity.profile import SOURCE_FIELDS
from models.capacity.record_format import (
    band,
    compact,
    count,
    is_number,
    ms,
    number,
    percent,
    usd,
    when,
)
from models.capacity.record_render import (
    Blank,
    Block,
    Bullets,
    Cell,
    Fields,
    Para,
    Section,
    Table,
    html_document,
    markdown_document,
)

#: candidates shown per pool in the record
TOP_CANDIDATES = 10
DECISIONS = ("advance", "revise", "stop")


# ---------------------------------------------------------------------------- reading a plan


def plan_pools(plan: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [p for p in plan.get("pools") or [] if isinstance(p, Mapping)]


def best_candidate(pool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pool's recommendation (None when no candidate meets its SLOs)."""
    i = pool.get("best")
    candidates = pool.get("candidates") or []
    if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(candidates):
        return candidates[i]
    return None


def plan_input(plan: Mapping[str, Any], part: str) -> Any:
    """One part of the plan's inputs (profile, knobs, candidates, slos); {} when absent."""
    return (plan.get("inputs") or {}).get(part) or {}


def _profile_apps(plan: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    profile = plan_input(plan, "profile")
    return [a for a in profile.get("apps") or [] if isinstance(a, Mapping)]


def _source(app: Mapping[str, Any], name: str) -> str:
    """Where an app's figure came from; a figure without one is a default: assumed."""
    return str((app.get("sources") or {}).get(name) or "assumed")


def _sourced(text: str, app: Mapping[str, Any], name: str) -> str:
    return f"{text} ({_source(app, name)})"


def _app_stats(app: Mapping[str, Any]) -> dict[str, float | None]:
    hourly = [float(v) for v in app.get("hourly_requests") or [] if is_number(v)]
    lengths = [
        (float(p), float(o))
        for p, o in (x for x in app.get("lengths") or [] if isinstance(x, Sequence))
    ]
    n = len(lengths)
    return {
        "peak_rps": max(hourly) / 3600.0 if hourly else None,
        "mean_rph": sum(hourly) / len(hourly) if hourly else None,
        "mean_prompt": sum(p for p, _ in lengths) / n if n else None,
        "mean_output": sum(o for _, o in lengths) / n if n else None,
        "samples": float(n),
    }


def assumed_fields(plan: Mapping[str, Any]) -> list[str]:
    """'app.field' for every profile figure that was assumed rather than measured."""
    out = []
    for app in _profile_apps(plan):
        name = str(app.get("app", "?"))
        for f in SOURCE_FIELDS:
            if f in ("model", "slo_class"):
                continue  # named in the record itself, never a figure to check
            if f == "acceptance_rate" and app.get(f) is None:
                continue  # unknown, and shown as unknown: nothing was assumed
            if _source(app, f) == "assumed":
                out.append(f"{name}.{f}")
    return out


_KNOB_DEFAULTS: dict[str, Any] = {
    "traffic": 1.0,
    "context": 1.0,
    "output": 1.0,
    "prefix_hit_delta": 0.0,
}


def _share(move: Mapping[str, Any]) -> str:
    return f"{percent(move.get('share'))} of {move.get('app')}"


def _knob_text(name: str, value: Any) -> str:
    """One changed knob in words (knobs_to_mapping's shapes; anything else as compact JSON)."""
    if name in ("traffic", "context", "output") and is_number(value):
        return f"× {number(value)}"
    if name == "prefix_hit_delta" and is_number(value):
        return f"{float(value) * 100:+.1f} points"
    if name == "burst" and isinstance(value, Mapping):
        return f"peak × {number(value.get('factor'))} for {number(value.get('minutes'))} min"
    if name == "traffic_by_app" and isinstance(value, Mapping):
        return ", ".join(f"{app} × {number(k)}" for app, k in value.items())
    if name == "remove_apps" and isinstance(value, list):
        return ", ".join(map(str, value))
    if name == "add_apps" and isinstance(value, list):
        return ", ".join(
            f"{a.get('app')} ({a.get('model')})" if isinstance(a, Mapping) else str(a)
            for a in value
        )
    if name == "moves" and isinstance(value, list):
        return "; ".join(
            f"{_share(m)} to {m.get('to_model') or m.get('hosted')}"
            + (" (hosted)" if m.get("hosted") else "")
            for m in value
            if isinstance(m, Mapping)
        )
    if name == "fallback" and isinstance(value, list):
        return "; ".join(
            f"{_share(m)} falls back onto {m.get('to_model') or 'the self-hosted pool'}"
            for m in value
            if isinstance(m, Mapping)
        )
    return compact(value)


def changed_knobs(knobs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(knob, value in words) for every knob that changes the profile (defaults and empties
    left out)."""
    return [
        (name, _knob_text(name, value))
        for name, value in knobs.items()
        if not (value is None or value == _KNOB_DEFAULTS.get(name) or value in ({}, [], ()))
    ]


# ---------------------------------------------------------------------------- sections


def _title(plan: Mapping[str, Any]) -> str:
    if not isinstance(plan, Mapping):
        raise BadInputError("plan: needs a result mapping (what run_plan returns)")
    return f"Capacity plan: {plan.get('name') or 'unnamed'}"


def _decision_section(plan: Mapping[str, Any]) -> Section:
    decision = plan.get("decision")
    pairs: list[tuple[str, Cell]] = []
    if plan.get("plan_id") is not None:
        pairs.append(
            (
                "Saved plan",
                f"#{plan['plan_id']} by {plan.get('saved_by') or '—'}"
                f" on {when(plan.get('saved_at'))}",
            )
        )
    pairs.append(("Planned", when(plan.get("created_at"))))
    pairs.append(("Owner", plan.get("owner") or Blank("name")))
    if decision in DECISIONS:
        pairs.append(("Decision", f"{decision.upper()} (of advance / revise / stop)"))
        pairs.append(
            ("Decided by", f"{plan.get('decided_by') or '—'} on {when(plan.get('decided_at'))}")
        )
        pairs.append(("Note", plan.get("decision_note") or "—"))
    else:
        pairs.append(("Decision", Blank("advance / revise / stop")))
        pairs.append(("Signed, date", Blank()))
        pairs.append(("Note", Blank()))
    totals = plan.get("totals") or {}
    pairs.append(("Monthly cost (all pools)", usd(totals.get("monthly_cost"))))
    pairs.append(("GPUs (all pools)", compact(totals.get("gpus"))))
    blocks: list[Block] = [Fields(pairs)]
    recs = []
    for pool in plan_pools(plan):
        best = best_candidate(pool)
        if best is None:
            recs.append(f"{pool.get('name')}: no candidate meets the SLOs at the peak")
        else:
            recs.append(
                f"{pool.get('name')}: {best.get('label')} × "
                f"{count(best.get('replicas'), 'replica')} ({count(best.get('gpus'), 'GPU')}), "
                f"{usd(best.get('monthly_cost'))}/month"
                + ("" if best.get("verified") else " (screened only, not simulated)")
            )
    if recs:
        blocks.append(Bullets(recs))
    return Section("Decision", blocks)


def _evidence_section(plan: Mapping[str, Any]) -> Section:
    profile = plan_input(plan, "profile")
    start, end = profile.get("window_start"), profile.get("window_end")
    if is_number(start) and is_number(end) and float(end) > float(start):
        window = f"{when(start)} to {when(end)} (the ledger's observed traffic)"
    else:
        window = "none: the profile was typed in"
    scope = profile.get("scope") or {}
    scope_text = (
        "; ".join(f"{k}: {', '.join(map(str, v)) or 'all'}" for k, v in scope.items())
        if scope
        else "all"
    )
    rows: list[list[Cell]] = []
    for app in _profile_apps(plan):
        s = _app_stats(app)
        acceptance = app.get("acceptance_rate")
        rows.append(
            [
                str(app.get("app", "?")),
                str(app.get("model", "?")),
                str(app.get("slo_class", "interactive")),
                _sourced(number(s["peak_rps"]), app, "hourly_requests"),
                number(s["mean_rph"]),
                _sourced(number(s["mean_prompt"]), app, "lengths"),
                number(s["mean_output"]),
                _sourced(f"{app.get('prefix_len', 0)}", app, "prefix_len"),
                _sourced(percent(app.get("prefix_hit_rate", 0.0)), app, "prefix_hit_rate"),
                _sourced(number(app.get("burstiness", 1.0)), app, "burstiness"),
                "unknown"
                if acceptance is None
                else _sourced(percent(acceptance), app, "acceptance_rate"),
            ]
        )
    blocks: list[Block] = [Fields([("Window", window), ("Scope", scope_text)])]
    if rows:
        blocks.append(
            Table(
                [
                    "App",
                    "Model",
                    "Class",
                    "Peak req/s",
                    "Mean req/h",
                    "Mean prompt tok",
                    "Mean output tok",
                    "Prefix tok",
                    "Prefix hit",
                    "Burstiness (gamma shape)",
                    "Accepted",
                ],
                rows,
                numeric=frozenset({3, 4, 5, 6, 7, 8, 9, 10}),
            )
        )
        blocks.append(
            Para(
                "Each figure is marked with where it came from: measured (the ledger), "
                "calibrated (a fitted model), or assumed (a default or an edit). Mean output "
                "shares the source of the prompt lengths (joint samples); mean req/h that of "
                "the peak."
            )
        )
    else:
        blocks.append(Para("The plan holds no profile."))
    return Section("Workload evidence", blocks)


def humanize(key: str) -> str:
    return key.replace("_", " ")


def axis_text(values: Any) -> str:
    """A candidate axis in words: its values, None as vLLM's default."""
    if not isinstance(values, list):
        return compact(values)
    return ", ".join("vLLM default" if v is None else compact(v) for v in values) or "—"


def _assumptions_section(plan: Mapping[str, Any]) -> Section:
    inputs = plan.get("inputs") or {}
    knobs = changed_knobs(inputs.get("knobs") or {})
    blocks: list[Block] = []
    if knobs:
        blocks.append(Table(["Knob", "Value"], [[k, v] for k, v in knobs]))
    else:
        blocks.append(Para("No what-if knobs: the profile as it stands."))
    space = inputs.get("candidates") or {}
    pairs: list[tuple[str, Cell]] = [
        (humanize(str(k)), axis_text(v)) for k, v in space.items() if k != "prices"
    ]
    prices = space.get("prices") or {}
    if prices:
        pairs.append(("price per GPU-hour", ", ".join(f"{g}: {usd(p)}" for g, p in prices.items())))
    for key, label in (
        ("verify_top", "candidates verified on the simulator"),
        ("seed", "random seed"),
        ("growth_per_month", "traffic growth per month"),
        ("hours_per_month", "hours per month"),
    ):
        if key in inputs:
            value = inputs[key]
            pairs.append((label, percent(value) if key == "growth_per_month" else compact(value)))
    blocks.append(Fields(pairs))
    assumed = assumed_fields(plan)
    if assumed:
        blocks.append(Para("Assumed, not measured: " + ", ".join(assumed) + "."))
    return Section("Knobs and assumptions", blocks)


def _slo_section(plan: Mapping[str, Any]) -> Section:
    slos = plan_input(plan, "slos")
    rows: list[list[Cell]] = [
        [
            str(cls),
            number((s or {}).get("ttft_p95_ms")),
            number((s or {}).get("itl_p95_ms")),
            number((s or {}).get("e2e_p95_ms")),
        ]
        for cls, s in slos.items()
    ]
    if not rows:
        return Section("SLOs", [Para("No SLOs in the plan's inputs.")])
    return Section(
        "SLOs",
        [
            Table(
                ["Class", "p95 TTFT (ms)", "p95 ITL (ms)", "p95 end to end (ms)"],
                rows,
                numeric=frozenset({1, 2, 3}),
            ),
            Para("Goodput counts the requests that meet every target of their class."),
        ],
    )


def _replica_band(c: Mapping[str, Any]) -> str:
    """A candidate's replicas within the model's error as 'low–high' ('' when an end is
    unknown or both equal its replicas)."""
    low, high = c.get("replicas_low"), c.get("replicas_high")
    if low is None or high is None or low == high == c.get("replicas"):
        return ""
    return f"{low}–{high}"


def candidate_table(pool: Mapping[str, Any], top: int = TOP_CANDIDATES) -> Table:
    """A pool's ranked candidates (the first `top`) as a table."""
    rows: list[list[Cell]] = []
    best = pool.get("best")
    for i, c in enumerate((pool.get("candidates") or [])[:top]):
        at = c.get("at_peak") or {}
        replicas = f"{c.get('replicas')}"
        if spread := _replica_band(c):
            replicas += f" ({spread})"
        rows.append(
            [
                f"{c.get('rank', i + 1)}" + (" ★" if i == best else ""),
                str(c.get("label", "?")),
                "simulated" if c.get("verified") else "screened",
                replicas,
                compact(c.get("gpus")),
                usd(c.get("monthly_cost")),
                band(c.get("monthly_cost_low"), c.get("monthly_cost_high"), usd),
                number(c.get("knee_rate") if c.get("verified") else c.get("analytic_knee_rate")),
                str(c.get("binding") or "—"),
                ms(at.get("ttft_p95_s")),
                ms(at.get("itl_p95_s")),
                ms(at.get("e2e_p95_s")),
            ]
        )
    return Table(
        [
            "Rank",
            "Candidate",
            "Checked",
            "Replicas (band)",
            "GPUs",
            "Monthly cost",
            "Cost band",
            "Knee req/s per replica",
            "Binding",
            "p95 TTFT at peak",
            "p95 ITL at peak",
            "p95 E2E at peak",
        ],
        rows,
        numeric=frozenset({3, 4, 5, 6, 7, 9, 10, 11}),
    )


def app_cost_table(pool: Mapping[str, Any]) -> Table:
    """What each app of the pool costs under its recommendation."""
    rows: list[list[Cell]] = [
        [
            str(a.get("app", "?")),
            number(a.get("requests_per_month")),
            usd(a.get("monthly_cost")),
            usd(a.get("usd_per_1m_input")),
            usd(a.get("usd_per_1m_output")),
            usd(a.get("usd_per_request")),
            usd(a.get("usd_per_accepted_outcome"))
            if a.get("usd_per_accepted_outcome") is not None
            else "unknown",
        ]
        for a in pool.get("apps_cost") or []
    ]
    return Table(
        [
            "App",
            "Requests/month",
            "Monthly cost",
            "$ per 1M input",
            "$ per 1M output",
            "$ per request",
            "$ per accepted outcome",
        ],
        rows,
        numeric=frozenset({1, 2, 3, 4, 5, 6}),
    )


def schedule_blocks(schedule: Mapping[str, Any]) -> list[Block]:
    """The forecast's schedule (forecast.ReplicaSchedule.to_dict()): the static peak plan
    beside a perfect autoscaler's monthly GPU-hours and cost at P10 / P50 / P90 traffic."""
    static = schedule.get("static") or {}
    auto = schedule.get("autoscaler") or {}
    hours = auto.get("gpu_hours_per_month") or {}
    cost = auto.get("monthly_cost") or {}
    lo, hi = auto.get("min_replicas"), auto.get("max_replicas")
    rows: list[list[Cell]] = [
        [
            "Static (the peak all month)",
            compact(static.get("replicas")),
            number(static.get("gpu_hours_per_month")),
            usd(static.get("monthly_cost")),
        ]
    ]
    for q in ("p10", "p50", "p90"):
        replicas = band(lo, hi) if q == "p50" and lo is not None and hi is not None else "—"
        rows.append(
            [f"Autoscaler, {q.upper()} traffic", replicas, number(hours.get(q)), usd(cost.get(q))]
        )
    blocks: list[Block] = [
        Para("Forecast schedule: the static plan beside a perfect autoscaler (lower bound)."),
        Table(
            ["Plan", "Replicas", "GPU-hours/month", "Monthly cost"],
            rows,
            numeric=frozenset({1, 2, 3}),
        ),
    ]
    peak = schedule.get("peak_p90") or {}
    if peak.get("replicas") is not None:
        weeks = f" of the {number(schedule['hours'] / 168)} weeks" if schedule.get("hours") else ""
        blocks.append(
            Para(
                f"At P90 traffic the busiest hour{weeks} needs "
                f"{count(peak['replicas'], 'replica')}; "
                f"{compact(schedule.get('hours_short_p90', 0))} hours need more than the "
                "static plan has."
            )
        )
    return blocks


def _error_band(c: Mapping[str, Any]) -> str:
    """' (within the model's error: 2–3 replicas, $x–$y)', or '' when the error changes
    nothing."""
    replicas = _replica_band(c)
    if not replicas:
        return ""
    cost = band(c.get("monthly_cost_low"), c.get("monthly_cost_high"), usd)
    return f" (within the model's error: {replicas} replicas, {cost})"


def _pool_sections(plan: Mapping[str, Any]) -> list[Section]:
    out = []
    for pool in plan_pools(plan):
        slo = pool.get("slo") or {}
        targets = ", ".join(
            f"{name} p95 ≤ {number(slo.get(f'{key}_p95_ms'))} ms"
            for key, name in (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "E2E"))
            if slo.get(f"{key}_p95_ms") is not None
        )
        blocks: list[Block] = [
            Fields(
                [
                    ("Apps", ", ".join(map(str, pool.get("apps") or [])) or "—"),
                    ("SLO", targets or "—"),
                    ("Peak rate to hold", f"{number(pool.get('peak_rate'))} req/s"),
                    ("Candidates screened", compact(pool.get("screened"))),
                    ("Candidates that do not fit", f"{len(pool.get('infeasible') or [])}"),
                ]
            )
        ]
        best = best_candidate(pool)
        if best is None:
            blocks.append(Para("Recommendation: none. No candidate meets the SLOs at the peak."))
        else:
            at = best.get("at_peak") or {}
            blocks.append(
                Para(
                    f"Recommendation: {best.get('label')}, "
                    f"{count(best.get('replicas'), 'replica')}, "
                    f"{count(best.get('gpus'), 'GPU')}, {usd(best.get('monthly_cost'))}/month"
                    f"{_error_band(best)}. At the peak it predicts p95 TTFT "
                    f"{ms(at.get('ttft_p95_s'))}, ITL {ms(at.get('itl_p95_s'))}, E2E "
                    f"{ms(at.get('e2e_p95_s'))}; the SLO binds on {best.get('binding') or '—'}."
                )
            )
        candidates = pool.get("candidates") or []
        if candidates:
            blocks.append(candidate_table(pool))
            if len(candidates) > TOP_CANDIDATES:
                blocks.append(Para(f"{len(candidates) - TOP_CANDIDATES} more candidates ranked."))
        if pool.get("apps_cost"):
            blocks.append(app_cost_table(pool))
        schedule = pool.get("schedule") or {}
        if schedule:
            blocks += schedule_blocks(schedule)
        out.append(Section(f"Pool {pool.get('name', '?')}", blocks, level=3))
    if not out:
        return [Section("Results", [Para("No pool was planned.")])]
    return [Section("Results"), *out]


def _forecast_section(plan: Mapping[str, Any]) -> Section:
    rows: list[list[Cell]] = []
    for app, f in (plan.get("forecast") or {}).items():
        if not isinstance(f, Mapping):
            continue
        p10, p50, p90 = (
            [float(v) for v in f.get(k) or [] if is_number(v)] for k in ("p10", "p50", "p90")
        )
        peak = max(range(len(p50)), key=p50.__getitem__) if p50 else None
        rows.append(
            [
                str(app),
                str(f.get("method", "—")),
                when(f.get("start")),
                f"{len(p50) / 168:.0f} weeks" if p50 else "—",
                number(sum(p50) / len(p50)) if p50 else "—",
                number(p50[peak]) if peak is not None else "—",
                (
                    f"{number(p10[peak])}–{number(p90[peak])}"
                    if peak is not None and len(p10) > peak and len(p90) > peak
                    else "—"
                ),
            ]
        )
    if not rows:
        return Section("Traffic forecast", [Para("No forecast (no history in the profile).")])
    return Section(
        "Traffic forecast",
        [
            Table(
                [
                    "App",
                    "Method",
                    "From",
                    "Horizon",
                    "Mean req/h (P50)",
                    "Peak req/h (P50)",
                    "Peak P10–P90",
                ],
                rows,
                numeric=frozenset({4, 5, 6}),
            )
        ],
    )


def _risk_section(plan: Mapping[str, Any]) -> Section:
    err = plan.get("model_error") or {}
    rows: list[list[Cell]] = [
        [k, percent(err[k])] for k in ("ttft", "itl", "e2e", "throughput") if is_number(err.get(k))
    ]
    blocks: list[Block] = []
    if rows:
        blocks.append(
            Table(["Metric", "Median |error| of the serving model"], rows, numeric=frozenset({1}))
        )
        if err.get("source"):
            blocks.append(Para(f"Measured error from {err['source']}."))
    else:
        blocks.append(Para("The plan holds no measured model error: its band is unknown."))
    risks: list[str] = []
    for pool in plan_pools(plan):
        best = best_candidate(pool)
        if best is None:
            risks.append(f"{pool.get('name')}: no candidate meets the SLOs; nothing to deploy.")
            continue
        if not best.get("verified"):
            risks.append(
                f"{pool.get('name')}: the recommendation was screened analytically only, not "
                "checked on the simulator."
            )
        if best.get("replicas_high") is not None and best.get("replicas_high") != best.get(
            "replicas"
        ):
            risks.append(
                f"{pool.get('name')}: within the model's error the pool may need up to "
                f"{count(best.get('replicas_high'), 'replica')} "
                f"({usd(best.get('monthly_cost_high'))}"
                "/month)."
            )
    for u in plan.get("unplanned") or []:
        risks.append(f"Not planned: {u.get('app')} ({u.get('reason')}).")
    for h in plan.get("hosted") or []:
        cost = h.get("monthly_cost")
        risks.append(
            f"Hosted: {_share(h)} on {h.get('hosted')}"
            + (f", {usd(cost)}/month" if cost is not None else ", price unknown")
            + " (off the GPUs planned here)."
        )
    assumed = assumed_fields(plan)
    if assumed:
        risks.append(f"{len(assumed)} profile figures are assumed, not measured (see above).")
    blocks.append(Bullets(risks) if risks else Para("No further risk recorded."))
    return Section("Model error and residual risk", blocks)


def _versions_section(plan: Mapping[str, Any]) -> Section:
    return Section(
        "Versions",
        [
            Fields(
                [
                    ("Planner version", compact(plan.get("planner_version"))),
                    ("Serving model version", compact(plan.get("model_version"))),
                    ("Planned", when(plan.get("created_at"))),
                    ("Planning took", f"{number(plan.get('duration_s'))} s"),
                ]
            )
        ],
    )


def record_sections(plan: Mapping[str, Any]) -> list[Section]:
    """The decision record's sections, in order (both documents render these)."""
    _title(plan)  # checks it is a mapping
    return [
        _decision_section(plan),
        _evidence_section(plan),
        _assumptions_section(plan),
        _slo_section(plan),
        *_pool_sections(plan),
        _forecast_section(plan),
        _risk_section(plan),
        _versions_section(plan),
    ]


# ---------------------------------------------------------------------------- documents


def decision_record_markdown(plan: Mapping[str, Any]) -> str:
    """The plan's decision record as Markdown."""
    return markdown_document(_title(plan), record_sections(plan))


def decision_record_html(plan: Mapping[str, Any]) -> str:
    """The plan's decision record as one self-contained, print-ready HTML page (no script)."""
    return html_document(_title(plan), record_sections(plan))
