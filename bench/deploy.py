"""An NVFP4+GPTQ checkpoint on vLLM (bench.run's ``deploy`` section; issue 79's GPU step).

harness.frontier recommends NVFP4+GPTQ points, and says for each that vLLM's CPU build has no NVFP4 kernel. This is
the check that the recommendation runs where it is meant to: a random model of the default model's architecture (its
first 2 blocks: what is checked is the loading, not the answers) made ``nvfp4+gptq`` by harness.quantize, then
evaluated by ``harness.eval --backend vllm --model-path``, which checks each layer's loaded scheme against what the
checkpoint declares (harness/backends/vllm.py) and writes it into the row's kernel column. Where vLLM cannot run it
(no vLLM here, or its CPU build), the command's one line is the figure.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import log
from bench.gptq import PRECISION, quantized, save_random
from harness.core.paths import quantize_command

ARCHITECTURE, BLOCKS = "smollm2-135m", 2


def bench_deploy(device: str, problems: int) -> dict:
    command = quantize_command()
    found: dict = {"architecture": ARCHITECTURE, "blocks": BLOCKS, "device": device, "precision": PRECISION}
    if command is None:
        return {**found, "skipped": "llm-compressor is not installed here"}
    with tempfile.TemporaryDirectory() as work:
        source, checkpoint, run = Path(work) / "random", Path(work) / "nvfp4-gptq", Path(work) / "run"
        save_random(ARCHITECTURE, BLOCKS, source)
        quantized(command, source, checkpoint, 8)
        grid = ["--tasks", "add", "--lengths", "1", "--samples", str(problems)]
        argv = ["--model", "smollm2", "--model-path", str(checkpoint), "--backend", "vllm", *grid, "--out", str(run)]
        done = subprocess.run([sys.executable, "-m", "harness.eval", *argv], capture_output=True, text=True)
        said = (done.stderr.strip().splitlines() or [""])[-1]
        rows = []
        if done.returncode == 0:
            with open(run / "results.csv", newline="") as handle:
                rows = list(csv.DictReader(handle))
    kernel = rows[0]["kernel"] if rows else None
    found |= {
        "rc": done.returncode,
        "said": said if done.returncode else None,
        "kernel": kernel,
        "loaded_as_declared": kernel is not None and "loaded as declared" in kernel,
        "exact_match": float(rows[0]["accuracy"]) if rows and rows[0].get("accuracy") else None,
    }
    log(f"deploy nvfp4+gptq on vLLM ({device}): rc {done.returncode}; {kernel or said}")
    return found


def deploy_markdown(result: dict) -> list[str]:
    title = f"## NVFP4+GPTQ on vLLM ({result['device']})"
    if "skipped" in result:
        return [title, "", f"Skipped: {result['skipped']}.", ""]
    what = result["kernel"] if result["rc"] == 0 else f"refused (exit {result['rc']}): {result['said']}"
    return [
        title,
        "",
        f"A random {result['architecture']} ({result['blocks']} blocks) made {result['precision']} by harness.quantize,"
        " evaluated by `harness.eval --backend vllm --model-path`:",
        "",
        f"- {what}",
        "",
    ]
