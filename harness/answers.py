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

from harness.problems import DIGITS, Task


class AnswerMode:
    """What every answer mode says. ``name`` is recorded in each run."""

    name = "answer mode"
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
        return text.lstrip().find("\n") > 0

    def may_finish(self, token_text: str) -> bool:
        return "\n" in token_text

    def kept(self, text: str) -> str:
        start = len(text) - len(text.lstrip())
        newline = text.find("\n", start)
        return text if newline < 0 else text[: newline + 1]

    def answer_text(self, text: str) -> str:
        for line in text.splitlines():
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
