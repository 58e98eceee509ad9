"""summary.md, accuracy_vs_length.png, comparisons.csv, anatomy.csv and error_anatomy.png from a run directory's
results.csv and samples.jsonl.

harness.eval makes them again at most once a minute while a run goes and when it ends (harness.rescore when it
rescores), so that at its end they describe exactly the cells that are saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path

import yaml

from harness.anatomy import AnatomyRow, anatomy_csv, anatomy_markdown, anatomy_plot_png, anatomy_rows
from harness.compare import Comparison, comparisons_csv, comparisons_markdown, paired_comparisons
from harness.figures import accuracy_axes, figure_png
from harness.files import atomic_write_bytes, atomic_write_text
from harness.problems import parse_task
from harness.prompts import prompt_deviations
from harness.results import CellKey, CellResult, Sample
from harness.scoring import wilson_interval

BASE_10_ONLY = 10  # the paper's reference table is base 10
MARKERS = "osD^vP*X"


def task_label(record) -> str:
    """The task as written in configs and flags, of a results row or a sample."""
    return CellKey.of(record).task_label


def series_label(record) -> str:
    """'model precision [+adapter]' of a results row or a sample."""
    return CellKey.of(record).series


@cache
def reference() -> dict[str, dict[str, dict[int, float]]]:
    return yaml.safe_load(resources.files("harness").joinpath("reference.yaml").read_text(encoding="utf-8"))


def _grouped(rows: Sequence[CellResult]) -> dict[tuple[str, int], dict[str, dict[int, CellResult]]]:
    """(task label, base) -> series label -> length -> row, in first-seen order."""
    groups: dict[tuple[str, int], dict[str, dict[int, CellResult]]] = {}
    for row in rows:
        series = groups.setdefault((task_label(row), row.base), {})
        series.setdefault(series_label(row), {})[row.length] = row
    return groups


def summary_markdown(
    rows: Sequence[CellResult],
    commands: Sequence[str],
    comparisons: Sequence[Comparison] = (),
    anatomy: Sequence[AnatomyRow] = (),
) -> str:
    lines = ["# Accuracy vs operand length", ""]
    if rows:
        first = rows[0]
        lines.append(
            f"Exact-match accuracy with its Wilson 95% interval; n = {first.n} problems per cell, "
            f"decoding {first.decoding}, seed {first.seed}."
        )
        lines.append("")
        deviations = sorted({note for row in rows for note in prompt_deviations(parse_task(task_label(row)), row.base)})
        if deviations:
            lines += ["Prompts that depart from the paper's (which evaluated base 10 only):", ""]
            lines += [f"- {note}" for note in deviations] + [""]
    for (label, base), series in _grouped(rows).items():
        lines += [f"## {label}, base {base}", ""]
        refs = {name: table[label] for name, table in reference().items() if base == BASE_10_ONLY and label in table}
        names = list(series) + list(refs)
        lines.append("| length | " + " | ".join(names) + " |")
        lines.append("|---:|" + "---:|" * len(names))
        lengths = sorted({length for cells in series.values() for length in cells})
        for length in lengths:
            cells = []
            for name in series:
                row = series[name].get(length)
                cells.append(accuracy_cell(row) if row else "")
            cells += [f"{refs[name][length]:.3f}" if length in refs[name] else "" for name in refs]
            lines.append(f"| {length} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += comparisons_markdown(comparisons)
    lines += invariance_markdown(rows)
    lines += unreadable_markdown(rows)
    lines += anatomy_markdown(anatomy)
    lines += [
        "## Models",
        "",
        "| model | precision | method | weight bits | weight dtype | activation dtype | matmul | kernel "
        "| footprint (MB) | tokens/s |",
        "|---|---|---|---:|---|---|---|---|---:|---:|",
    ]
    seen = set()
    for row in rows:
        if series_label(row) in seen:
            continue
        seen.add(series_label(row))
        speed = [r.tokens_per_s for r in rows if series_label(r) == series_label(row)]
        lines.append(
            f"| {row.model}{' + ' + row.adapter if row.adapter else ''} | {row.precision} | {row.method} | "
            f"{row.weight_bits} | {row.weight_dtype} | {row.activation_dtype} | "
            f"{row.matmul_precision or 'not recorded'} | {row.kernel or 'not recorded'} | "
            f"{row.footprint_mb:.0f} | "
            f"{sum(speed) / len(speed):.1f} |"
        )
    lines += served_markdown(rows)
    lines += (
        [
            "",
            "Reference columns are the paper's GPT-4o / GPT-4o-mini results (appendix table tab:gpt4).",
            "",
            "Produced by:",
            "",
            "```",
        ]
        + list(dict.fromkeys(commands))
        + ["```", ""]
    )
    return "\n".join(lines)


def served_markdown(rows: Sequence[CellResult]) -> list[str]:
    """The series a server answered: what answered them (every model id and endpoint over their cells), and the
    replies cut to their budget or first line; a series answered by several endpoints or models is said as such."""
    served: dict[str, list[CellResult]] = {}
    for row in rows:
        if row.precision_source == "declared":
            served.setdefault(series_label(row), []).append(row)
    if not served:
        return []
    lines = [
        "",
        f"Declared precisions: {', '.join(served)} ran on a server (--backend api), which decides what really runs; "
        "their precision is the label the user gave, not weights loaded here.",
        "",
    ]
    for name, own in served.items():
        endpoints = sorted({part for row in own for part in row.endpoint.split(",") if part})
        models = sorted({part for row in own for part in row.served_model.split(",") if part})
        cut = sum(row.cut_replies for row in own)
        several = (
            " (answered by several endpoints: each row names the ones that answered its cell)"
            if len(endpoints) > 1
            else ""
        )
        lines.append(
            f"- {name}: model {', '.join(models)} at {', '.join(endpoints)}{several}; {own[0].request_mode}; "
            f"{own[0].decoding_params}; {cut} repl{'y' if cut == 1 else 'ies'} cut to the request's budget or first "
            "line"
        )
    return lines


def accuracy_cell(row: CellResult) -> str:
    """'0.625 [0.47, 0.76]', from the row's counts (results.csv keeps 4 decimals: rounding its values again would
    print 0.62 for 0.625)."""
    low, high = wilson_interval(row.correct, row.n)
    return f"{row.correct / row.n:.3f} [{low:.2f}, {high:.2f}]"


def invariance_markdown(rows: Sequence[CellResult]) -> list[str]:
    """Per series: of the problems generated again at batch size 1 (--invariance-check), how many changed."""
    checked = [row for row in rows if row.flip_k]
    if not checked:
        return []
    lines = [
        "## Batch-size invariance",
        "",
        "Each cell's first K problems generated again, with the same seeds, in a batch of another size than the "
        "batched run's (alone, or in a batch of two for problems the run had generated alone): outputs and verdicts "
        "that differ from the batched run.",
        "",
        "| series | activation dtype | kernel | problems re-run | at batch size | outputs changed | verdicts changed |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    for name in dict.fromkeys(series_label(row) for row in checked):
        own = [row for row in checked if series_label(row) == name]
        k, outputs, verdicts = (sum(getattr(r, f) for r in own) for f in ("flip_k", "flip_outputs", "flip_verdicts"))
        sizes = sorted({size for r in own for size in (r.flip_batch or "1").split(",")}, key=int)
        lines.append(
            f"| {name} | {own[0].activation_dtype} | {own[0].kernel or 'not recorded'} | {k} | {', '.join(sizes)} "
            f"| {outputs} | {verdicts} |"
        )
    return [*lines, ""]


def unreadable_markdown(rows: Sequence[CellResult]) -> list[str]:
    """Per cell, how many answers the strict reader could not find (harness/scoring.py; reasons in samples.jsonl)."""
    if not any(row.no_answer for row in rows):
        return ["No answer was unreadable: every output stated one numeral where scoring looks for it.", ""]
    lines = [
        "## Unreadable answers",
        "",
        "Outputs from which no answer could be read, of n (the rule column of samples.jsonl says why for each).",
        "",
    ]
    for (label, base), series in _grouped(rows).items():
        lines += [f"**{label}, base {base}**", "", "| length | " + " | ".join(series) + " |"]
        lines.append("|---:|" + "---:|" * len(series))
        for length in sorted({length for cells in series.values() for length in cells}):
            cells = [series[name].get(length) for name in series]
            lines.append(f"| {length} | " + " | ".join(f"{c.no_answer}/{c.n}" if c else "" for c in cells) + " |")
        lines.append("")
    return lines


def accuracy_plot_png(rows: Sequence[CellResult]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _grouped(rows)
    panels = max(1, len(groups))
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.6), squeeze=False)
    for ax, ((label, base), series) in zip(axes[0], groups.items(), strict=False):
        # Series often coincide (fp32 and bf16 on a small model): dodge them sideways and vary the markers.
        width = 0.08 * (len(series) - 1)
        for number, (name, cells) in enumerate(series.items()):
            lengths = sorted(cells)
            x = [n + number * 0.08 - width / 2 for n in lengths]
            marker = MARKERS[number % len(MARKERS)]
            line = ax.plot(x, [cells[n].accuracy for n in lengths], marker=marker, label=name)[0]
            low, high = [cells[n].ci_low for n in lengths], [cells[n].ci_high for n in lengths]
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        measured = sorted({n for cells in series.values() for n in cells})
        if base == BASE_10_ONLY:
            for name, table in reference().items():
                # Only over the lengths we measured: the reference must not stretch the axis past our data.
                ref = sorted((n, a) for n, a in table.get(label, {}).items() if measured[0] <= n <= measured[-1])
                if ref:
                    ax.plot(
                        *zip(*ref, strict=True),
                        linestyle=":",
                        color="gray",
                        alpha=0.8,
                        markersize=8,
                        marker="x" if "mini" in name else "+",
                        label=name,
                    )
        ax.set_xticks(measured)
        accuracy_axes(ax, f"{label} (base {base})", "operand length n (digits)")
    return figure_png(fig)


def write_reports(out: Path, rows: Sequence[CellResult], commands: Sequence[str], samples: Sequence[Sample]) -> None:
    """Every report of a run directory, from its rows and the samples of its finished cells (RunDir.samples)."""
    comparisons = paired_comparisons(samples, series_label, task_label)
    anatomy = anatomy_rows(samples, series_label, task_label)
    atomic_write_text(out / "comparisons.csv", comparisons_csv(comparisons))
    atomic_write_text(out / "anatomy.csv", anatomy_csv(anatomy))
    atomic_write_bytes(out / "error_anatomy.png", anatomy_plot_png(anatomy))
    atomic_write_text(out / "summary.md", summary_markdown(rows, commands, comparisons, anatomy))
    atomic_write_bytes(out / "accuracy_vs_length.png", accuracy_plot_png(rows))
