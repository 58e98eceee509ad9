"""The paper's Transformer (appendix tab:model_config): a decoder-only GPT with rotary position embeddings
(RoPE) and NewGELU; depth 3 or 5, hidden size 256, 4 heads.

Everything is explicit so that the numerics can be controlled: ``self.rounding`` is applied to every
intermediate result (embeddings, q/k/v, attention scores and probabilities, MLP activations, residual
stream, logits). It is the identity for training; numerics.Rounding plugs in to evaluate a trained model
as if it computed in another float format (e.g. e5m2), which is how an optimisation failure is told apart
from the expressiveness limit the paper proves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 256


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


class NewGELU(nn.Module):
    """GELU, tanh approximation (the 'NewGELU' of the paper's table, as in GPT-2)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


def rotary_tables(block_size: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(block_size).float(), inv_freq)  # (T, head_dim/2)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs (x1, x2) of every head by a position-dependent angle."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rounding) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = rounding(self.qkv(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        q, k = rounding(apply_rotary(q, cos[:T], sin[:T])), rounding(apply_rotary(k, cos[:T], sin[:T]))
        if rounding is identity:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # fused: the fast path for training
        else:
            scores = rounding(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim))
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            probs = rounding(F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1))
            y = rounding(probs @ v)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return rounding(self.proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.act = NewGELU()
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor, rounding) -> torch.Tensor:
        return rounding(self.proj(rounding(self.act(rounding(self.fc(x))))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rounding) -> torch.Tensor:
        x = rounding(x + self.attn(rounding(self.ln_1(x)), cos, sin, rounding))
        return rounding(x + self.mlp(rounding(self.ln_2(x)), rounding))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        cos, sin = rotary_tables(config.block_size, config.n_embd // config.n_head)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.rounding = identity
        self.apply(self._init_weights)
        for name, parameter in self.named_parameters():  # GPT-2: scale the residual projections by depth
            if name.endswith("proj.weight"):
                nn.init.normal_(parameter, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) for every position."""
        rounding = self.rounding
        cos, sin = self.rope_cos.to(self.wte.weight.dtype), self.rope_sin.to(self.wte.weight.dtype)
        x = rounding(self.wte(tokens))
        for block in self.blocks:
            x = block(x, cos, sin, rounding)
        return rounding(self.lm_head(rounding(self.ln_f(x))))

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 per parameter plus attention (the PaLM / nanoGPT estimate)."""
        c = self.config
        return 6 * self.num_params() + 12 * c.n_layer * c.n_embd * seq_len
