"""Data-parallel evaluation: two processes under accelerate write what one process writes."""

import csv
import subprocess
import sys
from pathlib import Path

from harness.results import COLUMNS

from .helpers import ROOT, command_env, run_module

TIMING = {"wall_s", "tokens_per_s"}  # the only columns two runs may differ in
GRID = ["--tasks", "add,mul", "--lengths", "1,2", "--samples", "10", "--batch-size", "4", "--precision", "fp32"]


def rows_without_timing(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(handle)]


def test_two_processes_match_one_row_for_row(tmp_path):
    single, parallel = tmp_path / "single", tmp_path / "parallel"
    result = run_module("harness.eval", *GRID, "--out", str(single))
    assert result.returncode == 0, result.stderr
    accelerate = Path(sys.executable).parent / "accelerate"
    launch = [str(accelerate), "launch", "--config_file", "finetune/accelerate/cpu_ddp.yaml", "--num_processes", "2"]
    result = subprocess.run(
        [*launch, "-m", "harness.eval", *GRID, "--out", str(parallel)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=command_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("wrote ") == 1, "only the main process reports"
    expected = rows_without_timing(single / "results.csv")
    assert len(expected) == 4 and set(expected[0]) == set(COLUMNS) - TIMING
    assert rows_without_timing(parallel / "results.csv") == expected
    assert (parallel / "samples.jsonl").read_bytes() == (single / "samples.jsonl").read_bytes()
