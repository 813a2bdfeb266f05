"""Deployments and their replicas in the database: which scrape targets are which replicas, on
which GPUs (the types and the setting's parser are ``models.deployment_config``).

A **replica** is one vLLM server, identified by the name of its vLLM scrape target; its engine
spans carry the same name as resource ``service.instance.id`` (docs/cost-model.md, "Requests").
A **deployment** is a named group of identical replicas (``scrape.targets[].deployment``).

- :func:`sync_configured` and :func:`set_idle_policy` write the ``deployments`` table from the
  ``deployments`` setting and the UI (SQLAlchemy Core statements on ``ledger.schema``'s table,
  so they run unchanged on PostgreSQL once the metadata moves there);
- :func:`learn_replicas` reads scrapes (deployment), vLLM's ``model_name`` label and
  ``vllm:cache_config_info``, DCGM's ``modelName`` and the engine spans' ``host.name``, and writes
  the ``replicas`` table.

The ``deployment_replicas`` view joins both: a configured value wins, a learned one fills the gap.

The admin Deployments page also edits the SLO targets here (:func:`save_slo_target`,
:func:`remove_slo_target`, :func:`restore_bundled_slo_targets`), shown by name and what they
judge, never by ``target_id``; every change is recorded in their audit trail
(``slo_target_changes``, read a page at a time by :func:`slo_changes_page`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from ledger.audit import audit_page
from ledger.efficiency import (
    SloTargetsError,
    bundled_slo_targets_file,
    load_slo_targets,
    parse_slo_target,
)
from ledger.schema import deployments as deployments_table
from ledger.schema import slo_target_changes, slo_targets
from models.deployment_config import (
    Deployment,
    DeploymentConfigError,
    normalize_gpu_model,
    parse_idle_policy,
)
from models.idle_policy import IdlePolicy

if TYPE_CHECKING:
    from pathlib import Path

    from inferledger.core.storage import Storage, Transaction


# ---------------------------------------------------------------------------- configured rows

_DEPLOYMENT_COLUMNS = (
    "model",
    "gpu_type",
    "gpus_per_replica",
    "tensor_parallel",
    "idle_policy",
    "environment",
)
#: What sync_configured compares and writes per row, after the name.
_STORED_COLUMNS = (*_DEPLOYMENT_COLUMNS, "source")

# The learned replicas table is analytic data and has no place in ledger/schema.py; _discover
# reads just these two columns of it, named here so its statement can be built like the rest.
_replicas = sa.table(
    "replicas", sa.column("replica", sa.String), sa.column("deployment", sa.String)
)


def sync_configured(storage: Storage, deployments: Sequence[Deployment]) -> None:
    """Make the ``deployments`` table's config rows match ``deployments``, in one write.

    Each configured deployment is upserted with ``source = 'config'`` (taking over a discovered
    or UI row of the same name). A config row no longer configured is deleted; rows the UI or
    discovery made are left alone, and a deleted name that still has replicas comes back as
    discovered. A configured idle_policy wins; without one the stored policy (say, set in the
    UI) is kept. Rows that do not change keep their updated_at.
    """
    wanted = {d.name: d for d in deployments}
    t = deployments_table
    stored_columns = [t.c[c] for c in _STORED_COLUMNS]

    def write(tx: Transaction) -> None:
        stored = {
            row[0]: row[1:] for row in tx.run(sa.select(t.c.deployment, *stored_columns)).fetchall()
        }
        tx.run(sa.delete(t).where(t.c.source == "config", t.c.deployment.not_in(list(wanted))))
        for d in wanted.values():
            old = stored.get(d.name)
            policy = d.idle_policy.value if d.idle_policy is not None else None
            if policy is None:
                policy = old[4] if old is not None else IdlePolicy.SEPARATE.value
            row = (
                d.model,
                d.gpu_type,
                d.gpus_per_replica,
                d.tensor_parallel,
                policy,
                d.environment,
                "config",
            )
            if old == row:
                continue
            upsert = insert(t).values(
                deployment=d.name,
                **dict(zip(_STORED_COLUMNS, row, strict=True)),
                updated_at=sa.func.now(),
            )
            tx.run(
                upsert.on_conflict_do_update(
                    index_elements=[t.c.deployment],
                    set_={c: upsert.excluded[c] for c in (*_STORED_COLUMNS, "updated_at")},
                )
            )
        _discover(tx)

    storage.write(write)


def _discover(tx: Transaction) -> None:
    """A deployment row (source 'discovered') for every replica's deployment that has none, so
    the deployment list is complete and the UI can set a policy on any of them."""
    names = sa.select(
        sa.func.coalesce(_replicas.c.deployment, _replicas.c.replica),
        sa.cast(sa.literal("discovered"), sa.String),
    ).distinct()
    tx.run(
        insert(deployments_table)
        .from_select(["deployment", "source"], names)
        .on_conflict_do_nothing(index_elements=[deployments_table.c.deployment])
    )


def set_idle_policy(storage: Storage, deployment: str, policy: IdlePolicy | str) -> None:
    """Set one deployment's idle policy (the UI's action). A deployment without a row gets one
    owned by the UI; a discovered row becomes the UI's; a config row stays the config's (its
    configured idle_policy, if any, wins again at the next start)."""
    if not isinstance(deployment, str) or not deployment.strip():
        raise DeploymentConfigError("set_idle_policy: deployment must be a non-empty name")
    value = parse_idle_policy(policy, f"idle policy of {deployment}").value
    t = deployments_table
    upsert = insert(t).values(deployment=deployment, idle_policy=value, source="ui")
    stmt = upsert.on_conflict_do_update(
        index_elements=[t.c.deployment],
        set_={
            "idle_policy": upsert.excluded.idle_policy,
            "source": sa.case((t.c.source == "discovered", "ui"), else_=t.c.source),
            # now(), not CURRENT_TIMESTAMP: DuckDB binds the bare keyword in DO UPDATE SET as
            # a column name. Both engines give the transaction's start time.
            "updated_at": sa.func.now(),
        },
    )
    storage.write(lambda tx: tx.run(stmt))


# ---------------------------------------------------------------------------- learning

# A gauge every vLLM version exports on every scrape, with the model_name label.
_MODEL_NAME_METRIC = "vllm:num_requests_running"
_CACHE_CONFIG = "vllm:cache_config_info"
# dcgm-exporter's default gauges (../shared/reference/vllm-observability.md 5a); every sample
# carries modelName and, unless --no-hostname, Hostname. Any one of them is enough. Newer
# dcgm-exporter releases spell the host label `hostname` (NVIDIA/dcgm-exporter d5e5f51): both
# are read (_DCGM_HOST).
_DCGM_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_POWER_USAGE",
)
_DCGM_IN = ", ".join(f"'{m}'" for m in _DCGM_METRICS)  # constants, not input

# metric_samples is the big table and has no index. Each sample query filters on constant
# metric names and on ts (DuckDB prunes row groups by their ts min/max; metric names mix in
# every row group, so they do not prune), and reads the labels map only of each target's latest
# scrape: first the latest ts per target from the narrow columns, then those rows' labels.
# On 29 M samples a full learn_replicas takes 0.15-0.4 s this way, ~2 s reading the labels of every
# matching row; a one-hour window ~30 ms (docs/deployments.md, "Cost").
_LATEST_LABELS_SQL = """
with latest as (
    select target, max(ts) as ts
    from metric_samples
    where metric in ({metrics}) {{since}}
    group by target
)
select m.target, {select}
from metric_samples as m
inner join latest as l on l.target = m.target and l.ts = m.ts
where m.metric in ({metrics}) {{since_m}}
group by {group}
"""
_MODEL_SQL = _LATEST_LABELS_SQL.format(
    metrics=f"'{_MODEL_NAME_METRIC}'",
    select="max(m.labels['model_name'])",
    group="m.target",
)
_CACHE_SQL = _LATEST_LABELS_SQL.format(
    metrics=f"'{_CACHE_CONFIG}'",
    select=(
        "max(m.labels['block_size']), max(m.labels['num_gpu_blocks']), "
        "max(m.labels['cache_dtype']), max(m.labels['enable_prefix_caching'])"
    ),
    group="m.target",
)
_DCGM_HOST = "coalesce(m.labels['Hostname'], m.labels['hostname'])"
_DCGM_SQL = _LATEST_LABELS_SQL.format(
    metrics=_DCGM_IN,
    select=f"{_DCGM_HOST}, list(distinct m.labels['modelName'])",
    group=f"m.target, {_DCGM_HOST}",
)
_SCRAPES_SQL = """
select target, kind,
       arg_max(deployment, ts) filter (where deployment is not null) as deployment,
       min(ts) filter (where up) as first_seen,
       max(ts) filter (where up) as last_seen
