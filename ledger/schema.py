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

# ---------------------------------------------------------------- budgets and alerts (0016, #12)
# JSON columns (scope, params, config, payload, old/new values) are VARCHAR holding a JSON object.


def _json(name: str) -> sa.Column:
    return sa.Column(name, sa.String, nullable=False, server_default=sa.text("'{}'"))


def _source() -> sa.Column:
    return sa.Column("source", sa.String, nullable=False)


budgets = sa.Table(
    "budgets",
    metadata,
    _serial("budget_id", "budget_ids"),
    sa.Column("name", sa.String, nullable=False, unique=True),
    _json("scope"),
    sa.Column("period", sa.String, nullable=False),
    sa.Column("week_start", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("reset_day", sa.Integer, nullable=False, server_default=sa.text("1")),
    _when("custom_start", nullable=True),
    _when("custom_end", nullable=True),
    sa.Column("timezone", sa.String, nullable=False, server_default=sa.text("'UTC'")),
    sa.Column("amount", sa.Float, nullable=False),
    sa.Column("currency", sa.String, nullable=False, server_default=sa.text("'USD'")),
    sa.Column("thresholds", sa.String, nullable=False, server_default=sa.text("'50,80,100'")),
    sa.Column("forecast_alert", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("idle_policy", sa.String),
    sa.Column("owner", sa.String, nullable=False),
    sa.Column("channels", sa.String, nullable=False, server_default=sa.text("''")),
    sa.Column("note", sa.String),
    _source(),
    _when("created_at", default_now=True),
    _when("updated_at", default_now=True),
    _when("archived_at", nullable=True),
)

alert_channels = sa.Table(
    "alert_channels",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("kind", sa.String, nullable=False),
    _json("config"),
    _source(),
    _when("created_at", default_now=True),
    _when("updated_at", default_now=True),
    _when("archived_at", nullable=True),
)

alert_rules = sa.Table(
    "alert_rules",
    metadata,
    _serial("rule_id", "alert_rule_ids"),
    sa.Column("name", sa.String, nullable=False, unique=True),
    sa.Column("kind", sa.String, nullable=False),
    _json("scope"),
    sa.Column("group_by", sa.String, nullable=False, server_default=sa.text("''")),
    sa.Column("budget_name", sa.String),
    _json("params"),
    sa.Column("window_s", sa.BigInteger, nullable=False),
    sa.Column("threshold", sa.Float, nullable=False),
    sa.Column("resolve_threshold", sa.Float, nullable=False),
    sa.Column("pending_s", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("resolve_s", sa.BigInteger, nullable=False, server_default=sa.text("300")),
    sa.Column("repeat_s", sa.BigInteger, nullable=False, server_default=sa.text("86400")),
    sa.Column("severity", sa.String, nullable=False, server_default=sa.text("'warning'")),
    sa.Column("owner", sa.String, nullable=False),
    sa.Column("channels", sa.String, nullable=False, server_default=sa.text("''")),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("note", sa.String),
    _source(),
    _when("created_at", default_now=True),
    _when("updated_at", default_now=True),
    _when("archived_at", nullable=True),
)

config_changes = sa.Table(
    "config_changes",
    metadata,
    _serial("change_id", "config_change_ids"),
    _when("changed_at", default_now=True),
    sa.Column("changed_by", sa.String, nullable=False),
    sa.Column("object_kind", sa.String, nullable=False),
    sa.Column("object_name", sa.String, nullable=False),
    sa.Column("action", sa.String, nullable=False),
    sa.Column("old_values", sa.String),
    sa.Column("new_values", sa.String),
)

alerts = sa.Table(
    "alerts",
    metadata,
    _serial("alert_id", "alert_ids"),
    sa.Column("rule_key", sa.String, nullable=False),
    sa.Column("rule_name", sa.String, nullable=False),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("scope_key", sa.String, nullable=False),
    sa.Column("state", sa.String, nullable=False),
    sa.Column("severity", sa.String, nullable=False),
    sa.Column("owner", sa.String, nullable=False),
    _when("pending_since"),
    _when("fired_at", nullable=True),
    _when("clear_since", nullable=True),
    _when("resolved_at", nullable=True),
    _when("last_evaluated_at"),
    sa.Column("value", sa.Float),
    sa.Column("threshold", sa.Float),
    sa.Column("peak_value", sa.Float),
    sa.Column("summary", sa.String, nullable=False, server_default=sa.text("''")),
    sa.Column("link", sa.String),
    _when("last_notified_at", nullable=True),
    sa.Column("notified_severity", sa.String),
    sa.Column("notifications", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("acknowledged_by", sa.String),
    _when("acknowledged_at", nullable=True),
)

alert_open = sa.Table(
    "alert_open",
    metadata,
    sa.Column("rule_key", sa.String, primary_key=True),
    sa.Column("scope_key", sa.String, primary_key=True),
    sa.Column("alert_id", sa.BigInteger, nullable=False),
)

alert_events = sa.Table(
    "alert_events",
    metadata,
    _serial("event_id", "alert_event_ids"),
    sa.Column("alert_id", sa.BigInteger, nullable=False),
    _when("event_at"),
    sa.Column("event", sa.String, nullable=False),
    sa.Column("actor", sa.String, nullable=False, server_default=sa.text("'evaluator'")),
    sa.Column("detail", sa.String),
)

silences = sa.Table(
    "silences",
    metadata,
    _serial("silence_id", "silence_ids"),
    sa.Column("rule_key", sa.String),
    _json("scope"),
    _when("starts_at"),
    _when("ends_at"),
    sa.Column("reason", sa.String, nullable=False),
    sa.Column("created_by", sa.String, nullable=False),
    _when("created_at", default_now=True),
    _when("ended_at", nullable=True),
)

notification_outbox = sa.Table(
    "notification_outbox",
    metadata,
    _serial("notification_id", "notification_ids"),
    sa.Column("idempotency_key", sa.String, nullable=False, unique=True),
    sa.Column("alert_id", sa.BigInteger),
    sa.Column("channel", sa.String, nullable=False),
    sa.Column("event", sa.String, nullable=False),
    sa.Column("payload", sa.String, nullable=False),
    _when("created_at"),
    sa.Column("state", sa.String, nullable=False, server_default=sa.text("'pending'")),
    sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    _when("next_attempt_at"),
    _when("sent_at", nullable=True),
    sa.Column("last_error", sa.String),
)

delivery_log = sa.Table(
    "delivery_log",
    metadata,
    _serial("delivery_id", "delivery_ids"),
    sa.Column("notification_id", sa.BigInteger),
    sa.Column("channel", sa.String, nullable=False),
    _when("attempted_at"),
    sa.Column("ok", sa.Boolean, nullable=False),
    sa.Column("status_code", sa.Integer),
    sa.Column("error", sa.String),
    sa.Column("duration_s", sa.Float, nullable=False),
)

alert_cursor = sa.Table(
    "alert_cursor",
    metadata,
    sa.Column("rule_key", sa.String, primary_key=True),
    _when("evaluated_at"),
)

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    _serial("token_id", "api_token_ids"),
    sa.Column("user_name", sa.String, nullable=False),
    sa.Column("label", sa.String, nullable=False),
    sa.Column("token_hash", sa.String, nullable=False, unique=True),
    sa.Column("prefix", sa.String, nullable=False),
    _when("created_at", default_now=True),
    _when("last_used_at", nullable=True),
    _when("revoked_at", nullable=True),
)


# ---------------------------------------------------------------- capacity plans (0017, #13)
# inputs, result and summary are VARCHAR holding JSON (ledger/capacity_plans.py writes them).

capacity_plans = sa.Table(
    "capacity_plans",
    metadata,
    _serial("plan_id", "capacity_plan_ids"),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("created_by", sa.String, nullable=False),
    _when("created_at", default_now=True),
    sa.Column("planner_version", sa.String, nullable=False),
    sa.Column("model_version", sa.String, nullable=False),
    sa.Column("inputs", sa.String, nullable=False),
    sa.Column("result", sa.String, nullable=False),
    _json("summary"),
    sa.Column("owner", sa.String),
    sa.Column("decision", sa.String),
    sa.Column("decision_note", sa.String),
    sa.Column("decided_by", sa.String),
    _when("decided_at", nullable=True),
    _when("archived_at", nullable=True),
)

capacity_plan_changes = sa.Table(
    "capacity_plan_changes",
    metadata,
    _serial("change_id", "capacity_plan_change_ids"),
    _when("changed_at", default_now=True),
    sa.Column("changed_by", sa.String, nullable=False),
    sa.Column("plan_id", sa.BigInteger, nullable=False),
    sa.Column("action", sa.String, nullable=False),
    sa.Column("detail", sa.String),
)


# ---------------------------------------------------------------- SQL console (0018, #14)
# Saved queries (shared by link through share_id) and each user's history (ledger/console.py).

console_queries = sa.Table(
    "console_queries",
    metadata,
    _serial("query_id", "console_query_ids"),
    sa.Column("owner", sa.String, nullable=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("sql", sa.String, nullable=False),
    sa.Column("share_id", sa.String, nullable=False, unique=True),
    _when("created_at", default_now=True),
    _when("updated_at", default_now=True),
    sa.UniqueConstraint("owner", "name"),
)

console_history = sa.Table(
    "console_history",
    metadata,
    _serial("run_id", "console_history_ids"),
    sa.Column("user_name", sa.String, nullable=False),
    _when("ran_at", default_now=True),
    sa.Column("sql", sa.String, nullable=False),
    sa.Column("outcome", sa.String, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("elapsed_ms", sa.Float, nullable=False, server_default=sa.text("0")),
    sa.Column("reason", sa.String),
)
