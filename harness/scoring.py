"""Answer extraction and exact-match scoring, written down once.

The stop rule keeps a model's first non-blank line. On it, **an answer belongs to the question**: a numeral counts only
where the line states it as the answer to the asked expression, in one of these places:

| rule      | the statement                                                   | example                            |
|-----------|-----------------------------------------------------------------|------------------------------------|
| `equals`  | an equation whose left side is the asked expression (as written, | ``430 + 41 = 541``,                |
|           | its operands in any order, bare or bracketed), or a chain that  | ``(430 + 41) = 541``,              |
|           | starts from it through any arithmetic (``X = a - b = c`` reads  | ``23 * 96 = 2300 - 92 = 2208``,    |
|           | c; a link may be a numeral in another base, a conversion's      | ``1011 + 110 = 17₁₀ = 10001₂``,    |
|           | step); a line that opens with ``=`` continues the prompt's      | ``= 541``                          |
|           | expression                                                      |                                    |
| `keyword` | "the answer / result / sum / product / total / value [of, to or | ``The final answer is: 541.``,     |
|           | for X] is / are / equals / :", "answer / result = N",           | ``Answer = 541``,                  |
|           | "X is / equals N", "X, which is                                 | ``The answer to 430 + 41 is 541.``, |
|           | N", "the last L digits of X are N"; X, where named, is the      | ``430 + 41 is 541.``,              |
|           | asked expression (or, after "sum/product of", its operands);    | ``The sum of 430 and 41 is 541.``, |
|           | the Minerva / lm-eval line "Final Answer: The final answer is   | ``Final Answer: The final answer   |
|           | N. I hope it is correct." (N may be ``$N$`` or boxed)           | is $541$. I hope it is correct.``  |
| `boxed`   | inside ``\\boxed{...}`` (nested braces read whole; an equation  | ``\\boxed{6E_{16}}``               |
|           | in it is read as an equation)                                   |                                    |
| `bare`    | the whole line, where it states nothing else                    | ``541``, ``**541**``               |
| `steps`   | partial sums that take the asked operands in the order asked,   | ``27 + 48 = 75, 75 + 19 = 94``     |
|           | each from the result before it: their last result (a wrong step | for 27 + 48 + 19 reads 94          |
|           | gives a wrong answer; a skipped or reordered operand, none)     |                                    |
| `final`   | free form only: a `keyword` or `equals` statement on a line      | ``Final Answer: The final answer   |
|           | that says it gives the final answer ("final answer", "the       | is 541. I hope it is correct.``    |
|           | answer is", "result:")                                          |                                    |
| `json`    | free form only: the ``answer`` (or ``final_answer``,            | ``{"reasoning": "...",``           |
|           | ``result``) field of a JSON object on a line; a number or a     | ``"answer": 541}``                 |
|           | numeral string                                                  |                                    |

Before a line is read: a thinking block before it is skipped (``<think>...</think>7 + 8 = 15``, any of the markers of
harness/answers.py's THINKING), operators written in words are signs (``47 plus 85``, ``7 times 8``), and a base
annotation naming the task's own base is taken off every numeral (``1011_2 + 110_2 = 10001_2`` in base 2).

**Free form** (``--answer free-form``, harness/answers.py): thinking is never read, whatever its marker (the known ones
and ``--think-end``'s), closed or not: a block opened and never closed is thinking to the end. Of what follows, every
line is read as a first line is, and as a careful grader reads: a JSON object by its answer field alone, however it is
laid out (over several lines, in a fence); a line that only labels the answer ("**Final Answer**", "Final Answer:")
labels the next line; a line that opens with ``=`` continues the line before it; what the output takes back ("Wait,
no", "that is wrong", "(wrong)") never stands, and what follows may state the correction ("so it is 122"). The last
statement of the final answer (a `final`, `boxed` or `json` reading) decides; without one, the last line that states
an answer to the question (an `equals` or `keyword` statement: the working's last equation about the asked
expression); without one, `steps` over the whole answer; a lone numeral counts (`bare`) only where it is all that
follows the thinking. An output the budget cut is ``none: truncated``, never read.

An equation or statement about anything else is never the answer: the prompt's own examples ("The expression you
are asked to calculate is 32 + 78 = 110"), a check after the answer ("47 + 85 = 132. Check: 132 - 85 = 47." reads
132), a partial sum ("First, 12 + 34 = 46."), another expression. A line that states no answer to the question has
none. Where the line states the answer more than once, every statement must give the same numeral (else it is a
hedge); after the last one, the line may go on with words and with equations about other things, but a number
standing outside such an equation ("7 + 8 = 15. Wait, 16.") is refused as a second answer.

What stands where the answer should be (up to the end of its clause: ``.``, ``,``, ``;``, ``!`` or ``?`` followed by a
space) must be **one whole numeral in the task's base**, alone. Markup is not part of it: LaTeX math delimiters
(``\\( \\) \\[ \\] $``) and ``\\text{}``-like wrappers anywhere on the line, and around the numeral backticks, quotes,
sentence punctuation and markdown emphasis. Emphasis is read as markdown only where it closes an opening run of the
same length before it (``**541**``, ``*541*``); a ``*`` after the numeral with no opener (``56 *``, ``15*``) is a
dangling multiplication, not markdown. A base annotation equal to the task's base is allowed (``1F_{16}``, ``1F₁₆``,
``1F (base 16)``, ``1F in base 16``). Refused, with the reason recorded as the rule:

- a sign or a fractional part (``-15``, ``15.5``, ``15.0``): not an integer answer;
- anything after the numeral in its clause but punctuation (``15 + 1``, ``15 or 16``, ``15 (wait, 16)``, ``15
  (because 2 + 3 = 5)``, ``15 *``): an answer must not be hedged, continued or explained in its clause;
- several boxed answers that differ (``\\boxed{15} or \\boxed{16}``), or statements of the answer that differ
  (``7 + 8 = 16? No, 7 + 8 = 15``): a hedge, whatever the words between them;
- text before it (``not 15``, ``isn't 15``, ``a 5-digit number``): words are never read as digits, negations
  are never read as answers;
- an echo of the question (``23 * 96 = 23 * 96``), or a base annotation naming another base (``12_{10}`` in a
  base-2 task).

There is deliberately no "last number in the line" fallback: "To calculate the arithmetic expression in base 10 ..."
would answer 10 and score a false hit on 3 + 7. **Leading zeros and separators**, one policy everywhere: leading zeros
are allowed (``0042`` is 42; fixed-width answers are answers); in bases up to 10 a comma between groups of exactly
three digits is a thousands separator (``1,234``); no other separator is. An extracted answer is ASCII digits of the
task's base, lower case, no separators; ``is_correct`` takes only such a string (no ``+15``, ``1_5``, ``0x1f`` or
non-ASCII digits, which Python's ``int`` would read) and compares digit strings, leading zeros and letter case aside,
so a numeral of any length is judged (Python's ``int`` refuses strings past 4,300 digits).

Reading is linear in the length of the line: every scan looks at each character a bounded number of times (an
expression is looked for only within a few times the question's length before a ``=`` or a verb).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache

from harness.answers import FIRST_LINE, AnswerMode, FreeForm
from harness.files import parse_json_line
from harness.problems import DIGITS

RULES = ("equals", "keyword", "boxed", "bare", "steps", "final", "json")


@dataclass(frozen=True)
class Extraction:
    """The answer a generation states (a lower-case base-p digit string, or None) and the rule that decided:
    one of RULES when an answer was found, else ``none: <why>``."""

    answer: str | None
    rule: str


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
_MATH_DELIMITERS = re.compile(r"\\[()\[\]]")  # \( \) \[ \]: LaTeX math mode, markup only
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mathit)\s*\{([^{}]*)\}")  # \text{15}: markup around it
_LATEX_TIMES = re.compile(r"\\(?:times|cdot)(?![a-z])")
_IS_THE_ANSWER = re.compile(r"\s+is\s+the\s+(?:final\s+)?(?:answer|result|sum|product|total)\W*$", re.IGNORECASE)
_LEADING = " \t*_`$\"'[\\"
_TRAILING = " \t`$\"'.,;:!?]\\"
_EMPHASIS = "*_"
_OPERATOR = re.compile(r"[-+*/×÷^=<>]")
_TIMES = "*×·"
# "the [final] answer / result / sum / product / total / value [of|to|for X] is|are|equals|:"
_NOUN = re.compile(r"\b(?:answer|result|sum|product|total|value|last\s+\d+\s+digits?)\b", re.IGNORECASE)
_VERB = r"(?:\bis\b|\bare\b|\bequals\b|\bequal\s+to\b|:)"
_WHICH = re.compile(r"\bwhich\s+(?:is|equals)\b", re.IGNORECASE)
_EQUALS_AFTER = re.compile(r"[*_]*\s*(?P<about>(?!))?=(?!=)\s*")  # no "of X": the group never takes part
_COPULA = re.compile(r"\b(?:is|are|equals|equal\s+to)\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[.,;!?](?=\s)")
# What "the answer to ..." may say in words alone and still mean the question ("this problem", "the expression")
_IMPLICIT = re.compile(
    r"(?:\s|\b(?:the|this|that|your|my|our|given|above|following|arithmetic|asked|expression|question|problem"
    r"|calculation|task|sum|product|addition|multiplication|operation)\b)*",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"(?:\bnot|\bnever|n't)\s*$", re.IGNORECASE)  # "not 7 + 8 = 15", "isn't 7 + 8 = 15"
_DECIMAL_NUMBER = re.compile(r"\d")
EMPHASIS_REACH = 256  # how far back an emphasis opener is looked for (keeps reading linear)


# ---------------------------------------------------------------- the question and expressions on the line


def _normal(numeral: str) -> str:
    """A numeral as a digit string to compare: lower case, no separators, no leading zeros."""
    return numeral.replace(",", "").lower().lstrip("0") or "0"


@cache
def _digit_chars(base: int) -> frozenset[str]:
    return frozenset(DIGITS[:base] + DIGITS[10:base].upper())


_MARKUP = " \t*_`$\"'"


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
    if cursor > low and text[cursor - 1] in "+*×·":
        operator = "+" if text[cursor - 1] == "+" else "*"
    elif base <= 33 and cursor - 1 > low and text[cursor - 1] in "xX" and text[cursor - 2] in " \t" and cursor < end:
        operator = "*"
    else:
        return None
    cursor -= 1
    while cursor > low and text[cursor - 1] in " \t":
        cursor -= 1
    return cursor, operator


def _expression_before(text: str, end: int, base: int, reach: int) -> tuple[int, str | None, list[str]] | None:
    """The longest ``numeral (operator numeral)*`` that ends at ``end`` (trailing spaces and markup aside), read
    backwards over at most ``reach`` characters: (where it starts, its operator or None for a lone numeral, its
    operands normalised), or None. A numeral glued to a word (``abc12``) is none; ``×``, ``·`` and `` x `` are ``*``;
    an expression mixing operators is none."""
    digits, low = _digit_chars(base), max(0, end - reach)
    index = end
    while index > low and text[index - 1] in _MARKUP:
        index -= 1
    first = _numeral_before(text, index, low, digits)
    if first is None:
        return None
    start, operands, operators = first, [_normal(text[first:index])], set()
    while True:
        operator = _operator_before(text, start, low, base)
        if operator is None:
            break
        first = _numeral_before(text, operator[0], low, digits)
        if first is None:
            break  # "**7 + 8": markdown, not a product
        operators.add(operator[1])
        operands.append(_normal(text[first : operator[0]]))
        start = first
    if len(operators) > 1:
        return None
    return start, (operators.pop() if operators else None), operands[::-1]


@dataclass(frozen=True)
class Question:
    """The asked expression: its operator (``+`` or ``*``) and its operands as normalised digit strings (sorted, and
    in the order asked)."""

    operator: str
    operands: tuple[str, ...]
    length: int  # characters of the expression as written: how far back an echo of it is looked for
    ordered: tuple[str, ...] = ()

    @classmethod
    def of(cls, expression: str, base: int) -> Question | None:
        text = expression.strip()
        parsed = _expression_before(text, len(text), base, len(text))
        if parsed is None or parsed[0] != 0 or parsed[1] is None:
            return None
        return cls(parsed[1], tuple(sorted(parsed[2])), len(text), tuple(parsed[2]))

    @property
    def reach(self) -> int:
        """How far back from a '=' or a verb the asked expression is looked for: room for its spacing, no more."""
        return 2 * self.length + 32

    def is_asked(self, text: str, end: int, base: int) -> bool:
        """Whether the expression ending at ``end`` of ``text`` is the question, its operands in any order, bare or in
        brackets (``(7 + 8) = 15``): the left side of an equation, the subject of "is"."""
        parsed = _expression_before(text, end, base, self.reach)
        if parsed is None:
            inside = _bracketed_before(text, end, self.reach)
            if inside is None:
                return False
            parsed = _expression_before(text, inside[1], base, self.reach)
            if parsed is None or text[inside[0] : parsed[0]].strip(_MARKUP):
                return False
        return parsed[1] == self.operator and tuple(sorted(parsed[2])) == self.operands

    def is_named_in(self, text: str, base: int) -> bool:
        """Whether ``text`` (what a statement says it is about) names the question: the expression itself, its
        operands ("of 7 and 8"), or no number at all ("the answer to this problem")."""
        if not _DECIMAL_NUMBER.search(text):
            return _IMPLICIT.fullmatch(text) is not None
        numerals = sorted(_normal(n) for n in re.findall(rf"(?<![0-9a-z]){_numeral(base)}(?![0-9a-z])", text, re.I))
        if tuple(numerals) == self.operands:
            return True
        return any(self.is_asked(text, match.end(), base) for match in re.finditer(r"[0-9a-zA-Z](?![0-9a-zA-Z])", text))


def _bracketed_before(text: str, end: int, reach: int) -> tuple[int, int] | None:
    """(after its opening bracket, at its closing one) of the bracketed group that ends at ``end`` (spaces aside),
    looked for over at most ``reach`` characters, or None."""
    low, index = max(0, end - reach), end
    while index > low and text[index - 1] in " \t":
        index -= 1
    if index == low or text[index - 1] != ")":
        return None
    depth, cursor = 0, index - 1
    while cursor >= low:
        depth += {")": 1, "(": -1}.get(text[cursor], 0)
        if depth == 0:
            return cursor + 1, index - 1
        cursor -= 1
    return None


_ANY_ANNOTATED = re.compile(r"[0-9a-zA-Z]+(?:_\{\d+\}|_\(\d+\)|_\d+|[₀-₉]+)")
_SPACED_X = re.compile(r"(?<=\s)[xX](?=\s)")


@cache
def _arithmetic(base: int) -> re.Pattern[str]:
    """Numerals of the base joined by any arithmetic operators, with brackets: a link of a chain."""
    number = rf"[\s(]*(?:{_numeral(base)})[\s)]*"
    return re.compile(rf"{number}(?:[-+*/×·÷^−]{number})*", re.IGNORECASE)


def _chain_link(text: str, base: int) -> bool:
    """Whether ``text`` (between two '=' of a chain) is nothing but arithmetic and markup: numerals of the base (or,
    as a step of a conversion, a numeral annotated with its base: ``17₁₀``), any operators, balanced brackets."""
    core = _SPACED_X.sub("*", _ANY_ANNOTATED.sub("0", text.strip(_MARKUP + ".,")))
    if not core or core.count("(") != core.count(")"):
        return False
    return _arithmetic(base).fullmatch(core) is not None


# ---------------------------------------------------------------- reading one numeral


def _boxes(line: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of every outermost ``\\boxed{...}``, braces balanced (``\\boxed{6E_{16}}`` is one box);
    one pass over the line."""
    found, opened, depth = [], None, 0
    starts = {match.end() - 1: match.start() for match in re.finditer(r"\\boxed\s*\{", line)}
    for index, char in enumerate(line):
        if char == "{":
            if opened is None and index in starts:
                opened, depth = index, 0
            depth += opened is not None
        elif char == "}" and opened is not None:
            depth -= 1
            if depth == 0:
                found.append((starts[opened], index + 1, line[opened + 1 : index]))
                opened = None
    return found


