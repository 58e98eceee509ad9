"""The formats of now (FP8, FP8 blocks, INT8 W8A8, W4A8, NVFP4, MXFP4, MXFP8 and the A16 variants), made as a user
makes them (python -m harness.quantize --precision NAME, llm-compressor in its own environment) of the small Llama,
loaded as the transformers backend loads them, and computed as each format prescribes: one linear layer's output
equals, bit for bit, what tests/harness/models/format_reference.py computes from the format's definition and the
layer's stored codes and scales; the same reference with one scale convention changed does not. A checkpoint runs at
the precision its quantization_config declares, and only at that one."""

from __future__ import annotations

import csv
import json
import shutil
from functools import cache
from pathlib import Path

import pytest
import torch

from harness.backends.hf_loading import load_kwargs
from harness.backends.widened_bf16 import WidenedBf16Linear, widen
from harness.models import precision_registry
from harness.models.checkpoints import quantization_config
from harness.models.formats import declared_precision
from tests.console import assert_numprec_console
from tests.harness.helpers import (
    assert_summed_in_another_order,
    assert_user_error,
    needs_quantize_env,
    run_module,
)
from tests.harness.models.format_reference import FORMATS, layer_output, stored

pytestmark = [needs_quantize_env, pytest.mark.xdist_group("formats")]  # one worker makes the checkpoints once

LAYER = "model.layers.3.mlp.down_proj"


@cache
def loaded(checkpoint: Path, name: str):
    """The checkpoint as the transformers backend loads it, after one forward (which dequantizes the weights)."""
    from transformers import AutoModelForCausalLM

    kwargs = load_kwargs(precision_registry()[name], "cpu", str(checkpoint))
    model = AutoModelForCausalLM.from_pretrained(checkpoint, **kwargs).eval()
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3, 4]]))
    return model


def hard_input(columns: int) -> torch.Tensor:
    """Two sequences of five tokens whose inputs span five decades (saturating groups, tiny groups), one token's first
    32 inputs zero (a scale of zero)."""
    generator = torch.Generator().manual_seed(0)
    spread = torch.logspace(-3, 2, columns)[torch.randperm(columns, generator=generator)]
    x = (torch.randn(2, 5, columns, generator=generator) * spread).to(torch.bfloat16)
    x[0, 0, :32] = 0
    return x


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_layer_computes_its_format_bit_for_bit(checkpoints, name):
    """The dequantized weights and the layer's output, for a hard input and for the hidden states the model itself
    feeds the layer, equal the definition's; with one scale convention changed, the outputs differ."""
    model = loaded(checkpoints[name], name)
    layer = model.get_submodule(LAYER)
    tensors = stored(checkpoints[name], LAYER)
    assert torch.equal(layer.weight, FORMATS[name].weight(tensors))
    x = hard_input(layer.in_features)
    with torch.no_grad():
        output = layer(x)
        seen = {}
        hook = layer.register_forward_hook(lambda module, args, out: seen.update(x=args[0], out=out))
        model(torch.tensor([[1, 17, 2, 345, 99, 8]]))
        hook.remove()
    assert output.dtype == torch.bfloat16 and torch.equal(output, layer_output(name, tensors, x))
    assert torch.equal(seen["out"], layer_output(name, tensors, seen["x"]))
    changed = layer_output(name, tensors, x, changed=True)
    assert not torch.equal(output, changed), f"{name}: {FORMATS[name].changed} went unnoticed"


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_layer_by_float32_gemm_computes_its_format_but_for_the_order_of_its_sums(checkpoints, name):
    """Where a CPU has no bf16 instructions the backend multiplies each layer's bf16 values by float32's GEMM
    (harness/backends/widened_bf16.py; here on any CPU): once the first forward has dequantized the weights, a
    layer's output is the format's definition's, or apart from it by one bf16 rounding of sums taken in another
    order."""
    from transformers import AutoModelForCausalLM

    kwargs = load_kwargs(precision_registry()[name], "cpu", str(checkpoints[name]))
    model = AutoModelForCausalLM.from_pretrained(checkpoints[name], **kwargs).eval()
    with torch.inference_mode():
        model(torch.tensor([[1, 2, 3, 4]]))  # the first forward dequantizes the weights
    assert widen(model) == len([m for m in model.modules() if isinstance(m, torch.nn.Linear)])
    layer = model.get_submodule(LAYER)
    tensors = stored(checkpoints[name], LAYER)
    assert isinstance(layer, WidenedBf16Linear) and torch.equal(layer.weight, FORMATS[name].weight(tensors).float())
    x = hard_input(layer.in_features)
    with torch.inference_mode():
        ours, theirs = layer(x), layer_output(name, tensors, x)
    assert_summed_in_another_order(ours, theirs, FORMATS[name].activation(x, tensors), layer.weight)


def test_each_checkpoint_declares_its_precision(checkpoints):
    assert {name: declared_precision(quantization_config(path)) for name, path in checkpoints.items()} == {
        name: name for name in FORMATS
    }
    made = json.loads((checkpoints["nvfp4"] / "numprec_quantize.json").read_text())
    assert made["scheme"] == "NVFP4" and made["calibration_samples"] == 8  # static activation scales: calibrated
    made = json.loads((checkpoints["mxfp4"] / "numprec_quantize.json").read_text())
    assert made["calibration_samples"] == 0  # every scale from the weights or at run time: data-free


