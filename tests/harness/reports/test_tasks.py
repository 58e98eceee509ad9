"""numprec's problems inside other harnesses, run for real on the embedded SmolLM2: lm-evaluation-harness (hf backend)
on the exported task group, and inspect_ai on the registered task, each against harness.eval on the same cells:
the same prompts, the same outputs, the same verdicts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.models import get_model
from harness.models.weights import resolve_weights
from harness.questions.answers import FIRST_LINE
from tests.harness.helpers import ROOT, command_env, run_module

pytestmark = pytest.mark.slow
GRID = ["--tasks", "add", "--lengths", "1,2", "--samples", "3"]


@pytest.fixture(scope="module")
def numprec_run(tmp_path_factory):
    """harness.eval on the cells: the samples the other harnesses are compared with."""
    out = tmp_path_factory.mktemp("eval") / "run"
    result = run_module("harness.eval", "--model", "smollm2", "--precision", "fp32", *GRID, "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {(sample["length"], sample["index"]): sample for sample in samples}


def test_lm_eval_runs_the_exported_group_as_harness_eval_does(numprec_run, tmp_path):
    """``python -m lm_eval`` as a user runs it (forked from the tests' warm interpreter where it can be: the same
    command, its imports of torch and transformers done)."""
    tasks = tmp_path / "tasks"
    written = run_module("harness.tasks", "--harness", "lm-eval", "--out", str(tasks), *GRID)
    assert written.returncode == 0 and not written.stderr, written.stderr
    weights = resolve_weights(get_model("smollm2"))
    ran = run_module(
        "lm_eval", "--model", "hf", "--model_args", f"pretrained={weights},dtype=float32",
        "--apply_chat_template", "--include_path", str(tasks), "--tasks", "numprec", "--device", "cpu",
        "--batch_size", "3", "--log_samples", "--output_path", str(tmp_path / "lm-eval"), timeout=600,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    compared = 0
    for path in (tmp_path / "lm-eval").rglob("samples_numprec_add_n*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            ours = numprec_run[(record["doc"]["length"], record["doc"]["index"])]
            assert record["arguments"]["gen_args_0"]["arg_0"] == ours["prompt"], "the prompt, byte for byte"
            # numprec keeps the whole token holding the newline (it may be "\n\n"); the first line is the answer's
            assert FIRST_LINE.kept(record["resps"][0][0]) == FIRST_LINE.kept(ours["output"]), "the output's line"
            assert record["exact_match"] == float(ours["correct"])
            compared += 1
    assert compared == len(numprec_run) == 6
    results = json.loads(next((tmp_path / "lm-eval").rglob("results_*.json")).read_text())
    correct = sum(sample["correct"] for sample in numprec_run.values())
    assert results["groups"]["numprec"]["exact_match,none"] == pytest.approx(correct / 6)


def test_inspect_runs_the_registered_task_as_harness_eval_does(numprec_run, tmp_path):
    """inspect's own command, as a user types it from the checkout: the task found by its registered name."""
    import subprocess

    from inspect_ai.log import list_eval_logs, read_eval_log

    weights = resolve_weights(get_model("smollm2"))
    inspect = Path(sys.executable).parent / "inspect"
    compared = 0
    for length in (2,):  # one cell: each run loads the model again
        command = [
            str(inspect), "eval", "numprec/arithmetic", "-T", "task=add", "-T", f"length={length}", "-T", "samples=3",
            "--model", "hf/local", "-M", f"model_path={weights}", "-M", "device=cpu", "-M", "do_sample=false",
            "--log-dir", str(tmp_path / f"logs{length}"), "--display", "none",
        ]  # fmt: skip
        ran = subprocess.run(command, capture_output=True, text=True, env=command_env(), cwd=ROOT, timeout=600)
        assert ran.returncode == 0, ran.stderr[-3000:]
        [info] = list_eval_logs(str(tmp_path / f"logs{length}"))
        log = read_eval_log(info)
        assert log.status == "success", log.error
        for sample in log.samples:
            ours = numprec_run[(length, sample.id)]
            assert sample.input == ours["prompt"].split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
            assert FIRST_LINE.kept(sample.output.completion) == FIRST_LINE.kept(ours["output"]), sample.output
            assert (next(iter(sample.scores.values())).value == "C") == ours["correct"]
            compared += 1
    assert compared == 3
