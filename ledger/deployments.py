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

The SLO targets the admin Deployments page also edits are ledger/slo_targets.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from ledger.schema import deployments as deployments_table
from models.deployment_config import (
    Deployment,
    DeploymentConfigError,
    normalize_gpu_model,
    parse_idle_policy,
)
from models.idle_policy import IdlePolicy

if TYPE_CHECKING:
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
