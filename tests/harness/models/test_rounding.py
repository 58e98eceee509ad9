"""The rounding method as a dimension: the small Llama's NVFP4 checkpoint rounded by GPTQ and AWQ, and its INT8 W8A8
one by AutoRound (whose FP4 path takes a minute on this model: smollm2-arith's frontier makes it), made as a user
makes them (python -m harness.quantize --precision FORMAT --rounding METHOD): each stores its format as the format's
own rounding does but with other codes, computes the model as well (GPTQ: closer to its unquantized self on problems
its calibration never saw), records its method and settings, and runs under its own name (nvfp4+gptq) in every row
and in run.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness.backends.hf_loading import load_kwargs
from harness.models import get_model, get_precision
from harness.models.checkpoints import read_checkpoint
from harness.models.recipe_files import read_recipe
from harness.questions.problems import generate, parse_task
from harness.questions.prompts import user_message
from tests.console import assert_numprec_console
from tests.harness.helpers import assert_user_error, csv_rows, in_quantize_env, needs_quantize_env, run_module

pytestmark = [needs_quantize_env, pytest.mark.xdist_group("formats"), pytest.mark.slow]

ROUNDED = {"gptq": "nvfp4+gptq", "awq": "nvfp4+awq", "autoround": "w8a8-int8+autoround"}  # method: precision
MAKE = """
import sys
from harness.quantize import main
for name in sys.argv[2:]:
    fmt, method = name.split("+")
    assert main(["--model", "smollm2", "--model-path", sys.argv[1], "--precision", fmt, "--rounding", method,
                 "--samples", "8", "--out", f"{sys.argv[1]}-{name}"]) == 0
"""


@pytest.fixture(scope="module")
def rounded(tiny_llama, checkpoints) -> dict[str, Path]:
    """The small Llama at each precision of ROUNDED (8 calibration problems), and at each format by its own rounding
    (made for the formats' tests)."""
    result = in_quantize_env(MAKE, str(tiny_llama), *ROUNDED.values())
    assert result.returncode == 0, result.stderr[-3000:]
    assert_numprec_console(result)  # AutoRound's own log handler included
    made = {name: Path(f"{tiny_llama}-{name}") for name in ROUNDED.values()}
    return made | {name.split("+")[0]: checkpoints[name.split("+")[0]] for name in ROUNDED.values()}


def logits(path: Path, precision: str, ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    kwargs = load_kwargs(get_precision(get_model("smollm2"), precision), "cpu", str(path))
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs).eval()
    with torch.inference_mode():
        return model(ids).logits.float()


def codes(path: Path, layer: str) -> torch.Tensor:
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "pt") as weights:
        names = [f"{layer}.weight_packed", f"{layer}.weight"]
        return weights.get_tensor(next(name for name in names if name in weights.keys()))  # noqa: SIM118


def test_each_method_rounds_otherwise_and_gptq_computes_the_model_closer(rounded, tiny_llama, tokenizer_ids):
    """Each method stores other codes than its format's own rounding; GPTQ's model lies nearer the unquantized one
    on evaluation problems (a stream calibration never draws from) than round to nearest's does, and AWQ's within a
    factor of two of it (measured 1.32: AWQ protects salient channels a random-weight model lacks). AutoRound learns
    its clipping on the 8 calibration problems: its int8 weights lie 4.6 times farther from the model's than round to
    nearest's, its model 9 times farther on these problems, and no bound is asserted of it here; smollm2-arith's
    frontier compares the methods on the model where they matter."""
    reference = logits(tiny_llama, "bf16", tokenizer_ids)
    error = {}
    for name in ["nvfp4+gptq", "nvfp4+awq", "nvfp4"]:
        error[name] = ((logits(rounded[name], name, tokenizer_ids) - reference) ** 2).mean().item()
    for name in ROUNDED.values():
        layer = "model.layers.3.mlp.down_proj"
        assert not torch.equal(codes(rounded[name], layer), codes(rounded[name.split("+")[0]], layer)), name
    assert error["nvfp4+gptq"] < error["nvfp4"] and error["nvfp4+awq"] < 2 * error["nvfp4"], error


@pytest.fixture(scope="module")
def tokenizer_ids(tiny_llama) -> torch.Tensor:
    """Eight prompts of seed 5's 3-digit additions, cut to a common length."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    problems = generate(parse_task("add"), 10, 3, 8, seed=5)
    ids = [tokenizer(user_message(problem))["input_ids"] for problem in problems]
    shortest = min(len(row) for row in ids)
    return torch.tensor([row[:shortest] for row in ids])


def test_each_checkpoint_records_its_rounding_and_is_read_back_by_it(rounded):
    """harness.quantize's note and llm-compressor's own recipe.yaml (Python tags and all) say the method; the
    checkpoint declares FORMAT+METHOD, and stores its tensors as its format's own rounding does."""
    for method, name in ROUNDED.items():
        path = rounded[name]
        note = json.loads((path / "numprec_quantize.json").read_text())
        assert note["rounding"] == method and note["precision"] == name
        assert note["rounding_settings"] and note["calibration_samples"] == 8
        assert read_recipe((path / "recipe.yaml").read_text(), "recipe.yaml").rounding == method
        checkpoint = read_checkpoint(path)
        assert checkpoint.declared == name and checkpoint.mix is None
        own = read_checkpoint(rounded[name.split("+")[0]])
        assert {key: t["dtype"] for key, t in checkpoint.tensors.items()} == {
            key: t["dtype"] for key, t in own.tensors.items()
        }


def test_eval_labels_the_rows_and_run_json_with_the_method(rounded, tmp_path):
    """--model-path of a GPTQ checkpoint runs as nvfp4+gptq (its rows say the rounding; run.json its settings);
    asked to run it as plain nvfp4, one line says which it is."""
    grid = ["--model", "smollm2", "--tasks", "add", "--lengths", "1", "--samples", "2"]
    result = run_module(
        "harness.eval", *grid, "--model-path", str(rounded["nvfp4+gptq"]), "--out", str(tmp_path / "run")
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = csv_rows(tmp_path / "run" / "results.csv")
    assert (row["precision"], row["rounding"], row["weight_bits"]) == ("nvfp4+gptq", "gptq", "4")
    record = json.loads((tmp_path / "run" / "run.json").read_text())["invocations"][-1]
    assert record["rounding smollm2 nvfp4+gptq"]["settings"]["GPTQModifier"]["block_size"] == 128
    wrong = run_module("harness.eval", *grid, "--model-path", str(rounded["nvfp4+gptq"]), "--precision", "nvfp4")
    assert_user_error(wrong, "is a nvfp4+gptq checkpoint", "--precision nvfp4+gptq")
