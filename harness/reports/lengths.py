"""Length is a result: how many tokens each series generates, and whether one generates more than another on the
same problems (does an int4 model think longer to get there?).

Per cell, results.csv holds the mean, median, 90th percentile and most of the generated tokens, the thinking and
answer tokens (free form: before and after the thinking block's end) and the truncated generations. Here, every
series is paired with the run's first on the same problems (cell, seed, index), per task pooled over its lengths and
seeds: the mean difference in generated tokens (variant - baseline) with a paired t 95% interval, and the Wilcoxon
signed-rank test of the differences (Pratt's handling of ties: most pairs of a first-line answer differ by nothing),
Holm-adjusted over the table's family as the accuracy comparisons are (harness/runs/compare.py). lengths.csv holds them,
summary.md their table, lengths.png the mean generated tokens against operand length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

from harness.runs.compare import SIGNIFICANCE, holm_adjusted
from harness.runs.results import CellKey, csv_text


@dataclass(frozen=True)
class LengthComparison:
    task: str
    base: int
    baseline: str
    variant: str
    n: int
    baseline_tokens: float  # mean generated tokens on the paired problems
    variant_tokens: float
    difference: float  # variant - baseline, mean over pairs
    diff_low: float
    diff_high: float
    baseline_thinking: float
    variant_thinking: float
    p_value: float  # Wilcoxon signed-rank, two-sided
    p_holm: float = 1.0
    family: int = 1


COLUMNS = [f.name for f in fields(LengthComparison)]


def paired_lengths(samples: Sequence[dict], series_of, task_of) -> list[LengthComparison]:
    """Every series against the first, per task (pooled over lengths and seeds), on the problems both answered."""
    by_series: dict[str, dict[tuple, tuple[str, int, int]]] = {}
    for sample in samples:
        if "tokens" not in sample:  # written before lengths were recorded
            continue
        key = (task_of(sample), int(sample["base"]), int(sample["length"]), int(sample.get("seed", 0)))
        key += (int(sample["index"]),)
        value = (sample["expression"], int(sample["tokens"]), int(sample.get("thinking_tokens", 0)))
        by_series.setdefault(series_of(sample), {})[key] = value
    names = list(by_series)
    if len(names) < 2:
        return []
    baseline, results = names[0], []
    for variant in names[1:]:
        pooled: dict[tuple, list[tuple[int, int, int, int]]] = {}
        for key, (expression, tokens, thinking) in by_series[variant].items():
            reference = by_series[baseline].get(key)
            if reference and reference[0] == expression:
                pooled.setdefault(key[:2], []).append((reference[1], tokens, reference[2], thinking))
        results += [compare_lengths(task, base, baseline, variant, pairs) for (task, base), pairs in pooled.items()]
    return holm_adjusted(results)  # one family: every series against the first


def compare_lengths(task: str, base: int, baseline: str, variant: str, pairs) -> LengthComparison:
    from scipy import stats  # here, not at import: scipy.stats costs every command 0.7 s to load

    differences = [b - a for a, b, _, _ in pairs]
    n = len(differences)
    mean = sum(differences) / n
    spread = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1)) if n > 1 else 0.0
    margin = float(stats.t.ppf(0.975, n - 1)) * spread / math.sqrt(n) if n > 1 else math.inf
    p_value = 1.0
    if any(differences):
        p_value = float(stats.wilcoxon(differences, zero_method="pratt").pvalue)
    return LengthComparison(
        task=task,
        base=base,
        baseline=baseline,
        variant=variant,
        n=n,
        baseline_tokens=sum(a for a, _, _, _ in pairs) / n,
        variant_tokens=sum(b for _, b, _, _ in pairs) / n,
        difference=mean,
        diff_low=mean - margin,
        diff_high=mean + margin,
        baseline_thinking=sum(t for _, _, t, _ in pairs) / n,
        variant_thinking=sum(t for _, _, _, t in pairs) / n,
        p_value=p_value,
    )


def lengths_csv(comparisons: Sequence[LengthComparison]) -> str:
    decimals = ("baseline_tokens", "variant_tokens", "difference", "diff_low", "diff_high")
    return csv_text(comparisons, COLUMNS, dict.fromkeys(decimals + ("baseline_thinking", "variant_thinking"), 2))


def lengths_markdown(rows, comparisons: Sequence[LengthComparison]) -> list[str]:
    """summary.md's section: generated tokens per series and task, truncations, and the paired table."""
    if not rows or not any(row.tokens_mean for row in rows):
        return []
    lines = [
        "## Generated tokens",
        "",
        "Mean generated tokens per problem (thinking / answer where a thinking block was kept), pooled over lengths "
        "and seeds; truncated: generations the budget cut (in free form their own verdict, never an answer).",
        "",
        "| series | task | tokens | thinking / answer | 90th pct (max cell) | truncated |",
        "|---|---|---:|---:|---:|---:|",
    ]
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault((row.key.series, row.key.task_label, row.base), []).append(row)
    for (series, task, base), own in groups.items():
        n = sum(row.n for row in own)
        mean = sum(row.tokens_mean * row.n for row in own) / n
        thinking = sum(row.thinking_tokens_mean * row.n for row in own) / n
        lines.append(
            f"| {series} | {task} (base {base}) | {mean:.1f} | {thinking:.1f} / {mean - thinking:.1f} | "
            f"{max(row.tokens_p90 for row in own):.0f} | {sum(row.truncated for row in own)}/{n} |"
        )
    lines.append("")
    if comparisons:
        first = comparisons[0].baseline
        significant = sum(c.p_holm < SIGNIFICANCE for c in comparisons)
        lines += [
            f"### Paired lengths against {first}",
            "",
            "Same problems: mean generated tokens, the mean difference (variant - baseline) with a paired t 95% "
            "interval, Wilcoxon signed-rank p, and p Holm-adjusted over this table's "
            f"{len(comparisons)} tests ({significant} significant). lengths.csv holds them.",
            "",
            "| variant | task | pairs | baseline | variant | difference [95% CI] | p | p (Holm) |",
            "|---|---|---:|---:|---:|---|---:|---:|",
        ]
        for c in comparisons:
            lines.append(
                f"| {c.variant} | {c.task} (base {c.base}) | {c.n} | {c.baseline_tokens:.1f} | {c.variant_tokens:.1f} "
                f"| {c.difference:+.1f} [{c.diff_low:+.1f}, {c.diff_high:+.1f}] | {c.p_value:.3g} | {c.p_holm:.3g} |"
            )
        lines.append("")
    return lines


