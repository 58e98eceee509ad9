"""Bits a weight of a recipe's layers: a precision's stored bits (harness/models/stored_bits.py reads them from a
checkpoint's safetensors headers), and the effective bits of a set of layers together."""

from __future__ import annotations

from pathlib import Path

from harness.models import PrecisionSpec
from harness.models.stored_bits import layer_bits, stored_tensors


def precision_bits(precision: PrecisionSpec, checkpoint: Path | None, shapes: dict[str, tuple[int, int]]) -> dict:
    """Bits a weight of each layer at ``precision``: its weight bits for a cast, else as ``checkpoint`` stores it."""
    if precision.method == "cast" or checkpoint is None:
        return {layer: float(precision.weight_bits) for layer in shapes}
    return layer_bits(stored_tensors(checkpoint), list(shapes), shapes)


def mean_bits(bits: dict[str, float], shapes: dict[str, tuple[int, int]], layers: list[str]) -> float:
    """The effective bits of ``layers`` together: their stored bits over their weights."""
    weights = sum(shapes[layer][0] * shapes[layer][1] for layer in layers)
    return sum(bits[layer] * shapes[layer][0] * shapes[layer][1] for layer in layers) / max(1, weights)
