"""The train section of bench.run: scratch's real training step (scratch/pack.py's Pack) at the paper's shapes.

    python -m bench.run --only train --device cuda --out reports/bench-gpu            # the full plan: long GPU time
    python -m bench.run --only train --device cuda --quick --out /tmp/bench-gpu       # inside ten minutes

For the grid's longest sequence of each kind of task (scratch/configs/paper.yaml): fp32 and bf16 at depth 3 and
5, one run alone and a pack of the three seeds, and the other precisions packed at depth 3 (``plan``); ``--quick``
times one shape (mul base 2, n=14) per precision (fp32, tf32, bf16, bf16-amp), alone and packed, at depth 3 (on a
CPU, a smoke of the section: fp32 and bf16 packed). Each
measurement: steps/s, tokens/s, MFU against the matrix-multiply rate measured in the same run and dtype (a pack's
runs counted together), the share of a step the host spends making the batch, and the seconds of the first steps
(compiling and capturing graphs) apart from the rate. From those, the projected device-hours of the paper grid:
each cell's training FLOPs (steps x batch x sequence x FLOPs per token at its depth) at the FLOP rate measured for
its precision and packing (training steps only; evaluation every 5,000 steps is not counted).

On a GPU the shapes are the paper's (batch 512, compile and CUDA graphs as scratch.train uses them on CUDA). On
a CPU the section still runs, at batch 4 and depth 3 only, so that it ends in minutes; its projection is then
the CPU's, extrapolated far from what it measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bench.common import log
from harness.core.faults import fault_point

PAPER_GRID = Path(__file__).resolve().parent.parent / "scratch" / "configs" / "paper.yaml"
SHAPES = {  # the longest sequence of each kind of task in the paper grid
    "iter_add of 3, base 2, n=11": {"op": "add", "operands": 3, "base": 2, "length": 11},
    "mul, base 2, n=14": {"op": "mul", "base": 2, "length": 14},
    "add, base 10, n=64": {"op": "add", "base": 10, "length": 64},
}
PACKED = 3  # the seeds of a cell


QUICK_SHAPE = "mul, base 2, n=14"  # a middle length of the grid's sequences (59 tokens)


def bench_train(
    repeats: int, threads: int, device_name: str, quick: bool = False, save: Callable[[dict], None] | None = None
) -> dict:
    """Every pack of the plan timed; ``save`` is handed what is measured so far after each pack (a time limit that
    cuts the step then loses only the pack in progress)."""
    import torch

    from scratch.config import RunConfig
    from scratch.data import POOL_ROWS, POOL_STEPS
    from scratch.numerics import resolve_device, set_matmul_precision
    from scratch.sweep import load_sweep
    from scratch.training import WARM_STEPS, measure_matmul_flops

    device = resolve_device(device_name)
    torch.set_num_threads(threads)
    on_gpu = device.type == "cuda"
    batch = 512 if on_gpu else 4
    # a timed window of one data pool's steps holds exactly one refill (batches are made a pool at a time)
    steps, warm_up = max(1, min(POOL_STEPS, POOL_ROWS // batch)), WARM_STEPS if on_gpu else 1
    measurements = plan(on_gpu, quick)
    shapes = {QUICK_SHAPE: SHAPES[QUICK_SHAPE]} if quick else SHAPES
    gemm = {}
    for precision in ("fp32", "tf32", "bf16"):
        if precision in {p.removesuffix("-amp") for p, _, _ in measurements}:
            set_matmul_precision(precision, device)
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            gemm[precision] = max(measure_matmul_flops(dtype, device=device) for _ in range(repeats))
            log(f"train: {precision} matmul {gemm[precision] / 1e12:.2f} TFLOP/s")
    header = {
        "plan": "quick" if quick else "full",
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if on_gpu else "cpu",
        "gemm_flops": gemm,
        "torch": torch.__version__,
    }
    rows = []
    for precision, depth, runs in measurements:
        matmul = set_matmul_precision(precision, device)
        rate = gemm["bf16" if precision.startswith("bf16") else precision]
        for shape, task in shapes.items():
            config = RunConfig(**task, precision=precision, depth=depth, batch_size=batch, device=str(device))
            row = time_steps([replace(config, seed=seed) for seed in range(runs)], steps, warm_up, repeats, device)
            row.update(
                shape=shape,
                precision=precision,
                matmul_precision=matmul,
                depth=depth,
                batch_size=batch,
                runs_packed=runs,
                seq_len=config.task().seq_len,
                mfu=row["tokens_per_s"] * row["flops_per_token"] / rate,
            )
            rows.append(row)
            if save is not None:
                save({**header, "rows": rows, "partial": True})
            fault_point(f"train-pack-{len(rows)}")
            log(
                f"train {precision} d{depth} {shape} x{runs}: {row['steps_per_s']:.1f} steps/s, "
                f"MFU {row['mfu']:.1%}, data {row['data_share']:.1%} of a step, first steps {row['warm_up_s']:.1f} s"
                + (f" ({row['fell_back']})" if row["fell_back"] else "")
            )
    grid = load_sweep(PAPER_GRID)
    projection = project(rows, grid)
    return {**header, "rows": rows, "projection": projection}


def plan(on_gpu: bool, quick: bool = False) -> list[tuple[str, int, int]]:
    """(precision, depth, runs packed) to time on each shape: the grid's precisions at its depths, alone and
    packed, and the other precisions once, packed; ``quick``: every precision at depth 3, alone and packed (on one
    shape; a CPU's quick plan is a smoke: fp32 and bf16, packed). Each compiles once on a GPU, so the lists are kept
    short; a CPU times depth 3 only (and no tf32)."""
    if quick:  # on a CPU a smoke of the section: fp32 and bf16, packed
        if not on_gpu:
            return [(precision, 3, PACKED) for precision in ("fp32", "bf16")]
        return [(precision, 3, runs) for precision in ("fp32", "tf32", "bf16", "bf16-amp") for runs in (1, PACKED)]
    depths = (3, 5) if on_gpu else (3,)
    grid = [(precision, depth, runs) for precision in ("fp32", "bf16") for depth in depths for runs in (1, PACKED)]
    others = ("tf32", "bf16-amp") if on_gpu else ("bf16-amp",)
    return grid + [(precision, 3, PACKED) for precision in others]


def time_steps(configs: list, steps: int, warm_up: int, repeats: int, device) -> dict:
    """Median over ``repeats`` passes of ``steps`` training steps (one data pool's: each pass makes one pool of
    batches, as training does every so many steps), after ``warm_up`` steps (which compile and capture graphs on a
    GPU), timed apart."""
    from scratch.data import Problems
    from scratch.pack import Pack
    from scratch.training import pack_batch, synchronize

    said: list[str] = []
    pack = Pack(configs, device, say=said.append)
    problems = [Problems(c.task(), c.seed, 1, device) for c in configs]
    batch = configs[0].batch_size

    def one_step() -> float:
        started = time.perf_counter()
        tokens, mask = pack_batch(problems, batch)
        made = time.perf_counter() - started
        pack.step(tokens, mask, 1e-3)
        return made

    synchronize(device)
    started = time.perf_counter()
    for _ in range(warm_up):
        one_step()
    synchronize(device)
    warm = time.perf_counter() - started
    passes = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        data = sum(one_step() for _ in range(steps))
        synchronize(device)
        passes.append((time.perf_counter() - started, data))
    seconds, data = sorted(passes)[len(passes) // 2]
    tokens = len(configs) * batch * configs[0].task().seq_len * steps
    return {
        "steps_per_s": steps / seconds,
        "tokens_per_s": tokens / seconds,
        "data_share": data / seconds,
        "warm_up_s": warm,
        "compiled": pack.compiled,
        "attention": pack.attention,
        "attention_kernel": pack.attention_kernel(),
        "fell_back": "; ".join(said),
        "flops_per_token": pack.models[0].flops_per_token(configs[0].task().seq_len),
    }


def project(rows: list[dict], grid) -> dict:
    """Device-hours of the paper grid's training steps, alone and packed: each cell's FLOPs (steps x batch x
    sequence x FLOPs per token of its depth and sequence) at the FLOP rate measured for its precision and packing
    (all measured shapes and depths together: their FLOPs over their seconds)."""
    from scratch.sweep import cells

    rates: dict[tuple[str, int], list[float]] = {}
    for row in rows:
        rates.setdefault((row["precision"], row["runs_packed"]), []).append(
            row["tokens_per_s"] * row["flops_per_token"]
        )
    hours = {}
    for runs in sorted({row["runs_packed"] for row in rows}):
        total, missing = 0.0, set()
        for cell in cells(grid):
            measured = rates.get((cell.precision, runs))
            if not measured:
                missing.add(cell.precision)
                continue
            rate = len(measured) / sum(1 / r for r in measured)  # the harmonic mean: seconds add up, not rates
            seq_len = cell.task().seq_len
            total += cell.steps * cell.batch_size * seq_len * cell_flops_per_token(cell, seq_len) / rate
        hours[f"runs_packed={runs}"] = {"hours": total / 3600, "not_measured": sorted(missing)}
    return {"cells": len(cells(grid)), "grid": str(PAPER_GRID.name), "hours": hours}


def cell_flops_per_token(cell, seq_len: int) -> float:
    """A cell's training FLOPs per token (scratch/model.py's estimate), its model built on the meta device."""
    import torch

    from scratch.model import GPT, GPTConfig

    with torch.device("meta"):
        model = GPT(GPTConfig(cell.task().vocab_size, seq_len, cell.depth, cell.n_head, cell.n_embd))
    return model.flops_per_token(seq_len)


def train_markdown(result: dict) -> list[str]:
    if "rows" not in result:  # written by an older bench
        return []
    gemm = ", ".join(f"{name} {rate / 1e12:.2f} TFLOP/s" for name, rate in result["gemm_flops"].items())
    lines = [
        f"## scratch training at the paper's shapes on {result['device']} ({result['device_name']})",
        "",
        f"Matrix-multiply rate measured in the same run: {gemm}. MFU counts a pack's runs together.",
        "",
        "| precision | matmul | depth | shape | batch | runs packed | steps/s | tokens/s | MFU | data share "
        "| first steps (s) | ran |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['precision']} | {r['matmul_precision']} | {r['depth']} | {r['shape']} | {r['batch_size']} | "
            f"{r['runs_packed']} | {r['steps_per_s']:.2f} | {r['tokens_per_s']:,.0f} | {r['mfu']:.1%} | "
            f"{r['data_share']:.1%} | {r.get('warm_up_s', 0):.1f} | {ran(r)} |"
        )
    projection = result.get("projection")
    if projection is None:  # cut short: the packs measured before the step's time ran out
        return [*lines, "", "(cut short: the packs above were measured before the step's time ran out)", ""]
    lines += ["", f"Projected training time of {projection['grid']} ({projection['cells']} cells) on this device:", ""]
    for label, entry in projection["hours"].items():
        missing = f" (not measured, left out: {', '.join(entry['not_measured'])})" if entry["not_measured"] else ""
        lines.append(f"- {label}: {entry['hours']:,.1f} device-hours{missing}")
    return [*lines, ""]


def ran(row: dict) -> str:
    """Compiled or eager, the attention kernels, and any fallback, in words."""
    if "compiled" not in row:  # written by an older bench
        return ""
    kernel = f" ({row['attention_kernel']} ran)" if "attention_kernel" in row else ""
    said = f"{'compiled' if row['compiled'] else 'eager'}, attention {row['attention']}{kernel}"
    return f"{said} ({row['fell_back']})" if row["fell_back"] else said