def _equals_signs(line: str) -> list[int]:
    """Indices of every '=' outside brackets that is not part of '==', '<=', '>=' or '!='."""
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
    before = before[-EMPHASIS_REACH:]
    while True:
        text = text.rstrip(_TRAILING)
        run = re.search(rf"[{re.escape(_EMPHASIS)}]+$", text)
        if not run:
            break
        start = run.start()
        opened = start > 0 and not text[start - 1].isspace()
        opened = opened and _opens_emphasis(before + text[max(0, start - EMPHASIS_REACH) : start], run.group())
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
    if annotated is not None and annotated.translate(_SUBSCRIPT_DIGITS).lstrip("0") != str(base):
        return Extraction(None, f"none: written in base {annotated.translate(_SUBSCRIPT_DIGITS)}, not {base}")
    return match["num"].replace(",", "").lower()


# ---------------------------------------------------------------- statements of the answer


@dataclass
class _Statement:
    """Where a line states the answer: the phrase that says so starts at ``phrase``, the answer at ``answer``."""

    phrase: int
    answer: int
    rule: str


def _clause(line: str, start: int, end: int) -> int:
    """Where the clause that begins at ``start`` ends (before ``end``): the first clause mark followed by a space."""
    match = _CLAUSE_END.search(line, start, end)
    return match.start() if match else end


