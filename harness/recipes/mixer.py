"""One model whose layer groups are switched between two precisions without copying a weight: the target's model
(every layer at TARGET) and the kept precision's (KEEP), each loaded as the transformers backend loads it, so each
layer computes exactly as that precision's checkpoint does (compressed-tensors' emulation, its own scales and
activation rounding). ``use(kept)`` puts the kept model's module object in the target model's place for every layer
named in ``kept`` and the target's own everywhere else: a mix of the two is then what a checkpoint of that recipe
computes layer by layer, and switching costs a few attribute assignments.

Both models must hold the same linear layers, with the same shapes; a pair that does not is one line.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from harness.core.errors import UserError
from harness.recipes.groups import LINEAR


def linear_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Every linear layer of ``model`` by module name (groups.LINEAR says what one is)."""
    return {name: module for name, module in model.named_modules() if isinstance(module, LINEAR)}


def _decompressed(model: torch.nn.Module) -> None:
    """A model loaded from compressed-tensors holds its stored codes until its first forward pass, which turns
    every layer's weight into its dequantized values (for the whole model at once): run that pass now, so that a
    layer lent to the other model is already what its precision computes."""
    with torch.inference_mode():
        model(torch.tensor([[0, 1]], device=next(model.parameters()).device))


class Mixer:
    """``Mixer(target_model, kept_model)``; ``mixer.use(names)``; ``mixer.model`` computes the mix."""

    def __init__(self, target: torch.nn.Module, kept: torch.nn.Module, target_name: str, kept_name: str):
        for model in (target, kept):
            _decompressed(model)
        self.model = target
        self.own, self.kept = linear_layers(target), linear_layers(kept)
        missing = sorted(set(self.own) - set(self.kept))
        if missing:
            raise UserError(
                f"the {kept_name} model has no {missing[0]} (and {len(missing) - 1} more layers the {target_name} "
                "model has): the two precisions must be of the same model"
            )
        for name, layer in self.own.items():
            other = self.kept[name]
            if (layer.in_features, layer.out_features) != (other.in_features, other.out_features):
                raise UserError(
                    f"{name} is {layer.in_features} x {layer.out_features} at {target_name} but "
                    f"{other.in_features} x {other.out_features} at {kept_name}: not the same model"
                )
        self.in_use: frozenset[str] = frozenset()

    @property
    def layers(self) -> list[str]:
        return list(self.own)

    def use(self, kept: Iterable[str]) -> None:
        """The kept precision's layers for the names in ``kept``, the target's for the rest."""
        wanted = frozenset(kept)
        unknown = sorted(wanted - set(self.own))
        if unknown:
            raise UserError(f"no linear layer {unknown[0]} in the model; name layers as model.named_modules() does")
        for name in wanted ^ self.in_use:
            parent, _, child = name.rpartition(".")
            module = self.kept[name] if name in wanted else self.own[name]
            setattr(self.model.get_submodule(parent) if parent else self.model, child, module)
        self.in_use = wanted

    def quantized(self, layers: Iterable[str]) -> list[str]:
        """Of ``layers``, those the target quantizes (a layer the target leaves out, lm_head usually, computes the
        same in both)."""
        return [name for name in layers if getattr(self.own[name], "quantization_scheme", None) is not None]
