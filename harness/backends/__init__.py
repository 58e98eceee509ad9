"""Backends turn chat prompts into generations; everything else (problems, prompts, stopping, scoring,
results) lives above them. Each backend offers chat_prompt(), count_tokens(), generate() and
footprint_mb."""

from __future__ import annotations

from dataclasses import dataclass

from harness.cli import UserError
from harness.models import PrecisionSpec

BACKENDS = ("hf",)


@dataclass(frozen=True)
class Sampling:
    """Decoding settings. ``paper`` is the paper's generation table (tab:generation_config)."""

    do_sample: bool = False
    top_k: int = 50
    top_p: float = 0.95
    temperature: float = 0.1

    @classmethod
    def named(cls, name: str) -> Sampling:
        if name == "greedy":
            return cls(do_sample=False)
        if name == "paper":
            return cls(do_sample=True, top_k=50, top_p=0.95, temperature=0.1)
        raise UserError(f"unknown decoding '{name}'; known: greedy, paper (top-k 50, top-p 0.95, temperature 0.1)")


def load_backend(name: str, weights: str, precision: PrecisionSpec, adapter: str | None, batch_size: int):
    if name == "hf":
        from harness.backends.hf import HFBackend

        return HFBackend(weights, precision, adapter=adapter, batch_size=batch_size)
    raise UserError(f"unknown backend '{name}'; known: {', '.join(BACKENDS)}")
