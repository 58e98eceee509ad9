"""harness/models/fp4.py: the one-pass CPU rounding and packing to E2M1 computes what compressed-tensors' own CPU
fallback computes, for every bfloat16 value (sign of zero and saturation included), and once registered it is what
compressed-tensors' entry points run on CPU tensors."""

from __future__ import annotations

import pytest
import torch
from compressed_tensors.compressors.nvfp4 import base
from compressed_tensors.compressors.nvfp4.helpers import pack_fp4_to_uint8, unpack_fp4_from_uint8
from compressed_tensors.quantization.utils.fp4_utils import cast_to_fp4
from compressed_tensors.utils.impl_backend import ImplBackend

from harness.models import fp4
from harness.models.fp4 import cast_to_fp4_cpu, pack_fp4_to_uint8_cpu, unpack_fp4_from_uint8_cpu


def every_bfloat16() -> torch.Tensor:
    values = torch.arange(0, 2**16, dtype=torch.int32).to(torch.uint16).view(torch.bfloat16)
    return values[~torch.isnan(values)]


def same_bits(first: torch.Tensor, second: torch.Tensor) -> bool:
    integer = {torch.bfloat16: torch.int16, torch.float32: torch.int32}[first.dtype]
    return first.dtype == second.dtype and torch.equal(first.view(integer), second.view(integer))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rounding_equals_the_fallback_on_every_bfloat16_value(dtype):
    values = every_bfloat16().to(dtype)
    assert same_bits(cast_to_fp4_cpu(values), ImplBackend.call("cast_to_fp4", values.clone()))


def test_rounding_equals_the_fallback_on_float32_values_between_bfloat16_ones():
    """The quantizer divides float32 weights by their scales: values bfloat16 cannot hold, and those one step either
    side of each midpoint of the E2M1 grid."""
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(200_000, generator=generator) * torch.exp(2 * torch.randn(200_000, generator=generator))
    middles = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    below, above = torch.nextafter(middles, torch.tensor(0.0)), torch.nextafter(middles, torch.tensor(9.0))
    near = torch.cat([middles, below, above])
    values = torch.cat([values, near, -near])
    assert same_bits(cast_to_fp4_cpu(values), ImplBackend.call("cast_to_fp4", values.clone()))


def test_ties_go_to_the_even_code_and_large_values_saturate():
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -1e30])
    assert cast_to_fp4_cpu(ties).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -6.0]


def test_packing_equals_the_fallback_on_every_code():
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # E2M1's magnitudes
    values = torch.cartesian_prod(torch.cat([grid, -grid]), torch.cat([grid, -grid]))  # every pair of codes
    packed = pack_fp4_to_uint8_cpu(values)
    assert torch.equal(packed, ImplBackend.call("pack_fp4_to_uint8", values.clone()))
    assert packed.unique().numel() == 256  # +0 and -0 are codes of their own


def test_registered_entry_points_run_the_one_pass_versions_on_cpu(monkeypatch):
    """Once registered (once only: compressed-tensors refuses a second function of a name), a CPU tensor's first
    eligible backend for both entry points is the one-pass version; a GPU tensor's is not."""
    ours = {"cast_to_fp4": cast_to_fp4_cpu, "pack_fp4_to_uint8": pack_fp4_to_uint8_cpu}
    backends = {
        name: [entry for entry in found if entry[0] not in ours.values()]
        for name, found in ImplBackend._backends.items()
    }
    registry = {name: fn for name, fn in ImplBackend._fn_registry.items() if fn not in ours.values()}
    monkeypatch.setattr(ImplBackend, "_backends", backends)
    monkeypatch.setattr(ImplBackend, "_fn_registry", registry)
    monkeypatch.setattr(fp4, "_registered", False)
    monkeypatch.setattr(base, "unpack_fp4_from_uint8", unpack_fp4_from_uint8)
    fp4.register()
    fp4.register()
    values = torch.randn(8, 32) * 4
    for name, function in ours.items():
        eligible = [fn for fn, requirement, _ in ImplBackend._backends[name] if requirement(values)]
        assert eligible[:1] == [function]
        meta = torch.empty(8, 32, device="meta")
        assert function not in [fn for fn, requirement, _ in ImplBackend._backends[name] if requirement(meta)]
    assert same_bits(cast_to_fp4(values.clone()), ImplBackend.call("cast_to_fp4", values.clone()))
    assert torch.equal(pack_fp4_to_uint8(cast_to_fp4(values.clone())), pack_fp4_to_uint8_cpu(cast_to_fp4_cpu(values)))

    packed = pack_fp4_to_uint8_cpu(cast_to_fp4_cpu(values))
    assert base.unpack_fp4_from_uint8 is not unpack_fp4_from_uint8  # the compressor's decompress looks it up here
    assert same_bits(base.unpack_fp4_from_uint8(packed, 8, 32), unpack_fp4_from_uint8(packed, 8, 32))
    assert same_bits(base.unpack_fp4_from_uint8(packed, 8, 32), unpack_fp4_from_uint8_cpu(packed, 8, 32))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_unpacking_equals_the_library_on_every_byte(dtype):
    """Every byte in every position of a row, the sign of zero included (the -0.0 of a sign bit over code 0)."""
    every_byte = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    packed = torch.stack([every_byte, every_byte.flip(0)])  # 2 rows of 256 bytes: 512 values a row
    ours, library = unpack_fp4_from_uint8_cpu(packed, 2, 512, dtype), unpack_fp4_from_uint8(packed, 2, 512, dtype)
    integer = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[dtype]
    assert ours.dtype == library.dtype == dtype
    assert torch.equal(ours.view(integer), library.view(integer))
    assert torch.signbit(ours).sum() == ours.numel() // 2  # the sign bit of half the nibbles, -0.0 among them
