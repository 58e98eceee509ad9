"""The frontier plot's series, read from the committed MXFP4 report (reports/sensitivity-smollm2-arith-mxfp4): each
ranking's recipes are one series, joined by the other recipes' comparison variant of that ranking (the same mixes)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.recipes import frontier

REPORT = Path(__file__).resolve().parents[3] / "reports" / "sensitivity-smollm2-arith-mxfp4" / "sensitivity.json"


def test_each_ranking_is_one_series_and_each_mix_one_point():
    recipes = json.loads(REPORT.read_text())["recipes"]
    series, reference = frontier.frontier_series(recipes)
    assert set(series) == {"restore-one ranking", "quantize-one ranking", "heuristic", "random", "mxfp4", "fp8-dynamic"}
    assert [round(bits, 2) for bits, _, _ in series["restore-one ranking"]] == [4.94], "a recipe and a variant: one"
    assert [round(bits, 2) for bits, _, _ in series["quantize-one ranking"]] == [5.49, 6.47]
    assert reference is not None and 0 < reference <= 1
    assert frontier.frontier_png(recipes, "MXFP4")[:4] == b"\x89PNG"
