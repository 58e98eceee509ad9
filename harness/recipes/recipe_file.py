"""A mix written as an llm-compressor recipe: one QuantizationModifier whose ``config_groups`` give the target
format's scheme to every quantized layer the mix does not keep and the kept precision's scheme to those it keeps
(or, where KEEP is a cast such as bf16, lists them in ``ignore``: left unquantized). Targets are regular expressions
over module names, one per projection and side, naming the blocks (``re:^model\\.layers\\.(3|20)\\.mlp\\.down_proj$``),
so each layer matches exactly one group, as vLLM's loader needs.

>>> targets(["model.layers.3.mlp.down_proj", "model.layers.20.mlp.down_proj", "lm_head"])
['re:^model\\\\.layers\\\\.(3|20)\\\\.mlp\\\\.down_proj$', 're:^lm_head$']
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import yaml

from harness.core.errors import UserError

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


def recipe_text(
    target_scheme: str, keep_scheme: str | None, target_layers: Sequence[str], kept_layers: Sequence[str],
    ignore: Sequence[str], note: str,
) -> str:  # fmt: skip
    """The recipe's YAML text: ``note`` as its opening comment (what the mix is and how it was chosen)."""
    groups = {"group_0": _scheme(target_scheme, target_layers)}
    left_out = list(ignore)
    if kept_layers and keep_scheme is not None:
        groups["group_1"] = _scheme(keep_scheme, kept_layers)
    elif kept_layers:
        left_out += list(kept_layers)
    modifier = {"ignore": left_out, "config_groups": groups}
    body = yaml.safe_dump({"quant_stage": {"quant_modifiers": {"QuantizationModifier": modifier}}}, sort_keys=False)
    comment = "".join(f"# {line}\n" for line in note.splitlines())
    return comment + body


def recipe_layers(text: str) -> dict[str, list[str]]:
    """A recipe's config groups as {group name: its targets}, and ``ignore`` under that name: what a checkpoint
    made from it must hold layer by layer."""
    modifier = yaml.safe_load(text)["quant_stage"]["quant_modifiers"]["QuantizationModifier"]
    found = {name: list(group["targets"]) for name, group in modifier["config_groups"].items()}
    return {**found, "ignore": list(modifier.get("ignore", []))}


def check_recipe_file(path) -> None:
    """An llm-compressor recipe whose QuantizationModifier names its config groups, each with targets (what
    harness.sensitivity writes); anything else is one line, before any weights load."""
    try:
        modifier = yaml.safe_load(path.read_text(encoding="utf-8"))["quant_stage"]["quant_modifiers"]
        groups = modifier["QuantizationModifier"]["config_groups"]
        whole = isinstance(groups, dict) and groups and all(group.get("targets") for group in groups.values())
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        whole = False
    if not whole:
        raise UserError(
            f"--recipe {path} is not an llm-compressor recipe numprec reads (quant_stage: quant_modifiers: "
            "QuantizationModifier: config_groups with targets); write one with python -m harness.sensitivity "
            "--budget-bits"
        )
