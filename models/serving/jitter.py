"""Seeded, mean-preserving noise on engine step durations, for the *served* simulation only
(`inferledger simulate --serve --step-jitter CV`). Batch runs and calibration never use it:
their numbers are compared exactly by tests and docs.

Why: a predictor prices every step of a pure-decode stretch from its shape alone, so the gaps
between a stream's tokens are all equal and closed-loop clients that start together stay in
lockstep. A real engine's steps vary a little (kernel timing, the CPU work between steps:
scheduling, input preparation, detokenisation). Each step's predicted duration is multiplied
by an independent lognormal factor of mean 1 and coefficient of variation `cv`, so every mean
(throughput, mean ITL, mean TPOT) is unchanged in expectation and only the spread appears.

How much: `vllm bench serve` against a TP=4 vLLM at concurrency 1 (one stream, so the gaps are
engine steps) reported a median ITL of 51.75 ms and a P99 of 55.00 ms (NVIDIA developer forum,
"6x Spark setup", Qwen3-VL-32B-FP8); for a lognormal, P99/median = exp(2.326 sigma), which
gives sigma ~= 0.026. Smaller, CPU-bound models spread more (an SGLang run of a small model
gives P99/median 1.93/1.51, sigma ~= 0.1). The default, 3 %, sits at the large-model end;
docs/sim-server.md says how to change it.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_STEP_JITTER_CV = 0.03
#: Longest stretch of pure-decode steps priced as one event when jitter is on: each step of a
#: stretch gets its own factor, so a stretch costs one predictor call per step.
JITTER_MAX_STRETCH_STEPS = 256


class StepJitter:
    """Independent lognormal factors with mean 1 and coefficient of variation `cv`, from a
    generator seeded by (seed, stream): the same seed and the same sequence of draws always
    give the same factors."""

    __slots__ = ("_mu", "_rng", "_sigma", "cv")

    def __init__(self, cv: float, seed: int = 0, stream: int = 0) -> None:
        if not (math.isfinite(cv) and 0.0 < cv <= 1.0):
            raise ValueError(f"step jitter CV must be in (0, 1], got {cv}")
        self.cv = cv
        sigma2 = math.log1p(cv * cv)  # lognormal: CV^2 = exp(sigma^2) - 1
        self._sigma = math.sqrt(sigma2)
        self._mu = -sigma2 / 2.0  # E[exp(N(mu, sigma^2))] = exp(mu + sigma^2 / 2) = 1
        self._rng = np.random.default_rng([seed, stream])

    def factor(self) -> float:
        """One step's factor."""
        return float(self._rng.lognormal(self._mu, self._sigma))

    def factors(self, n: int) -> np.ndarray:
        """Factors of `n` consecutive steps."""
        return self._rng.lognormal(self._mu, self._sigma, n)
