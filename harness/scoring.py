"""Answer extraction and exact-match scoring, written down once.

The stop rule keeps a model's first non-blank line. On it, the answer is looked for in one place:

| rule      | where the answer must stand                                     | example                       |
|-----------|-----------------------------------------------------------------|-------------------------------|
| `equals`  | after the line's last ``=`` outside brackets                    | ``430 + 41 = 541``            |
| `keyword` | after the last "answer/result/sum/product/total [of ...] is",   | ``The final answer is: 541.`` |
|           | "which is", "answer:", "equals" or "equal to" (markdown allowed | ``**Answer**: 541``           |
|           | around the label: ``**Answer**:``)                              | ``The sum of 7 and 8 is 15``  |
| `boxed`   | inside ``\\boxed{...}`` (nested braces read whole)              | ``\\boxed{6E_{16}}``           |
| `bare`    | the whole line                                                  | ``541``, ``**541**``          |

When a line has both an ``=`` and a keyword, the **later** one decides: "Let x = 7 + 8; the answer is 15" is
15, "The answer is 7 + 8 = 15" is 15. ``boxed`` and ``bare`` apply only to a line with neither. Where the
answer stands, a lone ``\\boxed{...}`` is read inside (``= $\\boxed{15}$``; an ``=`` inside the box keeps what
follows it), and a trailing "is the answer" is dropped (``15 is the answer.``).

What stands there must be **one whole numeral in the task's base**, alone. Markup is not part of it: LaTeX
math delimiters (``\\( \\) \\[ \\] $``) and ``\\text{}``-like wrappers anywhere on the line, and around the
numeral backticks, quotes, sentence punctuation and markdown emphasis. Emphasis is read as markdown only where it
closes an opening run of the same length before it (``**541**``, ``*541*``); a ``*`` after the numeral with no
opener (``56 *``, ``15*``) is a dangling multiplication, not markdown. A base annotation equal to the task's base
is allowed (``1F_{16}``, ``1F₁₆``, ``1F (base 16)``, ``1F in base 16``). Refused, with the reason recorded as the rule:

- a sign or a fractional part (``-15``, ``15.5``, ``15.0``): not an integer answer;
- anything after the numeral but punctuation (``15 + 1``, ``15 or 16``, ``15 (wait, 16)``, ``15 (because
  2 + 3 = 5)``, ``15 *``): an answer must not be hedged, continued or explained on its line;
- several boxed answers that differ (``\\boxed{15} or \\boxed{16}``, ``\\boxed{15}, no wait,
  \\boxed{16}``): a hedge, whatever the words between them;
- text before it (``not 15``, ``isn't 15``, ``a 5-digit number``): words are never read as digits, negations
  are never read as answers;
- an echo of the question (``23 * 96 = 23 * 96``), or a base annotation naming another base (``12_{10}`` in a
  base-2 task).

There is deliberately no "last number in the line" fallback: "To calculate the arithmetic expression in
base 10 ..." would answer 10 and score a false hit on 3 + 7. **Leading zeros and separators**, one policy
everywhere: leading zeros are allowed (``0042`` is 42; fixed-width answers are answers); in bases up to 10 a
comma between groups of exactly three digits is a thousands separator (``1,234``); no other separator is.
An extracted answer is ASCII digits of the task's base, lower case, no separators; ``is_correct`` takes only
such a string (no ``+15``, ``1_5``, ``0x1f`` or non-ASCII digits, which Python's ``int`` would read) and calls
it correct when it denotes the same integer as the gold answer (leading zeros and letter case aside).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

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
    r"(?:\b(?:answer|result|sum|product|total)\b(?:\s+of\b[^=:]*?)?[*_]*\s*(?:\bis\b\s*:?|:)"
    r"|\bwhich\s+is\b|\bequals\b|\bequal\s+to\b)",
    re.IGNORECASE,
)
_MATH_DELIMITERS = re.compile(r"\\[()\[\]]")  # \( \) \[ \]: LaTeX math mode, markup only
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mathit)\s*\{([^{}]*)\}")  # \text{15}: markup around it
_IS_THE_ANSWER = re.compile(r"\s+is\s+the\s+(?:final\s+)?(?:answer|result|sum|product|total)\W*$", re.IGNORECASE)
_LEADING = " \t*_`$\"'[\\"
_TRAILING = " \t`$\"'.,;:!?]\\"
_EMPHASIS = "*_"
_OPERATOR = re.compile(r"[-+*/×÷^=<>]")


def _boxes(line: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of every ``\\boxed{...}``, braces balanced (``\\boxed{6E_{16}}`` is one box)."""
    found = []
    for match in re.finditer(r"\\boxed\s*\{", line):
        depth, index = 1, match.end()
        while index < len(line) and depth:
            depth += {"{": 1, "}": -1}.get(line[index], 0)
            index += 1
        if depth == 0:
            found.append((match.start(), index, line[match.end() : index - 1]))
    return found


