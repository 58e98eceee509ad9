"""Words that state, label, confirm or correct an answer.

- ``keyword``: "the answer / result / sum / product / total / value [of, to or for X] is / are / equals / :",
  "answer / result = N", "X is / equals N", "X, which is N", "the last L digits of X are N" (L in digits or words),
  "Final Answer N" and "Final answer — N" (a final answer's label, no verb).
- a **final phrase** ("final answer", "the answer is", "result:") marks a statement as the final answer.
- a **label** states nothing itself and gives the next line's answer its words ("The sum is:", "Final Answer", a line
  that ends with the asked expression and ``=``).
- a **confirmation** ("Yes, 125.") states the numeral it confirms.

What takes a statement back is harness/scoring/retractions.py.

>>> is_label("**Final Answer**"), is_label("The sum of the three numbers is:"), is_label("The sum of 27 and 48 is:")
(True, True, False)
"""

from __future__ import annotations

import re
from functools import lru_cache

from harness.scoring.equations import Statement
from harness.scoring.question import IMPLICIT, Question

_COUNT = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten)"  # "the last three digits"
NOUN = re.compile(rf"\b(?:answer|result|sum|product|total|value|last\s+{_COUNT}\s+digits?)\b", re.IGNORECASE)
# "Final Answer 512", "Final answer — 512": the label of a final answer that a numeral follows with no verb or colon
FINAL_LABEL = re.compile(r"\bfinal\s+answer\b[*_]*\s*(?:[—–-]+\s*)?(?=[*_$`\\(]*\d)", re.IGNORECASE)
_VERB = r"(?:\bis\b|\bare\b|\bequals\b|\bequal\s+to\b|\b(?:should|must|would|will)\s+be\b(?=[\s*_$`\\(]*\d)|:)"
_WHICH = re.compile(r"\bwhich\s+(?:is|equals)\b", re.IGNORECASE)
_EQUALS_AFTER = re.compile(r"[*_]*\s*(?P<about>(?!))?=(?!=)\s*")  # no "of X": the group never takes part
_COPULA = re.compile(r"\b(?:is|are|equals|equal\s+to|gives|makes|yields)\b", re.IGNORECASE)
# A noun qualified as a part of the working ("the units sum is 12", "the partial product is 138"): not the answer
_WORKING = re.compile(
    r"\b(?:units?|ones|tens|hundreds|thousands|partial|running|intermediate|first|second|third|next|column|digit"
    r"|carry|new|previous|current)\s+(?:digits?\s+)?$",
    re.IGNORECASE,
)
_LETTER = re.compile(r"[a-zA-Z]")
NEGATION = re.compile(r"(?:\bnot|\bnever|n't)\s*$", re.IGNORECASE)  # "not 7 + 8 = 15", "isn't 7 + 8 = 15"

FINAL_PHRASE = re.compile(r"\bfinal\s+answer\b|\banswer\s*(?:is\b|:)|\bresult\s*(?:is\b|:)", re.IGNORECASE)
# A line that only labels the answer on the line after it ("**Final Answer**", "Final Answer:", "The sum is:", "The
# sum of the three numbers is:")
LABEL = re.compile(
    r"[\W_]*(?:the\s+|their\s+)?(?:final\s+)?(?:answer|result|sum|product|total)(?:\s+(?:of|for)\s+(?P<about>[\w\s]+?))?"
    r"(?:\s+is)?[\W_]*",
    re.IGNORECASE,
)
CONFIRMATION = re.compile(r"(?:^|(?<=[.!?]\s))[\W_]*yes\s*[,:—–-]\s*(?:it(?:'s|\s+is)\s+)?", re.IGNORECASE)


@lru_cache(maxsize=64)
def _after_noun(reach: int) -> re.Pattern[str]:
    """What follows the noun of a statement: "[of, to or for X] is / are / equals / :", X at most ``reach`` long."""
    about = rf"(?:\s+(?:of|to|for)\s+(?P<about>[^=:\n]{{0,{reach}}}?))?"
    return re.compile(rf"[*_]*{about}[*_]*\s*{_VERB}\s*:?")


def keyword_statements(line: str, question: Question, base: int) -> list[Statement]:
    """ "The answer [to X] is", "X is", "X, which is", "the last L digits of X are": each where X, if named, is the
    question. An implicit statement ("The answer is 110") on a line that names one of the prompt's examples and not
    the question is about that example."""
    if not _LETTER.search(line):
        return []  # every phrase is words: a line of working alone ("47 + 85 = 132") states nothing in them
    found = []
    after_noun = _after_noun(question.reach)
    example = None
    for noun in NOUN.finditer(line):
        match = after_noun.match(line, noun.end())
        if match is None and noun.group().lower() in ("answer", "result", "sum", "product", "total"):
            match = _EQUALS_AFTER.match(line, noun.end())  # "Answer = 15"
        if match is None or _WORKING.search(line, max(0, noun.start() - 32), noun.start()):
            continue
        if match["about"] is None:
            example = question.names_an_example(line, base) if example is None else example
            if not example:
                found.append(Statement(noun.start(), match.end(), "keyword"))
        elif question.is_named_in(match["about"], base):
            found.append(Statement(noun.start(), match.end(), "keyword"))
    if "inal" in line or "INAL" in line:  # "Final Answer 512": a scan only where "final" may be
        found += [Statement(label.start(), label.end(), "keyword") for label in FINAL_LABEL.finditer(line)]
    for verb in _COPULA.finditer(line):
        if question.is_asked(line, verb.start(), base):
            found.append(Statement(verb.start(), verb.end(), "keyword"))
    for which in _WHICH.finditer(line):
        referent = which.start()
        while referent and line[referent - 1] in " ,":  # the referent's end, without copying the line before it
            referent -= 1
        if question.is_asked(line, referent, base):
            found.append(Statement(which.start(), which.end(), "keyword"))
    return found


def is_label(line: str) -> bool:
    """Whether ``line`` only labels the answer that the next line gives."""
    label = LABEL.fullmatch(line)
    return label is not None and (label["about"] is None or IMPLICIT.fullmatch(label["about"]) is not None)