def _equation_statements(line: str, question: Question, base: int, signs: list[int]) -> list[_Statement]:
    """Every equation whose left side is the question (or a line that opens with '='), followed along its chain."""
    found, skip_until = [], -1
    for number, sign in enumerate(signs):
        if sign <= skip_until:
            continue
        opens_line = not line[:sign].strip(_MARKUP)
        left = None if opens_line else _expression_before(line, sign, base, question.reach)
        if not (opens_line or question.is_asked(line, sign, base)):
            continue
        last = number
        while last + 1 < len(signs) and _chain_link(line[signs[last] + 1 : signs[last + 1]], base):
            last += 1
        skip_until = signs[last]
        found.append(_Statement(sign if left is None else left[0], signs[last] + 1, "equals"))
    return found


def _keyword_statements(line: str, question: Question, base: int) -> list[_Statement]:
    """ "The answer [to X] is", "X is", "X, which is", "the last L digits of X are": each where X, if named, is the
    question."""
    found = []
    about = rf"(?:\s+(?:of|to|for)\s+(?P<about>[^=:\n]{{0,{question.reach}}}?))?"
    after_noun = re.compile(rf"[*_]*{about}[*_]*\s*{_VERB}\s*:?")
    for noun in _NOUN.finditer(line):
        match = after_noun.match(line, noun.end())
        if match is None and noun.group().lower() in ("answer", "result"):
            match = _EQUALS_AFTER.match(line, noun.end())  # "Answer = 15"
        if match and (match["about"] is None or question.is_named_in(match["about"], base)):
            found.append(_Statement(noun.start(), match.end(), "keyword"))
    for verb in _COPULA.finditer(line):
        if question.is_asked(line, verb.start(), base):
            found.append(_Statement(verb.start(), verb.end(), "keyword"))
    for which in _WHICH.finditer(line):
        referent = len(line[: which.start()].rstrip(" ,"))
        if question.is_asked(line, referent, base):
            found.append(_Statement(which.start(), which.end(), "keyword"))
    return found


