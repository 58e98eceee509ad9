"""Arithmetic problems as the paper draws them (§3; appendix Alg. "Iterated Addition Data Generation"
and "Integer Multiplication Data Generation").

An operand "of length n" is n base-p digits drawn uniformly from [0, p) with leading zeros stripped, so
its true length is at most n (the paper's ADD_p(n), IterADD_p(n, k), MUL_p(n, l) all say "at most n").
Digits are written most significant first, as an LLM reads them; the from-scratch models of
``scratch/`` reverse them. Exact answers come from Python integers, not from a digit loop.

Reproducibility: each cell (task, base, length) draws from its own stream, seeded by the run seed and
a stable hash of the cell, so a cell's problems do not depend on which other cells run or in what
order, and the first k of ``count`` problems are the same for every count >= k. ``python -m harness.problems``
writes them as JSON lines (harness/problems.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.core.bounds import Bound
from harness.core.errors import UserError
from harness.core.files import atomic_write_text

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
MIN_BASE, MAX_BASE = 2, len(DIGITS)
BASE = Bound(MIN_BASE, MAX_BASE, "digits are written 0-9 then a-z")
# Far beyond any model's context (the paper's longest LLM operands have 13 digits), and within Python's
# integer-to-string limit (4,300 digits) for a product of two operands in any base.
MAX_LENGTH = 1000
LENGTH = Bound(1, MAX_LENGTH, "longer operands exceed every model's context")
OPERANDS = Bound(2, 100, "the paper iterates 3 to 13 additions; 100 numbers outgrow any prompt's use")
MAX_DIGITS_DRAWN = 200_000_000  # count x operands x length: 1.6 GB of digits at once
COUNT = Bound(1, 10_000_000, "a file of 10 million problems is about 1 GB; draw more with other seeds")
OPERATORS = {"add": "+", "iter_add": "+", "mul": "*"}  # '*' as in the paper's multiplication prompt


@dataclass(frozen=True)
class Task:
    """One of the paper's tasks. ``truncate`` (mul only) keeps the l least significant digits: MUL_p(n, l)."""

    name: str
    operands: int = 2
    truncate: int | None = None

    def __post_init__(self) -> None:
        if self.name not in OPERATORS:
            raise UserError(f"unknown task '{self.name}'; known: add, iter_add:K, mul, mul:trunc=L")
        OPERANDS.check(self.operands, f"task {self.name}: the operand count")
        if self.name in ("add", "mul") and self.operands != 2:
            raise UserError(f"task {self.name} takes exactly 2 operands; use iter_add:{self.operands} for more")
        if self.truncate is not None and (self.name != "mul" or self.truncate < 1):
            raise UserError("truncation applies to mul only and keeps l >= 1 digits (mul:trunc=L)")
        if self.truncate is not None:
            LENGTH.check(self.truncate, "the truncation of mul:trunc=L")

    @property
    def label(self) -> str:
        """The task as written in configs and on the command line: add, iter_add:3, mul, mul:trunc=4."""
        if self.name == "iter_add":
            return f"iter_add:{self.operands}"
        if self.truncate is not None:
            return f"mul:trunc={self.truncate}"
        return self.name

    @property
    def operator(self) -> str:
        return OPERATORS[self.name]

    def max_answer_digits(self, base: int, length: int) -> int:
        """Digits of the longest possible answer for operands of at most ``length`` digits."""
        biggest = base**length - 1
        if self.name == "mul":
            return self.truncate or len(to_base(biggest * biggest, base))
        return len(to_base(biggest * self.operands, base))


_TASK_RE = re.compile(r"^(add|mul|iter_add)(?::(?:(\d+)|trunc=(\d+)))?$")


def parse_task(text: str) -> Task:
    """'add' | 'iter_add:K' | 'mul' | 'mul:trunc=L' -> Task."""
    match = _TASK_RE.match(text.strip())
    if not match:
        raise UserError(f"unknown task '{text}'; known: add, iter_add:K (K >= 2 operands), mul, mul:trunc=L")
    name, operands, truncate = match.groups()
    if name == "iter_add" and operands is None:
        raise UserError("iter_add needs its operand count, e.g. iter_add:3")
    if operands is not None and name != "iter_add":
        raise UserError(f"'{text}': only iter_add takes an operand count (iter_add:K)")
    if truncate is not None and name != "mul":
        raise UserError(f"'{text}': only mul takes a truncation (mul:trunc=L)")
    return Task(name, int(operands) if operands else 2, int(truncate) if truncate else None)


@dataclass(frozen=True)
class Problem:
    task: str  # task family: add, iter_add, mul
    base: int
    length: int  # the n of the paper: at most n digits per operand
    operands: list[str]  # base-p digit strings, most significant digit first
    answer: str  # base-p digit string (for mul:trunc=L exactly L digits, zeros kept)
    expression: str  # as shown to the model
    index: int  # position in its cell's stream
    seed: int
    truncate: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def to_base(value: int, base: int) -> str:
    if value == 0:
        return "0"
    digits = []
    while value:
        value, digit = divmod(value, base)
        digits.append(DIGITS[digit])
    return "".join(reversed(digits))


