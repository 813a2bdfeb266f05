"""ledger/schema.py (SQLAlchemy Core) and the migrated database describe the same tables, and a
statement built on it runs through the storage interface, inside the writer's transaction."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from inferledger.core.errors import ConstraintError
from inferledger.core.storage import Storage, compile_statement
from ledger import schema

#: DuckDB's information_schema type names → the SQLAlchemy type each maps to here.
_FAMILY = {
    "VARCHAR": sa.String,
    "BIGINT": sa.BigInteger,
    "INTEGER": sa.Integer,
    "DOUBLE": sa.Float,
    "BOOLEAN": sa.Boolean,
    "TIMESTAMP WITH TIME ZONE": sa.DateTime,
}


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    with Storage(tmp_path_factory.mktemp("schema") / "s.duckdb") as s:
        yield s


@pytest.mark.parametrize("table", sorted(schema.metadata.tables))
def test_each_table_matches_the_migrated_database(storage, table) -> None:
    t = schema.metadata.tables[table]
    rows = storage.fetchall(
        "select column_name, data_type, is_nullable from information_schema.columns "
        "where table_name = ? order by ordinal_position",
        [table],
    )
    assert rows, f"no table {table} after the migrations"
    assert [r[0] for r in rows] == [c.name for c in t.columns]
    for name, data_type, nullable in rows:
        column = t.c[name]
        assert type(column.type) is _FAMILY[data_type], (table, name, data_type)
        if isinstance(column.type, sa.DateTime):
            assert column.type.timezone, (table, name)
        assert (nullable == "YES") == (column.nullable and not column.primary_key), (table, name)
    keys = storage.fetchall(
        "select constraint_column_names from duckdb_constraints() "
        "where table_name = ? and constraint_type = 'PRIMARY KEY'",
        [table],
    )
    assert [list(k[0]) for k in keys] == [[c.name for c in t.primary_key.columns]]


def test_a_statement_runs_in_the_writers_transaction(storage) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    row = {"session_id": "a" * 64, "user_name": "ann", "session_epoch": 0}

    def add(tx):
        tx.run(insert(schema.auth_sessions).values(**row, created_at=now, expires_at=now))
        # the same transaction reads its own write
        return tx.run(sa.select(sa.func.count()).select_from(schema.auth_sessions)).fetchone()

    assert storage.write(add) == (1,)
    # an upsert compiles to ON CONFLICT for this engine
    storage.write(
        lambda tx: tx.run(
            insert(schema.auth_sessions)
            .values(**row, created_at=now, expires_at=now)
            .on_conflict_do_update(index_elements=["session_id"], set_={"session_epoch": 5})
        )
    )
    stmt = sa.select(schema.auth_sessions.c.session_epoch).where(
        schema.auth_sessions.c.user_name.in_(["ann", "bob"])
    )
    assert storage.select(stmt) == [(5,)]
    sql, params = compile_statement(stmt)
    assert sql.count("?") == 2 and params == ["ann", "bob"]
    # a key broken by a plain insert is a ConstraintError, and the transaction rolls back
    with pytest.raises(ConstraintError):
        storage.write(
            lambda tx: tx.run(
                insert(schema.auth_sessions).values(**row, created_at=now, expires_at=now)
            )
        )
    assert storage.select(sa.select(sa.func.count()).select_from(schema.auth_sessions)) == [(1,)]


def test_a_cached_statement_shape_takes_each_statements_own_values() -> None:
    # compile_statement caches compiled SQL by shape: a second statement of the same shape
    # must bind its own values, and IN lists of other lengths must not reuse a cached string
    users = schema.users

    def bump(name: str, by: int):
        return (
            sa.update(users)
            .where(users.c.name == name)
            .values(session_epoch=users.c.session_epoch + by)
        )

    first, second = compile_statement(bump("ann", 1)), compile_statement(bump("bob", 7))
    assert first[0] == second[0]
    assert first[1] == [1, "ann"] and second[1] == [7, "bob"]
    for names in (["a"], ["a", "b", "c"], ["b", "c"]):
        sql, params = compile_statement(sa.select(users.c.name).where(users.c.name.in_(names)))
        assert sql.count("?") == len(names) and params == names


def test_console_saved_queries_are_unique_per_owner_and_share_id(storage) -> None:
    """Migration 0018 (issue #14): a saved query's name is unique per owner, its share id
    unique overall; both are what ledger/console.py relies on."""
    t = schema.console_queries
    row = {"owner": "ann", "name": "q", "sql": "select 1", "share_id": "s" * 22}
    storage.write(lambda tx: tx.run(sa.insert(t).values(**row)))
    for clash in ({"share_id": "t" * 22}, {"owner": "bob", "name": "other"}):
        with pytest.raises(ConstraintError):
            storage.write(lambda tx, c=clash: tx.run(sa.insert(t).values(**{**row, **c})))
    other = {**row, "owner": "bob", "share_id": "u" * 22}
    storage.write(lambda tx: tx.run(sa.insert(t).values(**other)))
    assert storage.select(sa.select(sa.func.count()).select_from(t)) == [(2,)]
