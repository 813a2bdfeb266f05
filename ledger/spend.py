"""The logic behind the Spend page: spend over time by a dimension (the top keys, the rest as
'(other)'), the team -> app -> route treemap and its drill-down (a click narrows the global
filters, "Up one level" widens them), and the spend summary with its idle-policy line. The
reads run the named queries in sql/queries (spend_*.sql), bucketed as the Overview buckets
(ledger/overview.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from inferledger.core.times import as_utc
from ledger.overview import bucket_for, bucket_starts, spend_kpis, usd
from ledger.queries import Filters, QueryError, run
from models import idle_policy

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

#: Dimensions the spend chart offers.
SPEND_DIMENSIONS = ("team", "app", "route", "model", "stage", "environment")
OTHER = "(other)"


def spend_over_time(storage: Storage, filters: Filters, dim: str, top: int = 8) -> pa.Table:
    """Spend per bucket (hour or day, by range length) and key of `dim`: the `top` keys by
    spend, the rest summed as '(other)', every bucket present for every key (0 when none)."""
    if dim not in SPEND_DIMENSIONS:
        raise QueryError(f"spend: dimension must be one of {', '.join(SPEND_DIMENSIONS)}")
    bucket = bucket_for(filters)
    rows = run(storage, "spend_over_time", filters, dim=dim, bucket=bucket).to_pylist()
    if not rows:
        return pa.table({"bucket": [], "key": [], "cost": [], "requests": []})
    totals: dict[str, float] = {}
    for r in rows:
        totals[r["key"]] = totals.get(r["key"], 0.0) + r["cost"]
    ranked = sorted(totals, key=lambda k: (-totals[k], k))
    kept = ranked[:top] if len(ranked) > top + 1 else ranked
    keys = kept + ([OTHER] if len(kept) < len(ranked) else [])
    cells: dict[tuple[datetime, str], list[float]] = {}
    for r in rows:
        key = r["key"] if r["key"] in kept else OTHER
        cell = cells.setdefault((as_utc(r["bucket"]), key), [0.0, 0.0])
        cell[0] += r["cost"]
        cell[1] += float(r["requests"] or 0)
    starts = bucket_starts(filters.start, filters.end, bucket)
    grid = [(b, k) for b in starts for k in keys]
    return pa.table(
        {
            "bucket": pa.array([b for b, _ in grid], pa.timestamp("us", tz="UTC")),
            "key": [k for _, k in grid],
            "cost": [cells.get(c, [0.0, 0.0])[0] for c in grid],
            "requests": [int(cells.get(c, [0.0, 0.0])[1]) for c in grid],
        }
    )


def spend_tree(storage: Storage, filters: Filters) -> pa.Table:
    """Spend and requests per team → app → route (stages summed), for the treemap; the
    unshared idle is team '(idle)'."""
    rows = run(storage, "spend_hierarchy", filters).to_pylist()
    sums: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        cell = sums.setdefault((r["team"], r["app"], r["route"]), [0.0, 0.0])
        cell[0] += r["cost"]
        cell[1] += float(r["requests"] or 0)
    keys = sorted(sums, key=lambda k: (-sums[k][0], k))
    return pa.table(
        {
            "team": [k[0] for k in keys],
            "app": [k[1] for k in keys],
            "route": [k[2] for k in keys],
            "cost": [sums[k][0] for k in keys],
            "requests": [int(sums[k][1]) for k in keys],
        },
        schema=pa.schema(
            [
                ("team", pa.string()),
                ("app", pa.string()),
                ("route", pa.string()),
                ("cost", pa.float64()),
                ("requests", pa.int64()),
            ]
        ),
    )


#: Treemap node ids: level, then the names down to it, joined by this (never in a name we
#: drill on: names come from span attributes, and a node whose name holds it is not drillable).
NODE_SEP = "\x1f"
DRILL_LEVELS = ("team", "app", "route")
NOT_DRILLABLE = ("(idle)", "(no team)", "(no app)", "(no route)")


def node_id(*names: str) -> str:
    return NODE_SEP.join(names)


def drill_target(node: str | None) -> dict[str, str] | None:
    """The filters a click on treemap node `node` narrows to ({'team': .., 'app': ..}), or None
    when the node is not a real team/app/route (the idle line, a missing attribute)."""
    if not node:
        return None
    names = node.split(NODE_SEP)
    if len(names) > len(DRILL_LEVELS) or any(n in NOT_DRILLABLE or not n for n in names):
        return None
    return dict(zip(DRILL_LEVELS, names, strict=False))


def drill_up(values: dict[str, str | None]) -> dict[str, str | None]:
    """The team/app/route filters one level up: the deepest one that is set is cleared."""
    out = {level: values.get(level) for level in DRILL_LEVELS}
    for level in reversed(DRILL_LEVELS):
        if out[level]:
            out[level] = None
            break
    return out


def tree_nodes(leaves: pa.Table) -> pa.Table:
    """The treemap's nodes from spend_tree's rows: one per team, team/app and team/app/route,
    each with its id (see node_id), parent id, label, level, spend and requests (sums)."""
    nodes: dict[str, list[Any]] = {}
    for r in leaves.to_pylist():
        path = (r["team"], r["app"], r["route"])
        for depth in range(1, 4):
            nid = node_id(*path[:depth])
            parent = node_id(*path[: depth - 1]) if depth > 1 else ""
            node = nodes.setdefault(nid, [parent, path[depth - 1], DRILL_LEVELS[depth - 1], 0.0, 0])
            node[3] += r["cost"]
            node[4] += r["requests"]
    ids = list(nodes)
    return pa.table(
        {
            "id": ids,
            "parent": [nodes[i][0] for i in ids],
            "label": [nodes[i][1] for i in ids],
            "level": [nodes[i][2] for i in ids],
            "cost": [nodes[i][3] for i in ids],
            "requests": [nodes[i][4] for i in ids],
        }
    )


@dataclass(frozen=True, slots=True)
class SpendSummary:
    spend: float
    allocated: float  # charged to requests (and services, review): spend − unshared idle
    idle_cost: float  # all idle: unshared + shared into requests
    unshared_idle_cost: float
    requests: int
    explanation: str
    # coverage (docs/cost-model.md): spend estimated for lack of GPU metrics, and the requests
    # estimated or not costable at all, for the page's "estimated" and "unpriced" marks
    estimated_cost: float = 0.0
    estimated_requests: int = 0
    unpriced_requests: int = 0


def spend_summary(storage: Storage, filters: Filters) -> SpendSummary:
    k = spend_kpis(storage, filters)
    return SpendSummary(
        spend=k["cost"],
        allocated=k["cost"] - k["unshared_idle_cost"],
        idle_cost=k["idle_cost"],
        unshared_idle_cost=k["unshared_idle_cost"],
        requests=int(k["requests"]),
        explanation=idle_explanation(
            filters.policy, k["cost"], k["unshared_idle_cost"], k["idle_cost"]
        ),
        estimated_cost=float(k["estimated_cost"]),
        estimated_requests=int(k["estimated_requests"]),
        unpriced_requests=int(k["unpriced_requests"]),
    )


def idle_explanation(policy: str, spend: float, unshared_idle: float, idle: float) -> str:
    """One line: what the idle policy does and how much idle is left unshared."""
    text = idle_policy.DESCRIPTION.get(policy, policy)
    label = idle_policy.LABEL.get(policy, policy)
    share = f" ({unshared_idle / spend:.0%} of spend)" if spend else ""
    shared = idle - unshared_idle
    return (
        f"Idle cost — {label}: {text}. Unshared idle: {usd(unshared_idle)}{share}, shown as "
        f"'(idle)'; idle charged to requests: {usd(shared)}."
    )
