"""The price book: files, effective-dated lookups, overrides, the audit trail, the CLI and the
seed at start. Real DuckDB files; the CLI in-process (cli.main) and, for the lock and the serve
start-up error, as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from inferledger import cli
from inferledger.core.storage import Storage
from inferledger.settings import load_settings
from ledger import price_book as pb
from ledger.price_book import (
    ChangeAction,
    Price,
    PriceBookError,
    PriceKind,
    PriceSource,
    PriceUnit,
    ServiceStage,
    UnknownPriceError,
)
from models.workload.config import load_workload
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
JAN = datetime(2026, 1, 1, tzinfo=UTC)
BUNDLED = pb.load_price_file(pb.bundled_price_file())


def _count(storage: Storage, table: str) -> int:
    return int(storage.scalar(f"SELECT count(*) FROM {table}"))


def _price(kind: str, subject: str, unit: str, price: float, when: str, **extra: str) -> Price:
    return pb.parse_price(
        {"kind": kind, "subject": subject, "unit": unit, "price": price, "effective_from": when}
        | extra,
        "test",
    )


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------ the seed
def test_seed_loads_the_bundled_file_once(storage: Storage) -> None:
    assert pb.seed_if_empty(storage) == len(BUNDLED) > 20
    assert _count(storage, "price_book") == len(BUNDLED)
    changes = pb.history(storage, limit=1000)
    assert len(changes) == len(BUNDLED)
    assert {(c.action, c.changed_by) for c in changes} == {(ChangeAction.INSERT, "seed")}
    assert {v.source for v in pb.list_prices(storage)} == {PriceSource.SEED}
    # Started again: nothing more. Emptied on purpose: still not seeded again.
    assert pb.seed_if_empty(storage) == 0
    for v in pb.list_prices(storage):
        pb.delete_price(storage, v.price_id, changed_by="admin")
    assert pb.seed_if_empty(storage) == 0
    assert _count(storage, "price_book") == 0


def test_seed_from_a_file_of_ones_own(storage: Storage, tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "mine.csv",
        "kind,subject,unit,price,effective_from\ngpu,H200,gpu_hour,2.5,2025-06-01\n",
    )
    assert pb.seed_if_empty(storage, path) == 1
    assert pb.price_at(storage, "gpu", "H200", "gpu_hour", JAN) == 2.5


def test_the_bundled_book_prices_everything_the_demo_uses() -> None:
    workload = load_workload()
    by_key = {(p.kind, p.subject, p.unit): p for p in BUNDLED}
    for dep in workload.deployments:
        gpu = pb.canonical_subject(PriceKind.GPU, dep.gpu)
        assert (PriceKind.GPU, gpu, PriceUnit.GPU_HOUR) in by_key, dep.name
    for hosted in workload.hosted_models:
        for unit in pb.ALLOWED_UNITS[PriceKind.MODEL]:
            assert (PriceKind.MODEL, hosted.model, unit) in by_key, (hosted.model, unit)
    for app in workload.apps:
        for route in app.routes:
            if route.retrieval:
                price = next(
                    p
                    for (k, s, _), p in by_key.items()
                    if k is PriceKind.SERVICE and s == route.retrieval.collection
                )
                assert price.stage is ServiceStage.RETRIEVAL
            if route.tool:
                price = next(
                    p
                    for (k, s, _), p in by_key.items()
                    if k is PriceKind.SERVICE and s == route.tool.name
                )
                assert price.stage is ServiceStage.TOOLS
    assert (PriceKind.REVIEWER, "*", PriceUnit.HOUR) in by_key
    # Every catalog GPU, under its catalog name.
    assert {"H200", "H100-SXM", "A100-80GB", "L40S", "B200"} <= {
        p.subject for p in BUNDLED if p.kind is PriceKind.GPU
    }
    assert {p.effective_from for p in BUNDLED} == {JAN}


# ------------------------------------------------------------------------------ lookups
def test_a_mid_day_change_applies_from_its_instant_on(storage: Storage) -> None:
    pb.load_prices(
        storage,
        [
            _price("model", "gpt-4.1", "input_mtok", 2.0, "2026-01-01"),
            _price("model", "gpt-4.1", "input_mtok", 1.5, "2026-03-10T12:00:00Z"),
        ],
        changed_by="t",
        source="api",
    )
    change = datetime(2026, 3, 10, 12, tzinfo=UTC)
    at = lambda t: pb.price_at(storage, "model", "gpt-4.1", "input_mtok", t)  # noqa: E731
    assert at(JAN - timedelta(seconds=1)) is None  # before the first version
    assert at(JAN) == 2.0
    assert at(change - timedelta(microseconds=1)) == 2.0
    assert at(change) == 1.5
    assert at(change + timedelta(days=400)) == 1.5
    # An offset or a naive time means the same instant.
    assert at(datetime(2026, 3, 10, 13, 30)) == 1.5
    assert at(datetime.fromisoformat("2026-03-10T13:59:00+02:00")) == 2.0
    assert pb.price_at(storage, "model", "gpt-4.1", "output_mtok", change) is None
    # list_prices(at) holds exactly the version in effect.
    [before] = pb.list_prices(storage, change - timedelta(seconds=1))
    [after] = pb.list_prices(storage, change)
    assert (before.price, after.price) == (2.0, 1.5)
    assert before.effective_to == after.effective_from == change


def test_a_deployment_override_beats_the_fleet_wide_price(storage: Storage) -> None:
    pb.load_prices(
        storage,
        [
            _price("gpu", "H200", "gpu_hour", 4.0, "2026-01-01"),
            _price("gpu", "H200", "gpu_hour", 4.4, "2026-04-01"),
            _price("gpu", "H200", "gpu_hour", 3.1, "2026-02-01", deployment="llama-70b"),
        ],
        changed_by="t",
        source="api",
    )
    jan, feb, may = JAN, datetime(2026, 2, 15, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC)
    at = lambda t, d="": pb.price_at(storage, "gpu", "h200", "gpu_hour", t, deployment=d)  # noqa: E731
    assert at(jan, "llama-70b") == 4.0  # before the override starts: fleet-wide
    assert at(feb, "llama-70b") == 3.1
    assert at(may, "llama-70b") == 3.1  # the fleet-wide rise does not touch the override
    assert at(may, "llama-8b") == 4.4
    assert at(feb) == 4.0


def test_gpu_names_are_the_catalogs_and_reviewers_fall_back_to_everyone(
    storage: Storage,
) -> None:
    assert _price("gpu", "NVIDIA H200", "gpu_hour", 1, "2026-01-01").subject == "H200"
    assert _price("gpu", "h100", "gpu_hour", 1, "2026-01-01").subject == "H100-SXM"
    assert _price("gpu", "MI300X", "gpu_hour", 1, "2026-01-01").subject == "MI300X"
    pb.load_prices(
        storage,
        [
            _price("reviewer", "*", "hour", 40, "2026-01-01"),
            _price("reviewer", "dana", "hour", 65, "2026-01-01"),
        ],
        changed_by="t",
        source="api",
    )
    assert pb.price_at(storage, "reviewer", "dana", "hour", JAN) == 65
    assert pb.price_at(storage, "reviewer", "lee", "hour", JAN) == 40


def test_prices_effective_chains_versions_per_key(storage: Storage) -> None:
    pb.load_prices(
        storage,
        [
            _price("gpu", "H200", "gpu_hour", 4.0, "2026-01-01"),
            _price("gpu", "H200", "gpu_hour", 3.5, "2026-03-01"),
            _price("gpu", "H200", "gpu_hour", 3.0, "2026-06-01"),
            _price("gpu", "H200", "gpu_hour", 2.0, "2026-02-01", deployment="d1"),
            _price("gpu", "B200", "gpu_hour", 6.0, "2026-05-01"),
        ],
        changed_by="t",
        source="api",
    )
    rows = storage.fetchall(
        "SELECT subject, deployment, price, effective_from, effective_to FROM prices_effective"
        " ORDER BY subject, deployment, effective_from"
    )
    d = lambda m: datetime(2026, m, 1, tzinfo=UTC)  # noqa: E731
    got = [(s, dep, p, f.astimezone(UTC), t and t.astimezone(UTC)) for s, dep, p, f, t in rows]
    assert got == [
        ("B200", "", 6.0, d(5), None),
        ("H200", "", 4.0, d(1), d(3)),
        ("H200", "", 3.5, d(3), d(6)),
        ("H200", "", 3.0, d(6), None),
        ("H200", "d1", 2.0, d(2), None),
    ]
    # The view's one-version-per-instant contract: no instant is covered twice per key.
    overlaps = storage.scalar(
        "SELECT count(*) FROM prices_effective a JOIN prices_effective b"
        " ON a.kind = b.kind AND a.subject = b.subject AND a.deployment = b.deployment"
        " AND a.unit = b.unit AND a.price_id < b.price_id"
        " AND a.effective_from < coalesce(b.effective_to, 'infinity'::timestamptz)"
        " AND b.effective_from < coalesce(a.effective_to, 'infinity'::timestamptz)"
    )
    assert overlaps == 0


# ------------------------------------------------------------------------------ audit trail
def test_every_change_writes_one_audit_row_with_old_and_new(storage: Storage) -> None:
    pid = pb.set_price(
        storage,
        "gpu",
        "H200",
        "gpu_hour",
        4.0,
        "2026-03-01",
        changed_by="ana",
        source="cli",
        note="list price",
    )
    v = pb.update_price(storage, pid, changed_by="bo", price=3.6, note="negotiated")
    assert (v.price, v.note) == (3.6, "negotiated")
    # Moving a version earlier: the change affects time from the earlier of old and new.
    pb.update_price(storage, pid, changed_by="bo", effective_from="2026-02-01")
    # Setting the same key again is an update; setting identical values writes nothing.
    assert (
        pb.set_price(
            storage, "gpu", "H200", "gpu_hour", 3.2, "2026-02-01", changed_by="cy", source="ui"
        )
        == pid
    )
    assert (
        pb.set_price(
            storage, "gpu", "H200", "gpu_hour", 3.2, "2026-02-01", changed_by="cy", source="ui"
        )
        == pid
    )
    deleted = pb.delete_price(storage, pid, changed_by="dee")
    assert deleted.price == 3.2
    changes = list(reversed(pb.history(storage)))
    feb, mar = datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)
    got = [
        (c.action, c.changed_by, c.price_id, c.old_price, c.new_price, c.effective_from)
        for c in changes
    ]
    assert got == [
        (ChangeAction.INSERT, "ana", pid, None, 4.0, mar),
        (ChangeAction.UPDATE, "bo", pid, 4.0, 3.6, mar),
        (ChangeAction.UPDATE, "bo", pid, 3.6, 3.6, feb),
        (ChangeAction.UPDATE, "cy", pid, 3.6, 3.2, feb),
        (ChangeAction.DELETE, "dee", pid, 3.2, None, feb),
    ]
    assert (changes[2].old_effective_from, changes[2].new_effective_from) == (mar, feb)
    assert [c.note for c in changes[:2]] == ["list price", "negotiated"]
    assert all(c.kind is PriceKind.GPU and c.subject == "H200" for c in changes)
    assert _count(storage, "price_book") == 0
    # change_id grows with every change: the mart refresher's watermark.
    ids = [c.change_id for c in changes]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_a_refused_change_writes_neither_price_nor_audit_row(storage: Storage) -> None:
    a = pb.set_price(
        storage, "gpu", "L40S", "gpu_hour", 1.5, "2026-01-01", changed_by="t", source="api"
    )
    pb.set_price(
        storage, "gpu", "L40S", "gpu_hour", 1.2, "2026-02-01", changed_by="t", source="api"
    )
    before = (pb.list_prices(storage), pb.history(storage))
    with pytest.raises(PriceBookError, match=r"cannot move to 2026-02-01 00:00 UTC: price_id"):
        pb.update_price(storage, a, changed_by="t", effective_from="2026-02-01")
    with pytest.raises(UnknownPriceError, match="no price with price_id 999"):
        pb.update_price(storage, 999, changed_by="t", price=1)
    with pytest.raises(UnknownPriceError, match="no price with price_id 999"):
        pb.delete_price(storage, 999, changed_by="t")
    with pytest.raises(PriceBookError, match="price must not be negative"):
        pb.update_price(storage, a, changed_by="t", price=-1)
    with pytest.raises(PriceBookError, match="currency EUR differs from the price book's USD"):
        pb.set_price(
            storage,
            "gpu",
            "B200",
            "gpu_hour",
            5,
            "2026-01-01",
            changed_by="t",
            source="api",
            currency="eur",
        )
    with pytest.raises(PriceBookError, match="changed_by"):
        pb.delete_price(storage, a, changed_by=" ")
    assert (pb.list_prices(storage), pb.history(storage)) == before


# ------------------------------------------------------------------------------ files
YAML_OK = """\
prices:
  - {kind: gpu, subject: h200, unit: gpu_hour, price: 4, effective_from: 2026-01-01}
  - {kind: gpu, subject: H200, deployment: llama-70b, unit: gpu_hour, price: 3.1,
     effective_from: "2026-02-01T06:00:00+01:00", note: reserved}
  - {kind: service, subject: support-kb, unit: hour, price: 0.5, stage: retrieval,
     effective_from: 2026-01-01}
  - {kind: reviewer, subject: "*", unit: hour, price: 40, effective_from: 2026-01-01T00:00:00Z}