def _box_statements(line: str, boxes: list[tuple[int, int, str]]) -> list[_Statement]:
    return [_Statement(start, start, "boxed") for start, _, _ in boxes]


def _inside_lone_box(segment: str) -> str | None:
    """The content of the one ``\\boxed{}`` that is all of ``segment`` but markup."""
    core = segment.strip(" \t`$\"'.,;:!?" + _EMPHASIS)
    boxes = _boxes(core)
    if len(boxes) != 1 or boxes[0][:2] != (0, len(core)):
        return None
    return boxes[0][2]


def _read_box(content: str, question: Question | None, base: int, expression: str) -> Extraction | str:
    """A box's content: an equation in it is read as an equation about the question; else the one numeral."""
    if "=" in content and question is not None:
        inner = _read_line(content, question, base, expression, allow_bare=False)
        return inner.answer if inner.answer is not None else inner
    return read_numeral(content, base, expression)


_ARITHMETIC = " \t+-*/×·÷^()[],.$_`"


def _stray_number(text: str, base: int) -> bool:
    """Whether ``text`` (what follows the answer) holds a number outside the equations it states (a check, a partial
    sum, whatever their operators): a second answer. One pass: each equation's two sides are set aside, the left back
    to where its arithmetic begins, the right to the end of its clause."""
    kept, cursor = [], 0
    for sign in _equals_signs(text):
        if sign < cursor:
            continue
        left = sign
        while left > cursor and (text[left - 1] in _ARITHMETIC or text[left - 1] in _digit_chars(base)):
            left -= 1
        kept.append(text[cursor:left])
        cursor = _clause(text, sign + 1, len(text))
    kept.append(text[cursor:])
    return bool(_DECIMAL_NUMBER.search("".join(kept)))


