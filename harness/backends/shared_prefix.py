"""Attention over a few-shot prefix that every row of a batch shares, stored once instead of once per row.

Every prompt of a cell starts with the same ~140 tokens (chat header and the paper's few-shot examples).
Replicating their keys and values for each of B rows costs B copies, and a KV cache that grows by
concatenation copies them all again at every decoding step. Here the KV cache holds only each row's own
tokens (padding, expression, answer); the prefix's keys and values live once per layer, shape
[1, kv_heads, P, head_dim]. A decoding step (one query a row) scores it against both, the prefix read once for
all rows, and takes one softmax over the concatenated scores; a prompt's suffix (many queries a row) joins the
prefix to its rows' keys for torch's fused attention (scaled_dot_product_attention), where one copy per row is
small next to the work. Either way the same mathematics as attending over the full sequence.

A static KV cache (the GPU decode path) is read only as far as it is filled: the 2D attention mask a step is given
may be narrower than the cache (its width a bucket of the filled positions), and then the mask and the keys and
values the step reads end there, not at the cache's capacity.

Registered with transformers' AttentionInterface (and sdpa's mask builder), so the model code is untouched; the
prefix reaches it as the ``shared_prefix`` keyword of the model's forward call, which transformers hands down to
every attention call (no state outside the call). A layer marked by harness/backends/kv_cache.py finds its keys and
values (the prefix's too) as an fp8 cache holds them.

A layer marked by products_in_float32 (bf16 on a CPU without bf16 instructions, where its linear layers are widened:
harness/backends/widened_bf16.py) multiplies a decoding step's bf16 queries, keys, scores and values by float32's
GEMM and rounds each product to bf16, as torch's bf16 kernel does (exact products, float32 sums), only the order of
the sums differing: there torch's bf16 batched matmul takes 15-20 times float32's time, and the step's products over
the prefix cost as much as all its linear layers.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "numprec_shared_prefix"
FLOAT32_PRODUCTS = "numprec_float32_products"  # set on each attention module whose decode products are widened


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, heads, T, D]
    key: torch.Tensor,  # [B, kv_heads, S, D]: the rows' own tokens so far
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,  # bool [B, 1, T, S], True = attend; None = plain causal
    scaling: float | None = None,
    dropout: float = 0.0,
    shared_prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None,  # per layer: keys, values [1, kv, P, D]
    **kwargs,
) -> tuple[torch.Tensor, None]:
    batch, heads, length, dim = query.shape
    scaling = dim**-0.5 if scaling is None else scaling
    if attention_mask is None and length > 1:
        # transformers leaves the mask out where sdpa's is_causal would do: one query (which sees every key), or
        # queries from the cache's start, aligned upper-left (a static cache's prefill sees keys 0..i, not the
        # unwritten slots after them).
        attention_mask = torch.ones(length, key.shape[2], dtype=torch.bool, device=query.device).tril()[None, None]
    if attention_mask is not None:
        # a static cache filled up to the mask's width: the unfilled slots after it are never read (elsewhere the
        # keys are as wide as the mask already; no branch on the width, for the compiled step's sake)
        key, value = key[:, :, : attention_mask.shape[-1]], value[:, :, : attention_mask.shape[-1]]
    prefix = shared_prefix[module.layer_idx] if shared_prefix else None
    if prefix is not None and length == 1:
        wide = getattr(module, FLOAT32_PRODUCTS, False)
        out = _one_query_over_the_prefix(query, key, value, attention_mask, scaling, prefix, wide)
    else:
        if prefix is not None:
            # Many queries a row (a prompt's suffix): its own copy of the prefix's keys costs little next to them,
            # and the fused kernel (flash / memory-efficient on a GPU, flash on a CPU) takes the joined keys.
            key, value, attention_mask = _joined(prefix, key, value, attention_mask)
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=heads != key.shape[1]
        )
    return out.transpose(1, 2).contiguous(), None


def _joined(prefix, key, value, attention_mask):
    """The prefix's keys and values before each row's own, and the mask (never None here: many queries a row)
    widened to see all of the prefix."""
    batch, split = key.shape[0], prefix[0].shape[2]
    key = torch.cat([prefix[0].expand(batch, -1, -1, -1), key], dim=2)
    value = torch.cat([prefix[1].expand(batch, -1, -1, -1), value], dim=2)
    rows, _, length, _ = attention_mask.shape
    seen = torch.ones if attention_mask.dtype == torch.bool else torch.zeros
    visible = seen((rows, 1, length, split), dtype=attention_mask.dtype, device=attention_mask.device)
    return key, value, torch.cat([visible, attention_mask], dim=-1)


def mark_attention(model: torch.nn.Module, attribute: str) -> int:
    """Set ``attribute`` on every attention layer of ``model`` (those with a layer_idx and a k_proj), which this
    attention function (or the cache it writes) reads; returns how many."""
    marked = 0
    for module in model.modules():
        if hasattr(module, "layer_idx") and hasattr(module, "k_proj"):
            setattr(module, attribute, True)
            marked += 1
    return marked


def products_in_float32(model: torch.nn.Module) -> int:
    """Mark every attention layer of ``model`` to take its decoding steps' products through float32's GEMM."""
    return mark_attention(model, FLOAT32_PRODUCTS)


def _product(a: torch.Tensor, b: torch.Tensor, wide: bool) -> torch.Tensor:
    """``a @ b``; where ``wide``, the same bf16 values multiplied by float32's GEMM and rounded once to their dtype."""
    return (a.float() @ b.float()).to(a.dtype) if wide else a @ b


