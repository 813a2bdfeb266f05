"""What sign-in shows: the sign-in page, the 403 page and layout, and the guard's JSON answers.
Plain HTML outside Dash (the sign-in page must work before any Dash asset may load); the logic
that decides which to show is in app/auth/routes.py and app/auth/guard.py."""

from __future__ import annotations

import json
from typing import Any

import flask
from dash import dcc, html
from markupsafe import Markup, escape

from ledger.users import Role, User

_PAGE_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="/_favicon.ico">
<link rel="stylesheet" href="/assets/inferledger.css">
<link rel="stylesheet" href="/assets/auth.css">
</head><body class="auth-body"><main class="auth-card" id="content">
<h1 class="auth-brand">InferLedger</h1>
"""
_PAGE_TAIL = "</main></body></html>\n"


def html_page(title: str, body: Markup | str, status: int = 200) -> flask.Response:
    head = _PAGE_HEAD.format(title=escape(title))
    return flask.Response(
        head + str(body) + _PAGE_TAIL,
        status=status,
        content_type="text/html; charset=utf-8",
        headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY"},
    )


def login_page(
    *,
    csrf: str,
    next_path: str,
    name: str = "",
    error: str | None = None,
    notice: str | None = None,
    no_user: bool = False,
    oidc_label: str | None = None,
    oidc_href: str = "",
    status: int = 200,
) -> flask.Response:
    """The sign-in form; every value is escaped."""
    parts = [Markup("<h2>Sign in</h2>")]
    if notice:
        parts.append(Markup('<p class="auth-notice" role="status">{}</p>').format(notice))
    if error:
        parts.append(Markup('<p class="auth-error" role="alert">{}</p>').format(error))
    if no_user:
        parts.append(
            Markup('<p class="auth-notice" role="status">{}</p>').format(
                "No user exists yet. Stop the server and run `inferledger users add NAME "
                "--role admin --db PATH`, then start it again."
            )
        )
    parts.append(
        Markup(
            '<form method="post" action="/login" class="auth-form">'
            '<input type="hidden" name="csrf" value="{csrf}">'
            '<input type="hidden" name="next" value="{next}">'
            '<label for="login-name">User name</label>'
            '<input id="login-name" name="name" type="text" autocomplete="username" '
            'autocapitalize="none" spellcheck="false" required autofocus value="{name}">'
            '<label for="login-password">Password</label>'
            '<input id="login-password" name="password" type="password" '
            'autocomplete="current-password" required>'
            '<button type="submit" class="auth-button">Sign in</button>'
            "</form>"
        ).format(csrf=csrf, next=next_path, name=name)
    )
    if oidc_label is not None:
        parts.append(
            Markup(
                '<p class="auth-or">or</p><a class="auth-button auth-oidc" href="{href}">'
                "Sign in with {label}</a>"
            ).format(href=oidc_href, label=oidc_label)
        )
    return html_page("Sign in · InferLedger", Markup("").join(parts), status)


def forbidden_message(user: User | None, needed: Role, what: str) -> str:
    who = f"{user.name} ({user.role.value})" if user else "nobody"
    return (
        f"{what} needs the {needed.value} role; you are signed in as {who}. "
        "Ask an admin to change your role."
    )


def forbidden_page(user: User, needed: Role, page_name: str) -> flask.Response:
    body = Markup(
        '<h2>Not allowed</h2><p class="auth-error" role="alert">{msg}</p>'
        '<p><a href="/">Back to the dashboards</a></p>{sign_out}'
    ).format(msg=forbidden_message(user, needed, f"The page {page_name}"), sign_out=_SIGN_OUT)
    return html_page("Not allowed · InferLedger", body, 403)


#: Signing out is a POST (app/auth/routes.py, logout); the button looks like the link it replaces.
_SIGN_OUT = Markup(
    '<form class="user-signout-form" method="post" action="/logout">'
    '<button type="submit" class="user-signout">Sign out</button></form>'
)


def sign_out_page(user: User) -> flask.Response:
    """What GET /logout shows: who is signed in, and the button that signs out."""
    body = Markup(
        "<h2>Sign out</h2><p>You are signed in as {name}.</p>"
        '<form method="post" action="/logout">'
        '<button type="submit" class="auth-button">Sign out</button></form>'
        '<p><a href="/">Back to the dashboards</a></p>'
    ).format(name=user.name)
    return html_page("Sign out · InferLedger", body)


def forbidden_layout(user: User | None, needed: Role, name: str) -> Any:
    """What a page shows instead of itself when the role does not allow it."""
    return html.Div(
        [
            html.H1("Not allowed"),
            html.P(
                forbidden_message(user, needed, f"The page {name}"),
                className="auth-error",
                role="alert",
            ),
            dcc.Link("Back to the dashboards", href="/"),
        ],
        className="auth-forbidden",
    )


def json_error(status: int, message: str, **extra: Any) -> flask.Response:
    return flask.Response(
        json.dumps({"error": message, **extra}),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )
