"""Discrete-event simulator of vLLM V1 serving: continuous batching under one token budget per
step, chunked prefill, a paged KV cache with prefix caching, preemption by recompute, and
several replicas behind a router. Step times come from an ExecutionTimePredictor
(models/execution_time.py).

    cluster = Cluster(ClusterConfig(ReplicaConfig(CacheConfig(num_gpu_blocks=50_000)),
                                    num_replicas=4), predictor)
    result = cluster.run(random_workload(np.random.default_rng(0), num_prompts=1000, ...))
    print(format_benchmark_result(summarize(result)))
"""

from models.serving.affine_predictor import AffineStepTimePredictor
from models.serving.cluster import Cluster
from models.serving.config import (
    CacheConfig,
    ClusterConfig,
    ReplicaConfig,
    RouterPolicy,
    SchedulerConfig,
    SimulationOptions,
)
from models.serving.records import (
    ReplicaCounters,
    ReplicaRecord,
    ReplicaSeries,
    RequestRecord,
    SimulationResult,
    StepLog,
)
from models.serving.request import FinishReason, RequestSpec, RequestStatus
from models.serving.summary import format_benchmark_result, print_benchmark_result, summarize
from models.serving.workload import arrival_times, random_workload

__all__ = [
    "AffineStepTimePredictor",
    "CacheConfig",
    "Cluster",
    "ClusterConfig",
    "FinishReason",
    "ReplicaConfig",
    "ReplicaCounters",
    "ReplicaRecord",
    "ReplicaSeries",
    "RequestRecord",
    "RequestSpec",
    "RequestStatus",
    "RouterPolicy",
    "SchedulerConfig",
    "SimulationOptions",
    "SimulationResult",
    "StepLog",
    "arrival_times",
    "format_benchmark_result",
    "print_benchmark_result",
    "random_workload",
    "summarize",
]
