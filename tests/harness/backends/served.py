"""What the api backend's tests share: llama.cpp's OpenAI-compatible server (harness.serve) serving the embedded
SmolLM2 GGUF on a free port of 127.0.0.1, harness.eval run against it in the test's process, and readers of what a
run wrote. The server itself is one for the tests of group "api" (tests/harness/backends/conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.cli import run
from harness.eval import main
from harness.serve import wait_until_serving
from tests.harness.helpers import ROOT, command_env, free_port

# The zero-shot prompt throughout: what these tests ask of the server is its requests, faults and answers compared
# with others of the same prompt, and the server decodes each prompt whole from an empty cache: a third of the
# few-shot one's tokens halves its work.
PROMPT = ["--prompt", "zero-shot"]
GRID = ["--tasks", "add,mul", "--lengths", "1", "--samples", "3"]
SMALL = ["--tasks", "add", "--lengths", "1", "--samples", "5"]  # where what is tested is the requests, not answers
TWO = ["--tasks", "add", "--lengths", "1", "--samples", "2"]  # where what is tested is who answered


class Server:
    """``python -m harness.serve`` on a port of its own, started and stopped by the test."""

    def __init__(self, port: int | None = None, api_key: str | None = None):
        self.port, self.api_key, self.process = port or free_port(), api_key, None

    def start(self) -> Server:
        args = [sys.executable, "-m", "harness.serve", "--port", str(self.port), "--threads", "1"]
        env = {k: v for k, v in command_env().items() if k not in ("NUMPREC_API_KEY", "OPENAI_API_KEY")}
        if self.api_key:  # from the environment: a key on the command line is in every user's process list
            env["NUMPREC_API_KEY"] = self.api_key
        self.process = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until_serving([self.process], [self.url], seconds=90)
        except RuntimeError as error:
            tail = self.process.stderr.read()[-2000:] if self.process.poll() is not None else ""
            raise RuntimeError(f"harness.serve: {error} {tail}") from None
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> str:
        """Ctrl-C, as a user stops it: what it printed on stderr while it served."""
        self.process.send_signal(signal.SIGINT)
        try:
            _, err = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return err

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def evaluate(out: Path, *args: str, capsys=None, env: dict | None = None) -> tuple[int, list[str]]:
    """harness.eval in this process, as python -m harness.eval runs it: (exit status, stderr lines)."""
    saved = {name: os.environ.get(name) for name in (env or {})}
    os.environ.update(env or {})
    try:
        with pytest.raises(SystemExit) as exit_info:
            run(main, [*args, "--out", str(out)])
    finally:
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)
    err = capsys.readouterr().err if capsys else ""
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
    return exit_info.value.code, lines


def api(base: str, *extra: str, grid: list[str] = SMALL) -> list[str]:
    return ["--backend", "api", "--api-base", base, "--precision", "gguf-q4_1", *PROMPT, *grid, *extra]


def requests_per_problem(run: Path) -> list[int]:
    """Completion requests each problem took, in the order sent at concurrency 1: a completion whose first line is
    blank is continued, one more request per leading newline (the server stops at a newline). Which ones are is the
    model's output on this CPU, so it is read from a clean run's journal."""
    texts = [entry["text"] for entry in journal(run)]
    return [1 + text[: len(text) - len(text.lstrip())].count("\n") for text in texts]


def journal(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]
