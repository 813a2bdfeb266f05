"""Capacity planner (issue #13): from a window of the ledger's own traffic to the cheapest
deployment that meets the SLOs, priced per app and checked on the simulator at the knee.

Pick a window and scope, load the workload profile (ledger.capacity_profile), edit it (an
edited figure becomes *assumed*), set knobs, SLOs and candidates, and run: the plan
(models.capacity.plan.run_plan) runs as a background job (app/jobs.py) while a dcc.Interval
polls its progress, so the UI never blocks, and Cancel stops it between simulations. Results:
the serving model's measured error up front, per pool the ranked candidates, the latency-vs-
load curve with the knee and the SLO lines, replicas over time, and what each app pays. Save
(ledger.capacity_plans), reopen, compare two or three, decide (advance / revise / stop) and
download the decision record (models.capacity.record).

Roles: everyone reads saved plans; running, saving and deciding need analyst (the controls
are hidden from viewers, each callback checks again, and app/auth/guard.py CALLBACK_ROLES
refuses a forged call). Only ids and the scope ride in dcc.Stores: the profile is re-read on
the server at run time, and a result stays in the job registry until saved or expired. The
page's components and the form's constants live in app/pages/capacity_layout.py.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import dash
import flask
from dash import ALL, Input, Output, State, callback, ctx, dcc, html
from dash.exceptions import PreventUpdate

from app import context
from app.auth import RoleRequiredError
from app.components import URL_ID, may, when
from app.filters import filters_from
from app.formats import money
from app.jobs import Jobs, JobState, UnknownJobError
from app.pages import capacity_forms as forms
from app.pages import capacity_results as results
from app.pages.capacity_layout import (
    CANDIDATE_FIELDS,
    GPUS,
    ID,
    KNOB_FIELDS,
    RUN_ROLE,
    SLO_FIELDS,
    page,
)
from app.shell import filter_options
from inferledger.core.errors import InferLedgerError
from ledger import capacity_plans
from ledger.capacity_profile import book_prices, load_profile
from models.capacity import record
from models.capacity.plan import PlanInputs, plan_from_mapping, run_plan

dash.register_page(
    __name__,
    path="/capacity",
    name="Capacity planner",
    title="Capacity planner · InferLedger",
    order=55,
)

#: The registry's key in the Flask app's extensions (one registry per app, no globals).
JOBS_KEY = "inferledger.capacity_jobs"


def jobs() -> Jobs:
    """This app's job registry (made on first use; two workers: one plan each for two users)."""
    registry = flask.current_app.extensions.get(JOBS_KEY)
    if registry is None:
        registry = flask.current_app.extensions.setdefault(JOBS_KEY, Jobs(workers=2))
    return registry


def _who() -> str:
    user = context.current_user()
    return user.name if user is not None else "anonymous (sign-in off)"


def _error(exc: Exception | str) -> html.P:
    return html.P(str(exc), className="auth-error", role="alert")


def _ok(text: Any) -> html.P:
    return html.P(text, className="admin-ok", role="status")


def layout(**_kwargs: object) -> html.Div:
    book, _ = book_prices(context.storage(), GPUS, (), datetime.now(UTC))
    return page(book)


# ---------------------------------------------------------------------------- loading the profile
def _day(value: str | None, where: str) -> date:
    if not value:
        raise InferLedgerError(f"window: choose the {where} date")
    return date.fromisoformat(value[:10])


def scope_window(scope: dict[str, Any]) -> tuple[datetime, datetime]:
    """[start, end) of a scope: whole UTC days, the end date included."""
    start = datetime.combine(_day(scope.get("start"), "from"), time(), UTC)
    end = datetime.combine(_day(scope.get("end"), "to"), time(), UTC) + timedelta(days=1)
    if end <= start:
        raise InferLedgerError("window: the to date must not be before the from date")
    return start, end


def load(scope: dict[str, Any]) -> Any:
    """The workload profile of a scope, read from the ledger."""
    start, end = scope_window(scope)
    return load_profile(
        context.storage(),
        start,
        end,
        apps=tuple(scope.get("apps") or ()),
        routes=tuple(scope.get("routes") or ()),
        environment=scope.get("environment") or None,
    )


@callback(
    Output(ID("apps"), "options"),
    Output(ID("routes"), "options"),
    Output(ID("env"), "options"),
    Output(ID("apps"), "value"),
    Input(URL_ID, "search"),
)
def _options(search: str | None) -> tuple[Any, ...]:
    """What the scope can pick: the ledger's apps, routes and environments, the URL's app
    preselected."""
    filters = filters_from(search)
    options = filter_options(filters)
    picked = [filters.app] if filters.app else []
    return options["app"], options["route"], options["env"], picked


