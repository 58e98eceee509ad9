"""A recipe under a budget of bits: which groups to keep at KEEP so that the quantized layers take at most B bits a
weight, chosen from the sensitivity table.

Each group costs the extra bits its weights take at KEEP rather than at TARGET (both as the checkpoints store them,
harness/recipes/bits.py) and buys what restoring it alone bought in answer log-probability. Groups are taken in
order of gain per extra bit while the budget holds (a knapsack's greedy order); a group whose restoring alone did not
raise the answer's log-probability is never taken. The table's scores are single-group scores and groups interact,
so the mix chosen is then scored as a whole (harness.sensitivity does, on the same problems); that it holds on other
problems is a separate test.

>>> shapes = {"a": (4, 4), "b": (4, 4), "c": (4, 8)}
>>> groups = {"A": ["a"], "B": ["b"], "C": ["c"]}
>>> gains = {"A": 1.0, "B": -0.2, "C": 1.5}
>>> chosen = choose(groups, gains, {"a": 4.5, "b": 4.5, "c": 4.5}, {"a": 8.0, "b": 8.0, "c": 8.0}, shapes, 5.5)
>>> chosen.kept, round(chosen.bits, 3)
(['A'], 5.375)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Choice:
    """The groups kept, in the order taken, and the bits a weight of the quantized layers with them kept."""

    kept: list[str]
    bits: float


def _bits(layers: Sequence[str], kept: set[str], target: Mapping, keep: Mapping, shapes: Mapping) -> float:
    weights = {layer: shapes[layer][0] * shapes[layer][1] for layer in layers}
    stored = sum((keep if layer in kept else target)[layer] * weights[layer] for layer in layers)
    return stored / sum(weights.values())


def choose(
    groups: Mapping[str, Sequence[str]],
    gains: Mapping[str, float],
    target: Mapping[str, float],
    keep: Mapping[str, float],
    shapes: Mapping[str, tuple[int, int]],
    budget: float,
) -> Choice:
    """The groups to keep within ``budget`` bits a weight (see the module docstring), a budget the command has
    checked to hold the target format itself. ``groups`` maps a group to its layers; ``target``/``keep`` give each
    layer's stored bits a weight; ``shapes`` each layer's [out, in]."""
    layers = [layer for members in groups.values() for layer in members]
    kept: list[str] = []
    held: set[str] = set()
    for group in ranked(groups, gains, target, keep, shapes):
        trial = held | set(groups[group])
        if _bits(layers, trial, target, keep, shapes) <= budget + 1e-9:
            kept.append(group)
            held = trial
    return Choice(kept, _bits(layers, held, target, keep, shapes))


def ranked(
    groups: Mapping[str, Sequence[str]],
    gains: Mapping[str, float],
    target: Mapping[str, float],
    keep: Mapping[str, float],
    shapes: Mapping[str, tuple[int, int]],
) -> list[str]:
    """The groups whose restoring alone gained, by gain per extra bit, most first: the order a budget takes them in."""
    layers = [layer for members in groups.values() for layer in members]
    floor = _bits(layers, set(), target, keep, shapes)

    def extra(group: str) -> float:
        return _bits(layers, set(groups[group]), target, keep, shapes) - floor

    return sorted(
        (group for group in groups if gains.get(group, 0.0) > 0 and extra(group) > 0),
        key=lambda group: gains[group] / extra(group),
        reverse=True,
    )


def fewest(candidates: Sequence[Sequence[str]], meets: Callable[[Sequence[str]], bool]) -> int | None:
    """The index of the first candidate (ordered by bits) that ``meets`` the margin, found by bisection over the
    order (a candidate holds every group its predecessors hold; whether one meets is taken as monotone, so the
    answer is the first to meet among those asked, and each one asked is asked once); None where the last fails.

    >>> fewest([["a"], ["a", "b"], ["a", "b", "c"]], lambda kept: len(kept) >= 2)
    1
    >>> fewest([["a"], ["a", "b"]], lambda kept: False) is None
    True
    """
    if not candidates or not meets(candidates[-1]):
        return None
    low, high = 0, len(candidates) - 1  # candidates[high] meets
    while low < high:
        middle = (low + high) // 2
        if meets(candidates[middle]):
            high = middle
        else:
            low = middle + 1
    return high
