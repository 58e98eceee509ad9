"""The frontier drawn: harness.frontier's points (``points_png``), and a sensitivity directory's confirmed recipes
(``frontier_png``).

The latter: exact match on the confirmation problems against bits a weight, for every recipe confirmed in a
sensitivity directory and the variants at its bits (the best rule, the table's choice by either ranking, heuristic,
random), with uniform TARGET and KEEP and the fp32 reference as a line; each point with its Wilson 95% interval."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt

from harness.reports.figures import accuracy_axes, figure_png
from harness.runs.compare import wilson_interval

MARKERS = {
    "search": "o",
    "best rule": "P",
    "restore-one ranking": "v",
    "quantize-one ranking": "^",
    "heuristic": "s",
    "random": "x",
}
DEFAULT_RANKING = "restore-one"


def recipe_name(base: str, ranking: str) -> str:
    """A recipe's name: its budget or margin (``5.5bits``, ``margin-0.02``), and its ranking where that is not the
    default's (whose files keep their names).

    >>> recipe_name("5.5bits", "restore-one"), recipe_name("6.5bits", "quantize-one")
    ('5.5bits', '6.5bits-by-quantize-one')
    """
    return base if ranking == DEFAULT_RANKING else f"{base}-by-{ranking}"


def ranking_of(name: str) -> str:
    """The ranking a recipe's name says it was chosen by.

    >>> ranking_of("5.5bits"), ranking_of("6.5bits-by-quantize-one")
    ('restore-one', 'quantize-one')
    """
    return name.rsplit("-by-", 1)[1] if "-by-" in name else DEFAULT_RANKING


def frontier_series(recipes: dict) -> tuple[dict[str, list[tuple[float, float, int]]], float | None]:
    """(bits, accuracy, n) points by series, and the fp32 reference. A recipe and the other recipe's comparison
    variant of the same ranking are one series ("restore-one ranking", "quantize-one ranking"): the same mixes."""
    points: dict[str, list[tuple[float, float, int]]] = {}
    reference = None
    for name, made in recipes.items():
        confirmed = made.get("confirmed")
        if not confirmed:
            continue
        n = confirmed["samples"]  # each row is one cell's
        for row in confirmed["rows"]:
            if row.get("baseline", "fp32") != "fp32":
                continue  # a head-to-head row: its variant's point is drawn from its row against fp32
            points.setdefault(series_of(name, made, row["variant"]), []).append((row["bits"], row["accuracy"], n))
            reference = row["accuracy"] - row["difference"]
    return {kind: sorted(set(found)) for kind, found in points.items()}, reference


def series_of(name: str, made: dict, variant: str) -> str:
    """The series a confirmed row's point belongs to: the search's recipes are one ("search"; a recipe recorded before
    the search scored mixes whole, without a ``source``, was its ranking's table choice), each recipe's best rule
    another ("best rule"), and every other variant its own.

    >>> series_of("5bits", {"source": "search"}, "recipe 4.98 bits"), series_of("5bits", {}, "recipe 4.98 bits")
    ('search', 'restore-one ranking')
    >>> series_of("5bits", {"source": "rule every o"}, "rule: every o"), series_of("5bits", {}, "random")
    ('best rule', 'random')
    """
    if variant.startswith("recipe"):
        return "search" if "source" in made else f"{ranking_of(name)} ranking"
    return "best rule" if variant.startswith("rule: ") else variant


def frontier_png(recipes: dict, title: str) -> bytes:
    """``recipes``: sensitivity.json's recipes, each with its ``confirmed`` rows (variant, bits, accuracy, n)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points, reference = frontier_series(recipes)
    for kind, found in points.items():
        low_high = [wilson_interval(round(accuracy * n), n) for _, accuracy, n in found]
        ax.errorbar(
            [bits for bits, _, _ in found], [accuracy for _, accuracy, _ in found],
            yerr=[[a - low for (_, a, _), (low, _) in zip(found, low_high, strict=True)],
                  [high - a for (_, a, _), (_, high) in zip(found, low_high, strict=True)]],
            marker=MARKERS.get(kind, "D"), linestyle="-" if kind in MARKERS else "none", capsize=3, label=kind,
        )  # fmt: skip
    if reference is not None:
        ax.axhline(reference, color="black", linestyle=":", label="fp32")
    accuracy_axes(ax, title, "bits a weight of the quantized layers (as the checkpoints store them)")
    return figure_png(fig)


def points_png(rows: Sequence, title: str) -> bytes:
    """harness.frontier's plot, a panel a cell: exact match against bits a weight with Wilson intervals, one series
    per rounding method (uniform TARGET and its recipes joined by bits, its best rules as open markers of its
    colour), uniform KEEP as a square, fp32 as a dotted line; the Pareto set ringed. The cell is the title's second
    line: a title naming three methods fills the panel's width."""
    cells = list(dict.fromkeys((row.task, row.length) for row in rows))
    fig, axes = plt.subplots(1, len(cells), figsize=(7 * len(cells), 4.5), squeeze=False)
    for ax, (task, length) in zip(axes[0], cells, strict=True):
        cell = [row for row in rows if (row.task, row.length) == (task, length)]
        colours = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"])
        for method in dict.fromkeys(row.method for row in cell if row.method):
            colour = next(colours)
            line = sorted((row for row in cell if row.method == method and row.kind != "rule"), key=lambda r: r.bits)
            _points(ax, line, colour, "o", "-", method)
            rules = [row for row in cell if row.method == method and row.kind == "rule"]
            _points(ax, rules, colour, "P", "none", f"{method}: best rule", hollow=True)
        _points(ax, [row for row in cell if row.kind == "keep"], "black", "s", "none", "uniform KEEP")
        for row in cell:
            if row.kind == "reference":
                ax.axhline(row.accuracy, color="black", linestyle=":", label=row.point)
        front = [row for row in cell if row.pareto and row.kind != "reference"]
        ax.scatter([row.bits for row in front], [row.accuracy for row in front], s=180, facecolors="none",
                   edgecolors="grey", label="Pareto set")  # fmt: skip
        accuracy_axes(ax, f"{title}\n({task} n={length})", "bits a weight of the quantized layers (as stored)")
    return figure_png(fig)


def _points(ax, rows: Sequence, colour: str, marker: str, style: str, label: str, hollow: bool = False) -> None:
    if not rows:
        return
    ax.errorbar(
        [row.bits for row in rows], [row.accuracy for row in rows],
        yerr=[[row.accuracy - row.low for row in rows], [row.high - row.accuracy for row in rows]],
        color=colour, marker=marker, linestyle=style, capsize=3, label=label,
        markerfacecolor="none" if hollow else colour,
    )  # fmt: skip