@callback(
    Output(ID("profile"), "rowData"),
    Output(ID("loaded-rows"), "data"),
    Output(ID("scope"), "data"),
    Output(ID("message"), "children"),
    Output(ID("remove_apps"), "options"),
    Output(ID("move_app"), "options"),
    Input(ID("load"), "n_clicks"),
    State(ID("window"), "start_date"),
    State(ID("window"), "end_date"),
    State(ID("apps"), "value"),
    State(ID("routes"), "value"),
    State(ID("env"), "value"),
    prevent_initial_call=True,
)
def _load(
    _clicks: int, start: str | None, end: str | None, apps: Any, routes: Any, env: str | None
) -> tuple[Any, ...]:
    scope = {
        "start": start,
        "end": end,
        "apps": apps or [],
        "routes": routes or [],
        "environment": env,
    }
    try:
        context.require_role(RUN_ROLE)
        profile = load(scope)
    except (RoleRequiredError, InferLedgerError) as exc:
        return [], None, None, _error(exc), [], []
    rows = forms.profile_rows(profile)
    if not rows:
        return [], None, None, _error("No LLM traffic in that window and scope."), [], []
    names = [r["app"] for r in rows]
    done = _ok(f"Loaded {len(rows)} apps from {start} to {end}.")
    return rows, rows, scope, done, names, names


