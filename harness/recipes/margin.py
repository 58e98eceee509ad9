"""A margin against the reference: a mix meets ``--margin D`` where, in every cell of the longest length, its exact
match on the search's problems is at most D below the reference's (fp32's) on the same problems. How far a mix falls
short names the closest mix where none meets it; the discordance of the one that meets says how many paired problems
a confirmation of D needs (confirm.problems_needed).

>>> margin = Margin(0.1, torch.tensor([True, True, True, False]), [("add", 2), ("add", 2), ("add", 3), ("add", 3)])
>>> hits = torch.tensor([True, False, True, False])
>>> margin.shortfall(hits), margin.meets(hits), margin.discordance(hits)
(0.0, True, 0.0)
>>> margin.shortfall(torch.tensor([True, True, False, False]))
0.5
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class Margin:
    """``Margin(D, reference_exact, cells)``: the reference's per-problem exact match and each problem's cell."""

    def __init__(self, margin: float, reference: torch.Tensor, cells: Sequence[tuple[str, int]]):
        self.margin, self.reference = margin, reference
        self.longest = max(length for _, length in cells)
        self.rows = {cell: [index for index, found in enumerate(cells) if found == cell]
                     for cell in dict.fromkeys(cells) if cell[1] == self.longest}  # fmt: skip

    def shortfall(self, exact: torch.Tensor) -> float:
        """The most any cell of the longest length falls below the reference's exact match."""
        return max(
            float(self.reference[rows].double().mean() - exact[rows].double().mean()) for rows in self.rows.values()
        )

    def meets(self, exact: torch.Tensor) -> bool:
        return self.shortfall(exact) <= self.margin + 1e-12

    def discordance(self, exact: torch.Tensor) -> float:
        """The share of the longest length's problems on which the mix and the reference disagree."""
        rows = [row for cell_rows in self.rows.values() for row in cell_rows]
        return float((exact[rows] != self.reference[rows]).double().mean())
