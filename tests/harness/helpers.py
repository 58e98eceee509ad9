"""Run the project's commands as a user would: a real subprocess, offline."""

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from harness.backends.vllm import VLLM_ENV
from harness.core.paths import QUANTIZE_ENV
from harness.quantize import HANDED_OVER
from harness.questions.problems import generate
from harness.questions.prompts import user_message
from harness.serve import free_port  # noqa: F401  (the tests' free port)
from tests.needs import require
from tests.warm import ForkedCommand, WarmInterpreter

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


# Set by inductor in this process before it loads each compiled graph: an address in this process's memory, which
# a command sets again for itself. Left out of the commands' environment, it no longer tells the warm interpreter that
# the environment changed (tests/warm.py), which would start another one (about 11 CPU-seconds) after a compile.
THIS_PROCESS_ONLY = ("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",)


def command_env() -> dict:
    inherited = {name: value for name, value in os.environ.items() if name not in THIS_PROCESS_ONLY}
    return {**inherited, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


_warm: list[WarmInterpreter] = []  # this test process's warm interpreter, started by the first command


def _warm_taking(args: tuple[str, ...], cwd: Path, env: dict | None, fresh: bool) -> WarmInterpreter | None:
    """The warm interpreter a command ``args`` in ``cwd`` with ``env`` (beside command_env()) can be forked from,
    where nothing a fresh interpreter would do differently can matter (tests/warm.py); else None."""
    if fresh or os.environ.get("NUMPREC_TESTS_WARM", "1") == "0":
        return None
    base_env = command_env()
    if not _warm or _warm[0].differences(base_env) is None:
        # the first command, or the test process's environment changed since (a library's import sets a
        # variable): a warm interpreter for the environment as it is now; this command runs fresh meanwhile
        for earlier in _warm:
            earlier.stop()
        _warm[:] = [WarmInterpreter(ROOT, base_env)]
        return None
    return _warm[0] if _warm[0].takes(list(args), cwd, {**base_env, **(env or {})}) else None


def run_module(
    module: str, *args: str, timeout: float = 900, cwd: Path = ROOT, env: dict | None = None, fresh: bool = False
) -> subprocess.CompletedProcess:
    """``python -m module args`` as a process of its own, its output captured. Forked from a warm interpreter where
    nothing a fresh one would do differently can matter (tests/warm.py), else a fresh interpreter; ``fresh`` asks
    for one always (what libraries print while they are imported)."""
    full_env = {**command_env(), **(env or {})}
    if warm := _warm_taking(args, cwd, env, fresh):
        result = warm.run(module, list(args), timeout, full_env)
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


def sigint_as_from_a_terminal() -> None:
    """Give the child the SIGINT a terminal would. A runner that starts the suite in the background (`cmd &`)
    hands SIGINT down ignored, and one that blocks it hands down a blocked mask (masks survive fork and exec):
    either way Python never raises KeyboardInterrupt and the child runs to completion."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def start_module(
    module: str,
    *args: str,
    env: dict | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
    interruptible: bool = False,
    fresh: bool = False,
) -> subprocess.Popen | ForkedCommand:
    """``python -m module args`` started in the background from the repository, as subprocess.Popen(text=True)
    starts it (stdout, stderr: PIPE, DEVNULL or None): forked from the warm interpreter where run_module would be,
    else a fresh interpreter. ``interruptible``: Ctrl-C reaches it as from a terminal (sigint_as_from_a_terminal)."""
    full_env = {**command_env(), **(env or {})}
    if warm := _warm_taking(args, ROOT, env, fresh):
        started = warm.start(module, list(args), full_env, stdout, stderr, interruptible)
        if started is not None:
            return started
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=full_env,
        stdout=stdout,
        stderr=stderr,
        text=True,
        preexec_fn=sigint_as_from_a_terminal if interruptible else None,
    )


def csv_rows(path: Path) -> list[dict]:
    """A CSV file the commands wrote (results.csv, comparisons.csv ...) as the csv module reads it: a dict a row,
    every value text."""
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def assert_user_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2, exactly one line on stderr that says what is wrong, no traceback."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def prompts_for(backend, task, length, count, seed=0, style="zero-shot"):
    """``count`` problems of a cell and their prompts in ``backend``'s chat template: the zero-shot prompt unless
    asked (the tests of a backend compare its paths with each other; the embedded model answers it in about half the
    tokens it takes after the paper's few-shot examples, and its prompts still share a prefix)."""
    problems = generate(task, 10, length, count, seed)
    return problems, [backend.chat_prompt(user_message(p, style)) for p in problems]


def assert_summed_in_another_order(ours: torch.Tensor, theirs: torch.Tensor, x: torch.Tensor, weight: torch.Tensor):
    """``ours`` and ``theirs``: two bf16 roundings of the float32 sums of the same exact products of ``x`` and
    ``weight`` (torch's bf16 kernel; float32's GEMM over the bf16 values). Each value is equal, or apart by one bf16
    step plus what two float32 sums in other orders differ by where they cancel (2^-16 of the sum of |x w|; measured
    on the embedded model: 2^-23.7 at most); 99.9% of them bit-equal."""
    with torch.inference_mode():
        magnitude = F.linear(x.double().abs(), weight.double().abs())
    apart = (ours.double() - theirs.double()).abs()
    one_step = torch.maximum(ours.double().abs(), theirs.double().abs()) * 2**-7
    assert ours.dtype == theirs.dtype == torch.bfloat16
    assert (apart <= one_step + magnitude * 2**-16).all()
    assert (apart == 0).sum() > 0.999 * apart.numel(), f"{int((apart == 0).sum())} of {apart.numel()} equal"


def in_quantize_env(script: str, *args: str) -> subprocess.CompletedProcess:
    """``python -c script args`` in the quantization environment, as harness.quantize hands itself over to it
    (its output captured): the tests' checkpoints made by harness.quantize's own code in one process."""
    env = {**command_env(), "PYTHONPATH": str(ROOT), HANDED_OVER: "1"}
    python = str(QUANTIZE_ENV / "bin" / "python")
    return subprocess.run([python, "-c", script, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
