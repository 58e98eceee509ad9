"""Where the commands that read runs write (harness.view, harness.report, harness.export, harness.tasks): never into
a run, never over anything they did not make, never through a link, and all at once.

An --out is refused in one line, before any work and again once its lock is held, when it is or lies inside a run
directory (one the command reads, or any other: a directory holding results.csv, samples.jsonl or run.json is a
run, written only by the command that owns it), when it would hold a run the command reads, when it is a link, or
when it holds anything that is not provably this exact command's earlier output. Ownership is by content: the
directory's manifest (``.numprec-manifest.json``) records the writing module, the whole command line, the identity of
every input run (its path and the digests of its run.json and results.csv) and every file's digest; the same command
on the same inputs may replace what it wrote there, unchanged, and nothing else. A run in --out is replaced only by
the harness.report command that made it; export and tasks never write runs and never replace one.

A directory is built in a staging directory beside --out (``.NAME.numprec-partial``, marked as this command's and
locked while a process builds it) and renamed into place when complete: a kill at any moment leaves either no
--out, the previous one, or the finished one; the same command run again clears what a killed one left (its own
staging only: a staging name that is a link, a file, or another's directory is refused, naming it) and builds it
again. Nothing here follows a link: every name is checked with lstat before it is used.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.core.errors import UserError

MANIFEST = ".numprec-manifest.json"
STAGE_MARK = ".numprec-stage"  # inside a staging directory: the module that made it
RUN_FILES = ("results.csv", "samples.jsonl", "run.json")  # any of them makes a directory a run
PARTIAL = ".numprec-partial"
REPLACED = ".numprec-replaced"
WRITES_RUNS = {"harness.report"}  # the readers whose output is itself a run (a merged one)
MANIFEST_BYTES = 1 << 22  # a manifest larger than this is none of ours


def holds_run(path: Path) -> bool:
    """Whether ``path`` is a run directory (harness.eval's, harness.report's, a sweep's)."""
    return any(os.path.lexists(path / name) for name in RUN_FILES)


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def _resolved(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except OSError as err:  # a symlink loop, a component that cannot be read
        raise UserError(f"cannot resolve {path}: {err.strerror or err}; choose another --out") from None


def _kind(path: Path) -> str | None:
    """What is at ``path`` without following a link: "link", "dir", "file", "other", or None for nothing."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as err:
        raise UserError(f"cannot look at {path}: {err.strerror}; choose another --out") from None
    if stat.S_ISLNK(mode):
        return "link"
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


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
    """Every entry under ``directory`` but its directories (links, sockets count), by relative path; links are listed,
    never followed."""
    return {str(p.relative_to(directory)): p for p in sorted(directory.rglob("*")) if not p.is_dir() or p.is_symlink()}


def identities(reads: Sequence[Path]) -> list[dict]:
    """Each input run as a manifest records it: its path, and the digests of its run.json and results.csv."""
    found = []
    for run in reads:
        files = {name: digest(run / name) for name in ("run.json", "results.csv") if (run / name).is_file()}
        found.append({"path": str(_resolved(run)), "files": files})
    return found


def read_manifest(directory: Path) -> dict:
    """The manifest in ``directory`` as a dict ({} where there is none, or it is not one of ours: unreadable, too
    large, too deep, not an object)."""
    path = directory / MANIFEST
    if _kind(path) != "file" or path.stat().st_size > MANIFEST_BYTES:
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def foreign_files(directory: Path, module: str, command: str | None = None, inputs: list | None = None) -> list[str]:
    """The entries of an existing ``directory`` that are not provably ``module``'s earlier output there: all of
    them where its manifest is missing or names another module, another command line (where ``command`` is given) or
    other inputs (where ``inputs`` are); else those missing from the manifest, changed since, or not plain files."""
    try:
        found = _files(directory)
        empty_dirs = [
            str(p.relative_to(directory)) + "/"
            for p in directory.rglob("*")
            if p.is_dir() and not p.is_symlink() and not any(p.iterdir())
        ]
        manifest = read_manifest(directory)
        ours = manifest.get("written_by") == module
        ours = ours and (command is None or manifest.get("command") == command)
        ours = ours and (inputs is None or manifest.get("inputs") == inputs)
        listed = manifest.get("files", {}) if ours else {}
        listed = listed if isinstance(listed, dict) else {}
        foreign = [
            name
            for name, path in found.items()
            if name != MANIFEST and (name not in listed or _kind(path) != "file" or digest(path) != listed[name])
        ]
    except OSError as err:
        raise UserError(f"cannot read {directory}: {err.strerror}; choose another --out") from None
    if found and not listed:  # no manifest of this command's: every entry, the manifest too, is someone else's
        return sorted(found) + empty_dirs
    return foreign + empty_dirs


def check_out_dir(out: Path, reads: Sequence[Path], module: str, command: str | None = None) -> None:
    """A directory --out for ``module``: not a link, not in a run, and new, empty, or provably this command's own
    earlier output (see the module docstring)."""
    what = f"python -m {module}"
    if _kind(out) == "link":
        raise UserError(f"--out {out} is a link: {what} never writes through one; give --out a real directory")
    check_not_in_a_run(out, reads, what)
    kind = _kind(out)
    if kind is None:
        return
    if kind != "dir":
        raise UserError(f"--out {out} exists and is not a directory; give --out a new or empty directory")
    if holds_run(out) and module not in WRITES_RUNS:
        present = ", ".join(name for name in RUN_FILES if os.path.lexists(out / name))
        raise UserError(
            f"{out} already holds a run ({present}), which {what} never replaces; give --out a new or empty directory"
        )
    foreign = foreign_files(out, module, command, identities(reads) if command is not None else None)
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


def _open_stage(stage: Path, out: Path, module: str) -> int:
    """The staging directory, made (and marked as ``module``'s) or found as one ``module`` made before, opened
    without following a link and locked; a link, a file or another's directory there is one line."""
    what = f"python -m {module}"
    kind = _kind(stage)
    if kind not in (None, "dir"):
        raise UserError(f"{stage} is a {kind}, not a staging directory {what} made; remove it or choose another --out")
    try:
        if kind is None:
            stage.mkdir(parents=True)
            (stage / STAGE_MARK).write_text(module + "\n", encoding="utf-8")
        fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileExistsError:
        return _open_stage(stage, out, module)  # another process made it just now
    except OSError as err:
        raise UserError(f"cannot use {out} as an output directory: {err.strerror}; pass another --out") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(f"another process is writing {out}; wait for it to finish, or pass another --out") from None
    mark = stage / STAGE_MARK
    if _kind(mark) != "file" or mark.read_text(encoding="utf-8", errors="replace").strip() != module:
        os.close(fd)
        raise UserError(f"{stage} is not a staging directory {what} made; remove it or choose another --out")
    return fd


def _clear_stale(stage: Path, replaced: Path, module: str) -> None:
    """What a killed run of the command left: its staging directory's entries (never following a link out of it) and
    its replaced output (only where that holds a manifest of the module's)."""
    try:
        for entry in stage.iterdir():
            if entry.name == STAGE_MARK:
                continue
            if _kind(entry) == "dir":
                shutil.rmtree(entry)
            else:
                entry.unlink()
    except OSError as err:
        raise UserError(f"cannot clear {stage}, left by an earlier run: {err.strerror}; remove it by hand") from None
    kind = _kind(replaced)
    if kind == "dir" and read_manifest(replaced).get("written_by") == module:
        shutil.rmtree(replaced, ignore_errors=True)
    elif kind is not None:
        raise UserError(f"{replaced} is in the way and is not {module}'s; remove it or choose another --out")


@contextlib.contextmanager
def staged_dir(out: Path, reads: Sequence[Path], module: str, command: str) -> Iterator[Path]:
    """``with staged_dir(out, reads, module, command) as stage:`` write the output into ``stage``; on leaving the
    block it is listed in a manifest (the command, its inputs' identities, every file's digest) and renamed to
    ``out``, replacing this command's own earlier output there. --out is checked again once the lock is held, so a
    writer that started later sees what an earlier one finished. An exception or a Ctrl-C removes the staging
    directory; a kill leaves it, for the next run of the command to clear."""
    out = Path(out)
    stage = out.parent / f".{out.name}{PARTIAL}"
    replaced = out.parent / f".{out.name}{REPLACED}"
    made = [parent for parent in [out.parent, *out.parent.parents] if not parent.exists()]
    fd = _open_stage(stage, out, module)
    try:
        check_out_dir(out, reads, module, command)  # again, under the lock
        _clear_stale(stage, replaced, module)
        try:
            yield stage
            (stage / STAGE_MARK).unlink()
            files = {name: digest(path) for name, path in _files(stage).items()}
            manifest = {"written_by": module, "command": command, "inputs": identities(reads), "files": files}
            (stage / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
            _sync(stage)
            if _kind(out) == "dir":
                os.rename(out, replaced)
            os.rename(stage, out)
            _sync(out.parent)
            shutil.rmtree(replaced, ignore_errors=True)
        except OSError as err:
            raise UserError(f"cannot write {out}: {err.strerror}; choose a writable --out") from None
    except BaseException:
        if _kind(stage) == "dir":
            shutil.rmtree(stage, ignore_errors=True)
        for parent in made:  # the directories made for --out, if nothing else went into them
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise
    finally:
        os.close(fd)


def _sync(directory: Path) -> None:
    """Every file under ``directory``, and the directory itself, on disk before it is renamed into place."""
    for path in [*(p for p in directory.rglob("*") if p.is_file()), directory]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def clear_strays(out: Path) -> None:
    """The temporary files a killed atomic write of ``out`` left beside it (harness/core/files.py names them so)."""
    for stray in out.parent.glob(f".{out.name}.*.tmp"):
        with contextlib.suppress(OSError):
            stray.unlink()
