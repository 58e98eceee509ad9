"""A finished run directory, read and never written: its rows, samples and record, checked against each other.

The commands that only read runs (harness.diff, harness.view, harness.report's merge, harness.export) read them
here, with the checks harness.eval and harness.rescore make when they open a run (harness/runs/evidence.py):

- results.csv's rows and samples.jsonl's lines are whole (no damaged line, no repeated row or sample);
- each row against its samples: exactly its n problems, each the problem the run's seed draws, unedited (digests),
  its verdicts those the current scorer reads, its counts and interval those of the verdicts (no NaN);
- run.json's shape (invocations, identity, sources, machines), its identity against the rows, each invocation's
  digest (a command or setting edited by hand), the seeds its commands ran against the rows' seeds;
- the rows against the cells run.json's harness.eval commands planned: a run stopped before its end is unfinished,
  and its missing cells are named.

Anything else is one line naming the file and the command that repairs it: harness.rescore where the samples are
whole and only the rows or verdicts disagree with them; harness.eval (the recorded command, into the run) where
samples are missing, damaged or edited, or cells were never computed; harness.report where a merged run's files
were changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import UserError
from harness.core.files import read_json
from harness.models import get_model
from harness.questions.problems import parse_task
from harness.runs.evidence import check_cell_evidence, invocation_digest
from harness.runs.results import CellKey, CellResult, Sample, cell_key, read_results, read_samples_file, samples_seed
from harness.runs.rundir import eval_into, record_problem, recorded_identity


def read_samples(directory: Path) -> list[Sample]:
    """The samples of a run directory, in file order; a missing or damaged samples.jsonl is one UserError."""
    path = directory / "samples.jsonl"
    try:
        if not path.is_file():
            raise UserError(f"{directory} has no samples.jsonl; pass run directories written by harness.eval")
        found = read_samples_file(path)
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}; fix its permissions") from None
    if found.damaged:
        number, problem, _ = found.damaged[0]
        raise UserError(
            f"{path} line {number}: {problem}; it was not written by harness.eval as it is "
            f"({found.said()}; {repair_by_eval(directory, {})})"
        )
    return found.samples


@dataclass
class StoredRun:
    path: Path
    rows: list[CellResult]
    samples: list[Sample]
    record: dict  # run.json
    missing: list[CellKey] = field(default_factory=list)  # cells its commands planned that have no row

    @property
    def commands(self) -> list[str]:
        """The commands that made it: a merged run's sources' (harness/runs/merge.py), then its own."""
        return [entry["command"] for entry in invocations(self.record)]

    def cell_samples(self) -> dict[CellKey, list[Sample]]:
        """Each row's samples, in index order."""
        cells: dict[CellKey, list[Sample]] = {row.key: [] for row in self.rows}
        for sample in self.samples:
            cells.setdefault(CellKey.of(sample), []).append(sample)
        return {key: sorted(found, key=lambda s: s["index"]) for key, found in cells.items()}

    def unfinished(self) -> str:
        """'' for a finished run; else the missing cells in words and the command that computes them."""
        if not self.missing:
            return ""
        shown = "; ".join(f"{k.series} {k.task_label} n={k.length} seed {k.seed}" for k in self.missing[:3])
        more = f" and {len(self.missing) - 3} more" if len(self.missing) > 3 else ""
        return (
            f"{self.path} is unfinished: {len(self.missing)} of its {len(self.missing) + len(self.rows)} planned cells "
            f"have no results ({shown}{more}); {repair_by_eval(self.path, self.record)}"
        )


def invocations(record: dict) -> list[dict]:
    """Every invocation a run's record names: a merged run's sources' (harness/runs/merge.py), then its own."""
    sources = [entry for source in record.get("merged_from", []) for entry in source.get("invocations", [])]
    return [*sources, *record.get("invocations", [])]


def eval_commands(record: dict) -> list[dict]:
    return [entry for entry in invocations(record) if entry["command"].startswith("python -m harness.eval")]


def repair_by_eval(directory: Path, record: dict) -> str:
    """The command that computes a run's cells again (or its missing ones), in words."""
    if record.get("merged_from"):
        return repair_by_report(directory, record)
    evals = eval_commands(record)
    if evals:
        return f"compute them again with: {eval_into(evals[-1]['command'], directory)}"
    return f"compute them again with the harness.eval command that made it, with --out {directory}"


