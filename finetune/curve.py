"""The learning curve of a fine-tuning run: accuracy per task and length against the training examples seen.

    python -m finetune.curve --run runs/embedded --out reports/embedded-curve

finetune.train with ``train.curve: true`` keeps the adapter of every checkpoint in RUN/curve/samples-N. Each is
evaluated here by harness.eval's own pipeline (prompts, greedy decoding, scoring) on one grid, with the base model
(0 examples) first and the final adapter (RUN/adapter) last, all into one run directory: results.csv holds one
series per point, summary.md compares each with the base model problem by problem, and learning_curve.png draws
accuracy against examples seen, a panel per task, a line per length, with Wilson intervals.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.core.bounds import SAMPLES, SEED
from harness.core.cli import ArgParser, input_path, int_list, name_list, output_dir, run
from harness.core.errors import UserError
from harness.core.files import atomic_write_bytes, read_json
from harness.reports.figures import accuracy_axes, figure_png
from harness.runs.config import build_spec, load_config
from harness.runs.results import read_results

GRID = {"add": [1, 2, 3, 4, 5], "iter_add:3": [1, 2], "mul": [1, 2]}


def snapshots(run_dir: Path) -> list[tuple[int, Path]]:
    """(examples seen, adapter directory), in training order: the curve's snapshots, then the final adapter."""
    points = []
    for folder in (run_dir / "curve").glob("samples-*"):
        match = re.fullmatch(r"samples-(\d+)", folder.name)
        if match and (folder / "adapter_model.safetensors").is_file():
            points.append((int(match.group(1)), folder))
    final = run_dir / "adapter"
    summary = final / "train_summary.json"
    if summary.exists():
        recorded = read_json(summary, f"{run_dir} is not a finetune.train run whose record can be read")
        seen = recorded.get("samples")
        if not isinstance(seen, int) or isinstance(seen, bool) or seen < 0:
            raise UserError(f"{summary} says no number of training examples ('samples'); it is not finetune.train's")
        if all(seen != n for n, _ in points):
            points.append((seen, final))
    if not points:
        raise UserError(f"{run_dir} has no adapter snapshots (curve/samples-N); train with train.curve: true")
    return sorted(points)


def curve_png(rows, examples: dict[str, int]) -> bytes:
    """Accuracy against examples seen: a panel per task, a line per length, the interval as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(row.key.task_label for row in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.4 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        own = [row for row in rows if row.key.task_label == task]
        for length in sorted({row.length for row in own}):
            points = sorted((examples[row.adapter], row) for row in own if row.length == length)
            x = [n for n, _ in points]
            line = ax.plot(x, [r.accuracy for _, r in points], marker="o", markersize=3, label=f"n={length}")[0]
            low, high = [r.ci_low for _, r in points], [r.ci_high for _, r in points]
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.12, linewidth=0)
        accuracy_axes(ax, task, "training examples seen (0 = base model)")
    return figure_png(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m finetune.curve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=input_path, required=True, help="a finetune.train --out directory")
    parser.add_argument("--out", type=output_dir, required=True, help="run directory for the evaluations and plot")
    parser.add_argument("--model", default="smollm2", help="the base model the adapters were trained on")
    parser.add_argument("--tasks", type=name_list, help="tasks (default add 1-5, iter_add:3 1-2, mul 1-2)")
    parser.add_argument("--lengths", type=int_list, help="lengths for every task (default: per task, as above)")
    parser.add_argument("--samples", type=SAMPLES.arg, default=50, help="problems per cell (default 50)")
    parser.add_argument("--seed", type=SEED.arg, default=0)
    args = parser.parse_args(argv)
    from harness.eval import evaluate

    points = snapshots(args.run)
    name, config = load_config("quick")
    grid = {task: args.lengths or GRID.get(task, [1, 2]) for task in args.tasks or GRID}
    config = config.model_copy(update={"grid": grid, "models": [args.model], "precisions": None})
    examples = {"": 0}
    for seen, adapter in [(0, None), *points]:
        spec = build_spec(
            "curve",
            config,
            precisions=["fp32"],
            adapter=str(adapter) if adapter else None,
            out=args.out,
            samples=args.samples,
            seed=args.seed,
            decoding="greedy",
        )
        print(f"learning curve: {seen} examples ({adapter or 'base model'})", file=sys.stderr, flush=True)
        command = f"python -m finetune.curve --run {args.run} --out {args.out} (point: {seen} examples)"
        evaluate(spec, command)
        examples[str(adapter) if adapter else ""] = seen
    rows, _ = read_results(args.out / "results.csv")
    rows = [row for row in rows if row.adapter in examples]
    atomic_write_bytes(args.out / "learning_curve.png", curve_png(rows, examples))
    for row in sorted(rows, key=lambda r: (r.key.task_label, r.length, examples[r.adapter])):
        print(f"{row.key.task_label:>10} n={row.length}  {examples[row.adapter]:>6} examples: {row.accuracy:.3f}")
    print(f"wrote {args.out}/learning_curve.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run(main)
