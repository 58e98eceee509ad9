"""The door every command shares: each setting is checked here, before any model loads or file is written, and a
user mistake becomes one line on stderr and exit status 2 (``run``).

Flags are parsed by ``ArgParser``; numeric ones take their type from a ``Bound`` (harness/core/bounds.py). Lists refuse
duplicates; paths must be UTF-8; an output path must be writable.
"""

from __future__ import annotations

import _thread
import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from harness.core.bounds import parse_int_list, unique
from harness.core.errors import UserError
from harness.core.paths import obstacle


class ArgParser(argparse.ArgumentParser):
    """argparse, but a bad flag is a UserError (one line) instead of usage text plus an error line, and an
    abbreviated flag is refused: ``--sam 5`` must not silently mean ``--samples`` (or later, another flag)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=False, **kwargs)
        # Read before the command's imports by harness/core/quiet.py; here so that every command takes it.
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
    previous_hook = sys.unraisablehook
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on Ctrl-C unwinds (finally blocks run)
        sys.unraisablehook = _interrupts_delivered_again(previous_hook)
    try:
        code = _outcome(main, argv)
    finally:
        sys.unraisablehook = previous_hook  # the work is over: nothing left for a swallowed Ctrl-C to stop
        _clear_the_unhandled_interrupt_flag()
    sys.exit(code or 0)


def _interrupts_delivered_again(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    """An unraisable-exception hook that raises a swallowed Ctrl-C again where the command runs.

    Python cannot raise out of a weakref callback or a ``__del__``: a KeyboardInterrupt that lands there is printed
    as "Exception ignored in ..." and the work goes on (importlib's module-lock callbacks run at every import; a CI
    run's eval ignored its Ctrl-C there and finished with status 0). A signal tripped inside this hook would be
    raised inside it, and lost again; a thread trips it once the main thread has left the hook. Other unraisable
    exceptions go to the previous hook."""

    def hook(unraisable: Any) -> None:
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            threading.Thread(target=_interrupt_once_out_of, args=(sys._getframe(),), daemon=True).start()
        else:
            previous(unraisable)

    return hook


def _interrupt_once_out_of(frame: FrameType) -> None:
    main = threading.main_thread().ident
    while _on_the_stack(frame, sys._current_frames().get(main)):
        time.sleep(0.001)
    _thread.interrupt_main()


def _on_the_stack(frame: FrameType, top: FrameType | None) -> bool:
    while top is not None:
        if top is frame:
            return True
        top = top.f_back
    return False


def _clear_the_unhandled_interrupt_flag() -> None:
    """A Ctrl-C that left code run from a string (the namedtuples a module defines as it imports) sets CPython's flag
    for an unhandled KeyboardInterrupt, whoever handles it after (``_outcome``, or a command that stops on it);
    ``python -m`` would then end by SIGINT instead of the status decided. Running a string clears the flag (CPython
    3.11-3.13 alike; tests/test_interrupts.py). A Ctrl-C that arrives now, the work over, leaves the status as
    decided; running the string again clears what it set."""
    while True:
        try:
            exec("pass")
            return
        except KeyboardInterrupt:
            continue


def _outcome(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None) -> int | None:
    """main()'s exit status, or the exit its UserError, Ctrl-C or closed pipe asks for."""
    try:
        return main(argv)
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


def invocation(module: str, args: argparse.Namespace, argv: Sequence[str] | None) -> dict:
    """A command as run (its line, for people) and as meant (its parsed arguments, every path resolved, --verbose
    aside): two invocations are the same command when their meanings are equal, whatever the flags' order, a
    trailing slash, ./A for A or a link for its target."""
    return {"command": command_line(module, argv), "arguments": meaning(args)}


def meaning(args: argparse.Namespace) -> dict:
    """The parsed arguments as JSON values, paths resolved, --verbose left out."""

    def value(item: Any) -> Any:
        if isinstance(item, Path):
            return os.path.realpath(item)
        if isinstance(item, list | tuple):
            return [value(part) for part in item]
        if item is None or isinstance(item, bool | int | float | str):
            return item
        return str(item)

    return {name: value(item) for name, item in sorted(vars(args).items()) if name != "verbose"}


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
    try:
        if not path.exists():
            raise argparse.ArgumentTypeError(f"{path} does not exist")
    except OSError as err:  # a directory on the way that this user cannot look into
        raise argparse.ArgumentTypeError(f"cannot look at {path}: {err.strerror}") from None
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
    _check_kind(path, "dir")
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a file, not a directory; choose another path")
    _check_writable(path)
    return path


def output_file(text: str) -> Path:
    """argparse type: a file this process can create or replace."""
    path = _output_path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory; give a file name inside it")
    _check_kind(path, "file")
    _check_writable(path.parent if path.parent != Path("") else Path("."))
    return path


def _check_kind(path: Path, want: str) -> None:
    """A FIFO, socket or device at the path, a symlink loop or a dangling link on its way: refused before anything
    is opened (an open() of a FIFO would wait for a writer forever)."""
    problem = obstacle(path, want, odd_only=True)
    if problem:
        raise argparse.ArgumentTypeError(f"{path} {problem}; choose another path")


def _check_writable(path: Path) -> None:
    """The path itself if it exists, else its nearest existing ancestor, must be a writable directory."""
    existing = path.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create {path}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {existing} (permission denied); choose another path")
