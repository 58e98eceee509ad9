"""A recipe under a budget of bits: which groups to keep at KEEP so that the quantized layers take at most B bits a
weight, chosen from the sensitivity table.

Each group costs the extra bits its weights take at KEEP rather than at TARGET (both as the checkpoints store them,
harness/recipes/bits.py) and buys what restoring it alone bought in answer log-probability. Groups are taken in
order of gain per extra bit while the budget holds (a knapsack's greedy order); a group whose restoring alone did not
raise the answer's log-probability is never taken. The table's scores are single-group scores and groups interact,
so the mix chosen is then scored as a whole (harness.sensitivity does, on the same problems); that it holds on other
problems is a separate test.

>>> sizes = {"A": 1.0, "B": 1.0, "C": 2.0}  # each group's share of the extra bits
>>> bits = lambda groups: 4.5 + sum(sizes[group] for group in groups) * 0.875
>>> chosen = choose(["A", "B", "C"], {"A": 1.0, "B": -0.2, "C": 1.5}, bits, 5.5)
>>> chosen.kept, round(chosen.bits, 3)
(['A'], 5.375)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

Bits = Callable[[Sequence[str]], float]  # a mix's bits a weight: MixSpace.bits


@dataclass(frozen=True)
class Choice:
    """The groups kept, in the order taken, and the bits a weight of the quantized layers with them kept."""

    kept: list[str]
    bits: float


def choose(groups: Sequence[str], gains: Mapping[str, float], bits: Bits, budget: float) -> Choice:
    """The groups to keep within ``budget`` bits a weight (see the module docstring), a budget the command has
    checked to hold the target format itself; ``bits`` gives a mix's bits (MixSpace.bits)."""
    kept: list[str] = []
    for group in ranked(groups, gains, bits):
        if bits([*kept, group]) <= budget + 1e-9:
            kept.append(group)
    return Choice(kept, bits(kept))


def ranked(groups: Sequence[str], gains: Mapping[str, float], bits: Bits) -> list[str]:
    """The groups whose restoring alone gained, by gain per extra bit, most first: the order a budget takes them in."""
    floor = bits([])
    extra = {group: bits([group]) - floor for group in groups}
    return sorted(
        (group for group in groups if gains.get(group, 0.0) > 0 and extra[group] > 0),
        key=lambda group: gains[group] / extra[group],
        reverse=True,
    )
