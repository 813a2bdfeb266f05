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
from app.filters import filters_from
from ledger import deployments
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
