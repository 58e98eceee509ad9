"""An fp8 KV cache, emulated: each key and value is rounded to FP8 E4M3 once, as it is written into the cache, as
vLLM stores them with ``--kv-cache-dtype fp8`` (per-tensor scale 1.0, the scale vLLM uses when a checkpoint carries
no k_scale/v_scale; conversion saturating at 448); the attention then reads what is stored and computes in the
model's dtype, as vLLM's kernels do after reading the cache. Rounding at write costs one token's keys a step; the
earlier emulation rounded the whole cache at every read (the same values: rounding is idempotent).

>>> import torch
>>> as_fp8_cache(torch.tensor([0.1234, 500.0, -3.3], dtype=torch.bfloat16)).tolist()
[0.125, 448.0, -3.25]
"""

from __future__ import annotations

import torch

from harness.backends.shared_prefix import mark_attention

E4M3_MAX = 448.0
KV_SCALE = 1.0
ATTRIBUTE = "numprec_fp8_kv_cache"  # set on each attention module whose cache is fp8
NOTE = (
    f"fp8 e4m3, per-tensor scale {KV_SCALE} (vLLM's default), saturating; emulated by rounding each key and value "
    "as written"
)


def as_fp8_cache(states: torch.Tensor) -> torch.Tensor:
    """Keys or values as an fp8 E4M3 cache holds them, back in their dtype."""
    stored = (states / KV_SCALE).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return stored.to(states.dtype) * KV_SCALE


def use_fp8_cache(model: torch.nn.Module) -> int:
    """Mark every attention layer of ``model`` (those with a layer_idx and a k_proj) to read its cache as fp8."""
    return mark_attention(model, ATTRIBUTE)


def written_as_fp8(cache, model: torch.nn.Module):
    """``cache`` (a transformers DynamicCache or StaticCache) storing, for each attention layer of ``model`` marked
    by use_fp8_cache, its keys and values rounded to fp8 as they are written; unmarked layers as they are."""
    marked = {module.layer_idx for module in model.modules() if getattr(module, ATTRIBUTE, False)}
    for index, layer in enumerate(cache.layers):
        if index in marked:
            layer.update = _rounding(layer.update)
    return cache


def _rounding(update):
    def rounded_update(key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return update(as_fp8_cache(key_states), as_fp8_cache(value_states), *args, **kwargs)

    return rounded_update
