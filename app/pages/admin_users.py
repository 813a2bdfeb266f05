"""Users (admins only): who may sign in, with which role; add, change, disable, remove.

The layout holds no data (Dash renders every layout once to check ids, whoever asks): the lists
are loaded by a callback. Every change calls context.require_role("admin") on the server before
it touches anything, on top of the guard's rule for this page (docs/security.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dash
from dash import Input, Output, State, callback, ctx, dcc, html

from app import auth, context
from app.auth import RoleRequiredError
from app.components import ids, pager, pager_state, turned_offset
from ledger import users

dash.register_page(
    __name__,
    path="/admin/users",
    name="Users",
    title="Users · InferLedger",
    order=100,
    min_role="admin",
)

ID = ids("admin-users")
#: Audit-trail rows per page.
PAGE_SIZE = 20
ROLE_HELP = {
    "viewer": "dashboards",
    "analyst": "dashboards, request explorer and traces, CSV downloads",
    "admin": "everything, and the admin pages (users, prices, deployments, budgets, alerts)",
}
_ROLE_OPTIONS = [
    {"label": f"{r.value} — {ROLE_HELP[r.value]}", "value": r.value} for r in users.Role
]
_REMOVE_QUESTION = "Remove the chosen user? Their sessions end at once."


def _field(label: str, control: Any, name: str) -> html.Div:
    return html.Div(
        [html.Label(label, htmlFor=ID(name), className="admin-label"), control],
        className="admin-field",
    )


def _button(text: str, name: str, kind: str = "") -> html.Button:
    return html.Button(text, id=ID(name), n_clicks=0, className=f"admin-button {kind}".strip())


def layout(**_kwargs: object) -> html.Div:
    return html.Div(
        [
            html.H1("Users"),
            html.P(
                "Roles include the ones below them: a viewer opens the dashboards; an analyst "
                "also opens the request explorer and traces and downloads CSV; an admin also "
                "edits prices, deployments, budgets, alerts and users.",
                className="admin-intro",
            ),
            html.Div(id=ID("message"), role="status", **{"aria-live": "polite"}),
            html.Section(
                [
                    html.H2("All users", className="card-title"),
                    html.Div(id=ID("table"), className="admin-table-wrap"),
                ],
                className="card admin-card",
                **{"aria-label": "All users"},
            ),
            html.Div(
                [
                    html.Section(
                        [
                            html.H2("Add a user", className="card-title"),
                            _field(
                                "User name",
                                dcc.Input(id=ID("new-name"), type="text", autoComplete="off"),
                                "new-name",
                            ),
                            _field(
                                "Role",
                                dcc.Dropdown(
                                    id=ID("new-role"),
                                    options=_ROLE_OPTIONS,
                                    value="viewer",
                                    clearable=False,
                                ),
                                "new-role",
                            ),
                            _field(
                                f"Password (at least {users.MIN_PASSWORD_LENGTH} characters)",
                                dcc.Input(
                                    id=ID("new-password"), type="password", autoComplete="off"
                                ),
                                "new-password",
                            ),
                            _button("Add user", "add", "primary"),
                        ],
                        className="card admin-card",
                        **{"aria-label": "Add a user"},
                    ),
                    html.Section(
                        [
                            html.H2("Change a user", className="card-title"),
                            _field(
                                "User",
                                dcc.Dropdown(id=ID("target"), options=[], placeholder="Choose"),
                                "target",
                            ),
                            _field(
                                "Role",
                                dcc.Dropdown(
                                    id=ID("target-role"),
                                    options=_ROLE_OPTIONS,
                                    value="viewer",
                                    clearable=False,
                                ),
                                "target-role",
                            ),
                            _button("Change role", "set-role"),
                            _field(
                                "New password",
                                dcc.Input(
                                    id=ID("target-password"), type="password", autoComplete="off"
                                ),
                                "target-password",
                            ),
                            _button("Set password", "passwd"),
                            html.Div(
                                [
                                    _button("Disable", "disable"),
                                    _button("Enable", "enable"),
                                    dcc.ConfirmDialogProvider(
                                        _button("Remove", "remove-button", "danger"),
                                        id=ID("remove"),
                                        message=_REMOVE_QUESTION,
                                    ),
                                ],
                                className="admin-row",
                            ),
                        ],
                        className="card admin-card",
                        **{"aria-label": "Change a user"},
                    ),
                ],
                className="admin-columns",
            ),
            html.Section(
                [
                    html.H2("Recent changes", className="card-title"),
                    html.Div(id=ID("changes"), className="admin-table-wrap"),
                    pager(ID),
                ],
                className="card admin-card",
                **{"aria-label": "Recent changes"},
            ),
            dcc.Store(id=ID("version"), data=0),
            dcc.Store(id=ID("offset"), data=0),
        ],
        className="admin-page",
    )


def _when(value: datetime | None) -> str:
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if value else "–"


def _table(head: list[str], rows: list[list[str]], empty: str) -> html.Table | html.P:
    if not rows:
        return html.P(empty, className="empty-state")
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h, scope="col") for h in head])),
            html.Tbody([html.Tr([html.Td(c) for c in row]) for row in rows]),
        ],
        className="table admin-table",
    )


@callback(
    Output(ID("table"), "children"),
    Output(ID("target"), "options"),
    Output(ID("changes"), "children"),
    Output(ID("page-info"), "children"),
    Output(ID("newer"), "disabled"),
    Output(ID("older"), "disabled"),
    Input(ID("version"), "data"),
    Input(ID("offset"), "data"),
)
def _show(_version: int, offset: int | None = 0) -> tuple[Any, ...]:
    """The users, the audit trail's page and where that page stands, from one read of it."""
    try:
        context.require_role("admin")
    except RoleRequiredError as exc:
        return html.P(str(exc), className="auth-error", role="alert"), [], None, "", True, True
    storage = context.storage()
    people = users.list_users(storage)
    table = _table(
        ["User", "Role", "Status", "Signs in with", "Added", "Last sign-in"],
        [
            [
                u.name,
                u.role.value,
                "disabled" if u.disabled else "active",
                ("password" if u.has_password else "")
                + (" + " if u.has_password and u.oidc_subject else "")
                + ("provider" if u.oidc_subject else ""),
                _when(u.created_at),
                _when(u.last_sign_in_at),
            ]
            for u in people
        ],
        "No users yet.",
    )
    page = users.user_changes_page(storage, offset or 0, PAGE_SIZE)
    changes = _table(
        ["When", "By", "Action", "User", "Detail"],
        [
            [_when(c.changed_at), c.changed_by, c.action, c.user_name, c.detail or ""]
            for c in page.changes
        ],
        "No changes yet.",
    )
    options = [{"label": u.name, "value": u.name} for u in people]
    return table, options, changes, *pager_state(page.offset, len(page.changes), page.total)


