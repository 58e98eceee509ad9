"""Arithmetic sequences for models trained from scratch (appendix Alg. "Iterated Addition Data Generation"
and "Integer Multiplication Data Generation"), vectorised over the batch.

A sequence is  a_1 + a_2 + ... + a_k = s <eos> <pad>...  with one token per digit and every number written
least significant digit first (the paper reverses operands and result, so the carry flows left to right).
Operands are n digits drawn uniformly from [0, p) with leading zeros stripped (the paper's format), or,
with ``fixed_width``, kept zero-padded to n digits (answer padded to its maximum width), which learns
much faster on a CPU budget (shared/notes/platform-facts.md).

The loss and the accuracy cover the answer tokens and <eos>: everything after '='.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Arithmetic:
    """One task of the sweep: ``op`` is "add" (k operands, k >= 2) or "mul" (2 operands)."""

    op: str
    base: int
    length: int
    operands: int = 2
    fixed_width: bool = False

    def __post_init__(self):
        if self.op not in ("add", "mul"):
            raise ValueError(f"unknown op {self.op!r}; known: add, mul")
        if not 2 <= self.base <= 36 or self.length < 1 or self.operands < 2:
            raise ValueError("need base 2-36, length >= 1, operands >= 2")
        if self.op == "mul" and self.operands != 2:
            raise ValueError("mul takes exactly 2 operands")

    # Token ids: digits are 0..p-1, then the symbols.
    @property
    def plus(self) -> int:
        return self.base

    @property
    def times(self) -> int:
        return self.base + 1

    @property
    def equals(self) -> int:
        return self.base + 2

    @property
    def eos(self) -> int:
        return self.base + 3

    @property
    def pad(self) -> int:
        return self.base + 4

    @property
    def vocab_size(self) -> int:
        return self.base + 5

    @property
    def answer_width(self) -> int:
        """Digits of the longest answer."""
        if self.op == "mul":
            return 2 * self.length
        width, biggest = 0, self.operands * (self.base**self.length - 1)
        while biggest:
            biggest //= self.base
            width += 1
        return width

    @property
    def seq_len(self) -> int:
        """Tokens of the longest sequence: operands with separators, '=', answer, <eos>."""
        return self.operands * (self.length + 1) + self.answer_width + 1

    def space_size(self) -> int:
        return self.base ** (self.length * self.operands)


def digits_of_result(task: Arithmetic, digits: torch.Tensor) -> torch.Tensor:
    """Exact result digits, least significant first: (B, k, n) -> (B, answer_width). Carries are
    propagated digit by digit, so no integer overflows however long the numbers."""
    batch = digits.shape[0]
    width = task.answer_width
    if task.op == "add":
        columns = torch.zeros(batch, width, dtype=torch.long)
        columns[:, : task.length] = digits.sum(dim=1)
    else:
        a, b = digits[:, 0], digits[:, 1]
        columns = torch.zeros(batch, width, dtype=torch.long)
        for i in range(task.length):  # schoolbook: column i + j collects a_i * b_j
            columns[:, i : i + task.length] += a[:, i : i + 1] * b
    result = torch.empty_like(columns)
    carry = torch.zeros(batch, dtype=torch.long)
    for position in range(width):
        total = columns[:, position] + carry
        result[:, position] = total % task.base
        carry = total // task.base
    return result


def _significant_length(digits: torch.Tensor) -> torch.Tensor:
    """Digits left after stripping leading zeros (at least one), for numbers stored least significant first."""
    positions = torch.arange(1, digits.shape[-1] + 1)
    return torch.where(digits != 0, positions, 0).amax(dim=-1).clamp(min=1)


def encode(task: Arithmetic, digits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Operand digits (B, k, n), least significant first -> (tokens (B, seq_len), loss mask (B, seq_len)).

    The mask marks the target positions: tokens after '=' (answer digits and <eos>). Every token is placed
    with one scatter: its position is known from the lengths of the numbers before it."""
    batch, k, n = digits.shape
    result = digits_of_result(task, digits)
    if task.fixed_width:
        lengths = torch.full((batch, k), n)
        result_length = torch.full((batch,), task.answer_width)
    else:
        lengths = _significant_length(digits)
        result_length = _significant_length(result)
    # Operand j starts after the j earlier operands and their separators.
    starts = torch.cumsum(lengths + 1, dim=1) - (lengths + 1)  # (B, k)
    answer_start = starts[:, -1] + lengths[:, -1] + 1
    separator = task.plus if task.op == "add" else task.times
    symbols = torch.full((batch, k), separator)
    symbols[:, -1] = task.equals
    width = task.answer_width
    digit_pos = (starts[:, :, None] + torch.arange(n)).masked_fill(torch.arange(n) >= lengths[:, :, None], task.seq_len)
    answer_pos = (answer_start[:, None] + torch.arange(width)).masked_fill(
        torch.arange(width) >= result_length[:, None], task.seq_len
    )
    end = answer_start + result_length
    positions = torch.cat([digit_pos.flatten(1), starts + lengths, answer_pos, end[:, None]], dim=1)
    values = torch.cat([digits.flatten(1), symbols, result, torch.full((batch, 1), task.eos)], dim=1)
    tokens = torch.full((batch, task.seq_len + 1), task.pad, dtype=torch.long)  # last column takes the unused
    tokens.scatter_(1, positions, values)
    tokens = tokens[:, : task.seq_len]
    columns = torch.arange(task.seq_len)
    mask = (columns >= answer_start[:, None]) & (columns <= end[:, None])
    return tokens, mask


