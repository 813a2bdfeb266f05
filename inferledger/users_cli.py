"""`inferledger users`: add, list, change and remove the people who may sign in to the UI.

DuckDB lets one process open a database file, so these commands open the database themselves
(--db, else the `db` setting) and need `inferledger serve` stopped; a locked file is one line.
Passwords are read twice from the terminal (never echoed), or once from stdin with
--password-stdin (for scripts); they are never accepted as arguments, which would leave them
in the shell history and the process list. Roles and rules: docs/security.md.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from inferledger.cli_text import (
    add_ledger_flags,
    cli_user,
    command_settings,
    format_rows,
    utc_minute,
)
from inferledger.core.errors import InferLedgerError
from inferledger.core.settings import Settings
from inferledger.core.storage import Storage, open_for_command
from ledger import users

ROLES = "|".join(r.value for r in users.Role)


class UsersCommandError(InferLedgerError):
    """A `users` command cannot run as asked (no database, database in use, no password)."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `users` and its subcommands to the CLI's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    add_ledger_flags(common)
    password = argparse.ArgumentParser(add_help=False)
    password.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of stdin instead of asking twice",
    )
    parser = subparsers.add_parser(
        "users",
        help="add, list, change and remove UI users",
        description="Users who may sign in to the UI, and their roles: viewer (dashboards), "
        "analyst (also the request explorer, traces and CSV downloads), admin (also the "
        "admin pages). See docs/security.md. Stop `inferledger serve` first: DuckDB lets one "
        "process open the database.",
    )
    sub = parser.add_subparsers(dest="users_command", required=True, metavar="ACTION")

    add = sub.add_parser("add", parents=[common, password], help="add a user")
    add.add_argument("name", metavar="NAME", help="user name (lower case; an e-mail works)")
    add.add_argument("--role", required=True, metavar=ROLES, help="the user's role")

    sub.add_parser("list", parents=[common], help="the users (a table)")

    role = sub.add_parser("set-role", parents=[common], help="change a user's role")
    role.add_argument("name", metavar="NAME")
    role.add_argument("role", metavar=ROLES)

    passwd = sub.add_parser(
        "passwd", parents=[common, password], help="set a new password (ends the user's sessions)"
    )
    passwd.add_argument("name", metavar="NAME")

    disable = sub.add_parser(
        "disable", parents=[common], help="stop a user from signing in (ends their sessions)"
    )
    disable.add_argument("name", metavar="NAME")
    enable = sub.add_parser("enable", parents=[common], help="let a disabled user sign in again")
    enable.add_argument("name", metavar="NAME")

    remove = sub.add_parser("remove", parents=[common], help="remove a user (ends their sessions)")
    remove.add_argument("name", metavar="NAME")

    changes = sub.add_parser("changes", parents=[common], help="the audit trail, newest first")
    changes.add_argument("--limit", type=int, default=50, metavar="N", help="rows [50]")
    return parser


def run(args: argparse.Namespace) -> int:
    action = args.users_command
    # Everything the user typed is checked before the database is opened (or created).
    name = users.normalize_name(args.name) if hasattr(args, "name") else None
    role = users.parse_role(args.role) if hasattr(args, "role") else None
    password = _password(args, name) if action in ("add", "passwd") else None
    settings = command_settings(args)
    storage = _open(settings, must_exist=action != "add")
    by = cli_user()
    try:
        if action == "add":
            assert name and role and password is not None
            user = users.add_user(storage, name, role, password, by=by)
            print(f"added {user.name} ({user.role.value})")
        elif action == "list":
            print(_table(users.list_users(storage)))
        elif action == "set-role":
            assert name and role
            user = users.set_role(storage, name, role, by=by)
            print(f"{user.name} is now {user.role.value}")
        elif action == "passwd":
            assert name and password is not None
            users.set_password(storage, name, password, by=by)
            print(f"set a new password for {name}; their sessions have ended")
        elif action in ("disable", "enable"):
            assert name
            user = users.set_disabled(storage, name, action == "disable", by=by)
            print(f"{user.name} is {'disabled' if user.disabled else 'enabled'}")
        elif action == "remove":
            assert name
            users.remove_user(storage, name, by=by)
            print(f"removed {name}")
        elif action == "changes":
            print(_changes(users.user_changes(storage, args.limit)))
    finally:
        storage.close()
    return 0


def _password(args: argparse.Namespace, name: str | None) -> str:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        users.check_password(password, name)
        return password
    if not sys.stdin.isatty():
        raise UsersCommandError(
            "no terminal to ask for the password: pipe it in with --password-stdin"
        )
    password = getpass.getpass(f"New password for {name}: ")
    users.check_password(password, name)
    if getpass.getpass("The same password again: ") != password:
        raise UsersCommandError("the two passwords differ; nothing was changed")
    return password


def _open(settings: Settings, must_exist: bool) -> Storage:
    return open_for_command(settings, must_exist=must_exist)


def _table(people: list[users.User]) -> str:
    if not people:
        return "(no users)"
    rows = [
        [
            u.name,
            u.role.value,
            "disabled" if u.disabled else "active",
            ",".join(k for k, on in (("password", u.has_password), ("oidc", u.oidc_subject)) if on),
            utc_minute(u.created_at),
            utc_minute(u.last_sign_in_at),
        ]
        for u in people
    ]
    return format_rows(["name", "role", "status", "sign-in", "created", "last sign-in"], rows)


def _changes(changes: list[users.UserChange]) -> str:
    if not changes:
        return "(no changes)"
    rows = [
        [
            str(c.change_id),
            utc_minute(c.changed_at),
            c.changed_by,
            c.action,
            c.user_name,
            c.detail or "",
        ]
        for c in changes
    ]
    return format_rows(["change", "at", "by", "action", "user", "detail"], rows)
