"""scripts/gpu_acceptance.sh in its CPU mode: the steps the lent GPU runs (the AWQ kernel in the background beside the
decode bench, the CUDA-touching tests, the fp8 bench; the sensitivity table and the training bench in a second
call), at tiny shapes on this CPU, planned into a call's budget as on the GPU, so that a broken path, import or flag
fails here and not on the GPU's one call. What the call brings back: results.json (every step's figures and goals,
and the steps skipped with their reasons) and logs.tgz, two files of the eight a call may bring back."""

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from bench.plan import STEPS
from harness.backends.vllm import VLLM_ENV
from tests.harness.helpers import needs_quantize_env

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def acceptance(out: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "scripts/gpu_acceptance.sh", "--cpu", *args],
        cwd=ROOT, env={**os.environ, "OUT": str(out), **(env or {})}, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def test_the_acceptance_call_plans_its_budget_and_brings_back_two_files(tmp_path):
    out = tmp_path / "out"
    result = acceptance(out, "--budget", "560", "all")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "call 1: bash scripts/gpu_acceptance.sh --budget 560 awq decode tests fp8" in result.stdout
    assert "call 2: bash scripts/gpu_acceptance.sh --budget 560 sensitivity train gptq" in result.stdout
    assert "call 3: bash scripts/gpu_acceptance.sh --budget 560 deploy" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["logs.tgz", "results.json"]
    results = json.loads((out / "results.json").read_text())
    assert results["device"] == "cpu" and sorted(results["steps"]) == ["awq", "decode", "fp8", "tests"]
    assert results["skipped"] == {
        "sensitivity": "needs 150 s, 20 s left",
        "train": "needs 150 s, 20 s left",
        "gptq": "needs 240 s, 20 s left",
        "deploy": "needs 150 s, 20 s left",
    }, "the steps the budget cannot hold, and why"
    for name, step in results["steps"].items():
        assert step["rc"] == 0 and not step["timed_out"], (name, step)
        assert all(verdict["met"] is not None for verdict in step["goals"].values()), (name, step["goals"])
    figures = {name: step["figures"] for name, step in results["steps"].items()}
    assert figures["awq"]["kernel"] == "gptqmodel.TorchAtenAwqLinear" and figures["awq"]["state"] == "ready"
    assert figures["tests"]["failures"] == 0 and figures["tests"]["tests"] >= 1
    assert figures["decode"]["architecture"] == "tiny" and figures["decode"]["cell_step_s"] > 0
    assert figures["decode"]["cell_kv_bytes_per_step"] > 0
    assert figures["fp8"]["fp8_layers"] > 0 and figures["fp8"]["fp8_tokens_per_s"] > 0
    assert figures["fp8"]["kernel_equals_emulation_share"] is not None
    with tarfile.open(out / "logs.tgz") as logs:
        names = set(logs.getnames())
        steps_log = logs.extractfile("./steps.log").read().decode()
    assert {"./steps.log", "./awq.log", "./tests.log", "./decode.log", "./fp8.log"} <= names
    for name in ("awq", "decode", "tests", "fp8"):  # each step under the limit its plan gave it
        assert f"=== {name} (" in steps_log and f"limit {STEPS[name][0]}s)" in steps_log, name
    assert steps_log.index("=== awq starts in the background") < steps_log.index("=== decode ("), "beside decode"
    assert steps_log.index("=== waiting for awq") < steps_log.index("=== tests ("), "the tests wait for the build"


def test_a_small_budget_skips_what_it_cannot_hold_and_says_why(tmp_path):
    out = tmp_path / "out"
    result = acceptance(out, "--budget", "100", "awq", "tests", "fp8")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == {} and results["skipped"] == {
        "awq": "needs 240 s, the call has 100 s",
        "tests": "needs 150 s, 100 s left",
        "fp8": "needs 150 s, 100 s left",
    }
    assert "=== fp8 skipped: needs 150 s, 100 s left" in result.stdout


def test_the_train_step_killed_midway_keeps_the_packs_it_measured(tmp_path):
    """Killed (as its time limit kills it) after its first pack: results.json holds that pack's figures."""
    out = tmp_path / "out"
    result = acceptance(out, "train", env={"NUMPREC_KILL_AT": "train-pack-1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    step = json.loads((out / "results.json").read_text())["steps"]["train"]
    assert step["rc"] == 137 and step["timed_out"], "the kill fired: the step ended as a time limit ends it"
    assert step["figures"]["data_share_max"] is not None and len(step["figures"]["ran"]) == 1, step["figures"]
    with tarfile.open(out / "logs.tgz") as logs:
        bench = json.loads(logs.extractfile("./bench-train/results.json").read())
    assert bench["train"]["partial"] and len(bench["train"]["rows"]) == 1


def test_the_sensitivity_step_times_a_whole_table_of_the_random_model(tmp_path):
    """The second call's first step: the table of every group of the tiny random Llama (2 blocks x 4 groups), bf16
    against its fp8-dynamic rounding, each phase timed; the table whole, one row per configuration."""
    out = tmp_path / "out"
    result = acceptance(out, "sensitivity")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    step = json.loads((out / "results.json").read_text())["steps"]["sensitivity"]
    assert step["rc"] == 0 and not step["timed_out"], step
    figures = step["figures"]
    assert (figures["architecture"], figures["groups"], figures["configurations"]) == ("tiny", 8, 18), figures
    assert figures["problems"] == 8 and figures["table_whole"] is True and step["goals"]["table_whole"]["met"]
    assert figures["kernel"].startswith("torch._scaled_mm") and figures["table_s"] > 0 and figures["build_s"] > 0
    with tarfile.open(out / "logs.tgz") as logs:
        markdown = logs.extractfile("./bench-sensitivity/results.md").read().decode()
    assert "## Sensitivity table: random tiny on cpu" in markdown and "| 18 |" in markdown


@needs_quantize_env
def test_the_gptq_and_deploy_steps_make_and_serve_an_nvfp4_gptq_checkpoint(tmp_path):
    """Issue 79's GPU steps, in one call as the plan puts them. gptq: harness.quantize --precision nvfp4+gptq on the
    random Llama (here the tiny one, whole), in llm-compressor's environment, timed; every layer written at NVFP4.
    deploy: a random model made nvfp4+gptq, then harness.eval --backend vllm on it; on this CPU vLLM's build has no
    NVFP4 kernel (or there is no vLLM): the command's one line, exit 2, is the step's figure."""
    out = tmp_path / "out"
    result = acceptance(out, "gptq", "deploy")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = json.loads((out / "results.json").read_text())["steps"]
    step = steps["gptq"]
    assert step["rc"] == 0 and not step["timed_out"] and step["goals"]["format"]["met"], step
    figures = step["figures"]
    assert (figures["architecture"], figures["blocks"], figures["blocks_of_model"]) == ("tiny", 2, 2), figures
    assert figures["layers"] == 14 and figures["calibration_samples"] == 8 and figures["calibration_device"] == "cpu"
    assert 0 < figures["gptq_s"] < figures["command_s"], figures
    step = steps["deploy"]
    figures = step["figures"]
    assert step["rc"] == 0 and step["goals"]["rc"]["met"] and figures["precision"] == "nvfp4+gptq", step
    expected = "vLLM's CPU build has no nvfp4 kernel" if (VLLM_ENV / "bin" / "python").exists() else "needs vLLM"
    assert expected in figures["said"] and figures["kernel"] is None and not figures["loaded_as_declared"], figures
