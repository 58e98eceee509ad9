"""Bits a weight of a recipe's layers: a precision's stored bits (harness/models/stored_bits.py reads them from a
checkpoint's safetensors headers), and the one function for a mix's mean bits, ``MixSpace.bits``.

>>> space = MixSpace("nvfp4", "fp8", ("a", "b"), {"a": (4, 4), "b": (4, 12)},
...                  {"nvfp4": {"a": 4.5, "b": 4.5}, "fp8": {"a": 8.5, "b": 8.5}}, {"A": ("a",), "B": ("b",)})
>>> space.bits([]), space.bits(["A"]), space.bits(["A", "B"]), space.layers_of(["B"])
(4.5, 5.5, 8.5, ['b'])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.models import PrecisionSpec
from harness.models.stored_bits import layer_bits, stored_tensors


def precision_bits(precision: PrecisionSpec, checkpoint: Path | None, shapes: dict[str, tuple[int, int]]) -> dict:
    """Bits a weight of each layer at ``precision``: its weight bits for a cast, else as ``checkpoint`` stores it."""
    if precision.method == "cast" or checkpoint is None:
        return {layer: float(precision.weight_bits) for layer in shapes}
    return layer_bits(stored_tensors(checkpoint), list(shapes), shapes)


def mean_bits(bits: Mapping[str, float], shapes: Mapping[str, tuple[int, int]], layers: Iterable[str]) -> float:
    """The effective bits of ``layers`` together: their stored bits over their weights."""
    weights = {layer: shapes[layer][0] * shapes[layer][1] for layer in layers}
    return sum(bits[layer] * count for layer, count in weights.items()) / max(1, sum(weights.values()))


@dataclass(frozen=True)
class MixSpace:
    """The mixes of two precisions a search chooses among: the target's and the kept precision's names, the layers
    the target quantizes (the only ones a mix changes), their [out, in] shapes, each precision's stored bits a layer,
    and each group's quantized layers. A mix is a set of groups kept at KEEP."""

    target: str
    keep: str
    layers: tuple[str, ...]
    shapes: Mapping[str, tuple[int, int]]
    stored: Mapping[str, Mapping[str, float]]  # precision name -> layer -> bits a weight
    members: Mapping[str, tuple[str, ...]]  # group name -> its layers the target quantizes

    def layers_of(self, groups: Iterable[str]) -> list[str]:
        """The layers of ``groups``, in the model's order."""
        held = {layer for group in groups for layer in self.members[group]}
        return [layer for layer in self.layers if layer in held]

    def bits(self, groups: Iterable[str]) -> float:
        """Bits a weight of the quantized layers with ``groups`` kept: the one mean every recipe is measured by."""
        held = set(self.layers_of(groups))
        stored = {layer: self.stored[self.keep if layer in held else self.target][layer] for layer in self.layers}
        return mean_bits(stored, self.shapes, self.layers)
