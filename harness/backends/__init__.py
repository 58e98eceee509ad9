"""Backends turn chat prompts into generations; everything else (problems, prompts, stopping, scoring,
results) lives above them. Each backend offers chat_prompt(), count_tokens(), generate() and
footprint_mb."""

from __future__ import annotations

from harness.cli import UserError
from harness.models import PrecisionSpec

BACKENDS = ("hf",)


def load_backend(name: str, weights: str, precision: PrecisionSpec, adapter: str | None, batch_size: int):
    if name == "hf":
        from harness.backends.hf import HFBackend

        return HFBackend(weights, precision, adapter=adapter, batch_size=batch_size)
    raise UserError(f"unknown backend '{name}'; known: {', '.join(BACKENDS)}")
