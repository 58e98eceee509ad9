"""A retraction is a statement about a statement: words by which an output takes back what it stated, and what they
take back.

- **retract** ("no —", "that's wrong", "I forgot the carry", "Correction: ..."): the answer just stated, or else the
  line of working just read, is void; what follows may state the corrected answer in a pronoun's words ("so it is
  132").
- **replace** ("Wait, actually ...", "Actually, ..."): the answer just stated is void where a new one follows in the
  same line; without one, "actually" is doubt and takes back nothing.
- **restart** ("let me start over", "let me redo this", "from scratch"): everything stated and worked before it is
  void. Nothing after it leaves no answer at all.
- **answers** (a "No" that answers the output's own question: "Did I forget the carry? No, ..."): takes back nothing;
  what follows may state the answer in words ("Is it 122? No, it is 132."). A "No" after a question about the
  answer's correctness ("Is that right? No, ...") retracts it.

What retracts nothing: "correction" as a noun ("no correction needed"), an error owned as already fixed ("I made an
error earlier but fixed it"), a "No" that denies an error ("No, there are none"), doubt and checking words ("Wait",
"Hmm", "let me double-check", "Correct."), and doing the work again to check it ("I'll redo it to verify"). A
correction word retracts only where it acts on what was stated: not in a condition or a pleasantry ("tell me if I
made a mistake", "let me know if my answer is wrong"), not denied ("nothing was wrong", "I didn't make a mistake"),
and "from scratch" only where the output sets out to start again ("let me start from scratch"), not where it says
how the work was done ("computed from scratch").

>>> [kind for _, _, kind in retractions("The answer is 122. Wait, actually it is 132.")]
['replace']
>>> [kind for _, _, kind in retractions("No, I included it.", previous="Did I forget the carry?")]
['answers']
>>> retractions("No correction needed."), retractions("I made an error earlier but fixed it above.")
([], [])
>>> [kind for _, _, kind in retractions("47 + 85 = 122, let me start over.")]
['restart']
>>> [kind for _, _, kind in retractions("Is that right? No, it is 132.")], retractions("I'll redo it to check.")
(['retract'], [])
>>> retractions("47 + 85 = 132. Tell me if I made a mistake!"), retractions("Nothing was wrong with the carry.")
([], [])
>>> retractions("47 + 85 = 132, computed from scratch."), retractions("I didn't make a mistake: 132.")
([], [])
>>> [kind for _, _, kind in retractions("That was wrong; let me start from scratch.")]
['retract', 'restart']
"""

from __future__ import annotations

import re

RETRACT, REPLACE, RESTART, ANSWERS = "retract", "replace", "restart", "answers"

# Each alternative opens with a word boundary or a bracket, so the scan of a line is quick; where a word counts only
# at a sentence's start ("Correction:", "No,", "Actually,") ``_kind`` looks at what precedes it.
CORRECTION = re.compile(
    r"\b(?:oops,?\s+)?(?:scratch\s+that|on\s+second\s+thought"
    r"|i\s+made\s+an?\s+(?:mistake|error)|i\s+(?:forgot|missed|dropped)\b|my\s+(?:mistake|error|bad))\b"
    r"|\b(?:that|this|it)(?:'s|\s+is|\s+was)\s+(?:wrong|incorrect|not\s+(?:right|correct))\b"
    r"|\b(?:is|was)\s+(?:wrong|incorrect)\b|\((?:wrong|incorrect)\)"
    r"|(?P<correction>\bcorrection\s*[:—–-])"
    r"|(?P<no>\bno\s*[,.!—–:-])"
    r"|(?P<actually>\b(?:(?:wait|hmm|oh)\b[\s,.!]*)?actually\b[,:]?)"
    r"|(?P<restart>\b(?:let\s+me|let's|i(?:'ll|\s+will)|i\s+(?:need|have)\s+to)\s+(?:start\s+(?:over|again)"
    r"|re-?do\b|try\s+again)|\bfrom\s+scratch\b|\bstarting\s+over\b)",
    re.IGNORECASE,
)
# A word each alternative of CORRECTION contains ("not" holds "no")
_WORDS = ("no", "wrong", "incorrect", "forgot", "missed", "dropped", "mistake", "error", "bad", "scratch", "second")
_WORDS += ("correction", "actually", "start", "redo", "re-do", "again")
# After a retraction: "so it is 122", "that makes 122", the corrected answer in a pronoun's words.
CORRECTED = re.compile(
    r"(?:\b(?:so|thus|hence|therefore|then)\s*,?\s*)?\b(?:it|that|the\s+(?:answer|result|sum|product))"
    r"(?:'s|\s+is|\s+must\s+be|\s+should\s+be|\s+makes)\s+",
    re.IGNORECASE,
)
_FIXED = re.compile(r"\b(?:fixed|corrected|accounted\s+for|resolved)\b", re.IGNORECASE)
_DENIAL = re.compile(
    r"\s*(?:there\s+(?:are|is|were|was)\s+(?:none|no)\b|(?:it|that)(?:'s|\s+is)\s+(?:right|correct|fine)\b"
    r"|(?:no\s+)?(?:errors?|mistakes?)\b|all\s+good\b)",
    re.IGNORECASE,
)
SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
# A question about the answer's correctness: a "No" after it takes the answer back ("Is that right? No, ...")
_ASKS_IF_RIGHT = re.compile(r"\b(?:right|correct|accurate|true|sure|ok(?:ay)?)\W*\?$", re.IGNORECASE)
# Doing the work again to check it: doubt, not a restart ("I'll redo the sum to double-check")
_TO_CHECK = re.compile(r"[^.!?]*?\bto\s+(?:double[-\s]?check|check|verify|confirm|be\s+sure|make\s+sure)\b", re.I)


