"""A question the output poses itself and answers ("Question: 2 + 2 / Answer: 4", "Q: ... A: ...", a few-shot
pattern carried on past the asked question) is not an answer to the asked question: what follows its opening on the
line, and the answer line right after it, are not read. A "Question:" that restates the asked question (its
operands, or the expression) opens nothing: what answers it is read as any statement.

>>> from harness.scoring.question import Question
>>> asked = Question.of("123 + 389", 10)
>>> line = "123 + 389 = 512. Question: 2 + 2? Answer: 4"
>>> line[: invented_at(line, asked, 10)]
'123 + 389 = 512. '
>>> invented_at("Question: What is 123 + 389?", asked, 10) is None, bool(ANSWER_LINE.match("A: 4"))
(True, True)
"""

from __future__ import annotations

import re

from harness.scoring.question import Question

# "Question:", "Q:", "Question 2:", "Q." opening the line or a sentence
INVENTED = re.compile(r"(?:^|(?<=[.!?:]\s))[\W_]*(?:question|q)\s*\d*\s*[:.)]\s*", re.IGNORECASE)
# The invented question's answer line: "Answer: 4", "A: 4"
ANSWER_LINE = re.compile(r"[\W_]*(?:answer|a)\s*\d*\s*[:.)]\s*", re.IGNORECASE)
_ASKED_END = re.compile(r"\?|\b(?:answer|a)\s*[:.)]", re.IGNORECASE)


def invented_at(line: str, question: Question, base: int) -> int | None:
    """Where in ``line`` a question the output invents opens (None: none does)."""
    if "q" not in line and "Q" not in line:
        return None  # no "Question" nor "Q": most lines, decided without the pattern's scan
    for found in INVENTED.finditer(line):
        end = _ASKED_END.search(line, found.end())
        asked = line[found.end() : end.start() if end else len(line)]
        if not question.is_named_in(asked, base):
            return found.start()
    return None


def before_invented(line: str, question: Question, base: int) -> tuple[str, bool]:
    """``line`` up to where a question the output invents opens, and whether one does."""
    cut = invented_at(line, question, base)
    return (line, False) if cut is None else (line[:cut].rstrip(), True)
