"""Layer groups: the units a deployment can give a scheme of their own. vLLM fuses a decoder block's q/k/v
projections into one layer (QKVParallelLinear) and gate/up into another (MergedColumnParallelLinear); a fused layer
takes one scheme, so its members are one group. Per block: ``qkv``, ``o``, ``gate_up``, ``down``; and ``lm_head``
where the target quantizes it. ``--groups block`` makes each decoder block one group.

A model whose blocks are not the expected Llama-like ones (self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj) is
one line: its groups would not be the units vLLM loads.

>>> [group.name for group in module_groups(_toy(2))[:5]]
['block 0 qkv', 'block 0 o', 'block 0 gate_up', 'block 0 down', 'block 1 qkv']
>>> module_groups(_toy(2))[0].layers
('model.layers.0.self_attn.q_proj', 'model.layers.0.self_attn.k_proj', 'model.layers.0.self_attn.v_proj')
>>> [group.name for group in block_groups(_toy(2))]
['block 0', 'block 1']
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.backends.fp8_linear import ScaledMMLinear
from harness.core.errors import UserError

# What a linear layer is here: torch's (compressed-tensors' layers are Linear too), and one put on FP8 tensor cores
LINEAR = (torch.nn.Linear, ScaledMMLinear)
KINDS = {  # a group kind: the projections it holds, fused as vLLM fuses them
    "qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "o": ("self_attn.o_proj",),
    "gate_up": ("mlp.gate_proj", "mlp.up_proj"),
    "down": ("mlp.down_proj",),
}
GRANULARITIES = ("module", "block")


@dataclass(frozen=True)
class Group:
    """A set of linear layers that takes one scheme: its name, its block (None for lm_head), its kind, and the
    layers' module names."""

    name: str
    block: int | None
    kind: str
    layers: tuple[str, ...]


def _blocks(model: torch.nn.Module) -> torch.nn.ModuleList:
    blocks = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(blocks, torch.nn.ModuleList) or not len(blocks):
        raise UserError(
            f"{type(model).__name__} has no model.layers of decoder blocks: harness.sensitivity groups the layers of "
            "Llama-like models (Llama, Qwen, Mistral, SmolLM)"
        )
    for index, block in enumerate(blocks):
        for kind, members in KINDS.items():
            for member in members:
                if not isinstance(block.get_submodule(member) if _has(block, member) else None, LINEAR):
                    raise UserError(
                        f"block {index} of {type(model).__name__} has no linear {member} (for the {kind} group): its "
                        "layers are not the expected ones; harness.sensitivity groups Llama-like blocks"
                    )
    return blocks


def _has(module: torch.nn.Module, name: str) -> bool:
    try:
        module.get_submodule(name)
    except AttributeError:
        return False
    return True


def module_groups(model: torch.nn.Module, lm_head: bool = False) -> list[Group]:
    """Every block's four groups in order, and ``lm_head`` last where asked (the target quantizes it)."""
    groups = [
        Group(f"block {index} {kind}", index, kind, tuple(f"model.layers.{index}.{member}" for member in members))
        for index in range(len(_blocks(model)))
        for kind, members in KINDS.items()
    ]
    return groups + ([Group("lm_head", None, "lm_head", ("lm_head",))] if lm_head else [])


def block_groups(model: torch.nn.Module, lm_head: bool = False) -> list[Group]:
    """Each decoder block as one group (its seven projections), and ``lm_head`` where asked."""
    groups = [
        Group(f"block {index}", index, "block", sum((group.layers for group in _of_block(model, index)), ()))
        for index in range(len(_blocks(model)))
    ]
    return groups + ([Group("lm_head", None, "lm_head", ("lm_head",))] if lm_head else [])


def _of_block(model: torch.nn.Module, index: int) -> list[Group]:
    return [group for group in module_groups(model) if group.block == index]


def groups_of(model: torch.nn.Module, granularity: str, lm_head: bool = False) -> list[Group]:
    """The groups at ``granularity`` ("module" or "block")."""
    return (module_groups if granularity == "module" else block_groups)(model, lm_head)


def parameters(model: torch.nn.Module, group: Group) -> int:
    """How many weights a group's layers hold (in the unquantized model: rows x columns)."""
    return sum(model.get_submodule(name).weight.numel() for name in group.layers)


def _toy(blocks: int) -> torch.nn.Module:
    """A Llama-shaped toy for the examples: ``blocks`` blocks of tiny projections."""
    nn = torch.nn

    def block() -> nn.Module:
        attention = nn.Module()
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(attention, name, nn.Linear(2, 2))
        mlp = nn.Module()
        for name in ("gate_proj", "up_proj", "down_proj"):
            setattr(mlp, name, nn.Linear(2, 2))
        layer = nn.Module()
        layer.self_attn, layer.mlp = attention, mlp
        return layer

    toy = nn.Module()
    toy.model = nn.Module()
    toy.model.layers = nn.ModuleList([block() for _ in range(blocks)])
    return toy
