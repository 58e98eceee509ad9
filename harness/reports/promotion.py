"""The last step of the commands that read runs: an output built aside is put in place, the previous one moved aside
(never deleted), and every step of it written down first, so that a kill at any instruction leaves what the same
command, run again, finishes.

A directory is built in ``.NAME.numprec-partial`` beside --out (marked as the command's by ``.numprec-stage`` and
locked while a process builds it); a page in a temporary file beside it. Then, in order, each step named (a test's
``NUMPREC_KILL_AT=STEP`` kills the process there):

- ``staged``: the staged output complete on disk (a directory's manifest written, every file synced);
- ``journal-written``: ``.NAME.numprec-journal`` records the renames planned (what is staged, its digest, and the
  name the previous output moves to, ``NAME.previous-<UTC time>``), synced;
- ``moved-aside``: the previous output renamed aside;
- ``renamed-into-place``: the staged output renamed to --out;
- ``mark-removed``: a directory's staging mark removed; then the journal.

The same command run again reads a journal it finds and completes it (the staged output promoted, or, where it is
gone, the previous output restored), then works as usual. A rerun whose output is identical to what is there leaves
it, and nothing is moved aside.

Two runs at once: the journal, the renames, the temporaries beside --out and every look at what stands there are done
under one lock on --out's parent directory, which a writer holds from its journal's writing to its removal. A journal
seen under that lock is therefore one a killed run left, never one a live writer is still completing; and a second
run of the same command that waited for the lock finds the first one's output in place, whole (its own, if the same,
moves nothing aside). A directory is built under a second lock, on its staging directory: a second run that finds it
held is refused in one line (another process is writing --out).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from harness.core.errors import UserError
from harness.core.faults import fault_point
from harness.core.files import aside_path, is_temporary_of, synced_temporary
from harness.reports.destinations import (
    MANIFEST,
    STAGE_MARK,
    check_out_dir,
    check_out_file,
    digest,
    file_digests,
    identities,
    kind,
    read_manifest,
    what_changed,
)

PARTIAL = ".numprec-partial"
JOURNAL = ".numprec-journal"
STEPS = ("staged", "journal-written", "moved-aside", "renamed-into-place", "mark-removed")
JOURNAL_BYTES = 1 << 16


def staging_name(out: Path) -> Path:
    return out.parent / f".{out.name}{PARTIAL}"


def journal_name(out: Path) -> Path:
    return out.parent / f".{out.name}{JOURNAL}"


@contextlib.contextmanager
def parent_lock(out: Path) -> Iterator[None]:
    """The lock under which the renames beside ``out`` and their journal are done (a moment each)."""
    fd = os.open(out.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _sync(path: Path) -> None:
    """``path`` (a file, or a directory with every file under it) on disk."""
    items = [*(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()), path] if path.is_dir() else [path]
    for item in items:
        fd = os.open(item, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _rename(source: Path, target: Path) -> None:
    os.rename(source, target)
    _sync(target.parent)


def _staged_digest(staged: Path) -> str:
    """A staged output's digest: its manifest's for a directory, its own for a page ("" where it cannot be read)."""
    try:
        return digest(staged / MANIFEST) if kind(staged) == "dir" else digest(staged)
    except OSError:
        return ""


def _read_journal(path: Path, out: Path, module: str) -> dict:
    """A journal found beside ``out``, checked to name only what a journal of ``module`` for ``out`` names."""
    found = kind(path)
    entry = None
    if found == "file" and path.stat().st_size <= JOURNAL_BYTES:
        with contextlib.suppress(ValueError, RecursionError, OSError):
            entry = json.loads(path.read_text(encoding="utf-8"))
    staged, aside = (entry or {}).get("staged"), (entry or {}).get("aside")
    ours = (
        isinstance(entry, dict)
        and entry.get("out") == out.name
        and isinstance(staged, str)
        and (staged == staging_name(out).name or is_temporary_of(staged, out))
        and (aside is None or (isinstance(aside, str) and ".previous-" in aside and "/" not in aside))
        and "/" not in staged
        and isinstance(entry.get("digest"), str)
    )
    if not ours:
        raise UserError(f"{path} is not a journal numprec wrote for {out}; move it away, then run the command again")
    if entry.get("written_by") != module:
        raise UserError(
            f"{path} was left by python -m {entry.get('written_by')}, killed while it put {out} in place; run that "
            "command again to finish it"
        )
    return entry


@contextlib.contextmanager
def lock_beside(out: Path) -> Iterator[None]:
    """The parent lock (parent_lock) where --out's parent exists; where it does not, nothing was ever left beside
    --out and nothing is to be locked yet."""
    if kind(out.parent) != "dir":
        yield
        return
    with parent_lock(out):
        yield


def _finish_left(out: Path, module: str) -> str | None:
    """Complete the final step a killed run of ``module`` left for ``out`` (see the module docstring); what was
    done, in words, or None where nothing was left. The caller holds the parent lock: a live writer's journal is
    never seen here."""
    journal = journal_name(out)
    if not out.parent.is_dir() or kind(journal) is None:
        return None
    entry = _read_journal(journal, out, module)
    staged = out.parent / entry["staged"]
    aside = out.parent / entry["aside"] if entry["aside"] else None
    if kind(staged) is not None:
        if _staged_digest(staged) != entry["digest"]:
            raise UserError(f"{staged} is not what {journal} recorded; move both away, then run the command again")
        if aside is not None and kind(aside) is None and kind(out) is not None:
            _rename(out, aside)
        if kind(out) is not None:
            raise UserError(f"{out} stands where {journal} planned to put {staged}; move it away and run again")
        _rename(staged, out)
        done = f"finished what a killed run left: {out} in place"
    elif kind(out) is None and aside is not None and kind(aside) is not None:
        _rename(aside, out)
        done = f"restored {out} from {aside.name}, where a killed run had moved it"
    else:
        done = f"finished what a killed run left: {out} in place"
    if kind(out) == "dir" and kind(out / STAGE_MARK) == "file":
        (out / STAGE_MARK).unlink()
        _sync(out)
    journal.unlink()
    _sync(out.parent)
    kept = f"; the previous one is {aside.name}" if aside is not None and kind(aside) is not None else ""
    return done + kept


def prepare_out_dir(out: Path, reads: Sequence[Path], module: str) -> None:
    """Before any work: what a killed run of the command left finished, then --out checked (destinations.py)."""
    _prepare(out, module, lambda: check_out_dir(out, reads, module))


def prepare_out_file(out: Path, reads: Sequence[Path], module: str, mark: bytes) -> None:
    """prepare_out_dir for a page: --out checked as check_out_file checks it."""
    _prepare(out, module, lambda: check_out_file(out, reads, module, mark))


def _prepare(out: Path, module: str, check: Callable[[], None]) -> None:
    """A killed run's final step finished, its strays cleared and --out checked, all under the parent lock, so that
    another writer's renames are never seen half done; what was finished said."""
    with lock_beside(out):
        note = _finish_left(out, module)
        clear_strays(out)
        check()
    if note:
        print(note)