def _read_line(line: str, question: Question, base: int, expression: str, allow_bare: bool = True) -> Extraction:
    boxes = _boxes(line)
    if len({"".join(content.split()).lower() for _, _, content in boxes}) > 1:
        return Extraction(None, "none: several boxed answers (hedged)")
    signs = _equals_signs(line)
    statements = _equation_statements(line, question, base, signs)
    statements += _keyword_statements(line, question, base)
    statements += _box_statements(line, boxes)
    statements.sort(key=lambda s: (s.answer, s.phrase))
    boundaries = sorted({s.phrase for s in statements if s.rule != "boxed"} | set(signs))
    readings: list[tuple[str, str, int]] = []
    seen: set[int] = set()
    for statement in statements:
        if statement.answer in seen and statement.rule != "boxed":
            continue
        seen.add(statement.answer)
        if statement.rule == "boxed":
            box = next(b for b in boxes if b[0] == statement.phrase)
            found = _read_box(box[2], question, base, expression)
            end = box[1]
        else:
            # up to the next statement, sign or box after the answer begins, and the end of its clause
            limit = next((b for b in boundaries if b >= statement.answer), len(line))
            segment = line[statement.answer : limit]
            opening = statement.answer + len(segment) - len(segment.lstrip(_MARKUP))
            box = next((b for b in boxes if b[0] == opening), None)  # the answer is a box: read inside it
            if box is not None:
                found = _read_box(box[2], question, base, expression)
                end = box[1]
                while end < limit and line[end] in _MARKUP:
                    end += 1
                if _inside_lone_box(line[statement.answer : _clause(line, end, limit)]) is None:
                    found = Extraction(None, "none: text follows the boxed answer")
            else:
                end = _clause(line, statement.answer, limit)
                segment = line[statement.answer : end]
                if not segment.strip(" \t*_`$\"'") and end == limit and limit < len(line):
                    continue  # a label that introduces the next statement ("Final Answer: The final answer is")
                found = read_numeral(
                    segment, base, expression, line[max(0, statement.answer - EMPHASIS_REACH) : statement.answer]
                )
                if isinstance(found, Extraction) and not _DECIMAL_NUMBER.search(segment) and limit < len(line):
                    continue  # words only before the next statement: a label too
                if isinstance(found, str) and (segment.rstrip(_MARKUP).endswith("?") or line[end : end + 1] == "?"):
                    found = Extraction(None, "none: asked, not stated (a question mark follows)")
        if isinstance(found, str) and _NEGATION.search(line[max(0, statement.phrase - 32) : statement.phrase]):
            found = Extraction(None, "none: negated")
        if isinstance(found, Extraction):
            return found
        readings.append((found, statement.rule, end))
    if not readings:
        steps = _partial_sums(line, question, base)
        if steps is not None:
            return steps
        if statements and not allow_bare:
            return Extraction(None, "none: no answer to the question stated")
        return _bare(line, base, expression, signs) if allow_bare else Extraction(None, "none: no answer stated")
    if len({_normal(answer) for answer, _, _ in readings}) > 1:
        return Extraction(None, "none: the line states differing answers (hedged)")
    answer, rule, end = max(readings, key=lambda reading: reading[2])
    if _stray_number(line[end:], base):
        return Extraction(None, "none: a number follows the answer (a second answer?)")
    return Extraction(answer, rule)


