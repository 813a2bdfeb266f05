"""The capacity planner's scenario knobs (issue #13): typed in (YAML/JSON mappings), written
back, and applied to a workload profile (apply_knobs); the moves to a hosted API it leaves for
the planner to price (hosted_moves). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np

from inferledger.core.errors import BadInputError
from models.capacity.profile import (
    app_from_mapping,
    app_to_mapping,
    in_catalog,
    mapping,
    model_name,
    names,
    number,
    unknown,
)
from models.capacity.types import AppProfile, Burst, Knobs, Move, WorkloadProfile

#: the highest prefix hit rate a knob can reach (a prompt always recomputes some tokens)
MAX_PREFIX_HIT = 0.95


# --- knobs ----------------------------------------------------------------------------------


def _move(where: str, raw: Any, *, fallback: bool) -> Move:
    data = mapping(where, raw)
    unknown(where, data, ("app", "share", "to_model") if fallback else tuple(
        f.name for f in fields(Move)
    ))  # fmt: skip
    app = data.get("app")
    if not isinstance(app, str) or not app.strip():
        raise BadInputError(f"{where}: app must be a non-empty name, got {app!r}")
    share = number(f"{where}: share", data.get("share"), 0, above=True)
    if share > 1:
        raise BadInputError(f"{where}: share must be <= 1, got {share}")
    to_model, hosted = data.get("to_model"), data.get("hosted")
    if fallback:
        if to_model is not None and (not isinstance(to_model, str) or not to_model.strip()):
            raise BadInputError(f"{where}: to_model must be a model name, got {to_model!r}")
        return Move(app, share, to_model=to_model)
    if (to_model is None) == (hosted is None):
        raise BadInputError(f"{where}: give exactly one of to_model or hosted")
    for key, value in (("to_model", to_model), ("hosted", hosted)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise BadInputError(f"{where}: {key} must be a model name, got {value!r}")
    return Move(app, share, to_model=to_model, hosted=hosted)


def knobs_from_mapping(data: Any, where: str = "knobs") -> Knobs:
    """Knobs from YAML/JSON-shaped data; every field optional (see Knobs). moves: [{app, share,
    to_model | hosted}]; fallback: [{app, share, to_model}] (to_model may be left out when
    the profile has a single self-hosted model); burst: {factor, minutes}."""
    data = mapping(where, data or {})
    known = {f.name for f in fields(Knobs)}
    unknown(where, data, known)
    values: dict[str, Any] = {}
    for key in ("traffic", "context", "output"):
        if key in data:
            values[key] = number(f"{where}: {key}", data[key], 0, above=True)
    if "prefix_hit_delta" in data:
        delta = number(f"{where}: prefix_hit_delta", data["prefix_hit_delta"])
        if not -1 <= delta <= 1:
            raise BadInputError(f"{where}: prefix_hit_delta must be in [-1, 1], got {delta}")
        values["prefix_hit_delta"] = delta
    if data.get("traffic_by_app"):
        by_app = mapping(f"{where}: traffic_by_app", data["traffic_by_app"])
        values["traffic_by_app"] = {
            str(k): number(f"{where}: traffic_by_app: {k}", v, 0, above=True)
            for k, v in by_app.items()
        }
    values["remove_apps"] = names(f"{where}: remove_apps", data.get("remove_apps"))
    values["add_apps"] = tuple(
        app_from_mapping(a, f"{where}: add_apps[{i}]")
        for i, a in enumerate(_list(f"{where}: add_apps", data.get("add_apps")))
    )
    values["moves"] = tuple(
        _move(f"{where}: moves[{i}]", m, fallback=False)
        for i, m in enumerate(_list(f"{where}: moves", data.get("moves")))
    )
    falls = []
    for i, raw in enumerate(_list(f"{where}: fallback", data.get("fallback"))):
        move = _move(f"{where}: fallback[{i}]", raw, fallback=True)
        falls.append(move if move.to_model is not None else (move.app, move.share))
    values["fallback"] = tuple(falls)
    if data.get("burst") is not None:
        burst = mapping(f"{where}: burst", data["burst"])
        unknown(f"{where}: burst", burst, ("factor", "minutes"))
        values["burst"] = Burst(
            factor=number(f"{where}: burst: factor", burst.get("factor"), 1),
            minutes=number(f"{where}: burst: minutes", burst.get("minutes"), 0, above=True),
        )
    return Knobs(**values)


def _list(where: str, value: Any) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise BadInputError(f"{where} must be a list")
    return value


def knobs_to_mapping(knobs: Knobs) -> dict[str, Any]:
    """JSON-safe, and knobs_from_mapping(knobs_to_mapping(k)) == k."""
    return {
        "traffic": knobs.traffic,
        "traffic_by_app": dict(knobs.traffic_by_app),
        "context": knobs.context,
        "output": knobs.output,
        "prefix_hit_delta": knobs.prefix_hit_delta,
        "remove_apps": list(knobs.remove_apps),
        "add_apps": [app_to_mapping(a) for a in knobs.add_apps],
        "moves": [
            {"app": m.app, "share": m.share}
            | ({"to_model": m.to_model} if m.to_model is not None else {"hosted": m.hosted})
            for m in knobs.moves
        ],
        "fallback": [_fallback_mapping(f) for f in knobs.fallback],
        "burst": None
        if knobs.burst is None
        else {"factor": knobs.burst.factor, "minutes": knobs.burst.minutes},
    }


def _fallback_mapping(entry: Move | tuple[str, float]) -> dict[str, Any]:
    if isinstance(entry, Move):
        return {"app": entry.app, "share": entry.share, "to_model": entry.to_model}
    return {"app": entry[0], "share": entry[1]}


# --- applying knobs -------------------------------------------------------------------------


def _scaled(app: AppProfile, factor: float) -> AppProfile:
    if factor == 1:
        return app
    return replace(
        app,
        hourly_requests=tuple(v * factor for v in app.hourly_requests),
        history=tuple(v * factor for v in app.history),
    )


def _stretch(lengths: tuple[tuple[int, int], ...], prompt: float, output: float) -> tuple:
    return tuple((max(1, round(p * prompt)), max(1, round(o * output))) for p, o in lengths)


def _prefix_hit(app: AppProfile, delta: float) -> AppProfile:
    """prefix_hit_rate + delta (clipped to [0, MAX_PREFIX_HIT]); prefix_len scales by the
    new/old ratio where there was sharing (the same share of requests shares a longer or
    shorter prefix), else becomes round(new rate x mean prompt) (every request shares it);
    capped at the longest prompt - 1."""
    if delta == 0:
        return app
    old = app.prefix_hit_rate
    new = min(max(old + delta, 0.0), MAX_PREFIX_HIT)
    mean_prompt = float(np.mean([p for p, _ in app.lengths]))
    if new == 0:
        length = 0
    elif old > 0 and app.prefix_len > 0:
        length = round(app.prefix_len * new / old)
    else:
        length = round(new * mean_prompt)
    length = min(length, max(p for p, _ in app.lengths) - 1)
    return replace(app, prefix_hit_rate=new, prefix_len=max(0, length))


def _check_apps(where: str, given: Sequence[str], known: set[str]) -> None:
    for name in given:
        if name not in known:
            raise BadInputError(f"knobs: {where}: no app {name!r} in the profile")


def _split(app: AppProfile, share: float, name: str, model: str) -> AppProfile:
    """`share` of an app's traffic as an app of its own (same lengths, same sources)."""
    return replace(_scaled(app, share), app=name, model=model)


