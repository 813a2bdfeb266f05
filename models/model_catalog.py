"""Model shapes, the memory they need, and the KV-cache capacity of a deployment.

Formulas are those of shared/reference/capacity-formulas.md §3.2; tests check its worked numbers
(§3.3). Shapes live in ``models/data/models.yaml``. A :class:`ModelProfile` is one model served in
one weight precision, one KV-cache precision and one tensor-parallel degree; everything the
step-time model and the simulator need about its size is derived from it.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from inferledger.core.errors import BadInputError
from models.gpu_catalog import GpuSpec, Precision, get_gpu, parse_precision

GIB = 1 << 30
# Activations, CUDA graphs and the allocator's slack that vLLM's profiling run finds beyond the
# weights (capacity-formulas.md §3.2: "~1-3 GB").
DEFAULT_OVERHEAD_BYTES = 2 * GIB
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default
DEFAULT_BLOCK_SIZE = 16  # vLLM's default KV block, in tokens


class DoesNotFitError(BadInputError):
    """The weights (plus overhead) leave no room for a KV cache on this GPU at this TP degree."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A decoder-only transformer (Llama family) by its config.json shape."""

    name: str
    num_layers: int
    hidden_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    tied_embeddings: bool = False
    aliases: tuple[str, ...] = ()
    source: str = ""
    # The Hugging Face repository vLLM serves it from (`vllm serve meta-llama/...`): what vLLM
    # reports as the model's `root` in /v1/models and names it by when no
    # --served-model-name is given. None for a catalog entry that does not say.
    hf_id: str | None = None

    @property
    def layer_matmul_params(self) -> int:
        """q, k, v, o projections plus gate, up and down of one layer."""
        h, d = self.hidden_size, self.head_dim
        return 2 * h * self.num_q_heads * d + 2 * h * self.num_kv_heads * d + 3 * h * self.ffn_size

    @property
    def params(self) -> int:
        """All parameters: layers (with their two norms), embeddings, LM head, final norm."""
        h = self.hidden_size
        embeddings = (1 if self.tied_embeddings else 2) * self.vocab_size * h
        return self.num_layers * (self.layer_matmul_params + 2 * h) + embeddings + h

    @property
    def matmul_params(self) -> int:
        """Parameters a token's forward pass multiplies by (the embedding lookup excluded)."""
        return self.num_layers * self.layer_matmul_params + self.vocab_size * self.hidden_size

    @property
    def linear_flops_per_token(self) -> int:
        return 2 * self.matmul_params

    def attention_flops_per_token(self, context: int) -> int:
        """QKᵀ plus AV for one token attending to ``context`` earlier tokens (all layers)."""
        return 4 * self.num_layers * self.num_q_heads * self.head_dim * context


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """One model as served: weight precision, KV-cache precision, tensor-parallel degree."""

    config: ModelConfig
    weight_dtype: Precision = Precision.BF16
    kv_dtype: Precision = Precision.BF16
    tp: int = 1

    def __post_init__(self) -> None:
        c = self.config
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 1:
            raise BadInputError(
                f"tensor-parallel degree must be a positive integer, got {self.tp!r}"
            )
        # vLLM shards query heads and the FFN evenly; KV heads are split when TP divides them and
        # replicated when they divide TP (capacity-formulas.md §3.2: "with TP <= n_kv ...").
        if c.num_q_heads % self.tp or c.ffn_size % self.tp:
            raise BadInputError(
                f"{c.name}: tensor-parallel degree {self.tp} must divide its {c.num_q_heads} "
                f"query heads and FFN size {c.ffn_size}"
            )
        if c.num_kv_heads % self.tp and self.tp % c.num_kv_heads:
            raise BadInputError(
                f"{c.name}: tensor-parallel degree {self.tp} and its {c.num_kv_heads} KV heads "
                "must divide one another"
            )

    @property
    def weight_bytes(self) -> float:
        """All weights; fp8 counts 1 byte/param (scale tensors ignored, as in §3.2)."""
        return float(self.config.params * self.weight_dtype.bytes_per_element)

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.weight_bytes / self.tp

    @property
    def matmul_weight_bytes_per_gpu(self) -> float:
        """Bytes of weights every step reads once on each GPU (embedding table excluded)."""
        return self.config.matmul_params * self.weight_dtype.bytes_per_element / self.tp

    @property
    def kv_heads_per_gpu(self) -> int:
        return max(1, self.config.num_kv_heads // self.tp)

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token in every layer, whole model (2·L·n_kv·d·bytes)."""
        c = self.config
        return 2 * c.num_layers * c.num_kv_heads * c.head_dim * self.kv_dtype.bytes_per_element

    @property
    def kv_bytes_per_token_per_gpu(self) -> int:
        c = self.config
        return (
            2 * c.num_layers * self.kv_heads_per_gpu * c.head_dim * self.kv_dtype.bytes_per_element
        )

    def describe(self) -> str:
        return (
            f"{self.config.name} (weights {self.weight_dtype}, KV cache {self.kv_dtype}, "
            f"TP {self.tp})"
        )


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """How much KV cache one replica holds: per-GPU budget, blocks, tokens."""

    budget_bytes_per_gpu: float
    block_bytes_per_gpu: int
    num_gpu_blocks: int
    block_size: int

    @property
    def tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size


def kv_cache_capacity(
    profile: ModelProfile,
    gpu: GpuSpec,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: int = DEFAULT_BLOCK_SIZE,
    overhead_bytes: float = DEFAULT_OVERHEAD_BYTES,
) -> KvCapacity:
    """KV budget per GPU = utilization × memory − weights/TP − overhead, in whole blocks.

    Every GPU of the replica holds 1/TP of each token's KV (or a replica of a KV head when TP
    exceeds the KV heads), so blocks per GPU are also the replica's blocks.
    """
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise BadInputError(
            f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    if block_size < 1:
        raise BadInputError(f"block_size must be at least 1, got {block_size!r}")
    if overhead_bytes < 0:
        raise BadInputError(f"overhead_bytes must not be negative, got {overhead_bytes!r}")
    gpu.require(profile.weight_dtype, "weights")
    gpu.require(profile.kv_dtype, "KV cache")
    usable = gpu_memory_utilization * gpu.memory_bytes
    budget = usable - profile.weight_bytes_per_gpu - overhead_bytes
    block_bytes = profile.kv_bytes_per_token_per_gpu * block_size
    blocks = math.floor(budget / block_bytes) if budget > 0 else 0
    if blocks < 1:
        raise DoesNotFitError(
            f"{profile.describe()} does not fit on {gpu.name}: weights need "
            f"{profile.weight_bytes_per_gpu / 1e9:.1f} GB per GPU plus "
            f"{overhead_bytes / 1e9:.1f} GB overhead, but {gpu_memory_utilization:g} × "
            f"{gpu.memory_bytes / 1e9:.0f} GB leaves no room for one KV block; use a larger "
            "tensor-parallel degree, fp8 weights or a GPU with more memory"
        )
    return KvCapacity(budget, block_bytes, blocks, block_size)


def num_gpu_blocks(
    model: str | ModelConfig,
    gpu: str | GpuSpec,
    dtype: str | Precision = Precision.BF16,
    tp: int = 1,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: int = DEFAULT_BLOCK_SIZE,
    overhead_bytes: float = DEFAULT_OVERHEAD_BYTES,
    kv_dtype: str | Precision | None = None,
) -> int:
    """vLLM's ``num_gpu_blocks`` for a replica: KV blocks of ``block_size`` tokens.

    ``dtype`` is the weight precision; ``kv_dtype`` defaults to bf16 whatever the weights, as
    vLLM's ``kv_cache_dtype=auto`` does (an fp8 checkpoint still computes, and caches, in bf16).
    """
    profile = make_profile(model, dtype, tp, kv_dtype)
    return kv_cache_capacity(
        profile, get_gpu(gpu), gpu_memory_utilization, block_size, overhead_bytes
    ).num_gpu_blocks


def make_profile(
    model: str | ModelConfig,
    dtype: str | Precision = Precision.BF16,
    tp: int = 1,
    kv_dtype: str | Precision | None = None,
) -> ModelProfile:
    """A :class:`ModelProfile` from friendly names ('llama-3.1-8b', 'fp8'); KV bf16 by default."""
    weights = parse_precision(dtype, "weight dtype")
    kv = Precision.BF16 if kv_dtype is None else parse_precision(kv_dtype, "KV-cache dtype")
    return ModelProfile(get_model(model), weights, kv, tp)


# --- the catalog ---------------------------------------------------------------------------


def normalize_model_name(name: str) -> str:
    """'meta-llama/Llama-3.1-8B-Instruct' and 'llama_3.1_8b' both become 'llama-3.1-8b'."""
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    key = key.rsplit("/", 1)[-1]
    return key.removesuffix("-instruct")


@dataclass(frozen=True, slots=True)
class ModelCatalog:
    models: tuple[ModelConfig, ...]
    _index: Mapping[str, ModelConfig] = field(repr=False, compare=False, hash=False)

    @classmethod
    def from_configs(cls, models: tuple[ModelConfig, ...]) -> ModelCatalog:
        index: dict[str, ModelConfig] = {}
        for model in models:
            names = (model.name, *((model.hf_id,) if model.hf_id else ()), *model.aliases)
            for alias in names:
                key = normalize_model_name(alias)
                other = index.get(key)
                if other is not None and other is not model:
                    raise BadInputError(
                        f"model name {alias!r} names both {other.name} and {model.name}"
                    )
                index[key] = model
        return cls(models, index)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)

    def get(self, name: str | ModelConfig) -> ModelConfig:
        if isinstance(name, ModelConfig):
            return name
        model = self._index.get(normalize_model_name(name))
        if model is None:
            raise BadInputError(f"unknown model {name!r} (known: {', '.join(self.names)})")
        return model


# A Hugging Face repository id: "owner/name" (letters, digits, "-", "_", "."; no "--" or "..",
# which the Hub also refuses).
_HF_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}"
_HF_ID = re.compile(rf"(?!.*(?:--|\.\.)){_HF_NAME}/{_HF_NAME}")

_INT_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_q_heads",
    "num_kv_heads",
    "head_dim",
    "ffn_size",
    "vocab_size",
)


def _model_from_entry(entry: Any, where: str) -> ModelConfig:
    if not isinstance(entry, Mapping) or "name" not in entry:
        raise BadInputError(f"{where}: expected a mapping with a name")
    where = f"{where} ({entry['name']})"
    values: dict[str, int] = {}
    for key in _INT_FIELDS:
        value = entry.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadInputError(f"{where}: {key} must be a positive integer, got {value!r}")
        values[key] = value
    aliases = entry.get("aliases") or ()
    if not isinstance(aliases, list | tuple):
        raise BadInputError(f"{where}: aliases must be a list")
    hf_id = entry.get("hf_id")
    if hf_id is not None and (not isinstance(hf_id, str) or not _HF_ID.fullmatch(hf_id)):
        raise BadInputError(
            f"{where}: hf_id must be a Hugging Face repository id such as "
            f"'meta-llama/Llama-3.1-8B-Instruct', got {hf_id!r}"
        )
    return ModelConfig(
        name=str(entry["name"]),
        tied_embeddings=bool(entry.get("tied_embeddings", False)),
        aliases=tuple(str(a) for a in aliases),
        source=str(entry.get("source", "")),
        hf_id=hf_id,
        **values,
    )


def load_model_catalog(path: str | Path | None = None) -> ModelCatalog:
    """Read a model catalog YAML (the shipped ``models/data/models.yaml`` when ``path`` is None)."""
    if path is None:
        text = resources.files("models").joinpath("data", "models.yaml").read_text("utf-8")
        where = "models/data/models.yaml"
    else:
        where = str(path)
        try:
            text = Path(path).read_text("utf-8")
        except OSError as exc:
            raise BadInputError(f"model catalog {where}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        raise BadInputError(f"model catalog {where} is not valid YAML") from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("models"), list):
        raise BadInputError(f"model catalog {where} must hold a list under 'models'")
    models = tuple(
        _model_from_entry(e, f"{where} entry {i + 1}") for i, e in enumerate(doc["models"])
    )
    return ModelCatalog.from_configs(models)


@functools.cache
def default_model_catalog() -> ModelCatalog:
    """The shipped catalog, read on first use (not at import time)."""
    return load_model_catalog()


def get_model(name: str | ModelConfig) -> ModelConfig:
    """A model from the shipped catalog by name or alias ('llama-3.1-8b', 'meta-llama/...')."""
    return default_model_catalog().get(name)
