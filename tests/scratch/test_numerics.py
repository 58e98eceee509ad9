"""Emulated float formats reproduce the real ones; bad names are refused."""

import pytest
import torch

from scratch.numerics import FloatFormat, round_to_format


def values():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(100_000, generator=generator) * torch.exp(3 * torch.randn(100_000, generator=generator))


def test_e8m7_is_bfloat16():
    x = values()
    assert torch.equal(round_to_format(x, FloatFormat.parse("e8m7")), x.to(torch.bfloat16).float())


def test_e5m10_is_float16_including_subnormals():
    x = values().clamp(-65000, 65000)
    assert torch.equal(round_to_format(x, FloatFormat.parse("e5m10")), x.to(torch.float16).float())


def test_e8m23_is_float32_and_few_bits_are_coarse():
    x = values()
    assert torch.equal(round_to_format(x, FloatFormat.parse("e8m23")), x)
    e4m3 = FloatFormat.parse("e4m3")
    rounded = round_to_format(torch.tensor([1.0625, 1.1875, 1000.0, -1000.0]), e4m3)
    assert rounded.tolist() == [1.0, 1.25, 240.0, -240.0]  # ties to even; saturation at the largest finite value


@pytest.mark.parametrize("name", ["fp8", "e9m2", "e1m3", "e4m30", "m3e4"])
def test_bad_format_names(name):
    with pytest.raises(ValueError):
        FloatFormat.parse(name)
