"""A run directory's lifecycle: opened under its lock, checked against its evidence, added to cell by cell, closed.

A run directory holds ``results.csv`` (one row per finished cell), ``samples.jsonl`` (one line per problem of a
finished cell), ``run.json`` (every command that wrote here, and the machines that computed its cells) and the reports
harness/reports/summary.py makes from them. A cell is the unit of resume: it is either absent or complete.

Writing is append-only: a finished cell appends its samples to samples.jsonl (flushed and synced), then its row to
results.csv; a crash between the two leaves samples of a cell without a row, which the next open drops (the cell is
computed again), and a line cut short by a kill is a damaged line, which the next open sets aside. So the bytes
written to finish a run are about the size of its files, not their size times the number of cells. Whole files are
rewritten only when opening finds something to repair, and then atomically (harness/core/files.py).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from pathlib import Path

from harness.core.errors import UserError
from harness.core.files import append_lines, atomic_write_bytes, atomic_write_text, check_regular_file
from harness.core.lock import DirectoryLock
from harness.core.machine import library_versions, machine_id
from harness.runs.evidence import check_cell_evidence, invocation_digest, sample_digest
from harness.runs.results import (
    COLUMNS,
    CellKey,
    CellResult,
    Sample,
    read_results,
    read_samples_file,
    results_csv_text,
    samples_seed,
    slim,
)

# Every file a run directory holds (harness/reports/summary.py writes all but the first three from the first two).
OUTPUT_FILES = ("results.csv", "samples.jsonl", "run.json", "summary.md", "accuracy_vs_length.png")
OUTPUT_FILES += ("comparisons.csv", "anatomy.csv", "error_anatomy.png", "lengths.csv", "lengths.png", "pooled.csv")


# What a run's identity said before it recorded prompts and answer modes: the paper's.
IDENTITY_DEFAULTS = {"prompt": "few-shot", "answer": "first-line"}


def recorded_identity(recorded: dict) -> dict:
    """A run's identity as run.json recorded it, in this version's keys (the paper's prompt and answer mode where it
    recorded none; its seed is its rows')."""
    identity = {"samples": recorded.get("samples"), "decoding": recorded.get("decoding")}
    return {**identity, **{key: recorded.get(key, default) for key, default in IDENTITY_DEFAULTS.items()}}


def sample_line(sample: Sample) -> str:
    return json.dumps(sample, ensure_ascii=False) + "\n"


def record_problem(meta) -> str | None:
    """What makes ``meta`` (run.json's content) other than numprec's run record, in words, or None: its
    invocations (each a command, its settings and digest), identity, sources (a merged run's) and machines must have
    their shapes."""
    if not isinstance(meta, dict):
        return f"it holds a JSON {type(meta).__name__}, not an object"
    problem = _invocations_problem(meta.get("invocations", []), "invocations")
    if problem:
        return problem
    if not isinstance(meta.get("identity", {}), dict):
        return "identity is not an object"
    sources = meta.get("merged_from", [])
    if not isinstance(sources, list) or not all(
        isinstance(s, dict) and isinstance(s.get("path"), str) for s in sources
    ):
        return "merged_from is not a list of runs"
    for number, source in enumerate(sources, 1):
        problem = _invocations_problem(source.get("invocations", []), f"merged_from {number}'s invocations")
        if problem:
            return problem
    if not isinstance(meta.get("machines", {}), dict):
        return "machines is not an object"
    return None


def _invocations_problem(invocations, where: str) -> str | None:
    if not isinstance(invocations, list):
        return f"{where} is a {type(invocations).__name__}, not a list"
    for number, entry in enumerate(invocations, 1):
        if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
            return f"{where} entry {number} names no command"
        if not isinstance(entry.get("spec", {}), dict) or not isinstance(entry.get("digest", ""), str):
            return f"{where} entry {number} has settings or a digest of the wrong kind"
    return None


def where_and_when() -> dict:
    """The process, host and start of an invocation, for its record (they name a lock's holder too)."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}


def eval_into(command: str, directory: Path) -> str:
    """A recorded harness.eval command, writing into ``directory``: the run may have been moved or copied since, and
    its recorded --out names another place."""
    words = shlex.split(command)
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word == "--out":
            skip = True
        elif not word.startswith("--out="):
            kept.append(word)
    return shlex.join([*kept, "--out", str(directory)])


class RunDir:
    """The files of one run and the cells already finished in it."""

    def __init__(self, path: Path, identity: dict, command: str, spec: dict, recompute: bool = True):
        """Lock the directory, check what it holds (``recompute``: may drop cells to compute them again; False for
        a command that cannot, which keeps them and lists them in ``untrusted``) and record this invocation."""
        self.path = Path(path)
        self._lock = DirectoryLock(self.path, command)
        try:
            self._open(identity, command, spec, recompute)
        except BaseException:
            self._lock.release()
            raise

    def _open(self, identity: dict, command: str, spec: dict, recompute: bool) -> None:
        # A kill during an atomic write leaves its temporary file; with the lock held no writer is mid-write.
        for stray in self.path.glob(".*.tmp"):
            stray.unlink(missing_ok=True)
        self.results_path = self.path / "results.csv"
        self.samples_path = self.path / "samples.jsonl"
        self.meta_path = self.path / "run.json"
        for name in OUTPUT_FILES:  # each is replaced whole later: a directory in its place stops the run now
            check_regular_file(self.path / name)
        self._meta()  # the directory's record first: a damaged one is said as such, whatever else is there
        self.repairs: list[str] = []  # what opening found damaged and set right (or kept), for the user to read
        rows, damaged_rows = read_results(self.results_path)
        if damaged_rows:
            kept = "kept as they were" if not recompute else "left out"
            self.repairs.append(f"{len(damaged_rows)} damaged row(s) of results.csv {kept}")
        self._check_identity(identity, rows)
        self.rows = rows
        self._reconcile(recompute, damaged_rows)
        history = self._meta().get("invocations", [])
        # pid, host and start name the holder to a second process that finds the directory locked
        history.append({"command": command, "spec": spec, **where_and_when()})
        # Each invocation carries a digest of what it ran (one recorded before digests were is given one now, as
        # samples are): a command or setting edited by hand no longer matches (harness/runs/stored.py checks).
        history = [entry if "digest" in entry else {**entry, "digest": invocation_digest(entry)} for entry in history]
        meta = {**self._meta(), "identity": identity, "invocations": history, "versions": library_versions()}
        meta["sample_digests"] = True  # every sample here carries one: a sample without is an edited one
        meta["invocation_digests"] = True  # likewise every invocation
        atomic_write_text(self.meta_path, json.dumps(meta, indent=2) + "\n")

    def close(self) -> None:
        """Release the directory lock (process exit releases it too, kill -9 included). A directory this run created
        and finished no cell in (stopped by Ctrl-C or an error before its first cell) is removed again: it holds
        nothing but this invocation's record, which goes while the lock is held; the lock then removes the directory
        if nothing else is there."""
        if self._lock.created and not getattr(self, "rows", None):
            for name in ("run.json", "results.csv", "samples.jsonl"):
                (self.path / name).unlink(missing_ok=True)
        self._lock.release()

    @property
    def done(self) -> set[CellKey]:
        return {row.key for row in self.rows}

    def _meta(self) -> dict:
        if not self.meta_path.exists():
            return {}
        check_regular_file(self.meta_path)
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))  # strictly: a damaged record is not rewritten
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            meta = None
        except OSError as err:
            raise UserError(f"cannot read {self.meta_path}: {err.strerror}; fix it, or choose another --out") from None
        if meta is None or record_problem(meta):
            raise UserError(
                f"{self.meta_path} is damaged (not numprec's run record); remove it (results.csv and samples.jsonl "
                "are checked on their own) or choose another --out"
            )
        return meta

    def commands(self) -> list[str]:
        """Every command that wrote into this directory, oldest first."""
        return [entry["command"] for entry in self._meta().get("invocations", [])]

    def _check_identity(self, identity: dict, rows: list[CellResult]) -> None:
        """Finished cells must have been made with this command's settings (samples per cell, decoding, prompt
        style, answer mode): checked on the rows themselves, which carry them, not only on run.json. A directory with
        no finished cell takes any command; cells of other seeds are other cells of the same run."""
        if not rows:
            return
        for row in rows:
            found = {"samples": row.n, "decoding": row.decoding, "prompt": row.prompt_style, "answer": row.answer_mode}
            self._same(identity, found)
        previous = self._meta().get("identity")
        if previous:  # written before prompts and answer modes were recorded: the paper's
            self._same(identity, {key: previous.get(key, IDENTITY_DEFAULTS.get(key)) for key in identity})

    def _same(self, identity: dict, found: dict) -> None:
        differ = [key for key in identity if found.get(key) != identity[key]]
        if differ:
            said = ", ".join(f"{key} {found.get(key)} there vs {identity[key]} now" for key in differ)
            raise UserError(f"{self.path} holds a run with other settings ({said}); pass another --out to keep both")

    def _reconcile(self, recompute: bool, damaged_rows: list[str]) -> None:
        """Every finished cell checked against its samples (harness/runs/evidence.py). A cell whose row disagrees with
        its samples, or whose verdicts the current scorer reads differently, is rewritten from them; a cell whose
        samples are missing, foreign or edited is dropped to be computed again (``recompute``), or, where the caller
        cannot compute (rescore), kept as it is and listed in ``untrusted``. Repeated rows and samples, samples of
        no finished cell and damaged lines are dropped when computing (their cells are computed again) and kept, as
        they were, otherwise. Each repair is said in ``repairs``; the files are rewritten only if one was made."""
        found = read_samples_file(self.samples_path)
        # Samples written when a run had one seed do not name it: it is the rows' (run.json's identity named it too),
        # and a sample is given it where its cell is kept as trusted.
        run_seed = samples_seed(self.rows, self._meta().get("identity", {}))
        # A run written before samples carried digests (none has one) is read as it is, and given them now.
        legacy = (
            bool(found.samples)
            and not self._meta().get("sample_digests")
            and not any("digest" in sample for sample in found.samples)
        )
        cells: dict[CellKey, dict[int, Sample]] = {}
        repeated_samples = 0
        for sample in found.samples:
            own = cells.setdefault(CellKey.of({"seed": run_seed, **sample}), {})
            if sample["index"] in own:
                repeated_samples += 1
                continue
            own[sample["index"]] = sample
        kept_rows, kept_samples, seen, repeated_rows, signed, seeded = [], [], set(), 0, 0, 0
        self.checks, self.untrusted = [], []
        for row in self.rows:
            if row.key in seen:
                repeated_rows += 1
                continue
            seen.add(row.key)
            check = check_cell_evidence(row, cells.get(row.key, {}), digests=not legacy)
            self.checks.append(check)
            where = f"{row.key.series} {row.key.task_label} n={row.length}"
            if check.status == "untrusted" and recompute:
                self.repairs.append(f"{where}: {check.why}; it will be computed again")
                continue
            if check.status == "untrusted":
                self.untrusted.append(f"{where} ({check.why})")
                kept_rows.append(check.row)
                kept_samples += check.samples  # as they were
                continue
            if check.status == "rewritten":
                self.repairs.append(f"{where}: row and samples rewritten from the samples' evidence ({check.why})")
            kept_rows.append(check.row)
            seeded += sum("seed" not in sample for sample in check.samples)
            trusted = [sample if "seed" in sample else {**sample, "seed": row.seed} for sample in check.samples]
            kept_samples += [{**s, "digest": sample_digest(s)} for s in trusted] if legacy else trusted
            signed += len(check.samples) if legacy else 0
        orphans = [s for key, own in cells.items() if key not in seen for s in own.values()]
        if repeated_rows:
            self.repairs.append(f"{repeated_rows} repeated row(s) of results.csv dropped")
        if repeated_samples:
            self.repairs.append(f"{repeated_samples} repeated sample(s) of samples.jsonl dropped")
        if found.damaged:
            self.repairs.append(f"{found.said()} of samples.jsonl {'dropped' if recompute else 'kept as they were'}")
        if seeded:
            self.repairs.append(f"samples written before seeds were recorded: the run's seed given to {seeded}")
        if signed:
            self.repairs.append(
                f"samples written before samples carried digests: a digest added to each of {signed} "
                "(their outputs could not be checked for edits before)"
            )
        lines = [sample_line(sample).encode("utf-8") for sample in kept_samples]
        if not recompute:  # what cannot be recomputed here stays, as it was
            lines += [sample_line(sample).encode("utf-8") for sample in orphans]
            lines += [raw for _, _, raw in found.damaged]
        kept = b"".join(lines)
        if kept != (self.samples_path.read_bytes() if self.samples_path.exists() else b""):
            atomic_write_bytes(self.samples_path, kept)
        self.samples = [slim(sample) for sample in kept_samples]  # what the reports read
        rewrite = kept_rows != self.rows or self.repairs or not self._current_header()
        self.rows = kept_rows
        if rewrite and (self.rows or damaged_rows or self.results_path.exists()):
            text = results_csv_text(self.rows) + ("".join(damaged_rows) if not recompute else "")
            atomic_write_text(self.results_path, text)

    def _current_header(self) -> bool:
        """Whether results.csv, if there is one, has this version's columns (rows are appended under them)."""
        if not self.results_path.exists():
            return True
        with open(self.results_path, encoding="utf-8") as handle:
            return handle.readline().rstrip("\r\n") == ",".join(COLUMNS)

    def record_machine(self, description: dict) -> str:
        """The id of the machine ``description`` names (harness/core/machine.py), added to run.json's ``machines`` the
        first time a cell of this run is computed on it; rows name it in their ``machine`` column."""
        identifier = machine_id(description)
        meta = self._meta()
        machines = meta.get("machines") if isinstance(meta.get("machines"), dict) else {}
        if identifier not in machines:
            meta["machines"] = {**machines, identifier: description}
            atomic_write_text(self.meta_path, json.dumps(meta, indent=2) + "\n")
        return identifier

    def note(self, name: str, value) -> None:
        """Add ``name: value`` to this invocation's record in run.json (what a command learned while it ran, such as
        a served model's pacing)."""
        meta = self._meta()
        meta["invocations"][-1][name] = value
        atomic_write_text(self.meta_path, json.dumps(meta, indent=2) + "\n")

    def machines(self) -> dict[str, dict]:
        """Every machine a cell of this run was computed on, by id."""
        machines = self._meta().get("machines")
        return machines if isinstance(machines, dict) else {}

    def add_cell(self, row: CellResult, samples: list[Sample]) -> None:
        """Persist one finished cell: its samples appended first, then the results row that makes the cell count."""
        append_lines(self.samples_path, [sample_line(sample) for sample in samples])
        if self.results_path.exists():
            append_lines(self.results_path, [results_csv_text([row], header=False)])
        else:
            atomic_write_text(self.results_path, results_csv_text([row]))
        self.rows.append(row)
        self.samples += [slim(sample) for sample in samples]
