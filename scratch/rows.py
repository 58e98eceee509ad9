"""The sweep's results.csv: a row per cell and format (its columns, in order), each row checked as it is read back
(required fields present, integers and fractions parsed), and the file written whole."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from harness.core.files import atomic_write_text, read_csv_rows
from harness.runs.compare import wilson_interval
from scratch.config import RunConfig


def task_name(run_config: RunConfig) -> str:
    return "iter_add" if run_config.op == "add" and run_config.operands > 2 else run_config.op


COLUMNS = [
    "task",
    "operands",
    "base",
    "length",
    "fixed_width",
    "precision",
    "depth",
    "seed",
    "eval_format",
    "steps",
    "n",
    "correct",
    "accuracy",
    "ci_low",
    "ci_high",
    "tokens_per_s",
    "mfu",
    "wall_s",
    "device",
    "matmul_precision",
    "disjoint_test",
    "device_name",
    "runs_packed",
    "steps_per_s",
    "whole_space_test",
]


def cell_rows(run_config: RunConfig, summary: dict, wall: float) -> list[dict]:
    """A cell's rows: its own precision's, then one per emulated format."""
    base_row = {
        "task": task_name(run_config),
        "operands": run_config.operands,
        "base": run_config.base,
        "length": run_config.length,
        "fixed_width": run_config.fixed_width,
        "precision": run_config.precision,
        "depth": run_config.depth,
        "seed": run_config.seed,
        "steps": summary["steps"],
        "n": summary["n_test"],
        "tokens_per_s": round(summary["tokens_per_s"], 1),
        "mfu": round(summary["mfu"], 4),
        "wall_s": round(wall, 1),
        "device": summary["device"],
        "matmul_precision": summary["matmul_precision"],
        "disjoint_test": summary["disjoint_test"],
        "device_name": summary["device_name"],
        "runs_packed": summary["runs_packed"],
        "steps_per_s": round(summary["steps_per_s"], 2),
        "whole_space_test": summary["whole_space_test"],
    }
    rows = []
    for eval_format, correct in [("", summary["correct"]), *summary["formats"].items()]:
        low, high = wilson_interval(correct, summary["n_test"])
        rows.append(
            {
                **base_row,
                "eval_format": eval_format,
                "correct": correct,
                "accuracy": round(correct / summary["n_test"], 4),
                "ci_low": round(low, 4),
                "ci_high": round(high, 4),
            }
        )
    return rows


def row_key(row: dict) -> tuple:
    return tuple(
        str(row[k]) for k in ("task", "operands", "base", "length", "fixed_width", "precision", "depth", "seed")
    )


# What a row must hold to be plotted and resumed from; the other columns came later and may be absent or empty.
REQUIRED = COLUMNS[: COLUMNS.index("device")]


INTEGERS = ("operands", "base", "length", "depth", "seed", "steps", "n", "correct")


FRACTIONS = ("accuracy", "ci_low", "ci_high")


def parse_row(row: dict[str, str]) -> dict[str, str]:
    """A sweep results row as read (text), or ValueError where a value is missing or of the wrong type."""
    if any(row.get(name) is None for name in REQUIRED) or None in row.values():
        raise ValueError("cut short")
    values = {name: int(row[name]) for name in INTEGERS}
    fractions = [float(row[name]) for name in FRACTIONS]
    for name in ("tokens_per_s", "mfu", "wall_s"):
        float(row[name])  # a ValueError where it is no number
    if not all(0 <= value <= 1 for value in fractions) or not 0 <= values["correct"] <= values["n"]:
        raise ValueError("out of range")
    return row


def read_rows(path: Path) -> tuple[list[dict], list[str]]:
    """The rows of a sweep's results.csv and its damaged ones (harness/core/files.py's CSV reader)."""
    return read_csv_rows(path, REQUIRED, parse_row, "a scratch.sweep results file")


def write_rows(path: Path, rows: list[dict]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: row.get(k, "") for k in COLUMNS} for row in rows)  # older rows lack later columns
    atomic_write_text(path, buffer.getvalue())
