"""The frontier: exact match on the confirmation problems against bits a weight, for every recipe confirmed in a
sensitivity directory and the variants at its bits (heuristic, random, the other ranking), with uniform TARGET and
KEEP and the fp32 reference as a line; each point with its Wilson 95% interval."""

from __future__ import annotations

import matplotlib.pyplot as plt

from harness.reports.figures import accuracy_axes, figure_png
from harness.runs.compare import wilson_interval

MARKERS = {"recipe": "o", "heuristic": "s", "random": "x", "quantize-one ranking": "^", "restore-one ranking": "v"}


def kind_of(variant: str) -> str:
    return "recipe" if variant.startswith("recipe") else variant


def frontier_png(recipes: dict, title: str) -> bytes:
    """``recipes``: sensitivity.json's recipes, each with its ``confirmed`` rows (variant, bits, accuracy, n)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points: dict[str, list[tuple[float, float, int]]] = {}
    reference = None
    for made in recipes.values():
        confirmed = made.get("confirmed")
        if not confirmed:
            continue
        n = confirmed["samples"]  # each row is one cell's
        for row in confirmed["rows"]:
            points.setdefault(kind_of(row["variant"]), []).append((row["bits"], row["accuracy"], n))
            reference = row["accuracy"] - row["difference"]
    for kind, found in points.items():
        found = sorted(set(found))
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
