"""Default to doubt: an answer a reader found is credited only where every other number in the answer part is
explained. A reader credits by recognising forms; a second answer in a form no reader knows would otherwise go unread
and the first be credited. So once an answer A is read, every numeral and number word of the text it was read from
must be one of:

- A, or A restated: in words, or (for ``mul:trunc=L``) the whole product whose last L digits A is;
- an operand of the asked question, or working of it: a number inside an equation that holds (``7 + 5 = 12``,
  ``23 * 6 = 138``), a single digit (a carry, a column's digit, a count, a list's or a step's number), a sum of some
  of the operands (``27 + 48`` on the way to ``27 + 48 + 19``), a column's sum (``3 and 9 make 12``), a place value
  of an operand, a partial product (``23 * 90 = 2070``: 90 and 2070) or a product of two digits and a carry;
- a number of a prompt example (its operands or result);
- a percentage (``100% sure``), a number glued to letters (``2nd``, ``0x84``, ``1011₂``: another base's digits are the
  readers' to judge), a base's name (``in base 10``);
- not stated: asked (its sentence ends in a question mark: ``47 + 85 = 122? Let me check``) or denied (``is not
  122``).

A number none of these explains and whose value differs from A is a conflict: the output is not credited, and the
span that caused it is said. A new form can then cost a right answer, visibly; it cannot credit a wrong one. Doubt
is applied in base 10 only: in another base, decimal restatements (``= 17₁₀``) and the base's own digits are both
numbers an output writes, and the readers' base rules judge them.

>>> from harness.scoring.question import Question
>>> asked = Question.of("123 + 389", 10)
>>> text = "The sum is 512.\\nIn words: six hundred twelve."
>>> start, end = unexplained(text, "512", asked, 10)
>>> text[start:end]
'six hundred twelve'
>>> unexplained("3 + 9 = 12, carry 1; 2 + 8 + 1 = 11; 123 + 389 = 512. Step 2 done.", "512", asked, 10) is None
True
>>> unexplained("123 + 389 = 512 (I'm 100% sure), five hundred twelve.", "512", asked, 10) is None
True
>>> unexplained("the hundreds (100 + 300 = 400), the tens (20 + 80 = 100): 512", "512", asked, 10) is None
True
"""

from __future__ import annotations

import ast
import math
import re
from functools import cache
from itertools import combinations

from harness.scoring.numerals import normal
from harness.scoring.question import Question, example_questions
from harness.scoring.values import WORDS, from_words
from harness.scoring.verdicts import Extraction, unexplained_number

# A decimal numeral standing alone: not glued to letters, a base mark or a decimal point, thousands commas allowed
# (written to open with a digit, the condition on the character before it looked behind from there: the regex engine
# then skips to the next digit instead of trying each position; the same matches, half the time)
_NUMERAL = re.compile(
    r"\d(?:(?<![\w.₀-₉]\d)\d{0,2}(?:,\d{3})+(?![\w₀-₉%]|[.,]\d)|(?<![\w.,₀-₉]\d)\d*(?![\w₀-₉%]|[.,]\d))"
)
# An equation: numerals joined by + - * × x · and brackets, two sides or more
_SIDE = r"[(\s]*\d[\d,]*[)\s]*(?:(?:[-+*×·−]|\s[xX]\s)[(\s]*\d[\d,]*[)\s]*)*"
_EQUATION = re.compile(rf"{_SIDE}(?:=\s*{_SIDE})+")
_OPERATORS = str.maketrans({"×": "*", "·": "*", "−": "-", "x": "*", "X": "*", ",": ""})
_DIGITS = re.compile(r"\d+")
_GROUPED = re.compile(r"\d,\d{3}")
_NOT_A_LETTER = "0123456789+-*=()[]{}$\\ .,:;!?\n"
_SAFE = re.compile(r"[\d+\-*() ]+")
_WORD_NUMBER = re.compile(rf"\b(?:{WORDS.pattern})\b", re.IGNORECASE)
# Before a number in its clause: a base's name ("in base 10", "base-2"), a denial ("not 122", "isn't 122")
_NOT_A_VALUE = re.compile(r"\bbase[\s-]*$|(?:\bnot|\bnever|n't)\b[^,;:.!?]*$", re.IGNORECASE)
# What every number word holds one of: a text without any has no number in words (a scan for these is quicker)
_STEMS = re.compile(
    "zero|one|two|thr|four|five|six|seven|eight|nine|ten|eleven|twel|twen|fort|fift|hundred|thousand|illion"
)  # fmt: skip  (searched in the lowered text)
_CLAUSE = re.compile(r"[,;:.!?\n]")
_SENTENCE_END = re.compile(r"[.!?\n]")


def doubted(found: Extraction, text: str, question: Question, base: int) -> Extraction:
    """``found`` (a reading of ``text``), or the conflict naming the first number of ``text`` its answer does not
    explain (both answer modes call this on the text they read)."""
    span = unexplained(text, found.answer, question, base) if found.answer is not None else None
    return found if span is None else unexplained_number(text[span[0] : span[1]])