def lengths_plot_png(rows, samples: Sequence[dict] = ()) -> bytes:
    """Per task, two panels: the mean generated tokens against operand length, a line per series (thinking dashed,
    a free-form budget dotted), and the distribution of every problem's tokens per series (pooled over lengths and
    seeds), a box per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from harness.questions.answers import answer_mode
    from harness.reports.figures import figure_png

    tasks = list(dict.fromkeys((row.key.task_label, row.base) for row in rows))
    width = max(1, len(tasks))
    fig, axes = plt.subplots(2, width, figsize=(5.2 * width, 7.2), squeeze=False)
    for column, (task, base) in enumerate(tasks):
        ax, box = axes[0][column], axes[1][column]
        own = [row for row in rows if (row.key.task_label, row.base) == (task, base) and row.tokens_mean]
        series_names = list(dict.fromkeys(row.key.series for row in own))
        colors = {}
        for series in series_names:
            cells: dict[int, list] = {}
            for row in own:
                if row.key.series == series:
                    cells.setdefault(row.length, []).append(row)
            lengths = sorted(cells)
            means = [sum(r.tokens_mean * r.n for r in cells[n]) / sum(r.n for r in cells[n]) for n in lengths]
            line = ax.plot(lengths, means, marker="o", label=series)[0]
            colors[series] = line.get_color()
            thinking = [
                sum(r.thinking_tokens_mean * r.n for r in cells[n]) / sum(r.n for r in cells[n]) for n in lengths
            ]
            if any(thinking):
                ax.plot(lengths, thinking, linestyle="--", color=line.get_color(), alpha=0.7)
        budgets = {getattr(answer_mode(row.answer_mode), "max_new_tokens", None) for row in own}
        for budget in budgets - {None}:
            ax.axhline(budget, color="grey", linestyle=":", linewidth=1)
            ax.annotate("budget", (ax.get_xlim()[0], budget), fontsize=7, color="grey", va="bottom")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{task} (base {base})")
        ax.set_xlabel("operand length n (digits)")
        ax.set_ylabel("generated tokens (mean per problem)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        tokens = {name: [] for name in series_names}
        for sample in samples:
            key = CellKey.of(sample)
            if key.series in tokens and "tokens" in sample and (key.task_label, int(sample["base"])) == (task, base):
                tokens[key.series].append(int(sample["tokens"]))
        shown = [name for name in series_names if tokens[name]]
        if shown:
            drawn = box.boxplot([tokens[name] for name in shown], whis=(5, 95), showfliers=False, patch_artist=True)
            for patch, name in zip(drawn["boxes"], shown, strict=True):
                patch.set_facecolor(colors[name])
                patch.set_alpha(0.6)
            box.set_xticks(range(1, len(shown) + 1), shown, rotation=30, ha="right", fontsize=7)
        box.set_ylabel("generated tokens per problem (5-95%)")
        box.grid(alpha=0.3, axis="y")
    return figure_png(fig)
