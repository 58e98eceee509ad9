"""Bits a weight, as a checkpoint stores them: every tensor a linear layer keeps on disk (its codes, its scales, a
global scale, zero points) counted in its stored dtype, over the layer's weights. NVFP4 comes to 4.5 (E2M1 codes and
an E4M3 scale per 16, plus one fp32 global scale), MXFP4 to 4.25 (an E8M0 exponent per 32), FP8 with one fp32 scale
per output channel to 8 + 32 / inputs. Read from the safetensors headers, not from the format's name: what is
counted is what is there. A precision numprec casts to (bf16, fp32) stores its weight bits.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from harness.core.errors import UserError, one_line

DTYPE_BITS = {
    "F64": 64, "F32": 32, "F16": 16, "BF16": 16, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U8": 8, "BOOL": 8,
}  # fmt: skip
SUFFIXES = ("weight", "weight_packed", "weight_scale", "weight_global_scale", "weight_zero_point", "weight_shape")


def read_safetensors_header(path: Path) -> dict[str, dict]:
    """Each tensor's dtype and shape in a safetensors file, read without loading it; an empty, cut or foreign file
    is one line naming it."""
    from safetensors import safe_open

    if not path.is_file():
        raise UserError(f"{path} is missing (a weights file the model directory names)")
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {
                name: {"dtype": handle.get_slice(name).get_dtype(), "shape": list(handle.get_slice(name).get_shape())}
                for name in handle.keys()  # noqa: SIM118
            }
    except Exception as err:  # noqa: BLE001 (safetensors raises its own and OS errors alike)
        raise UserError(f"{path} is not a readable safetensors file ({one_line(err)}); replace it") from None


def stored_tensors(checkpoint: Path) -> dict[str, dict]:
    """Every tensor of a checkpoint directory's safetensors files, by name."""
    tensors: dict[str, dict] = {}
    for path in sorted(Path(checkpoint).glob("*.safetensors")):
        tensors.update(read_safetensors_header(path))
    if not tensors:
        raise UserError(f"{checkpoint} holds no safetensors files to count its bits from")
    return tensors


def layer_bits(tensors: Mapping[str, dict], layers: list[str], shapes: dict[str, tuple[int, int]]) -> dict[str, float]:
    """Bits a weight of each layer (``shapes``: its [out, in] as the model has it), counting every tensor a
    checkpoint stores for it (``tensors``: their headers, stored_tensors); a layer the checkpoint does not store apart
    (a tied lm_head) is left out."""
    found = {}
    for layer in layers:
        stored = [tensors.get(f"{layer}.{suffix}") for suffix in SUFFIXES]
        stored = [tensor for tensor in stored if tensor is not None]
        if not stored:
            continue
        total = 0
        for tensor in stored:
            count = 1
            for extent in tensor["shape"]:
                count *= extent
            total += count * DTYPE_BITS.get(tensor["dtype"], 16)
        rows, columns = shapes[layer]
        found[layer] = total / (rows * columns)
    return found
