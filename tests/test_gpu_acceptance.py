"""scripts/gpu_acceptance.sh in its CPU mode: the steps the lent GPU runs (the AWQ kernel first, the CUDA-touching
tests, the decode and training benches), at tiny shapes on this CPU, so that a broken path, import or flag fails
here and not on the GPU's one call. What the call brings back: results.json (every step's figures and goals) and
logs.tgz, two files of the eight a call may bring back."""

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_acceptance_call_runs_on_the_cpu_and_brings_back_two_files(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(
        ["bash", "scripts/gpu_acceptance.sh", "--cpu", "all"],
        cwd=ROOT,
        env={**os.environ, "OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["logs.tgz", "results.json"]
    results = json.loads((out / "results.json").read_text())
    assert results["device"] == "cpu" and list(results["steps"]) == ["awq", "tests", "decode", "fp8", "train"]
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
    assert figures["train"]["data_share_max"] < 1 and any("flash" in ran for ran in figures["train"]["ran"])
    with tarfile.open(out / "logs.tgz") as logs:
        names = set(logs.getnames())
    assert {"./steps.log", "./awq.log", "./tests.log", "./decode.log", "./fp8.log", "./train.log"} <= names
