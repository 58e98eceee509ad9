"""The warm interpreter the tests' commands are forked from (tests/warm.py) gives what a fresh interpreter gives: the
same argv, working directory, __main__, stdout, stderr (as text mode reads them) and exit status, a signal reported
as subprocess reports one, a timeout as subprocess.run raises it; and it is taken only where nothing differs."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from tests.harness import helpers
from tests.harness.helpers import ROOT, command_env, run_module, start_module
from tests.warm import ForkedCommand, WarmInterpreter


@pytest.fixture(scope="module")
def warm():
    """This process's warm interpreter for the environment as it is now, once it takes commands (started by a
    command, as in any test)."""
    run_module("tests.warm_probe", "0")
    interpreter = helpers._warm[0]
    assert taking(interpreter, command_env()), "the warm interpreter did not start"
    return interpreter


def taking(interpreter: WarmInterpreter, env: dict[str, str]) -> bool:
    """Whether ``interpreter`` takes commands in ``env``, waited for while it imports (two minutes at most)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not interpreter.takes([], ROOT, env):
        time.sleep(0.2)
    return interpreter.takes([], ROOT, env)


def test_a_forked_command_is_what_a_fresh_one_is(warm):
    for code in ("0", "3"):
        fresh = run_module("tests.warm_probe", code, "--flag", fresh=True)
        forked = warm.run("tests.warm_probe", [code, "--flag"], timeout=60)
        seen_fresh, seen_forked = json.loads(fresh.stdout), json.loads(forked.stdout)
        assert not seen_fresh["torch"] and seen_forked["torch"], "the forked one ran in the warm interpreter"
        # its collector walks no more than a fresh one's, which imported no torch: the imports' objects are frozen
        assert seen_forked["collectable"] <= seen_fresh["collectable"], (seen_forked, seen_fresh)
        assert seen_forked["argv"] == seen_fresh["argv"] and seen_forked["argv"][0].endswith("tests/warm_probe.py")
        assert (seen_forked["cwd"], seen_forked["name"]) == (seen_fresh["cwd"], "__main__")
        assert forked.stderr == fresh.stderr == "a line on stderr\nand a bar\nredrawn\n"
        assert forked.returncode == fresh.returncode == int(code)
        assert forked.args == fresh.args


def test_a_forked_command_starts_with_a_fresh_ones_settings(warm):
    """What a command's own import of harness sets (the garbage collector's threshold among it), the warm
    interpreter's import having been no command's."""
    fresh = run_module("harness.core.startup", fresh=True)
    forked = warm.run("harness.core.startup", [], timeout=60)
    assert forked.returncode == fresh.returncode == 0, forked.stderr + fresh.stderr
    assert json.loads(forked.stdout) == json.loads(fresh.stdout)
    assert json.loads(forked.stdout)["gc_threshold"][0] == 50_000


def test_a_signal_and_a_timeout_are_reported_as_subprocess_reports_them(warm):
    assert warm.run("tests.warm_probe", ["kill"], timeout=60).returncode == -15
    assert run_module("tests.warm_probe", "kill", fresh=True).returncode == -15
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        warm.run("tests.warm_probe", ["sleep"], timeout=3)
    assert json.loads(timed_out.value.output)["argv"][1] == "sleep"
    assert time.monotonic() - started < 60, "the sleeping command was killed, not waited for"


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "forked"])
def test_a_started_command_is_polled_signalled_and_read_as_popen_gives_it(warm, tmp_path, fresh):
    """start_module's command, forked or fresh: running while polled, a wait that times out, a signal sent to its
    pid, then its output and its end as Popen reports them. (Ctrl-C, where a forked numprec command answers as a
    fresh one does: tests/harness/runs/test_eval.py's, now forked.)"""
    ready = tmp_path / "ready"
    process = start_module(
        "tests.warm_probe", "sleep", env={"NUMPREC_PROBE_READY": str(ready)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, fresh=fresh,
    )  # fmt: skip
    assert isinstance(process, ForkedCommand) != fresh
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists() and process.poll() is None, "it sleeps"
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.5)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM and process.poll() == -signal.SIGTERM
    seen = json.loads(out)
    assert seen["argv"][1] == "sleep" and seen["torch"] != fresh and seen["numprec"]["NUMPREC_PROBE_READY"]
    assert err == "a line on stderr\nand a bar\nredrawn\n"
    killed = start_module("tests.warm_probe", "sleep", stdout=subprocess.DEVNULL, fresh=fresh)
    killed.kill()
    assert killed.wait(timeout=60) == -signal.SIGKILL


def test_it_is_taken_only_where_a_fresh_interpreter_would_do_the_same(warm, tmp_path):
    env = command_env()
    assert warm.takes(["--out", "x"], ROOT, env)
    assert not warm.takes(["--verbose"], ROOT, env), "--verbose changes what libraries print while imported"
    assert not warm.takes([], tmp_path, env), "python -m imports from its working directory"
    assert not warm.takes([], ROOT, {**env, "NUMPREC_VERBOSE": "1"}), "a variable read at import"
    assert not warm.takes([], ROOT, {**env, "TORCH_LOGS": "+dynamo"}), "a library's variable"
    result = run_module("tests.warm_probe", "0", env={"PROBE": "1"})
    assert not json.loads(result.stdout)["torch"], "a changed environment runs a fresh interpreter"
    assert json.loads(run_module("tests.warm_probe", "0").stdout)["torch"], "the same one runs warm"


def test_numprec_variables_the_imports_left_unread_are_given_to_a_forked_command():
    """An interpreter started with NUMPREC_GONE: a command asked without it and with NUMPREC_PROBE sees what a fresh
    interpreter would (numprec reads neither at import); the next command, asked with the starting environment, sees
    that one again."""
    started = {**command_env(), "NUMPREC_GONE": "1"}
    asked = {**{k: v for k, v in started.items() if k != "NUMPREC_GONE"}, "NUMPREC_PROBE": "1"}
    interpreter = WarmInterpreter(ROOT, started)
    try:
        assert taking(interpreter, started), "the warm interpreter did not start"
        assert interpreter.takes([], ROOT, asked), "numprec's unread variables are given"
        forked = json.loads(interpreter.run("tests.warm_probe", ["0"], timeout=60, env=asked).stdout)
        assert forked["torch"] and forked["numprec"] == {k: v for k, v in asked.items() if k.startswith("NUMPREC_")}
        again = json.loads(interpreter.run("tests.warm_probe", ["0"], timeout=60, env=started).stdout)
        assert again["numprec"] == {k: v for k, v in started.items() if k.startswith("NUMPREC_")}
    finally:
        interpreter.stop()
