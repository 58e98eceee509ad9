"""The last step of every writer is a journal the same command completes: killed (SIGKILL, at its own request) at
each step of the final sequence, then run again, it finishes equal to a clean run, the previous output kept aside
whole, and no other name left beside it. A rerun whose output is the same moves nothing aside."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.core.faults import KILL_AT, PAUSE_AT
from harness.reports.promotion import STEPS
from tests.harness.commands import command
from tests.harness.helpers import run_module, start_module
from tests.harness.scripted import run

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


def stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP: a NUMPREC_PAUSE_AT step reached)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")


def waiting_on_a_lock(pid: int) -> bool:
    """Whether the process waits for a lock another holds (flock, /proc/locks' "->" lines name the waiter)."""
    return any(line.split()[1] == "->" and line.split()[5] == str(pid) for line in open("/proc/locks"))


def until(condition, command, what: str) -> None:
    """Wait (two minutes at most, a loaded machine's start of a command included) for ``condition()``."""
    deadline = time.monotonic() + 120
    while not condition():
        assert command.poll() is None, f"the command ended before {what}: {command.communicate()}"
        assert time.monotonic() < deadline, f"not {what} in two minutes"
        time.sleep(0.02)


def started(module: str, args: list[str], pause_at: str | None = None):
    env = {PAUSE_AT: pause_at} if pause_at else {}
    return start_module(module, *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def ended(command) -> tuple[int, str]:
    """(exit status, stderr) of a command, let go first if it is stopped. The signal goes through send_signal,
    which lets pass a command that ended between the poll and the signal (reaped, its status not yet read)."""
    if command.poll() is None:
        command.send_signal(signal.SIGCONT)
    out, err = command.communicate(timeout=300)
    return command.returncode, err


def second_run_between(module: str, args: list[str], first_at: str, second_at: str | None = None) -> tuple[int, str]:
    """The same command run twice: the first paused at ``first_at``; the second started then and let on until it
    waits for the first one's lock (or paused at ``second_at``); then the first let go to its end (which must be
    clean), then the second. The second's exit status and stderr."""
    one, two = started(module, args, pause_at=first_at), None
    try:
        until(lambda: stopped(one.pid), one, f"paused at {first_at}")
        two = started(module, args, pause_at=second_at)
        if second_at:
            until(lambda: stopped(two.pid), two, f"paused at {second_at}")
        else:
            until(lambda: waiting_on_a_lock(two.pid), two, "waiting for the first one's lock")
        assert ended(one) == (0, "")
        return ended(two)
    finally:
        for command in (one, two):
            if command is not None and command.poll() is None:
                command.kill()


@pytest.mark.parametrize("writer", ["report", "view"])
@pytest.mark.parametrize("step", ["journal-written", "renamed-into-place"])
def test_a_second_run_that_saw_the_first_ones_journal_finds_its_output_in_place(writer, step, runs, tmp_path):
    """The race two runs of the same command ran into: the first paused in its final sequence (its journal on
    disk), the second started then and waiting for the parent lock, then the first let go. The second reads the
    journal under that lock only, so it never completes what the first completes itself (before: "No such file or
    directory: '.OUT.numprec-journal'", a traceback): it finds the first one's output and ends as a rerun does."""
    module, name, first, _ = WRITERS[writer]
    code, err = second_run_between(module, argv(first, runs, tmp_path / name), step)
    assert (code, err) == (0, ""), err
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "one output, nothing moved aside, nothing left"


@pytest.mark.parametrize("writer", ["report", "export"])
def test_a_staging_directory_put_in_place_before_a_second_run_locked_it_is_made_anew(writer, runs, tmp_path):
    """The first run paused with its output staged; the second opened that staging directory and paused before
    locking it; the first let go, which put it in place as --out. The second's lock is then on the first one's
    output, not on a staging directory: it makes its own and ends as a rerun does (before: told to move away a
    staging directory that was not there)."""
    module, name, first, _ = WRITERS[writer]
    code, err = second_run_between(module, argv(first, runs, tmp_path / name), "staged", "stage-opened")
    assert (code, err) == (0, ""), err
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "one output, nothing moved aside, nothing left"
