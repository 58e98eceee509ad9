"""A recipe confirmed on problems the search never saw: the evaluation's own problems of another seed, scored for
the recipe and for what it must beat or approach at the same cost, each paired problem by problem against the
reference precision (harness/runs/compare.py: exact McNemar, Newcombe's paired interval, Holm over the family).

The variants at the recipe's bits: llm-compressor's common heuristic (the first and last blocks, then down_proj
from the first block on, kept until the budget is spent), a random choice of groups (seeded), and the groups ranked
by the other scoring (quantize one's cost where the recipe ranked by restore one's gain, or the reverse); beside
them uniform TARGET and uniform KEEP. The exact match is teacher forcing's, which is greedy decoding's
(tests/harness/recipes/test_teacher.py).

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

from harness.recipes.search import Choice
from harness.runs.compare import Comparison, compare, holm_adjusted


def problems_needed(discordance: float, margin: float) -> int:
    """Paired problems that test a margin of ``margin`` at the measured ``discordance`` (module docstring)."""
    return math.ceil((1.645 + 0.842) ** 2 * discordance / margin**2)


def heuristic(groups: Mapping[str, Sequence[str]], blocks: int) -> list[str]:
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
    groups: Mapping[str, Sequence[str]], other: tuple[str, Mapping[str, float]], bits: Callable[[list[str]], float],
    budget: float, blocks: int, seed: int, choose_by: Callable[[Mapping[str, float]], Choice],
) -> dict[str, list[str]]:  # fmt: skip
    """The groups each comparison variant keeps at the recipe's budget; ``other`` is the other scoring's name and
    its score a group (higher: keep first)."""
    fits = lambda names: bits(names) <= budget + 1e-9  # noqa: E731
    shuffled = list(groups)
    random.Random(seed).shuffle(shuffled)
    return {
        "heuristic": within(heuristic(groups, blocks), fits),
        "random": within(shuffled, fits),
        f"{other[0]} ranking": choose_by(other[1]).kept,
    }


def paired_table(
    correct: Mapping[str, torch.Tensor], cells: Sequence[tuple[str, int]], reference: str
) -> list[Comparison]:
    """Every variant against ``reference``, per cell, Holm-adjusted over them all."""
    found = []
    for name, hits in correct.items():
        if name == reference:
            continue
        for cell in dict.fromkeys(cells):
            mask = [index for index, found_cell in enumerate(cells) if found_cell == cell]
            pairs = [(bool(correct[reference][index]), bool(hits[index])) for index in mask]
            found.append(compare(cell[0], 10, str(cell[1]), reference, name, pairs))
    return holm_adjusted(found)