@callback(
    Output(ID("profile"), "rowData", allow_duplicate=True),
    Input(ID("profile"), "cellValueChanged"),
    State(ID("profile"), "rowData"),
    prevent_initial_call=True,
)
def _mark_assumed(changes: Any, rows: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """An edited cell turns assumed (its colour changes with it)."""
    rows = [dict(r) for r in rows or []]
    if not forms.mark_edited(rows, changes if isinstance(changes, list) else [changes]):
        raise PreventUpdate
    return rows


# ------------------------------------------------------------------------------- running a plan
def plan_inputs(
    scope: Any,
    rows: Any,
    loaded: Any,
    knobs: dict[str, Any],
    slos: dict[str, Any],
    candidates: dict[str, Any],
    prices: list[Any],
    name: str | None,
    growth: Any,
    verify_top: Any,
) -> PlanInputs:
    """Validate the forms and build PlanInputs (BadInputError: one line naming the field)."""
    if not scope or not rows:
        raise InferLedgerError("Load a profile first (1. Window and scope).")
    slo_mapping = forms.slos_mapping(slos)  # a bad SLO stops here, before any ledger read
    knob_mapping = forms.knobs_mapping(knobs)
    hosted_models = [m["hosted"] for m in knob_mapping.get("moves", []) if m.get("hosted")]
    book, hosted_pairs = book_prices(context.storage(), GPUS, hosted_models, datetime.now(UTC))
    space = forms.space_mapping(candidates, forms.what_if_prices(GPUS, book, prices))
    hosted = {model: list(pair) for model, pair in hosted_pairs.items()}
    profile = forms.edited_profile(load(scope), rows, loaded or [])
    growth_pct = forms._number(growth, "growth per month (%)", allow_none=True) or 0.0
    top = forms._number(verify_top, "verify the cheapest N", allow_none=True)
    data = {
        "name": (name or "").strip() or "plan",
        "knobs": knob_mapping,
        "slos": slo_mapping,
        "candidates": space,
        "verify_top": int(top) if top is not None and top == int(top) else top,
        "growth_per_month": growth_pct / 100,
        "hosted_prices": hosted,
    }
    return plan_from_mapping(data, loaded_profile=profile)


@callback(
    Output(ID("status"), "children"),
    Output(ID("job"), "data"),
    Output(ID("poll"), "disabled"),
    Output(ID("cancel"), "disabled"),
    Output(ID("progress"), "hidden"),
    Input(ID("run"), "n_clicks"),
    State(ID("scope"), "data"),
    State(ID("profile"), "rowData"),
    State(ID("loaded-rows"), "data"),
    *(State(ID(f), "value") for f in KNOB_FIELDS),
    *(State(ID(f), "value") for f in SLO_FIELDS),
    *(State(ID(f), "value") for f in CANDIDATE_FIELDS),
    State({"type": ID("price"), "gpu": ALL}, "value"),
    State(ID("name"), "value"),
    State(ID("growth"), "value"),
    State(ID("verify_top"), "value"),
    prevent_initial_call=True,
)
def _run(_clicks: int, scope: Any, rows: Any, loaded: Any, *values: Any) -> tuple[Any, ...]:
    """Validate everything here (errors show at once, nothing runs), then submit the plan."""
    n_k, n_s, n_c = len(KNOB_FIELDS), len(SLO_FIELDS), len(CANDIDATE_FIELDS)
    knobs = dict(zip(KNOB_FIELDS, values[:n_k], strict=True))
    slos = dict(zip(SLO_FIELDS, values[n_k : n_k + n_s], strict=True))
    candidates = dict(zip(CANDIDATE_FIELDS, values[n_k + n_s : n_k + n_s + n_c], strict=True))
    prices, name, growth, verify_top = values[n_k + n_s + n_c :]
    try:
        context.require_role(RUN_ROLE)
        inputs = plan_inputs(
            scope, rows, loaded, knobs, slos, candidates, prices, name, growth, verify_top
        )

        def work(progress: Any, cancelled: Any) -> dict[str, Any]:
            return run_plan(inputs, progress=progress, cancelled=cancelled)

        job_id = jobs().submit(work, owner=_who(), label=f"plan {inputs.name!r}")
    except (RoleRequiredError, InferLedgerError) as exc:
        return _error(exc), dash.no_update, True, True, True
    return f"Queued plan {inputs.name!r}…", job_id, False, False, False


@callback(
    Output(ID("progress"), "value"),
    Output(ID("status"), "children", allow_duplicate=True),
    Output(ID("poll"), "disabled", allow_duplicate=True),
    Output(ID("cancel"), "disabled", allow_duplicate=True),
    Output(ID("results"), "children"),
    Output(ID("result-job"), "data"),
    Output(ID("save-controls"), "hidden"),
    Output(ID("save-name"), "value"),
    Input(ID("poll"), "n_intervals"),
    State(ID("job"), "data"),
    prevent_initial_call=True,
)
def _poll(_n: int, job_id: str | None) -> tuple[Any, ...]:
    """The job's progress; its result once done (the poll then stops)."""
    if not job_id:
        raise PreventUpdate
    keep = dash.no_update
    try:
        s = jobs().status(job_id, owner=_who())
    except UnknownJobError as exc:
        return 0, _error(exc), True, True, keep, keep, keep, keep
    text = f"{s.message} ({s.progress * 100:.0f} %)"
    if not s.state.finished:
        return s.progress, text, False, False, keep, keep, keep, keep
    if s.state is JobState.FAILED:
        return s.progress, _error(f"The plan failed: {s.error}"), True, True, keep, keep, keep, keep
    if s.state is JobState.CANCELLED:
        return s.progress, "Cancelled.", True, True, keep, keep, keep, keep
    result = s.result
    view = results.result_view(result, ID)
    done = f"Done in {result.get('duration_s', 0):.1f} s."
    return 1, done, True, True, view, job_id, not may(RUN_ROLE), result.get("name")


@callback(
    Output(ID("status"), "children", allow_duplicate=True),
    Input(ID("cancel"), "n_clicks"),
    State(ID("job"), "data"),
    prevent_initial_call=True,
)
def _cancel(_clicks: int, job_id: str | None) -> Any:
    try:
        context.require_role(RUN_ROLE)
        if not job_id:
            raise InferLedgerError("No plan is running.")
        jobs().cancel(job_id, owner=_who())
    except (RoleRequiredError, InferLedgerError) as exc:
        return _error(exc)
    return "Cancelling…"


# ------------------------------------------------------------------------------- saved plans
@callback(
    Output(ID("message"), "children", allow_duplicate=True),
    Output(ID("saved-version"), "data"),
    Input(ID("save"), "n_clicks"),
    State(ID("result-job"), "data"),
    State(ID("save-name"), "value"),
    State(ID("save-owner"), "value"),
    State(ID("saved-version"), "data"),
    prevent_initial_call=True,
)
def _save(
    _clicks: int, job_id: str | None, name: str | None, owner: str | None, version: int | None
) -> tuple[Any, Any]:
    try:
        context.require_role(RUN_ROLE)
        if not job_id:
            raise InferLedgerError("Run a plan first: there is nothing to save.")
        s = jobs().status(job_id, owner=_who())
        if s.state is not JobState.DONE:
            raise InferLedgerError("The plan has no result to save.")
        storage, who = context.storage(), _who()
        plan_id = capacity_plans.save_plan(
            storage, s.result, created_by=who, name=(name or "").strip() or None
        )
        if owner and owner.strip():
            capacity_plans.set_decision(storage, plan_id, None, by=who, owner=owner.strip())
    except (RoleRequiredError, InferLedgerError) as exc:
        return _error(exc), dash.no_update
    return _ok(f"Saved plan #{plan_id}."), (version or 0) + 1


@callback(
    Output(ID("saved"), "children"),
    Output(ID("picked"), "options"),
    Input(ID("saved-version"), "data"),
)
def _saved(_version: int | None) -> tuple[Any, list[dict[str, Any]]]:
    plans = capacity_plans.list_plans(context.storage())
    if not plans:
        return html.P("No saved plans yet.", className="empty-state"), []
    rows = [
        [
            f"#{p.plan_id}",
            p.name,
            p.created_by,
            when(p.created_at),
            money(p.monthly_cost),
            p.gpus,
            "; ".join(f"{c.pool}: {c.label or 'none'} × {c.replicas or 0}" for c in p.best),
            p.owner or "–",
            p.decision or "–",
            p.decision_note or "",
        ]
        for p in plans
    ]
    head = (
        "Plan",
        "Name",
        "By",
        "Saved",
        "Monthly cost",
        "GPUs",
        "Recommended",
        "Owner",
        "Decision",
        "Note",
    )
    options = [{"label": f"#{p.plan_id} {p.name}", "value": p.plan_id} for p in plans]
    return results._table(head, rows, id=ID("saved-table")), options


def _picked(picked: Any, low: int, high: int) -> list[int]:
    chosen = [int(p) for p in picked or []]
    if not low <= len(chosen) <= high:
        want = f"{low}" if low == high else f"{low} to {high}"
        raise InferLedgerError(f"Choose {want} saved plans (chose {len(chosen)}).")
    return chosen


@callback(
    Output(ID("opened"), "children"),
    Input(ID("open"), "n_clicks"),
    Input(ID("compare"), "n_clicks"),
    State(ID("picked"), "value"),
    prevent_initial_call=True,
)
def _open(_open: int, _compare: int, picked: Any) -> Any:
    """Reopen one saved plan, or two or three side by side (viewers too)."""
    storage = context.storage()
    try:
        if ctx.triggered_id == ID("compare"):
            plans = [capacity_plans.get_plan(storage, i) for i in _picked(picked, 2, 3)]
            return results.comparison(plans)
        plan = capacity_plans.get_plan(storage, _picked(picked, 1, 1)[0])
    except InferLedgerError as exc:
        return _error(exc)
    head = html.P(
        f"Plan #{plan['plan_id']} saved by {plan['saved_by']}; owner {plan.get('owner') or '–'}"
        f"; decision {plan.get('decision') or '–'}.",
        className="card-note",
    )
    return [head, *results.result_view(plan, lambda n: ID(f"opened-{n}"))]


@callback(
    Output(ID("message"), "children", allow_duplicate=True),
    Output(ID("saved-version"), "data", allow_duplicate=True),
    Input(ID("decide"), "n_clicks"),
    State(ID("picked"), "value"),
    State(ID("decision"), "value"),
    State(ID("decision-note"), "value"),
    State(ID("decision-owner"), "value"),
    State(ID("saved-version"), "data"),
    prevent_initial_call=True,
)
def _decide(
    _clicks: int,
    picked: Any,
    decision: str | None,
    note: str | None,
    owner: str | None,
    version: int | None,
) -> tuple[Any, Any]:
    try:
        context.require_role(RUN_ROLE)
        plan_id = _picked(picked, 1, 1)[0]
        capacity_plans.set_decision(
            context.storage(),
            plan_id,
            decision,
            note,
            by=_who(),
            owner=(owner or "").strip() or None,
        )
    except (RoleRequiredError, InferLedgerError) as exc:
        return _error(exc), dash.no_update
    return _ok(f"Plan #{plan_id}: decision {decision or 'cleared'}."), (version or 0) + 1


@callback(
    Output(ID("download"), "data"),
    Output(ID("message"), "children", allow_duplicate=True),
    Input(ID("md"), "n_clicks"),
    Input(ID("html"), "n_clicks"),
    State(ID("picked"), "value"),
    prevent_initial_call=True,
)
def _download(_md: int, _html: int, picked: Any) -> tuple[Any, Any]:
    """The picked plan's decision record (models.capacity.record), Markdown or HTML."""
    try:
        plan = capacity_plans.get_plan(context.storage(), _picked(picked, 1, 1)[0])
    except InferLedgerError as exc:
        return dash.no_update, _error(exc)
    stem = f"capacity-plan-{plan['plan_id']}"
    if ctx.triggered_id == ID("html"):
        return dcc.send_string(record.decision_record_html(plan), f"{stem}.html"), None
    return dcc.send_string(record.decision_record_markdown(plan), f"{stem}.md"), None
