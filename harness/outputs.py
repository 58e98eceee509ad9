"""Where the commands that read runs write (harness.view, harness.report, harness.export, harness.tasks): never into
a run, never over a file they did not write, and all at once.

An --out is refused in one line, before any work, when it is or lies inside a run directory (one the command reads,
or any other: a directory holding results.csv, samples.jsonl or run.json is a run, written only by the command that
owns it), when it would hold a run the command reads, or when it holds files the command did not write. What a
command wrote is listed, with each file's digest, in the directory's manifest (``.numprec-manifest.json``), so that
the same command run again may replace its own output and nothing else; a page carries its writer's mark.

A directory is built in a staging directory beside --out (``.NAME.numprec-partial``, locked while a process builds
it) and renamed into place when complete: a kill at any moment leaves either no --out, the previous one, or the
finished one; the same command run again clears what a killed one left and builds it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.errors import UserError

MANIFEST = ".numprec-manifest.json"
RUN_FILES = ("results.csv", "samples.jsonl", "run.json")  # any of them makes a directory a run
PARTIAL = ".numprec-partial"
REPLACED = ".numprec-replaced"


def holds_run(path: Path) -> bool:
    """Whether ``path`` is a run directory (harness.eval's, harness.report's, a sweep's)."""
    return any((path / name).exists() for name in RUN_FILES)


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def _resolved(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except OSError as err:  # a symlink loop, a component that cannot be read
        raise UserError(f"cannot resolve {path}: {err.strerror or err}; choose another --out") from None


def check_not_in_a_run(out: Path, reads: Sequence[Path], what: str) -> None:
    """``out`` (a file or directory to write) is neither a run it reads nor inside one, nor inside any other run."""
    target = _resolved(out)
    for run in reads:
        source = _resolved(run)
        if _within(target, source):
            raise UserError(
                f"--out {out} is {'the run' if target == source else 'inside the run'} {run} that {what} reads: "
                "a run is written only by the command that made it; choose a --out outside it"
            )
        if _within(source, target):
            raise UserError(
                f"--out {out} holds the run {run} that {what} reads; choose a --out beside it, not above it"
            )
    try:
        enclosing = next((parent for parent in target.parents if holds_run(parent)), None)
    except OSError as err:
        raise UserError(f"cannot look into {out}'s directories: {err.strerror}; choose another --out") from None
    if enclosing is not None:
        raise UserError(
            f"--out {out} lies inside the run directory {enclosing}: a run is written only by the command that made "
            "it; choose a --out outside it"
        )


def digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()[:16]


def _files(directory: Path) -> dict[str, Path]:
    """Every file under ``directory`` (anything not a directory counts: links, sockets) by its relative path."""
    return {str(p.relative_to(directory)): p for p in sorted(directory.rglob("*")) if not p.is_dir() or p.is_symlink()}


def foreign_files(directory: Path, module: str) -> list[str]:
    """The entries of an existing ``directory`` that ``module`` did not write there as they are now: all of them
    without a manifest of ``module``'s; those missing from it or changed since otherwise."""
    try:
        found = _files(directory)
        empty_dirs = [
            str(p.relative_to(directory)) + "/" for p in directory.rglob("*") if p.is_dir() and not any(p.iterdir())
        ]
        manifest = {}
        if (directory / MANIFEST).is_file():
            with contextlib.suppress(ValueError):
                manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        listed = (
            manifest.get("files", {}) if isinstance(manifest, dict) and manifest.get("written_by") == module else {}
        )
        listed = listed if isinstance(listed, dict) else {}
        foreign = [
            name
            for name, path in found.items()
            if name != MANIFEST
            and (name not in listed or path.is_symlink() or not path.is_file() or digest(path) != listed[name])
        ]
    except OSError as err:
        raise UserError(f"cannot read {directory}: {err.strerror}; choose another --out") from None
    if found and not listed:  # no manifest of ours: every entry, the manifest too, is someone else's
        return sorted(found) + empty_dirs
    return foreign + empty_dirs


def check_out_dir(out: Path, reads: Sequence[Path], module: str) -> None:
    """A directory --out for ``module``: not in a run, and new, empty, or ``module``'s own earlier output."""
    what = f"python -m {module}"
    check_not_in_a_run(out, reads, what)
    if not out.is_dir():
        return
    foreign = foreign_files(out, module)
    if foreign:
        kind = "a run" if holds_run(out) else f"files {what} did not write"
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UserError(f"{out} already holds {kind} ({shown}); give --out a new or empty directory")


def check_out_file(out: Path, reads: Sequence[Path], module: str, mark: bytes) -> None:
    """A file --out for ``module``: not in a run, and new or a file ``module`` wrote (it starts with ``mark`` within
    its first 4 KB)."""
    check_not_in_a_run(out, reads, f"python -m {module}")
    if not out.exists() and not out.is_symlink():
        return
    try:
        with open(out, "rb") as handle:
            head = handle.read(4096)
    except OSError as err:
        raise UserError(f"cannot read {out}: {err.strerror}; choose another --out") from None
    if out.is_symlink() or mark not in head:
        raise UserError(f"{out} exists and was not written by python -m {module}; choose another --out, or move it")


@contextlib.contextmanager
def staged_dir(out: Path, module: str, command: str) -> Iterator[Path]:
    """``with staged_dir(out, module, command) as stage:`` write the output into ``stage``; on leaving the block it
    is listed in a manifest and renamed to ``out`` (replacing ``module``'s earlier output there). An exception or a
    Ctrl-C removes it; a kill leaves it, for the next run of the command to clear."""
    out = Path(out)
    stage = out.parent / f".{out.name}{PARTIAL}"
    replaced = out.parent / f".{out.name}{REPLACED}"
    made = [parent for parent in [out.parent, *out.parent.parents] if not parent.exists()]
    try:
        stage.mkdir(parents=True, exist_ok=True)
        fd = os.open(stage, os.O_RDONLY)
    except OSError as err:
        raise UserError(f"cannot use {out} as an output directory: {err.strerror}; pass another --out") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(f"another process is writing {out}; wait for it to finish, or pass another --out") from None
    try:
        _clear(stage)  # what a killed run of the command left
        if replaced.exists():
            shutil.rmtree(replaced, ignore_errors=True)
        try:
            yield stage
            files = {name: digest(path) for name, path in _files(stage).items()}
            manifest = {"written_by": module, "command": command, "files": files}
            (stage / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
            _sync(stage)
            if out.exists():
                os.rename(out, replaced)
            os.rename(stage, out)
            _sync(out.parent)
            shutil.rmtree(replaced, ignore_errors=True)
        except OSError as err:
            raise UserError(f"cannot write {out}: {err.strerror}; choose a writable --out") from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for parent in made:  # the directories made for --out, if nothing else went into them
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise
    finally:
        os.close(fd)


def _clear(directory: Path) -> None:
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _sync(directory: Path) -> None:
    """Every file under ``directory``, and the directory itself, on disk before it is renamed into place."""
    for path in [*(p for p in directory.rglob("*") if p.is_file()), directory]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def clear_strays(out: Path) -> None:
    """The temporary files a killed atomic write of ``out`` left beside it (harness/files.py names them so)."""
    for stray in out.parent.glob(f".{out.name}.*.tmp"):
        with contextlib.suppress(OSError):
            stray.unlink()
