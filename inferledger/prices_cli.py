"""`inferledger prices`: list, load, set, end, supersede and delete price versions, and show the
audit trail.

DuckDB lets one process open a database file, so these commands open the database themselves
(--db, else the `db` setting) and need `inferledger serve` stopped; a locked file is one line.
A database that has never held a price is seeded first (from the `prices.file` setting), just as
`inferledger serve` does at start, so the book looks the same whoever opens it first.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from inferledger.cli_text import add_ledger_flags, command_settings, format_rows, login_name
from inferledger.core.errors import InferLedgerError
from inferledger.core.settings import Settings
from inferledger.core.storage import Storage, open_for_command
from ledger.price_book import (
    ALLOWED_UNITS,
    Price,
    PriceSource,
    PriceVersion,
    delete_price,
    end_price,
    format_price,
    format_time,
    get_price,
    history,
    list_prices,
    load_price_file,
    load_prices,
    parse_time,
    seed_if_empty,
    set_price,
    supersede_price,
    superseded_versions,
)


class PricesCommandError(InferLedgerError):
    """A `prices` command cannot run as asked (no database, database in use)."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `prices` and its subcommands to the CLI's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    add_ledger_flags(common)
    parser = subparsers.add_parser(
        "prices",
        help="list, load and change the price book",
        description="The price book: effective-dated prices with an audit trail "
        "(docs/price-book.md). Stop `inferledger serve` first: DuckDB lets one process open "
        "the database.",
    )
    sub = parser.add_subparsers(dest="prices_command", required=True, metavar="ACTION")

    show = sub.add_parser("list", parents=[common], help="the prices in effect (a table)")
    show.add_argument("--at", metavar="ISO", help="in effect at this date/time [default: now]")
    show.add_argument("--all", action="store_true", help="every version, with its effective_to")
    show.add_argument(
        "--superseded", action="store_true", help="the versions replaced by a corrected price"
    )

    load = sub.add_parser("load", parents=[common], help="add the prices of a YAML or CSV file")
    load.add_argument("file", metavar="FILE", help="price file (.yaml, .yml or .csv)")
    load.add_argument(
        "--replace",
        action="store_true",
        help="change versions already stored at another price (default: refuse)",
    )
    load.add_argument("--by", metavar="NAME", help="who makes the change [default: $USER]")

    kinds = ", ".join(
        f"{k.value} ({'/'.join(u.value for u in units)})" for k, units in ALLOWED_UNITS.items()
    )
    put = sub.add_parser(
        "set",
        parents=[common],
        help="add a price version (or change the one with the same --from)",
        description=f"Kinds and their units: {kinds}.",
    )
    put.add_argument("kind", metavar="KIND", help="gpu, model, service or reviewer")
    put.add_argument("subject", metavar="SUBJECT", help="GPU type, model, service key or reviewer")
    put.add_argument("unit", metavar="UNIT", help="gpu_hour, input_mtok, ..., hour or call")
    put.add_argument("price", metavar="PRICE", help="amount in the book's currency")
    put.add_argument(
        "--from",
        dest="effective_from",
        metavar="DATE",
        required=True,
        help="effective from (a date means 00:00 UTC, or an ISO datetime)",
    )
    put.add_argument("--deployment", default="", metavar="D", help="GPU override for deployment D")
    put.add_argument("--stage", metavar="S", help="services: retrieval or tools")
    put.add_argument("--currency", default="USD", metavar="C", help="[USD]")
    put.add_argument("--note", metavar="N", help="why (kept with the price and in the history)")
    put.add_argument("--by", metavar="NAME", help="who makes the change [default: $USER]")

    end = sub.add_parser(
        "end",
        parents=[common],
        help="end a price version at a time (it stops applying; the ledger re-prices)",
        description="Set a version's effective_to: from then on it no longer applies, and until "
        "a later version starts nothing of its key does (the command says which hours lose it).",
    )
    end.add_argument("price_id", metavar="PRICE_ID", type=int)
    end.add_argument(
        "--at", required=True, metavar="DATE", help="end (a date means 00:00 UTC, or ISO time)"
    )
    end.add_argument("--reason", required=True, metavar="WHY", help="kept in the audit trail")
    end.add_argument("--by", metavar="NAME", help="who makes the change [default: $USER]")

    supersede = sub.add_parser(
        "supersede",
        parents=[common],
        help="replace a mistaken price version by a corrected price from the same start",
        description="The corrected price gets a new price_id and the same start and end; the "
        "mistaken version is kept (prices list --superseded), and the ledger re-prices from its "
        "start.",
    )
    supersede.add_argument("price_id", metavar="PRICE_ID", type=int)
    supersede.add_argument("price", metavar="PRICE", help="the corrected amount")
    supersede.add_argument("--reason", required=True, metavar="WHY", help="kept in the audit trail")
    supersede.add_argument("--note", metavar="N", help="the new version's note [default: kept]")
    supersede.add_argument("--by", metavar="NAME", help="who makes the change [default: $USER]")

    delete = sub.add_parser("delete", parents=[common], help="delete one price version by id")
    delete.add_argument("price_id", metavar="PRICE_ID", type=int)
    delete.add_argument("--by", metavar="NAME", help="who makes the change [default: $USER]")

    hist = sub.add_parser("history", parents=[common], help="the audit trail, newest first")
    hist.add_argument("--limit", type=int, default=50, metavar="N", help="rows [50]")
    return parser


