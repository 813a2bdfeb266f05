-- Schema version 16 (issue #12): budgets, alert rules, alert state, silences, channels, the
-- notification outbox and its delivery log, the evaluation cursor, and per-user API tokens.
-- Formats and rules: docs/budgets.md and docs/alerts.md. Written only through ledger/budgets.py,
-- ledger/alert_rules.py, ledger/alert_engine.py, ledger/outbox.py and ledger/api_tokens.py.
-- No isfinite() in CHECKs (see 0014: DuckDB 2.0.1's WAL replay); the stores check finiteness.
-- JSON columns are VARCHAR holding a JSON object, written and read by the stores (see 0015).

-- budgets: one row per budget. scope is a JSON object {dimension: value} over environment,
-- team, app, route, workflow, model, deployment ({} = the whole organisation). The period
-- resets at 00:00 in `timezone`: daily; weekly on week_start (0 = Monday); monthly on
-- reset_day; quarterly (Jan/Apr/Jul/Oct, on reset_day); custom [custom_start, custom_end).
-- thresholds: percents of amount, ascending, comma-separated ("50,80,100").
-- idle_policy NULL: each deployment's configured policy (cost_configured in the marts).
-- source 'file' rows come from the config file (alerts.file) and are not edited in the UI.
CREATE SEQUENCE budget_ids START 1;
CREATE TABLE budgets (
    budget_id       BIGINT PRIMARY KEY DEFAULT nextval('budget_ids'),
    name            VARCHAR NOT NULL UNIQUE CHECK (name <> ''),
    scope           VARCHAR NOT NULL DEFAULT '{}',
    period          VARCHAR NOT NULL
        CHECK (period IN ('daily', 'weekly', 'monthly', 'quarterly', 'custom')),
    week_start      INTEGER NOT NULL DEFAULT 0 CHECK (week_start BETWEEN 0 AND 6),
    reset_day       INTEGER NOT NULL DEFAULT 1 CHECK (reset_day BETWEEN 1 AND 28),
    custom_start    TIMESTAMPTZ,
    custom_end      TIMESTAMPTZ,
    timezone        VARCHAR NOT NULL DEFAULT 'UTC',
    amount          DOUBLE NOT NULL CHECK (amount > 0),
    currency        VARCHAR NOT NULL DEFAULT 'USD',
    thresholds      VARCHAR NOT NULL DEFAULT '50,80,100',
    forecast_alert  BOOLEAN NOT NULL DEFAULT true,
    idle_policy     VARCHAR CHECK (idle_policy IS NULL OR idle_policy IN ('separate', 'usage', 'even')),
    owner           VARCHAR NOT NULL CHECK (owner <> ''),
    channels        VARCHAR NOT NULL DEFAULT '',
    note            VARCHAR,
    source          VARCHAR NOT NULL CHECK (source IN ('ui', 'file', 'cli')),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    archived_at     TIMESTAMPTZ,
    CHECK ((period = 'custom') = (custom_start IS NOT NULL AND custom_end IS NOT NULL)),
    CHECK (custom_end IS NULL OR custom_end > custom_start)
);

-- alert_channels: where notifications go. kind webhook (JSON body, HMAC-SHA256 signature
-- header when `secret` is set), slack (Slack incoming-webhook payload), email (SMTP).
-- config: JSON object of the kind's fields (docs/alerts.md); secrets may be given as
-- {"secret_env": "NAME"} so they stay out of the database.
CREATE TABLE alert_channels (
    name            VARCHAR PRIMARY KEY CHECK (name <> ''),
    kind            VARCHAR NOT NULL CHECK (kind IN ('webhook', 'slack', 'email')),
    config          VARCHAR NOT NULL DEFAULT '{}',
    source          VARCHAR NOT NULL CHECK (source IN ('ui', 'file', 'cli')),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    archived_at     TIMESTAMPTZ
);

-- alert_rules: one row per rule. scope: JSON {dimension: value} filter; group_by: comma-separated
-- dimensions, one alert per distinct value combination ('' = one alert for the whole scope).
-- budget_name: the budget of the two budget kinds. params: the kind's own JSON parameters.
-- A condition holds while value >= threshold (the kind defines value, docs/alerts.md); it must
-- hold for pending_s before firing, and the alert resolves only once value < resolve_threshold
-- has held for resolve_s (hysteresis in value and in time).
CREATE SEQUENCE alert_rule_ids START 1;
CREATE TABLE alert_rules (
    rule_id             BIGINT PRIMARY KEY DEFAULT nextval('alert_rule_ids'),
    name                VARCHAR NOT NULL UNIQUE CHECK (name <> ''),
    kind                VARCHAR NOT NULL CHECK (kind IN (
        'budget_threshold', 'budget_forecast', 'spend_spike', 'long_context', 'failure_rate',
        'slo_burn', 'prefix_cache_regression', 'kv_pressure', 'false_economy', 'coverage_gap',
        'unpriced_usage')),
    scope               VARCHAR NOT NULL DEFAULT '{}',
    group_by            VARCHAR NOT NULL DEFAULT '',
    budget_name         VARCHAR,
    params              VARCHAR NOT NULL DEFAULT '{}',
    window_s            BIGINT NOT NULL CHECK (window_s > 0),
    threshold           DOUBLE NOT NULL,
    resolve_threshold   DOUBLE NOT NULL,
    pending_s           BIGINT NOT NULL DEFAULT 0 CHECK (pending_s >= 0),
    resolve_s           BIGINT NOT NULL DEFAULT 300 CHECK (resolve_s >= 0),
    repeat_s            BIGINT NOT NULL DEFAULT 86400 CHECK (repeat_s > 0),
    severity            VARCHAR NOT NULL DEFAULT 'warning'
        CHECK (severity IN ('info', 'warning', 'critical')),
    owner               VARCHAR NOT NULL CHECK (owner <> ''),
    channels            VARCHAR NOT NULL DEFAULT '',
    enabled             BOOLEAN NOT NULL DEFAULT true,
    note                VARCHAR,
    source              VARCHAR NOT NULL CHECK (source IN ('ui', 'file', 'cli')),
    created_at          TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    archived_at         TIMESTAMPTZ,
    CHECK (resolve_threshold <= threshold),
    CHECK ((kind IN ('budget_threshold', 'budget_forecast')) = (budget_name IS NOT NULL))
);

-- config_changes: the audit trail of budgets, rules, channels and silences (who, what, when;
-- values before and after as JSON text), written in the same transaction as the change.
CREATE SEQUENCE config_change_ids START 1;
CREATE TABLE config_changes (
    change_id   BIGINT PRIMARY KEY DEFAULT nextval('config_change_ids'),
    changed_at  TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    changed_by  VARCHAR NOT NULL CHECK (changed_by <> ''),
    object_kind VARCHAR NOT NULL CHECK (object_kind IN ('budget', 'rule', 'channel', 'silence')),
    object_name VARCHAR NOT NULL,
    action      VARCHAR NOT NULL
        CHECK (action IN ('added', 'changed', 'archived', 'restored', 'synced', 'expired')),
    old_values  VARCHAR,
    new_values  VARCHAR
);

-- alerts: one row per alert (a rule x scope from its first breach to its resolve).
-- rule_key: 'rule:<rule_id>' for stored rules. scope_key: the group's values as canonical JSON
-- ('{}' when the rule has no group_by). state moves pending -> firing -> resolved, or
-- pending -> cancelled when the condition clears before pending_s.
CREATE SEQUENCE alert_ids START 1;
CREATE TABLE alerts (
    alert_id            BIGINT PRIMARY KEY DEFAULT nextval('alert_ids'),
    rule_key            VARCHAR NOT NULL,
    rule_name           VARCHAR NOT NULL,
    kind                VARCHAR NOT NULL,
    scope_key           VARCHAR NOT NULL,
    state               VARCHAR NOT NULL
        CHECK (state IN ('pending', 'firing', 'resolved', 'cancelled')),
    severity            VARCHAR NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    owner               VARCHAR NOT NULL,
    pending_since       TIMESTAMPTZ NOT NULL,
    fired_at            TIMESTAMPTZ,
    clear_since         TIMESTAMPTZ,        -- firing, and below resolve_threshold since then
    resolved_at         TIMESTAMPTZ,
    last_evaluated_at   TIMESTAMPTZ NOT NULL,
    value               DOUBLE,
    threshold           DOUBLE,
    peak_value          DOUBLE,
    summary             VARCHAR NOT NULL DEFAULT '',
    link                VARCHAR,
    last_notified_at    TIMESTAMPTZ,
    notified_severity   VARCHAR,
    notifications       INTEGER NOT NULL DEFAULT 0,
    acknowledged_by     VARCHAR,
    acknowledged_at     TIMESTAMPTZ
);

-- alert_open: at most one open (pending or firing) alert per rule x scope, by its primary key.
CREATE TABLE alert_open (
    rule_key    VARCHAR NOT NULL,
    scope_key   VARCHAR NOT NULL,
    alert_id    BIGINT NOT NULL,
    PRIMARY KEY (rule_key, scope_key)
);

-- alert_events: the history page (every transition, acknowledgement, silence and notification).
CREATE SEQUENCE alert_event_ids START 1;
CREATE TABLE alert_events (
    event_id    BIGINT PRIMARY KEY DEFAULT nextval('alert_event_ids'),
    alert_id    BIGINT NOT NULL,
    event_at    TIMESTAMPTZ NOT NULL,
    event       VARCHAR NOT NULL CHECK (event IN (
        'pending', 'firing', 'escalated', 'repeat', 'resolved', 'cancelled', 'acknowledged',
        'silenced', 'notified')),
    actor       VARCHAR NOT NULL DEFAULT 'evaluator',
    detail      VARCHAR
);

-- silences: no notification for alerts matching rule_key (NULL: any rule) and scope (a JSON
-- {dimension: value} that the alert's scope must contain) between starts_at and ends_at.
-- Alerts still change state while silenced; the history says they were silenced.
CREATE SEQUENCE silence_ids START 1;
CREATE TABLE silences (
    silence_id  BIGINT PRIMARY KEY DEFAULT nextval('silence_ids'),
    rule_key    VARCHAR,
    scope       VARCHAR NOT NULL DEFAULT '{}',
    starts_at   TIMESTAMPTZ NOT NULL,
    ends_at     TIMESTAMPTZ NOT NULL,
    reason      VARCHAR NOT NULL CHECK (reason <> ''),
    created_by  VARCHAR NOT NULL CHECK (created_by <> ''),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    ended_at    TIMESTAMPTZ,
    CHECK (ends_at > starts_at)
);

-- notification_outbox: a notification is written here, in the same transaction as the alert
-- transition that causes it, before any attempt to send it; the dispatcher marks it sent after
-- the channel accepted it. idempotency_key is sent with it (header Idempotency-Key / field
-- idempotency_key): a resend after a crash carries the same key.
CREATE SEQUENCE notification_ids START 1;
CREATE TABLE notification_outbox (
    notification_id BIGINT PRIMARY KEY DEFAULT nextval('notification_ids'),
    idempotency_key VARCHAR NOT NULL UNIQUE,
    alert_id        BIGINT,
    channel         VARCHAR NOT NULL,
    event           VARCHAR NOT NULL,
    payload         VARCHAR NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    state           VARCHAR NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    sent_at         TIMESTAMPTZ,
    last_error      VARCHAR
);

-- delivery_log: one row per attempt (notification_id NULL for a "send test").
CREATE SEQUENCE delivery_ids START 1;
CREATE TABLE delivery_log (
    delivery_id     BIGINT PRIMARY KEY DEFAULT nextval('delivery_ids'),
    notification_id BIGINT,
    channel         VARCHAR NOT NULL,
    attempted_at    TIMESTAMPTZ NOT NULL,
    ok              BOOLEAN NOT NULL,
    status_code     INTEGER,
    error           VARCHAR,
    duration_s      DOUBLE NOT NULL
);

-- alert_cursor: per rule key, the last evaluation instant; after a restart the evaluator
-- evaluates the instants that came due while it was down (docs/alerts.md, "Restarts").
CREATE TABLE alert_cursor (
    rule_key        VARCHAR PRIMARY KEY,
    evaluated_at    TIMESTAMPTZ NOT NULL
);

-- api_tokens: per-user bearer tokens for the read-only API (GET /api/v1/budgets). Only the
-- SHA-256 of a token is stored; `prefix` (its first 8 characters) names it in the UI.
CREATE SEQUENCE api_token_ids START 1;
CREATE TABLE api_tokens (
    token_id        BIGINT PRIMARY KEY DEFAULT nextval('api_token_ids'),
    user_name       VARCHAR NOT NULL,
    label           VARCHAR NOT NULL CHECK (label <> ''),
    token_hash      VARCHAR NOT NULL UNIQUE,
    prefix          VARCHAR NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    last_used_at    TIMESTAMPTZ,
    revoked_at      TIMESTAMPTZ
);
