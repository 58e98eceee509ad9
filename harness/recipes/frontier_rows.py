"""The frontier's rows (one a point and cell: bits, exact match with its Wilson interval, whether it is on the Pareto
set) and what the command says of them: the best point within each budget and the head-to-head verdicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from harness.recipes.frontier_table import REFERENCE, FrontierPoint, pareto
from harness.runs.compare import SIGNIFICANCE, Answers, Comparison, wilson_interval


@dataclass(frozen=True)
class FrontierRow:
    """One point's exact match in one cell."""

    point: str
    method: str
    kind: str
    budget: float | None
    detail: str
    task: str
    length: int
    bits: float
    n: int
    correct: int
    accuracy: float
    low: float
    high: float
    pareto: bool


COLUMNS = [field.name for field in fields(FrontierRow)]


def frontier_rows(
    points: Sequence[FrontierPoint], answers: Mapping[str, Answers], bits: Mapping[str, float]
) -> list[FrontierRow]:
    """Each point's row per cell (task, length), the Pareto set marked within each cell."""
    counts: dict[tuple[str, str, int], list[int]] = {}
    for point in points:
        for (task, _, length, _, _), (_, right) in answers.get(point.name, {}).items():
            tally = counts.setdefault((point.name, task, length), [0, 0])
            tally[0] += 1
            tally[1] += right
    cells = sorted({(task, length) for _, task, length in counts})
    by_name = {point.name: point for point in points}
    rows = []
    for task, length in cells:
        here = {name: tally for (name, cell_task, cell_length), tally in counts.items() if (cell_task, cell_length) ==
                (task, length)}  # fmt: skip
        front = pareto({name: (bits[name], right / n) for name, (n, right) in here.items()})
        for name, (n, right) in here.items():
            point = by_name[name]
            low, high = wilson_interval(right, n)
            rows.append(FrontierRow(name, point.method, point.kind, point.budget, point.detail, task, length,
                                    bits[name], n, right, right / n, low, high, name in front))  # fmt: skip
    return rows


def best_points(rows: Sequence[FrontierRow], budgets: Sequence[float]) -> list[tuple[float, FrontierRow]]:
    """(budget, the most accurate point within it, fp32 apart; of two alike the one of fewer bits), each cell's in
    turn."""
    found = []
    for cell in dict.fromkeys((row.task, row.length) for row in rows):
        here = [row for row in rows if (row.task, row.length) == cell and row.kind != "reference"]
        for budget in budgets:
            within = [row for row in here if row.bits <= budget + 1e-9]
            if within:
                found.append((budget, max(within, key=lambda row: (row.accuracy, -row.bits))))
    return found


def say_best(
    rows: Sequence[FrontierRow], table: Sequence[Comparison], budgets: Sequence[float], deploy: Mapping[str, str]
) -> None:
    """The best point within each budget per cell (and how it deploys: ``deploy``), and each head-to-head pair's
    paired difference."""
    best = best_points(rows, budgets)
    for task, length in dict.fromkeys((row.task, row.length) for row in rows):
        n = max(row.n for row in rows if (row.task, row.length) == (task, length))
        print(f"{task} n={length} ({n} problems a point):")
        for budget, top in best:
            if (top.task, top.length) == (task, length):
                print(f"  best within {budget:g} bits: {top.point} ({top.bits:.2f} bits) exact {top.accuracy:.3f} "
                      f"[{top.low:.3f}, {top.high:.3f}]; {deploy[top.point]}")  # fmt: skip
        for row in table:
            if (row.task, row.length) != (task, str(length)) or row.baseline == REFERENCE:
                continue
            verdict = "resolved" if row.p_holm < SIGNIFICANCE else "not resolved"
            print(f"  {row.variant} against {row.baseline}: {row.difference:+.3f} [{row.diff_low:+.3f}, "
                  f"{row.diff_high:+.3f}], Holm p {row.p_holm:.3g} ({verdict})")  # fmt: skip
