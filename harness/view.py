"""One self-contained HTML page to explore runs: open it from disk, no network, no server.

    python -m harness.view reports/quick-greedy-n40-seed0 --out quick.html
    python -m harness.view runs/bf16 runs/awq-int4 --out both.html      # runs made apart, merged as harness.report does

The page shows accuracy vs operand length per task (a line per series with its Wilson 95% band, values on hover:
the paper's Fig. 2-4 layout), the paired comparison table (sortable, Holm-adjusted significance), the error anatomy
as heatmaps, and the cells whose verdicts changed with the batch size. Clicking a point lists that cell's samples
(prompt folded, output, extracted answer, the rule that read it, gold, verdict); filters narrow the list to wrong
answers, unreadable ones, or the problems two chosen series answered differently. Charts are plotly's, whose
bundle the page carries inline.
"""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from harness.core.cli import ArgParser, input_path, output_file, run
from harness.core.files import writing_out
from harness.reports.anatomy import anatomy_rows
from harness.reports.promotion import prepare_out_file, replace_file
from harness.reports.summary import series_label, task_label
from harness.runs.compare import SIGNIFICANCE, paired_comparisons
from harness.runs.merge import merge
from harness.runs.results import CellKey
from harness.runs.stored import StoredRun, read_run

MARK = b'<meta name="generator" content="numprec harness.view">'  # in view.html: a page harness.view may replace
SAMPLE_FIELDS = ("index", "expression", "prompt", "output", "extracted", "rule", "gold", "correct", "truncated")


def cell_id(record) -> str:
    """The id the page gives a cell, of a row or a sample: series|task|base|length|seed (the page swaps the series to
    find the same problems in another series)."""
    key = CellKey.of(record)
    return f"{key.series}|{key.task_label}|{key.base}|{key.length}|{key.seed}"


def page_data(title: str, finished: StoredRun) -> dict:
    """Everything the page shows, as JSON-ready data."""
    rows = finished.rows
    samples = finished.samples
    comparisons = paired_comparisons(samples, series_label, task_label)
    anatomy = anatomy_rows(samples, series_label, task_label)
    cells: dict[str, list[dict]] = {}
    for sample in samples:
        cells.setdefault(cell_id(sample), []).append({name: sample.get(name) for name in SAMPLE_FIELDS})
    return {
        "title": title,
        "significance": SIGNIFICANCE,
        "rows": [
            {
                "id": cell_id(row),
                "series": series_label(row),
                "task": task_label(row),
                "base": row.base,
                "length": row.length,
                "seed": row.seed,
                "n": row.n,
                "correct": row.correct,
                "accuracy": row.accuracy,
                "low": row.ci_low,
                "high": row.ci_high,
                "no_answer": row.no_answer,
                "flip_verdicts": row.flip_verdicts,
                "flip_batch": row.flip_batch,
            }
            for row in rows
        ],
        "cells": cells,
        "comparisons": [asdict(comparison) for comparison in comparisons],
        "anatomy": [asdict(row) for row in anatomy],
        "commands": finished.commands,
    }


def plotly_bundle() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def page_html(data: dict) -> str:
    # "</" inside inline JSON would end the script element early
    payload = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    template = (Path(__file__).parent / "view.html").read_text(encoding="utf-8")
    return (
        template.replace("{{TITLE}}", html.escape(data["title"]))
        .replace("{{PLOTLY}}", plotly_bundle())
        .replace("{{DATA}}", payload)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.view", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=input_path, help="run directories (harness.eval's or harness.report's)")
    parser.add_argument("--out", type=output_file, required=True, help="the HTML file to write")
    args = parser.parse_args(argv)
    prepare_out_file(args.out, args.runs, "harness.view", MARK)  # before any work; again as it is replaced
    runs = [read_run(path) for path in args.runs]
    finished = runs[0] if len(runs) == 1 else StoredRun(runs[0].path, *merge(runs))
    unfinished = [run.unfinished() for run in runs if run.missing]
    title = " + ".join(path.name for path in args.runs)
    page = page_html({**page_data(title, finished), "unfinished": unfinished})
    with writing_out(args.out):
        moved = replace_file(args.out, args.runs, "harness.view", MARK, page.encode("utf-8"))
    if moved:
        print(moved)
    for note in unfinished:  # shown, with what is missing named (the page says it too)
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {args.out} ({len(finished.rows)} cells, {len(finished.samples)} samples; open it in a browser)")
    return 0


if __name__ == "__main__":
    run(main)
