"""Answer extraction and exact-match scoring, written down once.

The stop rule keeps a model's first non-blank line. On it, the answer is looked for in one place, by the
first rule that applies:

| rule      | where the answer must stand                                   | example                         |
|-----------|---------------------------------------------------------------|---------------------------------|
| `equals`  | after the line's last ``=`` outside parentheses               | ``430 + 41 = 541``              |
| `keyword` | after the last "answer/result/sum/product/total/which is",    | ``The final answer is 541.``    |
|           | "answer:", "equals" or "equal to"                             |                                 |
| `boxed`   | inside ``\\boxed{...}``                                       | ``\\boxed{541}``                |
| `bare`    | the whole line                                                | ``541``, ``**541**``            |

What stands there must be **one whole numeral in the task's base**, alone: markdown and sentence punctuation
around it are dropped (``**541**.``), and a base annotation equal to the task's base is allowed (``1F_{16}``,
``1F₁₆``, ``1F (base 16)``, ``1F in base 16``). Refused, with the reason recorded as the rule:

- a sign or a fractional part (``-15``, ``15.5``, ``15.0``): not an integer answer;
- anything after the numeral but punctuation (``15 + 1``, ``15 or 16``, ``15 (wait, 16)``, ``15 (because
  2 + 3 = 5)``): an answer must not be hedged, continued or explained on its line;
- text before it (``not 15``, ``isn't 15``, ``a 5-digit number``): words are never read as digits, negations
  are never read as answers;
- an echo of the question (``23 * 96 = 23 * 96``), or a base annotation naming another base (``12_{10}`` in a
  base-2 task).

There is deliberately no "last number in the line" fallback: "To calculate the arithmetic expression in
base 10 ..." would answer 10 and score a false hit on 3 + 7. **Leading zeros and separators**, one policy
everywhere: leading zeros are allowed (``0042`` is 42; fixed-width answers are answers); in bases up to 10 a
comma between groups of exactly three digits is a thousands separator (``1,234``); no other separator is.
An answer is correct when it denotes the same integer as the gold answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from scipy.stats import binomtest

from harness.problems import DIGITS

RULES = ("equals", "keyword", "boxed", "bare")


@dataclass(frozen=True)
class Extraction:
    """The answer a generation states (a lower-case base-p digit string, or None) and the rule that decided:
    one of RULES when an answer was found, else ``none: <why>``."""

    answer: str | None
    rule: str


def answer_line(text: str) -> str:
    """The first non-blank line of a generation: all that the stop rule keeps."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


@cache
def _numeral(base: int) -> str:
    if base <= 10:
        digit = f"[0-{DIGITS[base - 1]}]"
        return rf"{digit}+(?:,{digit}{{3}})*"
    return rf"[0-9{DIGITS[10:base]}]+"


_SUBSCRIPT_DIGITS = str.maketrans("₀₁₂₃₄₅₆₇₈₉", "0123456789")
_ANNOTATION = (  # a base written after the numeral: _{16}, _(16), _16, ₁₆, (base 16), in base 16
    r"(?:_\{(?P<b1>\d+)\}|_\((?P<b2>\d+)\)|_(?P<b3>\d+)|(?P<b4>[₀-₉]+)"
    r"|\s*\(base[\s-]*(?P<b5>\d+)\)|\s+in\s+base\s+(?P<b6>\d+))"
)
_KEYWORD = re.compile(
    r"(?:\b(?:answer|result|sum|product|total|which)\s*(?:\bis\b|:)|\bequals\b|\bequal to\b)", re.IGNORECASE
)
_BOXED = re.compile(r"\\boxed\{([^}]*)\}")
_LEADING = " \t*_`$\"'[\\"
_TRAILING = " \t*_`$\"'.,;:!?]\\"
_OPERATOR = re.compile(r"[-+*/×÷^=<>]")


def _last_equals(line: str) -> int:
    """Index of the last '=' outside parentheses that is not part of '==', '<=', '>=' or '!='; -1 if none."""
    depth, found = 0, -1
    for index, char in enumerate(line):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == "=" and depth == 0:
            before = line[index - 1] if index else ""
            after = line[index + 1] if index + 1 < len(line) else ""
            if not (before and before in "=<>!") and after != "=":
                found = index
    return found


@cache
def _pattern(base: int) -> re.Pattern[str]:
    return re.compile(
        rf"(?P<sign>[-+−])?\s*\(?(?P<num>{_numeral(base)})\)?(?P<frac>\.\d+)?{_ANNOTATION}?", re.IGNORECASE
    )


def read_numeral(segment: str, base: int, expression: str | None = None) -> Extraction | str:
    """The one numeral ``segment`` consists of (an Extraction without its rule, as a str), or why it is none."""
    for delimiter in ("\\(", "\\)", "\\[", "\\]"):  # LaTeX math delimiters are markup
        segment = segment.replace(delimiter, " ")
    text = segment.strip().lstrip(_LEADING).rstrip(_TRAILING).strip()
    while text.endswith(")") and text.count(")") > text.count("("):  # '\\(15\\)' or a closing aside
        text = text[:-1].rstrip(_TRAILING)
    if not text:
        return Extraction(None, "none: nothing where the answer should be")
    if expression and "".join(text.split()) == "".join(expression.split()):
        return Extraction(None, "none: echo of the question")
    match = _pattern(base).match(text)
    if not match:
        return Extraction(None, "none: no numeral where the answer should be")
    if match.end() < len(text):
        rest = text[match.end() :]
        if _OPERATOR.search(rest):
            return Extraction(None, "none: an operator follows the numeral")
        if re.search(rf"(?<![a-z]){_numeral(base)}(?![a-z])", rest, re.IGNORECASE) or re.search(r"\d", rest):
            return Extraction(None, "none: a second numeral follows")
        return Extraction(None, "none: text follows the numeral")
    if match["sign"]:
        return Extraction(None, "none: signed")
    if match["frac"]:
        return Extraction(None, "none: fractional part")
    annotated = next((match[f"b{i}"] for i in range(1, 7) if match[f"b{i}"]), None)
    if annotated is not None and int(annotated.translate(_SUBSCRIPT_DIGITS)) != base:
        return Extraction(None, f"none: written in base {annotated.translate(_SUBSCRIPT_DIGITS)}, not {base}")
    return match["num"].replace(",", "").lower()


def extract(text: str, base: int = 10, expression: str | None = None) -> Extraction:
    """The answer the first line states, and the rule that found it (or why there is none). ``expression``,
    the question, lets an echo of it be named as such."""
    line = answer_line(text)
    equals = _last_equals(line)
    keywords = list(_KEYWORD.finditer(line))
    boxed = _BOXED.search(line)
    if equals >= 0:
        rule, segment = "equals", line[equals + 1 :]
    elif keywords:
        rule, segment = "keyword", line[keywords[-1].end() :]
    elif boxed:
        rule, segment = "boxed", boxed.group(1)
    elif line:
        rule, segment = "bare", line
    else:
        return Extraction(None, "none: empty output")
    boxed_inside = _BOXED.fullmatch(segment.strip().rstrip(_TRAILING))
    if boxed_inside:
        segment = boxed_inside.group(1)
    found = read_numeral(segment, base, expression)
    if isinstance(found, Extraction):
        if rule == "bare" and found.rule == "none: no numeral where the answer should be":
            return Extraction(None, "none: no answer stated")
        return found
    return Extraction(found, rule)


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
