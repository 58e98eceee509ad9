"""Equations on a line: where their '=' signs stand, which state the answer (``equals``: the asked expression on the
left, or a chain from it), and partial sums that work through the asked operands in order (``steps``).

>>> from harness.scoring.question import Question
>>> question = Question.of("27 + 48 + 19", 10)
>>> partial_sums("27 + 48 = 75, 75 + 19 = 94", question, 10).answer
'94'
>>> partial_sums("27 + 48 = 75, 75 + 19 = 94, 94 + 10 = 104", question, 10) is None  # it went on past the question
True
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from harness.scoring.numerals import MARKUP, digit_chars, normal, numeral_pattern, read_numeral
from harness.scoring.question import Question, chain_link, expression_before
from harness.scoring.verdicts import Extraction

_CLAUSE_END = re.compile(r"[.,;!?](?=\s)")
_ARITHMETIC = " \t+-*/×·÷^()[],.$_`"
_DECIMAL_NUMBER = re.compile(r"\d")
_SIGN = re.compile(r"(?<![=<>!])=(?!=)")  # a '=' that is not part of '==', '<=', '>=' or '!='


@dataclass
class Statement:
    """Where a line states the answer: the phrase that says so starts at ``phrase``, the answer at ``answer``."""

    phrase: int
    answer: int
    rule: str


def clause_end(line: str, start: int, end: int) -> int:
    """Where the clause that begins at ``start`` ends (before ``end``): the first clause mark followed by a space."""
    match = _CLAUSE_END.search(line, start, end)
    return match.start() if match else end


def equals_signs(line: str) -> list[int]:
    """Indices of every '=' outside brackets that is not part of '==', '<=', '>=' or '!='.

    >>> equals_signs("7 + 8 = 15"), equals_signs("f(x=1) = 2 == 2"), equals_signs("a <= b"), equals_signs("no sign")
    ([6], [7], [], [])
    """
    if "=" not in line:
        return []  # most lines of working hold none: no walk over their characters
    if "(" not in line and "[" not in line and "{" not in line:
        return [sign.start() for sign in _SIGN.finditer(line)]  # no bracket: one regex scan, no depth to keep
    depth, found = 0, []
    for index, char in enumerate(line):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == "=" and depth == 0:
            before = line[index - 1] if index else ""
            after = line[index + 1] if index + 1 < len(line) else ""
            if not (before and before in "=<>!") and after != "=":
                found.append(index)
    return found


def equation_statements(line: str, question: Question, base: int, signs: list[int]) -> list[Statement]:
    """Every equation whose left side is the question (or a line that opens with '='), followed along its chain."""
    found, skip_until = [], -1
    for number, sign in enumerate(signs):
        if sign <= skip_until:
            continue
        opens_line = not line[:sign].strip(MARKUP)
        if not (opens_line or question.is_asked(line, sign, base)):
            continue
        left = None if opens_line else expression_before(line, sign, base, question.reach)
        last = number
        while last + 1 < len(signs) and chain_link(line[signs[last] + 1 : signs[last + 1]], base):
            last += 1
            if isinstance(read_numeral(line[signs[last - 1] + 1 : signs[last]], base), str):
                # a lone numeral along the chain states the answer too (``= 10010₂ = 17₁₀``): compared by value
                found.append(Statement(signs[last - 1], signs[last - 1] + 1, "equals"))
        skip_until = signs[last]
        found.append(Statement(sign if left is None else left[0], signs[last] + 1, "equals"))
    return found


def stray_number(text: str, base: int, restates: Callable[[str], bool] = lambda numeral: False) -> bool:
    """Whether ``text`` (what follows the answer) holds a number outside the equations it states (a check, a partial
    sum, whatever their operators): a second answer, unless it ``restates`` the answer's value in another form
    (``125 ✓ 125``, ``10001, which is 17 in base 10``). One pass: each equation's two sides are set aside, the left
    back to where its arithmetic begins, the right to the end of its clause."""
    kept, cursor = [], 0
    for sign in equals_signs(text):
        if sign < cursor:
            continue
        left = sign
        while left > cursor and (text[left - 1] in _ARITHMETIC or text[left - 1] in digit_chars(base)):
            left -= 1
        kept.append(text[cursor:left])
        cursor = clause_end(text, sign + 1, len(text))
    kept.append(text[cursor:])
    for piece in kept:
        position = 0
        while (digit := _DECIMAL_NUMBER.search(piece, position)) is not None:
            start = digit.start()
            while start > 0 and piece[start - 1].isalnum():
                start -= 1
            end = clause_end(piece, digit.end(), len(piece))
            said = read_numeral(piece[start:end], base)
            if not (isinstance(said, str) and restates(said)):
                return True
            position = end
    return False


@cache
def _step_result(base: int) -> re.Pattern[str]:
    """A step's result: a whole numeral of the base where its right side begins (markup aside), no fraction."""
    return re.compile(rf"[\s*_`$]*(?P<num>{numeral_pattern(base)})(?![0-9a-zA-Z]|\.\d)", re.IGNORECASE)


def _steps(text: str, question: Question, base: int) -> list[tuple[tuple[str, ...], str]]:
    """Every equation of ``text`` as (its two operands in order, its result), or ((), "") for one about anything
    else than two operands of the asked operator."""
    steps: list[tuple[tuple[str, ...], str]] = []
    signs = equals_signs(text)
    for number, sign in enumerate(signs):
        left = expression_before(text, sign, base, question.reach)
        if left is None or left[1] != question.operator or len(left[2]) != 2:
            steps.append(((), ""))  # an equation about something else: the chain must not step over it
            continue
        following = signs[number + 1] if number + 1 < len(signs) else len(text)
        right = _step_result(base).match(text, sign + 1, following)
        steps.append((tuple(left[2]), normal(right["num"])) if right else ((), ""))
    return steps


def partial_sums(text: str, question: Question, base: int) -> Extraction | None:
    """Equations that take the asked operands in the order asked, one at a time, each from the result before it
    (``27 + 48 = 75, 75 + 19 = 94`` for 27 + 48 + 19), read as their last result: how instruct models answer iterated
    addition when they do not answer in one step. A wrong step gives a wrong answer; a chain that skips, repeats or
    reorders an operand, or starts from another result, is none; so is one that goes on past the asked computation
    (a later step from its result: the working did not end on the question)."""
    if len(question.ordered) < 3:
        return None
    steps, ordered = _steps(text, question, base), question.ordered
    for first, (operands, total) in enumerate(steps):
        if operands != ordered[:2]:
            continue
        taken, at = 2, first
        while taken < len(ordered) and at + 1 < len(steps) and steps[at + 1][0] == (total, ordered[taken]):
            at, taken, total = at + 1, taken + 1, steps[at + 1][1]
        if taken == len(ordered):
            if any(normal(total) in operands_after for operands_after, _ in steps[at + 1 :]):
                return None
            return Extraction(total, "steps")
    return None
