"""--report-to tensorboard: scratch.train's evaluations and harness.eval's tables, read back from the event files
TensorBoard writes, as its viewer reads them (finetune.train's loss curve: tests/finetune/test_train.py)."""

from __future__ import annotations

import csv
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.harness.helpers import assert_user_error, run_module


def events(directory):
    (path,) = (directory / "tensorboard").glob("events.out.tfevents.*")
    return EventAccumulator(str(path)).Reload()


def test_a_from_scratch_run_logs_its_curve(tmp_path):
    out = tmp_path / "run"
    tiny = ["--steps", "40", "--warmup-steps", "5", "--eval-every", "10", "--n-embd", "32", "--n-head", "2"]
    result = run_module("scratch.train", *tiny, "--test-size", "64", "--out", str(out), "--report-to", "tensorboard")
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    history = json.loads((out / "summary.json").read_text())["history"]
    curve = events(out)
    for name in ("loss", "accuracy"):  # TensorBoard keeps float32
        logged = [(event.step, event.value) for event in curve.Scalars(name)]
        assert [step for step, _ in logged] == [h["step"] for h in history] == [10, 20, 30, 40]
        assert [value for _, value in logged] == pytest.approx([h[name] for h in history], rel=1e-6)
    assert [event.step for event in curve.Scalars("learning_rate")] == [10, 20, 30, 40]


def test_an_evaluation_logs_its_tables(tmp_path):
    out = tmp_path / "eval"
    grid = ["--model", "smollm2-arith", "--precision", "fp32", "--tasks", "add", "--lengths", "1,2", "--samples", "4"]
    result = run_module("harness.eval", *grid, "--out", str(out), "--report-to", "tensorboard")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tensorboard/" in result.stdout
    with open(out / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    curve = events(out)
    logged = [(e.step, round(e.value, 4)) for e in curve.Scalars("accuracy/smollm2-arith fp32/add/seed0")]
    assert logged == [(int(row["length"]), round(float(row["accuracy"]), 4)) for row in rows]
    assert "results/text_summary" in curve.Tags()["tensors"]


def test_an_unknown_tracker_is_one_line(tmp_path):
    result = run_module("scratch.train", "--steps", "10", "--out", str(tmp_path / "x"), "--report-to", "neptune")
    assert_user_error(result, "unknown tracker neptune; known: tensorboard, trackio, wandb, mlflow")


def test_a_tracker_not_installed_is_refused_before_any_work(tmp_path):
    """harness.eval logs once its grid is done: a missing tracker is said at once, not after the evaluation."""
    import importlib.util

    from harness.runs.trackers import TRACKERS

    missing = [name for name in TRACKERS if importlib.util.find_spec(name) is None]
    if not missing:
        pytest.skip("every tracker is installed here")
    out = tmp_path / "eval"
    grid = ["--model", "smollm2-arith", "--precision", "fp32", "--tasks", "add", "--lengths", "1", "--samples", "2"]
    result = run_module("harness.eval", *grid, "--out", str(out), "--report-to", f"tensorboard,{missing[0]}")
    assert_user_error(result, f"--report-to {missing[0]} needs {missing[0]}; run: pip install {missing[0]}")
    assert not out.exists() and not result.stdout.strip()


def test_trackio_keeps_the_curve_in_its_local_database(tmp_path):
    """trackio, offline: its SQLite database under the run directory holds every evaluation's numbers."""
    import sqlite3

    out = tmp_path / "run"
    tiny = ["--steps", "40", "--warmup-steps", "5", "--eval-every", "10", "--n-embd", "32", "--n-head", "2"]
    result = run_module("scratch.train", *tiny, "--test-size", "64", "--out", str(out), "--report-to", "trackio")
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    assert "Trackio" not in result.stdout, "its banner stays off numprec's console"
    history = json.loads((out / "summary.json").read_text())["history"]
    with sqlite3.connect(out / "trackio" / "numprec.db") as database:
        logged = database.execute("select step, metrics from metrics where run_name = ? order by step", ("run",))
        rows = [(step, json.loads(metrics)) for step, metrics in logged]
        config = json.loads(database.execute("select config from configs").fetchone()[0])
    assert [step for step, _ in rows] == [h["step"] for h in history]
    assert [m["loss"] for _, m in rows] == pytest.approx([h["loss"] for h in history], rel=1e-9)
    assert [m["accuracy"] for _, m in rows] == [h["accuracy"] for h in history]
    assert config["steps"] == 40
