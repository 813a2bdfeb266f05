"""Saved capacity plans side by side (issue #13): one column per plan, one row per figure,
costs relative to the first plan, and only the inputs that differ between them. The
Capacity page renders the table; compare_markdown writes it as Markdown."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from inferledger.core.errors import BadInputError
from models.capacity.record import (
    axis_text,
    best_candidate,
    changed_knobs,
    humanize,
    plan_input,
    plan_pools,
)
from models.capacity.record_format import compact, count, is_number, usd, when
from models.capacity.record_render import Cell, Table, markdown_table


def _pool_cell(pool: Mapping[str, Any] | None) -> str:
    if pool is None:
        return "not in this plan"
    best = best_candidate(pool)
    if best is None:
        return "nothing meets the SLOs"
    return (
        f"{best.get('label')} × {best.get('replicas')} ({count(best.get('gpus'), 'GPU')}), "
        f"{usd(best.get('monthly_cost'))}/month"
    )


def compare_table(plans: Sequence[Mapping[str, Any]]) -> Table:
    """2 to 4 plans side by side: one column per plan, one row per figure; costs relative
    to the first plan."""
    if not 2 <= len(plans) <= 4:
        raise BadInputError(f"plans: compare 2 to 4 plans, got {len(plans)}")
    for i, p in enumerate(plans):
        if not isinstance(p, Mapping):
            raise BadInputError(f"plans[{i}]: needs a result mapping")
    head = ["", *(str(p.get("name") or f"plan {i + 1}") for i, p in enumerate(plans))]
    base = (plans[0].get("totals") or {}).get("monthly_cost")

    def row(label: str, cells: Iterable[str]) -> list[Cell]:
        return [label, *cells]

    def cost(p: Mapping[str, Any]) -> str:
        c = (p.get("totals") or {}).get("monthly_cost")
        text = usd(c)
        if p is not plans[0] and is_number(c) and is_number(base) and base:
            text += f" ({(float(c) / float(base) - 1) * 100:+.0f} %)"
        return text

    rows = [
        row("Saved plan", (f"#{p['plan_id']}" if p.get("plan_id") else "not saved" for p in plans)),
        row("Planned", (when(p.get("created_at")) for p in plans)),
        row("Monthly cost", (cost(p) for p in plans)),
        row("GPUs", (compact((p.get("totals") or {}).get("gpus")) for p in plans)),
    ]
    knobs = [dict(changed_knobs(plan_input(p, "knobs"))) for p in plans]
    for k in dict.fromkeys(k for changed in knobs for k in changed):
        rows.append(row(f"knob: {k}", (changed.get(k, "—") for changed in knobs)))
    # what else differs between the plans' inputs: candidate axes, prices, SLOs
    for part, label, show in (
        ("candidates", "candidates", axis_text),
        ("slos", "SLO", compact),
    ):
        values = [plan_input(p, part) for p in plans]
        keys = list(dict.fromkeys(k for v in values for k in v))
        for k in keys:
            cells = [v.get(k) for v in values]
            if any(c != cells[0] for c in cells):
                rows.append(row(f"{label}: {humanize(str(k))}", (show(c) for c in cells)))
    pool_names: list[str] = []
    for p in plans:
        for pool in plan_pools(p):
            if pool.get("name") not in pool_names:
                pool_names.append(str(pool.get("name")))
    for name in pool_names:
        rows.append(
            row(
                f"pool {name}",
                (
                    _pool_cell(next((q for q in plan_pools(p) if q.get("name") == name), None))
                    for p in plans
                ),
            )
        )
    rows.append(row("Unplanned apps", (str(len(p.get("unplanned") or [])) for p in plans)))
    rows.append(row("Decision", (str(p.get("decision") or "undecided") for p in plans)))
    rows.append(
        row(
            "Planner / model version",
            (f"{p.get('planner_version', '—')} / {p.get('model_version', '—')}" for p in plans),
        )
    )
    return Table(head, rows)


def compare_markdown(plans: Sequence[Mapping[str, Any]]) -> str:
    """2 to 4 plans side by side as a Markdown table."""
    table = compare_table(plans)
    return "\n".join(["# Capacity plans compared", "", *markdown_table(table)]) + "\n"
