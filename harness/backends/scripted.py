"""A backend without a model, for testing everything above the backends in milliseconds (as
lm-evaluation-harness's DummyLM does): its outputs come from a function of the user message and of the
size of the batch it is generated in, so a test can script right, wrong, unreadable and batch-dependent
answers and check what eval, scoring, resume, comparisons and reports make of them."""

from __future__ import annotations

from collections.abc import Callable

from harness.backends import SINGLE_PROCESS, ChatBackend, Generation, Sampling, Shard
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

    def generate(
        self,
        prompts: list[str],
        max_new_tokens: int | list[int],
        sampling: Sampling,
        seed: int | list[int] = 0,
        on_batch=None,
        shard: Shard = SINGLE_PROCESS,
    ) -> list[Generation | None]:
        out: list[Generation | None] = [None] * len(prompts)
        for start in range(0, len(prompts), self.batch_size):
            if not shard.owns(start // self.batch_size):
                continue
            batch = prompts[start : start + self.batch_size]
            self.calls.append(len(batch))
            for row, prompt in enumerate(batch):
                text = self.answer(prompt[len(HEADER) : -len(FOOTER)], len(batch))
                out[start + row] = Generation(text, max(1, self.count_tokens(text)))
            if on_batch:
                on_batch(len(batch))
        return out
