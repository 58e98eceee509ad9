"""Answers in a structure: ``\\boxed{...}`` (braces balanced) and a JSON object's answer field, read by its key
however the model wrote the object (trailing commas, comments, single quotes, a Python dict, prose around it:
repaired by json-repair, a maintained parser) and never from another field.

>>> [reading.answer for _, _, reading in json_objects('Sure: {"work": "47 + 85 = 132", "answer": 131,}', 10, "47 + 85")]
['131']
>>> [reading.answer for _, _, reading in json_objects("{'answer': 132}  // a Python dict", 10, "47 + 85")]
['132']
>>> boxes("so \\\\boxed{6E_{16}}")
[(3, 18, '6E_{16}')]
"""

from __future__ import annotations

import json
import re

import json_repair

from harness.scoring.numerals import read_numeral
from harness.scoring.verdicts import Extraction

ANSWER_KEYS = ("answer", "final_answer", "finalanswer", "result", "final_result")
_OBJECT_START = re.compile(r"(?<![\\\w_^])\{(?=\s*(?:[\"']|[A-Za-z_]\w*\s*:))")
_BOX = re.compile(r"\\boxed\s*\{")
_LONGEST_OBJECT = 20_000  # characters: an object longer than this is prose, not an answer


def boxes(line: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of every outermost ``\\boxed{...}``, braces balanced (``\\boxed{6E_{16}}`` is one box);
    one pass over the line."""
    found, opened, depth = [], None, 0
    if "\\boxed" not in line:
        return []
    starts = {match.end() - 1: match.start() for match in _BOX.finditer(line)}
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


def lone_box(segment: str) -> str | None:
    """The content of the one ``\\boxed{}`` that is all of ``segment`` but markup."""
    core = segment.strip(" \t`$\"'.,;:!?*_")
    found = boxes(core)
    if len(found) != 1 or found[0][:2] != (0, len(core)):
        return None
    return found[0][2]


def _object_end(text: str, start: int) -> int | None:
    """Where the object that opens at ``start`` closes (braces balanced outside quoted strings), or None."""
    depth, quote, escaped = 0, "", False
    for index in range(start, min(len(text), start + _LONGEST_OBJECT)):
        char = text[index]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


def _parsed(source: str) -> object:
    try:
        return json.loads(source)
    except (ValueError, RecursionError):
        try:
            return json_repair.loads(source)
        except (ValueError, RecursionError, IndexError, TypeError):
            return None


def json_objects(text: str, base: int, expression: str) -> list[tuple[int, int, Extraction | None]]:
    """(start, end, its answer field's reading, or None where it has none) of every JSON-like object in ``text``,
    however it is laid out (over several lines, in a fence, after prose). Nothing inside an object is read as a
    line."""
    found, covered = [], 0
    for match in _OBJECT_START.finditer(text):
        start = match.start()
        if start < covered:
            continue
        end = _object_end(text, start)
        if end is None:
            continue
        record = _parsed(text[start:end])
        if isinstance(record, dict):
            found.append((start, end, answer_field(record, base, expression)))
            covered = end
    return found


def answer_field(record: dict, base: int, expression: str) -> Extraction | None:
    """The reading of a record's answer field (``answer``, ``final_answer``, ``result``, any letter case), or None
    where it has none."""
    keys = {str(key).lower(): key for key in record}
    key = next((keys[name] for name in ANSWER_KEYS if name in keys), None)
    if key is None:
        return None
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return Extraction(None, f"none: the JSON answer is {type(value).__name__}, not a numeral")
    found = read_numeral(str(value), base, expression)
    return Extraction(found, "json") if isinstance(found, str) else found