def _one_query_over_the_prefix(query, key, value, attention_mask, scaling, prefix, wide) -> torch.Tensor:
    """A decoding step: rows folded into the matrix dimension, so one matmul per kv head reads the prefix once for
    all rows (joining the prefix to every row's keys would copy it B times a step), one softmax over both."""
    batch, heads, length, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    # Query heads j*groups .. (j+1)*groups-1 read kv head j (transformers' repeat_kv layout).
    q = query.reshape(batch, kv_heads, groups * length, dim)
    own = _product(q, key.transpose(-1, -2), wide).view(batch, kv_heads, groups, length, keys) * scaling
    if attention_mask is not None:
        mask = attention_mask[:, :, None]
        own = own.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else own + mask
    own = own.view(batch, kv_heads, groups * length, keys)
    prefix_key, prefix_value = prefix[0][0], prefix[1][0]  # [kv, P, D]
    split = prefix_key.shape[1]
    rows = q.transpose(0, 1).reshape(kv_heads, batch * groups * length, dim)
    shared = (
        _product(rows, prefix_key.transpose(-1, -2), wide).view(kv_heads, batch, groups * length, split).transpose(0, 1)
    )
    probs = torch.softmax(torch.cat([shared * scaling, own], dim=-1), dim=-1)
    weights = probs[..., :split].transpose(0, 1).reshape(kv_heads, batch * groups * length, split)
    from_prefix = _product(weights, prefix_value, wide).view(kv_heads, batch, groups * length, dim).transpose(0, 1)
    out = from_prefix + _product(probs[..., split:], value, wide)
    return out.view(batch, kv_heads, groups, length, dim).reshape(batch, heads, length, dim)


def filled_mask(batch_size: int, q_length: int, kv_length: int, kv_offset: int = 0, attention_mask=None, **kwargs):
    """sdpa's mask, no wider than the 2D attention mask (a static cache is filled up to it: the attention reads the
    keys only as far as the mask goes), and always materialised where there is a 2D mask, so that a mask of exactly
    the filled positions is never left out (which would read the whole cache). No branch on the width: one
    compiled step serves every width."""
    if attention_mask is not None and attention_mask.ndim == 2:
        kv_length = torch.sym_min(kv_length, attention_mask.shape[-1] - kv_offset)
        kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(batch_size, q_length, kv_length, kv_offset=kv_offset, attention_mask=attention_mask, **kwargs)


AttentionInterface.register(NAME, shared_prefix_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, filled_mask)
