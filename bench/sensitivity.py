"""The sensitivity table at the size users quantize (bench.run's ``sensitivity`` section; issue 54's GPU step).

harness.sensitivity scores every layer group of a model two ways (restore one, quantize one) with one teacher-forced
pass over the search's problems per configuration (harness/recipes/table.py). Its speed was measured on the 135M
model on a CPU; this times the same table, computed by the same code, on a random model of Llama-3.1-8B's
architecture on the GPU (the tiny architecture on a CPU, as the suite runs it): 32 blocks x 4 groups, 2 x 128 + 2
configurations. KEEP is the model in bfloat16; TARGET is the same weights rounded to fp8-dynamic by FP8_DYNAMIC's
data-free recipe (harness/backends/fp8_linear.py: FP8 tensor cores on an H100 or H200), the one format this bench
can build in memory for a model no checkpoint holds; the output head stays in bfloat16 at both, as that recipe
keeps it, so it is no group. The weights are random, so the table's values say nothing of arithmetic: what is
measured is the time of each phase and that the table is whole.
"""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path

from bench.common import log
from bench.decode import header, random_llama


def bench_sensitivity(architecture: str, device: str, threads: int, problems: int = 64) -> dict:
    import torch

    from harness.backends.fp8_linear import KERNEL, fp8_matmuls, round_to_fp8
    from harness.backends.hf import HFBackend
    from harness.models import get_model, get_precision
    from harness.questions.problems import HELD_OUT_COUNT, Task, heldout_problems
    from harness.recipes.groups import groups_of
    from harness.recipes.mixer import Mixer
    from harness.recipes.table import fill_table, jobs, read_table
    from harness.recipes.teacher import teacher_batch
    from scratch.training import synchronize

    torch.set_num_threads(threads)
    started = time.perf_counter()
    kept_model, tokenizer = random_llama(architecture, device, "bf16")
    target_model = copy.deepcopy(kept_model)  # the same weights, then rounded: two precisions of one model
    rounded = round_to_fp8(target_model)
    smollm2 = get_model("smollm2")
    kept = HFBackend.from_model(kept_model, tokenizer, get_precision(smollm2, "bf16"), batch_size=problems)
    target = HFBackend.from_model(target_model, tokenizer, get_precision(smollm2, "fp8-dynamic"), batch_size=problems)
    mixer = Mixer(target.model, kept.model, "fp8-dynamic", "bf16")
    groups = groups_of(mixer.model, "module", lm_head=False)
    drawn, _ = heldout_problems(Task("add"), 10, 3, problems, 0, HELD_OUT_COUNT, "calibration")
    batch = teacher_batch(tokenizer, target.chat_prompt, [("add", problem) for problem in drawn])
    synchronize(device)
    built = time.perf_counter() - started

    every = jobs(groups, mixer.layers)
    configurations = len(every)
    with tempfile.TemporaryDirectory() as work:
        table = Path(work) / "table.csv"
        started = time.perf_counter()
        fill_table(mixer, every, batch, target.pad_id, table)  # a fresh table: every job
        synchronize(device)
        seconds = time.perf_counter() - started
        rows = read_table(table)
    results = {
        **header(architecture, device, "bf16", problems),
        "target": "fp8-dynamic",
        "keep": "bf16",
        "kernel": KERNEL if fp8_matmuls(target_model) else "none",
        "fp8_layers": rounded,
        "groups": len(groups),
        "configurations": configurations,
        "problems": len(batch.rows),
        "tokens_per_configuration": len(batch.prefix) + sum(len(row) for row in batch.rows),
        "build_s": built,
        "table_s": seconds,
        "configuration_s": seconds / configurations,
        "table_whole": len(rows) == configurations,  # one cell (add n=3): a row per configuration
    }
    log(
        f"sensitivity {architecture} on {device}: {configurations} configurations of {len(groups)} groups in "
        f"{seconds:.1f} s ({results['configuration_s']:.2f} s each) after {built:.1f} s building"
    )
    return results


def sensitivity_markdown(result: dict) -> list[str]:
    return [
        f"## Sensitivity table: random {result['architecture']} on {result['device']} ({result['device_name']}), "
        f"{result['problems']} problems of add n=3",
        "",
        f"{result['groups']} groups, each scored restoring it to {result['keep']} and quantizing it alone to "
        f"{result['target']} ({result['fp8_layers']} layers rounded; {result['kernel']}).",
        "",
        "| configurations | tokens each | build s | table s | s a configuration | table whole |",
        "|---:|---:|---:|---:|---:|---|",
        f"| {result['configurations']} | {result['tokens_per_configuration']:,} | {result['build_s']:.1f} "
        f"| {result['table_s']:.1f} | {result['configuration_s']:.3f} | {result['table_whole']} |",
        "",
    ]
