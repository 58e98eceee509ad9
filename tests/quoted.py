"""Numbers the docs quote from the committed reports, read back from them.

A quoted number is followed by a marker that says where it comes from, invisible where the page is rendered:

    0.975<!--= quick-greedy-n40-seed0 | series=smollm2-arith fp32 & task=add & length=2 | accuracy -->

the report (a directory under reports/, with ``/FILE`` for another CSV than results.csv), the rows (``column=value``
joined by ``&``: a value is a glob, or several separated by ``,``; ``series`` is a results row's "model precision
[+adapter]" as harness names a series, ``task`` its label: add, iter_add:3, mul) and the value: a column of the one row
left, ``sum:COLUMN``, ``mean:COLUMN``, ``min:COLUMN``, ``max:COLUMN``, ``count``, or ``pooled`` (the rows' correct over
their n). The quoted text must be the value as written: rounded to the digits it shows (``0.975``, ``8e-5``, ``42.5%``).
A number the text gives rather than quotes (a threshold, a target) is marked ``<!--= given -->``.
"""

from __future__ import annotations

import csv
import fnmatch
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKED = re.compile(
    r"(?P<number>(?:(?<![\w.>])[-−+])?\d[\d,]*(?:\.\d+)?(?:e[-−]?\d+)?%?)(?P<marker><!--=\s*(?P<key>.*?)\s*-->)"
)
# A number a reader takes for a measured value: a decimal, a percentage, a power of ten.
DECIMAL = re.compile(r"(?<![\w.])[-−]?\d+(?:\.\d+(?:e[-−]?\d+)?|e[-−]\d+|(?:\.\d+)?%)(?![\w.])")


@cache
def rows_of(report: str, file: str) -> list[dict]:
    with open(ROOT / "reports" / report / file, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if "model" in row and "precision" in row:
            adapter = Path(row.get("adapter") or "").name
            row["series"] = f"{row['model']} {row['precision']}" + (f" +{adapter}" if adapter else "")
        if row.get("task") == "iter_add" and row.get("operands"):
            row["task"] = f"iter_add:{row['operands']}"
    return rows


def value_of(key: str) -> float:
    """The value a marker's key names (see the module docstring); a key that names no value raises ValueError."""
    parts = [part.strip() for part in key.split("|")]
    if len(parts) != 3:
        raise ValueError(f"{key!r}: REPORT[/FILE] | FILTERS | FIELD")
    where, filters, field = parts
    report, _, file = where.partition("/")
    rows = rows_of(report, file or "results.csv")
    for condition in filter(None, (part.strip() for part in filters.split("&"))):
        column, _, wanted = (piece.strip() for piece in condition.partition("="))
        patterns = [pattern.strip() for pattern in wanted.split(",")]
        rows = [row for row in rows if any(fnmatch.fnmatchcase(row.get(column, ""), p) for p in patterns)]
    if not rows:
        raise ValueError(f"{key!r} matches no row")
    if field == "count":
        return len(rows)
    if field == "pooled":
        return sum(int(row["correct"]) for row in rows) / sum(int(row["n"]) for row in rows)
    operation, _, column = field.rpartition(":")
    values = [float(row[column]) for row in rows]
    if not operation:
        if len(values) != 1:
            raise ValueError(f"{key!r} matches {len(values)} rows, not one")
        return values[0]
    return {"sum": sum, "min": min, "max": max, "mean": lambda found: sum(found) / len(found)}[operation](values)


def agrees(quoted: str, value: float) -> bool:
    """Whether ``quoted`` is ``value`` written to the digits it shows."""
    text = quoted.replace(",", "").replace("−", "-").lstrip("+")
    if text.endswith("%"):
        text, value = text[:-1], value * 100
    if "e" in text:
        mantissa = text.split("e")[0].lstrip("-")
        significant = len(mantissa.replace(".", "").lstrip("0"))
        return float(f"{value:.{significant - 1}e}") == float(text)
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(value - float(text)) <= 0.5 * 10**-decimals + 1e-9


def check(text: str) -> list[str]:
    """Every marked number of ``text`` against its report: what disagrees, in words (nothing when all agree)."""
    problems = []
    for match in MARKED.finditer(text):
        if match["key"] == "given":
            continue
        try:
            value = value_of(match["key"])
        except (ValueError, KeyError, OSError) as err:
            problems.append(f"{match['number']} <!--= {match['key']} -->: {err}")
            continue
        if not agrees(match["number"], value):
            problems.append(f"{match['number']} quoted, the report says {value:g} ({match['key']})")
    return problems


def unmarked(text: str) -> list[str]:
    """The decimals, percentages and powers of ten of ``text`` that carry no marker (outside code)."""
    prose = re.sub(r"`[^`]*`", "", MARKED.sub("", re.sub(r"```.*?```", "", text, flags=re.S)))
    return DECIMAL.findall(re.sub(r"<!--.*?-->", "", prose, flags=re.S))
