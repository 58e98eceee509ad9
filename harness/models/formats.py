"""Which registry precision a compressed-tensors checkpoint holds, read from its ``quantization_config``: the formats
llm-compressor's schemes write (FP8, INT8 W8A8, W4A8, NVFP4, MXFP4, MXFP8, W4A16 GPTQ), whether harness.quantize made
them or they were published. A checkpoint is known by what it stores, never by its name: the weights' and the
activations' number format, bits, grouping and whether their scales are found at run time.

>>> fp8 = {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
...        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}
>>> layout(fp8)
('float8/channel', 'float8/token/dynamic')
>>> layout({"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 64}})
('int4/group', '-')
"""

from __future__ import annotations

from functools import cache

from harness.core.errors import UserError
from harness.models.registry import PrecisionSpec, precision_registry


def _side(args: dict | None) -> str:
    """One side of a scheme (weights or input activations) as number format, strategy and whether its scales are
    computed at run time; '-' where the side is not quantized (W4A16's activations stay in the model's dtype)."""
    if not args:
        return "-"
    text = f"{args.get('type', 'int')}{args.get('num_bits')}/{args.get('strategy')}"
    if "uint8" in str(args.get("scale_dtype")):
        text += "/e8m0"  # OCP MX: power-of-two scales, stored as their exponent
    dynamic = args.get("dynamic")
    if dynamic in (True, "local"):
        text += "/dynamic" if dynamic is True else "/local"
    return text


def layout(group: dict) -> tuple[str, str]:
    """What a config group stores: (weights, input activations), each as ``type+bits/strategy[/dynamic]``."""
    return _side(group.get("weights")), _side(group.get("input_activations"))


@cache
def _registry_layouts() -> dict[tuple[str, str], str]:
    """The layout of every compressed-tensors precision in the registry (llm-compressor's preset, or GPTQ's W4A16)."""
    from compressed_tensors.quantization import preset_name_to_scheme

    layouts = {}
    for name, precision in precision_registry().items():
        preset = precision.scheme or ("W4A16" if precision.method == "gptq" else None)
        if preset:
            layouts[layout(preset_name_to_scheme(preset, ["Linear"]).model_dump())] = name
    return layouts


def registry_layout(group: dict) -> str | None:
    """The registry precision whose scheme stores what ``group`` stores, or None."""
    return _registry_layouts().get(layout(group))


def declared_precision(config: dict | None) -> str | None:
    """The registry precision a checkpoint's quantization_config declares, or None (not compressed-tensors, or a
    layout no registry precision has). Every config group must agree."""
    if not config or config.get("quant_method") != "compressed-tensors":
        return None
    groups = list((config.get("config_groups") or {}).values())
    names = {registry_layout(group) for group in groups}
    return names.pop() if len(names) == 1 else None


def checkpoint_note(config: dict) -> str:
    """What a compressed-tensors checkpoint records of itself, for the rows: its format, each group's weights and
    activations with group sizes, and the layers it leaves unquantized."""
    parts = []
    for group in (config.get("config_groups") or {}).values():
        weights, activations = layout(group)
        size = (group.get("weights") or {}).get("group_size")
        parts.append(f"weights {weights}{f' g{size}' if size else ''}, activations {activations}")
    ignored = ",".join(config.get("ignore") or []) or "none"
    return f"compressed-tensors {config.get('format')}: {'; '.join(parts)}; unquantized {ignored}"


def check_declared(path: str, declared: str | None, config: dict | None, precision: PrecisionSpec) -> None:
    """A compressed-tensors checkpoint runs at the precision its config declares (``declared``, with the rounding its
    recipe says), and only at that one."""
    if declared is None:
        what = checkpoint_note(config) if config else "no quantization_config"
        raise UserError(f"{path} holds no format numprec knows ({what}); see docs/precisions.md for those it runs")
    if declared != precision.weights_name:
        raise UserError(
            f"{path} is a {declared} checkpoint (its quantization_config and recipe say so); run it with --precision "
            f"{declared}"
        )
