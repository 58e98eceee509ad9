"""Precision modes for training, and emulated float formats for evaluation.

Training modes (one flag):
  fp32      everything float32.
  bf16      pure bfloat16: weights, activations, gradients and AdamW state (the paper's setting).
  bf16-amp  float32 master weights and optimizer, bfloat16 compute (torch.autocast).
  tf32      CUDA only: float32 storage, matrix multiplies in TF32 (a 10-bit mantissa), what most GPU users get
            without asking. On CUDA, fp32 runs with TF32 off, so that fp32 means float32.

Pure bf16 can stall: an update smaller than half a bf16 ulp of its weight rounds away. bf16-amp keeps the
updates and so isolates the effect of bf16 *computation*. Evaluating one trained model under many
emulated formats ``eEmM`` (E exponent bits, M mantissa bits) then shows what precision the learned
computation needs, independent of how it was trained.

``round_to_format`` is IEEE-like: bias 2^(E-1)-1, subnormals, round half to even, and saturation at the
largest finite value instead of overflow to inf (as ML fp8 casts do). e8m7 reproduces bfloat16 and e5m10
float16 exactly within their finite range (tested).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from harness.backends import float32_matmul

TRAIN_PRECISIONS = ("fp32", "bf16", "bf16-amp", "tf32")
_FORMAT = re.compile(r"^e(\d+)m(\d+)$")


@dataclass(frozen=True)
class FloatFormat:
    exponent_bits: int
    mantissa_bits: int

    @classmethod
    def parse(cls, name: str) -> FloatFormat:
        match = _FORMAT.match(name)
        if not match:
            raise ValueError(f"float format {name!r} is not of the form eEmM, e.g. e8m7 (bf16), e5m10 (fp16), e4m3")
        e, m = int(match.group(1)), int(match.group(2))
        if not (2 <= e <= 8 and 0 <= m <= 23):
            raise ValueError(f"{name}: need 2 <= E <= 8 and 0 <= M <= 23 (emulated inside float32)")
        return cls(e, m)

    @property
    def name(self) -> str:
        return f"e{self.exponent_bits}m{self.mantissa_bits}"

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def max_value(self) -> float:
        return (2 - 2.0**-self.mantissa_bits) * 2.0**self.bias


def round_to_format(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Round float32 values to the nearest value of ``fmt`` (computed in float32)."""
    x = x.float()
    if fmt.exponent_bits == 8 and fmt.mantissa_bits == 23:
        return x
    _, exponent = torch.frexp(x)  # x = m * 2^exponent with 0.5 <= |m| < 1, i.e. 1.f * 2^(exponent - 1)
    # The spacing of representable values around x; below the normal range it stays at the subnormal step.
    unbiased = torch.clamp(exponent - 1, min=1 - fmt.bias)
    step = torch.pow(2.0, (unbiased - fmt.mantissa_bits).float())
    rounded = torch.round(x / step) * step  # torch.round rounds half to even
    return torch.clamp(rounded, -fmt.max_value, fmt.max_value)


class Rounding:
    """A callable the model applies to each intermediate result (see model.GPT.rounding)."""

    def __init__(self, fmt: FloatFormat):
        self.fmt = fmt

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return round_to_format(x, self.fmt)


@torch.no_grad()
def round_weights(model: torch.nn.Module, fmt: FloatFormat) -> None:
    for parameter in model.parameters():
        parameter.copy_(round_to_format(parameter, fmt))


def training_dtype(precision: str) -> torch.dtype:
    if precision not in TRAIN_PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(TRAIN_PRECISIONS)}")
    return torch.bfloat16 if precision == "bf16" else torch.float32


def autocast(precision: str, device_type: str = "cpu"):
    """bf16-amp computes under autocast; the other modes run in their parameters' dtype."""
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == "bf16-amp")


REDUCED_MATMUL = {"bf16": "bf16", "bf16-amp": "bf16 (autocast)"}  # what a bf16 mode's matmuls are recorded as


def check_precision_device(precision: str, device: torch.device) -> None:
    if precision == "tf32" and device.type != "cuda":
        raise ValueError("tf32 is a CUDA matmul mode and this run is on the CPU; use --device cuda or fp32")


def set_matmul_precision(precision: str, device: torch.device) -> str:
    """Put the float32 matmul mode the precision means in force, and return it as recorded: fp32 is IEEE float32
    (TF32 off on CUDA, where some libraries switch it on), tf32 is TF32 (CUDA only)."""
    check_precision_device(precision, device)
    if device.type == "cuda":
        tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
    if precision in REDUCED_MATMUL:
        return REDUCED_MATMUL[precision]
    return float32_matmul(device.type)


def resolve_device(name: str) -> torch.device:
    """auto: CUDA when present, else the CPU; cpu; cuda or cuda:N, which must exist."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", name)
    if not match:
        raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise ValueError(f"--device {name} needs a CUDA GPU and this machine has none; use --device cpu (or auto)")
    index = int(match[1] or 0)
    if index >= torch.cuda.device_count():
        raise ValueError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)
