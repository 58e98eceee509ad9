"""The commands that read runs, run in this process as ``python -m`` runs them (their exit status, stderr's lines
and stdout), and what their tests compare before and after: a directory's files by digest, a copy of a run, a child
without root's permission override."""

from __future__ import annotations

import hashlib
import importlib
import shutil
from pathlib import Path

import pytest

from harness.core.cli import run as run_command


def hashes(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def command(module: str, argv: list[str], capsys) -> tuple[int, list[str], str]:
    """A command's main() as python -m runs it: (exit status, stderr's lines, stdout)."""
    with pytest.raises(SystemExit) as exit_info:
        run_command(importlib.import_module(module).main, [str(arg) for arg in argv])
    captured = capsys.readouterr()
    return exit_info.value.code, [line for line in captured.err.splitlines() if line.strip()], captured.out


def refused(module: str, argv: list, capsys, *fragments: str) -> str:
    code, err, _ = command(module, argv, capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in err[0], err[0]
    return err[0]


def copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def without_permission_override() -> None:
    """For a child of root: drop the capabilities to read and search past file permissions (CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH) from its bounding set, so that a directory of mode 000 is unreadable to it as to a user."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