def run(args: argparse.Namespace) -> int:
    settings = command_settings(args)
    action = args.prices_command
    must_exist = action in ("list", "history")
    handlers: dict[str, Callable[[Storage, argparse.Namespace], None]] = {
        "list": _list,
        "set": _set,
        "delete": _delete,
        "end": _end,
        "supersede": _supersede,
        "history": _history,
    }
    if action == "load":
        # A bad file is refused before the database is opened (or created).
        prices = load_price_file(args.file)
        handlers["load"] = lambda storage, args: _load(storage, args, prices)
    storage = _open(settings, must_exist)
    try:
        seed_if_empty(storage, settings["prices.file"] or None)
        handlers[action](storage, args)
    finally:
        storage.close()
    return 0


def _open(settings: Settings, must_exist: bool) -> Storage:
    return open_for_command(settings, must_exist=must_exist)


def _who(args: argparse.Namespace) -> str:
    return str(args.by) if args.by else (login_name() or "cli")


def _list(storage: Storage, args: argparse.Namespace) -> None:
    if sum(map(bool, (args.all, args.at, args.superseded))) > 1:
        raise PricesCommandError("give one of --at, --all and --superseded")
    if args.superseded:
        _list_superseded(storage)
        return
    if args.all:
        versions = list_prices(storage)
    else:
        try:
            at = parse_time(args.at, "--at") if args.at else datetime.now(UTC)
        except ValueError as exc:
            raise PricesCommandError(str(exc)) from None
        versions = list_prices(storage, at)
        print(f"prices in effect at {format_time(at)}")
    print(_table(versions, with_to=args.all))


def _table(versions: Sequence[PriceVersion], with_to: bool) -> str:
    head = ["id", "kind", "subject", "deployment", "unit", "price", "currency", "stage", "from"]
    if with_to:
        head.append("to")
    head.append("note")
    rows = []
    for v in versions:
        row = [
            str(v.price_id),
            v.kind.value,
            v.subject,
            v.deployment,
            v.unit.value,
            format_price(v.price),
            v.currency,
            v.stage.value if v.stage else "",
            format_time(v.effective_from),
        ]
        if with_to:
            row.append(format_time(v.effective_to) if v.effective_to else "")
        row.append(v.note or "")
        rows.append(row)
    if not rows:
        return "(no prices)"
    return format_rows(head, rows, right={"id", "price"})


def _load(storage: Storage, args: argparse.Namespace, prices: list[Price]) -> None:
    summary = load_prices(
        storage, prices, changed_by=_who(args), source=PriceSource.CLI, replace=args.replace
    )
    print(
        f"loaded {args.file}: {summary.inserted} inserted, {summary.updated} updated, "
        f"{summary.unchanged} unchanged"
    )


def _set(storage: Storage, args: argparse.Namespace) -> None:
    price_id = set_price(
        storage,
        args.kind,
        args.subject,
        args.unit,
        args.price,
        args.effective_from,
        deployment=args.deployment,
        note=args.note,
        changed_by=_who(args),
        source=PriceSource.CLI,
        stage=args.stage,
        currency=args.currency,
    )
    v = get_price(storage, price_id)
    print(f"price_id {price_id}: {v.describe()} = {format_price(v.price)} {v.currency}")


def _list_superseded(storage: Storage) -> None:
    gone = superseded_versions(storage)
    if not gone:
        print("(no superseded versions)")
        return
    head = ["id", "kind", "subject", "deployment", "unit", "price", "from", "by_id", "at", "by"]
    rows = [
        [
            str(s.version.price_id),
            s.version.kind.value,
            s.version.subject,
            s.version.deployment,
            s.version.unit.value,
            format_price(s.version.price),
            format_time(s.version.effective_from),
            str(s.superseded_by),
            format_time(s.superseded_at),
            s.changed_by,
            s.reason,
        ]
        for s in gone
    ]
    print(format_rows([*head, "reason"], rows, right={"id", "price", "by_id"}))


def _end(storage: Storage, args: argparse.Namespace) -> None:
    done = end_price(storage, args.price_id, args.at, changed_by=_who(args), reason=args.reason)
    v = done.version
    print(f"ended price_id {v.price_id} ({v.describe()}) at {format_time(done.at)}")
    print(done.gap())


def _supersede(storage: Storage, args: argparse.Namespace) -> None:
    old = get_price(storage, args.price_id)
    new = supersede_price(
        storage,
        args.price_id,
        args.price,
        changed_by=_who(args),
        reason=args.reason,
        source=PriceSource.CLI,
        note=args.note,
    )
    print(
        f"superseded price_id {old.price_id} ({format_price(old.price)} {old.currency}) by "
        f"price_id {new.price_id}: {new.describe()} = {format_price(new.price)} {new.currency}"
    )


def _delete(storage: Storage, args: argparse.Namespace) -> None:
    v = delete_price(storage, args.price_id, changed_by=_who(args))
    print(f"deleted price_id {v.price_id}: {v.describe()} = {format_price(v.price)} {v.currency}")


def _history(storage: Storage, args: argparse.Namespace) -> None:
    changes = history(storage, args.limit)
    if not changes:
        print("(no changes)")
        return
    head = [
        "change",
        "at",
        "by",
        "action",
        "id",
        "kind",
        "subject",
        "deployment",
        "unit",
        "old",
        "new",
        "effective_from",
        "note",
        "reason",
    ]
    rows = [
        [
            str(c.change_id),
            format_time(c.changed_at),
            c.changed_by,
            c.action.value,
            str(c.price_id),
            c.kind.value,
            c.subject,
            c.deployment,
            c.unit.value,
            "" if c.old_price is None else format_price(c.old_price),
            "" if c.new_price is None else format_price(c.new_price),
            format_time(c.effective_from),
            c.note or "",
            c.reason or "",
        ]
        for c in changes
    ]
    print(format_rows(head, rows, right={"change", "id", "old", "new"}))
