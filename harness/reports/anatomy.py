"""Error anatomy (beyond the paper): where the answers break, read from samples.jsonl.

The paper's theory is about carries: a bounded-precision Transformer cannot propagate a carry through many
digits. So for every cell we count

- accuracy by the problem's **longest carry chain**: the longest run of consecutive digit columns that pass a
  carry on, when the answer is computed column by column from the least significant digit (column sums of the
  operands for addition, of the partial products for multiplication; a carry may exceed 1 there). For
  ``mul:trunc=L`` only the carries into the L columns the answer asks for count. For addition the chain is the
  paper's quantity: how far one carry must travel. For multiplication it mostly tracks length: a column of
  partial products of n-digit numbers sums up to n digit products, so nearly every column past the first carries
  and the chain is close to the number of columns (read it with the length beside it, not as a separate cause);
- accuracy by **digit position** of the answer (0 = least significant): whether the stated answer has the gold
  digit there, both written to the gold answer's width (leading zeros count for nothing, as in exact match: "1"
  is "01" for a ``mul:trunc=2`` gold "01"), so a correct answer is right at every position; an unreadable answer
  is wrong at every position. The first position whose accuracy drops is the digit that goes wrong first.

Rows go to anatomy.csv, and error_anatomy.png draws both, a column per task, pooled over the task's lengths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from harness.questions.problems import OPERATORS
from harness.reports.figures import figure_png
from harness.runs.results import csv_text


@dataclass(frozen=True)
class AnatomyRow:
    series: str
    task: str
    base: int
    length: int
    kind: str  # carry_chain | digit_position
    value: int  # the chain length, or the digit position (0 = least significant)
    n: int
    correct: int
    accuracy: float


COLUMNS = [f.name for f in fields(AnatomyRow)]


def _digits(numeral: str, base: int) -> list[int]:
    """Least significant first."""
    return [int(char, base) for char in reversed(numeral)]


def longest_carry_chain(task: str, operands: Sequence[str], base: int, truncate: int | None = None) -> int:
    """The longest run of consecutive columns that carry into the next, computing the answer column by column;
    with ``truncate`` L, only carries into the L least significant columns (those the answer asks for)."""
    digits = [_digits(operand, base) for operand in operands]
    if task == "mul":
        a, b = digits
        columns = [0] * (len(a) + len(b))
        for i, x in enumerate(a):
            for j, y in enumerate(b):
                columns[i + j] += x * y
    else:
        columns = [sum(d[j] for d in digits if j < len(d)) for j in range(max(map(len, digits)))]
    if truncate:
        columns = columns[: truncate - 1]  # a carry out of column L-1 reaches no digit the answer asks for
    carry = chain = longest = 0
    for column in columns:
        carry = (column + carry) // base
        chain = chain + 1 if carry else 0
        longest = max(longest, chain)
    return longest


def digit_hits(extracted: str | None, gold: str) -> list[bool]:
    """Per gold digit position (0 = least significant): does the stated answer have that digit there, both written
    to the gold's width (leading zeros are no digits of the value: "1" and "01" agree everywhere, as exact match
    says)."""
    if extracted is None:
        return [False] * len(gold)
    width = len(gold)
    answer = (extracted.lower().lstrip("0") or "0").rjust(width, "0")
    gold = (gold.lower().lstrip("0") or "0").rjust(width, "0")
    return [answer[-1 - i] == gold[-1 - i] for i in range(width)]


def anatomy_rows(samples: Sequence[dict], series_of: Callable[[dict], str], task_of: Callable[[dict], str]):
    """AnatomyRows for every cell of ``samples``, in first-seen order."""
    counts: dict[tuple, list[int]] = {}
    for sample in samples:
        task, base = sample["task"], int(sample["base"])
        cell = (series_of(sample), task_of(sample), base, int(sample["length"]))
        operands = sample["expression"].split(f" {OPERATORS[task]} ")
        right = bool(sample["correct"])
        truncate = int(sample["truncate"]) if str(sample.get("truncate") or "").strip() else None
        chain = longest_carry_chain(task, operands, base, truncate)
        tally = counts.setdefault((*cell, "carry_chain", chain), [0, 0])
        tally[0] += 1
        tally[1] += right
        for position, hit in enumerate(digit_hits(sample.get("extracted"), sample["gold"])):
            tally = counts.setdefault((*cell, "digit_position", position), [0, 0])
            tally[0] += 1
            tally[1] += hit
    rows = [
        AnatomyRow(series, task, base, length, kind, value, n, correct, correct / n)
        for (series, task, base, length, kind, value), (n, correct) in counts.items()
    ]
    order = {name: number for number, name in enumerate(dict.fromkeys(row.series for row in rows))}
    return sorted(rows, key=lambda r: (order[r.series], r.task, r.base, r.length, r.kind, r.value))


CHAIN_MEANING = {
    "add": "how far a carry travels: the paper's quantity",
    "iter_add": "how far a carry travels (a column may carry more than 1)",
    "mul": "mostly the answer's length: nearly every column of partial products carries; read it beside the length",
}


def anatomy_markdown(rows: Sequence[AnatomyRow]) -> list[str]:
    """summary.md's section: accuracy by longest carry chain per task and series, pooled over lengths."""
    chains = [row for row in rows if row.kind == "carry_chain"]
    if not chains:
        return []
    lines = [
        "## Error anatomy: accuracy by longest carry chain",
        "",
        "Pooled over each task's lengths; correct/n per chain length (anatomy.csv has it per cell, and by answer "
        "digit; error_anatomy.png draws both). What the chain measures depends on the task:",
        "",
    ]
    tasks = list(dict.fromkeys((row.task, row.base) for row in chains))
    lines += [f"- {task}: {CHAIN_MEANING[task.split(':')[0]]}" for task in dict.fromkeys(t for t, _ in tasks)]
    for task, base in tasks:
        own = [row for row in chains if (row.task, row.base) == (task, base)]
        values = sorted({row.value for row in own})
        series = list(dict.fromkeys(row.series for row in own))
        lines += ["", f"**{task}, base {base}**", "", "| series | " + " | ".join(f"chain {v}" for v in values) + " |"]
        lines.append("|---|" + "---:|" * len(values))
        for name in series:
            pooled = {v: [0, 0] for v in values}
            for row in own:
                if row.series == name:
                    pooled[row.value][0] += row.correct
                    pooled[row.value][1] += row.n
            cells = [f"{c}/{n}" if n else "" for c, n in pooled.values()]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def anatomy_csv(rows: Sequence[AnatomyRow]) -> str:
    return csv_text(rows, COLUMNS, {"accuracy": 4})


