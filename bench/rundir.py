"""The rundir section of bench.run: what it costs to write a run directory at the paper grid's shape.

    python -m bench.run --only rundir --out reports/bench

The paper's grid (eval_configs/paper.yaml: add 1-13, iter_add:3 1-9, iter_add:5 1-5, mul 1-5, 1,000 samples a
cell) for several series, evaluated through the scripted backend (harness/backends/scripted.py: no model, so what is
measured is the harness's own work: problems, prompts, scoring, the run directory and its reports). The bytes the
process hands to write() (/proc/self/io's wchar) against the size of the files it leaves, and the wall time. A run
directory that rewrote its samples after every cell would write on the order of cells / 2 times its final size.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.common import log


def written_bytes() -> int:
    """Bytes this process has passed to write() so far (/proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def bench_rundir(series: int = 5, samples: int = 1000) -> dict:
    from harness.backends.scripted import ScriptedBackend
    from harness.eval import evaluate
    from harness.runs.config import build_spec, load_config

    name, config = load_config("paper")
    precisions = ["fp32", "bf16", "fp16", "int8", "nf4", "gguf-q8_0", "gguf-q4_0", "gguf-q4_1"][:series]

    def answer(message: str, rows: int) -> str:  # a plausible one-line answer (a wrong one: long texts are real)
        expression = message.rstrip().splitlines()[-1]
        return f"{expression} = {sum(len(part) for part in expression.split())}\n"

    def load(variant, spec):
        return ScriptedBackend(variant.precision, answer, spec.batch_size)

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run"
        spec = build_spec(
            name, config, models=["smollm2"], precisions=precisions, samples=samples, out=out, decoding="greedy"
        )
        cells = len(precisions) * sum(len(lengths) for _, lengths in spec.grid)
        log(f"rundir: {len(precisions)} series x {cells // len(precisions)} cells x {samples} samples")
        before, started = written_bytes(), time.perf_counter()
        evaluate(spec, "python -m bench.run --only rundir (scripted)", load=load)
        seconds, written = time.perf_counter() - started, written_bytes() - before
        final = sum(path.stat().st_size for path in out.iterdir() if path.is_file())
        samples_size = (out / "samples.jsonl").stat().st_size
    log(f"rundir: wrote {written / 1e6:.1f} MB for {final / 1e6:.1f} MB of files in {seconds:.1f} s")
    return {
        "series": len(precisions),
        "cells": cells,
        "samples_per_cell": samples,
        "bytes_written": written,
        "final_bytes": final,
        "samples_bytes": samples_size,
        "written_over_final": written / final,
        "seconds": seconds,
    }


def rundir_markdown(result: dict) -> list[str]:
    return [
        f"## Writing a run directory ({result['series']} series x {result['cells'] // result['series']} cells x "
        f"{result['samples_per_cell']:,} samples, the paper grid's shape, scripted backend)",
        "",
        f"- **{result['bytes_written'] / 1e6:,.1f} MB written for {result['final_bytes'] / 1e6:,.1f} MB of files: "
        f"{result['written_over_final']:.2f}x** (samples.jsonl {result['samples_bytes'] / 1e6:,.1f} MB), in "
        f"{result['seconds']:.1f} s",
        "",
    ]
