"""Tensor-parallel all-reduce cost from published figures, by interconnect generation.

``models/data/allreduce.yaml`` holds, per generation (NVLink 3/4/5, PCIe 4), a small table of
measured all-reduce latency by message size and TP size (vLLM-style one-shot/two-shot kernels for
the small messages a decode step sends) and the bus bandwidth NCCL reaches on large messages, each
number with its source and provenance. :meth:`AllReduceModel.latency_s` interpolates it; the step
model (models.steptime) calls it twice per layer with T x hidden x 2 bytes.
docs/simulator-calibration.md ("All-reduce") lists the sources.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from inferledger.core.errors import BadInputError

PROVENANCES = ("measured", "published", "extrapolated", "assumed")
_ALL = 0  # table key for "any TP size"


@dataclass(frozen=True, slots=True)
class AllReduceModel:
    """One interconnect generation's all-reduce latency: tables by TP, then a bus bandwidth."""

    generation: str
    tables: Mapping[int, tuple[tuple[float, ...], tuple[float, ...]]]  # tp -> (bytes, seconds)
    large_bus_bandwidth: float  # bytes/s, nccl-tests busbw convention
    small_provenance: str
    large_provenance: str
    sources: str = ""

    def table_for(self, tp: int) -> tuple[np.ndarray, np.ndarray]:
        """The table used for ``tp``: its own, else the next larger, else the largest."""
        if _ALL in self.tables:
            sizes, secs = self.tables[_ALL]
        else:
            keys = sorted(self.tables)
            key = next((k for k in keys if k >= tp), keys[-1])
            sizes, secs = self.tables[key]
        return np.asarray(sizes, dtype=np.float64), np.asarray(secs, dtype=np.float64)

    def latency_s(self, nbytes: np.ndarray | float, tp: int) -> np.ndarray:
        """Seconds for one all-reduce of ``nbytes`` per GPU over ``tp`` GPUs (0 at TP 1 or 0 B)."""
        b = np.asarray(nbytes, dtype=np.float64)
        if tp <= 1:
            return np.zeros_like(b)
        sizes, secs = self.table_for(tp)
        inside = np.interp(b, sizes, secs)
        beyond = secs[-1] + 2.0 * (tp - 1) / tp * (b - sizes[-1]) / self.large_bus_bandwidth
        return np.where(b > 0, np.where(b <= sizes[-1], inside, beyond), 0.0)

    @property
    def provenance(self) -> dict[str, str]:
        return {"small_messages": self.small_provenance, "large_messages": self.large_provenance}


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadInputError(f"{where} must be a finite number, got {value!r}")
    if value <= 0:
        raise BadInputError(f"{where} must be positive, got {value!r}")
    return float(value)


