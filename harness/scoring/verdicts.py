"""What a reading ends in: an answer and the rule that read it, or a refusal that says why there is none.

The rules are the readers' names (harness/scoring/readers.py). A refusal is a member of ``Refusal``; its value is
the text samples.jsonl records as the sample's ``rule`` (kept as earlier runs recorded it, so a rescore changes a
verdict only where the reading changed). ``Refusal.states`` says whether the output stated an answer there that
was refused as malformed (a sign, a hedge, a second numeral): such a statement takes part in the agreement of all
that an output states, where a line that states nothing does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

RULES = ("equals", "keyword", "boxed", "bare", "steps", "final", "json")


class Refusal(StrEnum):
    """Why an output yields no answer, as its sample records it."""

    EMPTY = "none: empty output"
    NOTHING_STATED = "none: no answer stated"
    NOT_THE_QUESTION = "none: no answer to the question stated"
    ABOUT_OTHERS = "none: no answer to the question stated (its equations are about other expressions)"
    NOTHING_AFTER_THINKING = "none: no answer after the thinking"
    TRUNCATED = "none: truncated (the budget ran out before the answer ended)"
    CONFLICT = "none: conflict (the output states differing answers)"
    NOTHING_THERE = "none: nothing where the answer should be"
    NO_NUMERAL = "none: no numeral where the answer should be"
    ECHO = "none: echo of the question"
    OPERATOR_FOLLOWS = "none: an operator follows the numeral"
    SECOND_NUMERAL = "none: a second numeral follows"
    TEXT_FOLLOWS = "none: text follows the numeral"
    SIGNED = "none: signed"
    FRACTION = "none: fractional part"
    TEXT_AFTER_BOX = "none: text follows the boxed answer"
    ASKED = "none: asked, not stated (a question mark follows)"
    NEGATED = "none: negated"
    NUMBER_AFTER = "none: a number follows the answer (a second answer?)"

    @property
    def states(self) -> bool:
        """Whether the output stated an answer here (refused as malformed), rather than stating none."""
        return self not in _STATES_NOTHING


_STATES_NOTHING = {
    Refusal.EMPTY,
    Refusal.NOTHING_STATED,
    Refusal.NOT_THE_QUESTION,
    Refusal.ABOUT_OTHERS,
    Refusal.NOTHING_AFTER_THINKING,
    Refusal.NOTHING_THERE,
    Refusal.NO_NUMERAL,
    Refusal.ASKED,
}
TRUNCATED = Refusal.TRUNCATED.value
CONFLICT = Refusal.CONFLICT.value


@dataclass(frozen=True)
class Extraction:
    """The answer a generation states (a lower-case base-p digit string, or None) and the rule that decided:
    one of RULES when an answer was found, else ``none: <why>`` (a Refusal's text, or a base annotation's)."""

    answer: str | None
    rule: str

    @property
    def states(self) -> bool:
        """Whether this reading is a statement of an answer: a numeral, or one refused as malformed."""
        if self.answer is not None:
            return True
        try:
            return Refusal(self.rule).states
        except ValueError:
            return True  # "none: written in base 10, not 16": a numeral was stated there


def refused(refusal: Refusal) -> Extraction:
    return Extraction(None, refusal.value)


UNEXPLAINED = "none: conflict (a number no reading explains: "


def unexplained_number(span: str) -> Extraction:
    """A conflict with the number no reading explains (harness/scoring/doubt.py), its words shown.

    >>> unexplained_number("six hundred twelve").rule
    "none: conflict (a number no reading explains: 'six hundred twelve')"
    """
    return Extraction(None, f"{UNEXPLAINED}{span[:60]!r})")


def differing(answers: Sequence[str]) -> Extraction:
    """The conflict of statements whose values differ, the answers stated shown in their order (three at most).

    >>> differing(["125", "124", "125"]).rule
    'none: conflict (the output states differing answers: 125, then 124)'
    """
    shown = list(dict.fromkeys(answers))[:3]
    return Extraction(None, f"{CONFLICT[:-1]}: {', then '.join(shown)})")


def is_conflict(rule: str) -> bool:
    """Whether a verdict is a conflict: statements that differ, or a number no reading explains."""
    return rule.startswith((CONFLICT[:-1], UNEXPLAINED))


def unpaired(run: str) -> Extraction:
    """A ``*`` or ``_`` run after the numeral that closes no emphasis: an operator, or text."""
    why = "an operator follows the numeral" if "*" in run else "text follows the numeral"
    return Extraction(None, f"none: {why} (unpaired {run!r}, not markdown)")


def written_in(base: str, task_base: int) -> Extraction:
    """A numeral annotated with another base than the task's."""
    return Extraction(None, f"none: written in base {base}, not {task_base}")
