"""The door every command shares: each setting is checked here, before any model loads or file is written, and a
user mistake becomes one line on stderr and exit status 2.

Numeric settings are ``Bound``s: one object gives the argparse type of a flag (``--samples``), the pydantic
validator of a config key (``samples:``) and the check of a value computed from both, with the same words. An
upper bound says why it is there. Lists refuse duplicates; paths must be UTF-8; an output path must be writable.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from pydantic import AfterValidator


class UserError(Exception):
    """A mistake the user can fix. Printed as one line (no traceback); the process exits with status 2."""


class ArgParser(argparse.ArgumentParser):
    """argparse, but a bad flag is a UserError (one line) instead of usage text plus an error line, and an
    abbreviated flag is refused: ``--sam 5`` must not silently mean ``--samples`` (or later, another flag)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=False, **kwargs)
        # Read before the command's imports by harness/quiet.py; here so that every command takes it.
        self.add_argument(
            "--verbose", action="store_true", help="show other libraries' warnings and log lines (or NUMPREC_VERBOSE=1)"
        )

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message} (see {self.prog} --help)")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        # Said before argparse's own checks, which would report a missing required flag instead.
        flags = {option for action in self._actions for option in action.option_strings}
        for arg in sys.argv[1:] if args is None else args:
            name = arg.split("=", 1)[0]
            if name.startswith("--") and name not in flags:
                meant = sorted(flag for flag in flags if flag.startswith(name))
                if meant:
                    raise UserError(f"{self.prog}: {name} is not a flag; write it in full: {' or '.join(meant)}")
        return super().parse_args(args, namespace)


def run(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> None:
    """Run a command's main(); turn UserError into exit 2 and Ctrl-C into exit 130, both without traceback."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on Ctrl-C unwinds (finally blocks run)
    try:
        code = main(argv)
    except UserError as err:
        print("error: " + " ".join(str(err).split("\n")), file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        _interrupted(cleanly=True)
    except BrokenPipeError:
        # the reader went away (``... | head``): what it read is all it wanted; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Exception as err:
        # Ctrl-C inside a C extension's first import (matplotlib while the first report is drawn) surfaces as the
        # ImportError it caused; the interpreter may then abort while shutting down, so it ends at once.
        if not _caused_by_interrupt(err):
            raise
        _interrupted(cleanly=False)
    sys.exit(code or 0)


def _caused_by_interrupt(err: BaseException) -> bool:
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def _interrupted(cleanly: bool) -> NoReturn:
    print("interrupted: finished work is saved; rerun the same command to resume", file=sys.stderr)
    if not cleanly:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(130)


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """How a command was invoked, for run records and lock notes: ``python -m MODULE ARGS``."""
    import shlex

    return f"python -m {module} " + shlex.join(sys.argv[1:] if argv is None else list(argv))


def one_line(err: BaseException) -> str:
    """An exception as its type and the first line of its message (compiler errors run to pages)."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


@dataclass(frozen=True)
class Bound:
    """The allowed range of one numeric setting. ``above``/``below`` are exclusive ends; ``why`` explains the
    upper end (a bound no one can see the reason for reads as arbitrary)."""

    low: float | None = None
    high: float | None = None
    why: str = ""
    above: float | None = None
    below: float | None = None
    kind: type = int

    def problem(self, value: float) -> str | None:
        """What is wrong with ``value``, or None."""
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        got = f", got {_number(value)}"
        if self.low is not None and value < self.low:
            return f"must be at least {_number(self.low)}{got}"
        if self.above is not None and value <= self.above:
            return f"must be greater than {_number(self.above)}{got}"
        reason = f" ({self.why})" if self.why else ""
        if self.high is not None and value > self.high:
            return f"must be at most {_number(self.high)}{reason}{got}"
        if self.below is not None and value >= self.below:
            return f"must be less than {_number(self.below)}{reason}{got}"
        return None

    def check(self, value: Any, name: str) -> Any:
        """``value``, or a UserError naming the setting."""
        kinds = (int, float) if self.kind is float else (int,)
        if isinstance(value, bool) or not isinstance(value, kinds):
            what = "a number" if self.kind is float else "an integer"
            raise UserError(f"{name} must be {what}, got {value!r}")
        problem = self.problem(value)
        if problem:
            raise UserError(f"{name} {problem}")
        return value

    def arg(self, text: str) -> Any:
        """The argparse ``type=`` of a flag with this range."""
        value = parse_number(text, self.kind)
        problem = self.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    @property
    def field(self) -> AfterValidator:
        """Pydantic metadata: ``Annotated[int, SAMPLES.field]``."""

        def validate(value: Any) -> Any:
            problem = None if value is None else self.problem(value)
            if problem:
                raise ValueError(problem)
            return value

        return AfterValidator(validate)


def _number(value: float) -> str:
    """1000000 as 1,000,000 (not 1e+06); 0.001 as 0.001."""
    return f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e18 else f"{value:g}"


def parse_number(text: str, kind: type = int) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"'{text}' is not {what}") from None


