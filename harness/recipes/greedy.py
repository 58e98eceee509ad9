"""Forward selection on the whole mix: single-group scores do not add up (restoring one group alone can lower the
answer's probability that restoring it beside others raises), so the search scores each mix as a whole as it grows.

From nothing kept, each step scores every candidate (a rule of harness/recipes/rules.py, or one of the groups the
table ranks first) added to the current mix, as a whole, and takes the one that raises the answer's mean
log-probability most per extra bit, while the budget holds; it stops where no candidate that fits raises it. Each
step's mix is recorded, so the next step's candidates compute only from the first block they change
(harness/recipes/mix_scores.py).

The recipe is then the best of every mix the search scored within the budget, by exact match and then log-probability
(``best``): each rule alone is among them (the first step scores it), so on the search's problems the recipe is never
worse than the best rule at equal bits; whether that holds on fresh problems is the confirmation's question.

>>> gains = {"a": 1.0, "b": 0.1, "c": 0.2}  # b alone barely helps, b beside c helps most
>>> def scored(groups):
...     value = sum(gains[group] for group in groups) + (2.0 if {"b", "c"} <= set(groups) else 0.0)
...     return Point(exact=value / 4, logprob=value)
>>> bits = lambda groups: 4.5 + 0.5 * len(set(groups))
>>> path = grow({"a": ["a"], "b": ["b"], "c": ["c"], "rule bc": ["b", "c"]}, bits, 5.5, scored)
>>> [(step.added, step.kept) for step in path]
[('', ()), ('rule bc', ('b', 'c'))]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.recipes.search import Bits


@dataclass(frozen=True)
class Point:
    """A mix's mean exact match and answer log-probability on the search's problems."""

    exact: float
    logprob: float

    def key(self) -> tuple[float, float]:
        """What "better" means: more exact answers, then a more likely answer."""
        return (self.exact, self.logprob)


@dataclass(frozen=True)
class Step:
    """One step of the path: the candidate added (empty at the start), the groups kept after it, their bits."""

    added: str
    kept: tuple[str, ...]
    bits: float
    point: Point


def grow(
    candidates: Mapping[str, Sequence[str]],
    bits: Bits,
    budget: float,
    scored: Callable[[Sequence[str]], Point],
    base: Callable[[Sequence[str]], Point] | None = None,
    done: Callable[[Step], bool] = lambda step: False,
) -> list[Step]:
    """The path of mixes from nothing kept (module docstring). ``scored`` scores a mix (its groups), ``base`` scores
    one the next step grows from (recording it, where the scorer can); ``done`` stops the path at a step early."""
    base = base or scored
    path = [Step("", (), bits([]), base([]))]
    while not done(path[-1]):
        held, now = list(path[-1].kept), path[-1]
        best: tuple[float, str, list[str], float] | None = None
        for name, groups in candidates.items():
            trial = held + [group for group in groups if group not in held]
            cost = bits(trial)
            if len(trial) == len(held) or cost > budget + 1e-9:
                continue
            gain = scored(trial).logprob - now.point.logprob
            value = gain / max(cost - now.bits, 1e-9)
            if gain > 0 and (best is None or value > best[0]):
                best = (value, name, trial, cost)
        if best is None:
            return path
        _, name, trial, cost = best
        path.append(Step(name, tuple(trial), cost, base(trial)))
    return path


def best(mixes: Mapping[tuple[str, ...], Point], bits: Bits, budget: float) -> tuple[str, ...]:
    """Of the mixes scored (groups kept: their point), the best within ``budget`` bits (module docstring); of two
    alike, the one of fewer bits.

    >>> best({(): Point(0.1, -9), ("a",): Point(0.5, -3), ("a", "b"): Point(0.5, -2)}, lambda g: 4.5 + len(g), 5.5)
    ('a',)
    """
    within = [kept for kept in mixes if bits(kept) <= budget + 1e-9]
    return max(within, key=lambda kept: (*mixes[kept].key(), -bits(kept)))
