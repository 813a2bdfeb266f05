"""Deployments as configured: the ``Deployment`` type, the ``deployments`` setting's parser, GPU
type names and the idle policy's parser. Pure; ``ledger/deployments.py`` stores them.

A **replica** is one vLLM server, identified by the name of its vLLM scrape target; its engine
spans carry the same name as resource ``service.instance.id`` (docs/cost-model.md, "Requests").
A **deployment** is a named group of identical replicas (``scrape.targets[].deployment``).

Two sources describe them (docs/deployments.md): the ``deployments`` setting and the UI, parsed
here and written by ``ledger.deployments``; and what the replicas say about themselves, which
``ledger.deployments.learn_replicas`` reads from scrapes and engine spans.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from inferledger.core.errors import BadInputError
from models.gpu_catalog import default_gpu_catalog
from models.idle_policy import IdlePolicy

if TYPE_CHECKING:
    from models.workload.config import WorkloadConfig


class DeploymentConfigError(BadInputError, ValueError):
    """A deployment entry is invalid. Also a ValueError, so that the settings registry reports
    it as a bad value of the ``deployments`` setting, with where the value came from."""


@dataclass(frozen=True, slots=True)
class Deployment:
    """One configured deployment. ``None`` means "not configured": learned values fill it."""

    name: str
    model: str | None = None  # served model name, as vLLM's model_name label
    gpu_type: str | None = None  # a GPU catalog name (gpu_type_name)
    gpus_per_replica: int | None = None
    tensor_parallel: int | None = None
    idle_policy: IdlePolicy | None = None
    environment: str | None = None

    @property
    def gpus(self) -> int:
        """GPUs one replica holds: gpus_per_replica, else tensor_parallel, else 1."""
        return self.gpus_per_replica or self.tensor_parallel or 1


# ---------------------------------------------------------------------------- GPU names

# GPU types are the GPU catalog's names (models/data/gpus.yaml: H200, H100-SXM, A100-80GB, L40S,
# B200), the same names the price book stores its GPU prices under (ledger/price_book.py
# canonicalizes a subject with get_gpu(...).name), so deployment_replicas.gpu_type joins
# price_book.subject as is.


def known_gpu_types() -> tuple[str, ...]:
    """The GPU types a deployment may name: the GPU catalog's names."""
    return default_gpu_catalog().names


def gpu_type_name(name: str) -> str | None:
    """The GPU type (catalog name) of a GPU name in any common spelling known to the catalog
    ('NVIDIA H200', 'h200', 'H100', 'A100-SXM4-80GB'); None when the catalog does not know it."""
    try:
        return default_gpu_catalog().get(name).name
    except BadInputError:
        return None


def normalize_gpu_model(dcgm_model_name: str | None) -> str | None:
    """DCGM's ``modelName`` label as a GPU type: 'NVIDIA H200' → 'H200',
    'NVIDIA H100 80GB HBM3' → 'H100-SXM', 'NVIDIA A100-SXM4-80GB' → 'A100-80GB'. None for a GPU
    the catalog does not know (say 'Tesla T4', or an H100 PCIe): configure its gpu_type then."""
    if dcgm_model_name is None or not dcgm_model_name.strip():
        return None
    return gpu_type_name(dcgm_model_name)


# ---------------------------------------------------------------------------- parsing

_FIELDS = tuple(f.name for f in fields(Deployment))
_MAX_GPUS = 65_536  # far above any replica; keeps a typo from overflowing the INTEGER column


