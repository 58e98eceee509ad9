"""The models stage: what a model and a precision are (the registry: registry.py, over harness/models.yaml and
harness/precisions.yaml), where a model's weights are and whether this machine can run them (weights.py), and the
formats they are made into or read from (gguf.py, autoawq.py, awq_kernels.py; formats.py: which precision a
compressed-tensors checkpoint declares). Above the questions; beside scoring.

The registry's names are importable from here, as they were from harness.models before the stages.
"""

from harness.models.registry import (
    KV_CACHE_METHODS,
    KV_FP8,
    W4_PRECISIONS,
    AdapterSource,
    EndpointSource,
    Frozen,
    GgufPackage,
    HeldOut,
    HubSource,
    LocalSource,
    ModelSpec,
    PrecisionSpec,
    Source,
    get_model,
    get_precision,
    held_out,
    known_precision,
    model_registry,
    precision_registry,
    tokenizer_model,
    with_kv_cache,
)

__all__ = [
    "KV_CACHE_METHODS",
    "KV_FP8",
    "W4_PRECISIONS",
    "Frozen",
    "GgufPackage",
    "AdapterSource",
    "HubSource",
    "LocalSource",
    "EndpointSource",
    "Source",
    "ModelSpec",
    "PrecisionSpec",
    "model_registry",
    "precision_registry",
    "HeldOut",
    "held_out",
    "get_model",
    "tokenizer_model",
    "get_precision",
    "known_precision",
    "with_kv_cache",
]
