"""Answer extraction and exact-match scoring: the answer is what the output *states* as its answer to the asked
question, and it is credited only when every such statement agrees.

The package, one job a file: ``question`` (what was asked, and the task's transform of its value), ``numerals``
(one numeral in base p, exact match), ``values`` (another base's digits and number words read into the task's base),
``thinking`` (the thinking blocks of the models people run, never read), ``equations``, ``phrases`` and
``structured`` (where an output states its answer), ``retractions`` (what takes a statement back), ``line`` (the
paper's first line: statements in a line) and ``free`` (a free-form answer: statements over lines, retractions,
conflicts), ``readers`` (every rule with its examples: the tests and docs/scoring.md's table), ``verdicts`` (answers,
rules and refusals). Statements are compared by value (``Question.value``).

``extract``, ``judge`` and ``is_correct`` are what the harness and the task folders written for lm-eval and inspect
import; their signatures only grow (``last_digits``, for ``mul:trunc=L``), so what was written for them still runs.
"""

from __future__ import annotations

from typing import Protocol

from harness.questions.thinking import split_thinking, unwrapped
from harness.scoring.doubt import doubted
from harness.scoring.free import read_free
from harness.scoring.invented import before_invented
from harness.scoring.line import clean, read_line
from harness.scoring.numerals import is_correct, is_numeral, read_numeral
from harness.scoring.question import Question
from harness.scoring.verdicts import (
    CONFLICT,
    RULES,
    TRUNCATED,
    Extraction,
    Refusal,
    is_conflict,
    refused,
)

__all__ = ["CONFLICT", "RULES", "TRUNCATED", "Extraction", "Question", "Refusal", "extract", "is_correct"]
__all__ += ["is_conflict"]
__all__ += ["is_numeral", "judge", "read_numeral"]


class AnswerReading(Protocol):
    """What of an answer mode (harness/questions/answers.py) the scorer uses: where its answer text is, and whether it
    is
    read as free form."""

    free_form: bool

    def answer_text(self, text: str) -> str: ...


def _first_line(text: str) -> str:
    for line in split_thinking(text)[1].splitlines():
        if line.strip():
            return line.strip()
    return ""


def extract(
    text: str, base: int, expression: str, answer: AnswerReading | None = None, last_digits: int | None = None
) -> Extraction:
    """The answer ``text`` states to ``expression`` (the question, as the prompt wrote it) where the answer mode reads
    it (the first line, for the paper's and by default; what follows the thinking, in free form), and the rule that
    found it (or why there is none). ``last_digits``: the task asks for the last L digits of the value
    (``mul:trunc=L``), so a statement of the whole value answers with its last L digits."""
    question = Question.of(expression, base, last_digits)
    if question is None:
        raise ValueError(f"{expression!r} is no expression of the tasks' kind")
    if answer is not None and answer.free_form:
        found = read_free(answer.answer_text(text), question, base, expression)
    else:
        line = clean(unwrapped(answer.answer_text(text) if answer is not None else _first_line(text)), base)
        line, invented = before_invented(line, question, base)
        empty = Refusal.NOT_THE_QUESTION if invented else Refusal.EMPTY
        found = doubted(read_line(line, question, base, expression), line, question, base) if line else refused(empty)
    if found.answer is None or question.last_digits is None:
        return found
    return Extraction(question.answer(found.answer), found.rule)


def judge(
    text: str,
    base: int,
    expression: str,
    answer: AnswerReading | None,
    truncated: bool,
    last_digits: int | None = None,
) -> Extraction:
    """``extract``, except that a free-form generation the budget cut before its end is its own verdict: whatever it
    had said so far is not read as its answer (the paper's first line is read whatever its length)."""
    if truncated and answer is not None and answer.free_form:
        return refused(Refusal.TRUNCATED)
    return extract(text, base, expression, answer, last_digits)
