"""Answer extraction and exact-match scoring, written down once.

The stop rule keeps a model's first non-blank line. From that line we take, in this order:

1. the first number after the last ``=`` (``430 + 41 = 541``; models often echo the expression,
   as the prompt's format line ``<Expression> = <Result>`` invites);
2. the number after the last "answer/result/sum/product/total/which is" (or "...:"), "equals" or
   "equal to" (``The final answer is 541.``, ``... is 3 + 1, which is 4.``);
3. the number inside ``\\boxed{...}``;
4. the line itself when it is nothing but a number (``541``, ``**541**``).

Anything else is no answer. There is deliberately no "last number in the line" fallback: a line such as
"To calculate the arithmetic expression in base 10 ..." would otherwise answer 10 and score a false hit
on 3 + 7. A comma between digit groups in base <= 10 is read as a thousands separator (``1,234``).
An answer is correct when it denotes the same integer as the gold answer.
"""

from __future__ import annotations

import re
from functools import cache

from scipy.stats import binomtest

from harness.problems import DIGITS


def answer_line(text: str) -> str:
    """The first non-blank line of a generation: all that the stop rule keeps."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


@cache
def _number_pattern(base: int) -> re.Pattern[str]:
    if base <= 10:
        digit = f"[0-{DIGITS[base - 1]}]"
        return re.compile(rf"(?<![\w.]){digit}+(?:,{digit}{{3}})*(?![\w])")
    letters = DIGITS[10:base]
    return re.compile(rf"(?<![\w.])[0-9{letters}]+(?![\w])", re.IGNORECASE)


_KEYWORD = re.compile(
    r"(?:(?:answer|result|sum|product|total|which)\s*(?:is|:)|equals|equal to)\s*[*$\\(]*\s*", re.IGNORECASE
)
_BOXED = re.compile(r"\\boxed\{([^}]*)\}")
_DECORATION = " \t*_`$.:!\"'()[]{}"


def _first_number(text: str, base: int) -> str | None:
    match = _number_pattern(base).search(text)
    return match.group(0).replace(",", "").lower() if match else None


def extract_answer(text: str, base: int = 10) -> str | None:
    """The model's answer as a base-p digit string, or None when the first line states none."""
    line = answer_line(text)
    if "=" in line:
        return _first_number(line.rsplit("=", 1)[1], base)
    keywords = list(_KEYWORD.finditer(line))
    if keywords:
        return _first_number(line[keywords[-1].end() :], base)
    boxed = _BOXED.search(line)
    if boxed:
        return _first_number(boxed.group(1), base)
    bare = line.strip(_DECORATION)
    if bare and _number_pattern(base).fullmatch(bare):
        return bare.replace(",", "").lower()
    return None


def is_correct(extracted: str | None, gold: str, base: int) -> bool:
    """Exact match by value: leading zeros and letter case do not matter."""
    if extracted is None:
        return False
    try:
        return int(extracted, base) == int(gold, base)
    except ValueError:
        return False


def wilson_interval(correct: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (well behaved at 0 and 1, unlike the normal one)."""
    if n == 0:
        return 0.0, 1.0
    ci = binomtest(correct, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)
