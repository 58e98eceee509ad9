"""The question: what was asked (its operator, operands and base), and whether a piece of an output is about it.

An answer belongs to the question: an equation counts only where its left side is the asked expression, its
operands in any order, bare or bracketed, and nothing else joined to it:

>>> question = Question.of("36 + 57 + 28", 10)
>>> question.is_asked("(36 + 57) + 28 = 121", 15, 10), question.is_asked("10 + (36 + 57 + 28) = 131", 20, 10)
(True, False)

The prompt's own examples (the few-shot lines of prompts/add.txt and prompts/mul.txt, written in the task's base)
are known, so that a statement about one of them is never read as the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache

from harness.questions.prompts import filled_template
from harness.scoring.numerals import ANNOTATION, MARKUP, digit_chars, normal, numeral_pattern

_DECIMAL_NUMBER = re.compile(r"\d")
# What "the answer to ..." may say in words alone and still mean the question ("this problem", "the expression",
# "the three numbers", "these"): words that name all of the asked operands, or the asked computation
IMPLICIT = re.compile(
    r"(?:\s|\b(?:the|this|that|these|those|them|all|both|of|your|my|our|given|above|following|arithmetic|asked"
    r"|expression|question|problem|calculation|task|sum|product|addition|multiplication|operation|numbers?|values"
    r"|operands|terms|integers|factors|addends|two|three|four|five|six|seven|eight|nine|ten)\b)*",
    re.IGNORECASE,
)
_SPAN_OPERATORS = "+*×·"
_FOREIGN_OPERATOR = "-−/÷^"  # an operator before a bracketed group: the group is part of another expression


def _numeral_before(text: str, end: int, low: int, digits: frozenset[str]) -> int | None:
    """Where the numeral that ends at ``end`` starts (digits of the base, thousands commas between digits), or None
    where there is none or it is glued to a word (``abc12``)."""
    first = end
    while first > low and (
        text[first - 1] in digits or (text[first - 1] == "," and first - 1 > low and text[first - 2] in digits)
    ):
        first -= 1
    if first == end or (first > 0 and text[first - 1].isalnum()):
        return None
    return first


def _operator_before(text: str, end: int, low: int, base: int) -> tuple[int, str] | None:
    """(where it starts, "+" or "*") of the operator that ends at ``end``, spaces around it skipped."""
    cursor = end
    while cursor > low and text[cursor - 1] in " \t":
        cursor -= 1
    if cursor > low and text[cursor - 1] in _SPAN_OPERATORS:
        operator = "+" if text[cursor - 1] == "+" else "*"
    elif base <= 33 and cursor - 1 > low and text[cursor - 1] in "xX" and text[cursor - 2] in " \t" and cursor < end:
        operator = "*"
    else:
        return None
    cursor -= 1
    while cursor > low and text[cursor - 1] in " \t":
        cursor -= 1
    return cursor, operator


def expression_before(text: str, end: int, base: int, reach: int) -> tuple[int, str | None, list[str]] | None:
    """The longest ``numeral (operator numeral)*`` that ends at ``end`` (trailing spaces and markup aside), read
    backwards over at most ``reach`` characters: (where it starts, its operator or None for a lone numeral, its
    operands normalised), or None. A numeral glued to a word (``abc12``) is none; ``×``, ``·`` and `` x `` are ``*``;
    an expression mixing operators is none."""
    digits, low = digit_chars(base), max(0, end - reach)
    index = end
    while index > low and text[index - 1] in MARKUP:
        index -= 1
    first = _numeral_before(text, index, low, digits)
    if first is None:
        return None
    start, operands, operators = first, [normal(text[first:index])], set()
    while True:
        operator = _operator_before(text, start, low, base)
        if operator is None:
            break
        first = _numeral_before(text, operator[0], low, digits)
        if first is None:
            break  # "**7 + 8": markdown, not a product
        operators.add(operator[1])
        operands.append(normal(text[first : operator[0]]))
        start = first
    if len(operators) > 1:
        return None
    return start, (operators.pop() if operators else None), operands[::-1]


def _bracketed_side(text: str, end: int, base: int, reach: int) -> tuple[str | None, list[str]] | None:
    """The left side that ends at ``end`` read with its brackets: ``(36 + 57) + 28`` is 36 + 57 + 28 where every
    operator is the same (addition and multiplication are associative). None where brackets do not balance, where
    an operator of another kind stands before it (``132 - (47 + 85)``), or where it holds no bracket."""
    low, index = max(0, end - reach), end
    if text.find("(", low, end) < 0:
        return None  # no bracket opens within reach: most equations (the walk below would find none)
    while index > low and text[index - 1] in MARKUP:
        index -= 1
    digits, start, depth = digit_chars(base), index, 0
    while start > low:
        char = text[start - 1]
        if char == ")":
            depth += 1
        elif char == "(":
            if depth == 0:
                break
            depth -= 1
        elif not (char in digits or char in " \t," or char in _SPAN_OPERATORS):
            break
        start -= 1
    while start < index and text[start] in " \t" + _SPAN_OPERATORS:
        start += 1
    span = text[start:index]
    if "(" not in span or depth != 0 or (start > 0 and text[start - 1].isalnum()):
        return None
    before = text[max(0, start - 8) : start].rstrip(" \t")
    if before and before[-1] in _FOREIGN_OPERATOR:
        return None
    flat = span.replace("(", " ").replace(")", " ")
    parsed = expression_before(flat, len(flat.rstrip()), base, len(flat))
    if parsed is None or flat[: parsed[0]].strip():
        return None
    return parsed[1], parsed[2]


@lru_cache(maxsize=4096)
def _question(expression: str, base: int, last_digits: int | None) -> Question | None:
    text = expression.strip()
    parsed = expression_before(text, len(text), base, len(text))
    if parsed is None or parsed[0] != 0 or parsed[1] is None:
        return None
    return Question(parsed[1], tuple(sorted(parsed[2])), len(text), tuple(parsed[2]), last_digits)


def _joined_to_another(text: str, start: int) -> bool:
    """Whether an expression that begins at ``start`` is part of a larger one: an operator of another kind or an
    opening bracket before it (``132 - 47 + 85``, ``(47 + 85`` ...)."""
    before = text[max(0, start - 8) : start].rstrip(" \t")
    return bool(before) and before[-1] in _FOREIGN_OPERATOR + "("


@dataclass(frozen=True)
class Question:
    """The asked expression: its operator (``+`` or ``*``) and its operands as normalised digit strings (sorted, and
    in the order asked), and the task's transform of its value: the last L digits, for ``mul:trunc=L``."""

    operator: str
    operands: tuple[str, ...]
    length: int  # characters of the expression as written: how far back an echo of it is looked for
    ordered: tuple[str, ...] = ()
    last_digits: int | None = None

    @classmethod
    def of(cls, expression: str, base: int, last_digits: int | None = None) -> Question | None:
        return _question(expression, base, last_digits)

    def answer(self, numeral: str) -> str:
        """What a numeral stated of the expression answers the task: itself, or its last L digits (the full
        product stated, where the task asks for the last L digits of it).

        >>> Question.of("53 * 490", 10, last_digits=2).answer("25970"), Question.of("53 * 490", 10).answer("25970")
        ('70', '25970')
        """
        return numeral[-self.last_digits :] if self.last_digits else numeral

    def value(self, numeral: str) -> str:
        """The value by which statements are compared: the answer's digits, leading zeros and case aside.

        >>> Question.of("7 * 15", 10, last_digits=2).value("105") == Question.of("7 * 15", 10).value("05")
        True
        """
        return normal(self.answer(normal(numeral)))

    @property
    def reach(self) -> int:
        """How far back from a '=' or a verb the asked expression is looked for: room for its spacing, no more."""
        return 2 * self.length + 32

    def is_asked(self, text: str, end: int, base: int) -> bool:
        """Whether the expression ending at ``end`` of ``text`` is the question, its operands in any order, bare or in
        brackets (``(7 + 8) = 15``, ``(36 + 57) + 28 = 121``): the left side of an equation, the subject of "is"."""
        side = _bracketed_side(text, end, base, self.reach)
        if side is None:
            parsed = expression_before(text, end, base, self.reach)
            if parsed is None or _joined_to_another(text, parsed[0]):
                return False
            side = parsed[1], parsed[2]
        return side[0] == self.operator and tuple(sorted(side[1])) == self.operands

    def is_named_in(self, text: str, base: int) -> bool:
        """Whether ``text`` (what a statement says it is about) names the question: the expression itself, its
        operands ("of 7 and 8"), or no number at all ("the answer to this problem")."""
        if not _DECIMAL_NUMBER.search(text):
            return IMPLICIT.fullmatch(text) is not None
        found = re.findall(rf"(?<![0-9a-z]){numeral_pattern(base)}(?![0-9a-z])", text, re.I)
        if tuple(sorted(normal(n) for n in found)) == self.operands:
            return True
        return any(self.is_asked(text, match.end(), base) for match in re.finditer(r"[0-9a-zA-Z](?![0-9a-zA-Z])", text))

    def names_an_example(self, text: str, base: int) -> bool:
        """Whether ``text`` names one of the prompt's own examples (and not the question) without its result: what
        it says is about that example. An example cited with its result (``32 + 78 = 110``) is answered there, and
        leaves what else the text states to the question."""
        examples = example_questions(base)
        lowered = text.lower()
        if not any(operands[0] in lowered for _, operands in examples):
            return False  # no example's operand is written at all
        for match in re.finditer(r"[0-9a-zA-Z](?![0-9a-zA-Z])", text):
            parsed = expression_before(text, match.end(), base, 64)
            named = (parsed[1], tuple(sorted(parsed[2]))) if parsed and parsed[1] else None
            own = named in examples and named != (self.operator, self.operands)
            if own and not _ANSWERED_HERE.match(text, match.end()):  # cited with its result: answered there
                return True
        return False


_ANSWERED_HERE = re.compile(r"[\s*_$`)]*=\s*[*_$`]*[0-9a-zA-Z]")  # an expression's "= result" after it


@cache
def example_questions(base: int) -> frozenset[tuple[str, tuple[str, ...]]]:
    """(operator, sorted operands) of every few-shot example the paper's prompts show in ``base``."""
    found = set()
    for task in ("add", "mul"):
        for line in filled_template(task, base, None).splitlines():
            left = line.partition("=")[0].strip()
            if "=" in line and (question := Question.of(left, base)) is not None:
                found.add((question.operator, question.operands))
    return frozenset(found)


_ANY_ANNOTATED = re.compile(rf"[0-9a-zA-Z]+{ANNOTATION}", re.IGNORECASE)
_SPACED_X = re.compile(r"(?<=\s)[xX](?=\s)")


@cache
def _arithmetic(base: int) -> re.Pattern[str]:
    """Numerals of the base joined by any arithmetic operators, with brackets: a link of a chain."""
    number = rf"[\s(]*(?:{numeral_pattern(base)})[\s)]*"
    return re.compile(rf"{number}(?:[-+*/×·÷^−]{number})*", re.IGNORECASE)


def chain_link(text: str, base: int) -> bool:
    """Whether ``text`` (between two '=' of a chain) is nothing but arithmetic and markup: numerals of the base (or,
    as a step of a conversion, a numeral annotated with its base: ``17₁₀``), any operators, balanced brackets."""
    core = _SPACED_X.sub("*", _ANY_ANNOTATED.sub("0", text.strip(MARKUP + ".,")))
    if not core or core.count("(") != core.count(")"):
        return False
    return _arithmetic(base).fullmatch(core) is not None


@cache
def own_base_annotation(base: int) -> re.Pattern[str]:
    """A base annotation of the task's own base after a numeral: ``_2``, ``_{2}``, ``_(2)``, ``₂``."""
    written = str(base)
    subscript = written.translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))
    return re.compile(rf"(?<=[0-9a-zA-Z])(?:_\{{{written}\}}|_\({written}\)|_{written}(?![0-9])|{subscript}(?![₀-₉]))")
