"""One results schema and the run directory that holds it.

A run directory holds ``results.csv`` (one row per finished cell), ``samples.jsonl`` (one line per
problem of a finished cell), ``summary.md``, ``accuracy_vs_length.png`` and ``run.json`` (how it was
produced). A cell is the unit of resume: it is either absent or complete. Every file is replaced
atomically (write a temporary file, fsync, rename), so Ctrl-C or kill -9 at any moment leaves each
file either as it was or with the whole new cell, never half-written.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from harness.cli import UserError


@dataclass
class CellResult:
    """One row of results.csv: one (model, precision, task, base, length) cell."""

    model: str
    precision: str
    weight_dtype: str
    activation_dtype: str
    task: str
    operands: int
    base: int
    length: int
    n: int
    correct: int
    accuracy: float
    ci_low: float
    ci_high: float
    seed: int
    # What else a reader needs to trust and compare the row.
    truncate: int | str  # mul:trunc=L keeps L digits; "" when the full answer is asked
    decoding: str
    method: str  # how the weights were made: none (as shipped), cast, bnb, gguf, awq, gptq ...
    weight_bits: int
    group_size: int | str
    footprint_mb: float
    adapter: str
    backend: str
    no_answer: int  # generations from which no answer could be extracted
    gen_tokens: int
    wall_s: float
    tokens_per_s: float
    # The code that runs the linear layers, read off the loaded model (torch.Linear, bitsandbytes.Linear4bit,
    # gptqmodel.TorchAtenAwqLinear, llama.cpp ...): the same precision runs on other kernels on other machines.
    kernel: str = ""
    # The matrix multiplies' arithmetic in force: "ieee fp32", "ieee fp32 (tf32 off)", "tf32", bfloat16, ...
    matmul_precision: str = ""
    # --invariance-check K: the cell's first K problems generated again one at a time (batch size 1); how many
    # outputs and how many verdicts differ from the batched run. Reduced precision can make greedy answers depend
    # on the batch (padding and kernel choice change the order of float sums).
    flip_k: int = 0
    flip_outputs: int = 0
    flip_verdicts: int = 0

    @property
    def key(self) -> CellKey:
        return CellKey.of(self)


COLUMNS = [f.name for f in fields(CellResult)]
# Columns added after run directories were already written; a file without them reads them as "" (not recorded).
LATER_COLUMNS = {"kernel", "matmul_precision", "flip_k", "flip_outputs", "flip_verdicts"}
_INT_COLUMNS = {f.name for f in fields(CellResult) if f.type == "int"}
_FLOAT_COLUMNS = {f.name for f in fields(CellResult) if f.type == "float"}


@dataclass(frozen=True)
class CellKey:
    """What identifies a cell inside one run directory (samples, seed and decoding are fixed per run): the one key
    that planning, samples, rows, reports and progress lines use. Build it with ``cell_key`` or ``CellKey.of``."""

    model: str
    precision: str
    adapter: str
    task: str  # the family: add, iter_add, mul
    operands: int
    truncate: str  # "" or the number of digits kept, as text (it is read back from CSV and JSON alike)
    base: int
    length: int

    FIELDS = ("model", "precision", "adapter", "task", "operands", "truncate", "base", "length")

    @classmethod
    def of(cls, record) -> CellKey:
        """The key of a sample (a mapping) or of anything with the key's attributes."""
        get = record.__getitem__ if isinstance(record, dict) else lambda name: getattr(record, name)
        return cell_key(*(get(name) for name in cls.FIELDS))

    @property
    def task_label(self) -> str:
        """As written in configs and flags: add, iter_add:3, mul, mul:trunc=2."""
        if self.task == "iter_add":
            return f"iter_add:{self.operands}"
        return f"{self.task}:trunc={self.truncate}" if self.truncate else self.task

    @property
    def series(self) -> str:
        """'model precision [+adapter]': one line of a plot, one column of a table."""
        return f"{self.model} {self.precision}" + (f" +{Path(self.adapter).name}" if self.adapter else "")


def cell_key(model, precision, adapter, task, operands, truncate, base, length) -> CellKey:
    """The CellKey of these values, normalised (a CSV or JSON field read back equals the value written)."""
    return CellKey(
        str(model),
        str(precision),
        str(adapter or ""),
        str(task),
        int(operands),
        str(truncate or ""),
        int(base),
        int(length),
    )


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600; results are meant to be shared as the user's umask allows, like open() does
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0o022)  # reading the umask means setting it: put it straight back
    os.umask(current)
    return current


