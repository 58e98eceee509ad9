"""An fp8 KV cache, emulated: the keys and values attention reads are rounded to FP8 E4M3 as vLLM stores them with
``--kv-cache-dtype fp8`` (per-tensor scale 1.0, the scale vLLM uses when a checkpoint carries no k_scale/v_scale;
conversion saturating at 448). Rounding is idempotent, so rounding everything the attention reads at each step equals
storing each key and value rounded once, which is what a real fp8 cache does; the attention itself computes in the
model's dtype, as vLLM's kernels do after reading the cache.

>>> import torch
>>> as_fp8_cache(torch.tensor([0.1234, 500.0, -3.3], dtype=torch.bfloat16)).tolist()
[0.125, 448.0, -3.25]
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0
KV_SCALE = 1.0
ATTRIBUTE = "numprec_fp8_kv_cache"  # set on each attention module whose cache is fp8
NOTE = f"fp8 e4m3, per-tensor scale {KV_SCALE} (vLLM's default), saturating; emulated by rounding what attention reads"


def as_fp8_cache(states: torch.Tensor) -> torch.Tensor:
    """Keys or values as an fp8 E4M3 cache holds them, back in their dtype."""
    stored = (states / KV_SCALE).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return stored.to(states.dtype) * KV_SCALE


def use_fp8_cache(model: torch.nn.Module) -> int:
    """Mark every attention layer of ``model`` (those with a layer_idx and a k_proj) to read its cache as fp8."""
    marked = 0
    for module in model.modules():
        if hasattr(module, "layer_idx") and hasattr(module, "k_proj"):
            setattr(module, ATTRIBUTE, True)
            marked += 1
    return marked
