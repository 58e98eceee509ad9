"""harness.report RUN RUN --out DIR: runs made separately merged into one report whose paired table equals the one
run that evaluated every series; runs that asked other problems refused in one line; harness.export of a run read
back by datasets. On the scripted backend (what is tested sits above the backends)."""

from __future__ import annotations

import csv
import json

import pytest

from tests.harness.helpers import assert_user_error, run_module
from tests.harness.scripted import run

TIMING = {"wall_s", "tokens_per_s", "machine"}


def table(path):
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(handle)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    return {
        "both": run(base / "both", ["fp32", "bf16"]),
        "fp32": run(base / "fp32", ["fp32"]),
        "bf16": run(base / "bf16", ["bf16"]),
        "bf16-seed1": run(base / "bf16-seed1", ["bf16"], seed=1),
    }


def test_two_runs_merged_equal_the_run_of_both(runs, tmp_path):
    out = tmp_path / "merged"
    result = run_module("harness.report", str(runs["fp32"]), str(runs["bf16"]), "--out", str(out))
    assert result.returncode == 0 and not result.stderr, result.stderr
    assert "2 series from 2 runs" in result.stdout
    merged, single = table(out / "comparisons.csv"), table(runs["both"] / "comparisons.csv")
    assert len(single) == 4 and any(float(row["p_value"]) < 0.05 for row in single), single  # n = 1, 2, 3, all
    assert merged == single, "the paired table, row for row"
    assert table(out / "results.csv") == table(runs["both"] / "results.csv")
    record = json.loads((out / "run.json").read_text())
    assert [source["path"] for source in record["merged_from"]] == [str(runs["fp32"]), str(runs["bf16"])]
    summary = (out / "summary.md").read_text()
    assert "python -m harness.report" in summary and "python -m harness.eval (scripted)" in summary


def test_runs_of_other_seeds_or_the_same_series_are_refused(runs, tmp_path):
    other_seed = run_module("harness.report", str(runs["fp32"]), str(runs["bf16-seed1"]), "--out", str(tmp_path / "a"))
    assert_user_error(other_seed, "differ in seed (0 vs 1)")
    twice = run_module("harness.report", str(runs["both"]), str(runs["bf16"]), "--out", str(tmp_path / "b"))
    assert_user_error(twice, "smollm2 bf16 add n=1 seed 0 is in both")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists(), "nothing written"


def test_a_run_exported_is_read_back_by_datasets(runs, tmp_path):
    import datasets

    result = run_module("harness.export", str(runs["both"]), "--out", str(tmp_path / "dataset"))
    assert result.returncode == 0 and not result.stderr, result.stderr
    results = datasets.load_dataset("parquet", data_files=str(tmp_path / "dataset" / "results.parquet"), split="train")
    samples = datasets.load_dataset("parquet", data_files=str(tmp_path / "dataset" / "samples.parquet"), split="train")
    rows = table(runs["both"] / "results.csv")
    assert results.num_rows == len(rows) == 6 and samples.num_rows == 180
    assert sum(results["correct"]) == sum(int(row["correct"]) for row in rows) == sum(samples["correct"])
    with open(runs["both"] / "samples.jsonl") as handle:
        first = json.loads(handle.readline())
    assert samples[0]["output"] == first["output"] and samples[0]["prompt"] == first["prompt"]
    card = (tmp_path / "dataset" / "README.md").read_text()
    assert "config_name: samples" in card and "python -m harness.eval (scripted)" in card


def test_samples_written_before_seeds_were_recorded_take_the_runs_seed(tmp_path):
    """A run of one seed written before samples named it: read, each sample belongs to its row's seed (as a resumed
    run gives it, harness/runs/rundir.py), so the viewer, the merge and the export find every cell's samples."""
    from harness.runs.stored import read_run
    from harness.view import cell_id

    run_dir = run(tmp_path / "run", ["fp32"], seed=3)
    lines = (run_dir / "samples.jsonl").read_text().splitlines()
    unseeded = [{k: v for k, v in json.loads(line).items() if k != "seed"} for line in lines]
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(sample) + "\n" for sample in unseeded))
    finished = read_run(run_dir)
    assert {sample["seed"] for sample in finished.samples} == {3}
    cells = finished.cell_samples()
    assert all(len(cells[row.key]) == row.n for row in finished.rows)
    assert {cell_id(row) for row in finished.rows} == {cell_id(sample) for sample in finished.samples}