def _partial_sums(text: str, question: Question, base: int) -> Extraction | None:
    """Equations that take the asked operands in the order asked, one at a time, each from the result before it
    (``27 + 48 = 75, 75 + 19 = 94`` for 27 + 48 + 19), read as their last result: how instruct models answer iterated
    addition when they do not answer in one step. A wrong step gives a wrong answer; a chain that skips, repeats or
    reorders an operand, or starts from another result, is none."""
    if len(question.ordered) < 3:
        return None
    steps: list[tuple[tuple[str, ...], str]] = []
    signs = _equals_signs(text)
    for number, sign in enumerate(signs):
        left = _expression_before(text, sign, base, question.reach)
        if left is None or left[1] != question.operator or len(left[2]) != 2:
            steps.append(((), ""))  # an equation about something else: the chain must not step over it
            continue
        following = signs[number + 1] if number + 1 < len(signs) else len(text)
        right = _step_result(base).match(text, sign + 1, following)
        steps.append((tuple(left[2]), _normal(right["num"])) if right else ((), ""))
    ordered = question.ordered
    for first, (operands, total) in enumerate(steps):
        if operands != ordered[:2]:
            continue
        taken, at = 2, first
        while taken < len(ordered) and at + 1 < len(steps) and steps[at + 1][0] == (total, ordered[taken]):
            at, taken, total = at + 1, taken + 1, steps[at + 1][1]
        if taken == len(ordered):
            return Extraction(total, "steps")
    return None


@cache
def _step_result(base: int) -> re.Pattern[str]:
    """A step's result: a whole numeral of the base where its right side begins (markup aside), no fraction."""
    return re.compile(rf"[\s*_`$]*(?P<num>{_numeral(base)})(?![0-9a-zA-Z]|\.\d)", re.IGNORECASE)


def _bare(line: str, base: int, expression: str, signs: list[int]) -> Extraction:
    """The whole line, where it states nothing about the question."""
    found = read_numeral(line, base, expression)
    if isinstance(found, str):
        return Extraction(found, "bare")
    if signs:
        return Extraction(None, "none: no answer to the question stated (its equations are about other expressions)")
    if found.rule == "none: no numeral where the answer should be":
        return Extraction(None, "none: no answer stated")
    return found


def extract(text: str, base: int, expression: str, answer: AnswerMode = FIRST_LINE) -> Extraction:
    """The answer ``text`` states to ``expression`` (the question, as the prompt wrote it) where the answer mode reads
    it (the first line, for the paper's; what follows the thinking, in free form), and the rule that found it (or why
    there is none)."""
    question = Question.of(expression, base)
    if question is None:
        raise ValueError(f"{expression!r} is no expression of the tasks' kind")
    if isinstance(answer, FreeForm):
        return _read_free(answer.answer_text(text), question, base, expression)
    line = _clean(answer.answer_text(text), base)
    if not line:
        return Extraction(None, "none: empty output")
    return _read_line(line, question, base, expression)


TRUNCATED = "none: truncated (the budget ran out before the answer ended)"


def judge(text: str, base: int, expression: str, answer: AnswerMode, truncated: bool) -> Extraction:
    """``extract``, except that a free-form generation the budget cut before its end is its own verdict: whatever it
    had said so far is not read as its answer (the paper's first line is read whatever its length)."""
    if truncated and isinstance(answer, FreeForm):
        return Extraction(None, TRUNCATED)
    return extract(text, base, expression, answer)


def _clean(line: str, base: int) -> str:
    """A line with LaTeX's math delimiters and text wrappers as the markup they are, its times signs as ``*``, its
    operators in words as signs (``47 plus 85``, ``7 times 8``, ``7 multiplied by 8``: where the words are no
    numerals of the base), and a base annotation naming the task's own base taken off every numeral (``1011_2``,
    ``1011₂``, ``1011_{2}`` in base 2: operands written with their base)."""
    line = _LATEX_TIMES.sub("*", _TEXT_WRAPPER.sub(r"\1", _MATH_DELIMITERS.sub(" ", line)))
    for words, sign, letters in _WORD_OPERATORS:
        if not set(letters) & _digit_chars(base):
            line = words.sub(sign, line)
    return _own_base(base).sub("", line).strip()


_WORD_OPERATORS = (  # (the words, the sign, their letters: in a base whose digits they hold, they are no words)
    (re.compile(r"\bplus\b", re.IGNORECASE), "+", "plus"),
    (re.compile(r"\b(?:times|multiplied\s+by)\b", re.IGNORECASE), "*", "timesmultipliedby"),
)


