"""Emulated formats against bf16 on the quick grid (bench.run's ``emulation`` section; issue 54's speed goal).

Each precision of the embedded arithmetic model is evaluated on the quick grid (eval_configs/quick.yaml: 7 cells of
40 problems) by ``harness.eval`` in a process of its own, as a user runs one command a precision: the time counts
from the evaluation's start to its reports (loading, the first compile of the process, generation), not the imports
every command pays alike. Passes are interleaved (bf16, nvfp4, ..., bf16, nvfp4, ...) so that a machine's drift
lands on every precision; each figure is the median of ``--repeats`` passes and each ratio is taken to bf16's
median. Every pass of a precision must give the same outputs as its first: the speed is the same computation's.

    python -m bench.emulation PRECISION OUT     # one pass: prints {"seconds": ...} on stdout
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench.common import log, median
from harness.core.cli import ArgParser, run
from harness.models import get_model, get_precision
from harness.models.weights import plan_weights

PRECISIONS = ("bf16", "nvfp4", "mxfp4", "bf16+kv-fp8")
MODEL = "smollm2-arith"
GOALS = {"nvfp4": 1.5, "mxfp4": 1.5, "bf16+kv-fp8": 1.1}  # issue 54: at most this many times bf16's time


def bench_emulation(repeats: int, work: Path, precisions: tuple[str, ...] = PRECISIONS) -> dict:
    model = get_model(MODEL)
    planned = [plan_weights(model, get_precision(model, precision)) for precision in precisions]  # every check first
    for weights in planned:  # a checkpoint not made yet is made now (harness.quantize, its progress shown), untimed
        weights.ready()
    seconds: dict[str, list[float]] = {precision: [] for precision in precisions}
    outputs: dict[str, list[str]] = {}
    for repeat in range(repeats):
        for precision in precisions:
            out = work / f"{precision}-{repeat}"
            command = [sys.executable, "-m", "bench.emulation", precision, str(out)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"harness.eval at {precision} failed: {done.stderr[-1500:]}")
            seconds[precision].append(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])
            answers = [json.loads(line)["output"] for line in (out / "samples.jsonl").read_text().splitlines()]
            outputs.setdefault(precision, answers)
            if answers != outputs[precision]:
                raise RuntimeError(f"{precision}'s pass {repeat + 1} answered otherwise than its first")
            log(f"emulation: {precision} pass {repeat + 1}: {seconds[precision][-1]:.1f} s")
    base = median(seconds["bf16"])
    rows = {
        precision: {
            "seconds": median(values),
            "passes": values,
            "over_bf16": median(values) / base,
            "goal": GOALS.get(precision),
            "problems": len(outputs[precision]),
        }
        for precision, values in seconds.items()
    }
    return {"grid": "quick", "model": MODEL, "repeats": repeats, "precisions": rows}


def emulation_markdown(result: dict) -> list[str]:
    lines = [
        f"## Emulated formats against bf16: {result['model']} on the {result['grid']} grid, a process a precision, "
        f"median of {result['repeats']}",
        "",
        "| precision | seconds | over bf16 | goal | passes |",
        "|---|---:|---:|---:|---|",
    ]
    for precision, row in result["precisions"].items():
        goal = f"at most {row['goal']}x" if row["goal"] else ""
        passes = ", ".join(f"{value:.1f}" for value in row["passes"])
        lines.append(f"| {precision} | {row['seconds']:.1f} | {row['over_bf16']:.2f}x | {goal} | {passes} |")
    return [*lines, ""]


def one_pass(precision: str, out: str) -> float:
    """One evaluation of the quick grid at ``precision``, timed from its start (the imports done)."""
    from harness.eval import main as evaluate

    started = time.perf_counter()
    try:
        run(evaluate, ["--config", "quick", "--model", MODEL, "--precision", precision, "--out", out])
    except SystemExit as status:
        if status.code not in (0, None):
            raise
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """One pass, as bench_emulation starts it: the time on stdout as JSON, after harness.eval's own output."""
    parser = ArgParser(prog="python -m bench.emulation", description="one timed evaluation of the quick grid")
    parser.add_argument("precision", help="a precision of smollm2-arith (bf16, nvfp4, ...)")
    parser.add_argument("out", help="the run directory harness.eval writes")
    args = parser.parse_args(argv)
    print(json.dumps({"seconds": one_pass(args.precision, args.out)}))
    return 0


if __name__ == "__main__":
    # what every command imports on its way (torch, transformers, the plots), before the clock starts
    import matplotlib.pyplot  # noqa: F401
    import scipy.stats  # noqa: F401

    import harness.backends.hf  # noqa: F401
    import harness.eval  # noqa: F401
    import harness.reports.summary  # noqa: F401

    run(main)
