"""The sensitivity table: every group scored two ways on the same problems, one forward pass each.

- ``restore-one``: every layer at TARGET but this group's, at KEEP: what keeping this group buys;
- ``quantize-one``: every layer at KEEP but this group's, at TARGET: what quantizing this group alone costs;
- and the two uniform models (``uniform-target``, ``uniform-keep``) they are measured against.

Rows (one per group, scoring and cell) are appended to ``table.csv`` as each configuration is scored, so a kill
loses at most the configuration in progress and the same command goes on from there. ``table.json`` records what
the table was computed for (model, precisions and their checkpoints, problems, groups): another budget or margin
reuses it without rescoring; a table of another search is never extended.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.core.files import append_lines, csv_line
from harness.recipes.groups import Group
from harness.recipes.mix_scores import MixScores
from harness.recipes.mixer import Mixer
from harness.recipes.teacher import TeacherBatch
from harness.reports.figures import figure_png

COLUMNS = ["group", "block", "kind", "layers", "scoring", "task", "length", "n", "logprob", "exact"]
UNIFORM = Group("all", None, "all", ())


@dataclass(frozen=True)
class Job:
    """One configuration to score: the group it is about, how, and the layers it keeps."""

    group: Group
    scoring: str
    kept: frozenset[str]


def jobs(groups: Sequence[Group], every: Sequence[str]) -> list[Job]:
    """The uniform models first, then each group restored, then each quantized alone."""
    everything = frozenset(every)
    return [
        Job(UNIFORM, "uniform-target", frozenset()),
        Job(UNIFORM, "uniform-keep", everything),
        *(Job(group, "restore-one", frozenset(group.layers)) for group in groups),
        *(Job(group, "quantize-one", everything - set(group.layers)) for group in groups),
    ]


def cell_rows(job: Job, batch: TeacherBatch, logprob: torch.Tensor, exact: torch.Tensor) -> list[list]:
    """One row per cell: the problems' mean answer log-probability and exact-match rate."""
    rows = []
    for cell in dict.fromkeys(batch.cells):
        mask = torch.tensor([found == cell for found in batch.cells])
        block = "" if job.group.block is None else job.group.block
        rows.append(
            [job.group.name, block, job.group.kind, len(job.group.layers), job.scoring, cell[0], cell[1]]
            + [int(mask.sum()), f"{logprob[mask].mean().item():.6f}", f"{exact[mask].double().mean().item():.6f}"]
        )
    return rows


def done_jobs(path: Path, cells: int) -> set[tuple[str, str]]:
    """The (group, scoring) pairs ``table.csv`` holds whole: a row for each of the ``cells`` (a kill in the middle
    of an append leaves a pair short, or a line cut, which is then scored again)."""
    if not path.exists():
        return set()
    found: dict[tuple[str, str], set] = {}
    for row in read_table(path):
        found.setdefault((row["group"], row["scoring"]), set()).add((row["task"], row["length"]))
    return {pair for pair, held in found.items() if len(held) == cells}


def jobs_left(every: Sequence[Job], path: Path, cells: int) -> list[Job]:
    """The jobs of ``every`` that ``table.csv`` does not hold whole, in their order: what a (resumed) table scores."""
    done = done_jobs(path, cells)
    return [job for job in every if (job.group.name, job.scoring) not in done]


def fill_table(
    mixer: Mixer,
    todo: Sequence[Job],
    batch: TeacherBatch,
    pad_id: int,
    path: Path,
    advance: Callable[[], None] = lambda: None,
) -> None:
    """Score the jobs ``todo`` (jobs_left: those ``table.csv`` lacks), appending each one's rows as it finishes. A
    group's job computes only the blocks from its own on (harness/recipes/mix_scores.py): the blocks before it are
    its uniform model's, recorded when that model scores the problems (again, where a resumed table has its rows)."""
    if not path.exists():
        append_lines(path, [csv_line(COLUMNS)])
    mixes = MixScores(mixer, batch, pad_id)
    uniform = {"target": frozenset(), "keep": frozenset(mixer.layers)}
    for job in todo:
        base = "keep" if job.scoring in ("uniform-keep", "quantize-one") else "target"
        mixes.base(uniform[base])  # scored once, also where a resumed table holds its rows
        scores = mixes.of(job.kept)
        append_lines(path, [csv_line(row) for row in cell_rows(job, batch, scores.logprob, scores.exact)])
        advance()
    mixer.use(())


