"""Mixed checkpoints for real: the small Llama made by ``harness.quantize --recipe`` (as harness.sensitivity writes
one) and evaluated by ``harness.eval --model-path`` on transformers and on vLLM's CPU engine. The rows name the mix;
the layers each engine loaded are checked against the checkpoint's own; a recipe changed after the checkpoint was
made, and a format vLLM's CPU build has no kernel for, are one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.models import get_model, get_precision
from harness.models.checkpoints import read_checkpoint
from harness.models.mix import check_loaded, mix_precision
from harness.models.recipe_files import read_recipe
from harness.models.stored_bits import stored_tensors
from harness.recipes.groups import KINDS
from harness.recipes.recipe_file import mix_recipe
from tests.devices import HAS_CUDA
from tests.harness.helpers import assert_user_error, csv_rows, needs_quantize_env, require_vllm, run_module

pytestmark = [needs_quantize_env, pytest.mark.xdist_group("vllm"), pytest.mark.slow]

MEMBERS = [member for members in KINDS.values() for member in members]
EVERY = [f"model.layers.{block}.{member}" for block in range(4) for member in MEMBERS]
KEPT = [f"model.layers.0.{member}" for member in KINDS["qkv"]] + ["model.layers.3.mlp.down_proj"]


def make_mix(tiny_llama: Path, out: Path, target: str, keep: str) -> Path:
    """The small Llama with KEPT at ``keep`` (bf16: left unquantized) and the rest at ``target`` (precision names)."""
    recipe = out.parent / f"{out.name}.yaml"
    targets = [name for name in EVERY if name not in KEPT]
    model = get_model("smollm2")
    formats = get_precision(model, target), get_precision(model, keep)
    recipe.write_text(mix_recipe(*formats, targets, KEPT, ["lm_head"], "a test's mix"))
    result = run_module(
        "harness.quantize", "--model", "smollm2", "--model-path", str(tiny_llama), "--recipe", str(recipe),
        "--samples", "4", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def nvfp4_mix(tiny_llama, tmp_path_factory) -> Path:
    return make_mix(tiny_llama, tmp_path_factory.mktemp("mixes") / "nvfp4-fp8", "nvfp4", "fp8-dynamic")


@pytest.fixture(scope="module")
def fp8_mix(tiny_llama, tmp_path_factory) -> Path:
    return make_mix(tiny_llama, tmp_path_factory.mktemp("mixes") / "fp8-bf16", "fp8-dynamic", "bf16")


@pytest.fixture(scope="module")
def gptq_mix(tiny_llama, tmp_path_factory) -> Path:
    return make_mix(tiny_llama, tmp_path_factory.mktemp("mixes") / "nvfp4-gptq-fp8", "nvfp4+gptq", "fp8-dynamic")


def evaluate(model_path: Path, out: Path, *extra: str):
    grid = ["--model", "smollm2", "--tasks", "add", "--lengths", "1", "--samples", "2"]
    return run_module("harness.eval", *grid, "--model-path", str(model_path), *extra, "--out", str(out), timeout=600)


def test_harness_quantize_stores_each_layer_in_its_groups_format(nvfp4_mix):
    """The checkpoint's config groups are the recipe's, each layer stored in its group's format (FP8 codes for the
    kept layers, packed FP4 codes with their scales for the rest), and read back as the same mix."""
    config = json.loads((nvfp4_mix / "config.json").read_text())["quantization_config"]
    recipe = read_recipe((nvfp4_mix.parent / "nvfp4-fp8.yaml").read_text(), "the test's recipe")
    made = sorted(sorted(group["targets"]) for group in config["config_groups"].values())  # llm-compressor renames
    assert made == sorted(sorted(group["targets"]) for group in recipe.groups.values())
    assert config["ignore"] == ["lm_head"]
    tensors = stored_tensors(nvfp4_mix)
    for layer in EVERY:
        if layer in KEPT:
            assert tensors[f"{layer}.weight"]["dtype"] == "F8_E4M3", layer
        else:
            assert tensors[f"{layer}.weight_packed"]["dtype"] == "U8" and f"{layer}.weight_global_scale" in tensors
    mix = read_checkpoint(nvfp4_mix).mix
    assert mix is not None and mix.counts == {"nvfp4": len(EVERY) - len(KEPT), "fp8-dynamic": len(KEPT)}
    assert mix.schemes["lm_head"] == "unquantized" and 4.5 < mix.bits < 8


def test_transformers_runs_a_mix_and_its_rows_name_it(nvfp4_mix, tmp_path):
    result = evaluate(nvfp4_mix, tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = csv_rows(tmp_path / "run" / "results.csv")
    mix = read_checkpoint(nvfp4_mix).mix
    assert row["precision"] == mix.label and row["precision"].startswith("nvfp4-mix-")
    assert row["mix"] == f"nvfp4, fp8-dynamic in 4 of 28 layers, {mix.bits:.2f} bits; lm_head unquantized"
    assert row["weight_dtype"] == "float4_e2m1+float8_e4m3fn" and "each layer in its own scheme" in row["kernel"]
    compiled = "scheme says (compiled ahead of time by AOTInductor"
    assert compiled in row["kernel"], "NVFP4's per-group activations: the compiled path"
    loaded = loaded_layers(tmp_path / "run", row)
    assert {name for name, fmt in loaded.items() if fmt == "fp8-dynamic"} == set(KEPT), "kept as the recipe says"


def test_a_precision_asked_of_a_mix_is_one_line(nvfp4_mix, tmp_path):
    result = evaluate(nvfp4_mix, tmp_path / "run", "--precision", "nvfp4")
    assert_user_error(result, "each layer runs in its own format; drop --precision")
    assert not (tmp_path / "run").exists()


def with_recipe_changed(mix: Path, tmp_path: Path) -> Path:
    """The checkpoint with recipe.yaml (llm-compressor's record of what it ran) edited to keep block 2's down_proj
    otherwise than config.json and the weights hold."""
    changed = tmp_path / "changed"
    changed.mkdir()
    for path in mix.iterdir():
        (changed / path.name).symlink_to(path)
    (changed / "recipe.yaml").unlink()
    text = (mix / "recipe.yaml").read_text()
    edited = text.replace("(0|1|2)\\.mlp\\.down_proj", "(0|1)\\.mlp\\.down_proj", 1)
    assert edited != text, "the recipe's down_proj targets moved; update the edit"
    (changed / "recipe.yaml").write_text(edited)
    return changed


@pytest.mark.parametrize("mix", ["nvfp4_mix", "gptq_mix"])
def test_a_recipe_changed_after_the_checkpoint_was_made_is_caught(mix, request, tmp_path):
    """Refused before any weights load, naming the layer, whatever modifier the recipe quantized in (GPTQModifier's
    recipe.yaml holds Python-tagged values)."""
    result = evaluate(with_recipe_changed(request.getfixturevalue(mix), tmp_path), tmp_path / "run")
    assert_user_error(
        result, "recipe.yaml and config.json disagree on 1 layer (model.layers.2.mlp.down_proj: unquantized"
    )
    assert not (tmp_path / "run").exists()


def test_a_mix_rounded_by_gptq_runs_under_its_rounding(gptq_mix, tmp_path):
    """A GPTQModifier recipe's checkpoint, as llm-compressor users write them: read layer by layer, run on
    transformers, its rows labelled with the rounding (nvfp4+gptq-mix-...)."""
    result = evaluate(gptq_mix, tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = csv_rows(tmp_path / "run" / "results.csv")
    mix = read_checkpoint(gptq_mix).mix
    assert mix.rounding == "gptq" and row["precision"] == mix.label and mix.label.startswith("nvfp4+gptq-mix-")
    assert row["rounding"] == "gptq" and row["mix"].startswith("nvfp4, fp8-dynamic in 4 of 28 layers")


def test_a_mix_whose_architecture_cannot_be_built_is_one_line(nvfp4_mix, tmp_path):
    """A head count that does not divide the hidden size: the layers cannot be read, said in one line."""
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in nvfp4_mix.iterdir():
        if path.name != "config.json":
            (broken / path.name).symlink_to(path)
    config = json.loads((nvfp4_mix / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "num_attention_heads": 7}))
    assert_user_error(evaluate(broken, tmp_path / "run"), "its layers cannot be read from config.json")


def test_vllm_runs_a_mix_it_has_kernels_for_and_checks_each_layer(fp8_mix, tmp_path):
    """FP8 with some layers left in bf16: vLLM's CPU engine loads each layer as the checkpoint declares (read from
    its worker, kept in run.json), and the same loaded layers are caught against a changed mix."""
    require_vllm()
    from harness.backends.vllm import loaded_as

    checkpoint = read_checkpoint(fp8_mix)
    result = evaluate(fp8_mix, tmp_path / "run", "--backend", "vllm")
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = csv_rows(tmp_path / "run" / "results.csv")
    assert row["precision"] == checkpoint.mix.label and row["mix"].startswith("fp8-dynamic, unquantized in 4 of 28")
    assert "each of the mix's 29 layers loaded as declared" in row["kernel"], row["kernel"]
    loaded = loaded_layers(tmp_path / "run", row)
    assert loaded["model.layers.0.self_attn.k_proj"] == "UnquantizedLinearMethod"
    assert loaded["model.layers.1.self_attn.k_proj"] == "CompressedTensorsW8A8Fp8"
    precision = mix_precision(get_model("smollm2"), checkpoint.mix, checkpoint.mix.label)
    check_loaded(precision, loaded, "vLLM", loaded_as)
    formats = dict(precision.layer_formats)
    formats["model.layers.1.mlp.up_proj"] = "unquantized"  # the mix another recipe would have made
    changed = precision.model_copy(update={"layer_formats": tuple(formats.items())})
    with pytest.raises(UserError, match=r"loaded 1 layer otherwise .*model\.layers\.1\.mlp\.up_proj"):
        check_loaded(changed, loaded, "vLLM", loaded_as)


def loaded_layers(run: Path, row: dict) -> dict[str, str]:
    """The layers the run's engine loaded, as run.json keeps them for the row's series."""
    (invocation,) = json.loads((run / "run.json").read_text())["invocations"]
    return invocation[f"layers {row['model']} {row['precision']}"]


@pytest.mark.skipif(HAS_CUDA, reason="vLLM's CUDA build has NVFP4 kernels")
def test_a_format_vllms_cpu_build_cannot_run_is_one_line(nvfp4_mix, tmp_path):
    require_vllm()
    result = evaluate(nvfp4_mix, tmp_path / "run", "--backend", "vllm")
    assert_user_error(result, "vLLM's CPU build has no nvfp4 kernel (in nvfp4-mix-")
