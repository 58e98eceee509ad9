"""The formats of now, computed from their definitions, independently of compressed-tensors: what one linear layer
of each format must output, given its stored codes and scales and an input. Element rounding is to nearest, ties to
even, saturating at the element type's largest magnitude (OCP 8-bit floating point: E4M3 saturates at 448; E2M1 at
6). Scales are computed and applied in the activation's bfloat16, as a checkpoint made in bfloat16 holds them, except
where a format fixes a scale type (NVFP4's E4M3 group scales, MX's power-of-two exponents).

Each format is a record: how its stored weights dequantize, and how an activation is quantized and dequantized.
``convention`` changes one scale convention to another that a kernel might use, so that a test can show the
comparison catches it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open

E4M3_MAX, E2M1_MAX = 448.0, 6.0
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
BF16 = torch.bfloat16


def to_e4m3(values: torch.Tensor) -> torch.Tensor:
    """Nearest E4M3 value, saturating (torch's cast rounds to nearest even; beyond 448 it would give NaN)."""
    return values.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def to_e2m1(values: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value (ties to the even code: 0.25 -> 0, 0.75 -> 1, 5 -> 4), saturating at 6, as float32."""
    magnitude = values.abs().float().clamp(max=E2M1_MAX)
    distance = (magnitude.unsqueeze(-1) - E2M1).abs()
    nearest = distance.min(-1, keepdim=True).values
    candidates = distance == nearest  # one or two grid points; of two, the even code
    codes = torch.arange(len(E2M1))
    choice = torch.where(candidates, codes, len(E2M1)).min(-1).values
    tie = candidates.sum(-1) == 2
    choice = torch.where(tie & (choice % 2 == 1), choice + 1, choice)
    return E2M1[choice] * torch.where(values < 0, -1.0, 1.0)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """Two E2M1 codes a byte, the even column in the low nibble; bit 3 of a nibble is the sign."""
    nibbles = torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2).long()
    return E2M1[nibbles & 0x7] * torch.where(nibbles >= 8, -1.0, 1.0)


def grouped(values: torch.Tensor, size: int) -> torch.Tensor:
    return values.unflatten(-1, (values.shape[-1] // size, size))


def absmax(groups: torch.Tensor) -> torch.Tensor:
    return groups.abs().amax(-1, keepdim=True)


def nonzero(scale: torch.Tensor) -> torch.Tensor:
    """A scale of 0 (an all-zero group) replaced by the smallest positive value of its type, as quantizers do."""
    return torch.where(scale == 0, torch.finfo(scale.dtype).eps, scale)


# --- activations -----------------------------------------------------------------------------------------------------


def fp8_scaled(x: torch.Tensor, size: int | None, qmax: float = E4M3_MAX) -> torch.Tensor:
    """E4M3 with one scale per token (``size`` None) or per ``size`` inputs of a token: scale = absmax / 448."""
    groups = grouped(x, size or x.shape[-1])
    scale = nonzero(absmax(groups) / torch.tensor(qmax, dtype=x.dtype))
    return (to_e4m3(groups / scale).to(x.dtype) * scale).flatten(-2)


def int8_per_token(x: torch.Tensor, half_range: float = 127.5) -> torch.Tensor:
    """INT8 with one scale per token. compressed-tensors divides the absmax by half the code range, 255 / 2 = 127.5
    (the largest magnitude then rounds to 128 and saturates at 127); vLLM's int8 kernels divide by 127."""
    groups = grouped(x, x.shape[-1])
    scale = nonzero(absmax(groups) / torch.tensor(half_range, dtype=x.dtype))
    return ((groups / scale).round().clamp(-128, 127) * scale).flatten(-2).to(x.dtype)


def nvfp4_activation(x: torch.Tensor, global_scale: torch.Tensor, round_scale: bool = True) -> torch.Tensor:
    """NVFP4: groups of 16, each with an E4M3 scale of (absmax / 6) times the tensor's global scale (calibrated,
    stored as input_global_scale, a float32 value however the file stores it); the elements are x / (scale / global
    scale) rounded to E2M1."""
    groups, global_scale = grouped(x, 16), global_scale.float()  # NVFP4's global scale is float32
    local = global_scale * (absmax(groups) / torch.tensor(E2M1_MAX, dtype=x.dtype))
    if round_scale:
        local = to_e4m3(local).to(local.dtype)
    effective = nonzero(local) / global_scale
    return (to_e2m1(groups / effective) * effective).flatten(-2).to(x.dtype)


def mx_exponent(amax: torch.Tensor, element_emax: int, round_up_from: float | None = 1.75) -> torch.Tensor:
    """An MX group's shared exponent: floor(log2(absmax)) - emax of the element type (OCP MX 1.0, 6.3), with the
    absmax first rounded up to the next power of two when its significand is ``round_up_from`` or more (1.75: what
    compressed-tensors and vLLM's MXFP4 reference compute, which clips less; None: OCP's rule as written)."""
    exponent = torch.floor(torch.log2(amax.float()))
    if round_up_from is not None:
        exponent = exponent + (amax.float() / 2.0**exponent >= round_up_from)
    # E8M0 holds biased exponents 0-255: an all-zero group (log2 0 = -inf) gets the smallest scale, 2^-127
    return ((exponent - element_emax + 127).clamp(0, 255) - 127).nan_to_num(-127.0)


def mx_activation(x: torch.Tensor, element: str, round_up_from: float | None = 1.75) -> torch.Tensor:
    """MXFP4 / MXFP8: groups of 32, a power-of-two scale each (E8M0), elements E2M1 or E4M3."""
    groups = grouped(x, 32)
    emax = 2 if element == "e2m1" else 8
    scale = (2.0 ** mx_exponent(absmax(groups), emax, round_up_from)).to(x.dtype)
    scaled = groups / scale
    elements = to_e2m1(scaled).to(x.dtype) if element == "e2m1" else to_e4m3(scaled).to(x.dtype)
    return (elements * scale).flatten(-2)


# --- weights ---------------------------------------------------------------------------------------------------------


def stored(checkpoint: Path, layer: str) -> dict[str, torch.Tensor]:
    """A layer's stored tensors (codes, scales), as the checkpoint's files hold them."""
    tensors = {}
    for shard in checkpoint.glob("*.safetensors"):
        with safe_open(str(shard), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118
                if name.startswith(layer + "."):
                    tensors[name[len(layer) + 1 :]] = handle.get_tensor(name)
    return tensors


def expand(scale: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """A grid of scales (per row, per group of a row, per block) stretched to the weight's shape."""
    down, across = -(-rows // scale.shape[0]), -(-columns // scale.shape[1])
    return scale.repeat_interleave(down, 0)[:rows].repeat_interleave(across, 1)[:, :columns]


def scaled_codes(tensors: dict) -> torch.Tensor:
    """Codes times their (bfloat16) scales, rounded once to bfloat16: FP8 and INT8/INT4 weights."""
    codes = tensors["weight"].float()
    return (codes * expand(tensors["weight_scale"].float(), *codes.shape)).to(BF16)


def nvfp4_weight(tensors: dict) -> torch.Tensor:
    """E2M1 codes times (E4M3 group scale / global scale), in float32 (NVFP4's global scale is float32)."""
    codes = unpack_e2m1(tensors["weight_packed"])
    global_scale = tensors["weight_global_scale"].float()
    scale = tensors["weight_scale"].float() / global_scale
    return (codes * expand(scale.float(), *codes.shape)).to(BF16)


def mx_weight(tensors: dict) -> torch.Tensor:
    """Elements times 2^(E8M0 - 127); every product is exact."""
    codes = unpack_e2m1(tensors["weight_packed"]) if "weight_packed" in tensors else tensors["weight"].float()
    exponent = tensors["weight_scale"].to(torch.int32) - 127
    return (codes * expand(2.0 ** exponent.float(), *codes.shape)).to(BF16)


@dataclass(frozen=True)
class Format:
    weight: Callable[[dict], torch.Tensor]
    activation: Callable[[torch.Tensor, dict], torch.Tensor]
    convention: Callable[[torch.Tensor, dict], torch.Tensor]  # the activation under another scale convention
    changed: str  # what ``convention`` changes


def _unquantized(x: torch.Tensor, tensors: dict) -> torch.Tensor:
    return x


FORMATS = {
    "fp8-dynamic": Format(
        scaled_codes, lambda x, t: fp8_scaled(x, None), lambda x, t: fp8_scaled(x, None, 240.0), "E4M3 max 240 (fnuz)"
    ),
    "fp8-block": Format(
        scaled_codes, lambda x, t: fp8_scaled(x, 128), lambda x, t: fp8_scaled(x, None), "per token, not per 128"
    ),
    "w8a8-int8": Format(
        scaled_codes, lambda x, t: int8_per_token(x), lambda x, t: int8_per_token(x, 127.0), "absmax / 127 (vLLM)"
    ),
    "w4a8": Format(
        scaled_codes, lambda x, t: fp8_scaled(x, None), lambda x, t: fp8_scaled(x, 64), "per 64 inputs, not per token"
    ),
    "nvfp4": Format(
        nvfp4_weight,
        lambda x, t: nvfp4_activation(x, t["input_global_scale"]),
        lambda x, t: nvfp4_activation(x, t["input_global_scale"], round_scale=False),
        "group scales not rounded to E4M3",
    ),
    "nvfp4-a16": Format(nvfp4_weight, _unquantized, lambda x, t: nvfp4_activation(x, torch.ones(1)), "A4 not A16"),
    "mxfp4": Format(
        mx_weight,
        lambda x, t: mx_activation(x, "e2m1"),
        lambda x, t: mx_activation(x, "e2m1", round_up_from=None),
        "OCP's floor(log2(absmax)) exponent",
    ),
    "mxfp4-a16": Format(mx_weight, _unquantized, lambda x, t: mx_activation(x, "e2m1"), "A4 not A16"),
    "mxfp8": Format(
        mx_weight,
        lambda x, t: mx_activation(x, "e4m3"),
        lambda x, t: mx_activation(x, "e4m3", round_up_from=None),
        "OCP's floor(log2(absmax)) exponent",
    ),
}


def layer_output(name: str, tensors: dict, x: torch.Tensor, changed: bool = False) -> torch.Tensor:
    """What format ``name``'s layer outputs for input ``x``, computed from the definitions above (``changed``: with
    the format's changed convention for its activations)."""
    record = FORMATS[name]
    quantized = (record.convention if changed else record.activation)(x, tensors)
    return F.linear(quantized, record.weight(tensors))
