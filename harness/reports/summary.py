"""summary.md, accuracy_vs_length.png, comparisons.csv, anatomy.csv and error_anatomy.png from a run directory's
results.csv and samples.jsonl (the command that merges several runs into one report is harness/report.py).

harness.eval makes them again at most once a minute while a run goes and when it ends (harness.rescore when it
rescores), so that at its end they describe exactly the cells that are saved.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import yaml

from harness.core.files import atomic_write_bytes, atomic_write_text
from harness.models import held_out
from harness.questions.problems import parse_task
from harness.questions.prompts import prompt_deviations
from harness.reports.anatomy import AnatomyRow, anatomy_csv, anatomy_markdown, anatomy_plot_png, anatomy_rows
from harness.reports.figures import accuracy_axes, figure_png
from harness.reports.lengths import LengthComparison, lengths_csv, lengths_markdown, lengths_plot_png, paired_lengths
from harness.runs.compare import Comparison, comparisons_csv, comparisons_markdown, paired_comparisons, wilson_interval
from harness.runs.results import CellKey, CellResult, Sample

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


@dataclass(frozen=True)
class Pooled:
    """A series' cell over the run's seeds (one seed: that cell): counts summed, accuracy and its Wilson interval
    from them, and the per-seed accuracies' spread (range, sample standard deviation)."""

    correct: int
    n: int
    no_answer: int
    conflicts: int
    seeds: int
    lowest: float
    highest: float
    sd: float

    @classmethod
    def of(cls, rows: Sequence[CellResult]) -> Pooled:
        import statistics

        accuracies = [row.correct / row.n for row in rows]
        correct, n = sum(row.correct for row in rows), sum(row.n for row in rows)
        sd = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        unread, conflicts = sum(row.no_answer for row in rows), sum(row.conflicts for row in rows)
        return cls(correct, n, unread, conflicts, len(rows), min(accuracies), max(accuracies), sd)

    @property
    def accuracy(self) -> float:
        return self.correct / self.n

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.n)

    def cell(self) -> str:
        """'0.625 [0.47, 0.76]' from the counts (results.csv keeps 4 decimals: rounding its values again would print
        0.62 for 0.625); over several seeds, the seeds' range after it."""
        low, high = self.interval
        spread = f" (seeds {self.lowest:.2f}-{self.highest:.2f})" if self.seeds > 1 else ""
        return f"{self.accuracy:.3f} [{low:.2f}, {high:.2f}]{spread}"


def _grouped(rows: Sequence[CellResult]) -> dict[tuple[str, int], dict[str, dict[int, Pooled]]]:
    """(task label, base) -> series label -> length -> the cell pooled over seeds, in first-seen order."""
    groups: dict[tuple[str, int], dict[str, dict[int, list[CellResult]]]] = {}
    for row in rows:
        series = groups.setdefault((task_label(row), row.base), {})
        series.setdefault(series_label(row), {}).setdefault(row.length, []).append(row)
    return {
        key: {name: {length: Pooled.of(own) for length, own in cells.items()} for name, cells in series.items()}
        for key, series in groups.items()
    }