def anatomy_plot_png(rows: Sequence[AnatomyRow]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    tasks = list(dict.fromkeys((row.task, row.base) for row in rows)) or [("", 10)]
    fig, axes = plt.subplots(2, len(tasks), figsize=(4.2 * len(tasks), 6.4), squeeze=False)
    for column, (task, base) in enumerate(tasks):
        for line, (kind, label) in enumerate(
            [("carry_chain", "longest carry chain (columns)"), ("digit_position", "answer digit (0 = last)")]
        ):
            ax = axes[line][column]
            pooled: dict[str, dict[int, list[int]]] = {}
            for row in rows:
                if (row.task, row.base, row.kind) == (task, base, kind):
                    tally = pooled.setdefault(row.series, {}).setdefault(row.value, [0, 0])
                    tally[0] += row.n
                    tally[1] += row.correct
            for series, values in pooled.items():
                xs = sorted(values)
                ax.plot(xs, [values[x][1] / values[x][0] for x in xs], marker="o", markersize=3, label=series)
            ax.set_title(f"{task} (base {base})" if line == 0 else "")
            ax.set_xlabel(label)
            ax.set_ylabel("accuracy" if kind == "carry_chain" else "digit accuracy")
            ax.set_ylim(-0.03, 1.03)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            if pooled:
                ax.legend(fontsize=7)
    fig.suptitle("Where answers break, pooled over each task's lengths", fontsize=10)
    return figure_png(fig)
