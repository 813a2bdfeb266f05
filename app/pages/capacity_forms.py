"""The Capacity page's forms (app/pages/capacity.py): the workload profile as editable grid rows
with where each figure came from, and the knob, SLO and candidate fields turned into the
mappings models/capacity/plan.py validates (plan_from_mapping). Plain functions of values: no
Dash callbacks here (the page module owns them, so the sign-in guard checks their role).

An edited profile cell becomes *assumed* (issue #13: measured and assumed values stay visibly
apart); :func:`edited_profile` applies a row's edits to the app's profile.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any

from app import palette
from inferledger.core.errors import BadInputError
from models.capacity.profile import edit_app
from models.capacity.types import AppProfile, SloClass, Source, WorkloadProfile

#: Grid column -> (header, the AppProfile field whose source it shows, editable, format).
PROFILE_FIELDS: dict[str, tuple[str, str, bool]] = {
    "app": ("App", "app", False),
    "model": ("Model", "model", True),
    "slo_class": ("Class", "slo_class", True),
    "peak_rph": ("Requests at peak hour", "hourly_requests", True),
    "mean_rph": ("Mean requests / h", "hourly_requests", True),
    "burstiness": ("Burstiness (gamma shape)", "burstiness", True),
    "mean_prompt": ("Mean prompt tokens", "lengths", True),
    "mean_output": ("Mean output tokens", "lengths", True),
    "prefix_hit_pct": ("Prefix hit %", "prefix_hit_rate", True),
    "acceptance_pct": ("Acceptance %", "acceptance_rate", True),
}
#: Figures compared as numbers (a cell equal to the loaded one within this is not an edit).
NUMERIC = (
    "peak_rph",
    "mean_rph",
    "burstiness",
    "mean_prompt",
    "mean_output",
    "prefix_hit_pct",
    "acceptance_pct",
)
REL_TOL = 1e-6
#: A source badge's (text, background) colours.
SOURCE_COLOURS = {
    Source.MEASURED.value: palette.BADGE_GOOD,
    Source.CALIBRATED.value: palette.BADGE_INFO,
    Source.ASSUMED.value: palette.BADGE_CAUTION,
}


def _rounded(value: float, digits: int = 2) -> float:
    return round(float(value), digits)


def _source(app: AppProfile, field: str) -> str:
    source = app.sources.get(field)
    return Source(source).value if source is not None else Source.ASSUMED.value


def profile_rows(profile: WorkloadProfile) -> list[dict[str, Any]]:
    """One grid row per app: its figures and, per column, `src_<column>` (its source)."""
    rows = []
    for a in profile.apps:
        row: dict[str, Any] = {
            "app": a.app,
            "model": a.model,
            "slo_class": SloClass(a.slo_class).value,
            "peak_rph": _rounded(max(a.hourly_requests)),
            "mean_rph": _rounded(fmean(a.hourly_requests)),
            "burstiness": _rounded(a.burstiness, 3),
            "mean_prompt": _rounded(fmean(p for p, _ in a.lengths), 1),
            "mean_output": _rounded(fmean(o for _, o in a.lengths), 1),
            "prefix_hit_pct": _rounded(a.prefix_hit_rate * 100, 1),
            "acceptance_pct": None
            if a.acceptance_rate is None
            else _rounded(a.acceptance_rate * 100, 1),
        }
        for column, (_, field, _) in PROFILE_FIELDS.items():
            row[f"src_{column}"] = _source(a, field)
        rows.append(row)
    return rows


def source_style(column: str) -> dict[str, Any]:
    """A grid column's cellStyle: the badge colours of the cell's source."""
    return {
        "styleConditions": [
            {
                "condition": f"params.data.src_{column} === '{source}'",
                "style": {"color": ink, "backgroundColor": fill},
            }
            for source, (ink, fill) in SOURCE_COLOURS.items()
        ]
    }


def profile_columns() -> list[dict[str, Any]]:
    columns = []
    for column, (header, _, editable) in PROFILE_FIELDS.items():
        d: dict[str, Any] = {
            "field": column,
            "headerName": header,
            "editable": editable,
            "cellStyle": source_style(column),
            "tooltipField": f"src_{column}",
            "minWidth": 90,
        }
        if column in NUMERIC:
            d["type"] = "numericColumn"
            d["cellEditor"] = "agNumberCellEditor"
        if column == "slo_class":
            d["cellEditor"] = "agSelectCellEditor"
            d["cellEditorParams"] = {"values": [c.value for c in SloClass]}
        columns.append(d)
    return columns


def mark_edited(rows: list[dict[str, Any]], changes: Sequence[Mapping[str, Any]]) -> bool:
    """Mark the cells a user changed as assumed (in place); True when any was."""
    marked = False
    for change in changes or ():
        column, index = change.get("colId"), change.get("rowIndex")
        in_grid = column in PROFILE_FIELDS and isinstance(index, int) and 0 <= index < len(rows)
        if in_grid and change.get("oldValue") != change.get("value"):
            rows[index][f"src_{column}"] = Source.ASSUMED.value
            marked = True
    return marked


def _number(value: Any, where: str, *, allow_none: bool = False) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if allow_none:
            return None
        raise BadInputError(f"{where}: a number is needed")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise BadInputError(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(out):
        raise BadInputError(f"{where}: {value!r} is not a finite number")
    return out


def _changed(new: Any, old: Any) -> bool:
    if new is None or old is None:
        return new is not old
    return not math.isclose(float(new), float(old), rel_tol=REL_TOL, abs_tol=1e-9)


def _scaled_lengths(
    lengths: Sequence[tuple[int, int]], index: int, factor: float
) -> tuple[tuple[int, int], ...]:
    out = []
    for pair in lengths:
        values = list(pair)
        values[index] = max(1, round(values[index] * factor))
        out.append((values[0], values[1]))
    return tuple(out)


def app_changes(a: AppProfile, row: Mapping[str, Any], loaded: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of profile.edit_app for a row's edits (the cells that differ from the loaded
    row): a new peak or mean scales the app's weekly shape (and its history, so the forecast
    follows); a new mean prompt or output length scales every sample."""
    where = f"app {a.app!r}"
    changes: dict[str, Any] = {}
    for column in ("model", "slo_class"):
        if (row.get(column) or "") != (loaded.get(column) or ""):
            changes[column] = str(row.get(column) or "").strip()
    numbers = {
        c: _number(row.get(c), f"{where}: {PROFILE_FIELDS[c][0]}", allow_none=c == "acceptance_pct")
        for c in NUMERIC
    }
    edited = {c for c in NUMERIC if _changed(numbers[c], loaded.get(c))}
    if {"peak_rph", "mean_rph"} <= edited:
        raise BadInputError(
            f"{where}: edit either requests at peak hour or mean requests per hour, not both "
            "(the other follows: the weekly shape is kept)"
        )
    for column in ("peak_rph", "mean_rph"):
        if column in edited:
            old = max(a.hourly_requests) if column == "peak_rph" else fmean(a.hourly_requests)
            new = numbers[column]
            if new is None or new < 0:
                raise BadInputError(f"{where}: {PROFILE_FIELDS[column][0]} must be >= 0")
            if old <= 0:
                raise BadInputError(
                    f"{where}: no traffic measured to scale; use the traffic knob instead"
                )
            factor = new / old
            changes["hourly_requests"] = [v * factor for v in a.hourly_requests]
            changes["history"] = [v * factor for v in a.history]
    lengths = a.lengths
    for column, index in (("mean_prompt", 0), ("mean_output", 1)):
        if column in edited:
            new = numbers[column]
            if new is None or new < 1:
                raise BadInputError(f"{where}: {PROFILE_FIELDS[column][0]} must be >= 1")
            old = fmean(pair[index] for pair in lengths)
            lengths = _scaled_lengths(lengths, index, new / old)
    if lengths is not a.lengths:
        changes["lengths"] = [list(pair) for pair in lengths]
        shortest = min(p for p, _ in lengths)
        if a.prefix_len > shortest:  # a prefix longer than a prompt cannot be shared
            changes["prefix_len"] = shortest
    if "burstiness" in edited:
        changes["burstiness"] = numbers["burstiness"]
    if "prefix_hit_pct" in edited:
        pct = numbers["prefix_hit_pct"]
        if pct is None or not 0 <= pct < 100:
            raise BadInputError(f"{where}: prefix hit % must be in [0, 100)")
        changes["prefix_hit_rate"] = pct / 100
    if "acceptance_pct" in edited:
        pct = numbers["acceptance_pct"]
        if pct is not None and not 0 < pct <= 100:
            raise BadInputError(f"{where}: acceptance % must be in (0, 100], or empty")
        changes["acceptance_rate"] = None if pct is None else pct / 100
    return changes