def _last_equals(line: str) -> int:
    """Index of the last '=' outside brackets that is not part of '==', '<=', '>=' or '!='; -1 if none."""
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


def _opens_emphasis(text: str, run: str) -> bool:
    """Whether ``text`` holds an opening markdown emphasis run exactly ``run`` (``**``): after the start, a space
    or an opening bracket, not of a longer run, and followed by a non-space."""
    char = re.escape(run[0])
    return re.search(rf"(?:^|(?<=[\s(\[{{:]))(?<!{char}){re.escape(run)}(?!{char})(?=\S)", text) is not None


def _strip_trailing(text: str, before: str) -> str | Extraction:
    """``text`` less what trails its last character: punctuation and markup, and emphasis that closes an opener in
    ``before`` + ``text``. A ``*`` or ``_`` run that closes nothing is not markup (``56 *``: an operator)."""
    while True:
        text = text.rstrip(_TRAILING)
        run = re.search(rf"[{re.escape(_EMPHASIS)}]+$", text)
        if not run:
            break
        start = run.start()
        opened = start > 0 and not text[start - 1].isspace() and _opens_emphasis(before + text[:start], run.group())
        if not opened:
            why = "an operator follows the numeral" if "*" in run.group() else "text follows the numeral"
            return Extraction(None, f"none: {why} (unpaired {run.group()!r}, not markdown)")
        text = text[:start]
    while text.endswith(")") and text.count(")") > text.count("("):  # a closing aside's bracket
        text = text[:-1].rstrip(_TRAILING)
    return text


def read_numeral(segment: str, base: int, expression: str | None = None, before: str = "") -> Extraction | str:
    """The one numeral ``segment`` consists of (an Extraction without its rule, as a str), or why it is none.
    ``before`` is the line's text before the segment (where markdown emphasis may have opened)."""
    lead = len(segment) - len(segment.lstrip(_LEADING))
    before, text = before + segment[:lead], segment[lead:]
    text = _IS_THE_ANSWER.sub("", text)
    text = _strip_trailing(text, before)
    if isinstance(text, Extraction):
        return text
    text = text.strip()
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


def _inside_lone_box(segment: str) -> str | None:
    """The content of the one ``\\boxed{}`` that is all of ``segment`` but markup (after an ``=`` in it, if any)."""
    core = segment.strip(" \t`$\"'.,;:!?" + _EMPHASIS)
    boxes = _boxes(core)
    if len(boxes) != 1 or boxes[0][:2] != (0, len(core)):
        return None
    content = boxes[0][2]
    equals = _last_equals(content)
    return content[equals + 1 :] if equals >= 0 else content


def extract(text: str, base: int = 10, expression: str | None = None) -> Extraction:
    """The answer the first line states, and the rule that found it (or why there is none). ``expression``,
    the question, lets an echo of it be named as such."""
    line = _TEXT_WRAPPER.sub(r"\1", _MATH_DELIMITERS.sub(" ", answer_line(text))).strip()
    if not line:
        return Extraction(None, "none: empty output")
    boxes = _boxes(line)
    if len({"".join(content.split()).lower() for _, _, content in boxes}) > 1:
        return Extraction(None, "none: several boxed answers (hedged)")
    equals = _last_equals(line)
    keyword = next(reversed(list(_KEYWORD.finditer(line))), None)  # the last one
    if equals >= 0 and (keyword is None or equals > keyword.start()):
        rule, start = "equals", equals + 1
    elif keyword is not None:
        rule, start = "keyword", keyword.end()
    elif boxes:
        rule, start = "boxed", None
    else:
        rule, start = "bare", 0
    # boxed: the box marks the answer wherever it stands (differing boxes were refused above)
    before, segment = ("", line[boxes[0][0] : boxes[0][1]]) if start is None else (line[:start], line[start:])
    inside = _inside_lone_box(segment)
    if inside is not None:
        before, segment = "", inside
    found = read_numeral(segment, base, expression, before)
    if isinstance(found, Extraction):
        if rule == "bare" and found.rule == "none: no numeral where the answer should be":
            return Extraction(None, "none: no answer stated")
        return found
    return Extraction(found, rule)


def is_numeral(text: str, base: int) -> bool:
    """Whether ``text`` is what ``extract`` yields: ASCII digits of ``base`` (either letter case), nothing else."""
    return bool(text) and text.isascii() and all(char in DIGITS[:base] for char in text.lower())


def is_correct(extracted: str | None, gold: str, base: int) -> bool:
    """Exact match by value (leading zeros and letter case do not matter) of an answer ``extract`` can produce."""
    if extracted is None or not is_numeral(extracted, base) or not is_numeral(gold, base):
        return False
    return int(extracted, base) == int(gold, base)


def wilson_interval(correct: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (well behaved at 0 and 1, unlike the normal one)."""
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest  # here, not at import: scipy.stats costs every command 0.7 s to load

    ci = binomtest(correct, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)
