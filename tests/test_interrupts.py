"""Ctrl-C at any moment ends a command with one line and exit status 130, and leaves nothing behind that it did
not finish: while Python is still importing torch (harness/startup.py), and once the work has begun (harness.cli
.run), where a run directory that holds no finished cell yet is removed again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.harness.helpers import ROOT


def interrupt_after(seconds: float, tmp_path, *args: str) -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    time.sleep(seconds)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
    return process.returncode, lines


@pytest.mark.parametrize("module", ["harness.eval", "finetune.train", "scratch.train", "bench.run"])
def test_ctrl_c_while_importing_is_one_line(module, tmp_path):
    code, lines = interrupt_after(0.3, tmp_path, module, "--out", "out")
    assert code == 130 and lines == ["interrupted while starting: nothing was written"], lines
    assert not list(tmp_path.iterdir())


def test_ctrl_c_before_the_first_cell_leaves_no_run_directory(tmp_path):
    args = ["harness.eval", "--tasks", "add", "--lengths", "1", "--samples", "64", "--out", "run"]
    code, lines = interrupt_after(8, tmp_path, *args)  # imports done, the model loading or generating
    assert code == 130 and lines[-1] == "interrupted: finished work is saved; rerun the same command to resume", lines
    assert not [line for line in lines if line.startswith("Traceback")], lines
    assert not (tmp_path / "run").exists(), "no cell finished: nothing to keep"
