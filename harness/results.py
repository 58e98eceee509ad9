"""One results schema and the run directory that holds it.

A run directory holds ``results.csv`` (one row per finished cell), ``samples.jsonl`` (one line per
problem of a finished cell), ``summary.md``, ``accuracy_vs_length.png`` and ``run.json`` (how it was
produced). A cell is the unit of resume: it is either absent or complete. Every file is replaced
atomically (write a temporary file, fsync, rename), so Ctrl-C or kill -9 at any moment leaves each
file either as it was or with the whole new cell, never half-written.
"""

from __future__ import annotations

import csv
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
from harness.lock import DirectoryLock
from harness.machine import library_versions, machine_id


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
    # The batch sizes the K problems were generated again at (1 for rows batched with others; 2 for rows that the
    # batched run generated alone), so that a check never compares a batch size with itself.
    flip_batch: str = ""
    # "loaded": this process loaded the weights at that precision; "declared": a served model (--backend api), whose
    # precision is what the user says the server runs.
    precision_source: str = ""
    endpoint: str = ""  # served models: the base URL(s), never the key
    served_model: str = ""  # the model id the server reported
    request_mode: str = ""  # completions (template applied here) or chat (the server's template)
    decoding_params: str = ""  # what the requests asked for (top_k not applied where the API has none)
    prompt_tokens: int = 0  # summed over the cell, as the server counted them (0 where not counted)
    # The machine that computed the cell: an id of run.json's "machines" (CPU instructions, GPU, kernel libraries)
    machine: str = ""

    @property
    def key(self) -> CellKey:
        return CellKey.of(self)


COLUMNS = [f.name for f in fields(CellResult)]
# Columns added after run directories were already written; a file without them reads them as "" (not recorded).
LATER_COLUMNS = {"kernel", "matmul_precision", "flip_k", "flip_outputs", "flip_verdicts", "flip_batch"}
LATER_COLUMNS |= {"precision_source", "endpoint", "served_model", "request_mode", "decoding_params", "prompt_tokens"}
LATER_COLUMNS |= {"machine"}
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


def follow_umask(path: Path) -> None:
    """Give ``path`` (a file, or a directory and everything under it) the modes the user's umask allows. safetensors
    writes its files 0600 whatever the umask; weights are results like any other, to be shared as the user set."""
    path = Path(path)
    mask = _umask()
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if not item.is_symlink():
            os.chmod(item, (0o777 if item.is_dir() else 0o666) & ~mask)


def _umask() -> int:
    current = os.umask(0o022)  # reading the umask means setting it: put it straight back
    os.umask(current)
    return current


def _parse_row(row: dict[str, str]) -> CellResult:
    """A results row, or ValueError/TypeError when a value is of the wrong type or names no possible cell."""
    values: dict = {}
    for name in COLUMNS:
        raw = row.get(name, "")
        if raw is None:  # the header has the column, the line does not: a row cut short
            raise ValueError(f"{name} missing")
        if name in LATER_COLUMNS and raw == "":
            continue  # not recorded in an older file: the field's default
        if name in _INT_COLUMNS:
            values[name] = int(raw)
        elif name in _FLOAT_COLUMNS:
            values[name] = float(raw)
        elif name in ("truncate", "group_size"):
            values[name] = int(raw) if raw.strip() else ""
        else:
            values[name] = raw
    result = CellResult(**values)
    _check_cell_of(result)
    return result


def _check_cell_of(row: CellResult) -> None:
    """A row must name a cell harness.eval could have computed (a task, base, length and n in range)."""
    from harness.problems import Task, check_cell

    try:
        task = Task(row.task, row.operands, int(row.truncate) if str(row.truncate).strip() else None)
        check_cell(row.base, row.length, task)
    except UserError as err:
        raise ValueError(str(err)) from None
    if not 1 <= row.n <= 1_000_000 or not 0 <= row.correct <= row.n:
        raise ValueError(f"n {row.n}, correct {row.correct}")


def read_results(path: Path) -> tuple[list[CellResult], int]:
    """The rows of a results file, and how many damaged rows (cut short, a value of the wrong type) were left out:
    such a row's cell simply counts as not finished."""
    if not path.exists():
        return [], 0
    _check_file(path)
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
    except csv.Error as err:
        raise UserError(
            f"{path} is not a CSV file numprec can read ({err}); remove it, or choose another --out"
        ) from None
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}; fix its permissions, or choose another --out") from None


def _check_file(path: Path) -> None:
    """A run directory's file must be a regular file (not a directory or a device) before it is read or replaced."""
    if path.exists() and not path.is_file():
        raise UserError(
            f"{path} is not a regular file (a directory stands there?); move it away, or choose another --out"
        )


def _read_text(path: Path) -> str:
    """A run file's text; undecodable bytes become U+FFFD (the lines holding them are then invalid, not fatal)."""
    _check_file(path)
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}; fix its permissions, or choose another --out") from None


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


# Every file a run directory holds (harness/report.py writes the last five from the first two).
OUTPUT_FILES = ("results.csv", "samples.jsonl", "run.json", "summary.md", "accuracy_vs_length.png")
OUTPUT_FILES += ("comparisons.csv", "anatomy.csv", "error_anatomy.png")


