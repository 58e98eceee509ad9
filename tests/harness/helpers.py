"""Run the project's commands as a user would: a real subprocess, offline."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends.vllm import VLLM_ENV
from harness.quantize import QUANTIZE_ENV
from harness.questions.problems import generate
from harness.questions.prompts import user_message
from harness.serve import free_port  # noqa: F401  (the tests' free port)
from tests.needs import require
from tests.warm import WarmInterpreter

needs_quantize_env = pytest.mark.skipif(
    not (QUANTIZE_ENV / "bin" / "python").exists(), reason="run scripts/setup_quantize.sh (CI does)"
)

ROOT = Path(__file__).resolve().parents[2]


def require_vllm() -> None:
    """vLLM's environment (scripts/setup_vllm.sh makes it): a skip with its reason where it is missing, a failure
    where NUMPREC_REQUIRE_VLLM=1 (CI) says it must be there."""
    require(
        (VLLM_ENV / "bin" / "python").exists(),
        "NUMPREC_REQUIRE_VLLM",
        "vLLM is not set up here",
        "run bash scripts/setup_vllm.sh",
    )


def command_env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


_warm: list[WarmInterpreter] = []  # this test process's warm interpreter, started by the first command


def run_module(
    module: str, *args: str, timeout: float = 900, cwd: Path = ROOT, env: dict | None = None, fresh: bool = False
) -> subprocess.CompletedProcess:
    """``python -m module args`` as a process of its own, its output captured. Forked from a warm interpreter where
    nothing a fresh one would do differently can matter (tests/warm.py), else a fresh interpreter; ``fresh`` asks
    for one always (what libraries print while they are imported)."""
    base_env = command_env()
    full_env = {**base_env, **(env or {})}
    if not fresh and os.environ.get("NUMPREC_TESTS_WARM", "1") != "0":
        if not _warm or not _warm[0].started_with(base_env):
            # the first command, or the test process's environment changed since (a library's import sets a
            # variable): a warm interpreter for the environment as it is now; this command runs fresh meanwhile
            for earlier in _warm:
                earlier.stop()
            _warm[:] = [WarmInterpreter(ROOT, base_env)]
        elif _warm[0].takes(list(args), cwd, full_env):
            result = _warm[0].run(module, list(args), timeout, full_env)
            if result is not None:
                return result
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=full_env,
    )


def assert_user_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2, exactly one line on stderr that says what is wrong, no traceback."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def prompts_for(backend, task, length, count, seed=0):
    """``count`` problems of a cell and their prompts in ``backend``'s chat template."""
    problems = generate(task, 10, length, count, seed)
    return problems, [backend.chat_prompt(user_message(p)) for p in problems]