def _open_stage(stage: Path, out: Path, module: str) -> int:
    """The staging directory, made (and marked as ``module``'s) or found as one ``module`` made before, opened
    without following a link and locked; a link, a file or another's directory there is one line. A staging
    directory that another writer put in place as --out between its opening and its lock was not the one at that
    name any more: the name is opened again."""
    for _ in range(8):  # each turn follows a whole write of --out by another process: a loop bounded by them
        fd = _lock_stage(stage, out, module)
        try:
            there = os.stat(stage, follow_symlinks=False)
        except FileNotFoundError:
            there = None
        if there is not None and (there.st_dev, there.st_ino) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
            break
        os.close(fd)
    else:
        raise UserError(f"other processes keep writing {out}; wait for them to finish, or pass another --out")
    mark = stage / STAGE_MARK
    if kind(mark) != "file" or mark.read_text(encoding="utf-8", errors="replace").strip() != module:
        os.close(fd)
        raise UserError(
            f"{stage} is not a staging directory python -m {module} made; move it away or choose another --out"
        )
    return fd


def _lock_stage(stage: Path, out: Path, module: str) -> int:
    """The directory at ``stage``, made where there is none, opened and locked; the caller checks that it is still
    the one at that name. Under the parent lock a staging directory is made with its mark, or renamed away, at once."""
    try:
        with lock_beside(out):
            found = kind(stage)
            if found not in (None, "dir"):
                raise UserError(
                    f"{stage} is a {found}, not a staging directory python -m {module} made; move it away or choose "
                    "another --out"
                )
            if found is None:
                stage.mkdir(parents=True)
                (stage / STAGE_MARK).write_text(module + "\n", encoding="utf-8")
            fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:
        raise UserError(f"cannot use {out} as an output directory: {err.strerror}; pass another --out") from None
    fault_point("stage-opened")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(f"another process is writing {out}; wait for it to finish, or pass another --out") from None
    return fd


def _clear_stage(stage: Path) -> None:
    """What a killed build left in the command's own staging directory (never following a link out of it)."""
    try:
        for entry in stage.iterdir():
            if entry.name == STAGE_MARK:
                continue
            if kind(entry) == "dir":
                shutil.rmtree(entry)
            else:
                entry.unlink()
    except OSError as err:
        raise UserError(f"cannot clear {stage}, left by an earlier run: {err.strerror}; move it away") from None


