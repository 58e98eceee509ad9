"""A checkpoint whose linear layers hold different formats (a mix: harness.quantize --recipe writes one from the
recipe harness.sensitivity chose): each layer's format as compressed-tensors itself assigns it (its own matcher over
the config groups' targets and ``ignore``), the bits the weights take as stored, and the label its rows carry.

The layers are read from the architecture (built on the meta device: no weights load); lm_head is stated apart, as
the recipes state it. A mix's evidence is checked against itself: the recipe the checkpoint was made from (its
recipe.yaml, and the recipe numprec_quantize.json recorded) must give every layer the format config.json gives it.

>>> mix = Mix({"a.q": "nvfp4", "a.k": "nvfp4", "a.o": "fp8-dynamic", "lm_head": UNQUANTIZED}, 4.99)
>>> mix.describe()
'nvfp4, fp8-dynamic in 1 of 3 layers, 4.99 bits; lm_head unquantized'
>>> mix.label
'nvfp4-mix-4.99b-8965'
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import UserError, one_line
from harness.models.formats import registry_layout
from harness.models.recipe_files import Recipe
from harness.models.registry import ModelSpec, PrecisionSpec, get_precision, rounded_name
from harness.models.stored_bits import layer_bits

UNQUANTIZED = "unquantized"  # a layer no config group targets: it stays in the model's dtype
MIX_TAG = "-mix-"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


HEAD = "lm_head"


@dataclass(frozen=True)
class Mix:
    """Each linear layer's format (a registry precision, or ``UNQUANTIZED``) and the stored bits a weight over the
    layers other than lm_head."""

    schemes: Mapping[str, str]
    bits: float
    rounding: str | None = None  # as its recipe says; None where nothing recorded it

    @property
    def counts(self) -> Counter:
        """How many layers (lm_head apart) hold each format, most first."""
        return Counter(scheme for layer, scheme in self.schemes.items() if layer != HEAD)

    @property
    def base(self) -> str:
        """The quantized format most layers hold: the one the mix is named after."""
        return next(scheme for scheme, _ in self.counts.most_common() if scheme != UNQUANTIZED)

    @property
    def label(self) -> str:
        """The precision column's value: the base format, the bits, and a digest of the layers' formats (two mixes
        at equal bits are two series)."""
        digest = hashlib.sha1(json.dumps(dict(sorted(self.schemes.items()))).encode()).hexdigest()[:4]
        return f"{rounded_name(self.base, self.rounding)}{MIX_TAG}{self.bits:.2f}b-{digest}"

    def describe(self) -> str:
        """What the rows say of the mix: the base format, each other format's share of the layers, the bits."""
        total = sum(self.counts.values())
        counts = self.counts.items()
        others = [f"{scheme} in {count} of {total} layers" for scheme, count in counts if scheme != self.base]
        head = f"; lm_head {self.schemes[HEAD]}" if HEAD in self.schemes else ""
        return f"{', '.join([self.base, *others])}, {self.bits:.2f} bits{head}"


def mix_precision(model: ModelSpec, mix: Mix, name: str) -> PrecisionSpec:
    """The precision a mix runs at: its base format's, named ``name`` (the label, with +kv-fp8 where asked), its
    dtypes those of every format in it. Each format must be one the model runs at."""
    formats = [get_precision(model, scheme) for scheme, _ in mix.counts.most_common() if scheme != UNQUANTIZED]
    base = get_precision(model, mix.base + name.removeprefix(mix.label))
    rounding = mix.rounding or base.rounding
    kept = ["bfloat16"] if UNQUANTIZED in mix.counts else []

    def joined(side: str) -> str:
        return "+".join(dict.fromkeys([getattr(spec, side) for spec in formats] + kept))

    return base.model_copy(
        update={
            "name": name,
            "weight_dtype": joined("weight_dtype"),
            "activation_dtype": joined("activation_dtype"),
            "weight_format": f"a mix: {mix.describe()}",
            "activation_format": "each layer's format's",
            "mix": mix.describe(),
            "rounding": rounding,
            "layer_formats": tuple(sorted(mix.schemes.items())),
        }
    )


def check_loaded(precision: PrecisionSpec, loaded: Mapping[str, str], engine: str, expected: Callable) -> None:
    """The layers ``engine`` loaded (layer -> what it reports) against a mix's formats: ``expected(format)`` is what
    the engine reports for a layer in that format (None: not checked). A layer in another format, or a layer of
    the mix the engine did not load (lm_head apart, which a tied model shares with the embeddings), is one line."""
    differ = []
    for layer, fmt in precision.layer_formats:
        want = expected(fmt)
        if want is not None and loaded.get(layer, None if layer != HEAD else want) != want:
            differ.append((layer, fmt, loaded.get(layer, "nothing")))
    if differ:
        layer, fmt, found = differ[0]
        raise UserError(
            f"{engine} loaded {plural(len(differ), 'layer')} otherwise than the checkpoint's mix declares "
            f"({layer}: {found}, declared {fmt}); the checkpoint's config.json and its weights disagree: make it "
            "again with python -m harness.quantize --recipe"
        )