def parse_deployments(raw: Any) -> tuple[Deployment, ...]:
    """The ``deployments`` setting: a YAML list of mappings with the fields of
    :class:`Deployment` (a JSON list in the environment). Raises DeploymentConfigError with one
    line naming the entry and the field."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        if not raw.strip():
            return ()
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DeploymentConfigError(
                f"expected a JSON list of deployments: {exc.msg} at character {exc.pos}"
            ) from None
    if not isinstance(raw, list | tuple):
        raise DeploymentConfigError(
            f"expected a list of deployments, got {type(raw).__name__} {_short(raw)}"
        )
    out: list[Deployment] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        deployment = _parse_entry(entry, i + 1)
        if deployment.name in seen:
            raise DeploymentConfigError(f"deployment name {deployment.name!r} is used twice")
        seen.add(deployment.name)
        out.append(deployment)
    return tuple(out)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_entry(entry: Any, number: int) -> Deployment:
    if isinstance(entry, Deployment):
        entry = {f: getattr(entry, f) for f in _FIELDS}
    where = f"deployment #{number}"
    if not isinstance(entry, Mapping):
        raise DeploymentConfigError(f"{where}: expected a mapping with a name, got {_short(entry)}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise DeploymentConfigError(f"{where}: name is required (a non-empty text)")
    if name != name.strip():
        raise DeploymentConfigError(f"{where}: name {name!r} has leading or trailing spaces")
    where = f"deployment #{number} ({name})"
    unknown = sorted(str(k) for k in entry if k not in _FIELDS)
    if unknown:
        raise DeploymentConfigError(
            f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(_FIELDS)})"
        )
    gpus = _count(entry, "gpus_per_replica", where)
    tensor_parallel = _count(entry, "tensor_parallel", where)
    if gpus is not None and tensor_parallel is not None and gpus % tensor_parallel:
        raise DeploymentConfigError(
            f"{where}: gpus_per_replica ({gpus}) must be a multiple of tensor_parallel "
            f"({tensor_parallel})"
        )
    return Deployment(
        name=name,
        model=_text(entry, "model", where),
        gpu_type=_gpu_type(entry, where),
        gpus_per_replica=gpus,
        tensor_parallel=tensor_parallel,
        idle_policy=_idle_policy(entry, where),
        environment=_text(entry, "environment", where),
    )


def _text(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise DeploymentConfigError(f"{where}: {key} must be a non-empty text, got {_short(value)}")
    return value.strip()


def _count(entry: Mapping[str, Any], key: str, where: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)  # JSON and YAML may write 2.0
    if isinstance(value, bool) or not isinstance(value, int):
        raise DeploymentConfigError(f"{where}: {key} must be a whole number, got {_short(value)}")
    if not 1 <= value <= _MAX_GPUS:
        raise DeploymentConfigError(f"{where}: {key} must be from 1 to {_MAX_GPUS}, got {value}")
    return value


def _gpu_type(entry: Mapping[str, Any], where: str) -> str | None:
    value = _text(entry, "gpu_type", where)
    if value is None:
        return None
    name = gpu_type_name(value)
    if name is None:
        raise DeploymentConfigError(
            f"{where}: gpu_type {value!r} is not a known GPU "
            f"(known: {', '.join(known_gpu_types())})"
        )
    return name


def parse_idle_policy(value: Any, where: str = "idle_policy") -> IdlePolicy:
    """'separate', 'usage' or 'even' (any case); DeploymentConfigError otherwise."""
    if isinstance(value, IdlePolicy):
        return value
    key = value.strip().lower() if isinstance(value, str) else None
    try:
        return IdlePolicy(key)
    except ValueError:
        raise DeploymentConfigError(
            f"{where} must be one of {', '.join(p.value for p in IdlePolicy)}, got {_short(value)}"
        ) from None


def _idle_policy(entry: Mapping[str, Any], where: str) -> IdlePolicy | None:
    value = entry.get("idle_policy")
    if value is None:
        return None
    return parse_idle_policy(value, f"{where}: idle_policy")


def deployments_from_workload(config: WorkloadConfig) -> tuple[Deployment, ...]:
    """The deployments of a simulated workload (the demo's models/data/workload.yaml), as the
    ``deployments`` setting would configure them."""
    out = []
    for d in config.deployments:
        gpu_type = gpu_type_name(d.gpu)
        if gpu_type is None:
            raise DeploymentConfigError(
                f"workload deployment {d.name}: gpu {d.gpu!r} is not a known GPU "
                f"(known: {', '.join(known_gpu_types())})"
            )
        out.append(
            Deployment(
                name=d.name,
                # vLLM reports the served name as model_name, and apps send it as the model.
                model=d.served_model_name,
                gpu_type=gpu_type,
                gpus_per_replica=d.tensor_parallel_size,
                tensor_parallel=d.tensor_parallel_size,
                environment=config.environment,
            )
        )
    return tuple(out)
