"""The Capacity page's layout (app/pages/capacity.py): the planning form (window and scope,
profile grid, what-if knobs, SLOs, candidates, run), the results and save area, the saved plans
and the stores. Plain component builders and the form's constants: no Dash callbacks here (the
page module owns them, so the sign-in guard checks their role); the page's layout() calls
:func:`page`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import dash_ag_grid as dag
from dash import dcc, html

from app.components import form_fields, ids, may
from app.formats import money
from app.pages import capacity_forms as forms
from models.capacity import record
from models.capacity.candidates import SPACE_AXES
from models.capacity.types import SloClass
from models.gpu_catalog import default_gpu_catalog

ID = ids("capacity")
RUN_ROLE = "analyst"
POLL_MS = 500
DEFAULT_DAYS = 7
GPUS = default_gpu_catalog().names
#: the candidate space a plan starts from: the current Hopper GPUs at every TP size and both
#: weight precisions (screening is instant; only the cheapest N are simulated)
DEFAULT_GPUS = ("H100-SXM", "H200")
#: SLO defaults per class, in ms (interactive chat; batch only bounds the whole request).
DEFAULT_SLOS = {
    SloClass.INTERACTIVE.value: {"ttft_p95_ms": 1000, "itl_p95_ms": 100, "e2e_p95_ms": 20000},
    SloClass.BATCH.value: {"ttft_p95_ms": None, "itl_p95_ms": None, "e2e_p95_ms": 120000},
}
KNOB_FIELDS = (
    "traffic",
    "traffic_by_app",
    "context",
    "output",
    "prefix_hit_delta",
    "burst_factor",
    "burst_minutes",
    "remove_apps",
    "move_app",
    "move_share",
    "move_to",
)
CANDIDATE_FIELDS = SPACE_AXES
SLO_FIELDS = tuple(f"{c.value}-{m}" for c in SloClass for m in forms.SLO_METRICS)

_field, _text = form_fields(ID)


def _number(name: str, label: str, value: Any = None, **extra: Any) -> html.Div:
    return _field(
        label, dcc.Input(id=ID(name), type="number", value=value, step="any", **extra), name
    )


def _checklist(name: str, label: str, options: list[Any], value: list[Any]) -> html.Div:
    control = dcc.Checklist(id=ID(name), options=options, value=value, inline=True)
    return html.Div([html.Span(label, className="admin-label"), control], className="admin-field")


def _section(title: str, *children: Any, **extra: Any) -> html.Section:
    return html.Section(
        [html.H2(title, className="card-title"), *children],
        className="card admin-card",
        **{"aria-label": title},
        **extra,
    )


def _price_hint(price: float | None) -> str:
    return f"book: {money(price)}" if price is not None else "no price: type one"


def _planning(book: Mapping[str, float | None]) -> html.Div:
    """The analyst's half: window and scope, profile, knobs, SLOs, candidates, run. book: each
    GPU's price per GPU-hour in the price book now (None: none), the what-if fields' hint."""
    today = datetime.now(UTC).date()
    slo_inputs = [
        _number(
            f"{cls}-{metric}",
            f"{cls.capitalize()}: {metric[:-3].replace('_', ' ')} (ms)",
            DEFAULT_SLOS[cls][metric],
        )
        for cls in DEFAULT_SLOS
        for metric in forms.SLO_METRICS
    ]
    return html.Div(
        [
            _section(
                "1. Window and scope",
                html.Div(
                    [
                        _field(
                            "From – to (UTC)",
                            dcc.DatePickerRange(
                                id=ID("window"),
                                start_date=today - timedelta(days=DEFAULT_DAYS),
                                end_date=today,
                                display_format="YYYY-MM-DD",
                                minimum_nights=0,
                            ),
                            "window",
                        ),
                        _field(
                            "Apps (empty: all)",
                            dcc.Dropdown(id=ID("apps"), multi=True, options=[]),
                            "apps",
                        ),
                        _field(
                            "Routes (empty: all)",
                            dcc.Dropdown(id=ID("routes"), multi=True, options=[]),
                            "routes",
                        ),
                        _field("Environment", dcc.Dropdown(id=ID("env"), options=[]), "env"),
                    ],
                    className="admin-grid",
                ),
                html.Button("Load profile", id=ID("load"), n_clicks=0, className="button"),
            ),
            _section(
                "2. Workload profile",
                html.P(
                    "Per app, as measured in the window. Edit any cell: an edited figure "
                    "becomes assumed. Colours: green measured, blue calibrated, amber assumed.",
                    className="card-note",
                ),
                dag.AgGrid(
                    id=ID("profile"),
                    columnDefs=forms.profile_columns(),
                    rowData=[],
                    columnSize="responsiveSizeToFit",
                    defaultColDef={"resizable": True},
                    dashGridOptions={
                        "domLayout": "autoHeight",
                        "animateRows": False,
                        "singleClickEdit": True,
                        "tooltipShowDelay": 300,
                    },
                ),
            ),
            _section(
                "3. What if",
                html.Div(
                    [
                        _number("traffic", "Traffic ×", 1),
                        _text("traffic_by_app", "Traffic per app (app=×, …)"),
                        _number("context", "Context (prompt) ×", 1),
                        _number("output", "Output ×", 1),
                        _number("prefix_hit_delta", "Prefix hit change (points)", 0),
                        _number("burst_factor", "Burst: peak ×", 1),
                        _number("burst_minutes", "Burst: minutes", 10),
                        _field(
                            "Remove apps",
                            dcc.Dropdown(id=ID("remove_apps"), multi=True, options=[]),
                            "remove_apps",
                        ),
                        _field(
                            "Move a share of app",
                            dcc.Dropdown(id=ID("move_app"), options=[]),
                            "move_app",
                        ),
                        _number("move_share", "Share moved (%)", None),
                        _text("move_to", "To model, or hosted:NAME"),
                        _number("growth", "Growth per month (%)", 0),
                    ],
                    className="admin-grid",
                ),
            ),
            _section(
                "4. SLOs (p95, empty: no target)", html.Div(slo_inputs, className="admin-grid")
            ),
            _section(
                "5. Candidates",
                html.Div(
                    [
                        _field(
                            "GPUs",
                            dcc.Dropdown(
                                id=ID("gpus"),
                                options=list(GPUS),
                                value=list(DEFAULT_GPUS),
                                multi=True,
                            ),
                            "gpus",
                        ),
                        _checklist(
                            "tensor_parallel_sizes", "Tensor parallel", [1, 2, 4, 8], [1, 2, 4, 8]
                        ),
                        _checklist("dtypes", "Weights", ["bf16", "fp8"], ["bf16", "fp8"]),
                        _checklist("kv_cache_dtypes", "KV cache", ["auto", "fp8"], ["auto"]),
                        _text("max_num_seqs", "max_num_seqs (list)", value="default"),
                        _text(
                            "max_num_batched_tokens",
                            "max_num_batched_tokens (list)",
                            value="default",
                        ),
                        _checklist("prefix_caching", "Prefix caching", ["on", "off"], ["on"]),
                        _number(
                            "verify_top",
                            "Verify the cheapest N on the simulator",
                            5,
                            min=1,
                            max=200,
                        ),
                    ],
                    className="admin-grid",
                ),
                html.H3("Price per GPU-hour: the price book's, or a what-if"),
                html.Div(
                    [
                        _field(
                            f"{gpu} ($/GPU-h)",
                            dcc.Input(
                                id={"type": ID("price"), "gpu": gpu},
                                type="number",
                                step="any",
                                placeholder=_price_hint(book.get(gpu)),
                            ),
                            f"price-{gpu}",
                        )
                        for gpu in GPUS
                    ],
                    className="admin-grid",
                ),
            ),
            _section(
                "6. Run",
                html.Div(
                    [
                        _text("name", "Plan name", value="plan"),
                        html.Button("Run plan", id=ID("run"), n_clicks=0, className="button"),
                        html.Button(
                            "Cancel", id=ID("cancel"), n_clicks=0, className="button", disabled=True
                        ),
                    ],
                    className="admin-grid",
                ),
                html.Progress(id=ID("progress"), max=1, value=0, hidden=True),
                html.Div(id=ID("status"), role="status", **{"aria-live": "polite"}),
            ),
        ],
        id=ID("planning"),
        hidden=not may(RUN_ROLE),
    )


def page(book: Mapping[str, float | None]) -> html.Div:
    """The whole page: the planning form (book: the price book's GPU prices, as in
    _planning), results, saved plans, stores."""
    return html.Div(
        [
            html.H1("Capacity planner"),
            html.P(
                "The cheapest deployment that meets your SLOs for your own traffic: screened "
                "analytically, the best checked on the serving simulator at the knee, priced "
                "per app. docs/capacity-planner.md explains the method and its accuracy.",
                className="page-lead",
            ),
            html.Div(id=ID("message"), role="status", **{"aria-live": "polite"}),
            _planning(book),
            html.Div(id=ID("results")),
            html.Div(
                [
                    _text("save-name", "Save as"),
                    _text("save-owner", "Owner (who answers for it)"),
                    html.Button("Save plan", id=ID("save"), n_clicks=0, className="button"),
                ],
                id=ID("save-controls"),
                className="admin-grid",
                hidden=True,
            ),
            _section(
                "Saved plans",
                html.Div(id=ID("saved"), className="admin-table-wrap"),
                _field(
                    "Choose plans (one to open or download, two or three to compare)",
                    dcc.Dropdown(id=ID("picked"), options=[], multi=True),
                    "picked",
                ),
                html.Div(
                    [
                        html.Button("Open", id=ID("open"), n_clicks=0, className="button"),
                        html.Button("Compare", id=ID("compare"), n_clicks=0, className="button"),
                        html.Button(
                            "Decision record (Markdown)",
                            id=ID("md"),
                            n_clicks=0,
                            className="button",
                        ),
                        html.Button(
                            "Decision record (HTML)", id=ID("html"), n_clicks=0, className="button"
                        ),
                    ],
                    className="admin-grid",
                ),
                html.Div(
                    [
                        _field(
                            "Decision",
                            dcc.Dropdown(id=ID("decision"), options=list(record.DECISIONS)),
                            "decision",
                        ),
                        _text("decision-note", "Note"),
                        _text("decision-owner", "Owner (kept when empty)"),
                        html.Button(
                            "Set decision", id=ID("decide"), n_clicks=0, className="button"
                        ),
                    ],
                    className="admin-grid",
                    id=ID("decision-controls"),
                    hidden=not may(RUN_ROLE),
                ),
                html.Div(id=ID("opened")),
            ),
            dcc.Interval(id=ID("poll"), interval=POLL_MS, disabled=True),
            dcc.Download(id=ID("download")),
            dcc.Store(id=ID("scope")),  # the window and scope the profile was loaded from
            dcc.Store(id=ID("loaded-rows")),  # the profile's rows as loaded, to find edits
            dcc.Store(id=ID("job")),  # the running job's id
            dcc.Store(id=ID("result-job")),  # the job whose result is shown, for Save
            dcc.Store(id=ID("saved-version"), data=0),
        ],
        className="page capacity-page",
    )