# Before a correction word in its clause: a condition ("if I made a mistake", "whether it is wrong") or a denial
# ("nothing was wrong", "I didn't make a mistake", "none of it is wrong"): it takes nothing back
_CONDITION = re.compile(r"\b(?:if|whether|in\s+case|unless|should\s+i)\b", re.IGNORECASE)
_DENIED = re.compile(r"\b(?:nothing|none|not|never|no(?:body)?|neither|nor)\b|n't\b", re.IGNORECASE)
# Setting out to start again: "from scratch" is a restart only beside one of these in its sentence
_AGAIN = re.compile(
    r"\b(?:let\s+me|let's|i(?:'ll|\s+will|\s+need\s+to|\s+have\s+to|\s+should)|start(?:ing)?|restart|re-?do"
    r"|again|over)\b",
    re.IGNORECASE,
)
_CLAUSE_MARKS = ".!?;:,—–("


def _clause_before(line: str, start: int) -> str:
    """The words of ``line`` before ``start`` in the same clause."""
    cut = max(line.rfind(mark, 0, start) for mark in _CLAUSE_MARKS)
    return line[cut + 1 : start]


def _sentence_before(line: str, start: int) -> str:
    """The words of ``line`` before ``start`` in the same sentence."""
    cut = max(line.rfind(mark, 0, start) for mark in ".!?")
    return line[cut + 1 : start]


def _opens_sentence(line: str, start: int, marks: str = ".!?") -> bool:
    """Whether the word at ``start`` opens the line or a sentence (a mark of ``marks``, then spaces, before it)."""
    before = line[:start].rstrip()
    return not before or (before[-1] in marks and (len(before) == start or line[start - 1].isspace()))


def _kind(line: str, mark: re.Match[str], previous: str) -> str | None:
    """What a correction word found in ``line`` does, or None where it takes back nothing."""
    if _CONDITION.search(_sentence_before(line, mark.start())):
        return None  # "tell me if I made a mistake", "let me know whether it is wrong"
    if not mark["no"] and _DENIED.search(_clause_before(line, mark.start())):
        return None  # "nothing was wrong", "I didn't make a mistake"
    if mark["restart"]:
        if mark.group().lower().startswith("from") and not _AGAIN.search(_sentence_before(line, mark.start())):
            return None  # "computed from scratch": how the work was done
        return None if _TO_CHECK.match(line, mark.end()) else RESTART
    if mark["actually"]:
        said_wait = not mark.group().lower().startswith("actually")
        return REPLACE if said_wait or _opens_sentence(line, mark.start()) else None
    if mark["correction"] and not _opens_sentence(line, mark.start(), ".!?,;"):
        return None  # "correction" as a noun: "no correction needed", "after the correction"
    if mark["no"]:
        if not _opens_sentence(line, mark.start(), ".!?,"):
            return None  # "no" inside a sentence ("there is no ...") is no reply
        if _DENIAL.match(line, mark.end()):
            return None
        before = line[: mark.start()].rstrip() or previous.rstrip()
        return ANSWERS if before.endswith("?") and not _ASKS_IF_RIGHT.search(before) else RETRACT
    sentence = SENTENCE_END.search(line, mark.end())
    if _FIXED.search(line, mark.end(), sentence.start() if sentence else len(line)):
        return None  # an error owned as already fixed
    return RETRACT


def retractions(line: str, previous: str = "") -> list[tuple[int, int, str]]:
    """(start, end, kind) of every word in ``line`` that takes something back (``previous``: the line before, where
    a "No" opening this one may answer its question)."""
    lowered = line.lower()
    if not any(word in lowered for word in _WORDS):
        return []  # most lines: none of the words any retraction needs (a scan of the pattern costs more)
    found = []
    for mark in CORRECTION.finditer(line):
        kind = _kind(line, mark, previous)
        if kind is not None:
            found.append((mark.start(), mark.end(), kind))
    return found
