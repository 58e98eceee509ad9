"""The console speaks numprec: each command's small happy path and a bad input found after the heavy imports print
numprec's own lines only (tests/console.py lists their formats); --verbose shows the libraries again.

Commands whose happy paths other tests already run as processes check their consoles there: harness.eval
(tests/harness/runs/test_eval.py), harness.quantize (tests/harness/conftest.py), harness.serve
(tests/harness/backends/conftest.py), finetune.train (tests/finetune/test_train.py), scratch.sweep
(tests/scratch/test_sweep.py), bench.run (tests/bench/test_run.py). Those may be forked from a warm interpreter that
has imported torch and transformers already (tests/warm.py); the commands here run in fresh interpreters, so what
those two print while they are imported is checked here."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from tests.console import assert_numprec_console, foreign_lines
from tests.devices import HAS_CUDA
from tests.harness.helpers import assert_user_error, run_module

pytestmark = pytest.mark.slow  # real processes that import the model stack


def rankless_adapter(root):
    """An adapter whose config says r: "eight": found only after peft and transformers are imported."""
    adapter = root / "rankless"
    adapter.mkdir()
    lora = {"peft_type": "LORA", "r": "eight", "lora_alpha": 16, "target_modules": ["q_proj"]}
    (adapter / "adapter_config.json").write_text(json.dumps(lora))
    save_file({"x": torch.zeros(1)}, str(adapter / "adapter_model.safetensors"))
    return adapter


def test_a_quantized_run_and_its_readers_speak_numprec(tmp_path):
    """nf4 (bitsandbytes, which imports torchao and gptqmodel through transformers) and llama.cpp: the loudest
    libraries; then the commands that read the run."""
    out = tmp_path / "run"
    grid = ["--tasks", "add", "--lengths", "1", "--samples", "2", "--prompt", "zero-shot", "--out", str(out)]
    result = run_module("harness.eval", "--precision", "nf4,gguf-q4_1", *grid, fresh=True)  # zero-shot: fewer tokens
    assert result.returncode == 0, result.stderr[-3000:]
    assert_numprec_console(result)
    for module, args in [
        ("harness.rescore", [str(out)]),
        ("harness.diff", [str(out), str(out)]),
        ("harness.problems", ["--task", "mul", "--length", "2", "--count", "3", "--out", str(tmp_path / "p.jsonl")]),
    ]:
        result = run_module(module, *args, fresh=True)
        assert result.returncode == 0, (module, result.stderr[-3000:])
        assert_numprec_console(result)


def test_training_commands_speak_numprec(tmp_path):
    scratch = run_module(
        "scratch.train", "--steps", "4", "--warmup-steps", "1", "--eval-every", "2", "--n-embd", "32", fresh=True
    )
    assert scratch.returncode == 0, scratch.stderr[-3000:]
    assert_numprec_console(scratch)
    data = run_module(
        "finetune.data", "--tasks", "add", "--scale", "0.001", "--out", str(tmp_path / "data"), fresh=True
    )
    assert data.returncode == 0, data.stderr[-3000:]
    assert_numprec_console(data)


def test_an_error_after_the_heavy_imports_is_one_line(tmp_path):
    """The issue's case: a broken adapter config is found after peft and transformers are loaded; before, five lines
    of other libraries' noise came first."""
    adapter = rankless_adapter(tmp_path)
    result = run_module("harness.eval", "--adapter", str(adapter), "--tasks", "add", "--lengths", "1", cwd=tmp_path)
    assert_user_error(result, "r must be a positive integer, got 'eight'")
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF\x03\x00\x00")
    result = run_module("harness.eval", "--precision", "gguf-q8_0", "--model-path", str(fake), cwd=tmp_path)
    assert_user_error(result, "not a readable GGUF")


@pytest.mark.skipif(HAS_CUDA, reason="the libraries' notices differ where CUDA loads (torchao's kernels do)")
def test_verbose_shows_the_libraries_again(tmp_path):
    adapter = rankless_adapter(tmp_path)
    args = ["--adapter", str(adapter), "--tasks", "add", "--lengths", "1"]
    loud = run_module("harness.eval", *args, "--verbose", cwd=tmp_path)
    assert loud.returncode == 2 and foreign_lines(loud.stderr), loud.stderr
    by_variable = run_module("harness.eval", *args, cwd=tmp_path, env={"NUMPREC_VERBOSE": "1"})
    assert by_variable.returncode == 2 and foreign_lines(by_variable.stderr), by_variable.stderr


def test_a_bar_another_library_opens_itself_stays_closed():
    """compressed-tensors opens its loading bars with ``disable`` of its own, past TQDM_DISABLE: a bar opened from a
    module outside numprec's packages opens disabled, one of numprec's keeps what it asked for."""
    from harness.core.quiet import silence_libraries, verbose

    if verbose():
        pytest.skip("NUMPREC_VERBOSE is set: the libraries speak")
    silence_libraries()
    code = "import io, tqdm\nbar = tqdm.tqdm(total=3, disable=False, file=io.StringIO())\nopened = bar.disable"
    foreign, own = {}, {}
    exec(code, {"__name__": "compressed_tensors.utils.offload"}, foreign)
    exec(code, {"__name__": "harness.runs.cells"}, own)
    assert foreign["opened"] is True and own["opened"] is False
