"""One line read as the paper's first line is read: every statement of the answer it makes (``equals``, ``keyword``,
``boxed``), each read as one numeral; they must agree. Without a statement, partial sums through the asked operands
(``steps``); without those, the whole line as a numeral (``bare``), where it states nothing else.

>>> from harness.scoring.question import Question
>>> question = Question.of("7 * 8", 10)
>>> read_line("7 * 8 = 56. So the answer is 56.", question, 10, "7 * 8")
Extraction(answer='56', rule='keyword')
>>> read_line("7 * 8 = 56. So the answer is 54.", question, 10, "7 * 8").rule
'none: conflict (the output states differing answers: 56, then 54)'
"""

from __future__ import annotations

import re
from bisect import bisect_left

from harness.scoring.equations import (
    Statement,
    clause_end,
    equals_signs,
    equation_statements,
    partial_sums,
    stray_number,
)
from harness.scoring.numerals import EMPHASIS_REACH, MARKUP, digit_chars, read_numeral
from harness.scoring.phrases import NEGATION, keyword_statements
from harness.scoring.question import Question, own_base_annotation
from harness.scoring.structured import boxes, lone_box
from harness.scoring.verdicts import Extraction, Refusal, differing, refused

_DECIMAL_NUMBER = re.compile(r"\d")
_NO_NUMERAL = Refusal.NO_NUMERAL.value
_MATH_DELIMITERS = re.compile(r"\\[()\[\]]")  # \( \) \[ \]: LaTeX math mode, markup only
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mathit)\s*\{([^{}]*)\}")  # \text{15}: markup around it
_LATEX_TIMES = re.compile(r"\\(?:times|cdot)(?![a-z])")
_LATEX_ALIGN = re.compile(r"&\s*(?==)|\\\\\s*$|\\(?:begin|end)\{(?:align|aligned|equation|gather)\*?\}")
# A bullet, or a number of at most two digits and "." or ")" before words or an equation: a list's layout
_LIST_MARKER = re.compile(r"^\s*(?:[-*+•]\s+|\d{1,2}[.)]\s+(?=.*[A-Za-z=]))")
# LaTeX's spacing and grouping inside a number: a thin space (``5\\,124``, ``\\!``, ``\\;``, ``\\:``) is layout, ``{,}``
# a thousands separator
_LATEX_SPACING = re.compile(r"(?<=\d)(?:\\[,!;:]|(?P<comma>\{,\}))(?=\d)")
# Bold markers (``**``, ``__``) that open or close an emphasis, a non-space on one side only: layout, never a sign
_BOLD = re.compile(r"(?<![\w*])\*\*(?=[^\s*])|(?<=[^\s*])\*\*(?![\w*])|(?<![\w_])__(?=[^\s_])|(?<=[^\s_])__(?![\w_])")
# Full-width and CJK punctuation, as the ASCII marks they stand for
# (a full-width mark holds its own spacing: ", " for "，")
_FULL_WIDTH = str.maketrans(
    {
        "。": ". ",
        "．": ". ",
        "，": ", ",
        "、": ", ",
        "：": ": ",
        "；": "; ",
        "！": "! ",
        "？": "? ",
        "（": " (",
        "）": ") ",
    }
    | {"＝": " = ", "＋": " + ", "＊": " * ", "　": " "}
)
_WORD_OPERATORS = (  # the words, and the sign they stand for
    (re.compile(r"\bplus\b", re.IGNORECASE), "plus", "+"),
    (re.compile(r"\b(?:times|multiplied\s+by)\b", re.IGNORECASE), "times", "*"),
)


def clean(line: str, base: int) -> str:
    """A line with LaTeX's math delimiters, text wrappers and alignment (``&=``, ``\\\\``) as the markup they are,
    its times signs as ``*``, its operators in words as signs (``47 plus 85``, ``2c times 5``: a word is a sign
    wherever it is no numeral of the base), a base annotation naming the task's own base taken off every numeral
    (``1011_2``, ``1011₂``, ``1011_{2}`` in base 2: operands written with their base), and a list marker that opens
    it (``- ``, ``* ``, ``1. ``) as the layout it is, not a sign.

    Markup is layout: bold markers around or inside an equation, LaTeX's spacing and grouping within a number
    (``5\\,124``, ``5{,}124``), and full-width and CJK punctuation (``。``, ``，``).

    >>> clean("- 47 + 85 = 132", 10), clean("2. The answer is 132", 10), clean("-15", 10), clean("15. 16", 10)
    ('47 + 85 = 132', 'The answer is 132', '-15', '15. 16')
    >>> clean("**47** + **85** = **132**", 10), clean("$5{,}124$ and $5\\\\,124$", 10), clean("47 + 85 = 132。", 10)
    ('47 + 85 = 132', '$5,124$ and $5124$', '47 + 85 = 132.')
    """
    if not line.isascii():
        line = line.translate(_FULL_WIDTH)
    if marker := _LIST_MARKER.match(line):
        line = line[marker.end() :]
    if "**" in line or "__" in line:
        line = _BOLD.sub("", line)
    if "\\" in line or "{,}" in line:
        line = _LATEX_SPACING.sub(lambda found: "," if found["comma"] else "", line)
    line = _LATEX_ALIGN.sub("", line) if "&" in line or "\\" in line else line
    if "\\" in line:
        line = _LATEX_TIMES.sub("*", _TEXT_WRAPPER.sub(r"\1", _MATH_DELIMITERS.sub(" ", line)))
    lowered = line.lower()  # the words looked for only where they may be: most lines hold none
    if "plus" in lowered or "times" in lowered or "multiplied" in lowered:
        for words, word, sign in _WORD_OPERATORS:
            if not set(word) <= digit_chars(base):
                line = words.sub(sign, line)
    return own_base_annotation(base).sub("", line).strip()