def _parse_row(row: dict[str, str]) -> CellResult:
    values: dict = {}
    for name in COLUMNS:
        raw = row.get(name, "")
        if name in LATER_COLUMNS and raw in ("", None):
            continue  # not recorded in an older file: the field's default
        if name in _INT_COLUMNS:
            values[name] = int(raw)
        elif name in _FLOAT_COLUMNS:
            values[name] = float(raw)
        elif name in ("truncate", "group_size"):
            values[name] = int(raw) if raw.strip() else ""
        else:
            values[name] = raw
    return CellResult(**values)


def read_results(path: Path) -> tuple[list[CellResult], int]:
    """The rows of a results file, and how many damaged rows (cut short, a value of the wrong type) were left out:
    such a row's cell simply counts as not finished."""
    if not path.exists():
        return [], 0
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = set(COLUMNS) - set(reader.fieldnames or []) - LATER_COLUMNS
            if missing:
                raise UserError(
                    f"{path} is not a numprec results file (missing {', '.join(sorted(missing))}); choose another --out"
                )
            rows, damaged = [], 0
            for record in reader:
                try:
                    rows.append(_parse_row(record))
                except (TypeError, ValueError):
                    damaged += 1
            return rows, damaged
    except UnicodeDecodeError:
        raise UserError(
            f"{path} is not UTF-8 text; remove it to recompute its cells, or choose another --out"
        ) from None


