"""The search for a mix, as one value: the space of mixes (harness/recipes/bits.py), the mixes scored whole on the
search's problems (mix_scores.py), and the candidates it grows a mix from (the rules of rules.py and the groups
the sensitivity table ranks first). Two questions it answers:

- ``within(budget)``: the best mix within B bits a weight: the best of every mix the forward selection
  (greedy.py) scored on its way to B, of each rule alone and of the table's own knapsack choice (search.py);
- ``fewest(meets)``: the fewest bits whose mix meets a margin, searching the path until a mix meets it.

Each answer says where its mix came from (the search's path, a rule, the table's choice) and the best rule within the
same bits, which the confirmation pairs it against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.core.errors import UserError
from harness.recipes.bits import MixSpace
from harness.recipes.greedy import Point, best, grow
from harness.recipes.mix_scores import MixScores
from harness.recipes.search import choose, ranked
from harness.recipes.teacher import Scores

CANDIDATES = 12  # the table's top groups a step tries beside the rules (each costs a scored mix a step)


@dataclass(frozen=True)
class Found:
    """A mix a search chose: its groups, bits and point on the search's problems, where it came from ("search", "rule
    NAME", "table"), and the best rule within its bits (name, groups, point; None where no rule fits)."""

    kept: tuple[str, ...]
    bits: float
    point: Point
    source: str
    best_rule: tuple[str, tuple[str, ...], Point] | None
    scored: int  # mixes scored by the search so far


class MixSearch:
    """``MixSearch(space, mixes, rules, gains, candidates)``: ``gains`` the table's score a group under the ranking
    chosen (higher: keep first), ``rules`` each rule's groups."""

    def __init__(
        self, space: MixSpace, mixes: MixScores, rules: Mapping[str, Sequence[str]], gains: Mapping[str, float],
        candidates: int = CANDIDATES,
    ) -> None:  # fmt: skip
        self.space, self.mixes, self.gains = space, mixes, gains
        # a rule is a candidate where it keeps a layer the target quantizes (lm_head may be left out by the target)
        self.rules = {name: tuple(kept) for name, kept in rules.items() if space.layers_of(kept)}
        top = ranked(list(space.members), gains, space.bits)[:candidates]
        self.candidates: dict[str, Sequence[str]] = {**self.rules, **{group: (group,) for group in top}}
        self.points: dict[tuple[str, ...], Point] = {}

    def scores(self, kept: Sequence[str]) -> Scores:
        """The per-problem scores of the mix keeping ``kept`` (groups)."""
        return self.mixes.of(self.space.layers_of(kept))

    def point(self, kept: Sequence[str]) -> Point:
        """The mix's point, kept among those the search has scored."""
        key = tuple(sorted(kept))
        if key not in self.points:
            found = self.scores(kept)
            self.points[key] = Point(found.exact.double().mean().item(), found.logprob.mean().item())
        return self.points[key]

    def _base(self, kept: Sequence[str]) -> Point:
        """A mix the next step grows from: recorded (the one before it forgotten), then scored as any other."""
        for recorded in list(self.mixes.bases):
            self.mixes.forget(recorded)
        self.mixes.base(self.space.layers_of(kept))
        return self.point(kept)

    def within(self, budget: float) -> Found:
        """The best mix within ``budget`` bits (module docstring)."""
        grow(self.candidates, self.space.bits, budget, self.point, self._base)
        self.point(choose(list(self.space.members), self.gains, self.space.bits, budget).kept)
        kept = best(self.points, self.space.bits, budget)
        return self._found(kept)

    def fewest(self, meets: Callable[[Scores], bool], top: float) -> Found | None:
        """The fewest bits among the mixes scored that ``meets`` (a mix's per-problem scores), the path searched up to
        ``top`` bits until one does; None where none does."""
        grow(self.candidates, self.space.bits, top, self.point, self._base, lambda step: meets(self.scores(step.kept)))
        for kept in (tuple(self.space.members), *(rule for rule in self.rules.values())):
            self.point(kept)  # every group kept, and each rule, whatever the path reached
        meeting = [kept for kept in self.points if meets(self.scores(kept))]
        if not meeting:
            return None
        fewest = min(self.space.bits(kept) for kept in meeting)
        return self._found(best({kept: self.points[kept] for kept in meeting}, self.space.bits, fewest))

    def closest(self, shortfall: Callable[[Scores], float]) -> tuple[tuple[str, ...], float]:
        """The mix scored whose ``shortfall`` is least, and that shortfall (for a margin none meets)."""
        kept = min(self.points, key=lambda kept: shortfall(self.scores(kept)))
        return kept, shortfall(self.scores(kept))

    def _found(self, kept: tuple[str, ...]) -> Found:
        bits = self.space.bits(kept)
        rules = {
            tuple(sorted(groups)): name for name, groups in self.rules.items() if self.space.bits(groups) <= bits + 1e-9
        }
        for groups in rules:
            self.point(groups)
        best_rule = None
        if rules:
            groups = best({groups: self.points[groups] for groups in rules}, self.space.bits, bits)
            best_rule = (rules[groups], groups, self.points[groups])
        table = tuple(sorted(choose(list(self.space.members), self.gains, self.space.bits, bits).kept))
        source = f"rule {rules[kept]}" if kept in rules else "table" if kept == table else "search"
        ordered = tuple(group for group in self.space.members if group in kept)
        return Found(ordered, bits, self.points[kept], source, best_rule, len(self.points))


def no_mix_meets(space: MixSpace, margin: float, longest: int, samples: int, closest: tuple) -> UserError:
    """The line for a margin no mix scored meets: the closest found and how far short it falls."""
    kept, short = closest
    return UserError(
        f"no mix of {space.target} and {space.keep} keeps exact match at n={longest} within {margin} of fp32 on the "
        f"search's {samples} problems a cell: the best found ({len(kept)} groups kept, {space.bits(kept):.2f} bits) "
        f"falls {short:.3f} short; give a larger --margin or a higher --keep"
    )
