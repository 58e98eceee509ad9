"""One writer per output directory, for every command that writes one: while a first run holds the directory, a
second run of the same command into it is refused in one line naming the holder, before it does any work, and it
writes nothing there. (The first run is stood in for by its lock, held here as that process would hold it;
tests/harness/runs/test_results.py runs two real processes of harness.eval.)"""

from __future__ import annotations

import importlib
import os

import pytest

from harness.core.cli import run
from harness.core.lock import NOTE, DirectoryLock
from tests.bad_input.runs import OK_FINETUNE, OK_SCRATCH, OK_SWEEP

FINETUNE = OK_FINETUNE + "train: {logging_steps: 1, save_steps: 1}\n"
COMMANDS = [
    ("harness.eval", ["--tasks", "add", "--lengths", "1", "--samples", "2", "--out", "out"], "out"),
    ("harness.rescore", ["out"], "out"),
    ("harness.quantize", ["--method", "gptq", "--out", "out/ckpt"], "out"),  # the folder that holds the checkpoint
    ("finetune.train", ["--config", "config.yaml", "--out", "out"], "out"),
    ("scratch.train", [*OK_SCRATCH, "--out", "out"], "out"),
    ("scratch.sweep", ["--config", "config.yaml", "--out", "out"], "out"),
    ("bench.run", ["--only", "data", "--repeats", "1", "--out", "out"], "out"),
]


@pytest.mark.parametrize("module,argv,locked", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_second_writer_is_refused_in_one_line(module, argv, locked, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text(OK_SWEEP if module == "scratch.sweep" else FINETUNE)
    (tmp_path / "out").mkdir()
    if module == "harness.rescore":  # a finished run's record, as harness.eval leaves it
        (tmp_path / "out" / "run.json").write_text('{"identity": {"samples": 2, "seed": 0, "decoding": "greedy"}}')
        (tmp_path / "out" / "results.csv").write_text("")
    before = sorted(p.name for p in (tmp_path / "out").iterdir())
    holder = DirectoryLock(tmp_path / locked, "python -m the-first-run --out out")
    try:
        with pytest.raises(SystemExit) as exit_info:
            run(importlib.import_module(module).main, argv)
    finally:
        holder.release()
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(err) == 1, err
    assert f"another process (pid {os.getpid()} on" in err[0] and "python -m the-first-run" in err[0], err[0]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == before, "the refused run wrote nothing"
    assert not (tmp_path / locked / NOTE).exists(), "the holder's note goes with its lock"
