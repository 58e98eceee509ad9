"""The models stage: what a model and a precision are, what their weights are, and how a format computes.

- registry.py: models and precisions, over harness/models.yaml and harness/precisions.yaml;
- weights.py: a variant's Weights, resolved once at plan time (where they are, whether this machine can run them, the
  step that makes them); checkpoints.py: a model directory read once (config.json, quantization_config, shard
  headers), and the checks made of it;
- formats.py: which precision a compressed-tensors checkpoint declares; mix.py: a checkpoint whose layers hold
  several formats; stored_bits.py: bits a weight as stored;
- gguf.py (GGUF variants, requantized once), autoawq.py (AutoAWQ checkpoints), awq_kernels.py (gptqmodel's AWQ kernel,
  chosen and built);
- fp4.py and activation_qdq.py: compressed-tensors' FP4 rounding and activation quantization in one pass on a CPU;
  qdq_kernels.py: that pass compiled ahead of time, once a machine, and loaded by each process.

Above the questions; beside scoring. The registry's names are importable from here.
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
    named_rounding,
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
    "named_rounding",
    "known_precision",
    "with_kv_cache",
]
