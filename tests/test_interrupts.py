"""Ctrl-C at any moment ends a command with one line and exit status 130, and leaves nothing behind that it did not
finish: while Python is still importing torch (harness/core/startup.py), and once the work has begun (harness.core.cli
.run), where a run directory that holds no finished cell yet is removed again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.helpers import ROOT


def start(tmp_path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


def interrupt(process: subprocess.Popen) -> tuple[int, list[str]]:
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
    return process.returncode, lines


def loading_torch(process: subprocess.Popen) -> bool:
    """True once the process has mapped libtorch: torch's import has begun (about a second of work remains), so
    the Ctrl-C lands in the heavy start-up, not in the interpreter's own first milliseconds, whatever the load."""
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if "libtorch" in maps.read_text():
                return True
        except OSError:
            return False
        time.sleep(0.01)
    return False


# scratch.train imports torch at the top (the one-line start-up handler); the others import it lazily inside
# main(), where harness.core.cli.run's handler answers: either way one line, exit status 130, nothing written.
STARTING = "interrupted while starting: nothing was written"
IN_MAIN = "interrupted: finished work is saved; rerun the same command to resume"


@pytest.mark.parametrize(
    "module, expected, args",
    [
        ("scratch.train", STARTING, ()),
        ("harness.eval", IN_MAIN, ()),
        ("finetune.train", IN_MAIN, ("--config", str(ROOT / "finetune/configs/cpu_smoke.yaml"))),
        ("bench.run", IN_MAIN, ()),
    ],
)
def test_ctrl_c_while_importing_torch_is_one_line(module, expected, args, tmp_path):
    process = start(tmp_path, module, *args, "--out", "out")
    assert loading_torch(process), f"{module} ended before it loaded torch"
    code, lines = interrupt(process)
    assert code == 130 and lines == [expected], lines
    assert not list(tmp_path.iterdir())


def test_the_commands_answered_in_main_import_torch_only_there():
    """IN_MAIN's premise: importing harness.eval, finetune.train and bench.run loads neither torch nor transformers.
    A module that imports torch at its top moves a Ctrl-C during that import to the start-up handler's answer (seen
    once in a suite run, when harness/runs/plan.py imported a backend module that imports torch)."""
    code = "import sys, harness.eval, finetune.train, bench.run\n"
    code += "print([m for m in ('torch', 'transformers') if m in sys.modules])"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "[]", (result.stdout, result.stderr[-2000:])


def test_ctrl_c_before_the_first_cell_leaves_no_run_directory(tmp_path):
    process = start(tmp_path, "harness.eval", "--tasks", "add", "--lengths", "1", "--samples", "64", "--out", "run")
    deadline = time.monotonic() + 120
    while not (tmp_path / "run" / "run.json").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "run" / "run.json").exists(), "main() began the run"
    time.sleep(5)  # main() importing torch, loading the model or generating; its first cell takes longer
    code, lines = interrupt(process)
    assert code == 130 and lines[-1] == "interrupted: finished work is saved; rerun the same command to resume", lines
    assert not [line for line in lines if line.startswith("Traceback")], lines
    assert not (tmp_path / "run").exists(), "no cell finished: nothing to keep"


@pytest.mark.parametrize(
    "body, code, said",
    [
        ("exec('raise KeyboardInterrupt')", 130, [IN_MAIN]),
        # a command that stops on Ctrl-C and ends normally (harness.serve's vLLM server)
        ("try:\n        exec('raise KeyboardInterrupt')\n    except KeyboardInterrupt:\n        return 0", 0, []),
    ],
)
def test_a_ctrl_c_inside_code_run_from_a_string_ends_with_the_status_decided(body, code, said, tmp_path):
    """A Ctrl-C that lands in code Python runs from a string (each namedtuple a module defines while it imports is
    one) sets CPython's flag for an unhandled KeyboardInterrupt on its way out, though it is handled after; ``python
    -m`` then ended by SIGINT (-2) whatever status was decided, after printing the line (a suite run beside two busy
    loops, 2026-12-02). Provoked here without timing: main() raises it inside exec."""
    result = run_command(tmp_path, f"def main(argv):\n    {body}\n")
    assert result.stderr.splitlines() == said, "the handler ran"
    assert result.returncode == code


def test_a_ctrl_c_python_swallows_in_a_weakref_callback_still_stops_the_command(tmp_path):
    """Python cannot raise out of a weakref callback: a Ctrl-C landing in one (importlib runs one for each module lock
    at every import) was printed as "Exception ignored in ..." and the command went on to finish with status 0 (a CI
    run's eval, 2026-12-02). Provoked here without timing: the callback itself raises the signal."""
    main = """import signal, time, weakref


class Held:
    pass


def main(argv):
    held = Held()
    ref = weakref.ref(held, lambda ref: (open("fired", "w").close(), signal.raise_signal(signal.SIGINT)))
    del held
    for _ in range(3000):  # 30 s at most
        time.sleep(0.01)
    print("finished the work")
    return 0
"""
    result = run_command(tmp_path, main)
    assert (tmp_path / "fired").exists(), "the callback ran and raised the signal"
    assert result.stderr.splitlines() == [IN_MAIN] and result.returncode == 130, result.stderr[-2000:]
    assert "finished" not in result.stdout


def run_command(tmp_path, main: str) -> subprocess.CompletedProcess:
    """``python -m`` a module whose main() is the given code, run as every command runs it (harness.core.cli.run)."""
    (tmp_path / "a_command.py").write_text(f"from harness.core.cli import run\n\n\n{main}\n\nrun(main)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "a_command"]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