def edited_profile(
    profile: WorkloadProfile,
    rows: Sequence[Mapping[str, Any]],
    loaded: Sequence[Mapping[str, Any]],
) -> WorkloadProfile:
    """`profile` with the grid's edits: `rows` as the grid holds them, `loaded` as first shown
    (profile_rows of the same profile). Edited figures become assumed (profile.edit_app)."""
    by_app = {r.get("app"): r for r in rows}
    before = {r.get("app"): r for r in loaded}
    for a in profile.apps:
        row, old = by_app.get(a.app), before.get(a.app)
        if row is not None and old is not None:
            changes = app_changes(a, row, old)
            if changes:
                profile = edit_app(profile, a.app, changes)
    return profile


# ------------------------------------------------------------------------- knobs, SLOs, candidates
def _factor(value: Any, where: str, default: float = 1.0) -> float:
    out = _number(value, where, allow_none=True)
    return default if out is None else out


def per_app_factors(text: str | None) -> dict[str, float]:
    """ "chat=1.5, rag=2" -> {"chat": 1.5, "rag": 2.0}."""
    out: dict[str, float] = {}
    for part in (text or "").replace(";", ",").split(","):
        if not part.strip():
            continue
        app, sep, value = part.partition("=")
        if not sep or not app.strip():
            raise BadInputError(
                f"traffic per app: write app=factor, comma-separated (got {part.strip()!r})"
            )
        out[app.strip()] = float(_number(value, f"traffic per app {app.strip()!r}") or 0.0)
    return out