def csv_text(rows: Iterable, columns: list[str], decimals: dict[str, int]) -> str:
    """Dataclass rows as CSV text under a header of ``columns``, the named float columns rounded to their number
    of decimals."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        record = asdict(row)
        writer.writerow({**record, **{name: f"{record[name]:.{places}f}" for name, places in decimals.items()}})
    return buffer.getvalue()


def results_csv_text(rows: Iterable[CellResult]) -> str:
    decimals = {"accuracy": 4, "ci_low": 4, "ci_high": 4, "wall_s": 1, "tokens_per_s": 1, "footprint_mb": 1}
    return csv_text(rows, COLUMNS, decimals)


class RunDir:
    """The files of one run and the cells already finished in it."""

    # Fields that must agree for two invocations to share a directory: rows would not be comparable otherwise.
    IDENTITY = ("samples", "seed", "decoding")

    def __init__(self, path: Path, identity: dict, command: str, spec: dict):
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-probe"
            probe.write_text("")
            probe.unlink()
        except OSError as err:
            raise UserError(
                f"cannot write to output directory {self.path}: {err.strerror}; pass --out with a writable directory"
            ) from None
        self._lock_fd = _lock_directory(self.path)
        # A kill during an atomic write leaves its temporary file; with the lock held no writer is mid-write.
        for stray in self.path.glob(".*.tmp"):
            stray.unlink(missing_ok=True)
        self.results_path = self.path / "results.csv"
        self.samples_path = self.path / "samples.jsonl"
        self.meta_path = self.path / "run.json"
        self.repairs: list[str] = []  # what resuming found damaged and set right, for the user to read
        rows, damaged = read_results(self.results_path)
        if damaged:
            self.repairs.append(f"{damaged} damaged row(s) of results.csv left out")
        self._check_identity(identity, rows)
        self.rows = rows
        self._reconcile_samples()
        history = self._meta().get("invocations", [])
        # pid, host and start name the holder to a second process that finds the directory locked
        history.append(
            {
                "command": command,
                "spec": spec,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            }
        )
        meta = {"identity": identity, "invocations": history, "versions": library_versions()}
        atomic_write_text(self.meta_path, json.dumps(meta, indent=2) + "\n")

    def close(self) -> None:
        """Release the directory lock (process exit releases it too, kill -9 included)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def done(self) -> set[tuple]:
        return {row.key for row in self.rows}

    def _meta(self) -> dict:
        if not self.meta_path.exists():
            return {}
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            meta = None
        if not isinstance(meta, dict) or not isinstance(meta.get("invocations", []), list):
            raise UserError(
                f"{self.meta_path} is damaged (not numprec's run record); remove it (results.csv and samples.jsonl "
                "are checked on their own) or choose another --out"
            )
        return meta

    def commands(self) -> list[str]:
        """Every command that wrote into this directory, oldest first."""
        return [entry["command"] for entry in self._meta().get("invocations", [])]

    def _check_identity(self, identity: dict, rows: list[CellResult]) -> None:
        """Finished cells must have been made with this command's settings: checked on the rows themselves (each
        carries n, seed and decoding), not only on run.json. A directory with no finished cell takes any command."""
        if not rows:
            return
        for row in rows:
            found = {"samples": row.n, "seed": row.seed, "decoding": row.decoding}
            if found != identity:
                diff = ", ".join(
                    f"{k} {found[k]} there vs {identity[k]} now" for k in identity if found[k] != identity[k]
                )
                raise UserError(
                    f"{self.path} holds a run with other settings ({diff}); pass another --out to keep both"
                )
        previous = self._meta().get("identity")
        if previous and previous != identity:
            diff = ", ".join(
                f"{k} {previous.get(k)} there vs {identity.get(k)} now"
                for k in identity
                if previous.get(k) != identity.get(k)
            )
            raise UserError(f"{self.path} holds a run with other settings ({diff}); pass another --out to keep both")

    def _reconcile_samples(self) -> None:
        """A finished cell is a results row *and* all n of its samples. Samples of a cell with no row (killed
        between the two writes), invalid lines and repeated problems are dropped; a row whose samples are missing
        or incomplete (a deleted or cut samples.jsonl) is dropped too, so that its cell is computed again."""
        lines: dict[CellKey, dict[int, str]] = {}
        invalid = 0
        text = self.samples_path.read_text(encoding="utf-8", errors="replace") if self.samples_path.exists() else ""
        for line in text.splitlines(keepends=True):
            try:
                record = json.loads(line)
                key = CellKey.of(record)
                index = int(record["index"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                invalid += 1
                continue
            lines.setdefault(key, {}).setdefault(index, line if line.endswith("\n") else line + "\n")
        kept_rows, seen, repeated, incomplete = [], set(), 0, 0
        for row in self.rows:
            if row.key in seen:
                repeated += 1
            elif set(lines.get(row.key, {})) == set(range(row.n)):
                kept_rows.append(row)
            else:
                incomplete += 1
            seen.add(row.key)
        if repeated:
            self.repairs.append(f"{repeated} repeated row(s) of results.csv dropped")
        if incomplete:
            self.repairs.append(f"{incomplete} cell(s) missing some of their samples will be computed again")
        if invalid:
            self.repairs.append(f"{invalid} invalid line(s) of samples.jsonl dropped")
        kept = "".join(line for row in kept_rows for _, line in sorted(lines[row.key].items()))
        if kept != text:
            atomic_write_text(self.samples_path, kept)
        if kept_rows != self.rows or self.repairs:
            self.rows = kept_rows
            atomic_write_text(self.results_path, results_csv_text(self.rows))

    def add_cell(self, row: CellResult, samples: list[dict]) -> None:
        """Persist one finished cell: samples first, then the results row that makes the cell count."""
        old = self.samples_path.read_bytes() if self.samples_path.exists() else b""
        new = "".join(json.dumps(sample, ensure_ascii=False) + "\n" for sample in samples).encode("utf-8")
        atomic_write_bytes(self.samples_path, old + new)
        self.rows.append(row)
        atomic_write_text(self.results_path, results_csv_text(self.rows))


def _lock_directory(path: Path) -> int:
    """One writer per run directory: an advisory lock on the directory itself (no lock file to leave behind),
    held until close() or process exit. A second writer would duplicate or lose cells."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(
            f"another process{_holder(path)} is writing to {path}; wait for it to finish, or pass another --out"
        ) from None
    return fd


def _holder(path: Path) -> str:
    """' (pid 123 on host, since 12:00: COMMAND)' from the holder's entry in run.json, when it is there yet."""
    try:
        last = json.loads((path / "run.json").read_text(encoding="utf-8"))["invocations"][-1]
        return f" (pid {last['pid']} on {last['host']}, since {last['started']}: {last['command']})"
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return ""


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("numprec", "torch", "transformers", "accelerate", "gguf", "numpy"):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found
