"""A finished cell checked against its evidence: files on disk are evidence, not truth.

A cell of a run directory is a results row (its counts and interval) and its n samples (each the problem, the prompt,
the model's output, the answer read from it and the verdict). On resume (harness.eval) and re-scoring
(harness.rescore) every finished cell is checked, nothing taken on trust:

- its samples are n valid records, indices 0 .. n-1, each of its own cell (a sample moved from another cell is not);
- each is its cell's problem: the problem regenerated from the run's seed has the same expression and gold answer;
- each sample's evidence (problem, prompt, output, gold) still has the digest written with it: an output rewritten
  by hand no longer matches, and a sample whose digest was removed counts as edited (a run written before digests
  were, where no sample has one, is read as it is and given digests by the next command that opens it);
- each verdict is read again from the output by the current scorer (harness/scoring/);
- the row is recomputed from the verdicts: correct, unreadable answers and conflicts, accuracy and its Wilson
  interval.

A cell passes (``ok``), is rewritten from its samples (``rewritten``: a verdict or a row disagreed with what the
evidence says), or cannot be trusted (``untrusted``: samples missing, foreign or edited). harness.eval computes an
untrusted cell again; harness.rescore, which cannot, keeps it as it is and names it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace

from harness.questions.answers import answer_mode
from harness.questions.problems import Task, generate
from harness.runs.compare import wilson_interval
from harness.runs.results import CellResult, Sample
from harness.scoring import is_conflict, is_correct, judge

# What the digest covers: the evidence, not what is derived from it (extracted, rule, correct are read again).
EVIDENCE = ("model", "precision", "adapter", "task", "operands", "truncate", "base", "length", "index")
EVIDENCE += ("expression", "prompt", "output", "gold")


def sample_digest(sample: dict) -> str:
    """16 hex digits of SHA-256 over the sample's evidence fields, canonical JSON."""
    text = json.dumps({name: sample.get(name) for name in EVIDENCE}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# What an invocation's digest covers in run.json: what it ran and where (notes added while it ran are not).
INVOCATION = ("command", "spec", "pid", "host", "started")


def invocation_digest(entry: dict) -> str:
    """16 hex digits of SHA-256 over an invocation record's INVOCATION fields, canonical JSON: a command or setting
    edited by hand in run.json no longer matches."""
    text = json.dumps({name: entry.get(name) for name in INVOCATION}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class CellCheck:
    status: str  # ok | rewritten | untrusted
    why: str  # for rewritten and untrusted: what disagreed
    row: CellResult  # recomputed from the samples (the old row when untrusted)
    samples: list[dict]  # re-scored, in index order (as found when untrusted)
    verdicts_changed: list[str]  # one line per verdict the current scorer reads differently
    readings_changed: int  # answers read differently (a reading can change without its verdict)


def check_cell_evidence(row: CellResult, samples: dict[int, Sample], digests: bool = True) -> CellCheck:
    """``row`` against ``samples`` (index -> sample) as the module docstring says. ``digests``: the run's samples
    carry digests, so one without is an edited one (False only for runs written before digests were)."""
    found = [samples[i] for i in sorted(samples)]
    if set(samples) != set(range(row.n)):
        missing = row.n - len(set(samples) & set(range(row.n)))
        return CellCheck("untrusted", f"{missing} of its {row.n} samples missing", row, found, [], 0)
    truncate = int(row.truncate) if str(row.truncate).strip() else None
    task = Task(row.task, row.operands, truncate)
    for problem, sample in zip(generate(task, row.base, row.length, row.n, row.seed), found, strict=True):
        if (sample["expression"], sample["gold"]) != (problem.expression, problem.answer):
            why = f"sample {sample['index']} ({sample['expression']}) is not its problem {problem.expression}"
            return CellCheck("untrusted", why, row, found, [], 0)
        if ("digest" in sample or digests) and sample.get("digest") != sample_digest(sample):
            change = "its digest differs" if "digest" in sample else "its digest was removed"
            why = f"sample {sample['index']} was edited ({change})"
            return CellCheck("untrusted", why, row, found, [], 0)
    rescored, changed, readings, no_answer, conflicts = [], [], 0, 0, 0
    mode = answer_mode(row.answer_mode)
    for sample in found:
        truncated = bool(sample.get("truncated"))
        extraction = judge(sample["output"], row.base, sample["expression"], mode, truncated, task.truncate)
        verdict = is_correct(extraction.answer, sample["gold"], row.base)
        readings += extraction.answer != sample.get("extracted")
        no_answer += extraction.answer is None
        conflicts += is_conflict(extraction.rule)
        if verdict != sample["correct"]:
            changed.append(
                f"{row.model} {row.precision} {sample['expression']} = {sample['gold']}: "
                f"{'right' if sample['correct'] else 'wrong'} -> {'right' if verdict else 'wrong'} "
                f"({extraction.rule}; output {sample['output'].strip()[:60]!r})"
            )
        rescored.append({**sample, "extracted": extraction.answer, "rule": extraction.rule, "correct": verdict})
    correct = sum(sample["correct"] for sample in rescored)
    low, high = wilson_interval(correct, row.n)
    fixed = replace(
        row,
        correct=correct,
        accuracy=correct / row.n,
        ci_low=low,
        ci_high=high,
        no_answer=no_answer,
        conflicts=conflicts,
    )
    differs = [
        f"{name} {getattr(row, name)} -> {getattr(fixed, name)}"
        for name in ("correct", "no_answer", "conflicts")
        if getattr(row, name) != getattr(fixed, name)
    ] + [
        f"{name} {getattr(row, name)} -> {round(getattr(fixed, name), 4)}"
        for name in ("accuracy", "ci_low", "ci_high")
        if not _same_4dp(getattr(row, name), getattr(fixed, name))
    ]
    if changed:
        differs.insert(0, f"{len(changed)} verdict(s) read again")
    elif readings and not differs:
        differs.append(f"{readings} answer(s) read again by the current scorer, no verdict changed")
    status = "rewritten" if differs else "ok"
    return CellCheck(status, "; ".join(differs), fixed if status == "rewritten" else row, rescored, changed, readings)


def _same_4dp(stored: float, computed: float) -> bool:
    """results.csv keeps 4 decimals: a stored value equals the computed one rounded so."""
    return math.isfinite(stored) and abs(stored - computed) <= 0.5e-4 + 1e-12
