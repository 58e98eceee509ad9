"""FP8 matmuls for fp8-dynamic where the hardware has them (an H100's tensor cores through cuBLASLt): each linear
layer compressed-tensors loaded with FP8 weights (one scale per output channel) and per-token dynamic FP8 activations
becomes one ``torch._scaled_mm``: the input quantized per token to E4M3 (scale = absmax / 448, in float32, as vLLM's
kernels compute it), multiplied by the stored E4M3 weights with float32 accumulation, both scales applied to the sum,
the result in bfloat16. The weights stay the checkpoint's codes: 1 byte a weight in memory, read once a step.

It replaces the layers before their first forward (which would dequantize them). Where the card has no FP8 matmul,
the formats run emulated (harness/backends/emulated.py). torch runs ``_scaled_mm`` on a CPU too, which lets the
suite compare this path with the emulation here (tests/harness/backends/test_fp8_linear.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

E4M3_MAX = 448.0
ROWS_MULTIPLE = 16  # cuBLASLt's FP8 matmul wants every dimension a multiple of 16
KERNEL = "torch._scaled_mm (FP8 E4M3 x E4M3, float32 accumulation, per-token x per-channel scales)"


class ScaledMMLinear(torch.nn.Module):
    """A linear layer of FP8 weights with one float32 scale per output channel, computing with FP8 activations."""

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.weight = torch.nn.Parameter(weight, requires_grad=False)  # [out, in] E4M3, row-major
        self.register_buffer("weight_scale", weight_scale.float().reshape(1, -1))  # [1, out]
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
        self.emulate = False  # True: compressed-tensors' quantize-dequantize instead of the FP8 matmul (a reference)

    @classmethod
    def rounded_from(cls, linear: torch.nn.Linear) -> ScaledMMLinear:
        """A bfloat16 layer's weights as FP8_DYNAMIC's data-free recipe stores them: scale = absmax / 448 per output
        channel, codes rounded to nearest E4M3 (the GPU bench's random 8B model, which no checkpoint holds)."""
        weight = linear.weight.detach()
        scale = (weight.abs().amax(-1, keepdim=True).float() / E4M3_MAX).clamp(min=torch.finfo(torch.float32).tiny)
        codes = (weight.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        return cls(codes, scale, linear.bias)

    def emulated(self, x: torch.Tensor) -> torch.Tensor:
        """The same layer as the CPU path computes it: compressed-tensors' own dequantization of the weights and
        quantize-dequantize of the activations (FP8_DYNAMIC's scheme), then the matmul in x's dtype."""
        from compressed_tensors.quantization import preset_name_to_scheme
        from compressed_tensors.quantization.lifecycle.forward import dequantize, fake_quantize
        from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp

        scheme = preset_name_to_scheme("FP8_DYNAMIC", ["Linear"])
        scale, zero = compute_dynamic_scales_and_zp(x, scheme.input_activations, self)
        inputs = fake_quantize(x, scale, zero, scheme.input_activations)
        weight_scale = self.weight_scale.t().to(x.dtype)
        weight = dequantize(self.weight, weight_scale, args=scheme.weights, dtype=x.dtype)
        return torch.nn.functional.linear(inputs, weight, self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.emulate:
            return self.emulated(x)
        rows = x.reshape(-1, self.in_features)
        count = rows.shape[0]
        padded = -count % ROWS_MULTIPLE
        if padded:
            rows = torch.nn.functional.pad(rows, (0, 0, 0, padded))
        scale = (rows.abs().amax(-1, keepdim=True).float() / E4M3_MAX).clamp(min=torch.finfo(torch.float32).tiny)
        codes = (rows.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        out = torch._scaled_mm(
            codes, self.weight.t(), scale_a=scale, scale_b=self.weight_scale, out_dtype=x.dtype, bias=self.bias
        )
        return out[:count].reshape(*x.shape[:-1], self.out_features)


def _is_fp8_dynamic(module: torch.nn.Module) -> bool:
    scheme = getattr(module, "quantization_scheme", None)
    if scheme is None or scheme.weights is None or scheme.input_activations is None:
        return False
    weights, inputs = scheme.weights, scheme.input_activations
    return (
        module.weight.dtype == torch.float8_e4m3fn
        and (weights.type, weights.num_bits, weights.strategy) == ("float", 8, "channel")
        and (inputs.type, inputs.num_bits, inputs.strategy, inputs.dynamic) == ("float", 8, "token", True)
    )


def _replace(model: torch.nn.Module, chosen: Callable[[str, torch.nn.Module], bool], make) -> int:
    """Put ``make(module)`` in place of every module of ``model`` that ``chosen(name, module)`` picks; how many."""
    found = [(name, module) for name, module in model.named_modules() if chosen(name, module)]
    for name, module in found:
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, make(module))
    return len(found)


def use_fp8_matmuls(model: torch.nn.Module) -> int:
    """Replace every still-compressed FP8-dynamic linear layer of ``model`` by a ``ScaledMMLinear``; how many."""
    return _replace(
        model,
        lambda name, module: _is_fp8_dynamic(module),
        lambda module: ScaledMMLinear(module.weight.data, module.weight_scale.data, module.bias).to(
            module.weight.device
        ),
    )


def round_to_fp8(model: torch.nn.Module) -> int:
    """Replace every decoder linear layer of a bfloat16 ``model`` (the output head stays, as ``ignore: lm_head``
    keeps it) by its data-free FP8 rounding; how many."""
    return _replace(
        model,
        lambda name, module: type(module) is torch.nn.Linear and name.split(".")[-1] != "lm_head",
        ScaledMMLinear.rounded_from,
    )


def set_emulated(model: torch.nn.Module, emulated: bool) -> None:
    """Run every ScaledMMLinear of ``model`` as the FP8 matmul (False) or as compressed-tensors' emulation (True)."""
    for module in model.modules():
        if isinstance(module, ScaledMMLinear):
            module.emulate = emulated


def fp8_matmuls(model: torch.nn.Module) -> int:
    """How many of ``model``'s layers run the FP8 matmul (not its emulation)."""
    return sum(isinstance(module, ScaledMMLinear) and not module.emulate for module in model.modules())


def has_fp8_matmul(device: str) -> bool:
    """A CUDA card with FP8 tensor cores (compute capability 8.9: Ada, Hopper, Blackwell)."""
    return device == "cuda" and torch.cuda.get_device_capability() >= (8, 9)