def repair_by_rescore(directory: Path, record: dict) -> str:
    if record.get("merged_from"):
        return repair_by_report(directory, record)
    return f"python -m harness.rescore {directory} rewrites its rows from its samples"


def repair_by_report(directory: Path, record: dict) -> str:
    """A merged run is made again from its sources by the harness.report command that made it."""
    own = [entry["command"] for entry in record.get("invocations", []) if "harness.report" in entry["command"]]
    # into this directory, wherever the merged run was made: it may have been moved or copied since
    again = eval_into(own[-1], directory) if own else f"the harness.report command that made it, with --out {directory}"
    return f"it is a merged run: make it again from its sources with {again}"


def planned_cells(spec: dict) -> set[CellKey] | None:
    """The cells a harness.eval invocation's recorded settings planned, or None where they cannot be told (a model
    no longer in the registry, settings recorded in another shape)."""
    try:
        series = spec.get("series")
        if series is None:
            adapter = spec.get("adapter") or ""
            if spec.get("variants"):
                series = [[*variant.split(":", 1), adapter] for variant in spec["variants"]]
            else:
                series = []
                for model in spec["models"]:
                    precisions = (
                        spec.get("precisions")
                        or [name for name in spec.get("config_precisions") or [] if name in get_model(model).precisions]
                        or [get_model(model).default_precision]
                    )
                    series += [[model, precision, adapter] for precision in precisions]
        seeds = _seeds(spec)
        if not seeds:
            return None
        cells = set()
        for label, lengths in spec["grid"].items():
            task = parse_task(label)
            for model, precision, adapter in series:
                for seed in seeds:
                    for length in lengths:
                        cells.add(
                            cell_key(model, precision, adapter, task.name, task.operands, task.truncate or "",
                                     spec["base"], length, seed)
                        )  # fmt: skip
        return cells
    except (UserError, KeyError, TypeError, ValueError, AttributeError):
        return None


def _check_record(directory: Path, record: dict, rows: list[CellResult]) -> None:
    """run.json's shape, its invocations' digests, its identity and seeds against the rows."""
    where = directory / "run.json"
    problem = record_problem(record)
    if problem:
        raise UserError(
            f"{where} is damaged ({problem}): it is not numprec's run record as written; restore it from where the "
            "run came from"
        )
    # Signed where run.json says so or any entry carries a digest: then every entry must, and match
    signed = record.get("invocation_digests") or any("digest" in entry for entry in invocations(record))
    if rows and not signed:
        raise UserError(
            f"{where} is unsigned (its commands carry no digests: written before numprec signed them, or the digests "
            f"were removed), so its commands cannot be told from edited ones; if you trust it, sign it with "
            f"python -m harness.rescore {directory}"
        )
    for entry in invocations(record):
        if signed and entry.get("digest") != invocation_digest(entry):
            change = "its digest differs" if "digest" in entry else "it has no digest beside signed ones"
            raise UserError(
                f"{where}: the record of '{entry['command'][:80]}' was edited by hand ({change}); restore run.json "
                "from where the run came from"
            )
    if not rows:
        return
    identity = record.get("identity")
    if identity:
        expected = recorded_identity(identity)
        for row in rows:
            found = {"samples": row.n, "decoding": row.decoding, "prompt": row.prompt_style, "answer": row.answer_mode}
            differ = [key for key in expected if expected[key] is not None and found[key] != expected[key]]
            if differ:
                said = ", ".join(f"{key} {expected[key]} in run.json vs {found[key]} in results.csv" for key in differ)
                raise UserError(f"{where} does not describe {directory}/results.csv ({said}): one was edited by hand")
        if "seed" in identity and not identity.get("seeds") and {row.seed for row in rows} != {identity["seed"]}:
            seeds = ", ".join(str(seed) for seed in sorted({row.seed for row in rows}))
            raise UserError(
                f"{where} names seed {identity['seed']} and {directory}/results.csv's rows seed {seeds}: one was "
                "edited by hand"
            )
    ran = {seed for entry in eval_commands(record) for seed in _seeds(entry.get("spec", {}))}
    stray = sorted({row.seed for row in rows} - ran) if ran else []
    if stray:
        raise UserError(
            f"{directory}/results.csv has rows of seed {', '.join(map(str, stray))}, which no harness.eval command in "
            f"{where} ran (seeds {', '.join(map(str, sorted(ran)))}): one was edited by hand"
        )


