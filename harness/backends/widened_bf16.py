"""bfloat16 linear layers on a CPU without bfloat16 instructions, multiplied by the float32 GEMM.

A CPU with neither avx512_bf16 nor amx_bf16 (AVX2 alone) runs torch's bfloat16 matmul 4.7-8.2 times slower than its
float32 one at the 40-200 rows a batch decodes and prefills (docs/precisions.md). The arithmetic can stay the same:
a bfloat16 number is a float32 one whose low 16 bits are zero, so a float32 copy holds the weights exactly, the
product of two bf16 values is exact in float32, and torch's bf16 kernel sums those products in float32 too. Each
layer here widens its bf16 input, multiplies it by the float32 copy of its weight and rounds the result to bfloat16,
as the bf16 kernel does; only the order of the sums differs (tests/harness/backends/test_widened_bf16.py measures
it). A decoding step's attention products over the shared prefix go the same way (harness/backends/shared_prefix.py:
torch's bf16 batched matmul is slower still there). Everything between the products stays bfloat16: embeddings,
norms, the scores and their softmax, the residual stream. The price is memory: the linear weights are held in
float32, twice their bf16 size (footprint_mb says it), so a model whose copies would not fit in the memory available
keeps the bf16 kernel (``fits``).

NUMPREC_BF16_GEMM overrides what the CPU decides: "float32" takes float32's GEMM on any CPU, "native" torch's bf16
kernel.
"""

from __future__ import annotations

import psutil
import torch
import torch.nn.functional as F

from harness.backends import bf16_gemm
from harness.core.machine import cpu_bf16_instructions

GEMM = "float32 GEMM over bfloat16 values"
MATMUL_PRECISION = f"bfloat16 ({GEMM}, rounded to bfloat16)"
WIDENED = f"{GEMM} (weights held in float32)"  # the kernel column's words
# Where torch's bf16 matmul runs: casts, compressed-tensors' emulated formats, GPTQ unpacked by compressed-tensors
# (bitsandbytes and gptqmodel run kernels of their own, and their heads stay as they are)
METHODS = ("cast", "compressed", "gptq")


class WidenedBf16Linear(torch.nn.Linear):
    """A Linear whose weight holds bfloat16 values in float32; input and output are bfloat16."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.linear(input.float(), self.weight, self.bias).to(input.dtype)


def wanted(device: str) -> bool:
    """Whether bf16 linear layers on ``device`` run through the float32 GEMM: on a CPU without bf16 instructions,
    unless NUMPREC_BF16_GEMM says otherwise."""
    choice = bf16_gemm()
    return device == "cpu" and (choice == "float32" or (not choice and not cpu_bf16_instructions()))


def _plain_linear(model: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if type(m) is torch.nn.Linear]


def _widenable(model: torch.nn.Module) -> list[torch.nn.Linear]:
    # a compressed-tensors layer has no weight before decompression, only its codes and scales
    linear = _plain_linear(model)
    return [m for m in linear if getattr(m, "weight", None) is not None and m.weight.dtype == torch.bfloat16]


def fits(model: torch.nn.Module) -> bool:
    """Whether float32 copies of ``model``'s linear weights fit in the memory available, a quarter spare (each copy
    is made before its bf16 weight is let go). Counted from the layers' shapes: a compressed-tensors layer holds
    its codes, not its weight, until the first forward."""
    needed = sum(module.in_features * module.out_features * 4 for module in _plain_linear(model))
    return needed * 1.25 < psutil.virtual_memory().available


def widen_when_decompressed(model: torch.nn.Module) -> None:
    """``widen`` now, and where compressed-tensors holds codes until the model's first forward (its decompression
    hook, registered at loading, runs first) once more then, when the layers hold their dequantized bf16 weights."""
    widen(model)
    if hasattr(model, "ct_decompress_hook"):

        def after_decompression(module: torch.nn.Module, args) -> None:
            handle.remove()
            widen(module)

        handle = model.register_forward_pre_hook(after_decompression)


def widen(model: torch.nn.Module) -> int:
    """Make each plain bfloat16 Linear of ``model`` a WidenedBf16Linear over a float32 copy of its weight (in the
    transposed layout the CPU GEMM reads fastest: harness/backends/hf_loading.py). A weight tied to an embedding
    is copied for the Linear alone, so the embedding stays bfloat16. Returns how many layers were widened."""
    widened = 0
    for module in _widenable(model):
        for name in ("weight", "bias"):
            value = getattr(module, name)
            if value is None:
                continue
            wide = value.detach().float()
            wide = wide.t().contiguous().t() if name == "weight" else wide
            # removed first: compressed-tensors' offload cache would copy a new value into the bf16 tensor it holds
            delattr(module, name)
            setattr(module, name, torch.nn.Parameter(wide, requires_grad=False))
        module.__class__ = WidenedBf16Linear
        widened += 1
    return widened


def widened_layers(model: torch.nn.Module) -> int:
    """How many of ``model``'s linear layers run through the float32 GEMM."""
    return sum(isinstance(module, WidenedBf16Linear) for module in model.modules())
