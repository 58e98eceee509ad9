"""The frontier's points and the paired table that decides between them.

A point is one checkpoint evaluated by harness.eval on the frontier's fresh problems (the scorer users get): fp32,
the reference; uniform KEEP; each rounding method at uniform TARGET; and, for each method and budget, the search's
recipe and the best rule within its bits (a rule the search chose itself is one point). Points are paired problem by
problem (harness/runs/compare.py: exact McNemar, Newcombe's paired interval), with Holm's adjustment over the whole
table, one family:

- every point against fp32;
- at each method and budget, the search's recipe against the best rule (the head to head a recommendation needs);
- each method against round to nearest at equal cost: uniform against uniform, a budget's recipe against RTN's;
- a method that builds on another (``quip+gptq``: rotations, then GPTQ) against that one at equal cost: what the
  step it adds is worth, against what a practitioner would run without it.

The Pareto set (no other point answers at least as well with at most as many bits, one of them strictly) is marked
per cell; the problems a cell needs are those that resolve a 5-point difference at the discordance each head-to-head
pair shows (harness/recipes/confirm.py's ``problems_needed``), asked for where a pair is not yet resolved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from harness.recipes.confirm import problems_needed
from harness.runs.compare import Answers, Comparison, holm_adjusted, pair_cells

REFERENCE = "fp32"
RESOLVE = 0.05  # the difference a frontier's sample is sized to resolve


@dataclass(frozen=True)
class FrontierPoint:
    """One point: its name, rounding method ("" for fp32 and KEEP), kind (reference, keep, uniform, search, rule),
    budget (the mixes'), and what harness.eval runs: a registry precision by name, or a recipe's checkpoint."""

    name: str
    method: str
    kind: str
    budget: float | None = None
    precision: str | None = None
    recipe: str | None = None  # the recipe file the checkpoint is made from
    detail: str = ""  # a rule's name; where the search's mix came from
    searched_bits: float | None = None  # a mix's bits as the search computed them, checked against its checkpoint

    @cached_property
    def key(self) -> str:
        """The checkpoint and evaluation directory's name: a precision's name, or a recipe's by what it quantizes
        (its text but the comments: two budgets' recipes that keep the same layers are one checkpoint).

        >>> FrontierPoint("fp32", "", "reference", precision="fp32").key
        'fp32'
        """
        if self.precision:
            return self.precision
        settings = recipe_settings(Path(self.recipe).read_text(encoding="utf-8"))
        return f"{self.name.split()[0]}-mix-{hashlib.sha256(settings.encode()).hexdigest()[:10]}"


def recipe_settings(text: str) -> str:
    """A recipe's text but its comments: what a checkpoint made from it depends on.

    >>> recipe_settings("# within 5 bits\\nstage: {}\\n") == recipe_settings("# within 6 bits\\nstage: {}")
    True
    """
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def head_to_head(points: Sequence[FrontierPoint]) -> list[tuple[str, str]]:
    """The (baseline, variant) pairs of the table beside those against fp32 (module docstring).

    >>> found = [FrontierPoint("nvfp4", "rtn", "uniform"), FrontierPoint("nvfp4+gptq", "gptq", "uniform"),
    ...          FrontierPoint("nvfp4 5bits", "rtn", "search", 5), FrontierPoint("nvfp4 5bits rule", "rtn", "rule", 5),
    ...          FrontierPoint("nvfp4+gptq 5bits", "gptq", "search", 5.0)]
    >>> head_to_head(found)
    [('nvfp4 5bits rule', 'nvfp4 5bits'), ('nvfp4', 'nvfp4+gptq'), ('nvfp4 5bits', 'nvfp4+gptq 5bits')]
    >>> head_to_head([*found[:2], FrontierPoint("nvfp4+quip+gptq", "quip+gptq", "uniform")])[-1]
    ('nvfp4+gptq', 'nvfp4+quip+gptq')
    """
    by = {(point.method, point.kind, point.budget): point.name for point in points}
    found = []
    for point in points:
        rule = by.get((point.method, "rule", point.budget))
        if point.kind == "search" and rule:
            found.append((rule, point.name))
    for point in points:
        rtn = by.get(("rtn", point.kind, point.budget))
        if point.kind in ("uniform", "search") and point.method != "rtn" and rtn:
            found.append((rtn, point.name))
    for point in points:
        extended = point.method.partition("+")[2]  # quip+gptq builds on gptq
        under = by.get((extended, point.kind, point.budget)) if extended and extended != "rtn" else None
        if point.kind in ("uniform", "search") and under:
            found.append((under, point.name))
    return found


def paired_table(answers: Mapping[str, Answers], points: Sequence[FrontierPoint]) -> list[Comparison]:
    """Every point against fp32, then the head-to-head pairs, per cell and pooled per task; Holm over the table."""
    names = [point.name for point in points if point.name in answers]
    pairs = [(REFERENCE, name) for name in names if name != REFERENCE]
    pairs += [(base, name) for base, name in head_to_head(points) if base in answers and name in answers]
    found = []
    for baseline, variant in pairs:
        found += pair_cells(answers[baseline], answers[variant], baseline, variant)
    return holm_adjusted(found, family=lambda comparison: "the table")


def pareto(points: Mapping[str, tuple[float, float]]) -> set[str]:
    """The points (name: bits, accuracy) no other point dominates.

    >>> sorted(pareto({"a": (4.5, 0.2), "b": (5.0, 0.5), "c": (5.5, 0.4), "d": (8.0, 0.8), "e": (5.0, 0.5)}))
    ['a', 'b', 'd', 'e']
    """
    return {
        name
        for name, (bits, accuracy) in points.items()
        if not any(
            other_bits <= bits and other_accuracy >= accuracy and (other_bits, other_accuracy) != (bits, accuracy)
            for other_bits, other_accuracy in points.values()
        )
    }


def sample_needed(table: Sequence[Comparison], points: Sequence[FrontierPoint]) -> list[tuple[Comparison, int]]:
    """Each head-to-head comparison of a cell (not pooled) with the paired problems a 5-point difference needs at its
    discordance."""
    pairs = set(head_to_head(points))
    return [
        (row, problems_needed((row.only_baseline + row.only_variant) / row.n, RESOLVE) if row.n else 0)
        for row in table
        if (row.baseline, row.variant) in pairs and row.length != "all"
    ]


def resolution_line(needed: Sequence[tuple[Comparison, int]], samples: int, significance: float) -> str | None:
    """What the head-to-head pairs (``needed``: each with the problems a 5-point difference needs at its discordance)
    say at ``samples`` problems a cell: more problems asked for, where a pair is not resolved and needs more; the
    pairs not resolved although the sample suffices (their differences are below 5 points); or all resolved.

    >>> from types import SimpleNamespace as Row
    >>> resolution_line([(Row(p_holm=0.2), 700), (Row(p_holm=0.001), 900)], 1000, 0.05).split(": ")[1]
    'they differ by less (their intervals above)'
    >>> resolution_line([(Row(p_holm=0.2), 1400)], 1000, 0.05).split(":")[0]
    '1 head-to-head pair(s) not resolved'
    >>> resolution_line([(Row(p_holm=0.01), 700)], 1000, 0.05)
    'every head-to-head pair is resolved (Holm p < 0.05) at 1000 problems a cell'
    """
    open_pairs = [count for row, count in needed if row.p_holm >= significance]
    most = max(open_pairs, default=0)
    if most > samples:
        return (
            f"{len(open_pairs)} head-to-head pair(s) not resolved: to resolve a {RESOLVE:.0%} difference at the "
            f"discordance seen, a cell needs about {most} problems; this frontier has {samples}: run it again "
            f"with --samples {most} into another --out"
        )
    if open_pairs:
        return (
            f"{len(open_pairs)} head-to-head pair(s) not resolved (Holm p >= {significance}), though {samples} "
            f"problems a cell resolve a {RESOLVE:.0%} difference at the discordance seen: they differ by less (their "
            "intervals above)"
        )
    if needed:
        return f"every head-to-head pair is resolved (Holm p < {significance}) at {samples} problems a cell"
    return None
