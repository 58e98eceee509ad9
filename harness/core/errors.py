"""The error a user can fix: every command prints it as one line on stderr and exits with status 2
(harness/core/cli.py's ``run``). Below every other module of numprec, so that raising one imports nothing else."""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix. Printed as one line (no traceback); the process exits with status 2."""


def one_line(err: BaseException) -> str:
    """An exception as its type and the first line of its message (compiler errors run to pages)."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"
