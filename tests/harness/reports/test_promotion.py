"""The last step of every writer is a journal the same command completes: killed (SIGKILL, at its own request) at
each step of the final sequence, then run again, it finishes equal to a clean run, the previous output kept aside
whole, and no other name left beside it. A rerun whose output is the same moves nothing aside."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal

import pytest

from harness.core.faults import KILL_AT
from harness.reports.promotion import STEPS
from tests.harness.helpers import run_module
from tests.harness.runs.test_merge import run
from tests.harness.scoring.test_readers import command

pytestmark = pytest.mark.slow

TASKS = ["--harness", "lm-eval", "--lengths", "1", "--samples", "2"]
# writer: (module, --out's name, the first command's arguments, the second's: another output over the first)
WRITERS = {
    "report": ("harness.report", "merged", ["fp32"], ["fp32", "bf16"]),
    "export": ("harness.export", "dataset", ["fp32"], ["bf16"]),
    "tasks": ("harness.tasks", "group", [*TASKS, "--tasks", "add"], [*TASKS, "--tasks", "mul"]),
    "view": ("harness.view", "page.html", ["fp32"], ["fp32", "bf16"]),
}
VOLATILE = {"harness.report": ("run.json",)}  # when and where it ran


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("promoted")
    return {"fp32": run(base / "fp32", ["fp32"]), "bf16": run(base / "bf16", ["bf16"])}


def argv(arguments: list[str], runs: dict, out) -> list[str]:
    return [str(runs[word]) if word in runs else word for word in arguments] + ["--out", str(out)]


def content(path, leave_out=()) -> dict:
    """A file's or a directory's bytes by name (digests), ``leave_out`` aside."""
    if path.is_file():
        return {path.suffix: hashlib.sha256(path.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name not in leave_out and p.name != ".numprec-manifest.json"
    }


def killed_at(step: str, module: str, args: list[str]) -> None:
    """The command run in a child that kills itself at ``step``; the kill must have fired."""
    result = run_module(module, *args, env={KILL_AT: step}, timeout=300)
    assert result.returncode == -signal.SIGKILL, f"the kill at {step} did not fire: {result.returncode} {result.stderr}"


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_kill_at_each_step_of_the_final_sequence_is_finished_by_the_same_command(writer, runs, tmp_path, capsys):
    module, name, first, second = WRITERS[writer]
    out, leave_out = tmp_path / name, VOLATILE.get(module, ())
    assert command(module, argv(first, runs, out), capsys)[0] == 0
    previous = content(out, leave_out)
    assert command(module, argv(second, runs, out), capsys)[0] == 0
    clean = content(out, leave_out)
    assert clean != previous, "the second command writes another output"
    steps = [step for step in STEPS if not (writer == "view" and step == "mark-removed")]
    for step in steps:
        shutil.rmtree(out) if out.is_dir() else out.unlink()
        (aside,) = [p for p in tmp_path.iterdir() if ".previous-" in p.name]
        aside.rename(out)  # back to the first command's output
        killed_at(step, module, argv(second, runs, out))
        code, err, said = command(module, argv(second, runs, out), capsys)
        assert code == 0 and not err, (step, err)
        if step != "staged":  # the journal was written: the rerun says it finished it
            assert "a killed run" in said, (step, said)
        left = sorted(p.name for p in tmp_path.iterdir())
        asides = [p for p in tmp_path.iterdir() if ".previous-" in p.name]
        assert len(left) == 2 and name in left and len(asides) == 1, (step, left)
        assert content(out, leave_out) == clean, f"killed at {step}: not the clean run's output"
        assert content(asides[0], leave_out) == previous, f"killed at {step}: the previous output not kept whole"


def test_a_rerun_with_the_same_output_moves_nothing_aside(runs, tmp_path, capsys):
    """The same report asked again (its runs named in another order of flags, --out with a trailing slash):
    nothing moves, and the line says nothing was moved."""
    out = tmp_path / "merged"
    assert command("harness.report", [runs["fp32"], runs["bf16"], "--out", out], capsys)[0] == 0
    before = content(out)
    code, _, said = command("harness.report", ["--out", f"{out}/", runs["fp32"], runs["bf16"]], capsys)
    assert code == 0 and "moved" not in said and sorted(p.name for p in tmp_path.iterdir()) == ["merged"]
    assert content(out) == before


def test_a_rerun_after_an_input_changed_names_it(runs, tmp_path, capsys):
    a = tmp_path / "a"
    shutil.copytree(runs["fp32"], a)
    out = tmp_path / "dataset"
    assert command("harness.export", [a, "--out", out], capsys)[0] == 0
    assert command("harness.rescore", [a], capsys)[0] == 0  # rescored: run.json gains an entry
    code, _, said = command("harness.export", [a, "--out", out], capsys)
    assert code == 0 and "(a changed since it was written)" in said, said
    assert os.path.isdir(out) and len([p for p in tmp_path.iterdir() if ".previous-" in p.name]) == 1