def knobs_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """The knob fields as knobs_from_mapping reads them (models/capacity/knobs.py)."""
    out: dict[str, Any] = {
        "traffic": _factor(values.get("traffic"), "traffic ×"),
        "traffic_by_app": per_app_factors(values.get("traffic_by_app")),
        "context": _factor(values.get("context"), "context ×"),
        "output": _factor(values.get("output"), "output ×"),
        "prefix_hit_delta": _factor(
            values.get("prefix_hit_delta"), "prefix hit change (points)", 0.0
        )
        / 100,
        "remove_apps": list(values.get("remove_apps") or []),
    }
    burst = _number(values.get("burst_factor"), "burst ×", allow_none=True)
    if burst is not None and burst != 1:
        minutes = _number(values.get("burst_minutes"), "burst minutes")
        out["burst"] = {"factor": burst, "minutes": minutes}
    if values.get("move_app"):
        share = _number(values.get("move_share"), "move: share %")
        target = str(values.get("move_to") or "").strip()
        if not target:
            raise BadInputError("move: name the model or hosted API (hosted:NAME) to move to")
        move: dict[str, Any] = {"app": values["move_app"], "share": (share or 0.0) / 100}
        if target.startswith("hosted:"):
            move["hosted"] = target.removeprefix("hosted:").strip()
        else:
            move["to_model"] = target
        out["moves"] = [move]
    return out


SLO_METRICS = ("ttft_p95_ms", "itl_p95_ms", "e2e_p95_ms")


def slos_mapping(values: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """{"interactive": {"ttft_p95_ms": .., ...}, "batch": {...}} from fields named
    "<class>-<metric>" (an empty field: no target on that metric; a class with none is left
    out, and its apps are not planned)."""
    out: dict[str, dict[str, float | None]] = {}
    for cls in SloClass:
        targets = {
            m: _number(values.get(f"{cls.value}-{m}"), f"SLO {cls.value} {m}", allow_none=True)
            for m in SLO_METRICS
        }
        if any(v is not None for v in targets.values()):  # no target at all: no such pool
            out[cls.value] = targets
    if not out:
        raise BadInputError("SLOs: set at least one target (p95 TTFT, ITL or E2E)")
    return out


def int_list(text: str | None, where: str) -> list[int | None]:
    """ "default, 128, 256" -> [None, 128, 256] (default: vLLM's own value)."""
    out: list[int | None] = []
    for part in (text or "").replace(";", ",").split(","):
        word = part.strip().lower()
        if not word:
            continue
        if word in ("default", "auto", "none"):
            out.append(None)
            continue
        try:
            value = int(word)
        except ValueError:
            raise BadInputError(f"{where}: {part.strip()!r} is not a whole number") from None
        if value < 1:
            raise BadInputError(f"{where}: values must be >= 1, got {value}")
        out.append(value)
    return out or [None]


def space_mapping(values: Mapping[str, Any], prices: Mapping[str, float | None]) -> dict[str, Any]:
    """The candidate fields as space_from_mapping reads them (models/capacity/candidates.py):
    prices are the what-if price where typed, else the price book's."""
    gpus = list(values.get("gpus") or [])
    if not gpus:
        raise BadInputError("candidates: choose at least one GPU")
    chosen: dict[str, float] = {}
    for gpu in gpus:
        price = prices.get(gpu)
        if price is None:
            raise BadInputError(
                f"candidates: no price per GPU-hour for {gpu}: type a what-if price"
            )
        chosen[gpu] = price
    caching = list(values.get("prefix_caching") or [])
    return {
        "gpus": gpus,
        "tensor_parallel_sizes": [int(v) for v in values.get("tensor_parallel_sizes") or []],
        "dtypes": list(values.get("dtypes") or []),
        "kv_cache_dtypes": list(values.get("kv_cache_dtypes") or []),
        "max_num_seqs": int_list(values.get("max_num_seqs"), "max_num_seqs"),
        "max_num_batched_tokens": int_list(
            values.get("max_num_batched_tokens"), "max_num_batched_tokens"
        ),
        "prefix_caching": [v == "on" for v in caching],
        "prices": chosen,
    }


def what_if_prices(
    gpus: Sequence[str], book: Mapping[str, float | None], typed: Sequence[Any]
) -> dict[str, float | None]:
    """Per GPU: the typed what-if price when there is one (> 0), else the price book's."""
    out: dict[str, float | None] = {}
    for gpu, value in zip(gpus, typed, strict=True):
        price = _number(value, f"what-if price for {gpu}", allow_none=True)
        if price is not None and price <= 0:
            raise BadInputError(f"what-if price for {gpu} must be > 0 $/GPU-hour")
        out[gpu] = price if price is not None else book.get(gpu)
    return out
