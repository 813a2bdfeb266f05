"""The SLO targets' audit trail (slo_target_changes, migration 0015) and the seed rule that
keeps a removed target removed: every write records its change in the same transaction, a
refused write records nothing, the seed runs only on a ledger that never had a target, and the
trail is read a page at a time. Real DuckDB files throughout (docs/deployments.md)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from inferledger.core.storage import Storage
from ledger import slo_targets
from ledger.efficiency import (
    SloTargetsError,
    bundled_slo_targets_file,
    load_slo_targets,
    seed_slo_targets_if_empty,
)

VALUE_KEYS = {
    "route", "app", "environment", "stage", "percentile", "target_s", "effective_from", "note",
    "source",
}  # fmt: skip


def changes(storage: Storage) -> list[slo_targets.SloTargetChange]:
    """The whole trail, oldest first."""
    return list(reversed(slo_targets.slo_changes_page(storage, 0, 10_000).changes))


def counts(storage: Storage) -> tuple[int, int]:
    return (
        storage.scalar("select count(*) from slo_targets"),
        storage.scalar("select count(*) from slo_target_changes"),
    )


def test_the_seed_records_one_seeded_row_per_target(storage: Storage, tmp_path: Path) -> None:
    path = tmp_path / "slo.yaml"
    path.write_text(
        "targets:\n"
        "  - {objective: a, route: /a, stage: ttft, percentile: 0.95, target_s: 1.5}\n"
        "  - {objective: a, route: /a, stage: ttft, percentile: 0.95, target_s: 1.2,\n"
        "     effective_from: '2026-03-01T02:00:00+02:00', note: tighter}\n"
        "  - {objective: b, route: /b%, app: rag, environment: prod, stage: e2e,\n"
        "     percentile: 0.5, target_s: 3}\n"
    )
    assert seed_slo_targets_if_empty(storage, path) == 3
    trail = changes(storage)
    assert [(c.changed_by, c.action, c.objective, c.old) for c in trail] == [
        ("seed", "seeded", "a", None),
        ("seed", "seeded", "a", None),
        ("seed", "seeded", "b", None),
    ]
    assert all(set(c.new or {}) == VALUE_KEYS for c in trail)
    assert trail[1].new == {
        "route": "/a", "app": None, "environment": None, "stage": "ttft", "percentile": 0.95,
        "target_s": 1.2, "effective_from": "2026-03-01T00:00:00+00:00", "note": "tighter",
        "source": "config",
    }  # fmt: skip
    assert trail[2].new is not None and (trail[2].new["app"], trail[2].new["route"]) == (
        "rag",
        "/b%",
    )
    assert (
        slo_targets.SloTargetChange.describe_values(trail[1].new) == "/a ttft p95 ≤ 1.2 s (tighter)"
    )
    # the audit rows commit with the targets: same transaction, one timestamp
    assert len({c.changed_at for c in trail}) == 1
    assert seed_slo_targets_if_empty(storage, path) == 0
    assert counts(storage) == (3, 3)


def test_each_edit_records_its_values_before_and_after(storage: Storage) -> None:
    seed_slo_targets_if_empty(storage)
    seeded = len(load_slo_targets(bundled_slo_targets_file()))
    # changed: the latest version in place; before = the seed's values, after = the new ones
    assert slo_targets.save_slo_target(
        storage, objective="answer-ttft-p95", route="/answer", stage="ttft", percentile=99,
        target_s="0.8", note="looser", changed_by="ann",
    ) == "changed"  # fmt: skip
    change = changes(storage)[-1]
    assert (change.changed_by, change.action, change.objective) == (
        "ann",
        "changed",
        "answer-ttft-p95",
    )
    assert change.old is not None and change.new is not None
    assert (change.old["percentile"], change.old["target_s"], change.old["note"]) == (
        pytest.approx(0.95),
        pytest.approx(0.5),
        None,
    )
    assert change.old["source"] == "config"
    assert (change.new["percentile"], change.new["target_s"], change.new["note"]) == (
        pytest.approx(0.99),
        pytest.approx(0.8),
        "looser",
    )
    assert change.new["source"] == "ui"
    assert change.new["effective_from"] == change.old["effective_from"]  # changed in place
    # the same values again: nothing to record, nothing written
    assert slo_targets.save_slo_target(
        storage, objective="answer-ttft-p95", route="/answer", stage="ttft", percentile=99,
        target_s=0.8, note="looser", changed_by="bob",
    ) == "unchanged"  # fmt: skip
    assert len(changes(storage)) == seeded + 1
    # added: no before
    assert slo_targets.save_slo_target(
        storage, objective="translate-e2e", route="/translate", stage="e2e", percentile=90,
        target_s=3, new_route=True, changed_by="bob",
    ) == "added"  # fmt: skip
    added = changes(storage)[-1]
    assert (added.changed_by, added.action, added.objective, added.old) == (
        "bob",
        "added",
        "translate-e2e",
        None,
    )
    assert slo_targets.SloTargetChange.describe_values(added.new) == "/translate e2e p90 ≤ 3 s"
    assert added.new is not None and set(added.new) == VALUE_KEYS
    # removed: one row per objective with its latest version's values and how many went
    storage.execute_write(
        "insert into slo_targets (objective, route, stage, percentile, target_s, "
        "effective_from, source) values ('translate-e2e', '/translate', 'e2e', 0.9, 2.5, "
        "'2026-06-01', 'ui')"
    )
    assert slo_targets.remove_slo_target(storage, "translate-e2e", changed_by="cid") == 2
    removed = changes(storage)[-1]
    assert (removed.changed_by, removed.action, removed.objective, removed.new) == (
        "cid",
        "removed",
        "translate-e2e",
        None,
    )
    assert removed.old is not None
    assert (removed.old["target_s"], removed.old["versions"]) == (pytest.approx(2.5), 2)
    assert removed.old["effective_from"] == "2026-06-01T00:00:00+00:00"
    assert [c.action for c in changes(storage)].count("removed") == 1
    assert counts(storage) == (seeded, seeded + 3)


def test_a_refused_save_or_remove_writes_no_audit_row(storage: Storage) -> None:
    seed_slo_targets_if_empty(storage)
    before = counts(storage)
    good: dict[str, Any] = {
        "objective": "x", "route": "/answer", "stage": "e2e", "percentile": 95,
        "target_s": 1, "changed_by": "ann",
    }  # fmt: skip
    for fields, message in [
        ({"route": "/nope"}, "has no traffic or target yet"),
        ({"percentile": 0}, "percentile must be in"),
        ({"target_s": -1}, "target_s must be a positive number"),
        ({"stage": "think"}, "stage must be one of"),
        ({"objective": " "}, "objective must not be empty"),
        ({"changed_by": " "}, "changed_by: say who"),
        ({"objective": "answer-ttft-p95", "changed_by": ""}, "changed_by: say who"),
    ]:
        with pytest.raises(SloTargetsError, match=message):
            slo_targets.save_slo_target(storage, **(good | fields))
    with pytest.raises(SloTargetsError, match="no SLO target named 'nope'"):
        slo_targets.remove_slo_target(storage, "nope", changed_by="ann")
    with pytest.raises(SloTargetsError, match="changed_by: say who"):
        slo_targets.remove_slo_target(storage, "answer-ttft-p95", changed_by="")
    assert counts(storage) == before


def test_removed_targets_stay_removed_across_restarts(tmp_path: Path) -> None:
    from inferledger.server import prepare_reference_data
    from inferledger.settings import load_settings

    settings = load_settings(env={})
    db = tmp_path / "ledger.duckdb"
    with Storage(db) as storage:
        prepare_reference_data(storage, settings)  # what every start does
        names = [t.objective for t in slo_targets.list_slo_targets(storage)]
        assert names
        for name in names:
            slo_targets.remove_slo_target(storage, name, changed_by="ann")
        assert seed_slo_targets_if_empty(storage) == 0
        trail = counts(storage)
        assert trail == (0, 2 * len(names))
    with Storage(db) as storage:  # a restart
        prepare_reference_data(storage, settings)
        assert counts(storage) == trail
        assert slo_targets.list_slo_targets(storage) == []


def downgrade_to_14(storage: Storage) -> None:
    """Drop what migrations 15 and later created (each only creates tables and sequences),
    newest first, and forget them, so the next open runs them again as on an upgrade."""
    folder = Path(__file__).resolve().parent.parent / "sql" / "migrations"
    for path in sorted(folder.glob("*.sql"), reverse=True):
        version = int(path.name.split("_", 1)[0])
        if version <= 14:
            break
        text = path.read_text("utf-8")
        for kind, name in reversed(re.findall(r"^CREATE (TABLE|SEQUENCE) (\w+)", text, re.M)):
            storage.execute_write(f"drop {kind.lower()} {name}")
        storage.execute_write("delete from schema_migrations where version = $v", {"v": version})


def test_an_old_ledger_with_targets_is_not_reseeded(tmp_path: Path) -> None:
    """A ledger from before schema 15: it has targets (one removed, one edited) and, after the
    upgrade, an empty audit trail. Nothing is seeded into it, and its targets stay as they are."""
    db = tmp_path / "old.duckdb"
    with Storage(db) as storage:
        storage.execute_write(
            "insert into slo_targets (objective, route, stage, percentile, target_s, "
            "effective_from, source) values ('mine', '/answer', 'e2e', 0.9, 4, '2026-01-01', 'ui')"
        )
        # back to schema 14: the audit table (15) and what came after did not exist yet
        downgrade_to_14(storage)
    with Storage(db) as storage:  # the upgrade runs migration 15
        assert storage.scalar("select count(*) from schema_migrations where version = 15") == 1
        assert storage.scalar("select max(version) from schema_migrations") >= 15
        assert counts(storage) == (1, 0)
        assert seed_slo_targets_if_empty(storage) == 0
        assert counts(storage) == (1, 0)
        assert [t.objective for t in slo_targets.list_slo_targets(storage)] == ["mine"]


def test_a_fresh_ledger_is_seeded_once(tmp_path: Path) -> None:
    db = tmp_path / "new.duckdb"
    with Storage(db) as storage:
        seeded = seed_slo_targets_if_empty(storage)
        assert seeded == len(load_slo_targets(bundled_slo_targets_file())) > 0
    with Storage(db) as storage:
        assert seed_slo_targets_if_empty(storage) == 0
        assert counts(storage) == (seeded, seeded)


def test_restore_puts_back_only_the_missing_bundled_objectives(storage: Storage) -> None:
    seed_slo_targets_if_empty(storage)
    bundled = load_slo_targets(bundled_slo_targets_file())
    slo_targets.save_slo_target(
        storage, objective="answer-ttft-p95", route="/answer", stage="ttft", percentile=99,
        target_s=0.8, changed_by="ann",
    )  # fmt: skip
    for name in ("answer-e2e-p95", "all-queue-p99"):
        slo_targets.remove_slo_target(storage, name, changed_by="ann")
    before = len(changes(storage))
    assert slo_targets.restore_bundled_slo_targets(storage, changed_by="bob") == 2
    restored = changes(storage)[before:]
    assert sorted((c.changed_by, c.action, c.objective) for c in restored) == [
        ("bob", "seeded", "all-queue-p99"),
        ("bob", "seeded", "answer-e2e-p95"),
    ]
    listed = {t.objective: t for t in slo_targets.list_slo_targets(storage)}
    assert set(listed) == {t.objective for t in bundled}
    assert listed["answer-e2e-p95"].source == "config"
    # the edited objective was left as the admin set it
    assert listed["answer-ttft-p95"].describe() == "/answer ttft p99 ≤ 0.8 s"
    assert slo_targets.restore_bundled_slo_targets(storage, changed_by="bob") == 0
    assert len(changes(storage)) == before + 2


def test_the_trail_is_read_a_page_at_a_time_newest_first(storage: Storage) -> None:
    seed_slo_targets_if_empty(storage)
    for i in range(25):
        slo_targets.save_slo_target(
            storage, objective=f"o{i:02d}", route="/%", stage="e2e", percentile=90,
            target_s=1 + i, changed_by="ann",
        )  # fmt: skip
    total = len(load_slo_targets(bundled_slo_targets_file())) + 25
    first = slo_targets.slo_changes_page(storage, 0, 20)
    assert (first.offset, first.total, len(first.changes)) == (0, total, 20)
    assert [c.objective for c in first.changes[:2]] == ["o24", "o23"]
    ids = [c.change_id for c in first.changes]
    assert ids == sorted(ids, reverse=True)
    last = slo_targets.slo_changes_page(storage, 999, 20)
    assert (last.offset, len(last.changes)) == (20, total - 20)
    assert last.changes[-1].action == "seeded"
    assert isinstance(last.changes[-1].changed_at, datetime)
    assert last.changes[-1].changed_at.astimezone(UTC).year >= 2026
    with pytest.raises(SloTargetsError, match="at least one change"):
        slo_targets.slo_changes_page(storage, 0, 0)
