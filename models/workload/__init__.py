"""The apps in front of the engines: a company's LLM workload, generated and served.

    config = load_workload()                       # models/data/workload.yaml
    pools = build_pools(config, seed)
    plan = plan_tasks(config, pools, np.random.default_rng(seed),
                      start_unix_s=t0, duration_s=3600)   # tasks, attempts, LLM calls
    sim = simulate_plan(plan, build_deployments(config))  # served on simulated vLLM replicas
    for request in SpanBuilder(sim).export_requests(range(plan.num_attempts)):
        ...                                        # OTLP: app spans + vLLM llm_request spans

Tasks and RequestSpecs are drawn first; the engines serve them; the app spans are laid out on
the engines' timings afterwards, so every app CLIENT span encloses the engine request it caused
(whose span is parented on it through the W3C traceparent the request carried).
`SimulatedSegment` (models.workload.feed) wraps it all for one stretch of time and also renders
every scrape target's page; models.workload.segments decides which stretches to simulate.
docs/demo.md describes the shipped scenario.
"""

from models.workload.arrivals import Burst, base_intensity, draw_arrivals
from models.workload.config import (
    AppConfig,
    ArrivalConfig,
    DeploymentConfig,
    HostedModelConfig,
    RouteConfig,
    WorkloadConfig,
    load_workload,
    workload_from_dict,
)
from models.workload.distributions import WorkloadConfigError
from models.workload.feed import (
    ScrapePages,
    SimulatedSegment,
    TargetInfo,
    scrape_targets,
    ticks,
)
from models.workload.plan import (
    Attempt,
    LlmCall,
    PromptPools,
    Step,
    StepKind,
    Task,
    TaskPlan,
    build_pools,
    plan_tasks,
)
from models.workload.segments import Segment, SegmentSource, plan_segments
from models.workload.simulation import (
    Deployment,
    SimulatedPlan,
    build_deployments,
    simulate_plan,
    traceparent,
)
from models.workload.spans import SpanBuilder, engine_instance

__all__ = [
    "AppConfig",
    "ArrivalConfig",
    "Attempt",
    "Burst",
    "Deployment",
    "DeploymentConfig",
    "HostedModelConfig",
    "LlmCall",
    "PromptPools",
    "RouteConfig",
    "ScrapePages",
    "Segment",
    "SegmentSource",
    "SimulatedPlan",
    "SimulatedSegment",
    "SpanBuilder",
    "Step",
    "StepKind",
    "TargetInfo",
    "Task",
    "TaskPlan",
    "WorkloadConfig",
    "WorkloadConfigError",
    "base_intensity",
    "build_deployments",
    "build_pools",
    "draw_arrivals",
    "engine_instance",
    "load_workload",
    "plan_segments",
    "plan_tasks",
    "scrape_targets",
    "simulate_plan",
    "ticks",
    "traceparent",
    "workload_from_dict",
]
