"""Mixes scored whole on the search's problems, each once, computing only what differs from a recorded mix.

``base(kept)`` scores a mix in one whole pass and records what enters each decoder block (harness/recipes/reuse.py);
``of(kept)`` scores another mix from the first block where it differs from the nearest recorded one, the blocks
before it handed over as recorded: bit for bit what a whole pass computes. The table's restore-one and quantize-one
configurations differ from a uniform model in one group; the search's candidates from its current mix in the groups
they add. Every mix scored is kept (its per-problem scores), so a search can choose among all it has seen.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from harness.recipes.mixer import Mixer
from harness.recipes.reuse import BlockInputs, recording, replaying
from harness.recipes.teacher import Scores, TeacherBatch, score

BLOCK = re.compile(r"^model\.layers\.(\d+)\.")


class MixScores:
    """``MixScores(mixer, batch, pad_id)``: ``base(layers)``, ``of(layers)``; ``seen`` holds every mix scored;
    ``advance`` is called after each pass (a progress bar's)."""

    def __init__(self, mixer: Mixer, batch: TeacherBatch, pad_id: int, advance: Callable[[], None] = lambda: None):
        self.mixer, self.batch, self.pad_id, self.advance = mixer, batch, pad_id, advance
        self.blocks = mixer.model.model.layers
        self.bases: dict[frozenset[str], BlockInputs] = {}
        self.seen: dict[frozenset[str], Scores] = {}

    def base(self, kept: Iterable[str]) -> Scores:
        """The mix keeping ``kept`` (layer names) at KEEP, scored whole and recorded for the mixes near it."""
        wanted = frozenset(kept)
        if wanted not in self.bases:
            self.mixer.use(wanted)
            with recording(self.blocks) as self.bases[wanted]:
                self.seen[wanted] = score(self.mixer.model, self.batch, self.pad_id)
            self.advance()
        return self.seen[wanted]

    def of(self, kept: Iterable[str]) -> Scores:
        """The mix keeping ``kept``, computed from the first block where it differs from the nearest recorded mix."""
        wanted = frozenset(kept)
        if wanted not in self.seen:
            self.mixer.use(wanted)
            first, base = max(((self._first(wanted ^ base), base) for base in self.bases), default=(0, None))
            if base is None or first == 0:
                self.seen[wanted] = score(self.mixer.model, self.batch, self.pad_id)
            else:
                with replaying(self.blocks, self.bases[base], first):
                    self.seen[wanted] = score(self.mixer.model, self.batch, self.pad_id)
            self.advance()
        return self.seen[wanted]

    def forget(self, kept: Iterable[str]) -> None:
        """Drop a recorded mix's block inputs (its scores stay): a search moves on from it."""
        self.bases.pop(frozenset(kept), None)

    def _first(self, changed: frozenset[str]) -> int:
        """The first block a change of ``changed`` layers reaches (a layer after the blocks, lm_head: past them)."""
        found = [int(match.group(1)) for name in changed if (match := BLOCK.match(name))]
        return min(found, default=len(self.blocks))
