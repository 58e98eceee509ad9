"""What every command shares: user mistakes become one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence


class UserError(Exception):
    """A mistake the user can fix. Printed as one line (no traceback); the process exits with status 2."""


class ArgParser(argparse.ArgumentParser):
    """argparse, but a bad flag is a UserError (one line) instead of usage text plus an error line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message} (see {self.prog} --help)")


def run(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> None:
    """Run a command's main(); turn UserError into exit 2 and Ctrl-C into exit 130, both without traceback."""
    try:
        code = main(argv)
    except UserError as err:
        print("error: " + " ".join(str(err).split("\n")), file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: finished work is saved; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    sys.exit(code or 0)


def int_list(text: str) -> list[int]:
    """Parse '1,2,5-7' into [1, 2, 5, 6, 7]."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                values.extend(range(int(lo), int(hi) + 1))
            else:
                values.append(int(part))
        except ValueError:
            raise UserError(f"'{text}' is not a list of integers like 1,2,3 or 1-13") from None
    if not values:
        raise UserError(f"'{text}' names no integers; give a list like 1,2,3 or 1-13")
    return values


def name_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise UserError(f"'{text}' names nothing; give a comma-separated list")
    return names
