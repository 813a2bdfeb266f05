"""Deployments (admins only): every replica with its deployment, model, GPU type and count and
where each value came from (config or learned from scrapes), and each deployment's idle policy,
which an admin can change here (GPU type and count come from the `deployments` setting:
docs/deployments.md). A change re-prices every hour at the ledger's next refresh.

The SLO targets section lists each latency objective by name and what it judges (route, stage,
percentile, target) and lets an admin add, change and remove one (ledger.deployments; the seed
file models/data/slo_targets.yaml only fills a new ledger's table, so removed targets stay
removed, and the bundled ones come back only with "Restore the bundled targets"). Below it, the
targets' audit trail, SLO_PAGE_SIZE rows at a time with the shared pager (read on the server).
The Latency page reads targets at query time, so an edit shows there at once.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

import dash
from dash import Input, Output, State, callback, ctx, dcc, html

from app import context
from app.auth import RoleRequiredError
from app.components import ids, pager, pager_state, turned_offset
from app.filters import filters_from
from ledger import deployments, slo_targets
from ledger.efficiency import LATENCY_STAGES, SloTargetsError
from ledger.queries import run
from models import idle_policy
from models.deployment_config import DeploymentConfigError

dash.register_page(
    __name__,
    path="/admin/deployments",
    name="Deployments",
    title="Deployments · InferLedger",
    order=102,
    min_role="admin",
)

ID = ids("admin-deployments")
#: The SLO audit trail's pager ids: admin-deployments-slo-newer, -slo-page-info, -slo-older.
SLO_ID = ids("admin-deployments-slo")
SLO_PAGE_SIZE = 20


def layout(**_kwargs: object) -> html.Div:
    return html.Div(
        [
            html.H1("Deployments"),
            html.P(
                "Replicas are vLLM scrape targets; their engine spans carry the target's name as "
                "service.instance.id. Configured values win over learned ones.",
                className="admin-intro",
            ),
            html.Div(id=ID("message"), role="status", **{"aria-live": "polite"}),
            html.Section(
                [
                    html.H2("Replicas", className="card-title"),
                    html.Div(id=ID("table"), className="admin-table-wrap"),
                ],
                className="card admin-card",
                **{"aria-label": "Replicas"},
            ),
            html.Section(
                [
                    html.H2("Idle policy", className="card-title"),
                    html.Div(
                        [
                            html.Label("Deployment", htmlFor=ID("deployment")),
                            dcc.Dropdown(id=ID("deployment"), options=[], placeholder="Choose"),
                            html.Label("Idle policy", htmlFor=ID("policy")),
                            dcc.Dropdown(
                                id=ID("policy"),
                                options=idle_policy.policy_options(),
                                value="separate",
                                clearable=False,
                            ),
                        ],
                        className="admin-grid",
                    ),
                    html.Button("Set idle policy", id=ID("set"), n_clicks=0, className="button"),
                ],
                className="card admin-card",
                **{"aria-label": "Idle policy"},
            ),
            _slo_section(),
            dcc.Store(id=ID("version"), data=0),
            dcc.Store(id=ID("slo-offset"), data=0),
        ],
        className="admin-page",
    )


def _slo_field(label: str, control: Any, name: str) -> html.Div:
    return html.Div(
        [html.Label(label, htmlFor=ID(name), className="admin-label"), control],
        className="admin-field",
    )


def _slo_section() -> html.Section:
    return html.Section(
        [
            html.H2("SLO targets", className="card-title"),
            html.P(
                "Latency objectives the Latency page judges each hour against. Pick one to "
                "change or remove it, or type a new name to add one. The seed file "
                "(models/data/slo_targets.yaml) only fills a new ledger: after that this page "
                "owns the targets, and a removed target stays removed across restarts.",
                className="admin-intro",
            ),
            html.Div(id=ID("slo-table"), className="admin-table-wrap"),
            html.Button(
                "Restore the bundled targets", id=ID("slo-restore"), n_clicks=0,
                className="button", hidden=True,
            ),
            html.Div(
                [
                    _slo_field(
                        "Edit target",
                        dcc.Dropdown(id=ID("slo-pick"), options=[], placeholder="Choose"),
                        "slo-pick",
                    ),
                    _slo_field(
                        "Objective (name)", dcc.Input(id=ID("slo-objective"), type="text"),
                        "slo-objective",
                    ),
                    _slo_field(
                        "Route (/answer, or /% for every route)",
                        dcc.Input(id=ID("slo-route"), type="text"),
                        "slo-route",
                    ),
                    _slo_field(
                        "Stage",
                        dcc.Dropdown(
                            id=ID("slo-stage"), options=list(LATENCY_STAGES), value="e2e",
                            clearable=False,
                        ),
                        "slo-stage",
                    ),
                    _slo_field(
                        "Percentile (95 = p95)",
                        dcc.Input(
                            id=ID("slo-percentile"), type="number", min=0, max=100, step="any"
                        ),
                        "slo-percentile",
                    ),
                    _slo_field(
                        "Target (seconds)",
                        dcc.Input(id=ID("slo-target"), type="number", min=0, step="any"),
                        "slo-target",
                    ),
                    _slo_field("Note", dcc.Input(id=ID("slo-note"), type="text"), "slo-note"),
                    dcc.Checklist(
                        id=ID("slo-new-route"),
                        options=[{"label": " a new route (no traffic yet)", "value": "new"}],
                        value=[],
                    ),
                ],
                className="admin-grid",
            ),
            html.Button("Save target", id=ID("slo-save"), n_clicks=0, className="button"),
            html.Button("Remove target", id=ID("slo-remove"), n_clicks=0, className="button"),
            html.H3("Changes"),
            html.Div(id=ID("slo-changes"), className="admin-table-wrap"),
            pager(SLO_ID),
        ],
        className="card admin-card",
        **{"aria-label": "SLO targets"},
    )  # fmt: skip


def _who(admin: Any) -> str:
    """The audit trail's changed_by: the signed-in admin (require_role's user), as on the
    Prices page."""
    return admin.name if admin else "anonymous (sign-in off)"


@callback(
    Output(ID("slo-table"), "children"),
    Output(ID("slo-pick"), "options"),
    Output(ID("slo-restore"), "hidden"),
    Input(ID("version"), "data"),
)
def _slo_show(_version: int) -> tuple[Any, list[dict[str, str]], bool]:
    try:
        context.require_role("admin")
    except RoleRequiredError as exc:
        return html.P(str(exc), className="auth-error", role="alert"), [], True
    storage = context.storage()
    targets = slo_targets.list_slo_targets(storage)
    if not targets:
        removed = slo_targets.slo_changes_page(storage, 0, 1).total > 0
        text = (
            "No SLO targets: they were removed (see the changes below), and stay removed "
            "across restarts. Add one below, or restore the bundled targets "
            "(models/data/slo_targets.yaml)."
            if removed
            else "No SLO targets: add one below, or restore the bundled targets "
            "(models/data/slo_targets.yaml)."
        )
        return html.P(text, className="empty-state"), [], False
    head = ["Objective", "Judges", "App", "Environment", "Note", "Entered in"]
    body = [
        html.Tr(
            [
                html.Td(t.objective),
                html.Td(t.describe()),
                html.Td(t.app or "every"),
                html.Td(t.environment or "every"),
                html.Td(t.note or ""),
                html.Td("this page" if t.source == "ui" else "the seed file"),
            ]
        )
        for t in targets
    ]
    table = html.Table(
        [html.Thead(html.Tr([html.Th(h, scope="col") for h in head])), html.Tbody(body)],
        className="table admin-table",
    )
    options = [{"label": f"{t.objective}: {t.describe()}", "value": t.objective} for t in targets]
    return table, options, True


@callback(
    Output(ID("slo-changes"), "children"),
    Output(SLO_ID("page-info"), "children"),
    Output(SLO_ID("newer"), "disabled"),
    Output(SLO_ID("older"), "disabled"),
    Input(ID("version"), "data"),
    Input(ID("slo-offset"), "data"),
)
def _slo_changes(_version: int, offset: int | None) -> tuple[Any, str, bool, bool]:
    """One page of the SLO targets' audit trail, newest first, read on the server."""
    try:
        context.require_role("admin")
    except RoleRequiredError as exc:
        return html.P(str(exc), className="auth-error", role="alert"), "", True, True
    page = slo_targets.slo_changes_page(context.storage(), offset or 0, SLO_PAGE_SIZE)
    if not page.changes:
        return html.P("No changes yet.", className="empty-state"), "", True, True
    describe = slo_targets.SloTargetChange.describe_values
    head = ["When", "By", "Action", "Objective", "Before", "After"]
    body = [
        html.Tr(
            [
                html.Td(f"{c.changed_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"),
                html.Td(c.changed_by),
                html.Td(c.action),
                html.Td(c.objective),
                html.Td(describe(c.old)),
                html.Td(describe(c.new)),
            ]
        )
        for c in page.changes
    ]
    table = html.Table(
        [html.Thead(html.Tr([html.Th(h, scope="col") for h in head])), html.Tbody(body)],
        className="table admin-table",
    )
    return table, *pager_state(page.offset, len(page.changes), page.total)


