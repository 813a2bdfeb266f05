"""Right-sizing findings for the GPU & cache page (issue #10): each selected deployment's
5-minute windows of scraped time (sql/queries/rightsizing_windows.sql, over the scrape
instants of sql/macros/replica_instants.sql), its size and price
(sql/queries/rightsizing_deployments.sql) and its step-time model, sized by the pure
models/rightsizing.py. docs/efficiency.md, "Right-sizing", states the method."""

from __future__ import annotations

import functools

import pyarrow as pa

from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage
from ledger.efficiency import COUNTER_MAX_GAP_S, KV_HIGH_USAGE, MAX_SAMPLE_GAP_S, rows_table
from ledger.queries import Filters, run
from models import rightsizing as rs
from models.gpu_catalog import Precision, get_gpu
from models.model_catalog import get_model
from models.steptime import build_predictor

#: How the findings table names each verdict.
VERDICT_LABELS = {
    rs.Verdict.ADD_CAPACITY: "Add capacity",
    rs.Verdict.CUT: "Cut GPUs",
    rs.Verdict.RIGHT_SIZED: "Right-sized",
    rs.Verdict.NO_DATA: "No scrapes",
}
FINDING_COLUMNS = (
    "deployment",
    "verdict",
    "verdict_label",
    "message",
    "idle_share",
    "replicas_held",
    "gpus_per_replica",
    "gpus_held",
    "peak_need_replicas",
    "binding",
    "peak_start",
    "peak_busy_replicas",
    "peak_kv_replicas",
    "gpus_to_cut",
    "price_per_gpu_hour",
    "saving_per_week",
    "saturated_windows",
    "windows",
    "first_saturated",
    "covered_hours",
    "window_s",
    "target_utilization",
    "basis",
    "peak_compute_replicas",
    "step_model",
)
_FINDING_TYPES: dict[str, pa.DataType] = {
    "deployment": pa.string(), "verdict": pa.string(), "verdict_label": pa.string(),
    "message": pa.string(), "binding": pa.string(), "peak_start": pa.timestamp("us", tz="UTC"),
    "first_saturated": pa.timestamp("us", tz="UTC"), "replicas_held": pa.int64(),
    "gpus_per_replica": pa.int64(), "gpus_held": pa.int64(), "peak_need_replicas": pa.int64(),
    "gpus_to_cut": pa.int64(), "saturated_windows": pa.int64(), "windows": pa.int64(),
    "window_s": pa.int64(), "basis": pa.string(), "step_model": pa.string(),
}  # fmt: skip


def rightsizing_inputs(storage: Storage, filters: Filters) -> list[rs.Deployment]:
    """Each selected deployment's 5-minute windows of scraped time
    (sql/queries/rightsizing_windows.sql), GPUs per replica, the range's $/GPU-hour (GPU cost
    over priced GPU-hours; None when unpriced) and its step-time model where its model and GPU
    are known to the catalogs (sql/queries/rightsizing_deployments.sql)."""
    windows: dict[str, list[rs.Window]] = {}
    rows = run(
        storage,
        "rightsizing_windows",
        filters,
        window_s=rs.WINDOW_S,
        max_gap_s=MAX_SAMPLE_GAP_S,
        kv_high=KV_HIGH_USAGE,
        counter_max_gap_s=COUNTER_MAX_GAP_S,
    ).to_pylist()
    for w in rows:
        windows.setdefault(w["deployment"], []).append(
            rs.Window(
                start=w["window_start"],
                replicas_up=int(w["replicas_up"]),
                busy_replicas=float(w["busy_replicas"] or 0.0),
                kv_replicas=float(w["kv_replicas"] or 0.0),
                waiting=float(w["waiting_mean"] or 0.0),
                preemptions=float(w["preemptions"] or 0.0),
                busy_s=float(w["busy_s"]),
                covered_s=float(w["covered_s"]),
                waiting_held=float(w["waiting_held_mean"] or 0.0),
                samples=int(w["samples"]),
                running=float(w["running_mean"] or 0.0),
                running_s=w["running_s"],
                generation_tokens=w["generation_tokens"],
                prompt_tokens=w["prompt_tokens"],
                prefix_hit_tokens=w["prefix_hit_tokens"],
                requests_finished=w["requests_finished"],
                kv_tokens=w["kv_tokens"],
                kv_capacity_tokens=w["kv_capacity_tokens"],
            )
        )
    found = []
    for d in run(storage, "rightsizing_deployments", filters).to_pylist():
        name = d["deployment"]
        if name not in windows:
            continue  # no scrape of it in the range
        model, note = step_model(name, d["model"], d["gpu_type"], int(d["tensor_parallel"] or 1))
        price = d["price_per_gpu_hour"]
        found.append(
            rs.Deployment(
                name=name,
                gpus_per_replica=int(d["gpus_per_replica"] or 1),
                price_per_gpu_hour=price if price is not None and price > 0 else None,
                windows=windows[name],
                step_model=model,
                step_model_note=note,
            )
        )
    return found


