"""Unit economics: what an accepted outcome costs per workflow and route, the outcome mix, the
waste (rejected and failed tasks, failed calls), the overheads (retries, fallbacks, review) and
the false economies (requests got cheaper, accepted outcomes dearer).

Numbers: sql/queries/economics_*.sql over task_outcomes and false_economy_findings
(definitions: docs/unit-economics.md). Tasks count in the range they started in; the page says
how that total differs from Spend's for the same range (economics_reconcile.sql), and compares
the models of one workflow side by side (economics_models.sql). That workflow is a page-level
choice kept in the URL (`models_of=answer-ticket`, app.filters.PAGE_KEYS): a reload and a
copied link keep it; one with no tasks in the range falls back to the busiest, and says so.

Auto-refresh: the tiles, the findings and the models card re-read the ledger on every tick of
the shell's auto-refresh, like the charts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dash
from dash import Input, Output, State, callback, dcc, html

from app import context, palette
from app.components import TICK_ID, URL_ID, chart, choice_in_url, ids, money, number, stat
from app.figures import SHARE, Axis, FigureFn, Series, hbars_chart, series_of
from app.filters import filters_from, parse
from ledger import page_data
from ledger.queries import Filters, run

if TYPE_CHECKING:
    import pyarrow as pa

dash.register_page(
    __name__,
    path="/economics",
    name="Unit economics",
    title="Unit economics · InferLedger",
    order=20,
)

ID = ids("economics")
#: Outcome colours (Okabe-Ito: distinguishable with the common colour-vision deficiencies).
OUTCOMES = series_of(
    (
        ("accepted", "Accepted", palette.BLUISH_GREEN),
        ("corrected", "Corrected (accepted with edits)", palette.SKY_BLUE),
        ("rejected", "Rejected", palette.ORANGE),
        ("failed", "Failed", palette.VERMILION),
        ("pending", "Pending", palette.GREY),
    ),
    hover="{name}: %{x:,} of %{customdata:,} tasks",
    custom="tasks",
)
WASTE_PARTS = series_of(
    (
        ("rejected_cost", "Rejected tasks", palette.ORANGE),
        ("failed_task_cost", "Failed tasks", palette.VERMILION),
        ("failed_call_cost", "Failed calls of other tasks", palette.REDDISH_PURPLE),
    ),
    hover="{name}: $%{x:,.4f}<br>All waste: %{customdata:.1%} of the workflow's cost",
    custom="waste_share",
)
OVERHEADS = tuple(
    Series(
        share,
        name,
        colour,
        hover=f"{name}: $%{{customdata:,.4f}} (%{{x:.1%}} of the workflow's cost)",
        custom=cost,
    )
    for share, cost, name, colour in (
        ("retry_share", "retry_cost", "Retries", palette.BLUE),
        ("fallback_share", "fallback_cost", "Fallbacks", palette.ORANGE),
        ("review_share", "review_cost", "Human review", palette.BLUISH_GREEN),
    )
)
COST_PER_ACCEPTED = Series(
    "cost_per_accepted",
    None,
    palette.BRAND,
    hover=(
        "Cost per accepted outcome: $%{x:,.4f}<br>"
        "Total cost: $%{customdata[2]:,.2f}<br>"
        "Tasks: %{customdata[0]:,} (accepted outcomes %{customdata[1]:,})<br>"
        "Acceptance rate: %{customdata[3]:.1%}"
    ),
    custom=("tasks", "accepted_outcomes", "total_cost", "acceptance_rate"),
    text="cost_per_accepted",
    texttemplate="$%{x:,.4f}",
)
BY_WORKFLOW_AXIS = Axis("Workflow")


def _by(dim: str):
    def data(filters: Filters) -> pa.Table:
        return run(context.storage(), "economics_by_key", filters, dim=dim)

    return data


def _cost_per_accepted_figure(label: str) -> FigureFn:
    return hbars_chart(
        "key",
        [COST_PER_ACCEPTED],
        # linear: a log scale made $0.001 vs $0.55 look 1:10 (issue #10)
        x=Axis("Cost per accepted outcome (USD)", prefix="$", from_zero=True),
        y=Axis(label),
        hover_head=f"<b>{label} %{{y}}</b><br>",
        margin={"r": 72},  # room for the value labels
    )


_outcome_mix_figure = hbars_chart(
    "key",
    OUTCOMES,
    x=Axis("Share of tasks (%)", suffix="%"),
    y=BY_WORKFLOW_AXIS,
    stacked=True,
    percent=True,
)

_waste_figure = hbars_chart(
    "key", WASTE_PARTS, x=Axis("Waste (USD)", prefix="$"), y=BY_WORKFLOW_AXIS, stacked=True
)

_overheads_figure = hbars_chart(
    "key",
    OVERHEADS,
    x=Axis("Share of the workflow's cost (%)", format=SHARE),
    y=BY_WORKFLOW_AXIS,
)

BY_WORKFLOW = chart(
    ID,
    "by-workflow",
    "Cost per accepted outcome by workflow",
    _by("workflow"),
    _cost_per_accepted_figure("Workflow"),
    height=300,
    note=(
        "Everything the workflow's tasks cost (failed calls, retries, fallbacks, retrieval, "
        "tools, review; idle under the selected idle policy) ÷ accepted outcomes "
        "(accepted + corrected). Model filter: tasks whose first or final call used it."
    ),
)
BY_ROUTE = chart(
    ID,
    "by-route",
    "Cost per accepted outcome by route",
    _by("route"),
    _cost_per_accepted_figure("Route"),
    height=300,
)
OUTCOME_MIX = chart(
    ID,
    "outcomes",
    "Outcome mix by workflow",
    _by("workflow"),
    _outcome_mix_figure,
    height=300,
    note="Pending: no decision yet; failed: the last attempt failed with no decision posted.",
)
WASTE = chart(
    ID,
    "waste",
    "Waste by workflow",
    _by("workflow"),
    _waste_figure,
    height=300,
    note=(
        "Rejected and failed tasks are waste whole; other tasks waste only their failed "
        "calls and failed attempts. Idle cost is not included."
    ),
)
OVERHEADS_CARD = chart(
    ID,
    "overheads",
    "Retries, fallbacks and review by workflow",
    _by("workflow"),
    _overheads_figure,
    height=300,
    note="Shares of the workflow's cost before idle; they overlap (a retried fallback is both).",
)


def layout(**_kwargs: object) -> html.Div:
    return html.Div(
        [
            html.H1("Unit economics"),
            html.P(
                "What a result costs: every call a business task made, the retrieval, tools "
                "and human review it took, divided by the tasks whose outcome was accepted.",
                className="page-lead",
            ),
            html.Div(id=ID("stats"), className="stats", role="status"),
            html.P(id=ID("reconcile"), className="page-note reconcile-note", role="status"),
            html.Div([BY_WORKFLOW, BY_ROUTE], className="economics-grid"),
            html.Div([OUTCOME_MIX, WASTE], className="economics-grid"),
            html.Div([OVERHEADS_CARD, _false_economy_card()], className="economics-grid"),
            _models_card(),
        ],
        className="economics-page",
    )


def _false_economy_card() -> html.Section:
    return html.Section(
        [
            html.Div(html.H2("False economies", className="card-title"), className="card-head"),
            html.P(
                "Routes and workflows whose cost per request (or per 1M tokens) fell week over "
                "week, or across a change of model, while cost per accepted outcome rose.",
                className="card-note",
            ),
            html.P(id=ID("findings-scope"), className="card-note scope-note"),
            html.Div(id=ID("findings"), role="status"),
        ],
        className="card",
        **{"aria-label": "False economies"},
    )


def _reconcile_text(r: dict[str, Any]) -> str:
    """How the tasks' total differs from Spend's for the same range, part by part."""
    parts = [
        (r["unattached"], "idle nobody shares and hourly services with no call (no task)"),
        (r["before"], "tasks started before the range"),
        (-r["after"], "these tasks' costs after the range ends"),
        (r["other"], "calls straddling an hour at the range's edges, keys that differ"),
    ]
    said = [
        f"{'+' if v >= 0 else '−'}{money(abs(v))} {label}" for v, label in parts if abs(v) >= 0.005
    ]
    return (
        f"Tasks counted here: those that started in the range, {money(r['tasks_cost'])}. "
        f"Spend for the same range and filters: {money(r['spend'])}"
        + (f" = tasks {' '.join(said)}." if said else ", the same.")
    )


@callback(
    Output(ID("stats"), "children"),
    Output(ID("reconcile"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),  # auto-refresh: tasks and outcomes arrive as the charts move
)
def _stats(search: str | None, _tick: int | None) -> tuple[list[html.Div], str]:
    filters = filters_from(search)
    storage = context.storage()
    totals = run(storage, "economics_totals", filters).to_pylist()[0]
    reconcile = run(storage, "economics_reconcile", filters).to_pylist()[0]
    return [
        stat("Tasks", number(totals["tasks"]), hint="started in the range"),
        stat("Accepted outcomes", number(totals["accepted_outcomes"]), hint="incl. corrected"),
        stat(
            "Cost per accepted outcome",
            money(totals["cost_per_accepted"], 4),
            id=ID("cost-per-accepted"),
        ),
        stat("Total cost", money(totals["total_cost"])),
        stat(
            "Waste",
            money(totals["waste_cost"]),
            hint=f"{_percent(totals['waste_share'])} of cost before idle",
        ),
        stat(
            "Review cost",
            money(totals["review_cost"]),
            hint=f"{_percent(totals['review_share'])} of cost before idle",
        ),
    ], _reconcile_text(reconcile)


def _percent(share: float | None) -> str:
    return "–" if share is None else f"{share:.1%}"


@callback(
    Output(ID("findings"), "children"),
    Output(ID("findings-scope"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),  # auto-refresh: a refresh can add or settle a finding
)
def _findings(search: str | None, _tick: int | None) -> tuple[Any, str]:
    filters = filters_from(search)
    rows = run(context.storage(), "economics_false_economy", filters).to_pylist()
    scope = page_data.scope_note(
        filters,
        ("app", "route"),
        "findings compare whole routes and workflows week over week and across model switches.",
    )
    if not rows:
        return (
            html.P(
                f"No false economies found in {page_data.range_label(filters)}.",
                className="empty-state",
            ),
            scope,
        )
    items = [
        html.Li(
            [
                html.Span(
                    "Model change" if row["kind"] == "model_route" else "Week over week",
                    className="finding-kind",
                ),
                " ",
                row["explanation"],
            ],
            className="finding",
        )
        for row in rows
    ]
    return html.Ul(items, className="findings"), scope


# ------------------------------------------------------------------ models of one workflow
MODEL_COLUMNS = (
    "Model (first call)",
    "Tasks",
    "Accepted",
    "Cost / accepted",
    "Retried tasks",
    "Retry share",
    "Review share",
)


#: The models card's workflow: a page-level URL key (not `workflow`, see app.filters.PAGE_KEYS).
MODELS_KEY = "models_of"


def _models_card() -> html.Section:
    # The dropdown's options and value come from _workflows (the data's workflows, the URL's
    # choice), so the layout holds no data; the store says which value the page itself set.
    return html.Section(
        [
            html.Div(
                html.H2("Models side by side for one workflow", className="card-title"),
                className="card-head",
            ),
            html.P(
                "Each model a workflow's tasks started on: what an accepted outcome cost with "
                "everything the tasks took (retries, fallbacks, review), how many were retried "
                "and how much of the cost was retries and review. A cheaper model can make each "
                "accepted outcome dearer.",
                className="card-note",
            ),
            html.Label("Workflow", htmlFor=ID("workflow"), className="filter-label"),
            dcc.Dropdown(id=ID("workflow"), clearable=False, className="filter-dropdown"),
            html.P(id=ID("workflow-note"), className="card-note", role="status"),
            dcc.Store(id=ID("workflow-set")),
            html.Div(id=ID("models"), role="status"),
        ],
        className="card",
        **{"aria-label": "Models side by side"},
    )


def pick_workflow(
    names: list[str], wanted: str | None, shown: str | None
) -> tuple[str | None, str]:
    """The workflow the models card shows, and a note when it is not the one asked for.
    `names`: the range's workflows, busiest first; `wanted`: the URL's choice; `shown`: what
    the card shows now. The URL's choice when the range has it; else the one shown, so an
    auto-refresh tick never swaps the card's subject as the ranking shifts; else the busiest.
    A choice the range lacks (a typo, an old link, a narrower range) falls back and says so."""
    if wanted in names:
        return wanted, ""
    fallback = shown if shown in names else (names[0] if names else None)
    if not wanted:
        return fallback, ""
    if fallback is None:
        return None, f"Workflow {wanted!r} has no tasks in this range."
    return fallback, f"Workflow {wanted!r} has no tasks in this range: showing {fallback}."


@callback(
    Output(ID("workflow"), "options"),
    Output(ID("workflow"), "value"),
    Output(ID("workflow-set"), "data"),
    Output(ID("workflow-note"), "children"),
    Input(URL_ID, "search"),
    Input(TICK_ID, "data"),  # auto-refresh: a new workflow shows up in the choices
    State(ID("workflow"), "value"),
)
def _workflows(
    search: str | None, _tick: int | None, shown: str | None
) -> tuple[list[str], str | None, str | None, str]:
    rows = run(context.storage(), "economics_by_key", filters_from(search), dim="workflow")
    ranked = sorted(
        (r for r in rows.to_pylist() if r["key"] != "(none)"), key=lambda r: -r["tasks"]
    )
    names = [r["key"] for r in ranked]
    workflow, note = pick_workflow(names, parse(search).page.get(MODELS_KEY), shown)
    return names, workflow, workflow, note


# A pick writes `models_of` into the URL; the value _workflows set (the URL's own, or its
# fallback) does not: no static default, the busiest workflow depends on the range.
choice_in_url(ID("workflow"), MODELS_KEY, None, set_by_page=ID("workflow-set"))


@callback(
    Output(ID("models"), "children"),
    Input(ID("workflow"), "value"),
    State(URL_ID, "search"),
)
def _models(workflow: str | None, search: str | None) -> Any:
    # Auto-refresh reaches this too, without a tick Input of its own: _workflows answers every
    # tick with the value, and Dash re-runs the callbacks of every prop in a response (changed
    # or not), after it: one query per tick, not two.
    if not workflow:
        return html.P("No workflow has tasks in this range.", className="empty-state")
    rows = run(
        context.storage(), "economics_models", filters_from(search), workflow=workflow
    ).to_pylist()
    if not rows:
        return html.P(f"No task of {workflow} in this range.", className="empty-state")
    body = [
        html.Tr(
            [
                html.Td(r["model"]),
                html.Td(number(r["tasks"])),
                html.Td(number(r["accepted_outcomes"])),
                html.Td(money(r["cost_per_accepted"], 4)),
                html.Td(number(r["retried_tasks"])),
                html.Td(_percent(r["retry_share"])),
                html.Td(_percent(r["review_share"])),
            ]
        )
        for r in rows
    ]
    return html.Table(
        [html.Thead(html.Tr([html.Th(c, scope="col") for c in MODEL_COLUMNS])), html.Tbody(body)],
        className="table models-table",
        id=ID("models-table"),
    )
