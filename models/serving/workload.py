"""`vllm bench serve`-style synthetic workloads (its "random" dataset and arrival process)."""

from __future__ import annotations

import math

import numpy as np

from models.serving.request import RequestSpec


def arrival_times(
    rng: np.random.Generator,
    num_requests: int,
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    start_s: float = 0.0,
) -> np.ndarray:
    """Send times as `vllm bench serve` makes them: the first request at start_s, then gaps
    drawn from a gamma distribution with shape `burstiness` and mean 1/request_rate
    (burstiness 1 = Poisson process); request_rate inf sends everything at start_s."""
    if num_requests < 0:
        raise ValueError("num_requests must be >= 0")
    if not request_rate > 0:
        raise ValueError(f"request_rate must be > 0 (or inf), got {request_rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if math.isinf(request_rate) or num_requests == 0:
        return np.full(num_requests, float(start_s))
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=num_requests)
    times = np.empty(num_requests)
    times[0] = 0.0
    np.cumsum(gaps[:-1], out=times[1:])
    return times + start_s


def random_workload(
    rng: np.random.Generator,
    *,
    num_prompts: int,
    input_len: int,
    output_len: int,
    range_ratio: float = 0.0,
    prefix_len: int = 0,
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    start_s: float = 0.0,
    id_prefix: str = "req",
    prefix_key: str = "random-prefix",
) -> list[RequestSpec]:
    """Like `vllm bench serve --dataset-name random`: every prompt is a shared prefix of
    prefix_len tokens followed by its own random tokens (length uniform in
    [input_len*(1-r), input_len*(1+r)]); output lengths likewise; ignore_eos, so each request
    generates exactly its output length and finishes with "length"."""
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(f"range_ratio must be in [0, 1), got {range_ratio}")
    if input_len < 1 or output_len < 1 or prefix_len < 0:
        raise ValueError("input_len and output_len must be >= 1, prefix_len >= 0")
    in_low = max(1, int(input_len * (1 - range_ratio)))
    in_high = max(in_low, int(input_len * (1 + range_ratio)))
    out_low = max(1, int(output_len * (1 - range_ratio)))
    out_high = max(out_low, int(output_len * (1 + range_ratio)))
    input_lens = rng.integers(in_low, in_high + 1, size=num_prompts)
    output_lens = rng.integers(out_low, out_high + 1, size=num_prompts)
    times = arrival_times(rng, num_prompts, request_rate, burstiness, start_s)
    prefix = ((prefix_key, prefix_len),) if prefix_len else ()
    specs = []
    for i in range(num_prompts):
        request_id = f"{id_prefix}-{i}"
        out = int(output_lens[i])
        specs.append(
            RequestSpec(
                request_id=request_id,
                arrival_s=float(times[i]),
                prompt=(*prefix, (request_id, int(input_lens[i]))),
                output_tokens=out,
                max_tokens=out,
            )
        )
    return specs