# Ranges shared by several commands. The upper ends are far past any sensible run, and each says why.
SEED = Bound(0, 2**32 - 1, "transformers' set_seed hands the seed to numpy, which takes 32 bits")
SAMPLES = Bound(1, 100_000, "at 100,000 problems a cell's 95% interval is already +-0.3 points; add seeds instead")
BATCH_SIZE = Bound(1, 16_384, "rows decoded or trained at once; more outgrows any GPU's memory")
# Not this machine's core count: a config written for a cluster node must load on a small login node too.
THREADS = Bound(1, 1024, "more threads than any machine here has cores; oversubscribed threads only slow a run")
REPEATS = Bound(1, 100, "timed passes; the minimum of a few is what a benchmark reports")
TENSOR_PARALLEL = Bound(1, 64, "vLLM splits attention heads across GPUs; no registry model has more than 64")
PROBABILITY = Bound(0, below=1, kind=float)
LEARNING_RATE = Bound(above=0, high=1, why="AdamW diverges long before", kind=float)
WEIGHT_DECAY = Bound(0, 1, "AdamW multiplies weights by 1 - lr x decay each step", kind=float)
STEPS = Bound(1, 10_000_000, "the paper trains 100,000 steps")


def unique(values: Sequence[Any], what: str, error: type[Exception] = UserError) -> list:
    """``values`` as a list, or ``error`` naming the repeated entry (a repeated length would be evaluated and
    written twice). Parsers raise the error their caller expects: argparse's type error, pydantic's ValueError."""
    seen: set = set()
    for value in values:
        if value in seen:
            raise error(f"{what} lists {value} twice; give each once")
        seen.add(value)
    return list(values)


def parse_int_list(text: str) -> list[int]:
    """'1,2,5-7' -> [1, 2, 5, 6, 7]; ValueError on anything else (or on a repeated entry)."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        dash = part.find("-", 1)  # a leading '-' is a sign, not a range
        try:
            bounds = [int(part)] if dash < 0 else [int(part[:dash]), int(part[dash + 1 :])]
        except ValueError:
            raise ValueError(f"'{text}' is not a list of integers like 1,2,3 or 1-13") from None
        if len(bounds) == 2 and bounds[1] < bounds[0]:
            raise ValueError(f"range {part} runs backwards; write {bounds[1]}-{bounds[0]}")
        if len(bounds) == 2 and bounds[1] - bounds[0] >= 10_000:
            raise ValueError(f"range {part} has over 10,000 entries; no setting here takes that many")
        values.extend(range(bounds[0], bounds[-1] + 1))
    if not values:
        raise ValueError(f"'{text}' names no integers; give a list like 1,2,3 or 1-13")
    return unique(values, f"'{text}'", error=ValueError)


def int_list(text: str) -> list[int]:
    """argparse type: '1,2,5-7' -> [1, 2, 5, 6, 7], each once."""
    try:
        return parse_int_list(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def name_list(text: str) -> list[str]:
    """argparse type: 'a,b' -> ['a', 'b'], each once."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"'{text}' names nothing; give a comma-separated list")
    return unique(names, f"'{text}'", error=argparse.ArgumentTypeError)


def utf8(text: str) -> str:
    """argparse type for a path or name: refuse bytes that are not UTF-8 (they could not be written into the
    run's UTF-8 records, and the run would fail after the work)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise argparse.ArgumentTypeError(f"'{shown}' is not valid UTF-8; rename it") from None
    return text


def input_path(text: str) -> Path:
    """argparse type: an existing file or directory."""
    path = Path(utf8(text))
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{path} does not exist")
    return path


def _output_path(text: str) -> Path:
    """An output path's text: not empty (Path("") would be the current directory), and within what the file
    system takes (a component of at most 255 bytes, the whole at most 4,096)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a directory name (e.g. runs/mine)")
    path = Path(utf8(text))
    longest = max((len(part.encode("utf-8")) for part in path.parts), default=0)
    if longest > 255 or len(text.encode("utf-8")) > 4096:
        raise argparse.ArgumentTypeError(
            f"'{text[:40]}...' is too long for the file system (at most 255 bytes a name, 4,096 in all)"
        )
    return path


def output_dir(text: str) -> Path:
    """argparse type: a directory this process can create or write into (checked now, created later)."""
    path = _output_path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a file, not a directory; choose another path")
    _check_writable(path)
    return path


def output_file(text: str) -> Path:
    """argparse type: a file this process can create or replace."""
    path = _output_path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory; give a file name inside it")
    _check_writable(path.parent if path.parent != Path("") else Path("."))
    return path


def _check_writable(path: Path) -> None:
    """The path itself if it exists, else its nearest existing ancestor, must be a writable directory."""
    existing = path.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create {path}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {existing} (permission denied); choose another path")


def read_json(path: Path, what: str) -> dict:
    """A JSON object from ``path``; a missing, non-UTF-8 or malformed file is one line saying which."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{what}: no {path.name} in {path.parent}") from None
    except UnicodeDecodeError:
        raise UserError(f"{what}: {path} is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{what}: {path} is not valid JSON (line {err.lineno}: {err.msg})") from None
    except RecursionError:
        raise UserError(f"{what}: {path} nests deeper than any file numprec writes") from None
    except OSError as err:
        raise UserError(f"{what}: cannot read {path}: {err.strerror}") from None
    if not isinstance(data, dict):
        raise UserError(f"{what}: {path} must hold a JSON object, got {type(data).__name__}")
    return data
