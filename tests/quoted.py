"""Numbers the docs quote from the committed reports and bench results, read back from them.

A quoted number is a reference-style link, readable raw and a link where the page is rendered: the number is the
link's text and its definition, at the page's end, names the report file and, in its title, the rows and the value::

    fp32 answers [0.975][q2] of 2-digit additions
    ...
    [q2]: ../reports/quick-greedy-n40-seed0/results.csv "series=smollm2-arith fp32 & task=add & length=2 | accuracy"

A CSV's rows are chosen by ``column=value`` conditions joined by ``&`` (a value is a glob, or several separated by
``,``; ``series`` is a results row's "model precision [+adapter]" as harness names a series, ``task`` its label: add,
iter_add:3, mul) and the value is a column of the one row left, ``sum:COLUMN``, ``mean:COLUMN``, ``min:COLUMN``,
``max:COLUMN``, ``count``, or ``pooled`` (the rows' correct over their n). A JSON file's value is a dotted path
(``eval.vllm.seconds``; a list's items by index). The quoted text must be the value as written: rounded to the digits
it shows (``0.975``, ``8e-5``, ``42.5%``), an integer exactly. A number the text gives rather than quotes (a threshold,
a target) links ``[given]``.

Besides each value: every definition is quoted, and the definitions are numbered in the order the page first quotes
them, so a number whose link was removed, or two figures swapped with their links, are caught as well. Tables of a
report's figures are generated whole between ``<!-- generated: KIND REPORT -->`` and ``<!-- /generated -->``
(``generated_tables``; ``python -m tests.quoted --write PAGE`` writes them).
"""

from __future__ import annotations

import csv
import fnmatch
import json
import re
import sys
from functools import cache
from pathlib import Path

from harness.reports.summary import Pooled, series_label, task_label
from harness.runs.results import read_results

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"[-−+]?\d[\d,]*(?:\.\d+)?(?:e[-−]?\d+)?%?"
QUOTE = re.compile(rf"\[(?P<number>{NUMBER})\]\[(?P<id>q\d+|given)\]")
DEFINITION = re.compile(r'^\[(?P<id>q\d+|given)\]: (?P<path>\S+)(?: "(?P<key>[^"]*)")?\s*$', re.M)
# A number a reader takes for a measured value: a decimal, a percentage, a power of ten.
DECIMAL = re.compile(r"(?<![\w.])[-−]?\d+(?:\.\d+(?:e[-−]?\d+)?|e[-−]\d+|(?:\.\d+)?%)(?![\w.])")
GENERATED = re.compile(r"<!-- generated: (?P<kind>\w+) (?P<report>[\w.-]+) -->\n.*?<!-- /generated -->", re.S)


