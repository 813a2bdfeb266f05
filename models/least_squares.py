"""The least-squares fit both calibration stages use, hand-written on numpy (no scipy in the stack).

Levenberg-Marquardt with a forward-difference Jacobian, started from fixed values so a fit is
deterministic, and the change of variables that keeps a fitted coefficient in range: the log of
a positive value, and the log of (p − 1) for a smooth-maximum sharpness p > 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

# Coefficients that are the p of a p-norm smooth maximum (>= 1); every other fitted one is > 0.
SHARPNESS = ("linear_sharpness", "launch_sharpness")


def to_free(name: str, value: float) -> float:
    """The unconstrained variable the fit moves for coefficient ``name`` at ``value``."""
    return math.log(value - 1.0) if name in SHARPNESS else math.log(value)


def from_free(name: str, x: float) -> float:
    """The coefficient value of free variable ``x`` (clamped so exp cannot overflow)."""
    x = min(max(x, -50.0), 50.0)
    return 1.0 + math.exp(x) if name in SHARPNESS else math.exp(x)


def levenberg_marquardt(
    residuals: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, max_iter: int = 300
) -> np.ndarray:
    """Minimize ||residuals(x)||² with a forward-difference Jacobian and adaptive damping."""
    x = x0.copy()
    r = residuals(x)
    cost = float(r @ r)
    damping = 1e-3
    for _ in range(max_iter):
        jac = np.empty((r.size, x.size))
        for j in range(x.size):
            h = 1e-6 * max(1.0, abs(x[j]))
            shifted = x.copy()
            shifted[j] += h
            jac[:, j] = (residuals(shifted) - r) / h
        normal = jac.T @ jac
        grad = jac.T @ r
        scale = np.maximum(np.diag(normal), 1e-12)
        while True:
            step = np.linalg.solve(normal + damping * np.diag(scale), -grad)
            candidate = x + step
            r_new = residuals(candidate)
            new_cost = float(r_new @ r_new)
            if new_cost < cost:
                break
            damping *= 4.0
            if damping > 1e10:
                return x
        improvement = cost - new_cost
        x, r, cost = candidate, r_new, new_cost
        damping = max(damping / 3.0, 1e-12)
        if improvement < 1e-12 * max(cost, 1e-30) or np.max(np.abs(step)) < 1e-10:
            break
    return x
