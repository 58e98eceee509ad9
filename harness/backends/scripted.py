"""A backend without a model, for testing everything above the backends in milliseconds (as
lm-evaluation-harness's DummyLM does): its outputs come from a function of the user message and of the
size of the batch it is generated in, so a test can script right, wrong, unreadable and batch-dependent
answers and check what eval, scoring, resume, comparisons and reports make of them."""

from __future__ import annotations

from collections.abc import Callable

from harness.backends import ChatBackend, Generation, Sampling
from harness.models import PrecisionSpec

HEADER, FOOTER = "<user>\n", "\n</user>\n<assistant>\n"


class ScriptedBackend(ChatBackend):
    name = "scripted"
    kernel = "none (scripted)"
    footprint_mb = 0.0

    def __init__(self, precision: PrecisionSpec, answer: Callable[[str, int], str], batch_size: int = 16):
        self.precision = precision
        self.answer = answer  # (user message, rows in its batch) -> output text
        self.batch_size = batch_size
        self.calls: list[int] = []  # the batch sizes generated, for the test to read

    def chat_prompt(self, user_message: str) -> str:
        return HEADER + user_message + FOOTER

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def generate_batch(
        self, shared, rows: slice, budgets: list[int], sampling: Sampling, seeds: list[int], answer=None
    ):
        batch = shared[rows]
        self.calls.append(len(batch))
        texts = [self.answer(prompt[len(HEADER) : -len(FOOTER)], len(batch)) for prompt in batch]
        out = []
        for text, budget in zip(texts, budgets, strict=True):
            if self.count_tokens(text) > budget:  # a model stops at its budget: here a token is a word
                text = " ".join(text.split(" ")[:budget])
            out.append(Generation(text, max(1, self.count_tokens(text))))
        return out
