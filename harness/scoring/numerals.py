"""Numerals in base p: what one is, how it is written around (markup, annotations), and exact match by value.

What stands where an answer should be must be **one whole numeral in the task's base**, alone in its clause:

>>> read_numeral("**541**.", 10)
'541'
>>> read_numeral("1F_{16}", 16)
'1f'
>>> read_numeral("1,234", 10)
'1234'
>>> read_numeral("0xDC", 16), read_numeral("10001 (in binary)", 2), read_numeral("132 ✓", 10)
('dc', '10001', '132')

A numeral marked as another base, or written in words, is read into its value in the task's base (the same answer in
another form), and an aside that restates the value is no second numeral:

>>> read_numeral("17₁₀", 2), read_numeral("0x84", 10), read_numeral("ninety-one", 10)
('10001', '132', '91')
>>> read_numeral("6e_{16} (110 in base 10)", 16), read_numeral("132 (one hundred thirty-two)", 10)
('6e', '132')
>>> read_numeral("132 (one hundred twenty-two)", 10).rule
'none: a second numeral follows'
>>> read_numeral("-15", 10).rule
'none: signed'
>>> read_numeral("15 or 16", 10).rule
'none: a second numeral follows'
>>> read_numeral("56 *", 10).rule
"none: an operator follows the numeral (unpaired '*', not markdown)"

Leading zeros are allowed (fixed-width answers are answers); in bases up to 10 a comma between groups of exactly
three digits is a thousands separator, and no other separator is. ``is_correct`` compares digit strings, leading
zeros and letter case aside, so a numeral of any length is judged (Python's ``int`` refuses strings past 4,300
digits and reads ``+15``, ``1_5`` and non-ASCII digits, which no answer is).
"""

from __future__ import annotations

import re
from functools import cache

from harness.questions.problems import DIGITS
from harness.scoring.values import PREFIX_BASES, PREFIXED, from_words, in_base
from harness.scoring.verdicts import Extraction, Refusal, refused, unpaired, written_in

SUBSCRIPT_DIGITS = str.maketrans("₀₁₂₃₄₅₆₇₈₉", "0123456789")
ANNOTATION = (  # a base written after the numeral: _{16}, _(16), _16, ₁₆, (base 16), (in base 16), in base 16
    r"(?:_\{(?P<b1>\d+)\}|_\((?P<b2>\d+)\)|_(?P<b3>\d+)|(?P<b4>[₀-₉]+)"
    r"|\s*\((?:in\s+)?base[\s-]*(?P<b5>\d+)\)|\s+in\s+base\s+(?P<b6>\d+)"
    r"|\s*\((?:in\s+)?(?P<w1>binary|octal|decimal|hexadecimal|hex)\)|\s+in\s+(?P<w2>binary|octal|decimal|hexadecimal|hex))"
)
_BASE_WORDS = {"binary": "2", "octal": "8", "decimal": "10", "hex": "16", "hexadecimal": "16"}
# a prefix that names the task's own base
_PREFIXES = {base: (f"0{kind}", f"0{kind.upper()}") for kind, base in PREFIX_BASES.items()}
_IS_THE_ANSWER = re.compile(r"\s+is\s+the\s+(?:final\s+)?(?:answer|result|sum|product|total)\W*$", re.IGNORECASE)
MARKUP = " \t*_`$\"'"
_LEADING = " \t*_`$\"'[\\"
_TRAILING = " \t`$\"'.,;:!?]\\✓✔✅"
_EMPHASIS = "*_"
_OPERATOR = re.compile(r"[-+*/×÷^=<>]")
_EMPHASIS_RUN = re.compile(rf"[{re.escape(_EMPHASIS)}]+$")
EMPHASIS_REACH = 256  # how far back an emphasis opener is looked for (keeps reading linear)
DECIMAL_DIGIT = re.compile(r"\d")


@cache
def numeral_pattern(base: int) -> str:
    """A numeral of the base as a regular expression (with thousands commas in bases up to 10)."""
    if base <= 10:
        digit = f"[0-{DIGITS[base - 1]}]"
        return rf"{digit}+(?:,{digit}{{3}})*"
    return rf"[0-9{DIGITS[10:base]}]+"


def normal(numeral: str) -> str:
    """A numeral as a digit string to compare: lower case, no separators, no leading zeros.

    >>> normal("0,042")
    '42'
    """
    return numeral.replace(",", "").lower().lstrip("0") or "0"


@cache
def digit_chars(base: int) -> frozenset[str]:
    return frozenset(DIGITS[:base] + DIGITS[10:base].upper())


def _numeral_regex(digits: str, annotation: str) -> re.Pattern[str]:
    return re.compile(rf"(?P<sign>[-+−])?\s*\(?(?P<num>{digits})\)?(?P<frac>\.\d+)?{annotation}", re.IGNORECASE)


@cache
def _pattern(base: int) -> re.Pattern[str]:
    """A numeral of the base, its base annotated or not."""
    return _numeral_regex(numeral_pattern(base), f"{ANNOTATION}?")


