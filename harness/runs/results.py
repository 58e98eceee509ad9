"""One results schema: a results row (``CellResult``, one per finished cell of results.csv), the key of a cell
(``CellKey``), and a sample (``Sample``, one per problem of samples.jsonl), with the one reader of each file kind.

A row or a sample read back from disk is evidence, not truth: a row that names no cell harness.eval could have
computed, or a sample line that is not a sample (cut short, garbage, not UTF-8, a number JSON cannot carry, nested
past any record, a field missing or of the wrong type, a cell out of range), is counted as damaged and set aside,
never read as if it were whole. harness/runs/rundir.py decides what a run directory does with them.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TypedDict

from harness.core.errors import UserError
from harness.core.files import parse_json_line, read_csv_rows, read_lines
from harness.questions.problems import Task, check_cell_bounds


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
    # What the attention's KV cache held where a precision set it (+kv-fp8): its format and how it ran
    kv_cache: str = ""
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
    cut_replies: int = 0  # served models: replies that ran past the request's budget or first line, cut to them
    # How the model was asked and how its answer was read: the prompt style (few-shot, the paper's; zero-shot; cot)
    # and the answer mode (first-line, the paper's; free-form:BUDGET:THINK_END), harness/questions/answers.py.
    prompt_style: str = "few-shot"
    answer_mode: str = "first-line"
    # Length is a result: generated tokens per problem (mean, median, 90th percentile, most), thinking and answer
    # tokens (free form: before and after the thinking block's end), and the generations the budget cut (truncated:
    # in free form their own verdict, never read as an answer).
    tokens_mean: float = 0.0
    tokens_median: float = 0.0
    tokens_p90: float = 0.0
    tokens_max: int = 0
    thinking_tokens_mean: float = 0.0
    answer_tokens_mean: float = 0.0
    truncated: int = 0
    # Outputs whose statements of the answer differ (harness/scoring/: a conflict, never correct; among no_answer)
    conflicts: int = 0
    # A checkpoint whose layers hold several formats (harness.quantize --recipe): which formats, in how many of the
    # linear layers, and the bits a weight as stored (lm_head apart); weight_bits is then its base format's
    mix: str = ""
    # How the weights were rounded onto the format's grid (harness/models/rounding.py: rtn, gptq, awq, autoround, ...);
    # the precision's name carries it where it is not the format's own (nvfp4+gptq)
    rounding: str = ""

    @property
    def key(self) -> CellKey:
        return CellKey.of(self)


COLUMNS = [f.name for f in fields(CellResult)]
# Columns added after run directories were already written; a file without them reads them as "" (not recorded).
LATER_COLUMNS = {"kernel", "matmul_precision", "flip_k", "flip_outputs", "flip_verdicts", "flip_batch"}
LATER_COLUMNS |= {"precision_source", "endpoint", "served_model", "request_mode", "decoding_params", "prompt_tokens"}
LATER_COLUMNS |= {"machine", "cut_replies", "prompt_style", "answer_mode", "tokens_mean", "tokens_median"}
LATER_COLUMNS |= {"tokens_p90", "tokens_max", "thinking_tokens_mean", "answer_tokens_mean", "truncated", "conflicts"}
LATER_COLUMNS |= {"kv_cache", "mix", "rounding"}
_INT_COLUMNS = {f.name for f in fields(CellResult) if f.type == "int"}
_FLOAT_COLUMNS = {f.name for f in fields(CellResult) if f.type == "float"}


@dataclass(frozen=True)
class CellKey:
    """What identifies a cell inside one run directory (samples, decoding, prompt and answer mode are fixed per run;
    a run of several seeds holds a cell per seed): the one key that planning, samples, rows, reports and progress
    lines use. Build it with ``cell_key`` or ``CellKey.of``."""

    model: str
    precision: str
    adapter: str
    task: str  # the family: add, iter_add, mul
    operands: int
    truncate: str  # "" or the number of digits kept, as text (it is read back from CSV and JSON alike)
    base: int
    length: int
    seed: int = 0

    FIELDS = ("model", "precision", "adapter", "task", "operands", "truncate", "base", "length", "seed")

    @classmethod
    def of(cls, record) -> CellKey:
        """The key of a sample (a mapping; one written before seeds were recorded is seed 0 until its run directory
        gives it the run's) or of anything with the key's attributes."""
        if isinstance(record, dict):
            return cell_key(*(record[name] for name in cls.FIELDS[:-1]), record.get("seed", 0))
        return cell_key(*(getattr(record, name) for name in cls.FIELDS))

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


def cell_key(model, precision, adapter, task, operands, truncate, base, length, seed=0) -> CellKey:
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
        int(seed),
    )


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
    try:
        task = Task(row.task, row.operands, int(row.truncate) if str(row.truncate).strip() else None)
        check_cell_bounds(row.base, row.length, task)
    except UserError as err:
        raise ValueError(str(err)) from None
    if not 1 <= row.n <= 1_000_000 or not 0 <= row.correct <= row.n:
        raise ValueError(f"n {row.n}, correct {row.correct}")


def read_results(path: Path) -> tuple[list[CellResult], list[str]]:
    """The rows of a results file, and its damaged rows (cut short, a value of the wrong type, a cell out of range) as
    CSV lines under the file's header: such a row's cell counts as not finished, and a command that cannot compute it
    again keeps the line as it was."""
    return read_csv_rows(path, set(COLUMNS) - LATER_COLUMNS, _parse_row, "a numprec results file")


def csv_text(rows: Iterable, columns: list[str], decimals: dict[str, int], header: bool = True) -> str:
    """Dataclass rows as CSV text under a header of ``columns`` (none with ``header=False``: lines to append), the
    named float columns rounded to their number of decimals."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    if header:
        writer.writeheader()
    for row in rows:
        record = asdict(row)
        writer.writerow({**record, **{name: f"{record[name]:.{places}f}" for name, places in decimals.items()}})
    return buffer.getvalue()


RESULT_DECIMALS = {"accuracy": 4, "ci_low": 4, "ci_high": 4, "wall_s": 1, "tokens_per_s": 1, "footprint_mb": 1}


def results_csv_text(rows: Iterable[CellResult], header: bool = True) -> str:
    return csv_text(rows, COLUMNS, RESULT_DECIMALS, header)


def samples_seed(rows: Iterable[CellResult], identity: dict) -> int:
    """The seed of samples written when a run had one seed, which do not name it: its rows' (run.json's identity
    named it too)."""
    seeds = {row.seed for row in rows} or {identity.get("seed", 0)}
    return seeds.pop() if len(seeds) == 1 else identity.get("seed", 0)


class Sample(TypedDict, total=False):
    """One problem of a finished cell, a line of samples.jsonl: the cell's key, the problem, the prompt, the model's
    output, the answer read from it, the rule that read it, the gold answer and the verdict; ``digest`` covers the
    evidence (harness/runs/evidence.py)."""

    model: str
    precision: str
    adapter: str
    task: str
    operands: int
    truncate: int | str
    base: int
    length: int
    index: int
    expression: str
    prompt: str
    output: str
    extracted: str | None
    rule: str
    gold: str
    correct: bool
    digest: str
    seed: int  # the run seed its cell's problems were drawn with (absent in samples written before seeds were)
    tokens: int  # generated tokens (absent before lengths were recorded)
    thinking_tokens: int  # of them, the thinking block's (free form)
    truncated: bool  # the budget cut the generation before its end


# The fields every sample has, with their types; the others (truncate, extracted, digest) are checked where present.
SAMPLE_FIELDS = {
    "model": str,
    "precision": str,
    "adapter": str,
    "task": str,
    "operands": int,
    "base": int,
    "length": int,
    "index": int,
    "expression": str,
    "prompt": str,
    "output": str,
    "rule": str,
    "gold": str,
    "correct": bool,
}
# Fields of later samples, checked where present.
OPTIONAL_FIELDS = {"seed": int, "tokens": int, "thinking_tokens": int, "truncated": bool}
# What a run directory keeps of each sample in memory for its reports (paired comparisons, error anatomy): all but
# the prompt and the output, which are most of a sample's bytes.
BULKY_FIELDS = ("prompt", "output")


def read_sample(line: str) -> tuple[Sample | None, str | None]:
    """(the sample on a samples.jsonl line, None) or (None, why it is none)."""
    record = parse_json_line(line)
    if not isinstance(record, dict):
        return None, "not a JSON sample"
    for name, kind in SAMPLE_FIELDS.items():
        if name not in record:
            return None, f"no '{name}'"
        value = record[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return None, f"'{name}' is {type(value).__name__}, not {kind.__name__}"
    if record.get("extracted") is not None and not isinstance(record["extracted"], str):
        return None, "'extracted' is not text"
    truncate = record.get("truncate", "")
    if not isinstance(truncate, (str, int)) or isinstance(truncate, bool):
        return None, "'truncate' is not a number"
    if "digest" in record and not isinstance(record["digest"], str):
        return None, "'digest' is not text"
    for name, kind in OPTIONAL_FIELDS.items():
        value = record.get(name)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            return None, f"'{name}' is {type(value).__name__}, not {kind.__name__}"
    try:
        key = CellKey.of(record)
        check_cell_bounds(
            key.base, key.length, Task(key.task, key.operands, int(key.truncate) if key.truncate else None)
        )
    except (TypeError, ValueError, KeyError, OverflowError, UserError):
        return None, "its cell's fields name no cell harness.eval computes"
    if not 0 <= record["index"] < 1_000_000:
        return None, f"index {record['index']} is out of range"
    return record, None


@dataclass
class SamplesFile:
    """What samples.jsonl holds: its valid samples in file order, and each damaged line as (line number, why, its
    bytes as they were, for a command that cannot recompute a damaged cell to keep)."""

    samples: list[Sample]
    damaged: list[tuple[int, str, bytes]]

    def said(self) -> str:
        """The damaged lines in words, for a repair line: '2 damaged line(s) (line 6: not a JSON sample; ...)'."""
        first = "; ".join(f"line {number}: {why}" for number, why, _ in self.damaged[:3])
        return f"{len(self.damaged)} damaged line(s) ({first}{'; ...' if len(self.damaged) > 3 else ''})"


def read_samples_file(path: Path) -> SamplesFile:
    """The one reader of samples.jsonl (run directories, rescore, diff, reports): bytes that are not UTF-8 damage
    their lines only; nothing raises but a file that is not a regular file or cannot be read (one UserError line)."""
    if not path.exists():
        return SamplesFile([], [])
    samples, damaged = [], []
    for number, (raw, line) in enumerate(read_lines(path), 1):
        if not raw.strip():
            continue
        sample, problem = read_sample(line) if line is not None else (None, "not UTF-8 text")
        if problem:
            damaged.append((number, problem, raw if raw.endswith(b"\n") else raw + b"\n"))
        else:
            samples.append(sample)
    return SamplesFile(samples, damaged)


def slim(sample: Sample) -> Sample:
    """A sample less its BULKY_FIELDS: what reports read."""
    return {name: value for name, value in sample.items() if name not in BULKY_FIELDS}  # type: ignore[return-value]