def unexplained(text: str, answer: str, question: Question, base: int) -> tuple[int, int] | None:
    """The span of the first number in ``text`` that the answer ``answer`` to ``question`` does not explain (module
    docstring); None where every number is explained (or the base is not 10)."""
    if base != 10:
        return None
    known = _known(question)
    # every run of digits the answer, a digit or a number the question's operands, working or an example has, and no
    # run grouped by commas (whose whole may be another number than its parts)
    runs = [run for run in set(_DIGITS.findall(text)).difference(known) if len(run) > 1]
    wanted = question.value(answer)
    plain = all(run.lstrip("0") in known or run.lstrip("0") == wanted for run in runs) and not (
        "," in text and _GROUPED.search(text)
    )
    # a stem inside another word ("done", "often") is no number: the words are looked for only where a stem is
    stems = bool(text.strip(_NOT_A_LETTER)) and _STEMS.search(text.lower()) is not None
    words = stems and _WORD_NUMBER.search(text) is not None
    if plain and not words:
        return None  # explained in one scan: most outputs
    held = None  # the equations that hold: found only where a number needs them
    for start, end, value in _numbers(text, words):
        if len(value) == 1 or value == wanted or value in known or question.value(value) == wanted:
            continue
        if _not_stated(text, start, end):
            continue
        held = _holding_equations(text) if held is None else held
        if any(low <= start and end <= high for low, high in held):
            continue
        return start, end
    return None


def _not_stated(text: str, start: int, end: int) -> bool:
    """Whether the number at ``start:end`` is not stated as a value: asked (its sentence ends in a question mark),
    denied (after "not" in its clause), or a base's name."""
    clause = max((found.end() for found in _CLAUSE.finditer(text, max(0, start - 80), start)), default=0)
    if _NOT_A_VALUE.search(text, max(clause, start - 80), start):
        return True
    sentence_end = _SENTENCE_END.search(text, end)
    return sentence_end is not None and text[sentence_end.start()] == "?"


def _numbers(text: str, words: bool) -> list[tuple[int, int, str]]:
    """Every numeral and (where ``words`` may be there) run of number words of ``text``: (start, end, value as
    normalised decimal digits)."""
    found = [(m.start(), m.end(), m.group().replace(",", "").lstrip("0") or "0") for m in _NUMERAL.finditer(text)]
    if words:
        for words in _WORD_NUMBER.finditer(text):
            value = from_words(words.group(), 10)
            if value is not None:
                found.append((words.start(), words.end(), normal(value)))
    return sorted(found)


def _holding_equations(text: str) -> list[tuple[int, int]]:
    """The spans of the equations in ``text`` whose sides are all equal."""
    if "=" not in text:
        return []
    spans = []
    for equation in _EQUATION.finditer(text):
        sides = [_evaluate(side) for side in equation.group().split("=")]
        if None not in sides and len(set(sides)) == 1:
            spans.append((equation.start(), equation.end()))
    return spans


def _evaluate(side: str) -> int | None:
    """An equation side's value (integers, + - * and brackets only), or None where it is not one."""
    expression = side.translate(_OPERATORS).strip()
    while expression.startswith("(") and expression.count("(") > expression.count(")"):
        expression = expression[1:].strip()  # a bracket opened before the equation: "(100 + 300 = 400)"
    while expression.endswith(")") and expression.count(")") > expression.count("("):
        expression = expression[:-1].strip()
    if not expression or not _SAFE.fullmatch(expression) or "**" in expression or len(expression) > 200:
        return None
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError:
        return None
    return _value(tree)


def _value(node: ast.expr) -> int | None:
    """A parsed side's value: integer constants joined by +, - and *."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
        left, right = _value(node.left), _value(node.right)
        if left is None or right is None:
            return None
        return left + right if isinstance(node.op, ast.Add) else left - right if isinstance(node.op, ast.Sub) else (
            left * right)  # fmt: skip
    return None


@cache
def _known(question: Question) -> frozenset[str]:
    """The numbers any answer to ``question`` may write beside it: its operands, its working's, the examples'."""
    return frozenset(question.operands) | _working(question) | _examples()


@cache
def _working(question: Question) -> frozenset[str]:
    """The numbers working toward ``question`` may write beside its operands: sums of some of the operands (add);
    each operand's place values, and the partial products of one operand by another's place values and their
    running sums (mul)."""
    operands = [int(operand) for operand in question.ordered or question.operands]
    found = {str(value) for value in operands}
    places = {operand: _place_values(operand) for operand in operands}
    for part in places.values():
        found |= {str(value) for value in part}
    if question.operator == "+":
        for size in range(2, len(operands) + 1):
            if size <= 6:
                found |= {str(sum(chosen)) for chosen in combinations(operands, size)}
        found |= _column_sums(operands)
    elif len(operands) == 2:
        digits = [[int(digit) for digit in str(operand)] for operand in operands]
        found |= {str(one * other + carry) for one in digits[0] for other in digits[1] for carry in range(9)}
        for left, right in ((operands[0], operands[1]), (operands[1], operands[0])):
            running = 0
            for part in reversed(places[right]):
                found |= {str(left * part), str(left * (part // 10 ** (len(str(part)) - 1)))}
                running += left * part
                found.add(str(running))
    return frozenset(found)


def _column_sums(operands: list[int]) -> set[str]:
    """The column sums of adding ``operands`` by hand, with and without the carry in: 123 + 389 -> 12, 10, 11, 4, 5."""
    found, carry, place = set(), 0, 1
    while place <= max(operands):
        column = sum(operand // place % 10 for operand in operands)
        found |= {str(column), str(column + carry)}
        carry, place = (column + carry) // 10, place * 10
    return found


def _place_values(number: int) -> list[int]:
    """``number``'s nonzero place values, highest first: 2208 -> [2000, 200, 8]."""
    digits = str(number)
    return [int(digit) * 10 ** (len(digits) - 1 - at) for at, digit in enumerate(digits) if digit != "0"]


@cache
def _examples() -> frozenset[str]:
    """The prompts' examples' operands and results (base 10)."""
    found = set()
    for operator, operands in example_questions(10):
        values = [int(operand) for operand in operands]
        found |= {str(value) for value in values}
        result = sum(values) if operator == "+" else math.prod(values)
        found.add(str(result))
    return frozenset(found)
