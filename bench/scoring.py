"""The scoring section of bench.run: how long the scorer takes to read 10,000 outputs, in each answer mode.

    python -m bench.run --only scoring --out reports/bench

The outputs are the committed reports' own samples (reports/*/samples.jsonl: the paper's first lines of every run,
and the chain-of-thought free-form answers of reports/cot-free-form-add), taken in turn until there are 10,000 of
each mode; each is judged as harness.eval judges it (harness.scoring.judge). Best of the repeats.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

from harness.questions.answers import answer_mode
from harness.scoring import judge

REPORTS = Path(__file__).resolve().parents[1] / "reports"
COUNT = 10_000


def committed_outputs() -> dict[str, list[tuple]]:
    """The committed reports' outputs as judge's arguments, by answer mode's name."""
    by_mode: dict[str, list[tuple]] = {}
    for samples in sorted(REPORTS.glob("*/samples.jsonl")):
        with open(samples.with_name("results.csv"), newline="") as handle:
            rows = list(csv.DictReader(handle))
        mode = answer_mode(rows[0].get("answer_mode") or "first-line") if rows else answer_mode("")
        for line in samples.read_text(encoding="utf-8").splitlines():
            sample = json.loads(line)
            arguments = (sample["output"], sample["base"], sample["expression"], mode, bool(sample.get("truncated")))
            by_mode.setdefault(mode.name, []).append(arguments)
    return by_mode


def bench_scoring(repeats: int) -> list[dict]:
    results = []
    for name, outputs in committed_outputs().items():
        batch = [outputs[i % len(outputs)] for i in range(COUNT)]
        best = float("inf")
        for _ in range(max(1, repeats)):
            started = time.perf_counter()
            for arguments in batch:
                judge(*arguments)
            best = min(best, time.perf_counter() - started)
        chars = sum(len(arguments[0]) for arguments in batch) / len(batch)
        results.append({"mode": name, "outputs": COUNT, "distinct": len(outputs), "mean_chars": chars, "seconds": best})
    return results


def scoring_markdown(results: list[dict]) -> list[str]:
    lines = [
        "## Scoring",
        "",
        f"{COUNT:,} outputs of the committed reports judged as harness.eval judges them (best of the repeats).",
        "",
        "| answer mode | distinct outputs | mean characters | seconds for 10,000 |",
        "|---|---:|---:|---:|",
    ]
    for row in results:
        lines.append(f"| {row['mode']} | {row['distinct']} | {row['mean_chars']:.0f} | {row['seconds']:.2f} |")
    return [*lines, ""]