def check_cell_bounds(base: int, length: int, task: Task | None = None) -> None:
    """A cell numprec can draw: base and length in range, a truncation no longer than the product."""
    BASE.check(base, "base")
    LENGTH.check(length, "length")
    if task is not None and task.truncate is not None and task.truncate > 2 * length:
        raise UserError(
            f"{task.label} at length {length}: a product of two {length}-digit numbers has at most {2 * length} "
            f"digits, so l must be at most {2 * length} (the paper's MUL_p(n, l) takes l <= 2n)"
        )


def cell_rng(seed: int, task: Task, base: int, length: int, stream: str = "eval") -> np.random.Generator:
    """A random stream owned by one cell: stable across processes, Python versions and cell order.

    ``stream`` names independent streams of the same cell: evaluation problems come from "eval",
    fine-tuning data from "finetune", so the two never share draws.
    """
    key = f"{task.label}|{base}|{length}" + ("" if stream == "eval" else f"|{stream}")
    key = key.encode()
    cell_hash = int.from_bytes(hashlib.sha256(key).digest()[:8], "little")
    return np.random.default_rng(np.random.SeedSequence([seed, cell_hash]))


def draw_digits(seed: int, task: Task, base: int, length: int, count: int, stream: str = "eval") -> np.ndarray:
    """Uniform digits of shape (count, operands, length), most significant first (Alg. get_data)."""
    check_cell_bounds(base, length, task)
    COUNT.check(count, "count")
    if count * task.operands * length > MAX_DIGITS_DRAWN:
        raise UserError(
            f"{count} problems of {task.operands} x {length} digits exceed {MAX_DIGITS_DRAWN:,} digits "
            "(memory); draw them in several runs with --seed"
        )
    # Filled in C order from one stream, so problem i never depends on how many follow it.
    return cell_rng(seed, task, base, length, stream).integers(0, base, size=(count, task.operands, length))


def generate(
    task: Task, base: int, length: int, count: int, seed: int = 0, start: int = 0, stream: str = "eval"
) -> list[Problem]:
    """Problems ``start .. count-1`` of a cell's stream."""
    digits = draw_digits(seed, task, base, length, count, stream)[start:]
    # All digit strings at once: ASCII codes viewed as fixed-width byte strings, one per operand.
    codes = np.frombuffer(DIGITS[:base].encode(), dtype=np.uint8)[digits]
    texts = codes.reshape(-1, length).view(f"S{length}").ravel().astype(str).reshape(len(digits), task.operands)
    render = str if base == 10 else lambda value: to_base(value, base)
    problems = []
    for index, row in enumerate(texts.tolist(), start=start):
        operands = [text.lstrip("0") or "0" for text in row]
        values = [int(text, base) for text in operands]
        if task.name == "mul":
            result = values[0] * values[1]
            answer = render(result)
            if task.truncate is not None:
                answer = render(result % base**task.truncate).rjust(task.truncate, "0")
        else:
            answer = render(sum(values))
        problems.append(
            Problem(
                task=task.name,
                base=base,
                length=length,
                operands=operands,
                answer=answer,
                expression=f" {task.operator} ".join(operands),
                index=index,
                seed=seed,
                truncate=task.truncate,
            )
        )
    return problems


def write_jsonl(problems: Sequence[Problem], path: Path) -> None:
    atomic_write_text(path, "".join(json.dumps(p.to_dict()) + "\n" for p in problems))


def load_dataset(path: str | Path):
    """Problems written by this module as a ``datasets.Dataset`` (one row per problem)."""
    import datasets

    path = Path(path)
    if not path.is_file():
        raise UserError(f"no problems file at {path}; write one with python -m harness.problems --out {path}")
    return datasets.Dataset.from_json(str(path))


# Data a model learns from (finetune/data.py) or is calibrated on (harness/quantize.py) keeps out each cell's first
# HELD_OUT_COUNT evaluation problems, at the operand lengths it is drawn at (TRAINING_LENGTHS, the paper's 1-9).
HELD_OUT_COUNT = 1000
TRAINING_LENGTHS = range(1, 10)


def heldout_problems(
    task: Task, base: int, length: int, count: int, seed: int, eval_count: int, stream: str
) -> tuple[list[Problem], bool]:
    """``count`` problems of the cell's ``stream`` (fine-tuning, calibration), none among its first
    ``eval_count`` evaluation problems: data a model learns or is calibrated on is never a test problem.

    Returns (problems, disjoint). disjoint is False when the evaluation problems cover the whole space.
    """
    excluded = {tuple(p.operands) for p in generate(task, base, length, eval_count, seed)}
    if len(excluded) >= (base**length) ** task.operands:
        return generate(task, base, length, count, seed, stream=stream), False
    kept: list[Problem] = []
    drawn = 0
    while len(kept) < count:
        # Draw in growing chunks; each chunk continues the same stream, so the result does not depend on chunking.
        want = drawn + max(1024, 2 * (count - len(kept)))
        for problem in generate(task, base, length, want, seed, start=drawn, stream=stream):
            if tuple(problem.operands) not in excluded:
                kept.append(problem)
                if len(kept) == count:
                    break
        drawn = want
    return kept, True
