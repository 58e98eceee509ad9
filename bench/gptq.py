"""GPTQ at NVFP4 at the size users quantize (bench.run's ``gptq`` section; issue 79's GPU step).

harness.quantize makes ``nvfp4+gptq`` checkpoints with llm-compressor's GPTQModifier; its time was measured on the
135M model on a CPU (docs/frontier.md). This times the same command on a random model of Llama-3.1-8B's architecture
on the GPU (the tiny architecture on a CPU, as the suite runs it): the model is built in bfloat16 and saved, then
``python -m harness.quantize --model-path DIR --precision nvfp4+gptq`` makes its checkpoint, calibrated on the
project's calibration stream, in its own process (the quantization environment: .venv-quantize here, the staged
site on the device). The 8B architecture is cut to its first BLOCKS decoder blocks so that the step fits one call of
the lent GPU: every block has the 8B's shapes, so the time a block is what the whole model's 32 take each, and the
projection to 32 blocks is written as a projection. The weights are random, so what is measured is the time of
each phase and that the checkpoint holds every layer at NVFP4.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import log
from bench.decode import ARCHITECTURES, header, random_llama
from harness.core.paths import quantize_command

BLOCKS = {"llama-3.1-8b": 8}  # of 32: one call of the lent GPU (gpu.md); other architectures whole
PRECISION = "nvfp4+gptq"


def bench_gptq(architecture: str, device: str, samples: int) -> dict:
    blocks = BLOCKS.get(architecture, ARCHITECTURES[architecture]["num_hidden_layers"])
    command = quantize_command()
    if command is None:
        return {**header(architecture, device, "bf16", samples), "skipped": "llm-compressor is not installed here"}
    with tempfile.TemporaryDirectory() as work:
        source, out = Path(work) / "random", Path(work) / "nvfp4-gptq"
        started = time.perf_counter()
        saved = save_random(architecture, blocks, source)
        built = time.perf_counter() - started
        started = time.perf_counter()
        made = quantized(command, source, out, samples)
        wall = time.perf_counter() - started
        config = json.loads((out / "config.json").read_text())["quantization_config"]
    total = ARCHITECTURES[architecture]["num_hidden_layers"]
    results = {
        **header(architecture, device, "bf16", samples),
        "precision": PRECISION,
        "blocks": blocks,
        "blocks_of_model": total,
        "layers": saved,
        "calibration_samples": made["calibration_samples"],
        "calibration_device": made.get("device", "unknown"),
        "format": config.get("format"),
        "build_s": built,
        "gptq_s": made["seconds"],  # llm-compressor's oneshot: calibration and GPTQ, as the checkpoint records it
        "command_s": wall,  # the whole command: loading, oneshot, compressing and saving
        "block_s": made["seconds"] / blocks,
        "projected_model_s": made["seconds"] / blocks * total,
        "versions": made.get("versions", {}),
    }
    log(
        f"gptq {architecture} ({blocks} of {total} blocks) on {results['calibration_device']}: oneshot "
        f"{made['seconds']:.1f} s ({results['block_s']:.1f} s a block), the command {wall:.1f} s"
    )
    return results


def quantized(command: tuple[list[str], dict[str, str]], source: Path, out: Path, samples: int) -> dict:
    """``python -m harness.quantize --precision nvfp4+gptq`` of the model at ``source`` into ``out``, run as
    ``command`` (harness/core/paths.py's quantize_command) says; the checkpoint's numprec_quantize.json."""
    python, env = command
    argv = ["--model", "smollm2", "--model-path", str(source), "--precision", PRECISION]
    argv += ["--samples", str(samples), "--out", str(out)]
    done = subprocess.run([*python, "-m", "harness.quantize", *argv], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"harness.quantize failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads((out / "numprec_quantize.json").read_text())


def save_random(architecture: str, blocks: int, where: Path) -> int:
    """A random bfloat16 model of ``architecture``, its first ``blocks`` decoder blocks, saved with the default
    model's tokenizer into ``where``; its linear layers (those harness.quantize rounds) counted."""
    import torch

    model, tokenizer = random_llama(architecture, "cpu", "bf16", blocks)
    model.save_pretrained(where)
    tokenizer.save_pretrained(where)
    return sum(isinstance(module, torch.nn.Linear) for module in model.model.layers.modules())


def gptq_markdown(result: dict) -> list[str]:
    title = f"## GPTQ at NVFP4: random {result['architecture']} on {result['device']} ({result['device_name']})"
    if "skipped" in result:
        return [title, "", f"Skipped: {result['skipped']}.", ""]
    cut = result["blocks"] < result["blocks_of_model"]
    whole = f"{result['projected_model_s']:.0f}" + (" (projected)" if cut else "")
    return [
        title,
        "",
        f"`python -m harness.quantize --precision {result['precision']}` on {result['blocks']} of "
        f"{result['blocks_of_model']} blocks ({result['layers']} layers), {result['calibration_samples']} calibration "
        f"problems, calibrated on {result['calibration_device']}"
        + ("; the whole model's time is projected from the blocks'." if cut else "."),
        "",
        "| build s | oneshot s | command s | s a block | whole model oneshot s | format |",
        "|---:|---:|---:|---:|---:|---|",
        f"| {result['build_s']:.1f} | {result['gptq_s']:.1f} | {result['command_s']:.1f} | {result['block_s']:.2f} "
        f"| {whole} | {result['format']} |",
        "",
    ]