class RunDir:
    """The files of one run and the cells already finished in it."""

    # Fields that must agree for two invocations to share a directory: rows would not be comparable otherwise.
    IDENTITY = ("samples", "seed", "decoding")

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
            _check_file(self.path / name)
        self._meta()  # the directory's record first: a damaged one is said as such, whatever else is there
        self.repairs: list[str] = []  # what resuming found damaged and set right, for the user to read
        rows, damaged = read_results(self.results_path)
        if damaged:
            self.repairs.append(f"{damaged} damaged row(s) of results.csv left out")
        self._check_identity(identity, rows)
        self.rows = rows
        self._reconcile_samples(recompute)
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
        meta = {**self._meta(), "identity": identity, "invocations": history, "versions": library_versions()}
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
    def done(self) -> set[tuple]:
        return {row.key for row in self.rows}

    def _meta(self) -> dict:
        if not self.meta_path.exists():
            return {}
        _check_file(self.meta_path)
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))  # strictly: a damaged record is not rewritten
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            meta = None
        except OSError as err:
            raise UserError(f"cannot read {self.meta_path}: {err.strerror}; fix it, or choose another --out") from None
        invocations = meta.get("invocations", []) if isinstance(meta, dict) else None
        readable = isinstance(invocations, list) and all(
            isinstance(entry, dict) and isinstance(entry.get("command"), str) for entry in invocations
        )
        if not readable or not isinstance(meta.get("identity", {}), dict):
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

    def _reconcile_samples(self, recompute: bool) -> None:
        """Every finished cell checked against its samples (harness/evidence.py). A cell whose row disagrees with
        its samples, or whose verdicts the current scorer reads differently, is rewritten from them; a cell whose
        samples are missing, foreign or edited is dropped to be computed again (``recompute``), or, where the caller
        cannot compute (rescore), kept as it is and listed in ``untrusted``. Repeated rows and samples, samples of
        no finished cell and invalid lines are dropped when computing (their cells are computed again) and kept
        otherwise. Each repair is said in ``repairs``."""
        from harness.evidence import check_cell, parse_sample

        text = _read_text(self.samples_path) if self.samples_path.exists() else ""
        cells: dict[CellKey, dict[int, dict]] = {}
        leftovers, invalid, repeated_samples = [], 0, 0
        for line in text.splitlines(keepends=True):
            record = parse_sample(line)
            if record is None:
                invalid += 1
                leftovers.append(line)
                continue
            own = cells.setdefault(CellKey.of(record), {})
            if record["index"] in own:
                repeated_samples += 1
                continue
            own[record["index"]] = record
        kept_rows, kept_samples, seen, repeated_rows = [], [], set(), 0
        self.checks, self.untrusted = [], []
        for row in self.rows:
            if row.key in seen:
                repeated_rows += 1
                continue
            seen.add(row.key)
            check = check_cell(row, cells.get(row.key, {}))
            self.checks.append(check)
            where = f"{row.key.series} {row.key.task_label} n={row.length}"
            if check.status == "untrusted" and recompute:
                self.repairs.append(f"{where}: {check.why}; it will be computed again")
                continue
            if check.status == "untrusted":
                self.untrusted.append(f"{where} ({check.why})")
            elif check.status == "rewritten":
                self.repairs.append(f"{where}: row and samples rewritten from the samples' evidence ({check.why})")
            kept_rows.append(check.row)
            kept_samples += check.samples
        orphans = [s for key, own in cells.items() if key not in seen for s in own.values()]
        if repeated_rows:
            self.repairs.append(f"{repeated_rows} repeated row(s) of results.csv dropped")
        if repeated_samples:
            self.repairs.append(f"{repeated_samples} repeated sample(s) of samples.jsonl dropped")
        if recompute and invalid:
            self.repairs.append(f"{invalid} invalid line(s) of samples.jsonl dropped")
        lines = [json.dumps(sample, ensure_ascii=False) + "\n" for sample in kept_samples]
        if not recompute:  # what cannot be recomputed here stays, as it was
            lines += [json.dumps(sample, ensure_ascii=False) + "\n" for sample in orphans] + leftovers
        kept = "".join(lines)
        if kept != text:
            atomic_write_text(self.samples_path, kept)
        if kept_rows != self.rows or self.repairs:
            self.rows = kept_rows
            atomic_write_text(self.results_path, results_csv_text(self.rows))

    def record_machine(self, description: dict) -> str:
        """The id of the machine ``description`` names (harness/machine.py), added to run.json's ``machines`` the
        first time a cell of this run is computed on it; rows name it in their ``machine`` column."""
        identifier = machine_id(description)
        meta = self._meta()
        machines = meta.get("machines") if isinstance(meta.get("machines"), dict) else {}
        if identifier not in machines:
            meta["machines"] = {**machines, identifier: description}
            atomic_write_text(self.meta_path, json.dumps(meta, indent=2) + "\n")
        return identifier

    def machines(self) -> dict[str, dict]:
        """Every machine a cell of this run was computed on, by id."""
        machines = self._meta().get("machines")
        return machines if isinstance(machines, dict) else {}

    def add_cell(self, row: CellResult, samples: list[dict]) -> None:
        """Persist one finished cell: samples first, then the results row that makes the cell count."""
        old = self.samples_path.read_bytes() if self.samples_path.exists() else b""
        new = "".join(json.dumps(sample, ensure_ascii=False) + "\n" for sample in samples).encode("utf-8")
        atomic_write_bytes(self.samples_path, old + new)
        self.rows.append(row)
        atomic_write_text(self.results_path, results_csv_text(self.rows))
