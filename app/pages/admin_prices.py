"""Prices (admins only): the prices in effect, a form to add a price version (effective-dated,
so it re-prices from its start only), a form to end a version or supersede a mistaken one
(docs/price-book.md), the superseded versions, and the audit trail of every change, a page of
PAGE_SIZE rows at a time (read on the server: the browser never holds the whole trail).

The layout holds no data (Dash renders every layout to check ids, whoever asks); the tables are
loaded by a callback, and every change calls context.require_role("admin") first.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dash
from dash import Input, Output, State, callback, ctx, dcc, html

from app import context
from app.auth import RoleRequiredError
from app.components import ids, pager, pager_state, turned_offset
from ledger import price_book

dash.register_page(
    __name__,
    path="/admin/prices",
    name="Prices",
    title="Prices · InferLedger",
    order=101,
    min_role="admin",
)

ID = ids("admin-prices")
#: Audit-trail rows per page.
PAGE_SIZE = 20
_UNITS = {
    "gpu": ["gpu_hour"],
    "model": ["input_mtok", "cached_input_mtok", "output_mtok"],
    "service": ["hour", "call"],
    "reviewer": ["hour"],
}


def _field(label: str, control: Any, name: str) -> html.Div:
    return html.Div(
        [html.Label(label, htmlFor=ID(name), className="admin-label"), control],
        className="admin-field",
    )


def layout(**_kwargs: object) -> html.Div:
    return html.Div(
        [
            html.H1("Prices"),
            html.P(
                "Prices are versions with an effective time: a new version re-prices the ledger "
                "from its effective time on, never before (docs/price-book.md). Every change is "
                "in the audit trail below.",
                className="admin-intro",
            ),
            html.Div(id=ID("message"), role="status", **{"aria-live": "polite"}),
            html.Section(
                [
                    html.H2("Add a price version", className="card-title"),
                    html.Div(
                        [
                            _field(
                                "Kind",
                                dcc.Dropdown(
                                    id=ID("kind"),
                                    options=list(_UNITS),
                                    value="gpu",
                                    clearable=False,
                                ),
                                "kind",
                            ),
                            _field("Subject", dcc.Input(id=ID("subject"), type="text"), "subject"),
                            _field(
                                "Unit",
                                dcc.Dropdown(id=ID("unit"), value="gpu_hour", clearable=False),
                                "unit",
                            ),
                            _field(
                                "Price (USD)",
                                dcc.Input(id=ID("price"), type="number", min=0, step="any"),
                                "price",
                            ),
                            _field(
                                "Effective from (UTC, YYYY-MM-DD or ISO time)",
                                dcc.Input(id=ID("from"), type="text"),
                                "from",
                            ),
                            _field(
                                "Deployment (GPU overrides only)",
                                dcc.Input(id=ID("deployment"), type="text"),
                                "deployment",
                            ),
                            _field(
                                "Stage (services only)",
                                dcc.Dropdown(
                                    id=ID("stage"), options=["retrieval", "tools"], value=None
                                ),
                                "stage",
                            ),
                            _field("Note", dcc.Input(id=ID("note"), type="text"), "note"),
                        ],
                        className="admin-grid",
                    ),
                    html.Button("Add price", id=ID("add"), n_clicks=0, className="button"),
                ],
                className="card admin-card",
                **{"aria-label": "Add a price version"},
            ),
            html.Section(
                [
                    html.H2("End or correct a version", className="card-title"),
                    html.P(
                        "End: the version stops applying at that time (its hours are then "
                        "priced by the next version, a fallback, or not at all). Supersede: a "
                        "corrected price replaces it from the same start; the mistaken version "
                        "is kept below. Both re-price the ledger and need a reason.",
                        className="admin-intro",
                    ),
                    html.Div(
                        [
                            _field(
                                "Price ID (# in the table below)",
                                dcc.Input(id=ID("amend-id"), type="number", min=1, step=1),
                                "amend-id",
                            ),
                            _field(
                                "End at (UTC, YYYY-MM-DD or ISO time)",
                                dcc.Input(id=ID("end-at"), type="text"),
                                "end-at",
                            ),
                            _field(
                                "Corrected price (USD)",
                                dcc.Input(id=ID("corrected"), type="number", min=0, step="any"),
                                "corrected",
                            ),
                            _field("Reason", dcc.Input(id=ID("reason"), type="text"), "reason"),
                        ],
                        className="admin-grid",
                    ),
                    html.Button("End version", id=ID("end"), n_clicks=0, className="button"),
                    html.Button("Supersede", id=ID("supersede"), n_clicks=0, className="button"),
                ],
                className="card admin-card",
                **{"aria-label": "End or correct a version"},
            ),
            html.Section(
                [
                    html.H2("In effect now", className="card-title"),
                    html.Div(id=ID("table"), className="admin-table-wrap"),
                ],
                className="card admin-card",
                **{"aria-label": "Prices in effect"},
            ),
            html.Section(
                [
                    html.H2("Audit trail", className="card-title"),
                    html.Div(id=ID("changes"), className="admin-table-wrap"),
                    pager(ID),
                ],
                className="card admin-card",
                **{"aria-label": "Audit trail"},
            ),
            html.Section(
                [
                    html.H2("Superseded versions", className="card-title"),
                    html.Div(id=ID("superseded"), className="admin-table-wrap"),
                ],
                className="card admin-card",
                **{"aria-label": "Superseded versions"},
            ),
            dcc.Store(id=ID("version"), data=0),
            dcc.Store(id=ID("offset"), data=0),
        ],
        className="admin-page",
    )


def _when(value: datetime | None) -> str:
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if value else "–"


def _table(head: list[str], rows: list[list[str]], empty: str) -> Any:
    if not rows:
        return html.P(empty, className="empty-state")
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h, scope="col") for h in head])),
            html.Tbody([html.Tr([html.Td(c) for c in row]) for row in rows]),
        ],
        className="table admin-table",
    )


@callback(Output(ID("unit"), "options"), Output(ID("unit"), "value"), Input(ID("kind"), "value"))
def _units(kind: str) -> tuple[list[str], str]:
    units = _UNITS.get(kind, ["gpu_hour"])
    return units, units[0]


@callback(
    Output(ID("table"), "children"),
    Output(ID("superseded"), "children"),
    Input(ID("version"), "data"),
)
def _show(_version: int) -> tuple[Any, Any]:
    try:
        context.require_role("admin")
    except RoleRequiredError as exc:
        return html.P(str(exc), className="auth-error", role="alert"), None
    storage = context.storage()
    now = price_book.list_prices(storage, at=datetime.now(UTC))
    table = _table(
        ["#", "Kind", "Subject", "Deployment", "Unit", "Price", "Since", "Until", "Note"],
        [
            [
                str(p.price_id),
                p.kind.value,
                p.subject,
                p.deployment or "all",
                p.unit.value,
                f"{price_book.format_price(p.price)} {p.currency}",
                _when(p.effective_from),
                _when(p.effective_to),
                p.note or "",
            ]
            for p in now
        ],
        "No prices: everything is unpriced until one is added.",
    )
    superseded = _table(
        ["#", "Price", "Was", "From", "Replaced by", "When", "By", "Why"],
        [
            [
                str(s.version.price_id),
                f"{s.version.kind.value} {s.version.subject} {s.version.unit.value}"
                + (f" ({s.version.deployment})" if s.version.deployment else ""),
                f"{price_book.format_price(s.version.price)} {s.version.currency}",
                _when(s.version.effective_from),
                f"#{s.superseded_by}",
                _when(s.superseded_at),
                s.changed_by,
                s.reason,
            ]
            for s in price_book.superseded_versions(storage)
        ],
        "No version has been superseded.",
    )
    return table, superseded


@callback(
    Output(ID("changes"), "children"),
    Output(ID("page-info"), "children"),
    Output(ID("newer"), "disabled"),
    Output(ID("older"), "disabled"),
    Input(ID("version"), "data"),
    Input(ID("offset"), "data"),
)
def _changes(_version: int, offset: int | None) -> tuple[Any, str, bool, bool]:
    """One page of the audit trail, newest first, read on the server."""
    try:
        context.require_role("admin")
    except RoleRequiredError as exc:
        return html.P(str(exc), className="auth-error", role="alert"), "", True, True
    page = price_book.history_page(context.storage(), offset or 0, PAGE_SIZE)
    rows = [
        [
            _when(c.changed_at),
            c.changed_by,
            c.action.value,
            f"#{c.price_id} {c.kind.value} {c.subject} {c.unit.value}"
            + (f" ({c.deployment})" if c.deployment else ""),
            "" if c.old_price is None else price_book.format_price(c.old_price),
            "" if c.new_price is None else price_book.format_price(c.new_price),
            _when(c.effective_from),
            _when(c.new_effective_to) if c.action is price_book.ChangeAction.END else "",
            c.reason or "",
        ]
        for c in page.changes
    ]
    table = _table(
        ["When", "By", "Action", "Price", "Old", "New", "Affects from", "Ends", "Why"],
        rows,
        "No changes yet.",
    )
    return table, *pager_state(page.offset, len(page.changes), page.total)


@callback(
    Output(ID("offset"), "data"),
    Input(ID("newer"), "n_clicks"),
    Input(ID("older"), "n_clicks"),
    State(ID("offset"), "data"),
    prevent_initial_call=True,
)
def _turn(_newer: int, _older: int, offset: int | None) -> int:
    return turned_offset(ctx.triggered_id == ID("older"), offset, PAGE_SIZE)


@callback(
    Output(ID("message"), "children"),
    Output(ID("version"), "data"),
    Input(ID("add"), "n_clicks"),
    State(ID("kind"), "value"),
    State(ID("subject"), "value"),
    State(ID("unit"), "value"),
    State(ID("price"), "value"),
    State(ID("from"), "value"),
    State(ID("deployment"), "value"),
    State(ID("stage"), "value"),
    State(ID("note"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _add(_clicks: int, *form: Any) -> tuple[Any, int]:
    kind, subject, unit, price, when, deployment, stage, note, version = form
    try:
        admin = context.require_role("admin")
        if price is None:
            raise price_book.PriceBookError("price: enter a number (USD)")
        price_id = price_book.set_price(
            context.storage(),
            kind,
            (subject or "").strip(),
            unit,
            price,
            (when or "").strip(),
            (deployment or "").strip(),
            note=(note or "").strip() or None,
            stage=stage,
            changed_by=admin.name if admin else "anonymous (sign-in off)",
            source="ui",
        )
    except (RoleRequiredError, price_book.PriceBookError) as exc:
        return html.P(str(exc), className="auth-error", role="alert"), version
    done = (
        f"Saved price #{price_id}: the ledger re-prices from its effective time at its next "
        "refresh."
    )
    return html.P(done, className="admin-ok", role="status"), (version or 0) + 1


@callback(
    Output(ID("message"), "children", allow_duplicate=True),
    Output(ID("version"), "data", allow_duplicate=True),
    Output(ID("offset"), "data", allow_duplicate=True),
    Input(ID("end"), "n_clicks"),
    Input(ID("supersede"), "n_clicks"),
    State(ID("amend-id"), "value"),
    State(ID("end-at"), "value"),
    State(ID("corrected"), "value"),
    State(ID("reason"), "value"),
    State(ID("version"), "data"),
    prevent_initial_call=True,
)
def _amend(_end: int, _supersede: int, *form: Any) -> tuple[Any, int, Any]:
    """End or supersede a version; the audit trail goes back to its newest page to show it."""
    price_id, end_at, corrected, reason, version = form
    try:
        admin = context.require_role("admin")
        who = admin.name if admin else "anonymous (sign-in off)"
        if price_id is None:
            raise price_book.PriceBookError("price ID: enter the # of a version in the table")
        storage = context.storage()
        if ctx.triggered_id == ID("end"):
            done = price_book.end_price(
                storage, int(price_id), (end_at or "").strip(), changed_by=who, reason=reason
            )
            text = f"Ended price #{price_id} at {_when(done.at)}: {done.gap()}."
        else:
            if corrected is None:
                raise price_book.PriceBookError("corrected price: enter a number (USD)")
            new = price_book.supersede_price(
                storage, int(price_id), corrected, changed_by=who, reason=reason, source="ui"
            )
            text = (
                f"Superseded price #{price_id} by #{new.price_id} at "
                f"{price_book.format_price(new.price)} {new.currency} from "
                f"{_when(new.effective_from)}."
            )
    except (RoleRequiredError, price_book.PriceBookError) as exc:
        return html.P(str(exc), className="auth-error", role="alert"), version, dash.no_update
    done_text = f"{text} The ledger re-prices the hours it changes at its next refresh."
    return html.P(done_text, className="admin-ok", role="status"), (version or 0) + 1, 0
