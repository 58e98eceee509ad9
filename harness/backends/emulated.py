"""What a row says of a compressed-tensors format run by transformers (FP8, INT8 W8A8, NVFP4, MXFP4, ...): emulated,
not a low-precision kernel. compressed-tensors dequantizes each layer's stored codes with their scales once (each
product rounded once to bfloat16; exact for MX's power-of-two scales) and, where the scheme quantizes activations,
replaces each linear layer's input by its quantize-dequantize with the format's scales, rounding and saturation at
every call (``compressed_tensors.quantization.lifecycle.forward``); the matmul is then bfloat16's. A real FP8 or FP4
kernel multiplies the same grid values, accumulates in fp32 in another order and applies the scales after the sum.
tests/harness/models/test_formats.py checks one layer of each format against the formats' definitions, bit for bit.

The note is read from the loaded model, not from the registry: a layer whose scheme lost its activation quantization
says so.
"""

from __future__ import annotations

from importlib.metadata import version

import torch

from harness.backends.hf_loading import query_projection
from harness.backends.widened_bf16 import GEMM, WidenedBf16Linear
from harness.models import PrecisionSpec, activation_qdq
from harness.models.formats import registry_layout
from harness.models.mix import UNQUANTIZED


def _side(args) -> str:
    if args is None:
        return "none"
    size = f" g{args.group_size}" if args.group_size else ""
    block = f" block {args.block_structure}" if args.block_structure else ""
    dynamic = {True: ", scales at run time", "local": ", local scales at run time"}.get(args.dynamic, "")
    return f"{args.type}{args.num_bits} {args.strategy}{size}{block}{dynamic}"


def emulation_note(model: torch.nn.Module, precision: PrecisionSpec) -> str:
    """The kernel column of an emulated format: who computes it, what the loaded layers quantize, and the matmul.

    A model whose layers carry no compressed-tensors scheme is said to be what it is (``not emulated``)."""
    layer = query_projection(model)
    scheme = getattr(layer, "quantization_scheme", None)
    widened = isinstance(layer, WidenedBf16Linear)  # float32's GEMM over the bf16 values: no bf16 instructions
    held = " (held in float32)" if widened else ""
    matmul = GEMM if widened else "bfloat16 matmul"
    if precision.mix:
        schemes = [getattr(module, "quantization_scheme", None) for module in model.modules()]
        grouped = any(activation_qdq.dynamic(scheme.input_activations) for scheme in schemes if scheme is not None)
        how = f" ({activation_qdq.kernel(layer.weight.device.type)})" if grouped else ""
        return (
            f"emulated by compressed-tensors {version('compressed-tensors')}, each layer in its own scheme (a mix: "
            f"{precision.mix}): weights dequantized to bfloat16 once{held}; activations quantized and dequantized at "
            f"each call where the layer's scheme says{how}; {matmul}"
        )
    if scheme is None:
        return f"not emulated: {type(layer).__name__} layers carry no compressed-tensors scheme"
    enabled = getattr(layer, "quantization_enabled", True)
    activations = _side(scheme.input_activations) if enabled else "off"
    # transformers' CompressedTensorsConfig wraps compressed-tensors' own config, which lists the layers left out
    config = getattr(model.config, "quantization_config", None)
    ignored = getattr(getattr(config, "quantization_config", None), "ignore", None)
    inputs = scheme.input_activations
    how = f" ({activation_qdq.kernel(layer.weight.device.type)})" if enabled and activation_qdq.dynamic(inputs) else ""
    return (
        f"emulated by compressed-tensors {version('compressed-tensors')} ({precision.scheme}): weights "
        f"{_side(scheme.weights)} dequantized to bfloat16 once{held}; activations {activations} quantized and "
        f"dequantized at each call{how}; {matmul}; unquantized: {', '.join(ignored or ['none'])}"
    )


def emulated_matmul(precision: PrecisionSpec, widened: bool) -> str:
    """The matmul_precision column: the arithmetic is bfloat16's (``widened``: computed by float32's GEMM over the
    bf16 values), on the format's grid values where activations are quantized."""
    how = "; float32 GEMM over the bfloat16 values" if widened else ""
    if precision.activation_dtype == "bfloat16":
        return f"bfloat16 (weights on the format's grid{how})"
    return f"bfloat16 on {precision.activation_dtype} grid values (emulated{how})"


def loaded_formats(model: torch.nn.Module) -> dict[str, str | None]:
    """Each linear layer's format as compressed-tensors set it up in the loaded model: the registry precision of its
    scheme (None: one numprec has no name for), or ``unquantized``."""
    found = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            scheme = getattr(module, "quantization_scheme", None)
            found[name] = UNQUANTIZED if scheme is None else registry_layout(scheme.model_dump())
    return found