@cache
def _own_base(base: int) -> re.Pattern[str]:
    """A base annotation of the task's own base after a numeral: ``_2``, ``_{2}``, ``_(2)``, ``₂``."""
    written, subscript = str(base), str(base).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))
    return re.compile(rf"(?<=[0-9a-zA-Z])(?:_\{{{written}\}}|_\({written}\)|_{written}(?![0-9])|{subscript}(?![₀-₉]))")


# Free form: a line that says it gives the final answer outranks the working before it.
_FINAL_PHRASE = re.compile(r"\bfinal\s+answer\b|\banswer\s*(?:is\b|:)|\bresult\s*(?:is\b|:)", re.IGNORECASE)
_JSON_OBJECT = re.compile(r"\{[^{}]*\}")
_JSON_KEYS = ("answer", "final_answer", "result")
# Refusals that mean a line states nothing about the question (it is working, or words), not a hedged answer.
_NOTHING_STATED = ("none: no answer stated", "none: empty output", "none: no answer to the question stated")


def _json_answer(line: str, base: int, expression: str) -> Extraction | None:
    """The answer field of a JSON object on the line (``{"answer": 15}``, ``{"answer": "15"}``), or None when the line
    holds no such object."""
    for match in reversed(list(_JSON_OBJECT.finditer(line))):
        record = parse_json_line(match.group())
        if isinstance(record, dict):
            found = _json_field(record, base, expression)
            if found is not None:
                return found
    return None


def _json_blocks(text: str, base: int, expression: str) -> list[tuple[int, int, Extraction | None]]:
    """(start, end, its answer field's reading or None) of every JSON object that begins a line (a fenced block
    included), however it is laid out: ``{`` ``"answer": 132`` ``}`` over several lines is one object. Only its
    answer field is ever read; nothing inside it is read as a line."""
    decoder, blocks, covered = json.JSONDecoder(), [], 0
    for match in re.finditer(r"(?m)^[ \t>]*\{", text):
        start = match.end() - 1
        if start < covered:
            continue
        try:
            record, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            blocks.append((start, end, _json_field(record, base, expression)))
            covered = end
    return blocks


def _json_field(record: dict, base: int, expression: str) -> Extraction | None:
    key = next((key for key in _JSON_KEYS if key in record), None)
    if key is None:
        return None
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return Extraction(None, f"none: the JSON answer is {type(value).__name__}, not a numeral")
    found = read_numeral(str(value), base, expression)
    return Extraction(found, "json") if isinstance(found, str) else found


# Free form: words by which an output takes back what it said just before ("Wait, no", "that is wrong", "(wrong)").
_RETRACTION = re.compile(
    r"\b(?:wait|oops|actually|hold\s+on|scratch\s+that|correction|on\s+second\s+thought"
    r"|i\s+made\s+an?\s+(?:mistake|error)|let\s+me\s+(?:re-?check|re-?calculate|recompute|redo|correct))\b"
    r"|\b(?:that|this|it)(?:'s|\s+is|\s+was)\s+(?:wrong|incorrect|not\s+(?:right|correct))\b"
    r"|\b(?:is|was)\s+(?:wrong|incorrect)\b|\((?:wrong|incorrect)\)"
    r"|(?:^|(?<=[.!?]\s))no\s*[,.!—–]",
    re.IGNORECASE,
)
# After a retraction: "so it is 122", "that makes 122", the corrected answer in a pronoun's words.
_CORRECTED = re.compile(
    r"(?:\b(?:so|thus|hence|therefore|then)\s*,?\s*)?\b(?:it|that|the\s+(?:answer|result|sum|product))"
    r"(?:'s|\s+is|\s+must\s+be|\s+should\s+be|\s+makes)\s+",
    re.IGNORECASE,
)
# A line that only labels the answer on the line after it ("**Final Answer**", "Final Answer:", "The answer is:")
_LABEL = re.compile(r"[\W_]*(?:the\s+)?(?:final\s+)?(?:answer|result)(?:\s+is)?[\W_]*", re.IGNORECASE)


def _states(reading: Extraction | None) -> bool:
    """Whether a reading is a statement of an answer (a numeral, or one refused as hedged or malformed), not a line
    that says nothing about the question."""
    return reading is not None and not reading.rule.startswith(_NOTHING_STATED)


