"""Paired comparisons of variants evaluated on the same problems: problem by problem, not accuracy against accuracy.

Two variants of one run directory answer the very same problems (same seed, cell by cell), so their difference
is judged on the problems where they disagree. For each cell, and pooled over a task's lengths:

- the discordant counts: b = problems only the baseline got right, c = problems only the variant got right;
- the exact McNemar test: a two-sided binomial test of b against b + c at 1/2 (exact at any count, unlike the
  chi-square form);
- the accuracy difference (variant - baseline) with Newcombe's hybrid score interval for paired proportions
  (Newcombe 1998, method 10: Wilson intervals of both accuracies combined through the continuity-corrected phi
  correlation of the pairs), which stays inside [-1, 1] and behaves at 0 and n.

Every series (model + precision + adapter) is compared with every series evaluated before it (comparisons.csv);
summary.md shows the comparisons against the run's first series, so evaluate the reference first: bf16 before
int4, LoRA before QLoRA, as the paper compares them.

A table of such tests asks many questions at once, and some small p-values come by chance: each comparison also
carries its Holm-adjusted p-value (Holm 1979, step-down Bonferroni: valid whatever the dependence between the tests,
as between a task's cells and its pooled row). The family is every comparison against the same baseline: the rows of
one summary table, each baseline's rows of comparisons.csv. "Significant" in summary.md means Holm-adjusted p < 0.05.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TypeVar

from harness.runs.results import csv_text


def wilson_interval(correct: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (well behaved at 0 and 1, unlike the normal one)."""
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest  # here, not at import: scipy.stats costs every command 0.7 s to load

    ci = binomtest(correct, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Comparison:
    """One paired comparison: a cell (length set) or a task pooled over its lengths (length "all")."""

    task: str
    base: int
    length: str
    baseline: str
    variant: str
    n: int
    both_correct: int
    only_baseline: int  # b
    only_variant: int  # c
    neither: int
    baseline_accuracy: float
    variant_accuracy: float
    difference: float
    diff_low: float
    diff_high: float
    p_value: float
    p_holm: float = 1.0  # Holm-adjusted over the family: every comparison against the same baseline
    family: int = 1  # how many tests the family holds


SIGNIFICANCE = 0.05
COLUMNS = [f.name for f in fields(Comparison)]


def mcnemar_exact(only_baseline: int, only_variant: int) -> float:
    discordant = only_baseline + only_variant
    if discordant == 0:
        return 1.0
    from scipy.stats import binomtest  # here, not at import: scipy.stats costs every command 0.7 s to load

    return float(binomtest(min(only_baseline, only_variant), discordant, 0.5).pvalue)


def paired_difference_interval(
    both: int, only_a: int, only_b: int, neither: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Newcombe's method-10 interval for p_b - p_a from a paired 2x2 table (a = baseline, b = variant); its lower end
    at ``confidence`` 0.90 is the one-sided 95% bound a margin is tested with."""
    n = both + only_a + only_b + neither
    if n == 0:
        return -1.0, 1.0
    p_a, p_b = (both + only_a) / n, (both + only_b) / n
    low_a, high_a = wilson_interval(both + only_a, n, confidence)
    low_b, high_b = wilson_interval(both + only_b, n, confidence)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    # Newcombe's continuity-corrected phi: without it, a table with no discordant pair gives a zero-width interval.
    cross = both * neither - only_a * only_b
    if cross > 0:
        cross = max(cross - n / 2, 0.0)
    phi = cross / math.sqrt(margins) if margins else 0.0
    difference = p_b - p_a
    low = difference - math.sqrt(
        max(0.0, (p_b - low_b) ** 2 - 2 * phi * (p_b - low_b) * (high_a - p_a) + (high_a - p_a) ** 2)
    )
    high = difference + math.sqrt(
        max(0.0, (high_b - p_b) ** 2 - 2 * phi * (high_b - p_b) * (p_a - low_a) + (p_a - low_a) ** 2)
    )
    return max(-1.0, low), min(1.0, high)


def compare(task: str, base: int, length: str, baseline: str, variant: str, pairs: Sequence[tuple[bool, bool]]):
    """A Comparison from (baseline correct, variant correct) pairs of the same problems."""
    both = sum(a and b for a, b in pairs)
    only_a = sum(a and not b for a, b in pairs)
    only_b = sum(b and not a for a, b in pairs)
    neither = len(pairs) - both - only_a - only_b
    n = len(pairs)
    low, high = paired_difference_interval(both, only_a, only_b, neither)
    return Comparison(
        task=task,
        base=base,
        length=length,
        baseline=baseline,
        variant=variant,
        n=n,
        both_correct=both,
        only_baseline=only_a,
        only_variant=only_b,
        neither=neither,
        baseline_accuracy=(both + only_a) / n if n else 0.0,
        variant_accuracy=(both + only_b) / n if n else 0.0,
        difference=(only_b - only_a) / n if n else 0.0,
        diff_low=low,
        diff_high=high,
        p_value=mcnemar_exact(only_a, only_b),
    )


def paired_comparisons(samples: Sequence[dict], series_of, task_of) -> list[Comparison]:
    """Every series against every earlier one, per cell and pooled per task (a run of several seeds: each cell's
    pairs pooled over the seeds). ``series_of(sample)`` and ``task_of(sample)`` name a sample's series and task
    label. Problems are matched by cell, seed and index, and only where both series asked the same expression (a
    check, since the same seed gives the same problems)."""
    correct = answers_by_series(samples, series_of, task_of)
    names = list(correct)
    results: list[Comparison] = []
    for later, variant in enumerate(names):
        for baseline in names[:later]:
            results += pair_cells(correct[baseline], correct[variant], baseline, variant)
    return holm_adjusted(results)


Answers = dict[tuple, tuple[str, bool]]  # (task, base, length, seed, index) -> (expression, correct)


def answers_by_series(samples: Sequence[dict], series_of, task_of) -> dict[str, Answers]:
    """Each series' verdicts by problem, the expression beside each (the check that two series asked the same)."""
    correct: dict[str, Answers] = {}
    for sample in samples:
        key = (task_of(sample), int(sample["base"]), int(sample["length"]), int(sample.get("seed", 0)))
        key += (int(sample["index"]),)
        correct.setdefault(series_of(sample), {})[key] = (sample["expression"], bool(sample["correct"]))
    return correct


Compared = TypeVar("Compared")  # a comparison dataclass: baseline, p_value, p_holm, family


def holm_adjusted(comparisons: list[Compared], family=lambda comparison: comparison.baseline) -> list[Compared]:
    """Each comparison with its Holm-adjusted p-value over its family (by default the comparisons with the same
    baseline; ``family`` names another): the i-th smallest of m p-values times (m - i + 1), kept monotone, capped at
    1. Any dataclass with baseline, p_value, p_holm and family fields (the accuracy comparisons here, the length
    comparisons of harness/reports/lengths.py)."""
    families: dict[str, list[int]] = {}
    for index, comparison in enumerate(comparisons):
        families.setdefault(family(comparison), []).append(index)
    adjusted = list(comparisons)
    for members in families.values():
        order = sorted(members, key=lambda index: comparisons[index].p_value)
        running = 0.0
        for rank, index in enumerate(order):
            running = max(running, min(1.0, (len(order) - rank) * comparisons[index].p_value))
            adjusted[index] = replace(comparisons[index], p_holm=running, family=len(order))
    return adjusted


def pair_cells(reference_answers: Answers, variant_answers: Answers, baseline: str, variant: str) -> list[Comparison]:
    """Two series' verdicts paired on the problems both asked alike: per cell, then pooled per task (where the task
    has more than one cell)."""
    cells: dict[tuple, list[tuple[bool, bool]]] = {}
    for key, (expression, right) in variant_answers.items():
        reference = reference_answers.get(key)
        if reference and reference[0] == expression:
            cells.setdefault(key[:3], []).append((reference[1], right))
    results, pooled = [], {}
    for (task, base, length), pairs in cells.items():
        results.append(compare(task, base, str(length), baseline, variant, pairs))
        pooled.setdefault((task, base), []).extend(pairs)
    for (task, base), pairs in pooled.items():
        if len({key for key in cells if key[:2] == (task, base)}) > 1:
            results.append(compare(task, base, "all", baseline, variant, pairs))
    return results


def comparisons_csv(comparisons: Sequence[Comparison]) -> str:
    fractions = ("baseline_accuracy", "variant_accuracy", "difference", "diff_low", "diff_high")
    return csv_text(comparisons, COLUMNS, dict.fromkeys(fractions, 4))


def comparisons_markdown(comparisons: Sequence[Comparison]) -> list[str]:
    """The table against the run's first series (comparisons.csv holds every pair)."""
    if not comparisons:
        return []
    first = comparisons[0].baseline
    comparisons = [c for c in comparisons if c.baseline == first]
    significant = sum(c.p_holm < SIGNIFICANCE for c in comparisons)
    lines = [
        f"## Paired comparisons against {first}",
        "",
        "Same problems, problem by problem: b = right only in the baseline, c = right only in the variant; "
        "exact McNemar p, and p Holm-adjusted over this table's family (all of its "
        f"{len(comparisons)} tests: every variant against {first}, per cell and pooled per task); difference = "
        "variant - baseline with Newcombe's paired 95% interval; significant = Holm-adjusted p < 0.05 "
        f"({significant} of {len(comparisons)}). comparisons.csv holds every pair of series.",
        "",
        "| variant | task | length | baseline | variant | difference [95% CI] | b / c | p | p (Holm) | significant |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for c in comparisons:
        lines.append(
            f"| {c.variant} | {c.task} (base {c.base}) | {c.length} | {c.baseline_accuracy:.3f} | "
            f"{c.variant_accuracy:.3f} | {c.difference:+.3f} [{c.diff_low:+.3f}, {c.diff_high:+.3f}] | "
            f"{c.only_baseline} / {c.only_variant} | {c.p_value:.3g} | {c.p_holm:.3g} | "
            f"{'yes' if c.p_holm < SIGNIFICANCE else 'no'} |"
        )
    return [*lines, ""]