def _provenance(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if value not in PROVENANCES:
        raise BadInputError(
            f"{where}: {key} must be one of {', '.join(PROVENANCES)}, got {value!r}"
        )
    return str(value)


def _points(raw: Any, where: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if not isinstance(raw, list) or not raw:
        raise BadInputError(f"{where}: expected a list of [bytes, microseconds] points")
    sizes, secs = [], []
    for i, point in enumerate(raw):
        if not isinstance(point, list | tuple) or len(point) != 2:
            raise BadInputError(f"{where} point {i + 1}: expected [bytes, microseconds]")
        sizes.append(_number(point[0], f"{where} point {i + 1} bytes"))
        secs.append(_number(point[1], f"{where} point {i + 1} microseconds") * 1e-6)
    if any(b <= a for a, b in itertools.pairwise(sizes)):
        raise BadInputError(f"{where}: sizes must increase")
    if any(b < a for a, b in itertools.pairwise(secs)):
        raise BadInputError(f"{where}: latency must not fall as messages grow")
    return tuple(sizes), tuple(secs)


def _tables(raw: Any, where: str) -> dict[int, tuple[tuple[float, ...], tuple[float, ...]]]:
    if not isinstance(raw, Mapping) or not raw:
        raise BadInputError(f"{where}: points must map a TP size (or 'all') to a table")
    tables = {}
    for key, value in raw.items():
        if key == "all":
            tp = _ALL
        elif isinstance(key, int) and not isinstance(key, bool) and key >= 2:
            tp = key
        else:
            raise BadInputError(f"{where}: TP size {key!r} must be an integer >= 2 or 'all'")
        tables[tp] = _points(value, f"{where} TP {key}")
    return tables


def _derive(ref: AllReduceModel, ratio: float) -> dict[int, tuple[tuple[float, ...], ...]]:
    out = {}
    for tp, (sizes, secs) in ref.tables.items():
        first = secs[0]
        out[tp] = (sizes, tuple(first + (s - first) * ratio for s in secs))
    return out


def parse_allreduce(doc: Any, where: str) -> dict[str, AllReduceModel]:
    """Generations from a parsed allreduce.yaml document (clear errors on a bad entry)."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("generations"), Mapping):
        raise BadInputError(f"all-reduce table {where} must hold a mapping under 'generations'")
    raw = doc["generations"]
    models: dict[str, AllReduceModel] = {}
    pending = list(raw)
    while pending:  # derived generations after the ones they derive from
        progress = False
        for name in list(pending):
            entry = raw[name]
            here = f"{where} generation {name!r}"
            if not isinstance(entry, Mapping):
                raise BadInputError(f"{here}: expected a mapping")
            ref_name = entry.get("derived_from")
            if ref_name is not None and ref_name not in models:
                if ref_name not in raw or ref_name == name:
                    raise BadInputError(f"{here}: derived_from {ref_name!r} is not a generation")
                continue
            if ref_name is None:
                tables = _tables(entry.get("points"), here)
            else:
                tables = _derive(
                    models[ref_name], _number(entry.get("link_ratio"), f"{here} ratio")
                )
            models[str(name)] = AllReduceModel(
                generation=str(name),
                tables=tables,
                large_bus_bandwidth=_number(
                    entry.get("large_bus_bandwidth_gb_s"), f"{here} large_bus_bandwidth_gb_s"
                )
                * 1e9,
                small_provenance=_provenance(entry, "small_provenance", here),
                large_provenance=_provenance(entry, "large_provenance", here),
                sources=" ".join(
                    str(entry.get(k, "")) for k in ("small_source", "large_source")
                ).strip(),
            )
            pending.remove(name)
            progress = True
        if not progress:
            raise BadInputError(f"{where}: derived_from forms a cycle among {', '.join(pending)}")
    return models


def load_allreduce(path: str | Path | None = None) -> dict[str, AllReduceModel]:
    """Read an all-reduce table YAML (the shipped ``models/data/allreduce.yaml`` when None)."""
    if path is None:
        text = resources.files("models").joinpath("data", "allreduce.yaml").read_text("utf-8")
        where = "models/data/allreduce.yaml"
    else:
        where = str(path)
        try:
            text = Path(path).read_text("utf-8")
        except OSError as exc:
            raise BadInputError(f"all-reduce table {where}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        raise BadInputError(f"all-reduce table {where} is not valid YAML") from None
    return parse_allreduce(doc, where)


@functools.cache
def default_allreduce() -> dict[str, AllReduceModel]:
    return load_allreduce()


def legacy_allreduce(latency_s: float, link_bytes_s: float, name: str) -> AllReduceModel:
    """The former model for catalogs that give only ``allreduce_latency_us``: a fixed latency
    plus a ring over the link at the given bandwidth (assumed)."""
    return AllReduceModel(
        generation=f"{name} (assumed latency)",
        tables={_ALL: ((1.0,), (latency_s,))},
        large_bus_bandwidth=link_bytes_s,
        small_provenance="assumed",
        large_provenance="assumed",
    )
