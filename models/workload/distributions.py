"""Small, typed distributions for token counts, latencies and rates, parsed from YAML.

In the workload file a distribution is a bare number (a constant) or a mapping
``{dist: lognormal, median: 380, sigma: 0.3, min: 100, max: 900}`` /
``{dist: uniform, min: 1, max: 4}``. ``min``/``max`` clip a lognormal. Every draw takes the
caller's ``numpy.random.Generator``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferledger.core.errors import BadInputError


class WorkloadConfigError(BadInputError):
    """The workload file is invalid; ``str(exc)`` is one line naming the bad field."""


@dataclass(frozen=True, slots=True)
class Constant:
    value: float

    @property
    def mean(self) -> float:
        return self.value

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.full(size, self.value, dtype=float)


@dataclass(frozen=True, slots=True)
class Uniform:
    low: float
    high: float

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, size)


@dataclass(frozen=True, slots=True)
class LogNormal:
    """Lognormal by its median and the sigma of its log, clipped to [low, high]."""

    median: float
    sigma: float
    low: float = 0.0
    high: float = math.inf

    @property
    def mean(self) -> float:
        """Mean of the unclipped distribution (clipping moves it a little)."""
        return min(self.high, max(self.low, self.median * math.exp(self.sigma**2 / 2)))

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        values = rng.lognormal(math.log(self.median), self.sigma, size)
        return np.clip(values, self.low, self.high)


Distribution = Constant | Uniform | LogNormal


def parse_distribution(raw: Any, where: str) -> Distribution:
    """A distribution from its YAML form; raises WorkloadConfigError naming ``where``."""
    if isinstance(raw, bool):
        raise WorkloadConfigError(f"{where}: expected a number or a distribution, got {raw!r}")
    if isinstance(raw, int | float):
        value = float(raw)
        _check_value(value, where)
        return Constant(value)
    if not isinstance(raw, dict):
        raise WorkloadConfigError(f"{where}: expected a number or a distribution, got {raw!r}")
    kind = raw.get("dist")
    allowed = {
        "lognormal": {"dist", "median", "sigma", "min", "max"},
        "uniform": {"dist", "min", "max"},
    }
    if kind not in allowed:
        raise WorkloadConfigError(f"{where}: dist must be lognormal or uniform, got {kind!r}")
    unknown = sorted(set(raw) - allowed[kind])
    if unknown:
        raise WorkloadConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")

    def number(key: str, default: float | None = None) -> float:
        value = raw.get(key, default)
        if value is None:
            raise WorkloadConfigError(f"{where}: {kind} needs {key}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WorkloadConfigError(f"{where}: {key} must be a number, got {value!r}")
        value = float(value)
        _check_value(value, f"{where}.{key}")
        return value

    if kind == "uniform":
        low, high = number("min"), number("max")
        if high < low:
            raise WorkloadConfigError(f"{where}: max ({high:g}) is below min ({low:g})")
        return Uniform(low, high)
    median, sigma = number("median"), number("sigma")
    if median == 0:
        raise WorkloadConfigError(f"{where}: median must be positive")
    low = number("min", 0.0) if "min" in raw else 0.0
    high = number("max") if "max" in raw else math.inf
    if high < low or not low <= median <= high:
        raise WorkloadConfigError(f"{where}: need min <= median <= max")
    return LogNormal(median, sigma, low, high)


def _check_value(value: float, where: str) -> None:
    if not math.isfinite(value) or value < 0:
        raise WorkloadConfigError(f"{where}: must be a finite number >= 0, got {value!r}")
