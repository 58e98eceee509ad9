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
    """Exact result digits, least significant first: (B, k, n) -> (B, answer_width), on the digits' device.
    Column sums first (schoolbook columns for mul), then the carries, so no integer overflows however long the
    numbers."""
    batch, width, n = digits.shape[0], task.answer_width, task.length
    columns = torch.zeros(batch, width, dtype=torch.long, device=digits.device)
    if task.op == "add":
        columns[:, :n] = digits.sum(dim=1)
        largest_column = task.operands * (task.base - 1)
    else:  # column i + j collects a_i * b_j
        products = digits[:, 0, :, None] * digits[:, 1, None, :]
        position = (torch.arange(n, device=digits.device)[:, None] + torch.arange(n, device=digits.device)).flatten()
        columns.scatter_add_(1, position.expand(batch, -1), products.flatten(1))
        largest_column = n * (task.base - 1) ** 2
    return propagate_carries(columns, task.base, largest_column // (task.base - 1))


def propagate_carries(columns: torch.Tensor, base: int, max_carry: int) -> torch.Tensor:
    """Digits of numbers given as column sums (B, W), least significant first, whose carries never exceed
    ``max_carry``. A column maps its incoming carry c to its outgoing one, (sum + c) // base: a table over
    0..max_carry. Composing the tables of the columns below each position (a prefix scan, log2(W) gathers)
    gives every carry at once, so a batch costs a constant number of kernels on a GPU, not one per digit. Tables
    too large for that (long products in large bases) take the column-by-column loop."""
    batch, width = columns.shape
    if width * (max_carry + 1) > 1 << 14:
        result, carry = torch.empty_like(columns), torch.zeros_like(columns[:, 0])
        for position in range(width):
            total = columns[:, position] + carry
            result[:, position], carry = total % base, total // base
        return result
    # (sum + c) // base <= max_carry for every c <= max_carry: max_carry >= largest sum // (base - 1).
    prefix = (columns[..., None] + torch.arange(max_carry + 1, device=columns.device)) // base  # (B, W, C+1)
    shift = 1
    while shift < width:  # prefix[i] becomes column i's table composed with those of the `shift` columns below
        composed = torch.gather(prefix[:, shift:], 2, prefix[:, :-shift])
        prefix = torch.cat([prefix[:, :shift], composed], dim=1)
        shift *= 2
    carry_in = torch.cat([torch.zeros_like(columns[:, :1]), prefix[:, :-1, 0]], dim=1)
    return (columns + carry_in) % base


def _significant_length(digits: torch.Tensor) -> torch.Tensor:
    """Digits left after stripping leading zeros (at least one), for numbers stored least significant first."""
    positions = torch.arange(1, digits.shape[-1] + 1, device=digits.device)
    return torch.where(digits != 0, positions, 0).amax(dim=-1).clamp(min=1)


def encode(task: Arithmetic, digits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Operand digits (B, k, n), least significant first -> (tokens (B, seq_len), loss mask (B, seq_len)), on
    the digits' device.

    The mask marks the target positions: tokens after '=' (answer digits and <eos>). Every token is placed
    with one scatter: its position is known from the lengths of the numbers before it."""
    batch, k, n = digits.shape
    device = digits.device
    result = digits_of_result(task, digits)
    if task.fixed_width:
        lengths = torch.full((batch, k), n, device=device)
        result_length = torch.full((batch,), task.answer_width, device=device)
    else:
        lengths = _significant_length(digits)
        result_length = _significant_length(result)
    # Operand j starts after the j earlier operands and their separators.
    starts = torch.cumsum(lengths + 1, dim=1) - (lengths + 1)  # (B, k)
    answer_start = starts[:, -1] + lengths[:, -1] + 1
    separator = task.plus if task.op == "add" else task.times
    symbols = torch.full((batch, k), separator, device=device)
    symbols[:, -1] = task.equals
    width = task.answer_width
    digit_index, answer_index = torch.arange(n, device=device), torch.arange(width, device=device)
    digit_pos = (starts[:, :, None] + digit_index).masked_fill(digit_index >= lengths[:, :, None], task.seq_len)
    answer_pos = (answer_start[:, None] + answer_index).masked_fill(
        answer_index >= result_length[:, None], task.seq_len
    )
    end = answer_start + result_length
    positions = torch.cat([digit_pos.flatten(1), starts + lengths, answer_pos, end[:, None]], dim=1)
    values = torch.cat([digits.flatten(1), symbols, result, torch.full((batch, 1), task.eos, device=device)], dim=1)
    tokens = torch.full((batch, task.seq_len + 1), task.pad, dtype=torch.long, device=device)  # last: the unused
    tokens.scatter_(1, positions, values)
    tokens = tokens[:, : task.seq_len]
    columns = torch.arange(task.seq_len, device=device)
    mask = (columns >= answer_start[:, None]) & (columns <= end[:, None])
    return tokens, mask


def sample_digits(task: Arithmetic, batch: int, generator: torch.Generator) -> torch.Tensor:
    """Uniform digits (B, k, n), least significant first (the paper's data tensor, reversed)."""
    return torch.randint(0, task.base, (batch, task.operands, task.length), generator=generator)


def every_problem(task: Arithmetic) -> torch.Tensor:
    """The whole problem space as digits (base^(k n), k, n), in counting order."""
    index = torch.arange(task.space_size())[:, None]
    place = task.base ** torch.arange(task.operands * task.length)
    return (index // place % task.base).view(-1, task.operands, task.length)


def problem_hash(digits: torch.Tensor, base: int) -> torch.Tensor:
    """A 63-bit fingerprint of each problem's digits, for set membership (test-train disjointness): the
    polynomial sum of (digit * 31 + base) * 1000003^i, wrapping around int64 (collisions are negligible)."""
    flat = digits.flatten(1)
    columns = flat.shape[1]
    powers = [pow(1_000_003, columns - 1 - column, 1 << 64) for column in range(columns)]
    powers = torch.tensor([p - (1 << 64) if p >= 1 << 63 else p for p in powers], device=digits.device)
    return ((flat * 31 + base) * powers).sum(dim=1)


def distinct_problems(task: Arithmetic, size: int, generator: torch.Generator) -> torch.Tensor:
    """``size`` different problems drawn uniformly (repeats redrawn), or every problem once where the space holds
    no more than ``size``: a test set whose n counts different problems, so its interval is not too narrow."""
    if task.space_size() <= size:
        return every_problem(task)
    digits = sample_digits(task, size, generator)
    while True:
        hashes = problem_hash(digits, task.base)
        unique, inverse = torch.unique(hashes, return_inverse=True)
        first = torch.full((len(unique),), len(hashes)).scatter_reduce(0, inverse, torch.arange(len(hashes)), "amin")
        digits = digits[first.sort().values]  # first occurrences, in the order drawn
        if len(digits) >= size:
            return digits[:size]
        digits = torch.cat([digits, sample_digits(task, size - len(digits), generator)])


# Training batches made at once: up to 64 steps' and 32,768 rows (64 batches of 512; a batch of more rows is made
# alone). The pool's size depends on the batch size only, so a seed gives the same batches on every device.
POOL_STEPS, POOL_ROWS = 64, 1 << 15


class Problems:
    """Training batches drawn on the fly, and a fixed held-out test set of different problems that the batches
    never contain (where the space allows).

    Digits are drawn and checked against the test set on the CPU, from one seeded stream, so a seed gives the
    same problems on every device; answers, tokens and masks are then computed on ``device``. Batches are made
    ahead, a pool at a time (one draw, one copy, one encoding on the device: a few dozen kernels for 64 steps), so
    that making data is a small share of a step. ``data_state`` and ``restore`` resume the stream at any step."""

    def __init__(self, task: Arithmetic, seed: int, test_size: int, device: torch.device | str = "cpu"):
        self.task = task
        self.device = torch.device(device)
        self.train_rng = torch.Generator().manual_seed(seed)
        self.test_digits = distinct_problems(task, test_size, torch.Generator().manual_seed(seed + 1_000_000_007))
        self.test_hashes = torch.sort(problem_hash(self.test_digits, task.base)).values
        self.whole_space = len(self.test_digits) == task.space_size()
        # When the test set holds most of the space, excluding it would leave training almost nothing.
        self.disjoint = len(self.test_digits) <= task.space_size() // 2
        self._pool: tuple[torch.Tensor, torch.Tensor] | None = None
        self._pool_start = self.train_rng.get_state()  # the stream where the current pool was drawn
        self._used = 0  # batches of the pool already given out
        self._skip = 0  # batches of the next pool already given out before a restore

    def _in_test_set(self, digits: torch.Tensor) -> torch.Tensor:
        hashes = problem_hash(digits, self.task.base)
        index = torch.searchsorted(self.test_hashes, hashes).clamp(max=len(self.test_hashes) - 1)
        return self.test_hashes[index] == hashes

    def _draw(self, rows: int) -> torch.Tensor:
        digits = sample_digits(self.task, rows, self.train_rng)
        if self.disjoint:
            seen = self._in_test_set(digits)
            while seen.any():  # redraw the few rows that landed in the test set
                digits[seen] = sample_digits(self.task, int(seen.sum()), self.train_rng)
                seen = self._in_test_set(digits)
        return digits

    def train_batch(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The next training batch: tokens and mask (batch, seq_len), on the device."""
        if self._pool is None or self._used == len(self._pool[0]) or self._pool[0].shape[1] != batch:
            self._pool_start = self.train_rng.get_state()
            steps = max(1, min(POOL_STEPS, POOL_ROWS // batch))
            digits = self._draw(batch * steps)
            if self.device.type == "cuda":  # an asynchronous copy: the host goes on while the GPU trains
                digits = digits.pin_memory().to(self.device, non_blocking=True)
            tokens, mask = encode(self.task, digits.to(self.device))
            self._pool = (tokens.view(steps, batch, -1), mask.view(steps, batch, -1))
            self._used, self._skip = self._skip, 0
        tokens, mask = self._pool[0][self._used], self._pool[1][self._used]
        self._used += 1
        return tokens, mask

    def data_state(self) -> tuple[torch.Tensor, int]:
        """Where the stream is: the generator's state where the current pool was drawn, and the batches of it given
        out (a checkpoint's ``data_rng`` and ``data_used``)."""
        if self._pool is None:
            return self.train_rng.get_state(), self._skip
        if self._used == len(self._pool[0]):  # all given out: the next pool starts where the stream is
            return self.train_rng.get_state(), 0
        return self._pool_start, self._used

    def restore(self, rng_state: torch.Tensor, used: int = 0) -> None:
        """Resume the stream where ``data_state`` said it was (a checkpoint written before pools: ``used`` 0)."""
        self.train_rng.set_state(rng_state)
        self._pool, self._skip = None, used

    def test_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        return encode(self.task, self.test_digits.to(self.device))


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
