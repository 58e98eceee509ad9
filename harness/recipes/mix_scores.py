"""Mixes scored whole on the search's problems, each once, computing only what differs from a recorded mix.

``base(kept)`` scores a mix in one whole pass and records what enters each decoder block (harness/recipes/reuse.py);
``of(kept)`` scores another mix from the first block where it differs from the nearest recorded one, the blocks
before it handed over as recorded: bit for bit what a whole pass computes. The table's restore-one and quantize-one
configurations differ from a uniform model in one group; the search's candidates from its current mix in the groups
they add. Every mix scored is kept (its per-problem scores), so a search can choose among all it has seen.

With a ``store`` (a search's mixes.jsonl), every mix scored is also appended there as it is scored, and a mix the
store holds is read, not scored again: the searches at a frontier's other budgets walk much of the same path, and a
killed search goes on from the mixes it had. A base the store holds is recorded only when a mix near it has to be
computed, so a path read back whole costs no pass. The store belongs to its directory's search (harness.sensitivity
checks the search's key before it opens one).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from harness.core.files import append_lines
from harness.recipes.mixer import Mixer
from harness.recipes.reuse import BlockInputs, recording, replaying
from harness.recipes.teacher import Scores, TeacherBatch, score

BLOCK = re.compile(r"^model\.layers\.(\d+)\.")


class MixScores:
    """``MixScores(mixer, batch, pad_id, advance, store)``: ``base(layers)``, ``of(layers)``; ``seen`` holds every
    mix scored (or read from ``store``); ``advance`` is called after each pass (a progress bar's)."""

    def __init__(
        self, mixer: Mixer, batch: TeacherBatch, pad_id: int, advance: Callable[[], None] = lambda: None,
        store: Path | None = None,
    ) -> None:  # fmt: skip
        self.mixer, self.batch, self.pad_id, self.advance, self.store = mixer, batch, pad_id, advance, store
        self.blocks = mixer.model.model.layers
        self.bases: dict[frozenset[str], BlockInputs] = {}
        self.pending: set[frozenset[str]] = set()  # bases read from the store, recorded when first needed
        self.seen: dict[frozenset[str], Scores] = read_store(store, len(batch.rows)) if store else {}
        self.passes = 0  # forward passes made (a mix read from the store makes none)

    def base(self, kept: Iterable[str]) -> Scores:
        """The mix keeping ``kept`` (layer names) at KEEP, scored whole and recorded for the mixes near it."""
        wanted = frozenset(kept)
        if wanted not in self.bases:
            if self.store is not None and wanted in self.seen:
                self.pending.add(wanted)
            else:
                self._record(wanted)
        return self.seen[wanted]

    def of(self, kept: Iterable[str]) -> Scores:
        """The mix keeping ``kept``, computed from the first block where it differs from the nearest recorded mix."""
        wanted = frozenset(kept)
        if wanted not in self.seen:
            for pending in list(self.pending):
                self._record(pending)
            self.mixer.use(wanted)
            first, base = max(((self._first(wanted ^ base), base) for base in self.bases), default=(0, None))
            if base is None or first == 0:
                self._keep(wanted, score(self.mixer.model, self.batch, self.pad_id))
            else:
                with replaying(self.blocks, self.bases[base], first):
                    self._keep(wanted, score(self.mixer.model, self.batch, self.pad_id))
        return self.seen[wanted]

    def forget(self, kept: Iterable[str]) -> None:
        """Drop a recorded mix's block inputs (its scores stay): a search moves on from it."""
        self.bases.pop(frozenset(kept), None)
        self.pending.discard(frozenset(kept))

    def _record(self, wanted: frozenset[str]) -> None:
        self.pending.discard(wanted)
        self.mixer.use(wanted)
        with recording(self.blocks) as self.bases[wanted]:
            self._keep(wanted, score(self.mixer.model, self.batch, self.pad_id))

    def _keep(self, wanted: frozenset[str], scores: Scores) -> None:
        if self.store is not None and wanted not in self.seen:
            append_lines(self.store, [store_line(wanted, scores)])
        self.seen[wanted] = scores
        self.passes += 1
        self.advance()

    def _first(self, changed: frozenset[str]) -> int:
        """The first block a change of ``changed`` layers reaches (a layer after the blocks, lm_head: past them)."""
        found = [int(match.group(1)) for name in changed if (match := BLOCK.match(name))]
        return min(found, default=len(self.blocks))


def store_line(kept: frozenset[str], scores: Scores) -> str:
    """One mix as a line of the store: its layers kept and its per-problem scores (float64 written exactly)."""
    found = {"kept": sorted(kept), "logprob": scores.logprob.tolist(), "exact": scores.exact.tolist()}
    return json.dumps(found) + "\n"


def read_store(path: Path, rows: int) -> dict[frozenset[str], Scores]:
    """The mixes a store holds whole: a line a kill cut short, or of another number of problems, is left out (and
    that mix scored again)."""
    found: dict[frozenset[str], Scores] = {}
    if not path.is_file():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            mix = json.loads(line)
            logprob = torch.tensor(mix["logprob"], dtype=torch.float64)
            exact = torch.tensor(mix["exact"], dtype=torch.bool)
            kept = frozenset(mix["kept"])
        except (ValueError, KeyError, TypeError):
            continue
        if len(logprob) == rows == len(exact):
            found[kept] = Scores(logprob, exact)
    return found
