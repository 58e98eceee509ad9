"""The frontier: exact match on the confirmation problems against bits a weight, for every recipe confirmed in a
sensitivity directory and the variants at its bits (heuristic, random, the other ranking), with uniform TARGET and
KEEP and the fp32 reference as a line; each point with its Wilson 95% interval."""

from __future__ import annotations

import matplotlib.pyplot as plt

from harness.reports.figures import accuracy_axes, figure_png
from harness.runs.compare import wilson_interval

MARKERS = {"restore-one ranking": "v", "quantize-one ranking": "^", "heuristic": "s", "random": "x"}
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
            kind = f"{ranking_of(name)} ranking" if row["variant"].startswith("recipe") else row["variant"]
            points.setdefault(kind, []).append((row["bits"], row["accuracy"], n))
            reference = row["accuracy"] - row["difference"]
    return {kind: sorted(set(found)) for kind, found in points.items()}, reference


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
