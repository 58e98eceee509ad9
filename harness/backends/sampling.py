"""Sampling for a whole batch on the device, reproducible per problem.

A sampled token is the Gumbel-max draw ``argmax(warped logits + G)``, which has exactly the distribution
``softmax(warped logits)``. The noise G of a candidate token is a hash of (the problem's seed, the step, the
token id), computed on the device: so a problem's sampled answer depends on its seed only, never on the batch it
is in, its row, the batch size or the number of processes, and no generator state is kept per row. Only the
candidates that survive top-k get noise (the others are -inf after warping), so a step costs rows x top_k hashes.

The warping is the paper's generation table (tab:generation_config) in transformers' order: temperature, top-k,
top-p. It is done on the top-k candidates only (transformers' top-p warper sorts the whole vocabulary, per row and
step); the kept set equals transformers' warpers' (tested).
"""

from __future__ import annotations

import torch

# splitmix64's constants, as signed 64-bit integers (torch has no unsigned 64-bit arithmetic)
_GOLDEN = 0x9E3779B97F4A7C15 - 2**64
_MIX1 = 0xBF58476D1CE4E5B9 - 2**64
_MIX2 = 0x94D049BB133111EB - 2**64
_STEP = 0xD1B54A32D192ED03 - 2**64


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    x = x + _GOLDEN
    x = (x ^ _shift_right(x, 30)) * _MIX1
    x = (x ^ _shift_right(x, 27)) * _MIX2
    return x ^ _shift_right(x, 31)


def uniform(seeds: torch.Tensor, step: int, token_ids: torch.Tensor) -> torch.Tensor:
    """Uniform numbers in (0, 1), float64, one per (row, candidate): a function of (seed, step, token id) only."""
    step_key = _splitmix64(torch.full_like(seeds, step) ^ _STEP).view(-1, 1)
    x = _splitmix64(_splitmix64(seeds.view(-1, 1) ^ step_key) ^ token_ids)
    return (_shift_right(x, 11).double() + 0.5) * 2.0**-53


def warped_candidates(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, token ids) of each row's top-k candidates after temperature, with -inf where top-p removes one:
    a candidate stays while the probability of the candidates ranked above it is below top_p (the first always)."""
    values, candidates = (logits / temperature).topk(min(top_k, logits.shape[-1]), dim=-1)
    probabilities = values.softmax(-1)
    above = probabilities.cumsum(-1) - probabilities
    removed = above >= top_p
    removed[..., 0] = False
    return values.masked_fill(removed, float("-inf")), candidates


def gumbel_choice(values: torch.Tensor, candidates: torch.Tensor, seeds: torch.Tensor, step: int) -> torch.Tensor:
    """One candidate per row drawn from softmax(values), with the problem-seeded noise."""
    noise = -torch.log(-torch.log(uniform(seeds, step, candidates)))
    return candidates.gather(-1, (values.double() + noise).argmax(-1, keepdim=True)).squeeze(-1)
