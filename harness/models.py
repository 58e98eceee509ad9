"""The model and precision registries (``models.yaml``, ``precisions.yaml``): names, what each model takes, what
each precision records. Nothing here touches weights; harness/weights.py finds, checks and prepares them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources

import yaml

from harness.errors import UserError

# The W4A16 precision each calibration method makes (harness.quantize --method METHOD).
W4_PRECISIONS = {"gptq": "gptq-w4", "awq": "awq-w4"}


@dataclass(frozen=True)
class PrecisionSpec:
    name: str
    method: str
    weight_dtype: str
    activation_dtype: str
    weight_bits: int
    requires: str = "cpu"
    group_size: int | None = None
    backend: str | None = None  # the one engine that can run it (llama.cpp for GGUF); None: any

    @property
    def prequantized(self) -> bool:
        """Weights that come quantized in a checkpoint of their own (GPTQ/AWQ), not made at load time."""
        return self.method in ("gptq", "awq")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    source: dict
    default_precision: str
    precisions: list[str] = field(default_factory=list)
    requires: str = "cpu"
    needs_adapter: bool = False
    w4_group_size: int | None = None  # GPTQ/AWQ group size when the registry's 128 does not divide the widths


def _load_yaml(name: str) -> dict:
    return yaml.safe_load(resources.files("harness").joinpath(name).read_text(encoding="utf-8"))


@cache
def model_registry() -> dict[str, ModelSpec]:
    return {name: ModelSpec(name=name, **entry) for name, entry in _load_yaml("models.yaml").items()}


@cache
def precision_registry() -> dict[str, PrecisionSpec]:
    return {name: PrecisionSpec(name=name, **entry) for name, entry in _load_yaml("precisions.yaml").items()}


def get_model(name: str) -> ModelSpec:
    models = model_registry()
    if name not in models:
        raise UserError(f"unknown model '{name}'; known: {', '.join(models)} (or add one to harness/models.yaml)")
    return models[name]


def get_precision(model: ModelSpec, name: str) -> PrecisionSpec:
    precisions = precision_registry()
    if name not in precisions:
        raise UserError(f"unknown precision '{name}'; known: {', '.join(precisions)}")
    if name not in model.precisions:
        raise UserError(f"model {model.name} does not run at {name}; it takes: {', '.join(model.precisions)}")
    precision = precisions[name]
    if precision.prequantized and model.w4_group_size:
        precision = replace(precision, group_size=model.w4_group_size)
    return precision