"""
CSV_OK = """\
kind,subject,deployment,unit,price,currency,stage,effective_from,note
gpu,h200,,gpu_hour,4,,,2026-01-01,
gpu,H200,llama-70b,gpu_hour,3.1,USD,,2026-02-01T06:00:00+01:00,reserved

service,support-kb,,hour,0.5,,retrieval,2026-01-01,
reviewer,*,,hour,40,,,2026-01-01T00:00:00Z,
"""


def test_yaml_and_csv_files_read_the_same(tmp_path: Path) -> None:
    from_yaml = pb.load_price_file(_write(tmp_path, "p.yaml", YAML_OK))
    from_csv = pb.load_price_file(_write(tmp_path, "p.csv", CSV_OK))
    assert from_yaml == from_csv
    assert from_yaml[0].subject == "H200"
    assert from_yaml[1].effective_from == datetime(2026, 2, 1, 5, tzinfo=UTC)
    assert from_yaml[1].deployment == "llama-70b"
    assert from_yaml[2].stage is ServiceStage.RETRIEVAL
    assert from_csv[3].origin.endswith("line 6")  # the blank line is skipped, lines still count


def test_reloading_a_file_is_idempotent_and_a_different_price_needs_replace(
    storage: Storage, tmp_path: Path
) -> None:
    prices = pb.load_price_file(_write(tmp_path, "p.yaml", YAML_OK))
    first = pb.load_prices(storage, prices, changed_by="t", source="cli")
    again = pb.load_prices(storage, prices, changed_by="t", source="cli")
    assert (first, again) == (pb.LoadSummary(4, 0, 0), pb.LoadSummary(0, 0, 4))
    assert len(pb.history(storage)) == 4
    changed = _write(tmp_path, "q.yaml", YAML_OK.replace("price: 0.5", "price: 0.75"))
    changed_prices = pb.load_price_file(changed)
    with pytest.raises(PriceBookError) as err:
        pb.load_prices(storage, changed_prices, changed_by="t", source="cli")
    assert str(err.value) == (
        f"price file {str(changed)!r} entry 3: the price book already has service support-kb "
        "hour from 2026-01-01 00:00 UTC at 0.50 USD (price_id 3), not 0.75 USD; replace it "
        "explicitly (--replace)"
    )
    assert len(pb.history(storage)) == 4
    summary = pb.load_prices(storage, changed_prices, changed_by="t", source="cli", replace=True)
    assert summary == pb.LoadSummary(0, 1, 3)
    last = pb.history(storage, 1)[0]
    assert (last.action, last.old_price, last.new_price) == (ChangeAction.UPDATE, 0.5, 0.75)


def test_a_load_is_all_or_nothing(storage: Storage) -> None:
    pb.load_prices(
        storage, [_price("gpu", "H200", "gpu_hour", 4, "2026-01-01")], changed_by="t", source="api"
    )
    batch = [
        _price("gpu", "B200", "gpu_hour", 6, "2026-01-01"),
        _price("gpu", "L40S", "gpu_hour", 1.5, "2026-01-01"),
        _price("gpu", "H200", "gpu_hour", 5, "2026-01-01"),  # conflicts, last
    ]
    with pytest.raises(PriceBookError, match="already has gpu H200"):
        pb.load_prices(storage, batch, changed_by="t", source="api")
    assert [v.subject for v in pb.list_prices(storage)] == ["H200"]
    assert len(pb.history(storage)) == 1


ENTRY = "{kind: gpu, subject: H200, unit: gpu_hour, price: 4, effective_from: 2026-01-01}"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "{kind: gpus, subject: H200, unit: gpu_hour, price: 4, effective_from: 2026-01-01}",
            "entry 2: unknown kind 'gpus' (expected gpu, model, service or reviewer)",
        ),
        (
            "{kind: gpu, subject: H200, unit: gpu_hours, price: 4, effective_from: 2026-01-01}",
            "entry 2: unknown unit 'gpu_hours' (expected gpu_hour, input_mtok",
        ),
        (
            "{kind: gpu, subject: H200, unit: hour, price: 4, effective_from: 2026-01-01}",
            "entry 2: unit hour is not allowed for kind gpu (allowed: gpu_hour)",
        ),
        (
            "{kind: model, subject: m, unit: call, price: 4, effective_from: 2026-01-01}",
            "entry 2: unit call is not allowed for kind model (allowed: input_mtok, "
            "cached_input_mtok, output_mtok)",
        ),
        (
            "{kind: gpu, subject: B200, unit: gpu_hour, price: -1, effective_from: 2026-01-01}",
            "entry 2: price must not be negative, got -1",
        ),
        (
            "{kind: gpu, subject: B200, unit: gpu_hour, price: .nan, effective_from: 2026-01-01}",
            "entry 2: price must be a finite number, got nan",
        ),
        (
            "{kind: gpu, subject: B200, unit: gpu_hour, price: cheap, effective_from: 2026-01-01}",
            "entry 2: price must be a number, got 'cheap'",
        ),
        (
            "{kind: gpu, subject: B200, unit: gpu_hour, price: true, effective_from: 2026-01-01}",
            "entry 2: price must be a number, got True",
        ),
        (
            "{kind: gpu, subject: B200, unit: gpu_hour, price: 4, effective_from: 2026-13-01}",
            "entry 2: effective_from must be a date (2026-01-01) or an ISO datetime",
        ),
        (
            "{kind: gpu, subject: B200, unit: gpu_hour, price: 4, effective_from: soon}",
            "entry 2: effective_from must be a date (2026-01-01) or an ISO datetime",
        ),
        (
            "{kind: gpu, subject: B200, unit: gpu_hour, price: 4}",
            "entry 2: missing field(s) effective_from",
        ),
        (
            "{kind: model, subject: m, deployment: d, unit: input_mtok, price: 4,"
            " effective_from: 2026-01-01}",
            "entry 2: deployment is only allowed for kind gpu",
        ),
        (
            "{kind: service, subject: s, unit: call, price: 4, effective_from: 2026-01-01}",
            "entry 2: a service needs a stage (retrieval or tools)",
        ),
        (
            "{kind: service, subject: s, unit: call, price: 4, stage: llm,"
            " effective_from: 2026-01-01}",
            "entry 2: stage must be retrieval or tools, got 'llm'",
        ),
        (
            "{kind: gpu, subject: B200, unit: gpu_hour, price: 4, stage: tools,"
            " effective_from: 2026-01-01}",
            "entry 2: stage is only allowed for kind service, not for kind gpu",
        ),
        (
            "{kind: gpu, subject: B200, unit: gpu_hour, price: 4, effective_from: 2026-01-01,"
            " colour: red}",
            "entry 2: unknown field(s) colour",
        ),
        (
            "{kind: gpu, subject: B200, unit: gpu_hour, price: 4, currency: dollars,"
            " effective_from: 2026-01-01}",
            "entry 2: currency must be a 3-letter code",
        ),
        (
            "{kind: gpu, subject: h200, unit: gpu_hour, price: 5, effective_from: 2026-01-01}",
            "entry 2: gpu H200 gpu_hour from 2026-01-01 00:00 UTC is given twice (also by entry 1)",
        ),
        ("just text", "entry 2: expected a mapping"),
    ],
)
def test_each_bad_entry_is_one_line_naming_file_entry_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str, message: str
) -> None:
    path = _write(tmp_path, "bad.yaml", f"prices:\n  - {ENTRY}\n  - {entry}\n")
    with pytest.raises(PriceBookError) as err:
        pb.load_price_file(path)
    text = str(err.value)
    assert text.startswith(f"price file {str(path)!r} entry 2: "), text
    assert message in text
    assert "\n" not in text
    # Through the CLI: exit 2 and that one line, before the database is even created.
    db = tmp_path / "cli.duckdb"
    assert cli.main(["prices", "load", str(path), "--db", str(db)]) == 2
    assert capsys.readouterr().err == f"inferledger: {text}\n"
    assert not db.exists()


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("p.csv", "kind,subject,unit,price\n", "line 1: missing column(s) effective_from"),
        (
            "p.csv",
            "kind,subject,unit,price,effective_from,cost\n",
            "line 1: unknown column(s) cost",
        ),
        (
            "p.csv",
            "kind,subject,unit,price,effective_from\ngpu,H200,gpu_hour,x,2026-01-01\n",
            "line 2: price must be a number, got 'x'",
        ),
        (
            "p.csv",
            "kind,subject,unit,price,effective_from\ngpu,H200,gpu_hour,4,2026-01-01,9\n",
            "line 2: more cells than the header has columns",
        ),
        ("p.csv", "kind,subject,unit,price,effective_from\n", "holds no prices"),
        ("p.yaml", "prices: [\n", "is not valid YAML"),
        ("p.yaml", "gpus: []\n", "must hold one key, prices"),
        ("p.json", "{}", "unknown format (the name must end in .yaml, .yml or .csv)"),
        ("missing.yaml", None, "No such file or directory"),
    ],
)
def test_bad_files_are_one_line(tmp_path: Path, name: str, text: str | None, message: str) -> None:
    path = tmp_path / name if text is None else _write(tmp_path, name, text)
    with pytest.raises(PriceBookError) as err:
        pb.load_price_file(path)
    assert str(err.value).startswith(f"price file {str(path)!r}")
    assert message in str(err.value)


# ------------------------------------------------------------------------------ CLI
def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "ledger.duckdb")
    assert cli.main(["prices", "list", "--db", db]) == 2
    assert "no database at" in capsys.readouterr().err

    path = _write(tmp_path, "mine.csv", CSV_OK)
    assert cli.main(["prices", "load", str(path), "--db", db, "--by", "ana"]) == 0
    out = capsys.readouterr().out
    # A new database is seeded first; the file's fleet-wide H200 4.00 equals the seed's.
    assert out.strip() == f"loaded {path}: 1 inserted, 0 updated, 3 unchanged"

    args = ["prices", "set", "gpu", "H200", "gpu_hour", "3.75", "--from", "2026-07-01T12:00:00Z"]
    assert cli.main([*args, "--db", db, "--note", "new contract", "--by", "bo"]) == 0
    assert "gpu H200 gpu_hour from 2026-07-01 12:00 UTC = 3.75 USD" in capsys.readouterr().out

    assert cli.main(["prices", "list", "--db", db, "--at", "2026-07-01T11:00:00Z"]) == 0
    out = capsys.readouterr().out
    h200 = [line.split() for line in out.splitlines() if " H200 " in line]
    assert len(h200) == 2
    assert "4.00" in h200[0] and "llama-70b" not in h200[0]  # fleet-wide first
    assert "3.10" in h200[1] and "llama-70b" in h200[1]

    assert cli.main(["prices", "list", "--db", db, "--all"]) == 0
    out = capsys.readouterr().out
    assert "2026-07-01 12:00 UTC" in out and "new contract" in out
    assert len(out.splitlines()) == 2 + len(BUNDLED) + 2  # header, rule, seed, override, set

    assert cli.main(["prices", "history", "--db", db, "--limit", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["change", "at", "by", "action"]
    assert "bo" in lines[2] and "insert" in lines[2] and "3.75" in lines[2]
    assert "ana" in lines[3] and "3.10" in lines[3]

    assert cli.main(["prices", "set", "gpu", "H200", "hour", "1", "--from", "x", "--db", db]) == 2
    err = capsys.readouterr().err
    assert err == (
        "inferledger: gpu H200: unit hour is not allowed for kind gpu (allowed: gpu_hour)\n"
    )
    bad = _write(
        tmp_path, "bad.csv", "kind,subject,unit,price,effective_from\nx,y,z,1,2026-01-01\n"
    )
    assert cli.main(["prices", "load", str(bad), "--db", db]) == 2
    assert capsys.readouterr().err == (
        f"inferledger: price file {str(bad)!r} line 2: unknown kind 'x' "
        "(expected gpu, model, service or reviewer)\n"
    )


def test_cli_says_so_when_the_server_holds_the_database(tmp_path: Path) -> None:
    db = tmp_path / "busy.duckdb"
    with Storage(db):
        proc = subprocess.run(
            [sys.executable, "-m", "inferledger.cli", "prices", "list", "--db", str(db)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")},
            timeout=60,
        )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "is in use by another process" in proc.stderr


# ------------------------------------------------------------------------------ serve
def test_service_start_seeds_an_empty_database_exactly_once(tmp_path: Path) -> None:
    from inferledger.server import Service

    db = tmp_path / "served.duckdb"
    own = _write(
        tmp_path,
        "own.yaml",
        "prices:\n  - {kind: gpu, subject: H200, unit: gpu_hour, price: 2.5,"
        " effective_from: 2026-01-01}\n",
    )
    settings = load_settings(env={}).replace(db=str(db), port=free_port())
    first = Service(settings).start()
    try:
        assert _count(first.storage, "price_book") == len(BUNDLED)
    finally:
        first.stop()
    second = Service(settings.replace(prices__file=str(own))).start()
    try:
        assert _count(second.storage, "price_book") == len(BUNDLED)  # not seeded again
        assert _count(second.storage, "price_book_changes") == len(BUNDLED)
    finally:
        second.stop()
    other = Service(settings.replace(db=str(tmp_path / "own.duckdb"), prices__file=str(own)))
    other.start()
    try:
        assert pb.price_at(other.storage, "gpu", "H200", "gpu_hour", JAN) == 2.5
        assert _count(other.storage, "price_book") == 1
    finally:
        other.stop()


def test_serve_with_a_bad_price_file_stops_with_one_line(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.yaml", "prices:\n  - {kind: gpu}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")}
    env["INFERLEDGER_PRICES_FILE"] = str(bad)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "inferledger.cli",
            "serve",
            "--db",
            str(tmp_path / "s.duckdb"),
            "--port",
            str(free_port()),
            "--log-level",
            "warning",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        f"inferledger: price file {str(bad)!r} entry 1: missing field(s) subject, unit, price, "
        "effective_from\n"
    )


def test_the_docs_examples_load_and_agree(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "price-book.md").read_text(encoding="utf-8")
    blocks = {lang: doc.split(f"```{lang}\n", 1)[1].split("```", 1)[0] for lang in ("yaml", "csv")}
    from_yaml = pb.load_price_file(_write(tmp_path, "doc.yaml", blocks["yaml"]))
    from_csv = pb.load_price_file(_write(tmp_path, "doc.csv", blocks["csv"]))
    assert from_yaml == from_csv
    assert len(from_yaml) == 5


# ------------------------------------------------------------------ ending and superseding
def _h200(storage: Storage, price: float, when: str, deployment: str = "") -> int:
    return pb.set_price(
        storage, "gpu", "H200", "gpu_hour", price, when, deployment, changed_by="t", source="cli"
    )


def test_an_end_stops_a_version_and_says_which_hours_lose_it(storage: Storage) -> None:
    first = _h200(storage, 4.0, "2026-01-01")
    second = _h200(storage, 3.0, "2026-03-01")
    at = lambda t: pb.price_at(storage, "gpu", "H200", "gpu_hour", t)  # noqa: E731
    end = datetime(2026, 2, 10, 6, tzinfo=UTC)
    done = pb.end_price(storage, first, "2026-02-10T06:00:00Z", changed_by="ana", reason="typo")
    assert done.version.effective_to == done.at == end and done.next_price_id == second
    assert done.until == datetime(2026, 3, 1, tzinfo=UTC)
    assert done.gap() == (
        "no gpu H200 gpu_hour price applies from 2026-02-10 06:00 UTC until price_id "
        f"{second} starts at 2026-03-01 00:00 UTC: what it priced is unpriced"
    )
    assert at(end - timedelta(microseconds=1)) == 4.0
    assert at(end) is None and at(datetime(2026, 2, 28, 23, tzinfo=UTC)) is None
    assert at(datetime(2026, 3, 1, tzinfo=UTC)) == 3.0
    assert [v.price_id for v in pb.list_prices(storage, end)] == []
    # Moving the end later re-prices from the old end; the audit row keeps both ends and why.
    later = pb.end_price(storage, first, "2026-02-20", changed_by="bo", reason="contract ran on")
    assert later.version.effective_to == datetime(2026, 2, 20, tzinfo=UTC)
    [moved, ended] = pb.history(storage, 2)
    assert (moved.action, moved.changed_by, moved.reason) == (
        ChangeAction.END,
        "bo",
        "contract ran on",
    )
    assert moved.effective_from == end  # the earlier of the old and the new end
    assert (moved.old_effective_to, moved.new_effective_to) == (
        end,
        datetime(2026, 2, 20, tzinfo=UTC),
    )
    assert (moved.old_price, moved.new_price) == (4.0, None)
    assert (ended.action, ended.old_effective_to, ended.new_effective_to) == (
        ChangeAction.END, None, end,
    )  # fmt: skip
    # The last version, ended: open-ended gap; a deployment override falls back to the fleet's.
    last = pb.end_price(storage, second, "2026-06-30", changed_by="ana", reason="contract over")
    assert (last.until, last.next_price_id) == (None, None)
    assert last.gap().endswith("from 2026-06-30 00:00 UTC on: what it priced is unpriced")
    override = _h200(storage, 3.5, "2026-04-01", deployment="llama-70b")
    gap = pb.end_price(storage, override, "2026-05-01", changed_by="t", reason="r").gap()
    assert gap.endswith("the fleet-wide H200 price applies there, if there is one")
    assert pb.price_at(storage, "gpu", "H200", "gpu_hour", datetime(2026, 5, 2), "llama-70b") == 3.0


@pytest.mark.parametrize(
    ("at", "reason", "message"),
    [
        ("2026-01-01", "r", "cannot end at 2026-01-01 00:00 UTC: an end must be after the "),
        ("2025-12-31", "r", "an end must be after the version's start"),
        ("2026-03-01", "r", "already replaces it from 2026-03-01 00:00 UTC; end it before then"),
        ("2026-04-01", "r", "or end price_id"),
        ("2026-02-01", " ", "needs a reason: say why"),
        ("2026-02-30", "r", "end must be a date (2026-01-01) or an ISO datetime"),
        ("2026-02-15", "r", "already ends at 2026-02-15 00:00 UTC"),
    ],
)
def test_a_refused_end_writes_nothing(storage: Storage, at: str, reason: str, message: str) -> None:
    first = _h200(storage, 4.0, "2026-01-01")
    _h200(storage, 3.0, "2026-03-01")
    pb.end_price(storage, first, "2026-02-15", changed_by="t", reason="set up")
    before = (_count(storage, "price_book_changes"), pb.list_prices(storage))
    with pytest.raises(PriceBookError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pb.end_price(storage, first, at, changed_by="t", reason=reason)
    assert (_count(storage, "price_book_changes"), pb.list_prices(storage)) == before
    with pytest.raises(UnknownPriceError, match="no price with price_id 999"):
        pb.end_price(storage, 999, "2026-02-01", changed_by="t", reason="r")
    with pytest.raises(PriceBookError, match="cannot move to 2026-02-20 00:00 UTC: it ends at"):
        pb.update_price(storage, first, changed_by="t", effective_from="2026-02-20")


def test_superseding_keeps_the_mistake_and_reprices_from_its_start(storage: Storage) -> None:
    first = _h200(storage, 4.0, "2026-01-01")
    pb.end_price(storage, first, "2026-02-01", changed_by="t", reason="ended")
    new = pb.supersede_price(
        storage, first, "3.25", changed_by="ana", reason="invoice says 3.25", source="ui"
    )
    assert new.price_id != first
    assert (new.price, new.effective_from, new.effective_to, new.source) == (
        3.25, JAN, datetime(2026, 2, 1, tzinfo=UTC), PriceSource.UI,
    )  # fmt: skip
    assert pb.price_at(storage, "gpu", "H200", "gpu_hour", JAN) == 3.25
    with pytest.raises(UnknownPriceError):
        pb.get_price(storage, first)
    [old] = pb.superseded_versions(storage)
    assert (old.version.price_id, old.version.price, old.superseded_by) == (
        first,
        4.0,
        new.price_id,
    )
    assert (old.changed_by, old.reason, old.version.source) == ("ana", "invoice says 3.25", "cli")
    [change] = pb.history(storage, 1)
    assert (change.action, change.price_id, change.old_price, change.new_price) == (
        ChangeAction.SUPERSEDE, first, 4.0, 3.25,
    )  # fmt: skip
    assert (change.effective_from, change.reason) == (JAN, "invoice says 3.25")
    assert change.note == f"superseded by price_id {new.price_id}"
    # Refused, nothing written: the same price, no reason, a bad price, an unknown id.
    before = (_count(storage, "price_book_changes"), _count(storage, "price_book_superseded"))
    for price, reason, message in [
        (3.25, "r", "is already 3.25 USD: a correction must change the price"),
        (3.0, "", "needs a reason"),
        (-1, "r", "price must not be negative"),
        ("x", "r", "price must be a number"),
    ]:
        with pytest.raises(PriceBookError, match=message):
            pb.supersede_price(
                storage, new.price_id, price, changed_by="t", reason=reason, source="cli"
            )
    with pytest.raises(UnknownPriceError):
        pb.supersede_price(storage, first, 1, changed_by="t", reason="r", source="cli")
    after = (_count(storage, "price_book_changes"), _count(storage, "price_book_superseded"))
    assert after == before


def test_the_audit_trail_pages_newest_first(storage: Storage) -> None:
    for day in range(1, 26):
        _h200(storage, float(day), f"2026-01-{day:02d}")
    page = pb.history_page(storage, 0, 10)
    assert (page.total, page.offset, len(page.changes)) == (25, 0, 10)
    assert [c.new_price for c in page.changes] == [float(d) for d in range(25, 15, -1)]
    last = pb.history_page(storage, 20, 10)
    assert [c.new_price for c in last.changes] == [5.0, 4.0, 3.0, 2.0, 1.0]
    # past the end: the last page; a bad size is refused
    assert pb.history_page(storage, 999, 10).offset == 20
    assert pb.history_page(storage, -5, 10).offset == 0
    with pytest.raises(PriceBookError, match="at least one change"):
        pb.history_page(storage, 0, 0)


def test_an_end_and_a_supersede_reprice_only_the_hours_they_change(storage: Storage) -> None:
    """A replica up [H-60 s, H+60 s) on H200 at $3.60/h; an override for its deployment at
    $7.20/h from H+10 s is ended at H+40 s, then the fleet-wide price is corrected to $1.80/h."""
    from inferledger.ledger_fixtures import S, store_scrapes
    from ledger.allocation import HOUR_NS
    from ledger.deployments import sync_configured
    from ledger.marts import Refresher
    from models.deployment_config import Deployment

    rate = 0.001  # $3.60 per GPU-hour in $ per second
    hour0 = 494_444 * HOUR_NS  # 2026-05-28 20:00 UTC
    base = hour0 + HOUR_NS
    fleet = _h200(storage, 3.60, "2026-01-01")
    sync_configured(storage, [Deployment("dep", model="m", gpu_type="H200")])
    store_scrapes(storage, "r0", "dep", base, [float(t) for t in range(-60, 60, 10)])
    ts = lambda s: datetime.fromtimestamp((base + s * S) / S, UTC)  # noqa: E731
    override = _h200(storage, 7.20, ts(10).isoformat(), deployment="dep")
    refresher = Refresher(storage)
    refresher.refresh()
    hourly = "select epoch_ns(hour), total_cost from mart_replica_hours"
    assert dict(storage.fetchall(hourly)) == pytest.approx(
        {hour0: 60 * rate, base: 10 * rate + 50 * 2 * rate}
    )
    pb.end_price(storage, override, ts(40), changed_by="t", reason="trial over")
    result = refresher.refresh()
    assert result.hours == 1, result  # only the hour from the end on
    assert dict(storage.fetchall(hourly)) == pytest.approx(
        {hour0: 60 * rate, base: 10 * rate + 30 * 2 * rate + 20 * rate}
    )
    pb.supersede_price(storage, fleet, 1.80, changed_by="t", reason="wrong rate", source="cli")
    result = refresher.refresh()
    assert result.hours == 2, result  # from the fleet-wide version's start: both hours
    assert dict(storage.fetchall(hourly)) == pytest.approx(
        {hour0: 60 * rate / 2, base: 10 * rate / 2 + 30 * 2 * rate + 20 * rate / 2}
    )


def test_cli_ends_and_supersedes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "ledger.duckdb")
    set_args = ["prices", "set", "gpu", "H200", "gpu_hour", "9.99", "--from", "2026-07-01"]
    assert cli.main([*set_args, "--db", db, "--by", "ana"]) == 0
    price_id = int(capsys.readouterr().out.split()[1].rstrip(":"))
    end = ["prices", "end", str(price_id), "--db", db, "--by", "bo"]
    assert cli.main([*end, "--at", "2026-08-01", "--reason", "contract over"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"ended price_id {price_id} (gpu H200 gpu_hour from 2026-07-01 00:00 UTC) at "
        "2026-08-01 00:00 UTC",
        "no gpu H200 gpu_hour price applies from 2026-08-01 00:00 UTC on: what it priced is "
        "unpriced",
    ]
    # an end before the start: one line, exit 2, nothing written
    assert cli.main([*end, "--at", "2026-06-01", "--reason", "x"]) == 2
    assert capsys.readouterr().err == (
        f"inferledger: price_id {price_id} (gpu H200 gpu_hour from 2026-07-01 00:00 UTC) cannot "
        "end at 2026-06-01 00:00 UTC: an end must be after the version's start\n"
    )
    sup = ["prices", "supersede", str(price_id), "3.99", "--db", db, "--by", "cy"]
    assert cli.main([*sup, "--reason", "typo: 3.99"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"superseded price_id {price_id} (9.99 USD) by price_id ")
    assert out.endswith(": gpu H200 gpu_hour from 2026-07-01 00:00 UTC = 3.99 USD")
    new_id = int(out.split("by price_id ")[1].split(":")[0])
    assert cli.main(["prices", "list", "--db", db, "--superseded"]) == 0
    [head, _, row] = capsys.readouterr().out.splitlines()
    assert head.split() == [
        "id", "kind", "subject", "deployment", "unit", "price", "from", "by_id", "at", "by",
        "reason",
    ]  # fmt: skip
    assert row.split()[:2] == [str(price_id), "gpu"] and row.endswith("cy  typo: 3.99")
    assert f" {new_id} " in row and " 9.99 " in row
    assert cli.main(["prices", "history", "--db", db, "--limit", "2"]) == 0
    [_, _, superseded, ended] = capsys.readouterr().out.splitlines()
    assert "supersede" in superseded and superseded.endswith("typo: 3.99")
    assert " end " in ended and ended.endswith("contract over")
    with pytest.raises(SystemExit) as exit_:  # argparse: the reason is required
        cli.main(["prices", "supersede", str(price_id), "1", "--db", db])
    assert exit_.value.code == 2 and "--reason" in capsys.readouterr().err