@callback(
    Output(ID("offset"), "data"),
    Input(ID("newer"), "n_clicks"),
    Input(ID("older"), "n_clicks"),
    State(ID("offset"), "data"),
    prevent_initial_call=True,
)
def _turn(_newer: int, _older: int, offset: int | None) -> int:
    return turned_offset(ctx.triggered_id == ID("older"), offset, PAGE_SIZE)


def _message(text: str, ok: bool) -> html.P:
    return html.P(
        text, className="admin-ok" if ok else "auth-error", role="status" if ok else "alert"
    )


@callback(
    Output(ID("message"), "children"),
    Output(ID("version"), "data"),
    Output(ID("new-password"), "value"),
    Output(ID("target-password"), "value"),
    Input(ID("add"), "n_clicks"),
    Input(ID("set-role"), "n_clicks"),
    Input(ID("passwd"), "n_clicks"),
    Input(ID("disable"), "n_clicks"),
    Input(ID("enable"), "n_clicks"),
    Input(ID("remove"), "submit_n_clicks"),
    State(ID("new-name"), "value"),
    State(ID("new-role"), "value"),
    State(ID("new-password"), "value"),
    State(ID("target"), "value"),
    State(ID("target-role"), "value"),
    State(ID("target-password"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _change(*args: Any) -> tuple[Any, int, str, str]:
    new_name, new_role, new_password, target, target_role, target_password, version = args[-7:]
    action = str(dash.ctx.triggered_id or "").removeprefix(ID(""))
    try:
        admin = context.require_role("admin")
        done = _apply(
            action,
            admin,
            new_name=new_name,
            new_role=new_role,
            new_password=new_password,
            target=target,
            target_role=target_role,
            target_password=target_password,
        )
    except (RoleRequiredError, users.UserError) as exc:
        return _message(str(exc), ok=False), version, dash.no_update, dash.no_update
    return _message(done, ok=True), (version or 0) + 1, "", ""


def _apply(action: str, admin: users.User | None, **form: Any) -> str:
    """Do one change as `admin`; returns what was done (UserError when it cannot be)."""
    storage = context.storage()
    by = admin.name if admin else "anonymous (sign-in off)"
    if action == "add":
        user = users.add_user(
            storage, form["new_name"] or "", form["new_role"], form["new_password"] or "", by=by
        )
        return f"Added {user.name} ({user.role.value})."
    target = form["target"]
    if not target:
        raise users.UserError("Choose a user first.")
    if admin is not None and target == admin.name and action != "passwd":
        raise users.UserError("You cannot change your own role or account here; ask another admin.")
    if action == "set-role":
        user = users.set_role(storage, target, form["target_role"], by=by)
        return f"{user.name} is now {user.role.value}."
    if action == "passwd":
        user = users.set_password(storage, target, form["target_password"] or "", by=by)
        if admin is not None and user.name == admin.name:
            auth.renew_session(user)  # keep this session; every other one ends
        return f"Set a new password for {user.name}; their other sessions have ended."
    if action in ("disable", "enable"):
        user = users.set_disabled(storage, target, action == "disable", by=by)
        return f"{user.name} is {'disabled' if user.disabled else 'enabled'}."
    if action == "remove":
        users.remove_user(storage, target, by=by)
        return f"Removed {target}."
    raise users.UserError(f"unknown action {action!r}")