def step_model(
    deployment: str, model: str | None, gpu_type: str | None, tensor_parallel: int
) -> tuple[rs.StepModel | None, str | None]:
    """The deployment's step-time model (models/steptime.py) and None, or None and why not.

    The weight dtype is not configured anywhere: fp8 when the model or deployment name says
    so (a "-FP8" checkpoint, the demo's ``llama-3.1-70b-fp8-h200``) or when bf16 weights
    would not fit the replica's GPUs, else bf16."""
    if model is None or gpu_type is None:
        missing = " and ".join(n for n, v in (("model", model), ("GPU type", gpu_type)) if not v)
        return None, f"its {missing} {'is' if ' and ' not in missing else 'are'} not known"
    fp8_named = "fp8" in model.lower() or "fp8" in deployment.lower()
    return _step_model(model, gpu_type, tensor_parallel, fp8_named)


@functools.lru_cache(maxsize=64)
def _step_model(
    model: str, gpu_type: str, tensor_parallel: int, fp8_named: bool
) -> tuple[rs.StepModel | None, str | None]:
    # cached: a predictor tabulates its step times when built (~10 ms), and the GPU page asks
    # for the findings on every load
    try:
        config = get_model(model)
        gpu = get_gpu(gpu_type)
    except BadInputError:
        return None, f"model {model} or GPU {gpu_type} is not in the catalogs"
    dtype = Precision.FP8 if fp8_named else Precision.BF16
    if dtype is Precision.BF16 and gpu.supports(Precision.FP8):
        bf16_bytes = config.params * Precision.BF16.bytes_per_element / tensor_parallel
        if bf16_bytes > 0.9 * gpu.memory_bytes:
            dtype = Precision.FP8  # bf16 weights would not fit: it must run quantised
    try:
        predictor = build_predictor(config, gpu, dtype, tensor_parallel)
    except BadInputError as exc:
        return None, f"no step-time model: {exc}"
    label = f"{config.name} {dtype} on {tensor_parallel}× {gpu.name}"
    return rs.StepModel(predictor, label), None


def rightsizing_findings(storage: Storage, filters: Filters) -> pa.Table:
    """The right-sizing finding of each selected deployment over the range's scraped time
    (models/rs.py: saturated first, then the largest saving), one row each."""
    findings = rs.rightsize_all(rightsizing_inputs(storage, filters))
    rows = []
    for f in findings:
        row = {c: getattr(f, c, None) for c in FINDING_COLUMNS}
        row["verdict"] = f.verdict.value
        row["verdict_label"] = VERDICT_LABELS[f.verdict]
        row["binding"] = f.binding.value if f.binding else None
        row["window_s"] = rs.WINDOW_S
        row["target_utilization"] = rs.TARGET_UTILIZATION
        rows.append(row)
    return rows_table(rows, FINDING_COLUMNS, _FINDING_TYPES)