@cache
def rows_of(path: Path) -> list[dict]:
    """A CSV file's rows; a numprec results file's with each row's series and task label as harness names them
    (harness/reports/summary.py's series_label and task_label, over the rows as harness.runs.results reads them)."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if rows and {"model", "precision", "adapter", "task"} <= set(rows[0]):
        cells, damaged = read_results(path)
        assert not damaged and len(cells) == len(rows), f"{path}: rows harness.runs.results does not read"
        for row, cell in zip(rows, cells, strict=True):
            row["series"], row["task"] = series_label(cell), task_label(cell)
    return rows


def csv_value(path: Path, key: str) -> float:
    filters, _, field = (part.strip() for part in key.rpartition("|"))
    rows = rows_of(path)
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


def json_value(path: Path, key: str) -> float:
    """A dotted path's value; ``*`` takes every item of a list, a step in brackets is a key with dots in it
    (``recipes.[margin-0.05].bits``), and ``min:``, ``max:`` or ``mean:`` before the path reduce what it finds
    (``max:train.rows.*.data_share``)."""
    operation, _, dotted = key.rpartition(":")
    found = [json.loads(path.read_text(encoding="utf-8"))]
    for bracketed, plain in re.findall(r"\[([^\]]+)\]|([^.\[]+)", dotted):
        step = bracketed or plain
        if step == "*":
            found = [item for value in found for item in value]
        else:
            found = [value[int(step)] if isinstance(value, list) else value[step] for value in found]
    values = [float(value) for value in found]
    if not operation:
        if len(values) != 1:
            raise ValueError(f"{key!r} finds {len(values)} values, not one")
        return values[0]
    return {"min": min, "max": max, "mean": lambda v: sum(v) / len(v)}[operation](values)


def value_of(path: Path, key: str) -> float:
    """The value a definition names (see the module docstring); one that names no value raises ValueError."""
    if path.suffix == ".json":
        return json_value(path, key)
    return csv_value(path, key)


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


def definitions(text: str) -> dict[str, tuple[str, str]]:
    return {m["id"]: (m["path"], m["key"] or "") for m in DEFINITION.finditer(text)}


def check(text: str, page: Path = ROOT / "docs" / "results.md") -> list[str]:
    """Every quoted number of ``text`` (a page at ``page``) against its definition's report, every definition quoted,
    in order: what disagrees, in words (nothing when all agree)."""
    defined = definitions(text)
    problems = []
    first_quoted: list[str] = []
    for match in QUOTE.finditer(text):
        name = match["id"]
        if name not in first_quoted:
            first_quoted.append(name)
        if name == "given":
            continue
        if name not in defined:
            problems.append(f"[{match['number']}][{name}]: no definition of [{name}]")
            continue
        path, key = defined[name]
        try:
            value = value_of((page.parent / path).resolve(), key)
        except (ValueError, KeyError, IndexError, OSError) as err:
            problems.append(f"[{match['number']}][{name}] ({path} {key}): {err}")
            continue
        if not agrees(match["number"], value):
            problems.append(f"{match['number']} quoted as [{name}], {path} says {value:g} ({key})")
    numbered = [name for name in defined if name != "given"]
    unquoted = [name for name in numbered if name not in first_quoted]
    problems += [f"[{name}] is defined but no number quotes it" for name in unquoted]
    order = [name for name in first_quoted if name != "given"]
    if order != sorted(order, key=lambda name: int(name[1:])):
        problems.append(f"quotes out of their definitions' order (figures swapped?): {' '.join(order)}")
    return problems


def unmarked(text: str) -> list[str]:
    """The decimals, percentages and powers of ten of ``text`` that are no quote (outside code and definitions)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = GENERATED.sub("", DEFINITION.sub("", QUOTE.sub("", prose)))
    prose = re.sub(r"`[^`]*`", "", re.sub(r"<!--.*?-->", "", prose, flags=re.S))
    return DECIMAL.findall(prose)


def accuracy_table(report: str) -> list[str]:
    """A report's accuracy per series and cell (task, length), pooled over seeds as summary.md pools them."""
    cells, _ = read_results(ROOT / "reports" / report / "results.csv")
    series = list(dict.fromkeys(series_label(cell) for cell in cells))
    columns = list(dict.fromkeys((task_label(cell), cell.length) for cell in cells))
    lines = ["| series | " + " | ".join(f"{task} {length}" for task, length in columns) + " |"]
    lines.append("|---|" + "---:|" * len(columns))
    for name in series:
        found = []
        for task, length in columns:
            mine = [c for c in cells if series_label(c) == name and task_label(c) == task and c.length == length]
            found.append(f"{Pooled.of(mine).accuracy:.3f}" if mine else "")
        lines.append(f"| {name} | " + " | ".join(found) + " |")
    return lines


TABLES = {"accuracy": accuracy_table}


def generated_tables(text: str) -> str:
    """``text`` with every generated table made again from its report."""

    def make(match: re.Match) -> str:
        body = TABLES[match["kind"]](match["report"])
        return "\n".join([f"<!-- generated: {match['kind']} {match['report']} -->", *body, "<!-- /generated -->"])

    return GENERATED.sub(make, text)


if __name__ == "__main__":  # python -m tests.quoted --write PAGE: the page's generated tables made again
    if sys.argv[1:2] != ["--write"] or len(sys.argv) != 3:
        sys.exit("usage: python -m tests.quoted --write PAGE")
    page = Path(sys.argv[2])
    page.write_text(generated_tables(page.read_text(encoding="utf-8")), encoding="utf-8")