@callback(
    Output(ID("slo-offset"), "data"),
    Input(SLO_ID("newer"), "n_clicks"),
    Input(SLO_ID("older"), "n_clicks"),
    State(ID("slo-offset"), "data"),
    prevent_initial_call=True,
)
def _slo_turn(_newer: int, _older: int, offset: int | None) -> int:
    return turned_offset(ctx.triggered_id == SLO_ID("older"), offset, SLO_PAGE_SIZE)


@callback(
    Output(ID("message"), "children", allow_duplicate=True),
    Output(ID("version"), "data", allow_duplicate=True),
    Output(ID("slo-offset"), "data", allow_duplicate=True),
    Input(ID("slo-restore"), "n_clicks"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _slo_restore(_clicks: int, version: int) -> tuple[Any, int, Any]:
    """Put the seed file's objectives back; the audit trail goes back to its newest page."""
    try:
        admin = context.require_role("admin")
        added = slo_targets.restore_bundled_slo_targets(context.storage(), changed_by=_who(admin))
    except (RoleRequiredError, SloTargetsError) as exc:
        return html.P(str(exc), className="auth-error", role="alert"), version, dash.no_update
    done = (
        f"Restored {added} bundled SLO target version{'s' if added != 1 else ''}."
        if added
        else "Every bundled SLO target is there already."
    )
    return html.P(done, className="admin-ok", role="status"), (version or 0) + 1, 0


@callback(
    Output(ID("slo-objective"), "value"),
    Output(ID("slo-route"), "value"),
    Output(ID("slo-stage"), "value"),
    Output(ID("slo-percentile"), "value"),
    Output(ID("slo-target"), "value"),
    Output(ID("slo-note"), "value"),
    Input(ID("slo-pick"), "value"),
    prevent_initial_call=True,
)
def _slo_pick(objective: str | None) -> tuple[Any, ...]:
    try:
        context.require_role("admin")
    except RoleRequiredError:
        return (dash.no_update,) * 6
    targets = slo_targets.list_slo_targets(context.storage())
    chosen = [t for t in targets if t.objective == objective]
    if not chosen:
        return (dash.no_update,) * 6
    t = chosen[0]
    return t.objective, t.route, t.stage, round(t.percentile * 100, 6), t.target_s, t.note or ""


@callback(
    Output(ID("message"), "children", allow_duplicate=True),
    Output(ID("version"), "data", allow_duplicate=True),
    Output(ID("slo-offset"), "data", allow_duplicate=True),
    Input(ID("slo-save"), "n_clicks"),
    Input(ID("slo-remove"), "n_clicks"),
    State(ID("slo-objective"), "value"),
    State(ID("slo-route"), "value"),
    State(ID("slo-stage"), "value"),
    State(ID("slo-percentile"), "value"),
    State(ID("slo-target"), "value"),
    State(ID("slo-note"), "value"),
    State(ID("slo-new-route"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _slo_change(_save: int, _remove: int, *form: Any) -> tuple[Any, int, Any]:
    """Save or remove a target; the audit trail goes back to its newest page to show it."""
    objective, route, stage, percentile, target_s, note, new_route, version = form
    name = (objective or "").strip()
    try:
        who = _who(context.require_role("admin"))
        storage = context.storage()
        if ctx.triggered_id == ID("slo-remove"):
            slo_targets.remove_slo_target(storage, name, changed_by=who)
            done = f"Removed SLO target {name}."
        else:
            what = slo_targets.save_slo_target(
                storage,
                objective=name,
                route=(route or "").strip(),
                stage=stage,
                percentile=percentile,
                target_s=target_s,
                note=note,
                new_route="new" in (new_route or []),
                changed_by=who,
            )
            [saved] = [t for t in slo_targets.list_slo_targets(storage) if t.objective == name]
            done = f"SLO target {name} {what}: {saved.describe()}."
    except (RoleRequiredError, SloTargetsError) as exc:
        return html.P(str(exc), className="auth-error", role="alert"), version, dash.no_update
    return html.P(done, className="admin-ok", role="status"), (version or 0) + 1, 0


@callback(
    Output(ID("table"), "children"),
    Output(ID("deployment"), "options"),
    Input(ID("version"), "data"),
)
def _show(_version: int) -> tuple[Any, list[str]]:
    try:
        context.require_role("admin")
    except RoleRequiredError as exc:
        return html.P(str(exc), className="auth-error", role="alert"), []
    # the query reads no global filter; `run` still wants a Filters
    rows = run(context.storage(), "deployment_replicas", filters_from(None)).to_pylist()
    if not rows:
        return html.P(
            "No replicas yet: add vLLM scrape targets (scrape.targets) with their deployment.",
            className="empty-state",
        ), []
    head = ["Replica", "Deployment", "Model", "GPU type", "GPUs", "Idle policy", "KV blocks"]
    body = [
        html.Tr(
            [
                html.Td(r["replica"]),
                html.Td(r["deployment"]),
                html.Td(f"{r['model'] or '–'} ({r['model_source'] or 'unknown'})"),
                html.Td(f"{r['gpu_type'] or '–'} ({r['gpu_type_source'] or 'unknown'})"),
                html.Td(f"{r['gpus']} ({r['gpus_source']})"),
                html.Td(f"{r['idle_policy']} ({r['idle_policy_source']})"),
                html.Td(
                    "–"
                    if r["num_gpu_blocks"] is None
                    else f"{r['num_gpu_blocks']:,} × {r['block_size']}"
                ),
            ]
        )
        for r in rows
    ]
    table = html.Table(
        [html.Thead(html.Tr([html.Th(h, scope="col") for h in head])), html.Tbody(body)],
        className="table admin-table",
    )
    return table, sorted({r["deployment"] for r in rows})


@callback(
    Output(ID("message"), "children"),
    Output(ID("version"), "data"),
    Input(ID("set"), "n_clicks"),
    State(ID("deployment"), "value"),
    State(ID("policy"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _set(_clicks: int, deployment: str | None, policy: str, version: int) -> tuple[Any, int]:
    try:
        context.require_role("admin")
        if not deployment:
            raise DeploymentConfigError("Choose a deployment first.")
        deployments.set_idle_policy(context.storage(), deployment, policy)
    except (RoleRequiredError, DeploymentConfigError) as exc:
        return html.P(str(exc), className="auth-error", role="alert"), version
    done = f"{deployment}: idle cost is now '{policy}'; the ledger re-prices at its next refresh."
    return html.P(done, className="admin-ok", role="status"), (version or 0) + 1
