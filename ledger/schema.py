"""The relational metadata's tables as SQLAlchemy Core objects: users and sessions, the price
book, deployments, SLO targets.

Stores build their statements from these (``sa.select(users)...``, an upsert with
``insert(...).on_conflict_do_update``) and run them through the storage interface
(``Transaction.run``, ``Storage.select``), which compiles them for the engine: DuckDB today
(duckdb-engine's dialect), PostgreSQL when the metadata moves there (the same statements; the
PostgreSQL dialect is what duckdb-engine's derives from). Analytic data (spans, samples, marts)
does not come through here: it moves as Arrow batches and SQL files.

The tables are created by the versioned migrations in ``sql/migrations`` (plain SQL, which also
holds the CHECK constraints); ``tests/test_schema.py`` fails when a table here and the migrated
database disagree on a column, its type family, its NOT NULL or the primary key.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()


def _when(name: str, *, nullable: bool = False, default_now: bool = False) -> sa.Column:
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        nullable=nullable,
        server_default=sa.text("current_timestamp") if default_now else None,
    )


def _serial(name: str, sequence: str) -> sa.Column:
    """A BIGINT primary key numbered by a sequence (the migrations create the sequence)."""
    return sa.Column(
        name, sa.BigInteger, primary_key=True, server_default=sa.text(f"nextval('{sequence}')")
    )


users = sa.Table(
    "users",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("role", sa.String, nullable=False),
    sa.Column("password_hash", sa.String),
    _when("created_at", default_now=True),
    _when("updated_at", default_now=True),
    sa.Column("disabled", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("session_epoch", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("oidc_subject", sa.String, unique=True),
    _when("last_sign_in_at", nullable=True),
)

user_changes = sa.Table(
    "user_changes",
    metadata,
    _serial("change_id", "user_changes_change_id_seq"),
    _when("changed_at", default_now=True),
    sa.Column("changed_by", sa.String, nullable=False),
    sa.Column("action", sa.String, nullable=False),
    sa.Column("user_name", sa.String, nullable=False),
    sa.Column("detail", sa.String),
)

auth_secrets = sa.Table(
    "auth_secrets",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("value", sa.String, nullable=False),
    _when("created_at", default_now=True),
)

auth_sessions = sa.Table(
    "auth_sessions",
    metadata,
    sa.Column("session_id", sa.String, primary_key=True),
    sa.Column("user_name", sa.String, nullable=False),
    sa.Column("session_epoch", sa.Integer, nullable=False),
    _when("created_at"),
    _when("expires_at"),
)

price_book = sa.Table(
    "price_book",
    metadata,
    _serial("price_id", "price_book_price_id_seq"),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("subject", sa.String, nullable=False),
    sa.Column("deployment", sa.String, nullable=False, server_default=sa.text("''")),
    sa.Column("unit", sa.String, nullable=False),
    sa.Column("price", sa.Float, nullable=False),
    sa.Column("currency", sa.String, nullable=False, server_default=sa.text("'USD'")),
    sa.Column("stage", sa.String),
    _when("effective_from"),
    sa.Column("note", sa.String),
    sa.Column("source", sa.String, nullable=False),
    _when("created_at", default_now=True),
    _when("effective_to", nullable=True),  # an explicit end (migration 0014)
    sa.UniqueConstraint("kind", "subject", "deployment", "unit", "effective_from"),
)

# Versions replaced by a corrected price from the same start, kept (never deleted) with who
# replaced them, when, why and by which price_id (migration 0014).
price_book_superseded = sa.Table(
    "price_book_superseded",
    metadata,
    sa.Column("price_id", sa.BigInteger, primary_key=True),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("subject", sa.String, nullable=False),
    sa.Column("deployment", sa.String, nullable=False),
    sa.Column("unit", sa.String, nullable=False),
    sa.Column("price", sa.Float, nullable=False),
    sa.Column("currency", sa.String, nullable=False),
    sa.Column("stage", sa.String),
    _when("effective_from"),
    _when("effective_to", nullable=True),
    sa.Column("note", sa.String),
    sa.Column("source", sa.String, nullable=False),
    _when("created_at"),
    _when("superseded_at", default_now=True),
    sa.Column("superseded_by", sa.BigInteger, nullable=False),
    sa.Column("changed_by", sa.String, nullable=False),
    sa.Column("reason", sa.String, nullable=False),
)

price_book_changes = sa.Table(
    "price_book_changes",
    metadata,
    _serial("change_id", "price_book_changes_change_id_seq"),
    _when("changed_at", default_now=True),
    sa.Column("changed_by", sa.String, nullable=False),
    sa.Column("action", sa.String, nullable=False),
    sa.Column("price_id", sa.BigInteger, nullable=False),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("subject", sa.String, nullable=False),
    sa.Column("deployment", sa.String, nullable=False),
    sa.Column("unit", sa.String, nullable=False),
    sa.Column("old_price", sa.Float),
    sa.Column("new_price", sa.Float),
    _when("effective_from"),
    sa.Column("note", sa.String),
    _when("old_effective_from", nullable=True),
    _when("new_effective_from", nullable=True),
    _when("old_effective_to", nullable=True),
    _when("new_effective_to", nullable=True),
    sa.Column("reason", sa.String),
)

deployments = sa.Table(
    "deployments",
    metadata,
    sa.Column("deployment", sa.String, primary_key=True),
    sa.Column("model", sa.String),
    sa.Column("gpu_type", sa.String),
    sa.Column("gpus_per_replica", sa.Integer),
    sa.Column("tensor_parallel", sa.Integer),
    sa.Column("idle_policy", sa.String, nullable=False, server_default=sa.text("'separate'")),
    sa.Column("environment", sa.String),
    sa.Column("source", sa.String, nullable=False),
    _when("updated_at", default_now=True),
)

slo_targets = sa.Table(
    "slo_targets",
    metadata,
    _serial("target_id", "slo_target_ids"),
    sa.Column("objective", sa.String, nullable=False),
    sa.Column("route", sa.String, nullable=False),
    sa.Column("app", sa.String),
    sa.Column("environment", sa.String),
    sa.Column("stage", sa.String, nullable=False),
    sa.Column("percentile", sa.Float, nullable=False),
    sa.Column("target_s", sa.Float, nullable=False),
    _when("effective_from"),
    sa.Column("note", sa.String),
    _when("created_at", default_now=True),
    sa.Column("source", sa.String, nullable=False, server_default=sa.text("'config'")),
    sa.UniqueConstraint("objective", "effective_from"),
)

# The SLO targets' audit trail, append-only (migration 0015): one row per seeded, added,
# changed or removed target, the values before and after as JSON text.
slo_target_changes = sa.Table(
    "slo_target_changes",
    metadata,
    _serial("change_id", "slo_target_changes_change_id_seq"),
    _when("changed_at", default_now=True),
    sa.Column("changed_by", sa.String, nullable=False),
    sa.Column("action", sa.String, nullable=False),
    sa.Column("objective", sa.String, nullable=False),
    sa.Column("old_values", sa.String),
    sa.Column("new_values", sa.String),
)
