"""Reading and writing the files numprec keeps, the same way in every command: a file is replaced atomically (write
a temporary file beside it, fsync, rename) or appended to (flushed and synced), with the modes the user's umask
allows; a file that is missing, not a regular file, not UTF-8 or not what it should be is one UserError line saying
which and what to do, never a traceback. Below every other module of numprec but errors.py."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from harness.core.errors import UserError


@contextmanager
def writing_out(path: Path) -> Iterator[None]:
    """Writing what --out named: a write that fails there (disk full, read-only) is one line, never a traceback."""
    try:
        yield
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror}; choose a writable --out") from None


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    temporary = synced_temporary(Path(path), data)
    try:
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def synced_temporary(path: Path, data: bytes) -> Path:
    """``data`` in a new temporary file beside ``path`` (``.NAME.*.tmp``), on disk, with the modes the umask allows."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600; results are meant to be shared as the user's umask allows, like open() does
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def is_temporary_of(name: str, path: Path) -> bool:
    """Whether ``name`` is one of ``synced_temporary``'s files for ``path`` (``.NAME.*.tmp``): what a write killed
    before its rename leaves beside it.

    >>> is_temporary_of(".frontier.json.k2x9a1.tmp", Path("out/frontier.json"))
    True
    >>> is_temporary_of("notes.txt", Path("frontier.json")), is_temporary_of(".frontier.json", Path("frontier.json"))
    (False, False)
    """
    return name.startswith(f".{path.name}.") and name.endswith(".tmp")


def holds_only_temporaries_of(path: Path) -> bool:
    """Whether ``path``'s directory holds nothing but ``synced_temporary``'s leftovers for ``path`` (or nothing at
    all): what a command killed in its record's first write leaves, still that command's own directory."""
    return all(is_temporary_of(entry.name, path) for entry in path.parent.iterdir())


def aside_path(path: Path) -> Path:
    """Where ``path`` goes when a command replaces it, never deleting it: ``NAME.previous-<UTC time>`` beside it (a
    file keeps its suffix), a name not yet taken."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    is_file = path.suffix and os.path.isfile(path) and not os.path.islink(path)
    stem, suffix = (path.stem, path.suffix) if is_file else (path.name, "")
    for count in range(1, 1000):
        candidate = path.parent / f"{stem}.previous-{stamp}{'' if count == 1 else f'-{count}'}{suffix}"
        if not os.path.lexists(candidate):
            return candidate
    raise UserError(f"{path.parent} holds too many previous copies of {path.name}; move some away")


def move_aside(path: Path) -> Path:
    """``path`` renamed aside (aside_path), for a command that replaces it; where it went."""
    aside = aside_path(path)
    os.rename(path, aside)
    return aside


def replace_text(path: Path, text: str) -> Path | None:
    """Write ``text`` to ``path``; a file there that holds other text is moved aside first (where it went is
    returned, for the command to say), one that holds the same is left as it is."""
    if os.path.isfile(path) and not os.path.islink(path) and Path(path).read_text(encoding="utf-8") == text:
        return None
    aside = move_aside(path) if os.path.lexists(path) else None
    atomic_write_text(path, text)
    return aside


def append_lines(path: Path, lines: Iterable[str]) -> None:
    """Append ``lines`` (each ending in a newline) to ``path``, flushed and synced before returning. A last line cut
    short by a crash is finished first with a newline, so that it stays one damaged line and the new ones whole."""
    path = Path(path)
    data = "".join(lines).encode("utf-8")
    with open(path, "ab") as handle:
        if handle.tell() > 0:
            with open(path, "rb") as last:
                last.seek(-1, os.SEEK_END)
                if last.read(1) != b"\n":
                    data = b"\n" + data
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def follow_umask(path: Path) -> None:
    """Give ``path`` (a file, or a directory and everything under it) the modes the user's umask allows. safetensors
    writes its files 0600 whatever the umask; weights are results like any other, to be shared as the user set."""
    path = Path(path)
    mask = umask()
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if not item.is_symlink():
            os.chmod(item, (0o777 if item.is_dir() else 0o666) & ~mask)


def umask() -> int:
    current = os.umask(0o022)  # reading the umask means setting it: put it straight back
    os.umask(current)
    return current


def check_regular_file(path: Path) -> None:
    """A file numprec reads or replaces must be a regular file (not a directory or a device)."""
    if path.exists() and not path.is_file():
        raise UserError(
            f"{path} is not a regular file (a directory stands there?); move it away, or choose another --out"
        )


def read_lines(path: Path) -> list[tuple[bytes, str | None]]:
    """A record file's lines, each as its bytes (newline included) and its text, None for a line that is not UTF-8:
    such a line is damaged, the rest of the file is read, and a command that cannot recompute it keeps its bytes."""
    check_regular_file(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}; fix its permissions, or choose another --out") from None
    lines: list[tuple[bytes, str | None]] = []
    for raw in data.splitlines(keepends=True):
        try:
            lines.append((raw, raw.decode("utf-8")))
        except UnicodeDecodeError:
            lines.append((raw, None))
    return lines


def parse_json_line(line: str):
    """A JSON value from one line of a .jsonl file, or None where the line is no JSON numprec writes: cut short,
    garbage, nested past any record, or holding a number JSON cannot carry (1e999, NaN)."""
    try:
        return json.loads(line, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        return None


def _no_constant(name: str):
    raise ValueError(f"{name} is no JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large for a number")
    return value


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


Row = TypeVar("Row")


def read_csv_rows(
    path: Path, required: Iterable[str], parse: Callable[[dict[str, str]], Row], what: str
) -> tuple[list[Row], list[str]]:
    """The rows of a CSV record file (results.csv of a run or a sweep), each through ``parse``, and its damaged rows
    (``parse`` raised ValueError, TypeError, KeyError or OverflowError: cut short, a value of the wrong type) as CSV
    lines under the file's header, for a command that cannot compute them again to keep. A file that is not
    ``what`` (a required column missing), not UTF-8, no CSV or not a regular file is one UserError line."""
    if not path.exists():
        return [], []
    check_regular_file(path)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = set(required) - set(reader.fieldnames or [])
            if missing:
                raise UserError(f"{path} is not {what} (missing {', '.join(sorted(missing))}); choose another --out")
            rows, damaged = [], []
            for record in reader:
                try:
                    rows.append(parse(record))
                except (TypeError, ValueError, KeyError, OverflowError):
                    damaged.append(csv_line([record.get(name) or "" for name in reader.fieldnames or []]))
            return rows, damaged
    except UnicodeDecodeError:
        raise UserError(
            f"{path} is not UTF-8 text; remove it to recompute its cells, or choose another --out"
        ) from None
    except csv.Error as err:
        raise UserError(
            f"{path} is not a CSV file numprec can read ({err}); remove it, or choose another --out"
        ) from None
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}; fix its permissions, or choose another --out") from None


def csv_line(values: list) -> str:
    """One CSV line of ``values``."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.getvalue()
