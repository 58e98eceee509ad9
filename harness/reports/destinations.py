"""Where the commands that read runs write (harness.view, harness.report, harness.export, harness.tasks): never into
a run, never over anything they did not make, never through a link, and nothing deleted.

An --out is refused in one line, before any work and again once its lock is held, when it is or lies inside a run
directory (one the command reads, or any other: a directory holding results.csv, samples.jsonl or run.json is a
run, written only by the command that owns it), when it would hold a run the command reads, when it is a link, or
when it holds anything that is not provably the command's own earlier output. Ownership is by content: the
directory's manifest (``.numprec-manifest.json``) records the writing module, the command line and its meaning (the
parsed arguments, paths resolved), the identity of every input run (its path and the digests of its run.json and
results.csv) and every file's digest. An earlier output of the same module, unchanged since, may be replaced; it is
then moved aside (harness/reports/promotion.py), never deleted, so that no manifest, forged or genuine, can cost a
file. A directory holding a run is replaced only by harness.report, and only where the run's own run.json says
harness.report made it, whatever a manifest says; export and tasks never write runs and never replace one.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from harness.core.errors import UserError
from harness.core.paths import obstacle

MANIFEST = ".numprec-manifest.json"
STAGE_MARK = ".numprec-stage"  # inside a staging directory until its output is in place: the module that made it
RUN_FILES = ("results.csv", "samples.jsonl", "run.json")  # any of them makes a directory a run
WRITES_RUNS = {"harness.report"}  # the readers whose output is itself a run (a merged one)
MANIFEST_BYTES = 1 << 22  # a manifest larger than this is none of ours


def holds_run(path: Path) -> bool:
    """Whether ``path`` is a run directory (harness.eval's, harness.report's, a sweep's)."""
    return any(os.path.lexists(path / name) for name in RUN_FILES)


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def resolved(path: Path) -> Path:
    """``path`` with its links followed; a loop or an unreadable component is one line."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError) as err:  # Python 3.11 raises RuntimeError for a symlink loop
        why = getattr(err, "strerror", None) or err
        raise UserError(f"cannot resolve {path}: {why}; choose another --out") from None


def kind(path: Path) -> str | None:
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


def check_path(out: Path, want: str) -> None:
    """``out`` looked at by kind before anything opens it: a FIFO, socket or device, a symlink loop or a dangling
    link on its way is one line."""
    problem = obstacle(out, want)
    if problem:
        raise UserError(f"--out {out} {problem}; choose another --out")


def check_not_in_a_run(out: Path, reads: Sequence[Path], what: str) -> None:
    """``out`` (a file or directory to write) is neither a run it reads nor inside one, nor inside any other run."""
    target = resolved(out)
    for run in reads:
        source = resolved(run)
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


def listing(directory: Path) -> dict[str, Path]:
    """Every entry under ``directory`` but its directories (links, sockets count), by relative path; links are
    listed, never followed."""
    return {str(p.relative_to(directory)): p for p in sorted(directory.rglob("*")) if not p.is_dir() or p.is_symlink()}


def file_digests(directory: Path, leave_out: Sequence[str] = (MANIFEST, STAGE_MARK)) -> dict[str, str]:
    """Each plain file's digest under ``directory`` by relative path (``leave_out`` aside)."""
    return {name: digest(path) for name, path in listing(directory).items() if name not in leave_out}


def identities(reads: Sequence[Path]) -> list[dict]:
    """Each input run as a manifest records it: its path, and the digests of its run.json and results.csv."""
    found = []
    for run in reads:
        files = {name: digest(run / name) for name in ("run.json", "results.csv") if (run / name).is_file()}
        found.append({"path": str(resolved(run)), "files": files})
    return found


def read_manifest(directory: Path) -> dict:
    """The manifest in ``directory`` as a dict ({} where there is none, or it is not one of ours: unreadable, too
    large, too deep, not an object)."""
    path = directory / MANIFEST
    if kind(path) != "file" or path.stat().st_size > MANIFEST_BYTES:
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, OSError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def foreign_files(directory: Path, module: str) -> list[str]:
    """The entries of an existing ``directory`` that are not provably ``module``'s earlier output there: all of
    them where its manifest is missing or names another module; else those missing from the manifest, changed
    since, or not plain files."""
    try:
        found = listing(directory)
        empty_dirs = [
            str(p.relative_to(directory)) + "/"
            for p in directory.rglob("*")
            if p.is_dir() and not p.is_symlink() and not any(p.iterdir())
        ]
        manifest = read_manifest(directory)
        listed = manifest.get("files", {}) if manifest.get("written_by") == module else {}
        listed = listed if isinstance(listed, dict) else {}
        foreign = [
            name
            for name, path in found.items()
            if name != MANIFEST and (name not in listed or kind(path) != "file" or digest(path) != listed[name])
        ]
    except OSError as err:
        raise UserError(f"cannot read {directory}: {err.strerror}; choose another --out") from None
    if found and not listed:  # no manifest of this module's: every entry, the manifest too, is someone else's
        return sorted(found) + empty_dirs
    return foreign + empty_dirs


def run_maker(directory: Path) -> str | None:
    """The module that the run in ``directory`` names as its maker in its own run.json (its last invocation), or
    None where run.json says none."""
    try:
        record = json.loads((directory / "run.json").read_text(encoding="utf-8"))
        command = record["invocations"][-1]["command"]
        return command.split()[2] if command.startswith("python -m ") else None
    except (OSError, ValueError, RecursionError, KeyError, IndexError, TypeError, AttributeError):
        return None


def check_out_dir(out: Path, reads: Sequence[Path], module: str) -> None:
    """A directory --out for ``module``: no odd kind on its way, not a link, not in a run, and new, empty, or
    provably ``module``'s own earlier output (see the module docstring)."""
    what = f"python -m {module}"
    if kind(out) == "link":
        raise UserError(f"--out {out} is a link: {what} never writes through one; give --out a real directory")
    check_path(out, "dir")
    check_not_in_a_run(out, reads, what)
    found = kind(out)
    if found is None:
        return
    if found != "dir":
        raise UserError(f"--out {out} exists and is not a directory; give --out a new or empty directory")
    if holds_run(out):
        present = ", ".join(name for name in RUN_FILES if os.path.lexists(out / name))
        maker = run_maker(out)
        if module not in WRITES_RUNS or maker != module:
            made = f"a run {maker} made" if maker else "a run"
            raise UserError(
                f"{out} already holds {made} ({present}), which {what} never replaces; give --out a new or empty "
                "directory"
            )
    foreign = foreign_files(out, module)
    if foreign:
        held = "a run" if holds_run(out) else f"files {what} did not write"
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UserError(f"{out} already holds {held} ({shown}); give --out a new or empty directory")


def check_out_file(out: Path, reads: Sequence[Path], module: str, mark: bytes) -> None:
    """A file --out for ``module``: no odd kind on its way, not in a run, and new or a file ``module`` wrote (it
    starts with ``mark`` within its first 4 KB). Its kind is looked at before it is opened."""
    found = kind(out)
    if found == "link":
        raise UserError(f"{out} is a link: python -m {module} never writes through one; choose another --out")
    check_path(out, "file")
    check_not_in_a_run(out, reads, f"python -m {module}")
    if found is None:
        return
    try:
        fd = os.open(out, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            head = handle.read(4096)
    except OSError as err:
        raise UserError(f"cannot read {out}: {err.strerror}; choose another --out") from None
    if mark not in head:
        raise UserError(f"{out} exists and was not written by python -m {module}; choose another --out, or move it")


def what_changed(manifest: dict, arguments: dict, inputs: list[dict]) -> str:
    """How the command about to replace an output differs from the one that wrote it, in words ("" where it is
    the same command on the same inputs)."""
    said = []
    before = {entry.get("path"): entry.get("files") for entry in manifest.get("inputs", []) if isinstance(entry, dict)}
    for entry in inputs:
        if entry["path"] in before and before[entry["path"]] != entry["files"]:
            said.append(f"{Path(entry['path']).name} changed since it was written")
    if manifest.get("arguments") != arguments and not said:
        said.append(f"it was written by another command ({str(manifest.get('command', '?'))[:80]})")
    return "; ".join(said)