def _fallback_target(profile: WorkloadProfile, entry: Move | tuple[str, float]) -> Move:
    if isinstance(entry, Move):
        if entry.to_model is None:
            raise BadInputError(f"knobs: fallback for app {entry.app!r} needs to_model")
        return entry
    app, share = entry
    models = sorted({a.model for a in profile.apps if in_catalog(a.model)})
    if len(models) != 1:
        raise BadInputError(
            f"knobs: fallback for app {app!r}: name to_model (the profile has "
            f"{len(models)} self-hosted models)"
        )
    return Move(app, share, to_model=models[0])


def apply_knobs(profile: WorkloadProfile, knobs: Knobs) -> WorkloadProfile:
    """The profile under the scenario's knobs, in this order: remove_apps; traffic, context,
    output and prefix_hit_delta on the profile's apps; add_apps (taken as typed, not scaled by
    those); traffic_by_app (any app, added ones included); moves and fallback. A move to a
    model leaves (1 - share) of the app and adds "{app}→{model}" with the share; a move to a
    hosted API leaves (1 - share) and the share goes to hosted_moves(); a fallback ADDS
    "{app}→{model} (fallback)" with share of the app's traffic on that self-hosted model
    (the degraded provider still sees the calls that fail over). An app whose traffic moves
    away whole is dropped. Fields a knob changed keep their source (the knobs are recorded
    beside the plan)."""
    present = {a.app for a in profile.apps}
    _check_apps("remove_apps", knobs.remove_apps, present)
    apps = [a for a in profile.apps if a.app not in knobs.remove_apps]
    out = []
    for app in apps:
        app = _scaled(app, knobs.traffic)
        if knobs.context != 1 or knobs.output != 1:
            app = replace(
                app,
                lengths=_stretch(app.lengths, knobs.context, knobs.output),
                prefix_len=round(app.prefix_len * knobs.context),
            )
        out.append(_prefix_hit(app, knobs.prefix_hit_delta))
    for added in knobs.add_apps:
        if any(a.app == added.app for a in out):
            raise BadInputError(f"knobs: add_apps: app {added.app!r} is already in the profile")
        out.append(added)
    known = {a.app for a in out}
    _check_apps("traffic_by_app", list(knobs.traffic_by_app), known)
    out = [_scaled(a, knobs.traffic_by_app.get(a.app, 1.0)) for a in out]
    moved: dict[str, float] = {}
    _check_apps("moves", [m.app for m in knobs.moves], known)
    for m in knobs.moves:
        moved[m.app] = moved.get(m.app, 0.0) + m.share
    for app, total in moved.items():
        if total > 1 + 1e-9:
            raise BadInputError(f"knobs: moves: shares of app {app!r} add up to {total:g} > 1")
    extra: list[AppProfile] = []
    by_name = {a.app: a for a in out}
    for m in knobs.moves:
        if m.to_model is not None:
            target = model_name(m.to_model)
            if not in_catalog(target):
                raise BadInputError(
                    f"knobs: moves: {m.to_model!r} is not in the model catalog "
                    "(a hosted API is moved with hosted:)"
                )
            extra.append(_split(by_name[m.app], m.share, f"{m.app}→{target}", target))
    for entry in knobs.fallback:
        f = _fallback_target(profile, entry)
        _check_apps("fallback", [f.app], known)
        target = model_name(f.to_model or "")
        if not in_catalog(target):
            raise BadInputError(f"knobs: fallback for app {f.app!r}: {target!r} is not self-hosted")
        extra.append(_split(by_name[f.app], f.share, f"{f.app}→{target} (fallback)", target))
    kept = []
    for app in out:
        left = 1.0 - moved.get(app.app, 0.0)
        if left > 1e-9:
            kept.append(_scaled(app, left))
    result = kept + extra
    seen: set[str] = set()
    for app in result:
        if app.app in seen:
            raise BadInputError(f"knobs: two changes both make an app named {app.app!r}")
        seen.add(app.app)
    return replace(profile, apps=tuple(result))


def hosted_moves(
    profile: WorkloadProfile, knobs: Knobs
) -> list[tuple[str, float, str, AppProfile]]:
    """(app, share, hosted model, the moved traffic as an AppProfile on that model) for every
    move to a hosted API, the traffic measured after the profile-wide knobs (as apply_knobs
    sees it before the move), for the planner to price per token."""
    if not any(m.hosted is not None for m in knobs.moves):
        return []
    before = apply_knobs(profile, replace(knobs, moves=(), fallback=()))
    out = []
    for m in knobs.moves:
        if m.hosted is None:
            continue
        app = before.app(m.app)
        out.append(
            (m.app, m.share, m.hosted, _split(app, m.share, f"{m.app}→{m.hosted}", m.hosted))
        )
    return out
