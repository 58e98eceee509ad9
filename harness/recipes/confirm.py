"""A recipe confirmed on problems the search never saw: the evaluation's own problems of another seed, scored for
the recipe and for what it must beat or approach at the same cost, each paired problem by problem against the
reference precision (harness/runs/compare.py: exact McNemar, Newcombe's paired interval, Holm over the family).

The variants at the recipe's bits: the best rule within them (harness/recipes/rules.py, best on the search's
problems), the sensitivity table's own choice by either scoring (restore one's gain, quantize one's cost: what the
recipe was before its mix was scored whole), llm-compressor's common heuristic (the first and last blocks, then
down_proj from the first block on, kept until the budget is spent) and a random choice of groups (seeded); beside
them uniform TARGET and uniform KEEP. Each is paired against the reference, and the recipe also against the best
rule and the table's choice by its ranking: the head-to-head a recommendation needs. The exact match is teacher
forcing's, which is greedy decoding's (tests/harness/recipes/test_teacher.py).

How many problems a margin needs is computed from the discordance measured here: to show a difference of at most
D with a one-sided 5% test at 80% power when the two agree on average, about (1.645 + 0.842)^2 p / D^2 paired
problems, p the share of problems on which they disagree (Connor 1987's approximation for paired proportions).

>>> problems_needed(0.05, 0.02)
774
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

import torch

from harness.recipes.bits import MixSpace
from harness.recipes.mix_search import Found
from harness.recipes.search import choose
from harness.runs.compare import Comparison, compare, holm_adjusted, paired_difference_interval


def problems_needed(discordance: float, margin: float) -> int:
    """Paired problems that test a margin of ``margin`` at the measured ``discordance`` (module docstring)."""
    return math.ceil((1.645 + 0.842) ** 2 * discordance / margin**2)


def heuristic(groups: Sequence[str], blocks: int) -> list[str]:
    """llm-compressor's common heuristic as an order: the first and last blocks' groups, then each down_proj."""
    edge = [name for name in groups if name.startswith(("block 0 ", f"block {blocks - 1} "))]
    downs = [name for name in groups if name.endswith(" down") and name not in edge]
    return edge + downs


def within(order: Sequence[str], fits: Callable[[list[str]], bool]) -> list[str]:
    """The groups of ``order`` taken in turn while the budget ``fits`` them."""
    taken: list[str] = []
    for name in order:
        if fits([*taken, name]):
            taken.append(name)
    return taken


def equal_bits_variants(
    space: MixSpace, found: Found, gains: Mapping[str, Mapping[str, float]], rank: str, budget: float, seed: int
) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """The groups each variant keeps (module docstring), uniform TARGET first and KEEP last, and the head-to-head
    pairs (baseline, the recipe); ``gains`` each ranking's table score a group, ``rank`` the recipe's ranking."""
    fits = lambda names: space.bits(names) <= budget + 1e-9  # noqa: E731
    groups = list(space.members)
    shuffled = list(groups)
    random.Random(seed).shuffle(shuffled)
    blocks = len({group.split()[1] for group in groups if group.startswith("block ")})
    recipe = f"recipe {found.bits:.2f} bits"
    rule = {f"rule: {found.best_rule[0]}": list(found.best_rule[1])} if found.best_rule else {}
    kept_by = {
        space.target: [], recipe: list(found.kept), **rule,
        **{f"{name} ranking": choose(groups, scores, space.bits, budget).kept for name, scores in gains.items()},
        "heuristic": within(heuristic(groups, blocks), fits), "random": within(shuffled, fits),
        space.keep: groups,
    }  # fmt: skip
    return kept_by, [(other, recipe) for other in (*rule, f"{rank} ranking")]


def paired_table(
    correct: Mapping[str, torch.Tensor], cells: Sequence[tuple[str, int]], reference: str,
    against: Sequence[tuple[str, str]] = (),
) -> list[Comparison]:  # fmt: skip
    """Every variant against ``reference``, per cell, and each (baseline, variant) pair of ``against``; Holm-adjusted
    within each baseline's family."""
    pairs = [(reference, name) for name in correct if name != reference] + list(against)
    found = []
    for baseline, name in pairs:
        for cell in dict.fromkeys(cells):
            mask = [index for index, found_cell in enumerate(cells) if found_cell == cell]
            hits = [(bool(correct[baseline][index]), bool(correct[name][index])) for index in mask]
            found.append(compare(cell[0], 10, str(cell[1]), baseline, name, hits))
    return holm_adjusted(found)


def margin_verdicts(table: list, margin: float, longest: int) -> list[dict]:
    """Whether the recipe stays within ``margin`` of fp32 in each cell of the longest length: held where the
    one-sided 95% paired bound (Newcombe's interval at 90%) is above -margin and the sample can test the margin at
    the discordance it shows; never called held where it cannot."""
    found = []
    for row in table:
        if not row.variant.startswith("recipe") or row.baseline != "fp32" or int(row.length) != longest:
            continue
        bound = paired_difference_interval(row.both_correct, row.only_baseline, row.only_variant, row.neither, 0.90)[0]
        discordance = (row.only_baseline + row.only_variant) / max(1, row.n)
        needed = problems_needed(discordance, margin) if discordance else 0
        verdict = "not testable" if row.n < needed else "held" if bound >= -margin else "not held"
        found.append({"cell": f"{row.task} n={row.length}", "verdict": verdict, "bound": bound, "needed": needed,
                      "n": row.n})  # fmt: skip
    return found
