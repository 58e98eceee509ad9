"""The paper's fine-tuning set (§6 "Dataset for Fine-tuning"), built from the harness's own generator.

Per task: operand lengths 1-9, 60k samples (5k per length for 1-6, 10k per length for 7-9). Each sample
is the few-shot prompt as the user turn (the chat template is applied by the trainer, with the model's own
template) and ``<expression> = <answer>`` as the assistant turn, the format the prompt asks for.

Disjoint from evaluation: samples come from the cell's "finetune" stream, and every problem that
harness.eval would draw for that cell with the same seed (its first ``--eval-count`` problems) is
rejected. Where those evaluation problems already exhaust the problem space (1-digit addition has only
100 problems), disjointness is impossible; such cells keep their samples and are listed under
``overlapping_cells`` in ``meta.json``. Disjointness is per cell, as the paper's data is per length: a problem
drawn at length 2 whose operands are both below 10 ("0 + 6" from 00 and 06) is a 1-digit problem, which the
exhausted 1-digit cell trains on whole (about 1% of a length-2 cell).

    python -m finetune.data --tasks add,iter_add:3,mul --seed 0 --out data/finetune
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from harness.core.bounds import SAMPLES, SEED, Bound, unique
from harness.core.cli import ArgParser, name_list, output_dir, run
from harness.core.files import writing_out
from harness.questions.problems import (
    HELD_OUT_COUNT,
    TRAINING_LENGTHS,
    Problem,
    Task,
    check_cell_bounds,
    heldout_problems,
    parse_task,
)
from harness.questions.prompts import TEMPLATE_FOR_TASK, user_message

PAPER_COUNTS = {length: 5_000 if length <= 6 else 10_000 for length in TRAINING_LENGTHS}  # 60k per task
SCALE = Bound(above=0, high=10, why="10 x the paper's 60,000 samples per task", kind=float)


def check_task(task: Task, base: int = 10) -> Task:
    """Every length of the fine-tuning set must be a valid cell of the task (mul:trunc=L needs L <= 2n)."""
    for length in TRAINING_LENGTHS:
        check_cell_bounds(base, length, task)
    return task


def sample_counts(scale: float = 1.0, lengths: Sequence[int] | None = None) -> dict[int, int]:
    """Samples per length: the paper's counts times ``scale`` (at least 1 each), for ``lengths`` (default: the
    paper's 1-9)."""
    SCALE.check(scale, "scale")
    chosen = PAPER_COUNTS if lengths is None else {length: PAPER_COUNTS[length] for length in lengths}
    return {length: max(1, round(count * scale)) for length, count in chosen.items()}


def to_example(problem: Problem, task: Task) -> dict:
    """A conversational prompt-completion example: trl computes the loss on the completion only."""
    return {
        "prompt": [{"role": "user", "content": user_message(problem)}],
        "completion": [{"role": "assistant", "content": f"{problem.expression} = {problem.answer}"}],
        "task": task.label,
        "length": problem.length,
        "expression": problem.expression,
        "answer": problem.answer,
    }


def task_examples(
    task: Task, seed: int = 0, scale: float = 1.0, base: int = 10, eval_count: int = HELD_OUT_COUNT, lengths=None
):
    """The examples of one task (by length), plus the lengths whose evaluation problems exhaust the space."""
    examples, overlapping = [], []
    for length, count in sample_counts(scale, lengths).items():
        problems, disjoint = heldout_problems(task, base, length, count, seed, eval_count, stream="finetune")
        if not disjoint:
            overlapping.append(length)
        examples.extend(to_example(p, task) for p in problems)
    return examples, overlapping


def build(task: Task, seed: int = 0, scale: float = 1.0, base: int = 10, eval_count: int = HELD_OUT_COUNT):
    """The fine-tuning set of one task as a shuffled ``datasets.Dataset``, plus the cells that overlap eval."""
    import datasets

    examples, overlapping = task_examples(task, seed, scale, base, eval_count)
    return datasets.Dataset.from_list(examples).shuffle(seed=seed), overlapping


def build_mixture(
    tasks: Sequence[Task],
    seed: int = 0,
    scale: float = 1.0,
    block: int = 1,
    eval_count: int = HELD_OUT_COUNT,
    lengths: Sequence[int] | None = None,
):
    """The fine-tuning sets of several tasks, shuffled together in blocks of ``block`` examples of one prompt template
    (harness.questions.prompts: add and iter_add share one, mul has its own), so that a batch of ``block`` rows read in
    order shares its few-shot prefix (finetune/prefix.py computes it once). Returns the dataset and, per task, the
    lengths that overlap evaluation."""
    import random

    import datasets

    by_template: dict[str, list[dict]] = {}
    overlapping = {}
    for task in tasks:
        examples, overlapping[task.label] = task_examples(task, seed, scale, eval_count=eval_count, lengths=lengths)
        by_template.setdefault(TEMPLATE_FOR_TASK[task.name], []).extend(examples)
    rng = random.Random(seed)
    blocks = []
    for template in sorted(by_template):
        examples = by_template[template]
        rng.shuffle(examples)
        blocks += [examples[start : start + block] for start in range(0, len(examples), block)]
    # A short block (a template's last) would shift every later batch off the block boundaries: those go last.
    full, short = [b for b in blocks if len(b) == block], [b for b in blocks if len(b) < block]
    rng.shuffle(full)
    return datasets.Dataset.from_list([example for chunk in full + short for example in chunk]), overlapping


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m finetune.data", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=name_list, default=["add", "iter_add:3", "mul"])
    parser.add_argument("--seed", type=SEED.arg, default=0)
    parser.add_argument("--scale", type=SCALE.arg, default=1.0, help="fraction of the paper's 60k samples per task")
    parser.add_argument(
        "--eval-count", type=SAMPLES.arg, default=HELD_OUT_COUNT, help="evaluation problems per cell to exclude"
    )
    parser.add_argument("--out", type=output_dir, default=Path("data/finetune"))
    args = parser.parse_args(argv)
    tasks = [check_task(parse_task(label)) for label in args.tasks]
    unique([task.label for task in tasks], "--tasks")
    meta = {"seed": args.seed, "scale": args.scale, "eval_count": args.eval_count, "tasks": {}}
    for task in tasks:
        dataset, overlapping = build(task, args.seed, args.scale, eval_count=args.eval_count)
        target = args.out / task.label.replace(":", "_")
        with writing_out(target):
            dataset.save_to_disk(str(target))
        meta["tasks"][task.label] = {"path": str(target), "rows": dataset.num_rows, "overlapping_cells": overlapping}
        print(
            f"{task.label}: {dataset.num_rows} examples -> {target}"
            + (f" (lengths {overlapping} overlap eval: space exhausted)" if overlapping else "")
        )
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    run(main)
