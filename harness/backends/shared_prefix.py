"""Attention over a few-shot prefix that every row of a batch shares, stored once instead of once per row.

Every prompt of a cell starts with the same ~140 tokens (chat header and the paper's few-shot examples).
Replicating their keys and values for each of B rows costs B copies, and a KV cache that grows by
concatenation copies them all again at every decoding step. Here the KV cache holds only each row's own
tokens (padding, expression, answer); the prefix's keys and values live once per layer, shape
[1, kv_heads, P, head_dim], and each attention call scores the queries against both and takes one softmax
over the concatenated scores: the same mathematics as attending over the full sequence.

Registered with transformers' AttentionInterface (and sdpa's mask builder), so the model code is untouched; the
prefix reaches it as the ``shared_prefix`` keyword of the model's forward call, which transformers hands down to
every attention call (no state outside the call).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "numprec_shared_prefix"


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
    kv_heads, keys = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scaling = dim**-0.5 if scaling is None else scaling
    # Query heads j*groups .. (j+1)*groups-1 read kv head j (transformers' repeat_kv layout).
    q = query.reshape(batch, kv_heads, groups * length, dim)
    own = (q @ key.transpose(-1, -2)).view(batch, kv_heads, groups, length, keys) * scaling
    if attention_mask is None and length > 1:
        # transformers leaves the mask out where sdpa's is_causal would do: one query (which sees every key), or
        # queries from the cache's start, aligned upper-left (a static cache's prefill sees keys 0..i, not the
        # unwritten slots after them).
        attention_mask = torch.ones(length, keys, dtype=torch.bool, device=query.device).tril()[None, None]
    if attention_mask is not None:
        mask = attention_mask[:, :, None]
        own = own.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else own + mask
    own = own.view(batch, kv_heads, groups * length, keys)
    prefix = shared_prefix[module.layer_idx] if shared_prefix else None
    if prefix is None:
        probs = torch.softmax(own, dim=-1)
        out = probs @ value
    else:
        prefix_key, prefix_value = prefix[0][0], prefix[1][0]  # [kv, P, D]
        split = prefix_key.shape[1]
        # Rows folded into the matrix dimension: one matmul per kv head reads the prefix once for all rows.
        rows = q.transpose(0, 1).reshape(kv_heads, batch * groups * length, dim)
        shared = (rows @ prefix_key.transpose(-1, -2)).view(kv_heads, batch, groups * length, split).transpose(0, 1)
        probs = torch.softmax(torch.cat([shared * scaling, own], dim=-1), dim=-1)
        weights = probs[..., :split].transpose(0, 1).reshape(kv_heads, batch * groups * length, split)
        from_prefix = (weights @ prefix_value).view(kv_heads, batch, groups * length, dim).transpose(0, 1)
        out = from_prefix + probs[..., split:] @ value
    out = out.view(batch, kv_heads, groups, length, dim).reshape(batch, heads, length, dim)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, shared_prefix_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