def summary_markdown(
    rows: Sequence[CellResult],
    commands: Sequence[str],
    comparisons: Sequence[Comparison] = (),
    anatomy: Sequence[AnatomyRow] = (),
    length_comparisons: Sequence[LengthComparison] = (),
    gpu_machines: frozenset[str] = frozenset(),
) -> str:
    lines = ["# Accuracy vs operand length", ""]
    if rows:
        first = rows[0]
        seeds = sorted({row.seed for row in rows})
        said = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))} (pooled: counts summed)"
        lines.append(
            f"Exact-match accuracy with its Wilson 95% interval; n = {first.n} problems per cell, "
            f"decoding {first.decoding}, {said}."
        )
        if first.prompt_style != "few-shot" or first.answer_mode != "first-line":
            lines.append(
                f"Prompt {first.prompt_style}; answers read {first.answer_mode} (harness/questions/answers.py)."
            )
        lines.append("")
        deviations = sorted(
            {
                note
                for row in rows
                for note in prompt_deviations(parse_task(task_label(row)), row.base, row.prompt_style)
            }
        )
        if deviations:
            lines += ["Prompts that depart from the paper's (which evaluated base 10 only):", ""]
            lines += [f"- {note}" for note in deviations] + [""]
        lines += training_overlap_markdown(rows)
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
                pooled = series[name].get(length)
                cells.append(pooled.cell() if pooled else "")
            cells += [f"{refs[name][length]:.3f}" if length in refs[name] else "" for name in refs]
            lines.append(f"| {length} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += comparisons_markdown(comparisons)
    lines += invariance_markdown(rows)
    lines += unreadable_markdown(rows)
    lines += anatomy_markdown(anatomy)
    lines += lengths_markdown(rows, length_comparisons)
    lines += models_markdown(rows)
    lines += kernel_check_markdown(rows, gpu_machines)
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


def models_markdown(rows: Sequence[CellResult]) -> list[str]:
    """A row per series: how it was quantized, the dtypes and matmul arithmetic in force, its kernel and speed."""
    lines = [
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
    return lines


def training_overlap_markdown(rows: Sequence[CellResult]) -> list[str]:
    """A warning for the cells of a model fine-tuned here that may hold problems it trained on: its data kept out
    only one seed's first problems of each cell (finetune/data.py), so another seed draws some training problems."""
    cells: dict[str, list[CellResult]] = {}
    for row in rows:
        kept = held_out(row.model)
        if kept is not None and kept.overlap(row.seed, row.length, row.n):
            cells.setdefault(row.model, []).append(row)
    lines = []
    for model, own in cells.items():
        kept = held_out(model)
        seeds = ", ".join(str(s) for s in sorted({row.seed for row in own}))
        lines.append(
            f"- **{model} may have trained on some of these problems**: its fine-tuning data kept out only the first "
            f"{kept.count} problems of each cell at seed {kept.seed}; {len(own)} cell(s) here (seed {seeds}, lengths "
            f"{min(r.length for r in own)}-{max(r.length for r in own)}) draw others. Read their accuracies as "
            "possibly inflated; compare it at seed "
            f"{kept.seed}."
        )
    return ["Training overlap:", "", *lines, ""] if lines else []


SLOW_INT4 = 0.8  # public benchmarks: a wrong int4 kernel runs at 0.5-0.65x of bf16's rate, the right one at >= 0.9x


def kernel_check_markdown(rows: Sequence[CellResult], gpu_machines: frozenset[str]) -> list[str]:
    """On a GPU, a 4-bit series (AWQ, GPTQ) whose tokens/s is below SLOW_INT4 of the same model's bf16 series in
    this run: a kernel worth checking (the rows name the one that ran)."""

    def rate(own: list[CellResult]) -> float:
        return sum(row.tokens_per_s for row in own) / len(own)

    on_gpu = [row for row in rows if row.machine in gpu_machines]
    series: dict[str, list[CellResult]] = {}
    for row in on_gpu:
        series.setdefault(series_label(row), []).append(row)
    lines = []
    for name, own in series.items():
        first = own[0]
        if first.method not in ("awq", "gptq"):
            continue
        bf16 = [r for r in on_gpu if (r.model, r.adapter, r.precision) == (first.model, first.adapter, "bf16")]
        if bf16 and rate(own) < SLOW_INT4 * rate(bf16):
            lines.append(
                f"- **check the kernel**: {name} ran at {rate(own) / rate(bf16):.2f}x the tokens/s of "
                f"{first.model} bf16 on this GPU (kernel {first.kernel or 'not recorded'}); the right int4 kernel "
                f"runs at 0.9x or more, a wrong one at 0.5-0.65x"
            )
    return ["", *lines] if lines else []


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
    """Per cell, how many answers the strict reader could not find (harness/scoring/; reasons in samples.jsonl)."""
    if not any(row.no_answer for row in rows):
        return ["No answer was unreadable: every output stated one numeral where scoring looks for it.", ""]
    lines = [
        "## Unreadable answers",
        "",
        "Outputs from which no answer could be read, of n (the rule column of samples.jsonl says why for each).",
        "",
    ]
    if any(row.conflicts for row in rows):
        lines[-1:] = [
            "In brackets, the conflicts among them: outputs that stated differing answers, never correct.",
            "",
        ]
    for (label, base), series in _grouped(rows).items():
        lines += [f"**{label}, base {base}**", "", "| length | " + " | ".join(series) + " |"]
        lines.append("|---:|" + "---:|" * len(series))
        for length in sorted({length for cells in series.values() for length in cells}):
            cells = [series[name].get(length) for name in series]
            lines.append(f"| {length} | " + " | ".join(_unreadable_cell(c) for c in cells) + " |")
        lines.append("")
    return lines


def _unreadable_cell(cell) -> str:
    if not cell:
        return ""
    conflicts = f" ({cell.conflicts} conflict{'s' if cell.conflicts > 1 else ''})" if cell.conflicts else ""
    return f"{cell.no_answer}/{cell.n}{conflicts}"


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
            low, high = [cells[n].interval[0] for n in lengths], [cells[n].interval[1] for n in lengths]
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
    """Every report of a run directory, from its rows and the samples of its finished cells (RunDir.samples); a run
    of several seeds also gets pooled.csv."""
    comparisons = paired_comparisons(samples, series_label, task_label)
    anatomy = anatomy_rows(samples, series_label, task_label)
    lengths = paired_lengths(samples, series_label, task_label)
    atomic_write_text(out / "comparisons.csv", comparisons_csv(comparisons))
    atomic_write_text(out / "anatomy.csv", anatomy_csv(anatomy))
    atomic_write_bytes(out / "error_anatomy.png", anatomy_plot_png(anatomy))
    summary = summary_markdown(rows, commands, comparisons, anatomy, lengths, gpu_machines(out))
    atomic_write_text(out / "summary.md", summary)
    atomic_write_bytes(out / "accuracy_vs_length.png", accuracy_plot_png(rows))
    if any(row.tokens_mean for row in rows):  # a run written before lengths were recorded has none to report
        atomic_write_text(out / "lengths.csv", lengths_csv(lengths))
        atomic_write_bytes(out / "lengths.png", lengths_plot_png(rows, samples))
    if len({row.seed for row in rows}) > 1:
        atomic_write_text(out / "pooled.csv", pooled_csv(rows))


def gpu_machines(out: Path) -> frozenset[str]:
    """The ids of run.json's machines that have a GPU (none where it records none)."""
    try:
        machines = json.loads((out / "run.json").read_text(encoding="utf-8")).get("machines") or {}
    except (OSError, ValueError, AttributeError):
        return frozenset()
    return frozenset(key for key, value in machines.items() if isinstance(value, dict) and value.get("gpu"))


def pooled_csv(rows: Sequence[CellResult]) -> str:
    """One line per series and cell over the run's seeds: counts summed, accuracy and Wilson interval from them, and
    the spread of the per-seed accuracies (lowest, highest, standard deviation)."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        ["series", "task", "base", "length", "seeds", "n", "correct", "accuracy", "ci_low", "ci_high"]
        + ["seed_lowest", "seed_highest", "seed_sd"]
    )
    groups: dict[tuple, list[CellResult]] = {}
    for row in rows:
        groups.setdefault((series_label(row), task_label(row), row.base, row.length), []).append(row)
    for (series, task, base, length), own in groups.items():
        pooled = Pooled.of(own)
        low, high = pooled.interval
        writer.writerow(
            [series, task, base, length, ",".join(str(row.seed) for row in own), pooled.n, pooled.correct]
            + [f"{pooled.accuracy:.4f}", f"{low:.4f}", f"{high:.4f}", f"{pooled.lowest:.4f}", f"{pooled.highest:.4f}"]
            + [f"{pooled.sd:.4f}"]
        )
    return buffer.getvalue()
