"""Length distributions of public benchmark datasets (models/data/datasets.yaml), so a
simulation can send ShareGPT-like traffic without downloading ShareGPT.

    lengths = get_dataset("sharegpt").sample(np.random.default_rng(0), 1000)  # (n, 2) ints

Each dataset is a pair of lognormals (input, output) fitted to published means, filtered the
way vLLM's benchmark sampler filters (vllm/benchmarks/datasets.py, is_valid_sequence). The
file names its sources; docs/simulator.md "Workloads" says what is fitted and what assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml

from inferledger.core.errors import BadInputError
from models.workload.distributions import LogNormal, parse_distribution

#: datasets `--dataset-name` takes besides "random" (vllm bench serve's synthetic default)
DATASET_NAMES = ("sharegpt",)


@dataclass(frozen=True, slots=True)
class LengthFilter:
    """vLLM's is_valid_sequence bounds: both lengths >= min_len, the prompt <= max_prompt_len,
    prompt + output <= max_total_len."""

    min_len: int
    max_prompt_len: int
    max_total_len: int

    def keep(self, inputs: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        return (
            (inputs >= self.min_len)
            & (outputs >= self.min_len)
            & (inputs <= self.max_prompt_len)
            & (inputs + outputs <= self.max_total_len)
        )


@dataclass(frozen=True, slots=True)
class DatasetLengths:
    """A dataset's fitted (input, output) length distribution."""

    name: str
    input: LogNormal
    output: LogNormal
    filter: LengthFilter
    mean_input_tokens: float  # the published means the medians were fitted to
    mean_output_tokens: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n (input, output) pairs of whole tokens, as an (n, 2) int64 array: lognormal draws
        rounded, redrawn until n pass the filter."""
        if n < 0:
            raise ValueError("n must be >= 0")
        out = np.empty((0, 2), dtype=np.int64)
        while len(out) < n:
            want = max(64, int((n - len(out)) * 1.1))
            inputs = np.rint(self.input.sample(rng, want)).astype(np.int64)
            outputs = np.rint(self.output.sample(rng, want)).astype(np.int64)
            keep = self.filter.keep(inputs, outputs)
            out = np.concatenate([out, np.stack([inputs[keep], outputs[keep]], axis=1)])
        return out[:n]


def _dataset(name: str, doc: Any) -> DatasetLengths:
    where = f"models/data/datasets.yaml: {name}"
    if not isinstance(doc, dict):
        raise BadInputError(f"{where}: expected a mapping")
    dists = []
    for key in ("input", "output"):
        dist = parse_distribution(doc.get(key), f"{where}.{key}")
        if not isinstance(dist, LogNormal):
            raise BadInputError(f"{where}.{key}: expected a lognormal")
        dists.append(dist)
    bounds = doc.get("filter") or {}
    fitted = doc.get("fitted_to") or {}
    try:
        length_filter = LengthFilter(
            int(bounds["min_len"]), int(bounds["max_prompt_len"]), int(bounds["max_total_len"])
        )
        means = float(fitted["mean_input_tokens"]), float(fitted["mean_output_tokens"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(f"{where}: filter or fitted_to incomplete ({exc})") from None
    if not all(math.isfinite(m) and m > 0 for m in means):
        raise BadInputError(f"{where}: fitted_to means must be positive")
    return DatasetLengths(name, dists[0], dists[1], length_filter, *means)


@cache
def load_datasets() -> dict[str, DatasetLengths]:
    """Every dataset of models/data/datasets.yaml, by name."""
    text = resources.files("models").joinpath("data", "datasets.yaml").read_text("utf-8")
    doc = yaml.safe_load(text)
    return {str(name): _dataset(str(name), body) for name, body in doc.items()}


def get_dataset(name: str) -> DatasetLengths:
    """A shipped dataset's lengths; BadInputError naming the known ones otherwise."""
    datasets = load_datasets()
    if name not in datasets:
        raise BadInputError(
            f"no dataset {name!r}: the shipped ones are {', '.join(sorted(datasets))}"
        )
    return datasets[name]
