"""What stands on the way to an output path, looked at by kind before anything is opened: a FIFO, a socket or a
device where a file or directory should go would block or mislead an open(); a symlink loop or a dangling link among
its directories would fail later, deep in a write. Each is one line here, before any work.

>>> import tempfile, os
>>> base = Path(tempfile.mkdtemp())
>>> os.mkfifo(base / "pipe")
>>> obstacle(base / "pipe", "file")
'is a FIFO, not a regular file'
>>> (base / "loop").symlink_to(base / "loop")
>>> obstacle(base / "loop" / "out", "dir")
'lies under a symlink loop (.../loop)'
>>> (base / "gone").symlink_to(base / "nowhere")
>>> obstacle(base / "gone" / "out", "dir")
'lies under a dangling link (.../gone -> .../nowhere)'
>>> obstacle(base / "gone", "file")
'is a dangling link (.../gone -> .../nowhere)'
>>> obstacle(base / "new" / "out", "dir") is None
True
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def kind_of(mode: int) -> str:
    """A file mode's kind in words: "a directory", "a regular file", "a FIFO", ..."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISLNK(mode):
        return "a link"
    return KINDS.get(stat.S_IFMT(mode), "a special file")


def _short(path: Path) -> str:
    return f".../{path.name}"


def obstacle(path: Path, want: str, odd_only: bool = False) -> str | None:
    """Why ``path`` cannot be an output of kind ``want`` ("dir" or "file"), in words, or None. Every directory on
    its way must be a directory (a link to one is followed, never into a loop or to nothing); the path itself, where
    it exists, must be of the kind wanted once links are followed. Nothing is opened. With ``odd_only``, a regular
    file or directory in the wrong place is left to the caller's own words: only odd kinds, loops and dangling
    links are said."""
    absolute = Path(os.path.abspath(path))
    parts = absolute.parts
    for depth in range(1, len(parts)):
        prefix = Path(*parts[:depth])
        problem = _on_the_way(prefix, odd_only)
        if problem == "missing":
            return None  # from here down the command makes the directories
        if problem:
            return problem
    try:
        mode = os.stat(absolute).st_mode
    except FileNotFoundError:
        return _dangling(absolute, "is")
    except OSError as err:
        return _why(absolute, err)
    if odd_only and (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        return None
    if want == "dir" and not stat.S_ISDIR(mode):
        return f"is {kind_of(mode)}, not a directory"
    if want == "file" and not stat.S_ISREG(mode):
        return f"is {kind_of(mode)}, not a regular file"
    return None


def _on_the_way(prefix: Path, odd_only: bool) -> str | None:
    """A directory on the way to an output: None where it is one (or a link to one), "missing" where nothing is
    there, else why not."""
    try:
        mode = os.stat(prefix).st_mode
    except FileNotFoundError:
        return _dangling(prefix, "lies under") or "missing"
    except OSError as err:
        return _why(prefix, err)
    if odd_only and stat.S_ISREG(mode):
        return "missing"  # the caller says it in its own words
    if not stat.S_ISDIR(mode):
        return f"lies under {_short(prefix)}, which is {kind_of(mode)}"
    return None


def _dangling(path: Path, relation: str) -> str | None:
    """A name that os.stat cannot follow but that is there: a link to nothing."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            target = Path(os.path.join(path.parent, os.readlink(path)))
            return f"{relation} a dangling link ({_short(path)} -> {_short(target)})"
    except OSError:
        return None
    return None


def _why(path: Path, err: OSError) -> str:
    if err.errno == errno.ELOOP:
        return f"lies under a symlink loop ({_short(path)})"
    if err.errno == errno.ENAMETOOLONG:
        return "is too long for the file system"
    return f"cannot be looked at ({_short(path)}: {err.strerror})"


# llm-compressor's environment (bash scripts/setup_quantize.sh): it pins an older transformers than the main one
QUANTIZE_ENV = Path(__file__).resolve().parents[2] / ".venv-quantize"
# on the lent GPU, llm-compressor's site staged by scripts/stage_device.sh (its install names it here)
QUANTIZE_SITE = "NUMPREC_QUANTIZE_SITE"


def quantize_command() -> tuple[list[str], dict[str, str]] | None:
    """The Python, and its environment, that runs a module where llm-compressor's pins hold: .venv-quantize's, the
    project first on its path; else, on the lent GPU, this Python over the site NUMPREC_QUANTIZE_SITE names (the
    image's transformers is llm-compressor's pin; the main site's newer one stays off the path); None where neither
    is here."""
    root = QUANTIZE_ENV.parent
    python = QUANTIZE_ENV / "bin" / "python"
    if python.exists():
        path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
        return [str(python)], {**os.environ, "PYTHONPATH": path}
    site = os.environ.get(QUANTIZE_SITE)
    if site and Path(site).is_dir():
        return [sys.executable], {**os.environ, "PYTHONPATH": os.pathsep.join([site, str(root)])}
    return None


def cache_root() -> Path:
    """numprec's cache: NUMPREC_CACHE, else ~/.cache/numprec (read at each call, so a process can point it
    elsewhere)."""
    return Path(os.environ.get("NUMPREC_CACHE", Path.home() / ".cache" / "numprec"))
