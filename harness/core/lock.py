"""One writer per output directory, for every command that writes one (harness.eval, harness.rescore,
harness.quantize, finetune.train, scratch.train, scratch.sweep, bench.run).

The lock is an advisory ``flock`` on the directory itself: held while the command runs, released by the kernel
when the process ends, kill -9 included, so it can never go stale. Beside it the holder leaves a note
(``.numprec-writer.json``: pid, host, start, command) that a second process quotes when it is refused; the note is
removed when the lock is released, and a note left by a killed process names no live holder (the lock is free) and
is replaced by the next writer. A directory the lock made is removed on release if nothing was written to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from harness.core.errors import UserError

NOTE = ".numprec-writer.json"


class DirectoryLock:
    """``with DirectoryLock(path, command):`` or ``lock = DirectoryLock(...); ...; lock.release()``. Creating the
    directory, writing to it and finding another writer there are each one line (a UserError)."""

    def __init__(self, path: Path, command: str):
        self.path = Path(path)
        self.created = not self.path.exists()  # an interrupted command removes a directory it made and left empty
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDONLY)
        except OSError as err:
            raise UserError(
                f"cannot use {self.path} as an output directory: {err.strerror}; pass another --out"
            ) from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise UserError(
                f"another process{holder(self.path)} is writing to {self.path}; wait for it to finish, or pass "
                "another --out"
            ) from None
        note = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        note["command"] = command
        try:
            probe = self.path / NOTE
            probe.write_text(json.dumps(note) + "\n", encoding="utf-8")
        except OSError as err:
            self.release()
            raise UserError(f"cannot write to {self.path}: {err.strerror}; pass a writable --out") from None

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            (self.path / NOTE).unlink()
        os.close(self.fd)
        self.fd = None
        if self.created:
            with contextlib.suppress(OSError):  # not empty: the command wrote something, which stays
                self.path.rmdir()

    def __enter__(self) -> DirectoryLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def holder(path: Path) -> str:
    """' (pid 123 on host, since 2026-11-23 12:00:00: COMMAND)' from the holder's note, when it is readable."""
    try:
        note = json.loads((Path(path) / NOTE).read_text(encoding="utf-8"))
        return f" (pid {note['pid']} on {note['host']}, since {note['started']}: {note['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""
