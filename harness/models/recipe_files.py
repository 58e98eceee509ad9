"""llm-compressor recipes, written by one function (a scheme's config groups rounded by a method: what
harness.quantize runs and harness.sensitivity writes) and read once into what numprec needs of them: the modifiers in
order, the rounding they make (models/rounding.py), and the config groups and ignore list of the modifier that
quantizes, whatever modifier that is (QuantizationModifier, GPTQModifier, AutoRoundModifier) and whatever its stage is
called. A recipe may give its scheme as a preset (``scheme: NVFP4`` with ``targets``, or ``scheme: {NVFP4:
[targets]}``); it is read as the config group the preset stands for, as llm-compressor resolves it.

llm-compressor saves the recipe it ran beside the checkpoint (recipe.yaml) with Python tags on some values
(``actorder: !!python/object/apply:...ActivationOrdering [static]``); a tagged value is read as its arguments.

>>> recipe = read_recipe('''
... default_stage:
...   default_modifiers:
...     GPTQModifier:
...       ignore: [lm_head]
...       actorder: !!python/object/apply:compressed_tensors.ActivationOrdering [static]
...       config_groups: {group_0: {targets: [Linear], weights: {num_bits: 4, type: float}}}
... ''', "recipe.yaml")
>>> recipe.modifiers, recipe.rounding, recipe.quantization["ignore"], list(recipe.groups)
(('GPTQModifier',), 'gptq', ['lm_head'], ['group_0'])
>>> text = recipe_text({"group_0": {"targets": ["Linear"]}}, ["lm_head"], "awq", "an example")
>>> read_recipe(text, "written").modifiers
('AWQModifier', 'QuantizationModifier')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.core.errors import UserError
from harness.models.rounding import GROUP_WIDE, ROUNDINGS, rounding_of_modifiers


class _RecipeLoader(yaml.SafeLoader):
    """YAML's safe loader, reading a Python-tagged value as its plain arguments (nothing is constructed)."""


def _plain(loader: yaml.SafeLoader, suffix: str, node: yaml.Node):
    if isinstance(node, yaml.SequenceNode):
        items = loader.construct_sequence(node, deep=True)
        return items[0] if len(items) == 1 else items
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    return loader.construct_scalar(node)


_RecipeLoader.add_multi_constructor("tag:yaml.org,2002:python/", _plain)


@dataclass(frozen=True)
class Recipe:
    modifiers: tuple[str, ...]  # llm-compressor's modifier classes, in the order they run
    rounding: str
    quantization: Mapping  # {"config_groups": {name: scheme with targets}, "ignore": [...]}

    @property
    def groups(self) -> Mapping:
        return self.quantization["config_groups"]


# AutoRound reaches FP4 through its own presets only (llm-compressor 0.14: config groups of NVFP4 or MXFP4 stop with
# "No quantization function found for dtype=fp"); a recipe of AutoRound names the preset instead, as its docs do.
AUTOROUND_PRESETS = ("NVFP4", "MXFP4")


def recipe_text(
    groups: Mapping[str, dict], ignore: Sequence[str], rounding: str, note: str, preset: str | None = None
) -> str:
    """The recipe that quantizes as ``groups`` say (name -> scheme with targets), leaves ``ignore`` as it is and
    rounds by ``rounding``, with ``note`` as its opening comment. ``preset``: the scheme's llm-compressor preset where
    the groups are one preset's (AutoRound is given the preset)."""
    steps = ROUNDINGS[rounding].steps
    quantizes = {"config_groups": dict(groups), "ignore": list(ignore)}
    if rounding == "autoround" and preset in AUTOROUND_PRESETS:
        (group,) = groups.values()
        quantizes = {"scheme": preset, "targets": list(group["targets"]), "ignore": list(ignore)}
    elif rounding == "autoround" and any(_fp4(group) for group in groups.values()):
        raise UserError(
            "AutoRound rounds NVFP4 and MXFP4 through its own presets only, one format a model; round a mix of "
            "them with rtn, gptq or awq"
        )
    modifiers = {name: _group_wide(dict(settings), groups) for name, settings in steps[:-1]}
    modifiers[steps[-1][0]] = {**quantizes, **steps[-1][1]}
    body = yaml.safe_dump({"quant_stage": {"quant_modifiers": modifiers}}, sort_keys=False)
    return "".join(f"# {line}\n" for line in note.splitlines()) + body


