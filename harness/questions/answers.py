"""How a model's answer ends, how long it may run, and what of it the scorer reads: the answer mode, one object that
every backend (in-process and served), the scorer and the bench take, so that a new way of answering is one new
class here and nothing else.

``FirstLine`` is the paper's protocol (appendix tab:prompt_add, tab:prompt_mul: "provide the final result
immediately without any explanation"): generation stops at the end of the first non-blank line, the budget is an echo
of the longest expression and its longest answer plus a few words, and the answer is read from that line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.questions.problems import DIGITS, Task
from harness.questions.thinking import split_thinking


class AnswerMode:
    """What every answer mode says. ``name`` is recorded in each run."""

    name = "answer mode"
    free_form = False  # read by the free-form rules (harness/scoring/free.py), or as a first line
    # what a server is asked to stop at (it drops the stop string), and whether a completion whose text is still
    # blank there is continued (a server stops at a newline before the first line has begun)
    server_stop: tuple[str, ...] = ()
    continues_blank = False

    def budget(self, task: Task, base: int, length: int, count_tokens: Callable[[str], int]) -> int:
        """New tokens a problem of this cell may take."""
        raise NotImplementedError

    def done(self, text: str) -> bool:
        """Whether a generation whose text so far is ``text`` has finished its answer (besides end of sequence and
        the budget)."""
        raise NotImplementedError

    def may_finish(self, token_text: str) -> bool:
        """Whether producing a token whose text is ``token_text`` can make ``done`` true: a decoding loop decodes a
        row's text for ``done`` only after such tokens."""
        raise NotImplementedError

    def kept(self, text: str) -> str:
        """What a backend keeps of a generation that ran past the stop (a server that ignores it)."""
        raise NotImplementedError

    def answer_text(self, text: str) -> str:
        """What of a kept generation the scorer reads."""
        raise NotImplementedError

    def split(self, text: str) -> tuple[str, str]:
        """(thinking, answer) of a kept generation: what is never read, and what the answer is read from."""
        return "", text

    def describe(self) -> str:
        """The mode as each row records it, which ``answer_mode`` reads back (a rescore reads answers the same way)."""
        return self.name


@dataclass(frozen=True)
class FirstLine(AnswerMode):
    """The paper's answer: the first non-blank line, stopped at its newline; a budget of the echoed expression and
    its longest answer (``a + b = s``) plus ``words`` tokens."""

    words: int = 12
    name = "first-line"
    server_stop = ("\n",)
    continues_blank = True

    def budget(self, task: Task, base: int, length: int, count_tokens: Callable[[str], int]) -> int:
        top = DIGITS[base - 1] * length
        expression = f" {task.operator} ".join([top] * task.operands)
        answer = DIGITS[base - 1] * task.max_answer_digits(base, length)
        return count_tokens(f"{expression} = {answer}") + self.words

    def done(self, text: str) -> bool:
        return split_thinking(text)[1].lstrip().find("\n") > 0

    def may_finish(self, token_text: str) -> bool:
        return "\n" in token_text

    def kept(self, text: str) -> str:
        thinking, answer = split_thinking(text)
        start = len(answer) - len(answer.lstrip())
        newline = answer.find("\n", start)
        return text if newline < 0 else thinking + answer[: newline + 1]

    def split(self, text: str) -> tuple[str, str]:
        return split_thinking(text)

    def answer_text(self, text: str) -> str:
        """The first non-blank line after any thinking block (a reasoning model's ``<think>...</think>7 + 8 = 15``)."""
        for line in split_thinking(text)[1].splitlines():
            if line.strip():
                return line.strip()
        return ""


FIRST_LINE = FirstLine()


def finishing_tokens(tokenizer, size: int, answer: AnswerMode):
    """Per token id (a table of ``size``): can producing it finish an answer of this mode (``may_finish`` of its
    text). Built once per tokenizer and mode."""
    import torch

    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    table = torch.zeros(size, dtype=torch.bool)
    table[: min(size, len(texts))] = torch.tensor([answer.may_finish(text) for text in texts[:size]])
    return table


def stop_length(tokenizer, token_ids: list[int], answer: AnswerMode) -> int:
    """How many of ``token_ids`` a backend keeps: up to the token that finishes the answer."""
    for used in range(1, len(token_ids) + 1):
        if answer.may_finish(tokenizer.decode(token_ids[used - 1 : used])) and answer.done(
            tokenizer.decode(token_ids[:used], skip_special_tokens=True)
        ):
            return used
    return len(token_ids)


@dataclass(frozen=True)
class FreeForm(AnswerMode):
    """An answer in the model's own words, as models that reason first give it: generation runs to the end of the
    model's turn (its end-of-sequence token) within ``max_new_tokens``; a thinking block that ends at ``think_end``
    (``<think>...</think>``, or the marker a model uses) is kept in the sample but never read for the answer; the
    answer is read from what follows it, by the free-form rules of harness/scoring/free.py. A generation the budget cut
    before its end is truncated: its own verdict, never silently wrong."""

    max_new_tokens: int = 512
    think_end: str = "</think>"
    name = "free-form"
    free_form = True

    def budget(self, task: Task, base: int, length: int, count_tokens: Callable[[str], int]) -> int:
        return self.max_new_tokens

    def done(self, text: str) -> bool:
        return False  # only the end of the model's turn ends it

    def may_finish(self, token_text: str) -> bool:
        return False

    def kept(self, text: str) -> str:
        return text

    def split(self, text: str) -> tuple[str, str]:
        """(thinking, answer) by ``split_thinking``, with ``think_end``'s block besides the known ones: a block
        closed by any of them, or opened and never closed, is never read."""
        return split_thinking(text, self.think_end)

    def answer_text(self, text: str) -> str:
        return self.split(text)[1]

    def describe(self) -> str:
        return f"{self.name}:{self.max_new_tokens}:{self.think_end}"


def answer_mode(described: str) -> AnswerMode:
    """The answer mode a row records (``describe``): first-line, or free-form:BUDGET:THINK_END."""
    if described in ("", FIRST_LINE.name):
        return FIRST_LINE
    name, _, rest = described.partition(":")
    budget, _, think_end = rest.partition(":")
    if name != FreeForm.name or not (budget.isascii() and budget.isdigit()) or not think_end:
        raise ValueError(f"no answer mode {described!r}")
    return FreeForm(int(budget), think_end)