def published(checkpoint: Path, cache: Path, repo: str) -> dict:
    """``checkpoint`` laid out as the hub's download leaves a repo in a Hugging Face cache; the environment that
    reads that cache."""
    snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / "0123abcd"
    shutil.copytree(checkpoint, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abcd")
    return {"HF_HUB_CACHE": str(cache)}


def test_a_published_checkpoint_runs_at_the_precision_it_declares(checkpoints, tmp_path):
    """--model-path with a hub id of the local cache alone: the row is the declared precision's, says it was
    emulated and how (here by float32's GEMM, as where a CPU has no bf16 instructions), and the console is numprec's
    (compressed-tensors' bars and torchao's load failures silenced)."""
    out = tmp_path / "run"
    grid = ["--tasks", "add", "--lengths", "1", "--samples", "2"]
    env = published(checkpoints["nvfp4"], tmp_path / "hub", "someone/tiny-llama-NVFP4")
    env["NUMPREC_BF16_GEMM"] = "float32"  # the widened path after decompression, as a CPU without bf16 takes it
    result = run_module("harness.eval", "--model-path", "someone/tiny-llama-NVFP4", *grid, "--out", str(out), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_numprec_console(result)
    for bar in ("Applying quantization config", "Dispatching model", "Decompressing model"):
        assert bar not in result.stderr  # compressed-tensors' own bars
    with open(out / "results.csv", newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["precision"], row["method"], row["weight_dtype"]) == ("nvfp4", "compressed", "float4_e2m1")
    assert row["kernel"].startswith("emulated by compressed-tensors") and "float4 tensor_group g16" in row["kernel"]
    assert "held in float32" in row["kernel"] and "; float32 GEMM over bfloat16 values;" in row["kernel"]
    assert (
        row["matmul_precision"]
        == "bfloat16 on float4_e2m1 grid values (emulated; float32 GEMM over the bfloat16 values)"
    )


@pytest.mark.parametrize(
    "precision,expected",
    [("mxfp4", "is a nvfp4 checkpoint"), ("fp32", "evaluate it with --precision nvfp4")],
)
def test_another_precision_asked_of_a_checkpoint_is_one_line(checkpoints, tmp_path, precision, expected):
    out = tmp_path / "run"
    args = ["--model-path", str(checkpoints["nvfp4"]), "--precision", precision, "--tasks", "add", "--lengths", "1"]
    result = run_module("harness.eval", *args, "--out", str(out))
    assert_user_error(result, expected)
    assert not out.exists()


def test_fp8_dynamic_layers_on_scaled_mm_compute_fp8_products(checkpoints):
    """Where a card has FP8 matmuls, fp8-dynamic's layers become torch._scaled_mm (run here on torch's CPU version):
    the stored E4M3 weights times the input rounded per token to E4M3 (scale absmax / 448 in float32, as vLLM
    computes it), summed in float32, both scales applied to the sum: equal to that product taken exactly, within
    bfloat16's rounding of the result; every quantized layer replaced, the output head kept."""
    from transformers import AutoModelForCausalLM

    from harness.backends.fp8_linear import ScaledMMLinear, fp8_matmuls, use_fp8_matmuls

    path = checkpoints["fp8-dynamic"]
    model = AutoModelForCausalLM.from_pretrained(path, **load_kwargs(precision_registry()["fp8-dynamic"], "cpu", path))
    assert use_fp8_matmuls(model) == fp8_matmuls(model) == 4 * 7
    assert type(model.lm_head) is torch.nn.Linear
    layer = model.get_submodule(LAYER)
    assert isinstance(layer, ScaledMMLinear) and layer.weight.dtype == torch.float8_e4m3fn
    x = hard_input(layer.in_features)
    tensors = stored(path, LAYER)
    rows = x.reshape(-1, layer.in_features).double()
    scale = rows.abs().amax(-1, keepdim=True).float().double() / 448
    codes = (rows / scale.clamp(min=1e-38)).clamp(-448, 448).float().to(torch.float8_e4m3fn).double()
    exact = (codes * scale) @ (tensors["weight"].double() * tensors["weight_scale"].double()).T
    with torch.no_grad():
        output = layer(x).reshape(exact.shape)
    torch.testing.assert_close(output.double(), exact, rtol=2**-7, atol=1e-3)


def test_a_checkpoint_made_again_keeps_the_previous_one_aside(checkpoints, tiny_llama, tmp_path):
    """harness.quantize into its own earlier checkpoint: the new one in place, the earlier moved aside whole (a
    command never deletes), and the line says where."""
    out = tmp_path / "fp8"
    shutil.copytree(checkpoints["fp8-dynamic"], out)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    result = run_module(
        "harness.quantize", "--model", "smollm2", "--model-path", str(tiny_llama), "--precision", "fp8-dynamic",
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (aside,) = [path for path in tmp_path.iterdir() if path.name.startswith("fp8.previous-")]
    assert f"moved the previous fp8 aside to {aside.name}" in result.stdout
    assert {path.name: path.read_bytes() for path in aside.iterdir()} == before
    assert (out / "numprec_quantize.json").is_file() and (out / "config.json").is_file()
