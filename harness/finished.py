"""A finished run directory, read and never written: its rows, samples and record, checked against each other.

The commands that only read runs (harness.diff, harness.view, harness.report's merge, harness.export) read them
here; a directory harness.eval did not write, or one with damaged files, is one line naming the command that
repairs it (harness.rescore keeps what it can and says what is damaged).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from harness.files import read_json
from harness.results import CellKey, CellResult, Sample, read_results, read_samples_file, samples_seed


def read_samples(directory: Path) -> list[Sample]:
    """The samples of a run directory, in file order; a missing or damaged samples.jsonl is one UserError."""
    path = directory / "samples.jsonl"
    if not path.is_file():
        raise UserError(f"{directory} has no samples.jsonl; pass run directories written by harness.eval")
    found = read_samples_file(path)
    if found.damaged:
        number, problem, _ = found.damaged[0]
        raise UserError(
            f"{path} line {number}: {problem}; it was not written by harness.eval as it is (python -m harness.rescore "
            f"{directory} says what is damaged and keeps the rest)"
        )
    return found.samples


@dataclass
class FinishedRun:
    path: Path
    rows: list[CellResult]
    samples: list[Sample]
    record: dict  # run.json

    @property
    def commands(self) -> list[str]:
        """The commands that made it: a merged run's sources' (harness/merge.py), then its own."""
        sources = [source.get("invocations", []) for source in self.record.get("merged_from", [])]
        invocations = [entry for invocations in [*sources, self.record.get("invocations", [])] for entry in invocations]
        return [invocation.get("command", "") for invocation in invocations]

    def cell_samples(self) -> dict[CellKey, list[Sample]]:
        """Each row's samples, in index order."""
        cells: dict[CellKey, list[Sample]] = {row.key: [] for row in self.rows}
        for sample in self.samples:
            cells.setdefault(CellKey.of(sample), []).append(sample)
        return {key: sorted(found, key=lambda s: s["index"]) for key, found in cells.items()}


def read_run(directory: Path) -> FinishedRun:
    """A finished run: every row with exactly its n samples, whose verdicts its counts equal."""
    directory = Path(directory)
    if not (directory / "results.csv").is_file():
        raise UserError(f"{directory} has no results.csv; pass run directories written by harness.eval")
    try:
        rows, problems = read_results(directory / "results.csv")
    except UserError as err:  # its advice is for a run being written; this one is only read
        raise UserError(
            f"{str(err).split('; ')[0]}; it was not written by numprec as it is: pass another run"
        ) from None
    if problems:
        raise UserError(
            f"{directory}/results.csv: {problems[0]}; python -m harness.rescore {directory} says what is damaged"
        )
    record = read_json(directory / "run.json", str(directory)) if (directory / "run.json").is_file() else {}
    seed = samples_seed(rows, record.get("identity", {}))
    samples = [sample if "seed" in sample else {**sample, "seed": seed} for sample in read_samples(directory)]
    run = FinishedRun(directory, rows, samples, record)
    cells = run.cell_samples()
    for row in rows:
        own = cells.get(row.key, [])
        if len(own) != row.n or sum(bool(s["correct"]) for s in own) != row.correct:
            raise UserError(
                f"{directory}: {row.key.series} {row.key.task_label} n={row.length} has {len(own)} samples "
                f"({sum(bool(s['correct']) for s in own)} correct) for a row of {row.n} ({row.correct} correct); "
                f"python -m harness.rescore {directory} checks and repairs it"
            )
    return run