def sample_digits(task: Arithmetic, batch: int, generator: torch.Generator) -> torch.Tensor:
    """Uniform digits (B, k, n), least significant first (the paper's data tensor, reversed)."""
    return torch.randint(0, task.base, (batch, task.operands, task.length), generator=generator)


def problem_hash(digits: torch.Tensor, base: int) -> torch.Tensor:
    """A 63-bit fingerprint of each problem's digits, for set membership (test-train disjointness)."""
    flat = digits.flatten(1)
    value = torch.zeros(flat.shape[0], dtype=torch.long)
    for column in range(flat.shape[1]):  # polynomial hash, wraps around int64 (collisions are negligible)
        value = value * 1_000_003 + flat[:, column] * 31 + base
    return value


class Problems:
    """Training batches drawn on the fly, and a fixed held-out test set they never contain (where the space allows)."""

    def __init__(self, task: Arithmetic, seed: int, test_size: int):
        self.task = task
        self.train_rng = torch.Generator().manual_seed(seed)
        test_rng = torch.Generator().manual_seed(seed + 1_000_000_007)
        self.test_digits = sample_digits(task, test_size, test_rng)
        self.test_hashes = torch.unique(problem_hash(self.test_digits, task.base))
        # When the test set holds most of the space, excluding it would leave training almost nothing.
        self.disjoint = len(self.test_hashes) <= task.space_size() // 2

    def train_batch(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        digits = sample_digits(self.task, batch, self.train_rng)
        if self.disjoint:
            seen = torch.isin(problem_hash(digits, self.task.base), self.test_hashes)
            while seen.any():  # redraw the few rows that landed in the test set
                digits[seen] = sample_digits(self.task, int(seen.sum()), self.train_rng)
                seen = torch.isin(problem_hash(digits, self.task.base), self.test_hashes)
        return encode(self.task, digits)

    def test_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        return encode(self.task, self.test_digits)


def decode(task: Arithmetic, tokens: torch.Tensor) -> str:
    """One sequence as text, numbers shown most significant digit first, for reading and for tests."""
    symbols = {task.plus: "+", task.times: "*", task.equals: "=", task.eos: "", task.pad: ""}
    text, number = [], []
    for token in tokens.tolist():
        if token < task.base:
            number.append("0123456789abcdefghijklmnopqrstuvwxyz"[token])
            continue
        if number:
            text.append("".join(reversed(number)))
            number = []
        if symbols[token]:
            text.append(symbols[token])
    if number:
        text.append("".join(reversed(number)))
    return " ".join(text)