@contextlib.contextmanager
def staged_dir(
    out: Path, reads: Sequence[Path], module: str, invocation: dict, volatile: Sequence[str] = ()
) -> Iterator[Path]:
    """``with staged_dir(out, reads, module, invocation) as stage:`` write the output into ``stage``; on leaving
    the block it is listed in a manifest (the command and its meaning, its inputs' identities, every file's digest)
    and put in place as the module docstring says. A file named in ``volatile`` (a record of when it ran, or of the
    command line as typed) does not make the output of the same command on the same inputs differ. --out is
    checked again once the lock is held. An exception or a Ctrl-C removes the staging directory; a kill leaves
    it, for the next run of the command to finish or clear."""
    out = Path(out)
    stage = staging_name(out)
    made = [parent for parent in [out.parent, *out.parent.parents] if not parent.exists()]
    fd = _open_stage(stage, out, module)
    try:
        prepare_out_dir(out, reads, module)  # again, under the lock
        _clear_stage(stage)
        yield stage
        try:
            note = _promote_dir(stage, out, module, invocation, identities(reads), volatile)
        except OSError as err:
            raise UserError(f"cannot write {out}: {err.strerror}; choose a writable --out") from None
        if note:
            print(note)
    except BaseException:
        if kind(stage) == "dir" and kind(journal_name(out)) is None:
            shutil.rmtree(stage, ignore_errors=True)
        for parent in made:  # the directories made for --out, if nothing else went into them
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise
    finally:
        os.close(fd)


def _promote_dir(
    stage: Path, out: Path, module: str, invocation: dict, inputs: list[dict], volatile: Sequence[str]
) -> str | None:
    """The final sequence for a directory; what it moved aside, in words."""
    files = file_digests(stage)
    manifest = {"written_by": module, **invocation, "inputs": inputs, "files": files}
    (stage / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    _sync(stage)
    fault_point("staged")
    with parent_lock(out):
        previous = read_manifest(out) if kind(out) == "dir" else None
        meant = previous is not None and (previous.get("arguments"), previous.get("inputs")) == (
            invocation.get("arguments"),
            inputs,
        )
        if previous is not None and _same(previous.get("files"), files, volatile if meant else ()):
            shutil.rmtree(stage)  # the same output is in place already: nothing to move
            return None
        aside = aside_path(out) if previous is not None else None
        _put_in_place(out, module, stage, aside, marked=True)
    if aside is None:
        return None
    why = what_changed(previous, invocation.get("arguments", {}), inputs)
    return f"moved the previous {out.name} aside to {aside.name}" + (f" ({why})" if why else "")


def _same(before, files: dict[str, str], volatile: Sequence[str]) -> bool:
    if not isinstance(before, dict):
        return False
    keep = {name: value for name, value in before.items() if name not in volatile}
    return keep == {name: value for name, value in files.items() if name not in volatile}


def _journal(out: Path, module: str, staged: Path, staged_digest: str, aside: Path | None) -> None:
    entry = {
        "written_by": module,
        "out": out.name,
        "staged": staged.name,
        "digest": staged_digest,
        "aside": aside.name if aside else None,
    }
    _write_synced(journal_name(out), (json.dumps(entry) + "\n").encode("utf-8"))
    fault_point("journal-written")


def _write_synced(path: Path, data: bytes) -> Path:
    """``data`` in a new temporary file beside ``path`` (named ``.NAME.*.tmp``), synced, renamed to ``path``."""
    _rename(synced_temporary(path, data), path)
    return path


def _put_in_place(out: Path, module: str, staged: Path, aside: Path | None, marked: bool) -> None:
    """The renames of the final sequence, each after the journal says it is planned (the module docstring)."""
    _journal(out, module, staged, _staged_digest(staged), aside)
    if aside is not None:
        _rename(out, aside)
        fault_point("moved-aside")
    _rename(staged, out)
    fault_point("renamed-into-place")
    if marked:
        (out / STAGE_MARK).unlink()
        _sync(out)
        fault_point("mark-removed")
    journal_name(out).unlink()
    _sync(out.parent)


def replace_file(out: Path, reads: Sequence[Path], module: str, mark: bytes, data: bytes) -> str | None:
    """Write ``data`` to the file ``out`` (a page), the previous one moved aside, with the same journal as a
    directory; what it moved aside, in words. A kill at any step is finished by the next run. All of it is done
    under the parent lock: a page is written in a moment, and its temporary must not be taken for a stray."""
    with lock_beside(out):
        note = _finish_left(out, module)
        check_out_file(out, reads, module, mark)
        clear_strays(out)
        if kind(out) == "file" and digest(out) == hashlib.sha256(data).hexdigest()[:16]:
            return note  # the same page is there already
        temporary = synced_temporary(out, data)
        fault_point("staged")
        aside = aside_path(out) if kind(out) == "file" else None
        _put_in_place(out, module, temporary, aside, marked=False)
    moved = f"moved the previous {out.name} aside to {aside.name}" if aside is not None else None
    return "; ".join(part for part in (note, moved) if part) or None


def clear_strays(out: Path) -> None:
    """The temporary files a killed write of ``out`` (or of its journal) left beside it, none of them recorded in
    a journal (_finish_left has read it first). The caller holds the parent lock, under which alone a writer makes
    such files and renames them away."""
    for pattern in (f".{out.name}.*.tmp", f".{journal_name(out).name}.*.tmp"):
        for stray in out.parent.glob(pattern):
            with contextlib.suppress(OSError):
                stray.unlink()
