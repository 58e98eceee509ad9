"""Finished runs made anywhere (other machines, jobs, backends) as one run: checked to have asked the same problems
with the same prompts, then concatenated, so that their series meet in one paired table (harness.report RUN RUN).

Runs that differ in what they asked (seed, tasks, lengths, base, samples, prompt, answer mode, decoding) cannot be
paired: the merge refuses them in one line saying what differs. A series' cell may come from one run only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.core.errors import UserError
from harness.runs.results import CellKey, CellResult, Sample
from harness.runs.stored import StoredRun, invocations


def settings(run: StoredRun) -> dict[str, str]:
    """What a run asked, in words, per setting that must be equal for its series to be paired with another's."""
    rows = run.rows

    def said(values) -> str:
        return ", ".join(str(value) for value in sorted(set(values), key=str)) or "none"

    return {
        "seed": said(row.seed for row in rows),
        "tasks": said(row.key.task_label for row in rows),
        "lengths": "; ".join(
            f"{task} {said(r.length for r in rows if r.key.task_label == task)}"
            for task in sorted({row.key.task_label for row in rows})
        ),
        "base": said(row.base for row in rows),
        "samples per cell": said(row.n for row in rows),
        "prompt": said(row.prompt_style for row in rows),
        "answer mode": said(row.answer_mode for row in rows),
        "decoding": said(row.decoding for row in rows),
    }


def problem_key(sample: Sample) -> tuple:
    """A problem, whichever series was asked it: the cell less its series, and the index."""
    key = CellKey.of(sample)
    return (key.task, key.operands, key.truncate, key.base, key.length, key.seed, sample["index"])


def check_same_problems(runs: Sequence[StoredRun]) -> None:
    """Every run asked the same settings, the same problems, and a model the same prompt in every run."""
    first = runs[0]
    for other in runs[1:]:
        mine, theirs = settings(first), settings(other)
        for name in mine:
            if mine[name] != theirs[name]:
                raise UserError(
                    f"{first.path} and {other.path} differ in {name} ({mine[name]} vs {theirs[name]}): only runs that "
                    "asked the same problems the same way can be merged; run the other with the first's settings"
                )
    expressions: dict[tuple, tuple[str, Path]] = {}
    prompts: dict[tuple, tuple[str, Path]] = {}
    for run in runs:
        for sample in run.samples:
            key = problem_key(sample)
            seen = expressions.setdefault(key, (sample["expression"], run.path))
            if seen[0] != sample["expression"]:
                raise UserError(
                    f"{seen[1]} and {run.path} asked different problems ({sample['task']} n={sample['length']} "
                    f"problem {sample['index']}: {seen[0]!r} vs {sample['expression']!r}): they were drawn by other "
                    "code or settings; merge runs made by the same numprec"
                )
            asked = prompts.setdefault((sample["model"], sample.get("adapter", ""), *key), (sample["prompt"], run.path))
            if asked[0] != sample["prompt"]:
                raise UserError(
                    f"{asked[1]} and {run.path} gave {sample['model']} different prompts for {sample['task']} "
                    f"n={sample['length']} problem {sample['index']}: the prompt files or chat template changed "
                    "between them; merge runs made with the same prompts"
                )


def merge(runs: Sequence[StoredRun]) -> tuple[list[CellResult], list[Sample], dict]:
    """The runs' rows and samples as one run's (in the order given: the first run's first series is the baseline of
    the paired table) and the merged record: each source with its commands and the machines that ran them."""
    if len({run.path.resolve() for run in runs}) < len(runs):
        raise UserError("a run is given twice; name each run directory once")
    check_same_problems(runs)
    owner: dict[CellKey, Path] = {}
    rows: list[CellResult] = []
    for run in runs:
        for row in run.rows:
            if row.key in owner:
                raise UserError(
                    f"{row.key.series} {row.key.task_label} n={row.length} seed {row.seed} is in both {owner[row.key]} "
                    f"and {run.path}: a series' cell may come from one run only; leave one of them out"
                )
            owner[row.key] = run.path
            rows.append(row)
    samples = [sample for run in runs for sample in run.samples]
    machines: dict = {}
    for run in runs:
        machines.update(run.record.get("machines", {}))
    record = {
        # a merged source's own sources' commands too: each as recorded, with its digest
        "merged_from": [{"path": str(run.path), "invocations": invocations(run.record)} for run in runs],
        "machines": machines,
    }
    return rows, samples, record
