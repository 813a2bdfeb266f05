"""Your API tokens: a signed-in user creates a bearer token for the read-only API
(``GET /api/v1/budgets``, ``/api/v1/views``; docs/api.md), sees it once, lists and revokes
their own. Only the token's SHA-256 is stored (ledger.api_tokens); the list names each by its
label and first characters. A token acts as its user, with the user's role.

Every signed-in user may open this page; each callback acts on the signed-in user's own tokens
only (a token id of someone else's is refused as unknown). While sign-in is off there are no
users, so no tokens: the page says so.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dcc, html

from app import context
from app.auth import enabled
from app.components import ids, when
from inferledger.core.errors import BadInputError, InferLedgerError
from ledger import api_tokens

dash.register_page(
    __name__,
    path="/account",
    name="API tokens",
    title="API tokens · InferLedger",
    order=110,
    nav=False,
)

ID = ids("account")


def layout(**_kwargs: object) -> html.Div:
    return html.Div(
        [
            html.H1("Your API tokens"),
            html.P(
                [
                    "A token lets a script, a gateway or a BI tool read the API as you (",
                    html.Code("GET /api/v1/budgets"),
                    "; analysts and admins also ",
                    html.Code("GET /api/v1/views/NAME"),
                    ", documented at ",
                    html.Code("/api/v1/openapi.json"),
                    "): send it as ",
                    html.Code("Authorization: Bearer <token>"),
                    ". It is shown once, when created; revoke one you no longer use.",
                ],
                className="admin-intro",
            ),
            html.Div(id=ID("message"), role="status", **{"aria-live": "polite"}),
            html.Section(
                [
                    html.H2("Create a token", className="card-title"),
                    html.Div(
                        [
                            html.Label("Label", htmlFor=ID("label"), className="admin-label"),
                            dcc.Input(
                                id=ID("label"), type="text", placeholder="e.g. ci-budget-check"
                            ),
                        ],
                        className="admin-field",
                    ),
                    html.Button("Create token", id=ID("create"), n_clicks=0, className="button"),
                    html.Div(id=ID("new-token"), role="status"),
                ],
                className="card admin-card",
                **{"aria-label": "Create a token"},
            ),
            html.Section(
                [
                    html.H2("Your tokens", className="card-title"),
                    html.Div(id=ID("tokens"), className="admin-table-wrap"),
                    html.Div(
                        [
                            dcc.Dropdown(id=ID("pick"), options=[], placeholder="Choose a token"),
                            html.Button("Revoke", id=ID("revoke"), n_clicks=0, className="button"),
                        ],
                        className="admin-grid",
                    ),
                ],
                className="card admin-card",
                **{"aria-label": "Your tokens"},
            ),
            dcc.Store(id=ID("version"), data=0),
        ],
        className="admin-page",
    )


def _user_name() -> str:
    """The signed-in user's name; InferLedgerError while sign-in is off (no users)."""
    user = context.current_user()
    if not enabled() or user is None:
        raise BadInputError(
            "Sign-in is off: API tokens belong to users, so turn sign-in on (auth.enabled) "
            "to create one."
        )
    return user.name


@callback(
    Output(ID("tokens"), "children"),
    Output(ID("pick"), "options"),
    Input(ID("version"), "data"),
)
def _show(_version: int) -> tuple[Any, list[dict[str, Any]]]:
    try:
        name = _user_name()
    except InferLedgerError as exc:
        return html.P(str(exc), className="empty-state"), []
    tokens = api_tokens.list_tokens(context.storage(), name)
    if not tokens:
        return html.P("You have no API tokens.", className="empty-state"), []
    head = ["Label", "Starts with", "Created", "Last used", "State"]
    table = html.Table(
        [
            html.Thead(html.Tr([html.Th(h, scope="col") for h in head])),
            html.Tbody(
                [
                    html.Tr(
                        [
                            html.Td(t.label),
                            html.Td(html.Code(t.prefix + "…")),
                            html.Td(when(t.created_at)),
                            html.Td(when(t.last_used_at)),
                            html.Td(f"revoked {when(t.revoked_at)}" if t.revoked_at else "active"),
                        ]
                    )
                    for t in tokens
                ]
            ),
        ],
        className="table admin-table",
        id=ID("table"),
    )
    options = [
        {"label": f"{t.label} ({t.prefix}…)", "value": t.token_id}
        for t in tokens
        if t.revoked_at is None
    ]
    return table, options


@callback(
    Output(ID("new-token"), "children"),
    Output(ID("message"), "children"),
    Output(ID("version"), "data"),
    Input(ID("create"), "n_clicks"),
    State(ID("label"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _create(_clicks: int, label: str | None, version: int) -> tuple[Any, Any, int]:
    try:
        name = _user_name()
        token = api_tokens.create_token(context.storage(), name, (label or "").strip(), by=name)
    except InferLedgerError as exc:
        return None, html.P(str(exc), className="auth-error", role="alert"), version
    shown = html.Div(
        [
            html.P("Copy it now: it is not shown again.", className="admin-ok"),
            dcc.Input(
                id=ID("token"), value=token, readOnly=True, type="text", className="token-once"
            ),
        ]
    )
    return shown, None, (version or 0) + 1


@callback(
    Output(ID("message"), "children", allow_duplicate=True),
    Output(ID("version"), "data", allow_duplicate=True),
    Input(ID("revoke"), "n_clicks"),
    State(ID("pick"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _revoke(_clicks: int, token_id: int | None, version: int) -> tuple[Any, int]:
    """Revoke one of the signed-in user's own tokens (another user's id reads as unknown)."""
    try:
        name = _user_name()
        storage = context.storage()
        mine = {t.token_id: t for t in api_tokens.list_tokens(storage, name)}
        if token_id is None or int(token_id) not in mine:
            raise BadInputError("Choose one of your tokens to revoke.")
        api_tokens.revoke_token(storage, int(token_id), by=name)
    except InferLedgerError as exc:
        return html.P(str(exc), className="auth-error", role="alert"), version
    done = f"Revoked token {mine[int(token_id)].label}: it no longer opens the API."
    return html.P(done, className="admin-ok", role="status"), (version or 0) + 1