from scrapes
where kind in ('vllm', 'dcgm') {since}
group by target, kind
"""
# host.name is a resource attribute no typed column holds, so it stays in the resource lists;
# they are read only for each replica's latest span (resources are fixed for a process).
_HOST_SQL = """
with latest as (
    select service_instance_id, max(start_ns) as start_ns
    from spans
    where service_instance_id is not null {since}
    group by service_instance_id
)
select s.service_instance_id,
       max(s.resource_values[list_position(s.resource_keys, 'host.name')])
from spans as s
inner join latest as l
    on l.service_instance_id = s.service_instance_id and l.start_ns = s.start_ns
where true {since_s}
group by s.service_instance_id
"""

# Learned columns, in the order of _Learned's fields after the replica name.
_REPLICA_COLUMNS = (
    "deployment",
    "model",
    "gpu_type",
    "dcgm_model_name",
    "block_size",
    "num_gpu_blocks",
    "cache_dtype",
    "prefix_caching",
    "host",
    "first_seen",
    "last_seen",
)


@dataclass(frozen=True, slots=True)
class _Learned:
    """What one window of data says about one replica; None where it says nothing."""

    deployment: str | None = None
    model: str | None = None
    gpu_type: str | None = None
    dcgm_model_name: str | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    cache_dtype: str | None = None
    prefix_caching: bool | None = None
    host: str | None = None
    first_seen: datetime | None = None
    last_seen: datetime | None = None


def learn_replicas(storage: Storage, since: datetime | None = None) -> int:
    """Learn replicas from the scrapes, samples and spans at or after ``since`` (all of them
    when None) and upsert them into ``replicas``; returns how many replicas the window had.

    Incremental: the window runs from ``since`` to now, so what it tells is the newest and
    wins; a value it does not tell (no cache_config_info in it, say) keeps its stored value.
    Pass the earliest time whose data arrived since the last call (scrapes.received_at lets a
    caller find it when history is loaded late), or None to rescan everything.
    """
    if since is not None and since.utcoffset() is None:
        raise ValueError("since must be timezone-aware")
    window = {"since": "", "since_m": ""}
    params: list[Any] = []
    if since is not None:
        window = {"since": "and ts >= ?", "since_m": "and m.ts >= ?"}
        params = [since]
    scrapes = storage.fetchall(_SCRAPES_SQL.format(**window), params)
    vllm = {r[0]: r for r in scrapes if r[1] == "vllm"}
    if not vllm:
        return 0
    twice = params * 2  # the latest-labels queries filter both of their scans
    models = dict(storage.fetchall(_MODEL_SQL.format(**window), twice))
    caches = {r[0]: r[1:] for r in storage.fetchall(_CACHE_SQL.format(**window), twice)}
    dcgm_rows = storage.fetchall(_DCGM_SQL.format(**window), twice)
    span_window = {"since": "", "since_s": ""}
    span_params: list[Any] = []
    if since is not None:
        span_window = {"since": "and start_ns >= ?", "since_s": "and s.start_ns >= ?"}
        span_params = [_unix_ns(since)] * 2
    hosts = {
        instance: host
        for instance, host in storage.fetchall(_HOST_SQL.format(**span_window), span_params)
        if host
    }

    dcgm_deployment = {r[0]: r[2] for r in scrapes if r[1] == "dcgm"}
    by_host: dict[str, set[str]] = {}
    by_deployment: dict[str, set[str]] = {}
    for target, hostname, model_names in dcgm_rows:
        names = {n for n in model_names if n}
        if hostname:
            by_host.setdefault(hostname, set()).update(names)
        if dcgm_deployment.get(target):
            by_deployment.setdefault(dcgm_deployment[target], set()).update(names)

    learned = {}
    for target, (_, _, deployment, first_seen, last_seen) in vllm.items():
        block_size, num_blocks, cache_dtype, prefix = caches.get(target, (None,) * 4)
        learned[target] = _Learned(
            deployment=deployment,
            model=models.get(target),
            block_size=_int_label(block_size),
            num_gpu_blocks=_int_label(num_blocks),
            cache_dtype=cache_dtype or None,
            prefix_caching=_bool_label(prefix),
            host=hosts.get(target),
            first_seen=first_seen,
            last_seen=last_seen,
        )

    def write(tx: Transaction) -> int:
        stored = {
            row[0]: _Learned(*row[1:])
            for row in tx.execute(
                f"SELECT replica, {', '.join(_REPLICA_COLUMNS)} FROM replicas"
            ).fetchall()
        }
        rows = []
        for target, new in learned.items():
            merged = _merge(stored.get(target), new)
            # GPU type: the DCGM exporter on the replica's host, else the DCGM exporters of its
            # deployment when they agree on one GPU model.
            names = by_host.get(merged.host or "") or by_deployment.get(merged.deployment or "")
            if names is not None and len(names) == 1:
                (dcgm_name,) = names
                merged = replace(
                    merged, gpu_type=normalize_gpu_model(dcgm_name), dcgm_model_name=dcgm_name
                )
            rows.append([target, *(getattr(merged, c) for c in _REPLICA_COLUMNS)])
        tx.executemany(
            f"INSERT INTO replicas (replica, {', '.join(_REPLICA_COLUMNS)}, learned_at) "
            f"VALUES ({', '.join('?' * (len(_REPLICA_COLUMNS) + 1))}, current_timestamp) "
            "ON CONFLICT (replica) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in (*_REPLICA_COLUMNS, "learned_at")),
            rows,
        )
        _discover(tx)
        return len(rows)

    return storage.write(write)


def _merge(old: _Learned | None, new: _Learned) -> _Learned:
    """A stored row updated with a window's facts: what the window tells wins (it holds the
    newest data: it reaches from ``since`` to now), the rest is kept; seen times widen."""
    if old is None:
        return new
    values: dict[str, Any] = {}
    for column in _REPLICA_COLUMNS:
        a, b = getattr(old, column), getattr(new, column)
        if column == "first_seen":
            values[column] = _pick(min, a, b)
        elif column == "last_seen":
            values[column] = _pick(max, a, b)
        else:
            values[column] = b if b is not None else a
    return _Learned(**values)


def _pick(choose: Any, a: datetime | None, b: datetime | None) -> datetime | None:
    present = [v for v in (a, b) if v is not None]
    return choose(present) if present else None


def _int_label(value: str | None) -> int | None:
    # cache_config_info stringifies every field; unset ones read "None".
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _bool_label(value: str | None) -> bool | None:
    return {"true": True, "false": False}.get((value or "").strip().lower())


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _unix_ns(ts: datetime) -> int:
    return (ts - _EPOCH) // timedelta(microseconds=1) * 1_000


# ---------------------------------------------------------------------------- SLO targets
# models/data/slo_targets.yaml seeds slo_targets on a database's first start
# (ledger.efficiency.seed_slo_targets_if_empty, rows with source 'config'); after that the table
# is the owner, and the admin Deployments page edits it here (rows with source 'ui'). Every
# target is shown and chosen by its name and what it judges (objective, route, stage,
# percentile), never by target_id. Every write records its change in slo_target_changes in
# the same transaction (who, when, the values before and after as JSON text); a refused write
# leaves neither. The seed only runs while both tables are empty, so a removed target stays
# removed; restore_bundled_slo_targets brings the seed file's objectives back on request.

_latency_buckets = sa.table("mart_latency_buckets", sa.column("route", sa.String))

#: The columns of a version that an audit row's old_values / new_values hold (JSON text), as
#: ledger.efficiency.seed_slo_targets_if_empty writes them too.
_SLO_VALUE_COLUMNS = (
    "route", "app", "environment", "stage", "percentile", "target_s", "effective_from", "note",
    "source",
)  # fmt: skip


def _describe_slo(
    route: str,
    stage: str,
    percentile: float,
    target_s: float,
    app: str | None,
    environment: str | None,
) -> str:
    only = "".join(f" {w}={v}" for w, v in (("app", app), ("env", environment)) if v)
    return f"{route} {stage} p{percentile * 100:g} ≤ {target_s:g} s{only}"


@dataclass(frozen=True, slots=True)
class SloTargetRow:
    """The version of an objective in effect now (its latest), as the admin page shows it."""

    objective: str
    route: str
    stage: str
    percentile: float  # a share, 0 < p <= 1 (0.95 = p95), as stored
    target_s: float
    app: str | None
    environment: str | None
    effective_from: datetime
    note: str | None
    source: str  # 'config' (the seed file) or 'ui'
    versions: int  # how many versions the objective has

    def describe(self) -> str:
        """'/answer ttft p95 ≤ 0.5 s' (plus the app or environment when it is limited to one)."""
        return _describe_slo(
            self.route, self.stage, self.percentile, self.target_s, self.app, self.environment
        )


@dataclass(frozen=True, slots=True)
class SloTargetChange:
    """One row of the SLO targets' audit trail. ``old`` and ``new`` are the version's values
    (route, stage, percentile as a share, target_s, app, environment, effective_from as ISO
    text, note, source; a removal's ``old`` adds ``versions``), None where the action has none:
    no ``old`` for seeded and added, no ``new`` for removed."""

    change_id: int
    changed_at: datetime
    changed_by: str
    action: str  # 'seeded', 'added', 'changed' or 'removed'
    objective: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None

    @staticmethod
    def describe_values(values: dict[str, Any] | None) -> str:
        """'/answer ttft p95 ≤ 0.5 s (note)', or '' for no values."""
        if not values:
            return ""
        text = _describe_slo(
            values["route"], values["stage"], values["percentile"], values["target_s"],
            values.get("app"), values.get("environment"),
        )  # fmt: skip
        return text + (f" ({values['note']})" if values.get("note") else "")


@dataclass(frozen=True, slots=True)
class SloChangePage:
    """One page of the SLO audit trail, newest first: ``total`` rows in all, these from
    ``offset``."""

    changes: list[SloTargetChange]
    offset: int
    limit: int
    total: int


def _slo_values(row: Any) -> dict[str, Any]:
    """A version's audit values from a row (mapping) of slo_targets."""
    out = {name: row[name] for name in _SLO_VALUE_COLUMNS}
    out["effective_from"] = out["effective_from"].astimezone(UTC).isoformat()
    return out


def _record_slo_change(
    tx: Transaction,
    changed_by: str,
    action: str,
    objective: str,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
) -> None:
    tx.run(
        sa.insert(slo_target_changes).values(
            changed_by=changed_by,
            action=action,
            objective=objective,
            old_values=None if old is None else json.dumps(old, sort_keys=True),
            new_values=None if new is None else json.dumps(new, sort_keys=True),
        )
    )


def _who(changed_by: str) -> str:
    who = str(changed_by or "").strip()
    if not who:
        raise SloTargetsError("changed_by: say who makes the change (the admin's name)")
    return who


def _latest_version(tx: Transaction, objective: str) -> tuple[int, dict[str, Any], int] | None:
    """(target_id, audit values, number of versions) of an objective's latest version."""
    t = slo_targets
    stmt = (
        sa.select(
            t.c.target_id, *[t.c[name] for name in _SLO_VALUE_COLUMNS],
            sa.func.count().over().label("versions"),
        )
        .where(t.c.objective == objective)
        .order_by(t.c.effective_from.desc())
        .limit(1)
    )  # fmt: skip
    row = tx.run(stmt).fetchone()
    if row is None:
        return None
    values = _slo_values(dict(zip(("target_id", *_SLO_VALUE_COLUMNS), row, strict=False)))
    return int(row[0]), values, int(row[-1])


def list_slo_targets(storage: Storage) -> list[SloTargetRow]:
    """Each objective's latest version, by objective name."""
    t = slo_targets
    c = t.c
    versions = (
        sa.select(
            c.objective, c.route, c.stage, c.percentile, c.target_s, c.app, c.environment,
            c.effective_from, c.note, c.source,
            sa.func.row_number()
            .over(partition_by=c.objective, order_by=c.effective_from.desc())
            .label("newest"),
            sa.func.count().over(partition_by=c.objective).label("versions"),
        )
    ).subquery()  # fmt: skip
    v = versions.c
    rows = storage.select(
        sa.select(*[col for col in v if col.name != "newest"])
        .where(v.newest == 1)
        .order_by(v.objective)
    )
    return [SloTargetRow(*row[:10], int(row[10])) for row in rows]


def known_routes(storage: Storage) -> list[str]:
    """Routes with latency data (mart_latency_buckets) or a target already: what an SLO target
    may name without being confirmed as a new route."""
    t = slo_targets
    seen = storage.select(sa.select(_latency_buckets.c.route).distinct())
    targets = storage.select(sa.select(t.c.route).distinct())
    return sorted({r for (r,) in seen if r} | {r for (r,) in targets if r})


def save_slo_target(
    storage: Storage,
    *,
    objective: str,
    route: str,
    stage: str,
    percentile: float | str,
    target_s: float | str,
    changed_by: str,
    app: str | None = None,
    environment: str | None = None,
    note: str | None = None,
    new_route: bool = False,
) -> str:
    """Add an objective, or change its latest version in place (the page judges at query time,
    so a change applies to every hour that version covers); returns 'added', 'changed', or
    'unchanged' when the values are those stored already (nothing written, no audit row).

    ``percentile`` is a percent here, 0 < p <= 100 (95 = p95), as an admin types it; the table
    holds the share. ``route`` must be a route with latency data or a target already, a LIKE
    pattern ('/%'), or, with ``new_route``, a new route that starts with '/'. ``changed_by``
    (the signed-in admin's name) goes into the audit trail with the values before and after.
    Refused with a one-line SloTargetsError, nothing written, otherwise."""
    who = _who(changed_by)
    try:
        pct = _number(percentile, "percentile")
        if not 0 < pct <= 100:
            raise ValueError(f"percentile must be in (0, 100] (95 for p95), got {pct:g}")
        entry = {
            "objective": objective,
            "route": route,
            "stage": stage,
            "percentile": pct / 100,
            "target_s": _number(target_s, "target (seconds)"),
            "app": (app or "").strip() or None,
            "environment": (environment or "").strip() or None,
            "note": (note or "").strip() or None,
        }
        target = parse_slo_target(entry, datetime(2000, 1, 1, tzinfo=UTC))
    except ValueError as exc:
        raise SloTargetsError(f"SLO target {str(objective or '').strip()!r}: {exc}") from None
    if not target.route.startswith("/"):
        raise SloTargetsError(f"SLO target {target.objective!r}: a route starts with '/'")
    pattern = "%" in target.route or "_" in target.route
    if not pattern and not new_route and target.route not in known_routes(storage):
        raise SloTargetsError(
            f"SLO target {target.objective!r}: route {target.route} has no traffic or target "
            "yet; check the name, or confirm it as a new route"
        )
    t = slo_targets
    values = {
        "route": target.route,
        "stage": target.stage,
        "percentile": target.percentile,
        "target_s": target.target_s,
        "app": target.app,
        "environment": target.environment,
        "note": target.note,
        "source": "ui",
    }

    def op(tx: Transaction) -> str:
        latest = _latest_version(tx, target.objective)
        if latest is None:
            row = values | {"effective_from": target.effective_from}
            tx.run(sa.insert(t).values(objective=target.objective, **row))
            _record_slo_change(tx, who, "added", target.objective, None, _slo_values(row))
            return "added"
        target_id, old, _versions = latest
        new = old | {k: v for k, v in values.items() if k != "source"}
        if new == old:
            return "unchanged"
        new["source"] = "ui"
        tx.run(sa.update(t).where(t.c.target_id == target_id).values(**values))
        _record_slo_change(tx, who, "changed", target.objective, old, new)
        return "changed"

    return storage.write(op)


def remove_slo_target(storage: Storage, objective: str, *, changed_by: str) -> int:
    """Remove an objective (every version of it); returns the versions removed. The audit trail
    gets one 'removed' row with the latest version's values and how many versions went. An
    unknown name is refused, nothing written."""
    who = _who(changed_by)
    name = str(objective or "").strip()
    t = slo_targets

    def op(tx: Transaction) -> int:
        latest = _latest_version(tx, name)
        if latest is None:
            raise SloTargetsError(f"no SLO target named {name!r}")
        _target_id, old, count = latest
        tx.run(sa.delete(t).where(t.c.objective == name))
        _record_slo_change(tx, who, "removed", name, old | {"versions": count}, None)
        return count

    return storage.write(op)


def restore_bundled_slo_targets(
    storage: Storage, *, changed_by: str, path: str | Path | None = None
) -> int:
    """Put back the seed file's objectives (models/data/slo_targets.yaml unless ``path``) that
    the table lacks, every version of each, with source 'config'; returns the versions added
    (0 when every objective of the file is there). Objectives present are left as they are.
    Each version gets a 'seeded' audit row under ``changed_by``. The file is validated first."""
    who = _who(changed_by)
    targets = load_slo_targets(bundled_slo_targets_file() if path is None else path)
    t = slo_targets

    def op(tx: Transaction) -> int:
        present = {r[0] for r in tx.run(sa.select(t.c.objective).distinct()).fetchall()}
        missing = [x for x in targets if x.objective not in present]
        for x in missing:
            row = {
                "route": x.route, "app": x.app, "environment": x.environment, "stage": x.stage,
                "percentile": x.percentile, "target_s": x.target_s,
                "effective_from": x.effective_from, "note": x.note, "source": "config",
            }  # fmt: skip
            tx.run(sa.insert(t).values(objective=x.objective, **row))
            _record_slo_change(tx, who, "seeded", x.objective, None, _slo_values(row))
        return len(missing)

    return storage.write(op)


def slo_changes_page(storage: Storage, offset: int = 0, limit: int = 20) -> SloChangePage:
    """One page of the SLO targets' audit trail, newest change first, and the total number of
    changes (the admin page pages through it on the server). An offset past the end gives the
    last page."""
    c = slo_target_changes.c
    columns = (
        c.change_id, c.changed_at, c.changed_by, c.action, c.objective, c.old_values,
        c.new_values,
    )  # fmt: skip
    rows, start, total = audit_page(
        storage, slo_target_changes, columns, offset, limit, SloTargetsError
    )
    changes = [
        SloTargetChange(
            int(change_id), changed_at, changed_by, action, objective,
            None if old is None else json.loads(old),
            None if new is None else json.loads(new),
        )
        for change_id, changed_at, changed_by, action, objective, old, new in rows
    ]  # fmt: skip
    return SloChangePage(changes, start, limit, total)


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or value is None or value == "":
        raise ValueError(f"{field} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field} must be a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"{field} must be a finite number, got {value!r}")
    return number
