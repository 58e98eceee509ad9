"""scratch.sweep end to end in worker processes: results, plots, resume, bad configs."""

import csv
import os
from pathlib import Path

import matplotlib.image

from tests.console import assert_numprec_console
from tests.harness.helpers import assert_user_error, run_module

TINY = """
tasks:
  - {op: add, operands: 2, base: 2, lengths: [2, 3], fixed_width: true}
precisions: [fp32, bf16]
seeds: [0, 1]
depths: [1]
train: {n_embd: 32, steps: 20, batch_size: 16, warmup_steps: 2, test_size: 64, eval_every: 10,
        eval_formats: [e8m7, e4m3]}
workers: 2
pack: 2
"""


def test_sweep_writes_rows_and_plots_and_resumes(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    out = tmp_path / "sweep"
    result = run_module("scratch.sweep", "--config", str(config), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert_numprec_console(result)
    with open(out / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    native = [r for r in rows if r["eval_format"] == ""]
    assert len(native) == 8 and len(rows) == 24, "2 lengths x 2 precisions x 2 seeds, each with 2 emulated formats"
    assert {r["precision"] for r in native} == {"fp32", "bf16"}
    assert "running 8 in 4 pack(s) of at most 2 on 2 worker(s) (cpu)" in result.stderr
    for row in rows:
        assert row["task"] == "add" and row["steps"] == "20" and row["runs_packed"] == "2"
        # 2-digit base-2 addition has 16 problems, 3-digit 64; 64 asked for: the test set is all of them, once each
        assert row["n"] == str(4 ** int(row["length"])) and row["whole_space_test"] == "True"
        assert float(row["ci_low"]) <= float(row["accuracy"]) <= float(row["ci_high"])
        assert float(row["tokens_per_s"]) > 0
    for name in ("accuracy_vs_length.png", "phase_diagram.png"):
        assert matplotlib.image.imread(out / name).shape[1] > 300
    assert "Training throughput" in (out / "summary.md").read_text()

    again = run_module("scratch.sweep", "--config", str(config), "--out", str(out))
    assert again.returncode == 0 and "8 of 8 cells done" in again.stderr


def test_the_cluster_launcher_without_slurm_is_one_line(tmp_path):
    """launcher: slurm on a machine without Slurm (no sbatch or squeue on the PATH, as on a fresh machine): one line
    naming the way out, exit 2, nothing written. With Slurm, tests/test_slurm.py runs the job array."""
    config = tmp_path / "cluster.yaml"
    config.write_text(
        "tasks: [{op: mul, base: 2, lengths: [2]}]\nprecisions: [fp32]\nseeds: [0]\ndepths: [1]\n"
        "train: {n_embd: 32, steps: 10, batch_size: 8, warmup_steps: 2, test_size: 32, eval_every: 5}\n"
        "launcher: slurm\nslurm: {timeout_min: 10}\n"
    )
    out = tmp_path / "sweep"
    bare = os.pathsep.join(
        p
        for p in os.environ["PATH"].split(os.pathsep)
        if not any((Path(p) / program).exists() for program in ("sbatch", "squeue", "srun"))
    )
    result = run_module("scratch.sweep", "--config", str(config), "--out", str(out), env={"PATH": bare})
    assert_user_error(result, "launcher: slurm needs a Slurm cluster", "launcher: local", "scripts/slurm-local.sh")
    assert not out.exists()
