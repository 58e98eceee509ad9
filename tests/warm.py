"""A warm interpreter for the tests' commands: ``python -m MODULE ARGS`` forked from a process that has already imported
what every numprec command imports first (harness, torch, transformers), instead of a new interpreter that spends
2-5 s of CPU importing them again. The suite starts about 170 commands; this is most of its time on two cores.

What a command gets is still a process of its own running the real command: its own pid, the stdin, stdout and
stderr given to it, the working directory, ``sys.argv`` and ``__main__`` as ``python -m`` sets them, its exit
status (a signal as subprocess reports one), interpreter shutdown (atexit, threads joined) as a fresh process has it.
What differs is only what the imports already did, so a command takes the warm path only where that cannot matter:

- the environment is the one the warm interpreter started with (a variable read at import, such as
  NUMPREC_VERBOSE, TORCH_LOGS or PYTHONSAFEPATH, would otherwise have been read already), but for pytest's
  PYTEST_CURRENT_TEST, and numprec's own variables (``NUMPREC_*``: no library and no C code reads them) that the
  imports did not read: those the command is given, set or unset, as it is now (NUMPREC_KILL_AT, read where a writer
  reaches a step, is the suite's most frequent);
- the working directory is the repository's (``python -m`` imports from it) and ``--verbose`` is not given;
- the caller did not ask for a fresh interpreter (tests/test_console.py does: what libraries print while they are
  imported is its subject).

Anything else, and any failure to reach the warm interpreter, runs ``subprocess.run`` as before. A command a test
starts in the background to signal or kill it (helpers.start_module) is forked the same way and handed back as a
ForkedCommand, which answers as subprocess.Popen does (pid, poll, wait, send_signal, communicate, returncode).

The objects the imports made are frozen (``gc.freeze()``) before the first fork, so a command's garbage collector
walks only what the command made (what it computes and prints is the same): unfrozen, every forked command's exit
walked torch's and transformers' objects once more and wrote to their pages, copying them (a bare exit: 1.7 CPU-s,
against 0.3 frozen, measured here; the suite forks about 100 commands). A frozen object is never collected: cyclic
garbage the imports left (no command's data) stays until the exit.

    python -m tests.warm SOCKET     # the warm interpreter: imports, then forks a command per connection
"""

from __future__ import annotations

import atexit
import contextlib
import gc
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
import types
from pathlib import Path

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
_OWN = "NUMPREC_"  # numprec's variables: read by its Python code alone, so a read at import is seen in os.environ
# Walks over the whole environment at import that keep no variable of numprec's: tqdm's reads TQDM_* overrides.
_WALKS_KEEPING_NONE_OF_OURS = ("tqdm/utils.py",)
_HEADER = 8  # bytes: the request's length
_ABC = "<frozen _collections_abc>"  # Mapping.get, ItemsView.__iter__ ...: the frames between a caller and os.environ


def _command(request: dict, fds: list[int]) -> None:
    """In the forked child: become ``python -m MODULE ARGS`` on the given stdio and run it. Never returns: the
    command's SystemExit (or its exception) ends the interpreter as it ends a fresh one."""
    sys.stdout.flush()
    sys.stderr.flush()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    if request.get("interruptible"):
        # what a fresh command's preexec_fn gives it (helpers.sigint_as_from_a_terminal): Ctrl-C as from a terminal
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    for name, value in request["env"].items():  # what changes between tests, and numprec's unread variables
        os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
    sys.argv = [request["module"], *request["args"]]
    # what a command's own import of harness sets (a warm import was not a command's); imported by PRELOADED, and
    # not by this module, whose own imports come before the environment's reads are noted
    sys.modules["harness.core.startup"].start_a_command()
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


def _outside_abc(frame: types.FrameType) -> types.FrameType:
    """The first frame, from ``frame`` up, that is not collections.abc's (Mapping.get, ItemsView.__iter__ ...)."""
    while frame.f_back is not None and frame.f_code.co_filename == _ABC:
        frame = frame.f_back
    return frame


