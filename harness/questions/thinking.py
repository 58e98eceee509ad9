"""Thinking: the blocks in which the models people run reason before they answer, as data. Thinking is never read for
the answer, whatever its marker, closed or not: a block opened and never closed is thinking to the end, so an output
that never leaves its thinking states no answer.

>>> split_thinking("<think>7 + 8 = 16?</think>7 + 8 = 15")[1]
'7 + 8 = 15'
>>> split_thinking("<Think type='fast'>16</THINK> 15")[1]
' 15'
>>> split_thinking("<|START_THINKING|>The final answer is 16.")[1]
''
>>> split_thinking("<|channel|>analysis<|message|>16<|end|><|start|>assistant<|channel|>final<|message|>15")[1]
'15'
>>> split_thinking("analysisSo 16.assistantfinal15")[1]
'15'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Thinking:
    """A model family's thinking block: what opens it, what ends it (regular expressions), and who writes it."""

    opens: str
    ends: str
    writers: str

    @classmethod
    def literal(cls, opens: str, ends: str, writers: str) -> Thinking:
        return cls(re.escape(opens), re.escape(ends), writers)


THINKING = (
    Thinking(
        r"<think(?:\s[^<>]*)?>", r"</think\s*>", "DeepSeek-R1, Qwen3, QwQ, Phi-4-reasoning (any case, attributes)"
    ),
    Thinking.literal("<thinking>", "</thinking>", "Claude-style prompts"),
    Thinking.literal("<reasoning>", "</reasoning>", "prompted reasoning formats"),
    Thinking.literal("[THINK]", "[/THINK]", "Mistral's Magistral"),
    Thinking.literal("◁think▷", "◁/think▷", "Kimi"),
    Thinking.literal("<|begin_of_thought|>", "<|end_of_thought|>", "OpenThoughts"),
    Thinking.literal("<|START_THINKING|>", "<|END_THINKING|>", "Cohere's Command A reasoning"),
    # gpt-oss's harmony format: analysis (and commentary) channels, then the final channel's message is the answer
    Thinking(
        r"<\|channel\|>\s*(?:analysis|commentary)\s*<\|message\|>",
        r"<\|channel\|>\s*final\s*<\|message\|>",
        "gpt-oss (harmony)",
    ),
    Thinking(r"\A\s*analysis(?=[A-Z])", r"assistantfinal", "gpt-oss decoded without its special tokens"),
)
# What every known block's marker holds one of (its opening or ending): a text without any has no block
_MARKS = re.compile(r"[<\[◁]|analysis|assistantfinal", re.IGNORECASE)
# Tokens that wrap an answer without being part of it: Command's response markers, harmony's message ends.
_WRAPPERS = re.compile(
    r"<\|(?:START|END)_RESPONSE\|>|<\|start\|>\s*assistant|<\|(?:return|end|call|im_end|eot_id|end_of_text)\|>"
)


def opener_of(end: str) -> str:
    """The marker that opens the block ``end`` closes: ``</x>`` -> ``<x>``, ``[/X]`` -> ``[X]``, ``◁/think▷`` ->
    ``◁think▷`` (its first slash left out).

    >>> opener_of("</reasoning>"), opener_of("[/THINK]")
    ('<reasoning>', '[THINK]')
    """
    return end.replace("/", "", 1)


@cache
def blocks(think_end: str | None = None) -> tuple[tuple[re.Pattern[str], re.Pattern[str]], ...]:
    """The compiled (opens, ends) of every known block, and of the block ``think_end`` closes (``--think-end``)."""
    known = [Thinking(t.opens, t.ends, t.writers) for t in THINKING]
    if think_end and not any(re.fullmatch(t.ends, think_end, re.IGNORECASE) for t in THINKING):
        known.append(Thinking.literal(opener_of(think_end), think_end, "--think-end"))
    return tuple((re.compile(t.opens, re.IGNORECASE), re.compile(t.ends, re.IGNORECASE)) for t in known)


def split_thinking(text: str, think_end: str | None = None) -> tuple[str, str]:
    """(thinking, answer) of a generation: everything through the last end of a thinking block is thinking; a block
    opened and never closed is thinking to the end (opened before any answer: there is no answer yet; reopened after
    one: the answer ends where it opens). Thinking and answer together are the text."""
    if think_end is None and not _MARKS.search(text):
        return "", text  # no known block's marker anywhere: most outputs, decided in one scan
    cut = 0
    for _, ends in blocks(think_end):
        for match in ends.finditer(text, cut):
            cut = max(cut, match.end())
    thinking, rest = text[:cut], text[cut:]
    opened = [match.start() for opens, _ in blocks(think_end) if (match := opens.search(rest))]
    if opened:
        thinking, rest = thinking + rest[min(opened) :], rest[: min(opened)]
    return thinking, rest


def unwrapped(answer: str) -> str:
    """An answer without the tokens that only wrap it (Command's response markers, harmony's message ends).

    >>> unwrapped("<|START_RESPONSE|>15<|END_RESPONSE|>")
    '15'
    """
    return _WRAPPERS.sub("", answer)
