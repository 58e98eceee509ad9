"""A free-form answer (what follows the thinking) read as a careful grader reads it, under one principle: **the answer
is what the output states as its answer to the asked question, and it is credited only when every such statement
agrees.**

- Every line is read as a first line is (harness/scoring/line.py); a JSON object by its answer field alone, however
  it is laid out; a label ("Final Answer:", "The sum is:", ``58 + 67 =``) gives the next line its words; a line that
  opens with ``=`` continues the line before it (which then states nothing of its own).
- Two statements that differ are a **conflict**: its own verdict, never correct. A later statement replaces an
  earlier one only where the output corrects it in words ("No, the carry: 47 + 85 = 132", "that's wrong ... so it
  is 122"); doubt or checking words alone ("Wait", "let me double-check", "Hmm", "Correct.") neither void nor
  replace anything. Answering again after a new thinking block replaces, since thinking is never read.
- A statement refused as malformed (a hedge, a sign, a second numeral) gives its refusal.
- Working (partial sums, checks, the prompt's examples, other expressions) is never an answer, unless nothing is
  stated and the working ends exactly on the asked computation (``steps``, none of it corrected, none going on).
- A lone numeral counts (``bare``) only where it is all that follows the thinking.
- A question the output invents and answers ("Question: 2 + 2 / Answer: 4") is not read
  (harness/scoring/invented.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.questions.thinking import unwrapped
from harness.scoring.doubt import doubted
from harness.scoring.equations import clause_end, partial_sums
from harness.scoring.invented import ANSWER_LINE, before_invented
from harness.scoring.line import clean, read_line
from harness.scoring.numerals import MARKUP, read_numeral
from harness.scoring.phrases import CONFIRMATION, FINAL_PHRASE, is_label
from harness.scoring.question import Question
from harness.scoring.retractions import CORRECTED, REPLACE, RESTART, RETRACT, SENTENCE_END, retractions
from harness.scoring.structured import json_objects
from harness.scoring.verdicts import Extraction, Refusal, differing, refused

_DECIMAL_NUMBER = re.compile(r"\d")
# A check of the answer ("Check: 67 + 58 = 125", "Let me verify: ..."): what it states is working beside a statement
_CHECK = re.compile(
    r"[\W_]*(?:let\s+me\s+|let's\s+|to\s+)?(?:double[-\s]?check|re-?check|check|verify|verifying|verification|checking)\b",
    re.IGNORECASE,
)
_ALNUM = re.compile(r"[0-9a-zA-Z]")


@dataclass
class Claim:
    """One statement of the answer: its reading, whether it says it is the final answer, the line it is on, and
    whether it is made in a check (which never conflicts with a statement of the answer)."""

    reading: Extraction
    final: bool
    line: int
    check: bool = False


def _units(text: str, base: int, expression: str) -> list[tuple[str, Extraction | None, bool]]:
    """The answer as (a line, None, False) and (its JSON objects: "", the answer field's reading, True), in order."""
    units: list[tuple[str, Extraction | None, bool]] = []
    cursor = 0
    for start, end, reading in json_objects(text, base, expression):
        units += [(line, None, False) for line in text[cursor:start].splitlines()]
        units.append(("", reading, True))
        cursor = end
    units += [(line, None, False) for line in text[cursor:].splitlines()]
    return [unit for unit in units if unit[2] or _ALNUM.search(unit[0])]


class _Reader:
    """The state of one free-form reading: the claims so far and the lines of working."""

    def __init__(self, question: Question, base: int, expression: str, only: bool):
        self.question, self.base, self.expression, self.only = question, base, expression, only
        self.claims: list[Claim] = []
        self.working: list[tuple[int, str]] = []  # (line number, text)
        self.worked = False  # whether working with numbers was read since the last claim
        self.previous = ""  # the line before, whose question a "No" may answer
        self.doubted: list[str] = []  # what stands since the last retraction, checks apart: every number explained

    def read(self, line: str, number: int) -> None:
        """One line into the claims, its retractions applied (harness/scoring/retractions.py)."""
        marks = retractions(line, self.previous)
        self.previous = line
        bounds = [0] + [point for start, end, _ in marks for point in (start, end)] + [len(line)]
        pieces = [line[bounds[i] : bounds[i + 1]] for i in range(0, len(bounds), 2)]
        claims = [
            self._claim(piece, number, corrected=index > 0, alone=self.only and not marks)
            for index, piece in enumerate(pieces)
        ]
        for index, (piece, claim) in enumerate(zip(pieces, claims, strict=True)):
            kind = marks[index][2] if index < len(marks) else None
            if kind == REPLACE and claims[index + 1] is None:
                kind = None  # "actually" with no new answer after it: doubt
            if kind in (RETRACT, REPLACE, RESTART):
                self.doubted = []  # taken back, with what came before it
            elif not _CHECK.match(piece):
                self.doubted.append(piece)
            if kind == RESTART:
                self.claims, self.working, self.worked = [], [], False
                continue
            if kind in (RETRACT, REPLACE):
                if claim is None and not _DECIMAL_NUMBER.search(piece):
                    self._void_last()  # nothing said since the last statement: it is what is taken back
                continue  # a statement just before a retraction is void
            if claim is not None:
                self.claims.append(claim)
                self.worked = False
            elif _DECIMAL_NUMBER.search(piece):
                self.worked = True
        self.working.append((number, pieces[-1] if marks else line))

    def _void_last(self) -> None:
        """The statement (and the working on its line), or else the line of working, that a retraction with nothing
        before it takes back."""
        if self.claims and not self.worked:
            voided = self.claims.pop()
            self.working = [(line, text) for line, text in self.working if line != voided.line]
        elif self.working:
            self.working.pop()
        self.worked = False

    def _claim(self, piece: str, number: int, corrected: bool, alone: bool) -> Claim | None:
        if not piece.strip():
            return None
        check = _CHECK.match(piece)
        in_check = check is not None
        if in_check:  # a check's sentence is working; the rest of the piece is read as any other
            end = SENTENCE_END.search(piece, check.end())
            rest = self._claim(piece[end.end() :], number, corrected, alone) if end is not None else None
            if rest is not None:
                return rest
        reading = read_line(piece, self.question, self.base, self.expression, allow_bare=alone, questions=False)
        if reading.rule == "steps":
            return None  # partial sums are working: read only where nothing is stated (``verdict``)
        if not reading.states:
            found = self._in_words(piece, corrected)
            return None if found is None else Claim(Extraction(found, "keyword"), False, number, in_check)
        if reading.rule == "boxed" or FINAL_PHRASE.search(piece) or "\\boxed" in piece:
            final = reading.rule in ("keyword", "equals") and FINAL_PHRASE.search(piece) and reading.answer
            return Claim(Extraction(reading.answer, "final") if final else reading, True, number, in_check)
        return Claim(reading, False, number, in_check)

    def _in_words(self, piece: str, corrected: bool) -> str | None:
        """A corrected answer in a pronoun's words ("so it is 122"), or a confirmation ("Yes, 125.")."""
        start = None
        if corrected and (statement := next(reversed(list(CORRECTED.finditer(piece))), None)) is not None:
            start = statement.end()
        elif (confirmation := next(reversed(list(CONFIRMATION.finditer(piece))), None)) is not None:
            start = confirmation.end()
        if start is None:
            return None
        found = read_numeral(piece[start : clause_end(piece, start, len(piece))], self.base, self.expression)
        return found if isinstance(found, str) else None

    def verdict(self) -> Extraction:
        """Every claim agreeing, or the conflict; without a claim, the working's partial sums."""
        claims = [claim for claim in self.claims if not claim.check] or self.claims
        if not claims:
            steps = partial_sums("\n".join(text for _, text in self.working), self.question, self.base)
            return steps or refused(Refusal.NOT_THE_QUESTION)
        malformed = [claim.reading for claim in claims if claim.reading.answer is None]
        if malformed:
            return malformed[-1]
        if len(claims) > 1 and len({self.question.value(claim.reading.answer) for claim in claims}) > 1:
            return differing([claim.reading.answer for claim in claims])
        finals = [claim for claim in claims if claim.final]
        return (finals or claims)[-1].reading


def _opens_onto_next(line: str) -> bool:
    """Whether a line ends where its answer would begin (``=`` or ``:``): a label of the next line, if it states
    nothing itself."""
    return line.rstrip(MARKUP).endswith(("=", ":"))


def read_free(text: str, question: Question, base: int, expression: str) -> Extraction:
    """What a free-form answer states as its answer (see the module's docstring)."""
    units = _units(unwrapped(text), base, expression)
    if not units:
        return refused(Refusal.NOTHING_AFTER_THINKING)
    reader = _Reader(question, base, expression, only=len(units) == 1)
    carry, previous, previous_number, invented = "", "", -1, False
    for number, (raw, structured, is_object) in enumerate(units):
        if is_object:
            if structured is not None:
                reader.claims.append(Claim(structured, True, number))
            continue
        line = clean(raw, base)
        if invented and ANSWER_LINE.match(line):
            invented = False
            continue  # the answer to a question the output invented (harness/scoring/invented.py)
        line, invented = before_invented(line, question, base)
        if invented and not _ALNUM.search(line):
            continue
        if is_label(line):
            carry = "The final answer is"
            continue
        if carry:
            line, carry = f"{carry} {line}", ""
        elif line.lstrip(MARKUP).startswith("=") and previous:
            line = f"{previous} {line}"
            reader.claims = [claim for claim in reader.claims if claim.line != previous_number]
        previous, previous_number = line, number
        if _opens_onto_next(line) and not read_line(line, question, base, expression, allow_bare=False).states:
            carry = line.rstrip(MARKUP)  # "58 + 67 =", "The sum is:": the next line completes it
            continue
        reader.read(line, number)
    return doubted(reader.verdict(), "\n".join(reader.doubted), question, base)
