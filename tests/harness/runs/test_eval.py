"""harness.eval as a user runs it: a real subprocess on the real default model."""

import json
import signal
import subprocess
import time

import matplotlib.image
import pytest

from harness.backends import widened_bf16
from harness.core.machine import cpu_bf16_instructions
from harness.runs.results import COLUMNS
from harness.scoring import RULES
from tests.console import assert_numprec_console
from tests.devices import HAS_CUDA
from tests.harness.helpers import assert_user_error, csv_rows, run_module, start_module
from tests.warm import ForkedCommand

REQUIRED = [
    "model",
    "precision",
    "weight_dtype",
    "activation_dtype",
    "task",
    "operands",
    "base",
    "length",
    "n",
    "correct",
    "accuracy",
    "ci_low",
    "ci_high",
    "seed",
]


@pytest.mark.cpu_kinds("avx2", "avx512", "avx512-bf16", "amx")
def test_run_directory_holds_every_output(tmp_path):
    out = tmp_path / "run"
    result = run_module(
        "harness.eval", "--model", "smollm2", "--precision", "fp32,bf16", "--tasks", "add,mul", "--lengths", "1",
        "--samples", "4", "--invariance-check", "2", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert_numprec_console(result)
    rows = csv_rows(out / "results.csv")
    assert list(rows[0]) == COLUMNS and set(REQUIRED) <= set(COLUMNS)
    assert [(r["precision"], r["task"], r["length"]) for r in rows] == [
        ("fp32", "add", "1"),
        ("fp32", "mul", "1"),
        ("bf16", "add", "1"),
        ("bf16", "mul", "1"),
    ]
    for row in rows:
        assert row["n"] == "4" and 0 <= int(row["correct"]) <= 4
        assert float(row["ci_low"]) <= float(row["accuracy"]) <= float(row["ci_high"])
    assert {r["weight_dtype"] for r in rows} == {"float32", "bfloat16"}
    # a CPU without bf16 instructions multiplies bf16 values by float32's GEMM (harness/backends/widened_bf16.py)
    widened = not HAS_CUDA and not cpu_bf16_instructions()
    assert {(r["precision"], r["matmul_precision"]) for r in rows} == {
        ("fp32", "ieee fp32" if not HAS_CUDA else "ieee fp32 (tf32 off)"),
        ("bf16", widened_bf16.MATMUL_PRECISION if widened else "bfloat16"),
    }
    assert {r["flip_k"] for r in rows} == {"2"}
    assert {r["flip_outputs"] for r in rows if r["precision"] == "fp32"} == {"0"}, "fp32 on CPU is batch-invariant"
    bf16 = next(r for r in rows if r["precision"] == "bf16")
    fp32 = next(r for r in rows if r["precision"] == "fp32")
    if widened:
        assert bf16["kernel"] == f"torch.Linear, {widened_bf16.WIDENED}"
    else:
        assert float(bf16["footprint_mb"]) < 0.6 * float(fp32["footprint_mb"]), "bf16 weights really are 16-bit"
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 16
    for sample in samples:
        assert {"prompt", "output", "extracted", "rule", "gold", "correct"} <= set(sample)
        assert (sample["rule"] in RULES) == (sample["extracted"] is not None)
        assert sample["prompt"].rstrip().endswith("<|im_start|>assistant")
        extracted = sample["extracted"]
        assert sample["correct"] == (extracted is not None and int(extracted) == int(sample["gold"]))
    correct = sum(s["correct"] for s in samples if s["precision"] == "fp32" and s["task"] == "add")
    assert str(correct) == rows[0]["correct"]
    summary = (out / "summary.md").read_text()
    assert "## add, base 10" in summary and "## mul, base 10" in summary
    assert "| smollm2 fp32 | smollm2 bf16 |" in summary and "GPT-4o (paper)" in summary
    assert "python -m harness.eval --model smollm2" in summary, "the summary names the command that made it"
    assert "## Paired comparisons against smollm2 fp32" in summary and "## Batch-size invariance" in summary
    comparisons = csv_rows(out / "comparisons.csv")
    assert [(c["variant"], c["task"], c["length"], c["n"]) for c in comparisons] == [
        ("smollm2 bf16", "add", "1", "4"),
        ("smollm2 bf16", "mul", "1", "4"),
    ]
    anatomy = csv_rows(out / "anatomy.csv")
    assert {a["kind"] for a in anatomy} == {"carry_chain", "digit_position"}
    assert sum(int(a["n"]) for a in anatomy if a["kind"] == "carry_chain") == 16
    assert matplotlib.image.imread(out / "error_anatomy.png").shape[0] > 300
    image = matplotlib.image.imread(out / "accuracy_vs_length.png")
    assert image.shape[0] > 200 and image.shape[1] > 400, "a panel per task"
    # Same seed, same problems, same greedy answers.
    again = tmp_path / "again"
    run_module("harness.eval", "--model", "smollm2", "--precision", "fp32", "--tasks", "add", "--lengths", "1",
               "--samples", "4", "--out", str(again))  # fmt: skip
    first = [(s["expression"], s["output"]) for s in samples if s["precision"] == "fp32" and s["task"] == "add"]
    rerun = map(json.loads, (again / "samples.jsonl").read_text().splitlines())
    second = [(s["expression"], s["output"]) for s in rerun]
    assert first == second


def start_eval_until_a_cell_is_saved(args: list[str], results, capture: bool) -> subprocess.Popen | ForkedCommand:
    """Start harness.eval in the background and return once its first cell is in results.csv."""
    output = subprocess.PIPE if capture else subprocess.DEVNULL
    process = start_module("harness.eval", *args, stdout=output, stderr=output, interruptible=True)
    deadline = time.time() + 600
    while time.time() < deadline and process.poll() is None:
        if results.exists() and len(csv_rows(results)) >= 1:
            break
        time.sleep(0.2)
    return process


def test_resume_after_kill_loses_no_finished_cell(tmp_path):
    out = tmp_path / "run"
    # batch size 4: each cell is generated on its own, so the kill lands between saved cells
    args = ["--precision", "fp32", "--tasks", "add", "--lengths", "1,2,3", "--samples", "4", "--batch-size", "4"]
    args += ["--out", str(out)]
    process = start_eval_until_a_cell_is_saved(args, out / "results.csv", capture=False)
    results = out / "results.csv"
    assert process.poll() is None, "the run should still be going when it is killed"
    process.kill()
    assert process.wait() == -signal.SIGKILL, "the kill fired"
    before = csv_rows(results)
    assert 1 <= len(before) < 3
    cells_before = {(r["task"], r["length"]) for r in before}
    samples_before = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert {(s["task"], str(s["length"])) for s in samples_before} <= cells_before

    resumed = run_module("harness.eval", *args)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(before)} of 3 cells already done" in resumed.stderr
    after = csv_rows(results)
    assert [(r["task"], r["length"]) for r in after] == [("add", "1"), ("add", "2"), ("add", "3")]
    assert after[: len(before)] == before, "finished cells are kept as they were, not recomputed"
    assert len((out / "samples.jsonl").read_text().splitlines()) == 12
    assert not list(out.glob(".*.tmp")), "no temporary file is left behind"


def test_other_settings_need_another_directory(tmp_path):
    out = tmp_path / "run"
    grid = ["--model", "smollm2", "--precision", "fp32", "--tasks", "add", "--lengths", "1"]
    first = run_module("harness.eval", *grid, "--samples", "2", "--out", str(out))
    assert first.returncode == 0, first.stderr
    result = run_module("harness.eval", *grid, "--samples", "3", "--out", str(out))
    assert_user_error(result, "samples 2 there vs 3 now")


def test_ctrl_c_keeps_finished_cells_and_exits_130(tmp_path):
    out = tmp_path / "run"
    # batch size 4: each cell is generated on its own; nine cells leave work to interrupt after the first
    args = ["--precision", "fp32", "--tasks", "add", "--lengths", "1-9", "--samples", "4", "--batch-size", "4"]
    args += ["--out", str(out)]
    results = out / "results.csv"
    process = start_eval_until_a_cell_is_saved(args, results, capture=True)
    assert process.poll() is None, "the run should still be going when it is interrupted"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted: finished work is saved")
    rows = csv_rows(results)
    assert rows and rows[0]["length"] == "1" and len(rows) < 9
    assert not list(out.glob(".*.tmp"))
