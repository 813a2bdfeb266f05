"""Deployments (admins only): every replica with its deployment, model, GPU type and count and
where each value came from (config or learned from scrapes), and each deployment's idle policy,
which an admin can change here (GPU type and count come from the `deployments` setting:
docs/deployments.md). A change re-prices every hour at the ledger's next refresh.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dcc, html

from app import context
from app.auth import RoleRequiredError
from app.components import ids
from models import deployments

dash.register_page(
    __name__,
    path="/admin/deployments",
    name="Deployments",
    title="Deployments · InferLedger",
    order=102,
    min_role="admin",
)

ID = ids("admin-deployments")
_POLICIES = [
    {"label": "separate — idle is its own line", "value": "separate"},
    {"label": "usage — shared by the deployment's usage cost", "value": "usage"},
    {"label": "even — shared equally per request", "value": "even"},
]
_COLUMNS = (
    "replica, deployment, model, model_source, gpu_type, gpu_type_source, gpus, gpus_source, "
    "idle_policy, idle_policy_source, num_gpu_blocks, block_size, last_seen"
)


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
                                options=_POLICIES,
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
            dcc.Store(id=ID("version"), data=0),
        ],
        className="admin-page",
    )


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
    rows = context.storage().fetchall(
        f"select {_COLUMNS} from deployment_replicas order by deployment, replica"
    )
    if not rows:
        return html.P(
            "No replicas yet: add vLLM scrape targets (scrape.targets) with their deployment.",
            className="empty-state",
        ), []
    head = ["Replica", "Deployment", "Model", "GPU type", "GPUs", "Idle policy", "KV blocks"]
    body = [
        html.Tr(
            [
                html.Td(r[0]),
                html.Td(r[1]),
                html.Td(f"{r[2] or '–'} ({r[3] or 'unknown'})"),
                html.Td(f"{r[4] or '–'} ({r[5] or 'unknown'})"),
                html.Td(f"{r[6]} ({r[7]})"),
                html.Td(f"{r[8]} ({r[9]})"),
                html.Td("–" if r[10] is None else f"{r[10]:,} × {r[11]}"),
            ]
        )
        for r in rows
    ]
    table = html.Table(
        [html.Thead(html.Tr([html.Th(h, scope="col") for h in head])), html.Tbody(body)],
        className="table admin-table",
    )
    return table, sorted({r[1] for r in rows})


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
            raise deployments.DeploymentConfigError("Choose a deployment first.")
        deployments.set_idle_policy(context.storage(), deployment, policy)
    except (RoleRequiredError, deployments.DeploymentConfigError) as exc:
        return html.P(str(exc), className="auth-error", role="alert"), version
    done = f"{deployment}: idle cost is now '{policy}'; the ledger re-prices at its next refresh."
    return html.P(done, className="admin-ok", role="status"), (version or 0) + 1
