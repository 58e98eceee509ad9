"""FP4 (E2M1) rounding, packing and unpacking on the CPU in one pass, for compressed-tensors' NVFP4 and MXFP4.

compressed-tensors rounds to the E2M1 grid and packs codes with a Triton kernel on a GPU; its CPU fallback makes
eight boolean masks over the whole tensor and assigns through each (``cast_to_fp4``), then eight more to find the
codes (``pack_fp4_to_uint8``). On 2 cores that is about 0.3 us a weight for each: most of the 218-364 s an MXFP4A16
checkpoint of the 135M model took to save, and a cost on every activation an NVFP4/MXFP4 layer quantizes at run
time. ``register`` adds a CPU implementation of both through compressed-tensors' own backend registry
(``ImplBackend.register``) that computes the same values elementwise, without masks (tests/harness/models/test_fp4.py
checks every bfloat16 value against the fallback, sign of zero included). Unpacking a checkpoint's weights as a
model loads (``unpack_fp4_from_uint8``, not in the registry: ``register`` routes the compressor's own name to it) takes
ten passes there, 0.71 s for the 135M model's 210 layers; one table lookup a byte takes 0.08 s.

>>> import torch
>>> cast_to_fp4_cpu(torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -7.0]))
tensor([ 0.,  1.,  1.,  2.,  2.,  4.,  4., -6.])
"""

from __future__ import annotations

import torch

# A value on the E2M1 grid, doubled (0, 1, 2, 3, 4, 6, 8, 12), to its 3-bit code.
_CODE_OF_DOUBLED = torch.tensor([0, 1, 2, 3, 4, 0, 5, 0, 6, 0, 0, 0, 7], dtype=torch.uint8)


def cast_to_fp4_cpu(x: torch.Tensor) -> torch.Tensor:
    """The E2M1 value nearest each element, ties to the even code, saturating at 6, in x's dtype and signed as
    ``torch.sign`` signs it. E2M1's steps are 0.5 below 2, 1 up to 4 and 2 above: the magnitude is scaled by the
    inverse of its step (a power of two, so exactly), rounded half to even (which is the even code at every tie) and
    scaled back. Only arithmetic and selects, so that inductor vectorizes it where it is compiled
    (harness/models/activation_qdq.py); the integer bit view it replaced ran there as a scalar loop."""
    magnitude = x.abs().float()
    per_step = torch.where(magnitude < 2, 2.0, torch.where(magnitude < 4, 1.0, 0.5))
    rounded = (torch.round(magnitude * per_step) / per_step).clamp_(max=6.0)
    return (rounded * torch.sign(x.float())).to(x.dtype)


def pack_fp4_to_uint8_cpu(x: torch.Tensor) -> torch.Tensor:
    """Two E2M1 values (already on the grid) a byte: the code in the low three bits of each nibble, the sign above,
    the even column in the low nibble."""
    rows, columns = x.shape
    if columns % 2:
        raise ValueError("tensor must have an even number of columns for nvfp4 compression")
    codes = _CODE_OF_DOUBLED[(x.abs() * 2).to(torch.int64)]
    nibbles = codes | (torch.signbit(x).to(torch.uint8) << 3)
    pairs = nibbles.reshape(-1, 2)
    return (pairs[:, 0] | (pairs[:, 1] << 4)).reshape(rows, columns // 2)


_UNPACKED: dict[torch.dtype, torch.Tensor] = {}  # a byte's two values, [low nibble, high nibble], by dtype


def unpack_fp4_from_uint8_cpu(
    a: torch.Tensor, m: int, n: int, dtype: torch.dtype | None = torch.bfloat16
) -> torch.Tensor:
    """compressed-tensors' ``unpack_fp4_from_uint8`` as one lookup a byte: the table is the library's own unpacking
    of the 256 bytes, so every value (the sign of zero included) is the library's.

    >>> unpack_fp4_from_uint8_cpu(torch.tensor([[0x21, 0xF8]], dtype=torch.uint8), 1, 4)
    tensor([[ 0.5000,  1.0000, -0.0000, -6.0000]], dtype=torch.bfloat16)
    """
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8

    if dtype not in _UNPACKED:
        every_byte = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(256, 1)
        _UNPACKED[dtype] = unpack_fp4_from_uint8(every_byte, 256, 2, dtype=dtype)
    return torch.nn.functional.embedding(a.reshape(-1).int(), _UNPACKED[dtype]).reshape(m, n)


def _on_cpu(x: torch.Tensor, *args, **kwargs) -> bool:
    return x.device.type == "cpu"


_registered = False


def register() -> None:
    """Make compressed-tensors use the one-pass CPU versions for CPU tensors (its Triton kernels keep GPU ones)."""
    global _registered
    if _registered:
        return
    from compressed_tensors.compressors.nvfp4 import base
    from compressed_tensors.utils.impl_backend import ImplBackend

    ImplBackend.register("cast_to_fp4", _on_cpu, 1)(cast_to_fp4_cpu)
    ImplBackend.register("pack_fp4_to_uint8", _on_cpu, 1)(pack_fp4_to_uint8_cpu)
    library_unpack = getattr(base, "unpack_fp4_from_uint8", None)  # the NVFP4 (and MXFP4) compressor's decompress

    def unpack(a: torch.Tensor, m: int, n: int, dtype: torch.dtype | None = torch.bfloat16) -> torch.Tensor:
        if a.device.type == "cpu" and a.dtype == torch.uint8:
            return unpack_fp4_from_uint8_cpu(a, m, n, dtype)
        return library_unpack(a, m, n, dtype)

    if callable(library_unpack):
        base.unpack_fp4_from_uint8 = unpack
    _registered = True