def _seeds(spec: dict) -> list[int]:
    seeds = spec.get("seeds") or ([spec["seed"]] if "seed" in spec else [])
    return [seed for seed in seeds if isinstance(seed, int)]


def read_run(directory: Path) -> StoredRun:
    """A run read and checked as the module docstring says; an unfinished one is returned with its missing cells
    named (``missing``, ``unfinished()``): each command decides whether it may read one."""
    directory = Path(directory)
    try:
        return _read_run(directory)
    except OSError as err:
        raise UserError(f"cannot read {err.filename or directory}: {err.strerror}; fix its permissions") from None


def _read_run(directory: Path) -> StoredRun:
    if not (directory / "results.csv").is_file():
        raise UserError(f"{directory} has no results.csv; pass run directories written by harness.eval")
    record = read_json(directory / "run.json", str(directory)) if (directory / "run.json").exists() else {}
    try:
        rows, damaged = read_results(directory / "results.csv")
    except UserError as err:  # its advice is for a run being written; this one is only read
        raise UserError(
            f"{str(err).split('; ')[0]}; it was not written by numprec as it is: pass another run"
        ) from None
    if damaged:
        raise UserError(
            f"{directory}/results.csv has {len(damaged)} damaged row(s) ({damaged[0].strip()[:60]}...); "
            f"{repair_by_eval(directory, record)}"
        )
    _check_record(directory, record, rows)
    seed = samples_seed(rows, record.get("identity", {}))
    samples = [sample if "seed" in sample else {**sample, "seed": seed} for sample in read_samples(directory)]
    by_cell: dict[CellKey, dict[int, Sample]] = {}
    for sample in samples:
        own = by_cell.setdefault(CellKey.of(sample), {})
        if sample["index"] in own:
            raise UserError(
                f"{directory}/samples.jsonl holds {CellKey.of(sample).series} {sample['task']} n={sample['length']} "
                f"problem {sample['index']} twice; {repair_by_rescore(directory, record)}"
            )
        own[sample["index"]] = sample
    digests = bool(record.get("sample_digests")) or any("digest" in sample for sample in samples)
    seen: set[CellKey] = set()
    for row in rows:
        where = f"{directory}: {row.key.series} {row.key.task_label} n={row.length} seed {row.seed}"
        if row.key in seen:
            raise UserError(f"{where} has two rows in results.csv; {repair_by_rescore(directory, record)}")
        seen.add(row.key)
        check = check_cell_evidence(row, by_cell.get(row.key, {}), digests=digests)
        if check.status == "untrusted":
            raise UserError(f"{where}: {check.why}; {repair_by_eval(directory, record)}")
        if check.status == "rewritten":
            raise UserError(
                f"{where}: its row or verdicts disagree with its samples ({check.why}); "
                f"{repair_by_rescore(directory, record)}"
            )
    cells = [planned_cells(entry.get("spec", {})) for entry in eval_commands(record)]
    planned = set().union(*cells) if cells and all(found is not None for found in cells) else set()
    unplanned = sorted(seen - planned, key=lambda k: (k.seed, k.series, k.task_label, k.length)) if planned else []
    if unplanned:
        first = unplanned[0]
        raise UserError(
            f"{directory}/results.csv has {len(unplanned)} row(s) no harness.eval command in its run.json planned "
            f"({first.series} {first.task_label} n={first.length} seed {first.seed}...): rows from another run were "
            "added; restore results.csv and samples.jsonl from where the run came from"
        )
    stopped = {key for key in by_cell if key not in seen}  # samples of a cell whose row was never written
    missing = sorted((planned | stopped) - seen, key=lambda k: (k.seed, k.series, k.task_label, k.length))
    kept = [sample for sample in samples if CellKey.of(sample) in seen]
    return StoredRun(directory, rows, kept, record, missing)


def read_finished(directory: Path) -> StoredRun:
    """A run that must be finished (to be merged or exported): an unfinished one is refused in one line."""
    run = read_run(directory)
    if run.missing:
        raise UserError(run.unfinished())
    return run