def linear_modules(path: Path, config: Mapping) -> dict:
    """The architecture's linear layers by name, built on the meta device from ``config`` (``path``'s config.json,
    as read once; no weights read)."""
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    try:
        built = CONFIG_MAPPING[config["model_type"]].from_dict(dict(config))  # as from_pretrained builds it
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(built)
    except Exception as err:  # whatever transformers raises building a model from a config it read
        raise UserError(
            f"{path}: its layers cannot be read from config.json ({one_line(err)}); pass a checkpoint of an "
            "architecture transformers knows"
        ) from None
    return {name: module for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}


def layer_schemes(groups_holder: Mapping, modules: Mapping, where: str) -> dict[str, str | None]:
    """Each layer's format under a quantization config or a recipe's QuantizationModifier (both hold
    ``config_groups`` and ``ignore``), matched as compressed-tensors matches; None for a group numprec has no
    precision for."""
    from compressed_tensors.utils import is_match

    groups = groups_holder.get("config_groups") or {}
    ignore = groups_holder.get("ignore") or []
    if not isinstance(groups, Mapping) or not all(isinstance(group, Mapping) for group in groups.values()):
        raise UserError(f"{where}: config_groups must map names to schemes with targets; make it again")
    found = {}
    for name, module in modules.items():
        group = next((g for g in groups.values() if is_match(name, module, g.get("targets") or [], ignore)), None)
        found[name] = UNQUANTIZED if group is None else registry_layout(group)
    return found


def plainly_uniform(config: Mapping) -> bool:
    """One config group over every linear layer but lm_head (what harness.quantize writes for one precision): no mix,
    read without building the architecture.

    >>> plainly_uniform({"config_groups": {"g": {"targets": ["Linear"]}}, "ignore": ["lm_head"]})
    True
    >>> plainly_uniform({"config_groups": {"g": {"targets": ["Linear"]}}, "ignore": ["lm_head", "re:.*down_proj"]})
    False
    """
    groups = config.get("config_groups") or {}
    if not isinstance(groups, Mapping) or len(groups) != 1:
        return False
    (group,) = groups.values()
    return (
        isinstance(group, Mapping) and group.get("targets") == ["Linear"] and set(config.get("ignore") or []) <= {HEAD}
    )


def read_mix(
    path: Path,
    config: Mapping,
    quantization: Mapping,
    tensors: Mapping[str, dict],
    recipes: list[tuple[str, Recipe | UserError]],
    rounding: str | None,
) -> Mix | None:
    """The mix a compressed-tensors checkpoint holds (``path``: its config.json, quantization_config, tensor
    headers, the recipes it records and the rounding they say, as read once), or None where its layers (lm_head
    apart) hold one format. A
    layer in a format numprec has no precision for, or a recipe beside it that gives a layer another format, is one
    line."""
    if plainly_uniform(quantization):
        return None
    modules = linear_modules(path, config)
    schemes = layer_schemes(quantization, modules, f"{path}/config.json")
    unknown = sorted(layer for layer, scheme in schemes.items() if scheme is None)
    if unknown:
        raise UserError(
            f"{path}: {len(unknown)} layers ({unknown[0]}, ...) hold a format no numprec precision has; see "
            "docs/precisions.md for those it runs"
        )
    if len({scheme for layer, scheme in schemes.items() if layer != HEAD}) < 2:
        return None
    for where, recipe in recipes:
        _check_recipe(where, recipe, schemes, modules)
    shapes = {name: tuple(module.weight.shape) for name, module in modules.items() if name != HEAD}
    bits = layer_bits(tensors, list(shapes), shapes)
    weights = sum(rows * columns for rows, columns in shapes.values())
    total = sum(bits.get(layer, 16.0) * rows * columns for layer, (rows, columns) in shapes.items())
    return Mix(schemes, total / weights, rounding)  # type: ignore[arg-type]


def _check_recipe(where: str, recipe: Recipe | UserError, schemes: Mapping, modules: Mapping) -> None:
    if isinstance(recipe, UserError):
        raise recipe
    asked = layer_schemes(recipe.quantization, modules, where)
    differ = sorted(layer for layer in schemes if asked.get(layer) != schemes[layer])
    if differ:
        first = differ[0]
        raise UserError(
            f"{where} and config.json disagree on {plural(len(differ), 'layer')} "
            f"({first}: {asked.get(first)} in the recipe, {schemes[first]} in config.json); the checkpoint is not "
            "what its recipe made: make it again with python -m harness.quantize --recipe"
        )
