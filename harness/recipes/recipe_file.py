"""A mix written as an llm-compressor recipe: config groups (in the modifier that rounds as the target does) that
give the target format's scheme to every quantized layer the mix does not keep and the kept precision's scheme to
those it keeps (or, where KEEP is a cast such as bf16, lists them in ``ignore``: left unquantized). Targets are
regular expressions over module names, one per projection and side, naming the blocks
(``re:^model\\.layers\\.(3|20)\\.mlp\\.down_proj$``), so each layer matches exactly one group, as vLLM's loader
needs.

>>> targets(["model.layers.3.mlp.down_proj", "model.layers.20.mlp.down_proj", "lm_head"])
['re:^model\\\\.layers\\\\.(3|20)\\\\.mlp\\\\.down_proj$', 're:^lm_head$']
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from harness.models.recipe_files import recipe_text
from harness.models.registry import PrecisionSpec

BLOCK = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def targets(layers: Sequence[str]) -> list[str]:
    """Regular expressions (llm-compressor's ``re:`` targets) that match exactly ``layers``."""
    by_member: dict[str, list[str]] = {}
    others = []
    for layer in layers:
        match = BLOCK.match(layer)
        if match:
            by_member.setdefault(match[2], []).append(match[1])
        else:
            others.append(layer)
    found = [
        f"re:^model\\.layers\\.({'|'.join(blocks)})\\.{re.escape(member)}$" for member, blocks in by_member.items()
    ]
    return found + [f"re:^{re.escape(layer)}$" for layer in others]


def _scheme(preset: str, layers: Sequence[str]) -> dict:
    from compressed_tensors.quantization import preset_name_to_scheme

    return preset_name_to_scheme(preset, targets(layers)).model_dump(mode="json", exclude_none=True)


def mix_recipe(
    target: PrecisionSpec, keep: PrecisionSpec, target_layers: Sequence[str], kept_layers: Sequence[str],
    ignore: Sequence[str], note: str,
) -> str:  # fmt: skip
    """The recipe's YAML text, rounded as the target is (nvfp4+gptq: by GPTQ): ``note`` as its opening comment (what
    the mix is and how it was chosen)."""
    groups = {"group_0": _scheme(target.scheme, target_layers)}
    left_out = list(ignore)
    if kept_layers and keep.scheme is not None:
        groups["group_1"] = _scheme(keep.scheme, kept_layers)
    elif kept_layers:
        left_out += list(kept_layers)
    return recipe_text(groups, left_out, target.rounding, note)
