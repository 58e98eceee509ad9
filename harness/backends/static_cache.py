"""What the GPU decode path's static KV cache is read through: a mask up to the filled positions in buckets, and
the shared prefix's tensors marked once for the compiled step (harness/backends/hf.py's static path)."""

from __future__ import annotations

import torch

BUCKET = 16  # positions: a static cache is read in multiples of this, as far as it is filled


class FilledMask:
    """A static cache's 2D attention mask as a step reads it: up to the filled positions, rounded up to a multiple
    of BUCKET (so few widths serve a batch), never past the cache. One view per width, made once per batch; where
    the steps are compiled, its width is marked dynamic once, so every width replays one compiled step."""

    def __init__(self, mask: torch.Tensor, length: int, graphs: bool):
        self.mask, self.length, self.graphs, self.views = mask, length, graphs, {}

    def up_to(self, filled: int) -> torch.Tensor:
        width = min(self.length, -(-filled // BUCKET) * BUCKET)
        view = self.views.get(width)
        if view is None:
            view = self.views[width] = self.mask[:, :width]
            if self.graphs:
                torch._dynamo.mark_dynamic(view, 1)
        return view


def bind_once(prefix: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """A shared prefix's keys and values as the compiled step takes them, marked once when computed: their length a
    dynamic dimension (one compiled step serves every prompt template), their addresses static (a CUDA graph reads
    them where they are instead of copying them in at every replay)."""
    for tensor in (tensor for pair in prefix for tensor in pair):
        torch._dynamo.mark_dynamic(tensor, 2)
        torch._dynamo.mark_static_address(tensor)
