"""A numeral's value in the task's base, whatever form it is written in: digits marked as another base (an annotation
or a ``0x`` prefix) are converted, and English cardinal words (read by text2num, a maintained parser) are the value
they name, which is a base-10 value written in words.

>>> in_base("17", 10, 2), in_base("6e", 16, 10), in_base("19", 2, 10) is None
('10001', '110', True)
>>> from_words("ninety-one", 10), from_words("one hundred and thirty-two", 16), from_words("one of them", 10)
('91', '84', None)
>>> from_words("a hundred and five", 10), from_words("Twelve hundred", 10), from_words("one two", 10)
('105', '1200', None)
"""

from __future__ import annotations

import re

from text_to_num import text2num

from harness.questions.problems import DIGITS, to_base

_LONGEST = 4_000  # digits: Python's int() refuses longer strings, and no converted answer is that long
# The words a cardinal is made of; a text made of nothing else (and spaces, hyphens, "and") is handed to text2num.
_CARDINAL = (
    "zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen"
    "|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million"
    "|billion|trillion"
)
WORDS = re.compile(rf"(?:an?\s+)?(?:{_CARDINAL})(?:(?:\s+|\s*-\s*)(?:and\s+)?(?:{_CARDINAL}))*", re.IGNORECASE)
_ARTICLE = re.compile(r"^an?\s+", re.IGNORECASE)  # "a hundred and five": one hundred
PREFIXED = re.compile(r"0(?P<kind>[xXbBoO])(?P<digits>[0-9a-zA-Z]+)")
PREFIX_BASES = {"x": 16, "b": 2, "o": 8}


def in_base(numeral: str, written: int, base: int) -> str | None:
    """``numeral``, written in base ``written``, as a digit string of ``base``; None where a digit is not of
    ``written`` (``19`` in binary) or it is too long to convert."""
    digits = numeral.lower()
    if not 2 <= written <= len(DIGITS) or not digits or len(digits) > _LONGEST:
        return None
    if any(char not in DIGITS[:written] for char in digits):
        return None
    return digits if written == base else to_base(int(digits, written), base)


def from_words(text: str, base: int) -> str | None:
    """The value ``text`` names in English cardinal words (all of it words of a number), as a digit string of
    ``base``; None where it is anything else."""
    words = text.strip()
    if not WORDS.fullmatch(words):
        return None
    try:
        value = text2num(re.sub(r"\s*-\s*", "-", _ARTICLE.sub("one ", words.lower())), "en")
    except ValueError:
        return None  # words of numbers that make no one number ("one two")
    return to_base(value, base) if isinstance(value, int) and value >= 0 else None
