"""A warm interpreter for the tests' commands: ``python -m MODULE ARGS`` forked from a process that has already imported
what every numprec command imports first (harness, torch, transformers), instead of a new interpreter that spends
2-5 s of CPU importing them again. The suite starts about 170 commands; this is most of its time on two cores.

What a command gets is still a process of its own running the real command: its own pid, the stdin, stdout and
stderr given to it, the working directory, ``sys.argv`` and ``__main__`` as ``python -m`` sets them, its exit
status (a signal as subprocess reports one), interpreter shutdown (atexit, threads joined) as a fresh process has it.
What differs is only what the imports already did, so a command takes the warm path only where that cannot matter:

- the environment is exactly the one the warm interpreter started with (a variable read at import, such as
  NUMPREC_VERBOSE, TORCH_LOGS or PYTHONSAFEPATH, would otherwise have been read already), but for pytest's
  PYTEST_CURRENT_TEST, which the command is given as it is now;
- the working directory is the repository's (``python -m`` imports from it) and ``--verbose`` is not given;
- the caller did not ask for a fresh interpreter (tests/test_console.py does: what libraries print while they are
  imported is its subject).

Anything else, and any failure to reach the warm interpreter, runs ``subprocess.run`` as before.

    python -m tests.warm SOCKET     # the warm interpreter: imports, then forks a command per connection
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import locale
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness.core import startup

# What numprec's commands import before they do anything (harness first: its startup quiets the libraries as a
# command's own import of it does), and what harness.eval, the suite's most frequent command, imports on its way
# (plots and statistics: about 1 s a command). Never a command's own module: runpy warns when the module it runs
# as __main__ was imported already.
PRELOADED = (
    "harness",
    "torch",
    "transformers",
    "transformers.modeling_utils",
    "transformers.generation",
    "matplotlib.pyplot",
    "scipy.stats",
    "harness.runs.plan",
    "harness.runs.cells",
    "harness.reports.summary",
    "harness.backends.hf",
)
_PER_TEST = ("PYTEST_CURRENT_TEST",)  # set by pytest for each test; read by no command and no library at import
_HEADER = 8  # bytes: the request's length


def _command(request: dict, fds: list[int]) -> None:
    """In the forked child: become ``python -m MODULE ARGS`` on the given stdio and run it. Never returns: the
    command's SystemExit (or its exception) ends the interpreter as it ends a fresh one."""
    sys.stdout.flush()
    sys.stderr.flush()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.update(request["env"])  # the same but for what only changes between tests (see ``_PER_TEST``)
    sys.argv = [request["module"], *request["args"]]
    startup.start_a_command()  # what a command's own import of harness sets (a warm import was not a command's)
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    header, fds, _, _ = socket.recv_fds(connection, _HEADER, 3)
    while len(header) < _HEADER:
        header += connection.recv(_HEADER - len(header))
    size, payload = int(header), b""
    while len(payload) < size:
        payload += connection.recv(size - len(payload))
    return json.loads(payload), list(fds)


def _monitor(connection: socket.socket) -> None:
    """Per connection: fork the command, tell the client its pid, wait for it, tell its exit status."""
    request, fds = _receive(connection)
    child = os.fork()
    if child == 0:
        connection.close()
        _command(request, fds)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"{child}\n".encode())
    _, status = os.waitpid(child, 0)
    connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    os._exit(0)


def serve(path: str) -> None:
    for name in PRELOADED:
        importlib.import_module(name)
    if threading.active_count() != 1:
        return  # a process with threads cannot be forked safely: the clients keep starting fresh interpreters
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".binding")
    listener.listen(16)
    os.rename(path + ".binding", path)  # the path appears once connections are taken
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped as they end
    while True:
        connection, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the monitor waits for its command
            _monitor(connection)
        connection.close()


class WarmInterpreter:
    """The client: one warm interpreter per test process, started on first use, stopped when the process exits."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, dict(env)
        self.folder = tempfile.mkdtemp(prefix="numprec-warm-")
        self.path = os.path.join(self.folder, "socket")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.warm", self.path],
            cwd=root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for name in (self.path, self.path + ".binding"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)

    def started_with(self, env: dict[str, str]) -> bool:
        """Whether this interpreter started with ``env`` (what changes between tests aside)."""
        same = _without_per_test(env) == _without_per_test(self.env)
        if not same and (log := os.environ.get("NUMPREC_TESTS_WARM_LOG")):
            changed = sorted(set(env.items()) ^ set(self.env.items()))
            with open(log, "a") as handle:
                handle.write(f"{os.getpid()} {[name for name, _ in changed if name not in _PER_TEST]}\n")
        return same

    def takes(self, args: list[str], cwd: Path, env: dict[str, str]) -> bool:
        """Whether a command can be forked here without any difference a fresh interpreter would show."""
        return (
            self.started_with(env)
            and Path(cwd).resolve() == self.root
            and "--verbose" not in args
            and os.path.exists(self.path)
            and self.process.poll() is None
        )

    def run(
        self, module: str, args: list[str], timeout: float, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess | None:
        """``python -m module args`` forked from the warm interpreter, as subprocess.run(capture_output=True,
        text=True) reports it; None where the warm interpreter cannot be reached (nothing was started)."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.path)
        except OSError:
            connection.close()
            return None
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        per_test = {name: value for name, value in (env or self.env).items() if name in _PER_TEST}
        payload = json.dumps({"module": module, "args": args, "cwd": str(self.root), "env": per_test}).encode()
        try:
            socket.send_fds(connection, [b"%08d" % len(payload)], [null, out_write, err_write])
            connection.sendall(payload)
        finally:
            for fd in (null, out_write, err_write):
                os.close(fd)
        command = [sys.executable, "-m", module, *args]
        return _collect(connection, out_read, err_read, command, timeout)


def _without_per_test(env: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name not in _PER_TEST}


def _collect(connection, out_read: int, err_read: int, command: list[str], timeout: float):
    """Read the command's stdout and stderr to their ends and its pid and exit status; kill it past ``timeout``."""
    reply_fd = connection.fileno()
    streams = {out_read: bytearray(), err_read: bytearray(), reply_fd: bytearray()}
    selector = selectors.DefaultSelector()
    for fd in streams:
        selector.register(fd, selectors.EVENT_READ)
    deadline, pid = time.monotonic() + timeout, None
    try:
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(command, timeout, bytes(streams[out_read]), bytes(streams[err_read]))
            for key, _ in selector.select(min(left, 1.0)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                streams[key.fd] += chunk
                lines = streams[reply_fd].split(b"\n")
                pid = int(lines[0]) if pid is None and len(lines) > 1 else pid
    finally:
        selector.close()
        connection.close()
        os.close(out_read)
        os.close(err_read)
    reply = streams[reply_fd].split(b"\n")
    if len(reply) < 3:
        raise RuntimeError(f"the warm interpreter lost the command {command[2:]} before it ended")
    return subprocess.CompletedProcess(command, int(reply[1]), _text(streams[out_read]), _text(streams[err_read]))


def _text(data: bytes) -> str:
    """Bytes as subprocess's text mode gives them: the locale's encoding, universal newlines."""
    text = bytes(data).decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    serve(sys.argv[1])