def _read_free(text: str, question: Question, base: int, expression: str) -> Extraction:
    """A free-form answer (after any thinking), read as a careful grader reads it:

    - every line is read as a first line is; a JSON object is read by its answer field only, however it is laid
      out; a line that only labels the answer ("**Final Answer**", "Final Answer:") labels the next line; a line
      that opens with '=' continues the line before it (an equation about what that line ended with);
    - what an output takes back ("Wait, no", "that is wrong", "(wrong)") never stands: a statement just before such
      words is void, and what follows them may state the corrected answer ("so it is 122");
    - the last statement of the final answer (a "final answer" / "the answer is" phrase, a box, a JSON answer field)
      decides; without one, the last line that states an answer to the question (an equation about it, "X is N");
      without one, partial sums that take the asked operands in order; a lone numeral counts only where it is the
      whole answer. A deciding statement that hedges gives none."""
    blocks = _json_blocks(text, base, expression)
    units: list[tuple[str, Extraction | None]] = []  # in order: ("line", None) or ("", a JSON object's reading)
    cursor = 0
    for start, end, reading in blocks:
        units += [(line, None) for line in text[cursor:start].splitlines()]
        units.append(("", reading))
        cursor = end
    units += [(line, None) for line in text[cursor:].splitlines()]
    contents = [unit for unit in units if unit[0].strip() or unit[1] is not None]
    if not contents:
        return Extraction(None, "none: no answer after the thinking")
    only = len(contents) == 1
    readings: list[tuple[bool, Extraction]] = []  # (states the final answer, reading), in order
    label, previous = False, ""
    for raw, block in contents:
        if not raw.strip():
            if block is not None:
                readings.append((True, block))
            continue
        line = _clean(raw, base)
        if _LABEL.fullmatch(line):
            label = True
            continue
        if not re.search(r"[0-9a-zA-Z]", line):  # markup alone ("$$", a fence) between a label and its answer
            continue
        if label:
            line, label = f"The final answer is {line}", False
        elif line.lstrip(_MARKUP).startswith("=") and previous:
            line = f"{previous} {line}"
        previous = line
        _read_free_line(line, question, base, expression, only, readings)
    explicit = [reading for final, reading in readings if final]
    chosen = explicit or [reading for _, reading in readings]
    if not chosen:
        steps = _partial_sums(_clean(text, base), question, base)
        return steps or Extraction(None, "none: no answer to the question stated")
    return chosen[-1]


def _read_free_line(
    line: str, question: Question, base: int, expression: str, only: bool, readings: list[tuple[bool, Extraction]]
) -> None:
    """One line of a free-form answer into ``readings``, its retractions applied (see _read_free)."""
    marks = list(_RETRACTION.finditer(line))
    pieces = [line[: marks[0].start()] if marks else line]
    pieces += [line[mark.end() : following.start()] for mark, following in zip(marks, marks[1:], strict=False)]
    pieces += [line[marks[-1].end() :]] if marks else []
    for number, piece in enumerate(pieces):
        taken_back = number < len(pieces) - 1  # words that take something back follow this piece
        reading = _free_reading(piece, question, base, expression, only and not marks, corrected=number > 0)
        if taken_back:
            if _states(reading[1] if reading else None):
                continue  # the statement just before the retraction is void
            if not _DECIMAL_NUMBER.search(piece) and readings:
                readings.pop()  # nothing was said since the last statement: it is what is taken back
            continue
        if reading is not None and _states(reading[1]):
            readings.append(reading)


def _free_reading(
    piece: str, question: Question, base: int, expression: str, only: bool, corrected: bool
) -> tuple[bool, Extraction] | None:
    """(states the final answer, reading) of a piece of a free-form line, or None where it says nothing."""
    if not piece.strip():
        return None
    found = _json_answer(piece, base, expression)
    if found is not None:
        return True, found
    reading = _read_line(piece, question, base, expression, allow_bare=only)
    if not _states(reading) and corrected:
        statement = next(reversed(list(_CORRECTED.finditer(piece))), None)  # the last one
        if statement is not None:
            found = read_numeral(piece[statement.end() : _clause(piece, statement.end(), len(piece))], base, expression)
            return (False, Extraction(found, "keyword")) if isinstance(found, str) else None
    if not _states(reading):
        return None
    if reading.rule == "boxed" or _FINAL_PHRASE.search(piece) or "\\boxed" in piece:
        final = reading.rule in ("keyword", "equals") and _FINAL_PHRASE.search(piece)
        return True, (Extraction(reading.answer, "final") if final and reading.answer else reading)
    return False, reading


def is_numeral(text: str, base: int) -> bool:
    """Whether ``text`` is what ``extract`` yields: ASCII digits of ``base`` (either letter case), nothing else."""
    return bool(text) and text.isascii() and all(char in DIGITS[:base] for char in text.lower())


def is_correct(extracted: str | None, gold: str, base: int) -> bool:
    """Exact match by value of an answer ``extract`` can produce: digit strings compared, leading zeros and letter
    case aside (no int(): a numeral of any length is judged)."""
    if extracted is None or not is_numeral(extracted, base) or not is_numeral(gold, base):
        return False
    return _normal(extracted) == _normal(gold)


def wilson_interval(correct: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (well behaved at 0 and 1, unlike the normal one)."""
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest  # here, not at import: scipy.stats costs every command 0.7 s to load

    ci = binomtest(correct, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)