_MAY_MARK_A_BASE = re.compile(r"[_(₀-₉]|\sin\s")  # what every base annotation holds
# A numeral of any base's digits with the base annotated (``17₁₀`` in a base-2 task): read in the base it names
_ANNOTATED = _numeral_regex(r"[0-9a-z]+(?:,[0-9]{3})*", ANNOTATION)


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
        run = _EMPHASIS_RUN.search(text)
        if not run:
            break
        start = run.start()
        opened = start > 0 and not text[start - 1].isspace()
        opened = opened and _opens_emphasis(before + text[max(0, start - EMPHASIS_REACH) : start], run.group())
        if not opened:
            return unpaired(run.group())
        text = text[:start]
    while text.endswith(")") and text.count(")") > text.count("("):  # a closing aside's bracket
        text = text[:-1].rstrip(_TRAILING)
    return text


def read_numeral(segment: str, base: int, expression: str | None = None, before: str = "") -> Extraction | str:
    """The one numeral ``segment`` consists of, as a digit string of ``base`` (a str), or why it is none (an
    Extraction). ``before`` is the line's text before the segment (where markdown emphasis may have opened)."""
    lead = len(segment) - len(segment.lstrip(_LEADING))
    before, text = before + segment[:lead], segment[lead:]
    text = _strip_trailing(_IS_THE_ANSWER.sub("", text), before)
    if isinstance(text, Extraction):
        return text
    text = text.strip()
    if not text:
        return refused(Refusal.NOTHING_THERE)
    if text.startswith(_PREFIXES.get(base, ())) and len(text) > 2:
        text = text[2:]
    elif (prefixed := PREFIXED.fullmatch(text)) and not _pattern(base).fullmatch(text):
        written = PREFIX_BASES[prefixed["kind"].lower()]
        return in_base(prefixed["digits"], written, base) or written_in(str(written), base)
    if expression and "".join(text.split()) == "".join(expression.split()):
        return refused(Refusal.ECHO)
    match = _pattern(base).match(text)
    if match is None or (match.end() < len(text) and _MAY_MARK_A_BASE.search(text, match.end())):
        annotated = _ANNOTATED.match(text)  # digits of another base, followed by their base's mark
        match = annotated if annotated and (not match or annotated.end() > match.end()) else match
    if not match:
        return from_words(text, base) or refused(Refusal.NO_NUMERAL)
    value = _value(match, base)
    if match.end() < len(text):
        rest = text[match.end() :]
        aside = _ASIDE.fullmatch(rest)
        restated = read_numeral(aside["said"], base) if aside else None
        if isinstance(restated, str) and isinstance(value, str):
            return value if normal(restated) == normal(value) else refused(Refusal.SECOND_NUMERAL)
        if _OPERATOR.search(rest):
            return refused(Refusal.OPERATOR_FOLLOWS)
        if re.search(rf"(?<![a-z]){numeral_pattern(base)}(?![a-z])", rest, re.IGNORECASE) or re.search(r"\d", rest):
            return refused(Refusal.SECOND_NUMERAL)
        return refused(Refusal.TEXT_FOLLOWS)
    return value


# An aside after a numeral that may restate it: "(110 in base 10)", "(= 17 in decimal)", "(one hundred thirty-two)",
# "(that's five hundred twelve)", "(which is 0x200)"
_ASIDE = re.compile(
    r"\s*\(\s*(?:=|i\.e\.,?|that\s+is,?|that's,?|which\s+is,?|or,?)?\s*(?P<said>[^()]+?)\s*\)\s*", re.IGNORECASE
)


def _value(match: re.Match[str], base: int) -> Extraction | str:
    """A matched numeral's value in ``base``: refused where signed or fractional, converted where its annotation
    names another base (refused where its digits are not of that base)."""
    if match["sign"]:
        return refused(Refusal.SIGNED)
    if match["frac"]:
        return refused(Refusal.FRACTION)
    annotated = next((match[f"b{i}"] for i in range(1, 7) if match[f"b{i}"]), None)
    word = match["w1"] or match["w2"]
    annotated = _BASE_WORDS[word.lower()] if word else annotated
    numeral = match["num"].replace(",", "").lower()
    if annotated is None:
        return numeral
    written = int(annotated.translate(SUBSCRIPT_DIGITS))
    return in_base(numeral, written, base) or written_in(str(written), base)


def is_numeral(text: str, base: int) -> bool:
    """Whether ``text`` is what a reading yields: ASCII digits of ``base`` (either letter case), nothing else.

    >>> is_numeral("1f", 16), is_numeral("+15", 10), is_numeral("١٥", 10)
    (True, False, False)
    """
    return bool(text) and text.isascii() and all(char in DIGITS[:base] for char in text.lower())


def is_correct(extracted: str | None, gold: str, base: int) -> bool:
    """Exact match by value of an answer a reading can produce: digit strings compared, leading zeros and letter
    case aside (no int(): a numeral of any length is judged).

    >>> is_correct("0042", "42", 10), is_correct("1A", "1a", 16), is_correct("43", "42", 10)
    (True, True, False)
    """
    if extracted is None or not is_numeral(extracted, base) or not is_numeral(gold, base):
        return False
    return normal(extracted) == normal(gold)