def read_box(content: str, question: Question | None, base: int, expression: str) -> Extraction | str:
    """A box's content: an equation in it is read as an equation about the question; else the one numeral."""
    if "=" in content and question is not None:
        inner = read_line(content, question, base, expression, allow_bare=False)
        return inner.answer if inner.answer is not None else inner
    return read_numeral(content, base, expression)


def _statement_reading(line: str, statement: Statement, boundaries: list[int], found_boxes, question, base, expression):
    """(the numeral or why none, where the reading ended), or None where the statement only labels the next one."""
    if statement.rule == "boxed":
        box = found_boxes[statement.phrase]
        return read_box(box[2], question, base, expression), box[1]
    # up to the next statement, sign or box after the answer begins, and the end of its clause
    at = bisect_left(boundaries, statement.answer)  # a sorted list: found in log time (reading stays linear)
    limit = boundaries[at] if at < len(boundaries) else len(line)
    segment = line[statement.answer : limit]
    opening = statement.answer + len(segment) - len(segment.lstrip(MARKUP))
    box = found_boxes.get(opening)  # the answer is a box: read inside it
    if box is not None:
        found, end = read_box(box[2], question, base, expression), box[1]
        while end < limit and line[end] in MARKUP:
            end += 1
        if lone_box(line[statement.answer : clause_end(line, end, limit)]) is None:
            found = refused(Refusal.TEXT_AFTER_BOX)
        return found, end
    end = clause_end(line, statement.answer, limit)
    segment = line[statement.answer : end]
    if not segment.strip(MARKUP) and end == limit and limit < len(line):
        return None  # a label that introduces the next statement ("Final Answer: The final answer is")
    before = line[max(0, statement.answer - EMPHASIS_REACH) : statement.answer]
    found = read_numeral(segment, base, expression, before)
    labels = limit < len(line) and (not _DECIMAL_NUMBER.search(segment) or line[limit] == "=")
    if isinstance(found, Extraction) and labels:
        return None  # words only, or the left side of an equation, before the next statement: a label too
    if (
        statement.rule == "keyword"
        and isinstance(found, Extraction)
        and found.rule == _NO_NUMERAL
        and not _DECIMAL_NUMBER.search(segment)
    ):
        return None  # words about the answer, not its value: "let me know if my answer is wrong"
    if isinstance(found, str) and (segment.rstrip(MARKUP).endswith("?") or line[end : end + 1] == "?"):
        found = refused(Refusal.ASKED)
    return found, end


def statements(line: str, question: Question, base: int) -> tuple[list[Statement], list, list[int]]:
    """Every statement of the answer on the line, in order, with the line's boxes and '=' signs."""
    found_boxes = boxes(line)
    signs = equals_signs(line)
    found = equation_statements(line, question, base, signs) + keyword_statements(line, question, base)
    found += [Statement(start, start, "boxed") for start, _, _ in found_boxes]
    found.sort(key=lambda s: (s.answer, s.phrase))
    return found, found_boxes, signs


def read_line(
    line: str, question: Question, base: int, expression: str, allow_bare: bool = True, questions: bool = True
) -> Extraction:
    """What ``line`` states as the answer to ``question`` (see the module's docstring). ``questions``: a statement
    asked as a question ("7 + 8 = 16?") decides the line as asked, not stated; without, it is passed over (free form,
    where a model asks itself and then answers)."""
    found, found_boxes, signs = statements(line, question, base)
    contents = ["".join(content.split()).lower() for _, _, content in found_boxes]
    if len(set(contents)) > 1:
        return differing(contents)
    boundaries = sorted({s.phrase for s in found if s.rule != "boxed"} | set(signs))
    readings: list[tuple[str, str, int]] = []
    seen: set[int] = set()
    by_start = {box[0]: box for box in found_boxes}  # each box by where it starts
    for statement in found:
        if statement.answer in seen and statement.rule != "boxed":
            continue
        seen.add(statement.answer)
        reading = _statement_reading(line, statement, boundaries, by_start, question, base, expression)
        if reading is None:
            continue
        numeral, end = reading
        if isinstance(numeral, str) and NEGATION.search(line[max(0, statement.phrase - 32) : statement.phrase]):
            numeral = refused(Refusal.NEGATED)
        if isinstance(numeral, Extraction):
            if not questions and numeral.rule == Refusal.ASKED.value:
                continue
            return numeral
        readings.append((numeral, statement.rule, end))
    if not readings:
        steps = partial_sums(line, question, base)
        if steps is not None:
            return steps
        if found and not allow_bare:
            return refused(Refusal.NOT_THE_QUESTION)
        return bare(line, base, expression, signs) if allow_bare else refused(Refusal.NOTHING_STATED)
    if len(readings) > 1 and len({question.value(answer) for answer, _, _ in readings}) > 1:
        return differing([answer for answer, _, _ in readings])
    answer, rule, end = max(readings, key=lambda reading: reading[2])
    if stray_number(line[end:], base, lambda said: question.value(said) == question.value(answer)):
        return refused(Refusal.NUMBER_AFTER)
    return Extraction(answer, rule)


def bare(line: str, base: int, expression: str, signs: list[int]) -> Extraction:
    """The whole line, where it states nothing about the question."""
    found = read_numeral(line, base, expression)
    if isinstance(found, str):
        return Extraction(found, "bare")
    if signs:
        return refused(Refusal.ABOUT_OTHERS)
    if found.rule == Refusal.NO_NUMERAL.value:
        return refused(Refusal.NOTHING_STATED)
    return found
