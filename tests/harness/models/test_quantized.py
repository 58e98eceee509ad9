"""Every CPU-capable quantized variant of the real default model: it loads genuinely quantized weights,
generates, and is scored through harness.eval; GPU-only paths stop with one line. GPTQ is calibrated on a small
Llama with the default model's tokenizer (tests/harness/conftest.py: the pipeline in seconds, not minutes)."""

import json

import pytest
import torch

from harness.backends import Sampling
from harness.core.machine import cpu_bf16_instructions, cpu_flags
from harness.core.paths import cache_root
from harness.models import get_model, get_precision
from harness.models.weights import variant_weights
from harness.questions.problems import Task, generate
from harness.questions.prompts import user_message
from tests.harness.helpers import ROOT, assert_user_error, csv_rows, needs_quantize_env, require_vllm, run_module

# One xdist worker runs the modules of group "quantized": they share the session's quantized checkpoints
# (tests/harness/conftest.py), which each worker would otherwise make again.
pytestmark = pytest.mark.xdist_group("quantized")

QUANTIZED_ON_CPU = ["int8", "nf4", "gguf-q8_0", "gguf-q4_0", "gguf-q4_1"]


def test_every_cpu_variant_is_evaluated_with_its_quantization_recorded(tmp_path):
    out = tmp_path / "run"
    result = run_module(
        "harness.eval",
        "--precision",
        "fp32," + ",".join(QUANTIZED_ON_CPU),
        "--tasks",
        "add",
        "--lengths",
        "1",
        "--samples",
        "4",
        "--prompt",
        "zero-shot",  # the recording is the subject, not the prompt: 49-53 CPU-s against 54-62 few-shot
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    rows = {row["precision"]: row for row in csv_rows(out / "results.csv")}
    assert set(rows) == {"fp32", *QUANTIZED_ON_CPU}
    expected = {  # precision: (method, weight bits, backend)
        "fp32": ("cast", "32", "hf"),
        "int8": ("bnb", "8", "hf"),
        "nf4": ("bnb", "4", "hf"),
        "gguf-q8_0": ("gguf", "8", "llamacpp"),
        "gguf-q4_0": ("gguf", "4", "llamacpp"),
        "gguf-q4_1": ("gguf", "4", "llamacpp"),
    }
    for name, (method, bits, backend) in expected.items():
        row = rows[name]
        assert (row["method"], row["weight_bits"], row["backend"]) == (method, bits, backend), row
        assert int(row["n"]) == 4 and int(row["gen_tokens"]) > 4
    footprint = {name: float(row["footprint_mb"]) for name, row in rows.items()}
    # Real quantization shrinks the weights: nothing here is an fp32 model under another name.
    assert footprint["int8"] < 0.4 * footprint["fp32"]
    assert footprint["gguf-q4_0"] < footprint["gguf-q4_1"] < footprint["gguf-q8_0"] < 0.3 * footprint["fp32"]
    assert rows["int8"]["activation_dtype"] == "float16" and rows["gguf-q4_1"]["activation_dtype"] == "q8_1"
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    for name, row in rows.items():
        scored = [s for s in samples if s["precision"] == name]
        assert sum(s["correct"] for s in scored) == int(row["correct"])
    # The same problems and prompts for every variant: one chat template, one prompt file.
    prompts = {name: [s["prompt"] for s in samples if s["precision"] == name] for name in rows}
    assert all(p == prompts["fp32"] for p in prompts.values())


@pytest.fixture(scope="module")
def llamacpp_q8():
    from harness.backends.llamacpp import LlamaCppBackend

    model = get_model("smollm2")
    precision = get_precision(model, "gguf-q8_0")
    backend = LlamaCppBackend(variant_weights(model, precision), precision, batch_size=8)
    yield backend
    backend.close()


def _prompts(backend, task: Task, length: int, count: int) -> list[str]:
    return [backend.chat_prompt(user_message(p)) for p in generate(task, 10, length, count, seed=0)]


def test_llamacpp_greedy_is_repeatable_and_batching_changes_little(llamacpp_q8):
    """Same batch size, same outputs. Unlike the transformers path, llama.cpp's kernels differ with the number of
    rows in a decode (gemm vs gemv, activation blocks), so batch 1 and batch 8 may part on a near-tie; this
    records that it stays rare rather than pretending it cannot happen."""
    prompts = _prompts(llamacpp_q8, Task("add"), 2, 8)
    batched = [g.text for g in llamacpp_q8.generate(prompts, 24, Sampling.named("greedy"))]
    assert batched == [g.text for g in llamacpp_q8.generate(prompts, 24, Sampling.named("greedy"))]
    llamacpp_q8.batch_size = 1
    try:
        one_by_one = [g.text for g in llamacpp_q8.generate(prompts, 24, Sampling.named("greedy"))]
    finally:
        llamacpp_q8.batch_size = 8
    assert sum(a != b for a, b in zip(batched, one_by_one, strict=True)) <= 2


def test_llamacpp_paper_sampling_is_seeded(llamacpp_q8):
    prompts = _prompts(llamacpp_q8, Task("mul"), 2, 8)
    paper = Sampling.named("paper")
    first = [g.text for g in llamacpp_q8.generate(prompts, 24, paper, seed=5)]
    again = [g.text for g in llamacpp_q8.generate(prompts, 24, paper, seed=5)]
    assert first == again


def test_llamacpp_uses_the_same_token_ids_as_transformers(llamacpp_q8):
    import ctypes

    lib = llamacpp_q8.lib
    for prompt in _prompts(llamacpp_q8, Task("iter_add", operands=3), 4, 4):
        data = prompt.encode()
        buffer = (ctypes.c_int32 * 4096)()
        count = lib.llama_tokenize(llamacpp_q8.vocab, data, len(data), buffer, 4096, False, True)
        assert list(buffer[:count]) == llamacpp_q8.tokenizer(prompt, add_special_tokens=False)["input_ids"]


@pytest.mark.cpu_kinds("avx2", "avx512", "avx512-bf16", "amx")
@needs_quantize_env
def test_gptq_checkpoint_is_4bit_and_is_evaluated(gptq_checkpoint, tmp_path):
    config = json.loads((gptq_checkpoint / "config.json").read_text())["quantization_config"]
    weights = next(iter(config["config_groups"].values()))["weights"]
    assert config["quant_method"] == "compressed-tensors" and weights["num_bits"] == 4 and weights["group_size"] == 64
    info = json.loads((gptq_checkpoint / "numprec_quantize.json").read_text())
    assert info["calibration_samples"] == 8 and info["method"] == "gptq"
    # Calibrated in bf16 only where the hardware multiplies it natively; saved in bf16 either way.
    native = torch.cuda.is_available() or bool(cpu_bf16_instructions())
    assert info["calibration_dtype"] == ("bfloat16" if native else "float32")
    assert json.loads((gptq_checkpoint / "config.json").read_text())["dtype"] == "bfloat16"
    out = tmp_path / "run"
    result = run_module(
        "harness.eval",
        "--precision",
        "gptq-w4",
        "--model-path",
        str(gptq_checkpoint),
        "--tasks",
        "add",
        "--lengths",
        "1",
        "--samples",
        "8",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    (row,) = csv_rows(out / "results.csv")
    assert (row["method"], row["weight_bits"], row["group_size"], row["activation_dtype"]) == (
        "gptq",
        "4",
        "64",
        "bfloat16",
    )
    assert int(row["gen_tokens"]) > 8


@needs_quantize_env
def test_gptq_weights_stay_on_the_4bit_grid_while_generating(gptq_checkpoint):
    """compressed-tensors has no int4 CPU kernel: it unpacks each layer to bf16 on its first forward. The
    values must still be the 4-bit ones, at most 16 levels in every group of 64 weights."""
    import torch

    from harness.backends.hf import HFBackend

    precision = get_precision(get_model("smollm2"), "gptq-w4")
    backend = HFBackend(str(gptq_checkpoint), precision, batch_size=2)
    packed = {name for name, _ in backend.model.named_buffers()} | {n for n, _ in backend.model.named_parameters()}
    assert any(name.endswith("weight_packed") for name in packed), "loaded packed int4 weights"
    prompts = _prompts(backend, Task("add"), 1, 2)
    assert all(g.tokens >= 1 for g in backend.generate(prompts, 8, Sampling.named("greedy")))
    layer = backend.model.model.layers[3].mlp.down_proj
    weight = layer.weight.detach().float()
    groups = weight.reshape(weight.shape[0], -1, 64)
    levels = max(len(torch.unique(group)) for group in groups.reshape(-1, 64)[:2000])
    assert levels <= 16, f"{levels} distinct values in a group of 64: not 4-bit"


@needs_quantize_env
def test_a_quantized_checkpoint_cannot_be_labelled_fp32(gptq_checkpoint):
    result = run_module("harness.eval", "--precision", "fp32", "--model-path", str(gptq_checkpoint))
    assert_user_error(result, "quantized checkpoint", "gptq-w4")


@needs_quantize_env
def test_a_missing_checkpoint_is_made_on_first_use_then_found(tmp_path):
    """harness.eval at a precision whose checkpoint this machine lacks makes it as harness.quantize does (its
    command said, its progress shown), into the cache where the next run finds it; a directory that is not a
    checkpoint is one line. fp8-dynamic is data-free: the real default model's in seconds."""
    result = run_module("harness.eval", "--precision", "gptq-w4", "--model-path", str(tmp_path))
    assert_user_error(result, "not a model directory")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(cache_root() / "models", target_is_directory=True)  # the session's converted model
    grid = ["--model", "smollm2", "--precision", "fp8-dynamic", "--tasks", "add", "--lengths", "1", "--samples", "2"]
    first = run_module("harness.eval", *grid, "--out", str(tmp_path / "first"), env={"NUMPREC_CACHE": str(cache)})
    assert first.returncode == 0, first.stderr[-3000:]
    assert "making the fp8-dynamic checkpoint of smollm2 (once): python -m harness.quantize" in first.stderr
    made = cache / "quantized" / "smollm2-fp8-dynamic"
    assert json.loads((made / "numprec_quantize.json").read_text())["rounding"] == "rtn"
    (row,) = csv_rows(tmp_path / "first" / "results.csv")
    assert (row["precision"], row["weight_bits"], row["rounding"]) == ("fp8-dynamic", "8", "rtn")
    again = run_module("harness.eval", *grid, "--out", str(tmp_path / "again"), env={"NUMPREC_CACHE": str(cache)})
    assert again.returncode == 0 and "making" not in again.stderr, again.stderr[-3000:]
    assert csv_rows(tmp_path / "again" / "results.csv")[0]["correct"] == row["correct"]


def test_quantize_rejects_a_group_size_that_does_not_tile_the_layers():
    result = run_module("harness.quantize", "--method", "gptq", "--group-size", "128", "--out", "/tmp/never")
    assert_user_error(result, "does not divide", "576", "64")


@pytest.mark.cpu_kinds("avx2", "avx512", "avx512-bf16", "amx")
@needs_quantize_env
def test_vllm_runs_the_gptq_checkpoint_with_its_int4_kernel(gptq_checkpoint, tmp_path):
    """The compressed-tensors W4A16 checkpoint harness.quantize makes, through --backend vllm: vLLM reads its
    quantization_config and runs its packed int4 weights with its own kernel (on a CPU, CPUWNA16), which the row
    names; every problem is answered. vLLM's CPU build has that kernel in its AVX-512 library only: on another CPU
    the run is one line before any work, and nothing is written."""
    require_vllm()
    out = tmp_path / "run"
    args = ["--precision", "gptq-w4", "--model-path", str(gptq_checkpoint), "--backend", "vllm"]
    result = run_module("harness.eval", *args, "--tasks", "add", "--lengths", "1", "--samples", "8", "--out", str(out))
    needs = set(get_precision(get_model("smollm2"), "gptq-w4").vllm_cpu_needs)
    if not torch.cuda.is_available() and not needs <= set(cpu_flags()):
        assert_user_error(result, "vLLM's CPU kernel for gptq-w4 needs avx512", "--backend hf here")
        assert not out.exists()
        return
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = csv_rows(out / "results.csv")
    assert row["backend"] == "vllm" and row["activation_dtype"] == "bfloat16"
    kernel = "CPUWNA16LinearKernel" if not torch.cuda.is_available() else "Linear"
    assert "linear CompressedTensorsWNA16 / " in row["kernel"] and kernel in row["kernel"], row["kernel"]
    assert int(row["gen_tokens"]) >= 8


def test_gguf_precision_refuses_another_backend():
    result = run_module("harness.eval", "--precision", "gguf-q4_1", "--backend", "hf")
    assert_user_error(result, "runs on the llamacpp backend")


def test_gguf_model_path_must_be_a_gguf_file(tmp_path):
    result = run_module("harness.eval", "--precision", "gguf-q8_0", "--model-path", str(tmp_path))
    assert_user_error(result, "must be a .gguf file")


def test_quantize_environment_pins_match_the_reader():
    """The writer (.venv-quantize) and the reader (.venv) must agree on compressed-tensors."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    setup = (ROOT / "scripts" / "setup_quantize.sh").read_text()
    pins = [line.split('"')[1] for line in pyproject.splitlines() if '"compressed-tensors==' in line]
    assert pins and pins[0] in setup