def _group_wide(settings: dict, groups: Mapping[str, dict]) -> dict:
    """A step's settings with GROUP_WIDE (a rotation's block) made the groups' narrowest weight group size, and the
    step's targets those groups' (in a mix, the layers kept at a format without groups, FP8's, are not rotated, as
    the search scored them: harness.sensitivity mixes the rotated checkpoint's layers with the plain KEEP's)."""
    if GROUP_WIDE not in settings.values():
        return settings
    grouped = [group for group in groups.values() if (group.get("weights") or {}).get("group_size")]
    if not grouped:
        raise UserError("rotations are made a scale group wide: give a format with groups (nvfp4, mxfp4)")
    size = min(group["weights"]["group_size"] for group in grouped)
    targets = sorted({target for group in grouped for target in group["targets"]})
    return {**{key: size if value == GROUP_WIDE else value for key, value in settings.items()}, "targets": targets}


def _fp4(group: Mapping) -> bool:
    weights = group.get("weights") or {}
    return weights.get("type") == "float" and weights.get("num_bits") == 4


def _modifiers(data) -> list[tuple[str, Mapping]]:
    """(class name, arguments) of every modifier, stage after stage: a stage maps ``*_modifiers`` to modifiers."""
    found = []
    for stage in data.values():
        for key, modifiers in (stage or {}).items():
            if key.endswith("_modifiers") and isinstance(modifiers, Mapping):
                found += [(name, arguments or {}) for name, arguments in modifiers.items()]
    return found


def _groups(arguments: Mapping) -> dict:
    """A quantizing modifier's config groups, a preset ``scheme`` read as the group it stands for."""
    groups = arguments.get("config_groups")
    if groups:
        return dict(groups)
    scheme = arguments.get("scheme")
    if isinstance(scheme, str):
        scheme = {scheme: arguments.get("targets") or ["Linear"]}
    if not isinstance(scheme, Mapping):
        return {}
    from compressed_tensors.quantization import preset_name_to_scheme

    return {
        f"group_{index}": preset_name_to_scheme(preset, list(targets)).model_dump(mode="json", exclude_none=True)
        for index, (preset, targets) in enumerate(scheme.items())
    }


def read_recipe(text: str, where: str) -> Recipe:
    """The recipe in ``text`` (``where`` names it in the one line said of a recipe numprec cannot read)."""
    readable = ", ".join(" + ".join(method.modifiers) for method in ROUNDINGS.values())
    try:
        data = yaml.load(text, Loader=_RecipeLoader)  # noqa: S506 - a SafeLoader; tags read as plain values
        modifiers = _modifiers(data) if isinstance(data, Mapping) else []
    except (yaml.YAMLError, AttributeError, TypeError):
        modifiers = []
    if not modifiers:
        raise UserError(
            f"{where} is not an llm-compressor recipe numprec reads (a stage whose *_modifiers hold {readable}); "
            "write one with python -m harness.sensitivity --budget-bits"
        )
    names = tuple(name for name, _ in modifiers)
    rounding = rounding_of_modifiers(names)
    if rounding is None:
        raise UserError(
            f"{where}: numprec reads recipes of {readable}, not {' + '.join(names)}; write the recipe with one of these"
        )
    quantizing = [(arguments, groups) for _, arguments in modifiers if (groups := _groups(arguments))]
    arguments, groups = quantizing[-1] if quantizing else ({}, {})
    if not groups or not all(isinstance(group, Mapping) and group.get("targets") for group in groups.values()):
        raise UserError(f"{where}: its {names[-1]} gives no config groups with targets; name the layers it quantizes")
    return Recipe(names, rounding, {"config_groups": groups, "ignore": list(arguments.get("ignore") or [])})


def recorded_recipes(path: Path, provenance: Mapping) -> list[tuple[str, Recipe | UserError]]:
    """The recipes a checkpoint records, each read once, as (where, the recipe or why numprec cannot read it):
    llm-compressor's recipe.yaml, and the text numprec_quantize.json kept."""
    texts = []
    if (path / "recipe.yaml").is_file():
        texts.append((f"{path}/recipe.yaml", (path / "recipe.yaml").read_text(encoding="utf-8")))
    kept = provenance.get("recipe_file")
    if isinstance(kept, str):
        texts.append((f"the recipe {path}/numprec_quantize.json records", kept))
    found: list[tuple[str, Recipe | UserError]] = []
    for where, text in texts:
        try:
            found.append((where, read_recipe(text, where)))
        except UserError as err:  # said where a mix's layers are checked against it; a uniform checkpoint needs none
            found.append((where, err))
    return found


def recorded_rounding(recipes: list[tuple[str, Recipe | UserError]], provenance: Mapping) -> str | None:
    """How a checkpoint's weights were rounded, as the first recipe numprec reads says (or harness.quantize's note,
    for a checkpoint without one); None where nothing says."""
    read = [recipe.rounding for _, recipe in recipes if isinstance(recipe, Recipe)]
    rounding = read[0] if read else provenance.get("rounding")
    return rounding if isinstance(rounding, str) and rounding in ROUNDINGS else None
