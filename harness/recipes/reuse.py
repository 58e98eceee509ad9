"""The blocks before a group's, computed once. A configuration that changes one group leaves every decoder block
before that group's block as one of the uniform models has it: restore-one is uniform TARGET up to the group's block,
quantize-one uniform KEEP. ``recording`` keeps, while a uniform model scores the problems, the hidden states that
enter each block (and leave the last), one per forward call in call order; ``replaying`` then stands in for the
blocks before a group's block: the last of them hands over the recorded state, the others pass theirs through,
and only the blocks from the group's on compute. The calls are the same forwards in the same order (the shared prefix,
then the rows a chunk at a time), so each block gets bit for bit the input a whole pass would give it; on the 135M
model's 30 blocks that leaves half the blocks of a configuration to compute, on average.

The decoder blocks' cache layers before the group's stay empty: no block that computes reads them (each attends over
its own layer only).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


class BlockInputs:
    """For each block index 0..N (N: what leaves the last block), the hidden states of every forward call."""

    def __init__(self, blocks: int):
        self.entering: list[list[torch.Tensor]] = [[] for _ in range(blocks + 1)]


@contextmanager
def recording(layers: torch.nn.ModuleList) -> Iterator[BlockInputs]:
    """Record what enters each of ``layers`` (and what leaves the last) during the block."""
    found = BlockInputs(len(layers))

    def entering(index: int):
        def hook(module, args, kwargs):
            found.entering[index].append((args[0] if args else kwargs["hidden_states"]).detach().clone())

        return hook

    def leaving(module, args, kwargs, output):
        found.entering[len(layers)].append((output[0] if isinstance(output, tuple) else output).detach().clone())

    handles = [layer.register_forward_pre_hook(entering(index), with_kwargs=True) for index, layer in enumerate(layers)]
    handles.append(layers[-1].register_forward_hook(leaving, with_kwargs=True))
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


class _Stand(torch.nn.Module):
    """A block that does not compute: it hands over the next recorded state, or passes its input through."""

    def __init__(self, states: list[torch.Tensor] | None):
        super().__init__()
        self.states = iter(states) if states is not None else None

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if self.states is None:
            return hidden_states
        state = next(self.states, None)
        if state is None:
            raise RuntimeError("replayed more forward calls than were recorded: the configuration's calls differ")
        return state


@contextmanager
def replaying(layers: torch.nn.ModuleList, recorded: BlockInputs, first: int) -> Iterator[None]:
    """Within the block, ``layers[:first]`` do not compute: the recorded state entering block ``first`` is handed
    to it (``first`` = len(layers): what leaves the last block goes to the final norm)."""
    if first == 0:
        yield
        return
    kept = list(layers[:first])
    for index in range(first):
        layers[index] = _Stand(recorded.entering[first] if index == first - 1 else None)
    try:
        yield
    finally:
        for index, layer in enumerate(kept):
            layers[index] = layer