def _import_preloaded() -> dict:
    """Import PRELOADED, noting how the environment was read meanwhile: the names read one by one (every read of
    os.environ passes its class's __getitem__: get, in, setdefault, copy), and where the whole of it was walked (a
    walk reads every name; what it keeps is its code's business). Returns them for the clients."""
    read, walks = set(), set()
    environ = type(os.environ)
    getitem, iterate = environ.__getitem__, environ.__iter__

    def reading(self, key):
        caller = sys._getframe(1).f_code
        if not (caller.co_filename == _ABC and caller.co_name == "__iter__"):
            read.add(key)  # by name; a walk's reads are noted as the walk
        return getitem(self, key)

    def walking(self):
        walks.add(_outside_abc(sys._getframe(1)).f_code.co_filename)
        return iterate(self)

    environ.__getitem__, environ.__iter__ = reading, walking
    try:
        for name in PRELOADED:
            importlib.import_module(name)
    finally:
        environ.__getitem__, environ.__iter__ = getitem, iterate
    return {"read": sorted(read), "walks": sorted(walks)}


def serve(path: str) -> None:
    seen = _import_preloaded()
    if threading.active_count() != 1:
        return  # a process with threads cannot be forked safely: the clients keep starting fresh interpreters
    gc.freeze()  # the imports' objects: no command's collection walks them (above)
    with open(path + ".environment", "w") as handle:
        json.dump(seen, handle)
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
        self.seen: dict | None = None  # how the imports read the environment, once it takes commands
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for name in (self.path, self.path + ".binding", self.path + ".environment"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)

    def differences(self, env: dict[str, str]) -> dict[str, str | None] | None:
        """What a command forked here is given so that its environment is ``env``: the variables set (a value) or
        unset (None) beside the one this interpreter started with; None where it cannot be, because a variable
        differs that the imports read, or may have read, or that is not numprec's."""
        ours, theirs = _without_per_test(self.env), _without_per_test(env)
        changed = sorted(name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name))
        if changed and not self._unread(changed):
            if log := os.environ.get("NUMPREC_TESTS_WARM_LOG"):
                with open(log, "a") as handle:
                    handle.write(f"{os.getpid()} {changed}\n")
            return None
        return {name: theirs.get(name) for name in changed}

    def _unread(self, names: list[str]) -> bool:
        """Whether the imports left ``names`` unread: numprec's, not read by name, and no walk over the environment
        that might keep them. Unknown until the interpreter takes commands."""
        if self.seen is None:
            try:
                with open(self.path + ".environment") as handle:
                    self.seen = json.load(handle)
            except (OSError, ValueError):
                return False
        walks_ours = [walk for walk in self.seen["walks"] if not walk.endswith(_WALKS_KEEPING_NONE_OF_OURS)]
        return not walks_ours and all(name.startswith(_OWN) and name not in self.seen["read"] for name in names)

    def takes(self, args: list[str], cwd: Path, env: dict[str, str]) -> bool:
        """Whether a command can be forked here without any difference a fresh interpreter would show."""
        return (
            self.differences(env) is not None
            and Path(cwd).resolve() == self.root
            and "--verbose" not in args
            and os.path.exists(self.path)
            and self.process.poll() is None
        )

    def start(
        self,
        module: str,
        args: list[str],
        env: dict[str, str] | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
        interruptible: bool = False,
    ) -> ForkedCommand | None:
        """``python -m module args`` forked from the warm interpreter, as subprocess.Popen(text=True) starts it:
        stdout and stderr each subprocess.PIPE, subprocess.DEVNULL or None (this process's), stdin /dev/null;
        ``interruptible`` gives it Ctrl-C as a terminal would (helpers.sigint_as_from_a_terminal). None where the warm
        interpreter cannot be reached (nothing was started)."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.path)
        except OSError:
            connection.close()
            return None
        given_fds, kept = [os.open(os.devnull, os.O_RDONLY)], []
        for target, how in ((1, stdout), (2, stderr)):
            if how == subprocess.PIPE:
                read, write = os.pipe()
                given_fds.append(write)
                kept.append(read)
            else:
                given_fds.append(os.open(os.devnull, os.O_WRONLY) if how == subprocess.DEVNULL else os.dup(target))
                kept.append(None)
        env = env or self.env
        given = {**self.differences(env), **{name: value for name, value in env.items() if name in _PER_TEST}}
        request = {"module": module, "args": args, "cwd": str(self.root), "env": given, "interruptible": interruptible}
        payload = json.dumps(request).encode()
        try:
            socket.send_fds(connection, [b"%08d" % len(payload)], given_fds)
            connection.sendall(payload)
        finally:
            for fd in given_fds:
                os.close(fd)
        return ForkedCommand([sys.executable, "-m", module, *args], connection, *kept)

    def run(
        self, module: str, args: list[str], timeout: float, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess | None:
        """``python -m module args`` forked from the warm interpreter, as subprocess.run(capture_output=True,
        text=True) reports it (killed past ``timeout``); None where the warm interpreter cannot be reached."""
        command = self.start(module, args, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if command is None:
            return None
        try:
            out, err = command.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            command.kill()
            command.close()
            raise
        return subprocess.CompletedProcess(command.args, command.returncode, out, err)


class ForkedCommand:
    """A command forked from the warm interpreter, as a subprocess.Popen(text=True) of it behaves for its caller:
    ``pid`` (signals go to it), poll, wait, send_signal, kill, communicate and returncode. Its piped output is read
    by communicate alone (no stdout or stderr file objects)."""

    def __init__(self, args: list[str], connection: socket.socket, out_read: int | None, err_read: int | None):
        self.args, self.returncode = args, None
        self._connection, self._out, self._err, self._closed = connection, out_read, err_read, False
        self._reply = connection.fileno()  # the monitor's two lines: the pid, then the exit status
        self._read = {fd: bytearray() for fd in (out_read, err_read, self._reply) if fd is not None}
        self._selector = selectors.DefaultSelector()
        for fd in self._read:
            self._selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in self._read[self._reply]:
            self._pump(None)  # a connection that ends before the pid raises there
        self.pid = int(bytes(self._read[self._reply]).split(b"\n")[0])

    def _pump(self, timeout: float | None) -> bool:
        """Read what is ready (waiting up to ``timeout``; None: until something is); False once everything ended."""
        if not self._selector.get_map():
            return False
        for key, _ in self._selector.select(timeout):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                self._selector.unregister(key.fd)
            self._read[key.fd] += chunk
        reply = bytes(self._read[self._reply]).split(b"\n")
        if self.returncode is None and len(reply) > 2:
            self.returncode = int(reply[1])
        if self._reply not in self._selector.get_map() and self.returncode is None:
            raise RuntimeError(f"the warm interpreter lost the command {self.args[2:]} before it ended")
        return bool(self._selector.get_map())

    def _until(self, done, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout, self._output(self._out), self._output(self._err))
            if not self._pump(None if left is None else min(left, 1.0)):
                break

    def poll(self) -> int | None:
        self._pump(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._until(lambda: self.returncode is not None, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        """Read stdout and stderr (where piped) to their ends and wait for the exit, as Popen.communicate."""
        self._until(lambda: not self._selector.get_map(), timeout)
        self.close()
        return self._text(self._out), self._text(self._err)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        """Close the pipes and the connection (once: a descriptor closed twice may be another file's by then)."""
        if self._closed:
            return
        self._closed = True
        self._selector.close()
        self._connection.close()
        for fd in (self._out, self._err):
            if fd is not None:
                os.close(fd)

    __del__ = close

    def _output(self, fd: int | None) -> bytes | None:
        return None if fd is None else bytes(self._read[fd])

    def _text(self, fd: int | None) -> str | None:
        """Bytes as subprocess's text mode gives them: the locale's encoding, universal newlines."""
        if fd is None:
            return None
        text = bytes(self._read[fd]).decode(locale.getpreferredencoding(False))
        return text.replace("\r\n", "\n").replace("\r", "\n")


def _without_per_test(env: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name not in _PER_TEST}


if __name__ == "__main__":
    serve(sys.argv[1])