def read_table(path: Path) -> list[dict]:
    """table.csv's whole rows, numbers as numbers; of a row scored twice (after a kill), the later."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    kept: dict[tuple, dict] = {}
    for row in rows:
        try:
            row["length"], row["n"] = int(row["length"]), int(row["n"])
            row["logprob"], row["exact"] = float(row["logprob"]), float(row["exact"])
            row["block"] = int(row["block"]) if row["block"] != "" else None
        except (TypeError, ValueError, KeyError):
            continue  # a line a kill cut short
        kept[(row["group"], row["scoring"], row["task"], row["length"])] = row
    return list(kept.values())


def effects(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per group, over all cells (weighted by problems): ``gain``, what restoring it alone buys in answer
    log-probability against uniform TARGET, ``cost``, what quantizing it alone costs against uniform KEEP, and the
    same two in exact match (``gain_exact``, ``cost_exact``)."""

    def pooled(group: str, scoring: str, field: str) -> float:
        found = [row for row in rows if row["group"] == group and row["scoring"] == scoring]
        return sum(row[field] * row["n"] for row in found) / max(1, sum(row["n"] for row in found))

    found: dict[str, dict[str, float]] = {}
    for group in dict.fromkeys(row["group"] for row in rows if row["group"] != UNIFORM.name):
        found[group] = {
            "gain": pooled(group, "restore-one", "logprob") - pooled("all", "uniform-target", "logprob"),
            "cost": pooled("all", "uniform-keep", "logprob") - pooled(group, "quantize-one", "logprob"),
            "gain_exact": pooled(group, "restore-one", "exact") - pooled("all", "uniform-target", "exact"),
            "cost_exact": pooled("all", "uniform-keep", "exact") - pooled(group, "quantize-one", "exact"),
        }
    return found


def heatmap_png(rows: list[dict], title: str) -> bytes:
    """Two panels, blocks down and group kinds across: what restoring each group buys, and what quantizing it
    alone costs, in mean answer log-probability."""
    import matplotlib.pyplot as plt

    found = effects(rows)
    kinds = list(dict.fromkeys(row["kind"] for row in rows if row["block"] is not None))
    blocks = sorted({row["block"] for row in rows if row["block"] is not None})
    fig, axes = plt.subplots(1, 2, figsize=(3 + 1.1 * len(kinds) * 2, 1.5 + 0.22 * len(blocks)), squeeze=False)
    for ax, field, label in ((axes[0][0], "gain", "restore one: gain"), (axes[0][1], "cost", "quantize one: cost")):
        grid = [[found.get(_name(block, kind), {}).get(field, float("nan")) for kind in kinds] for block in blocks]
        # a diverging scale around zero: a restore that hurts (groups interact) shows as such, not as a small gain
        reach = max((abs(value) for line in grid for value in line if value == value), default=1.0) or 1.0
        image = ax.imshow(grid, aspect="auto", cmap="RdBu_r", vmin=-reach, vmax=reach)
        ax.set_xticks(range(len(kinds)), kinds)
        ax.set_yticks(range(len(blocks)), [str(block) for block in blocks], fontsize=6)
        ax.set_ylabel("decoder block")
        ax.set_title(f"{label}\n(answer log-prob, nats)", fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(title, fontsize=9)
    return figure_png(fig)


def _name(block: int, kind: str) -> str:
    return f"block {block}" if kind == "block" else f"block {block} {kind}"
