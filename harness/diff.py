"""Compare the outputs of two run directories problem by problem: did a device, a kernel or a change of code
alter what the model wrote?

    python -m harness.diff reports/quick-greedy-n40-seed0 runs/eval/quick-greedy-n40-seed0

Problems are matched by cell (model, precision, adapter, task, base, length) and index; for each series the counts of
problems in both runs, of identical outputs and of identical verdicts are printed, each followed by what differs between
the machines that computed it (CPU instructions, GPU, kernels and library versions: harness/core/machine.py) where
anything does, so that outputs that differ because the kernels did are seen as such; then the first differing outputs.
Outputs are compared with trailing whitespace aside: a server (--backend api) drops the newline that ended the first
line, which the in-process backends keep. A problem whose expression differs between the runs (another seed) is
reported, not compared. Reads only; exits 0 whatever it finds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.core.cli import ArgParser, input_path, run
from harness.core.errors import UserError
from harness.core.files import read_json
from harness.core.machine import differences
from harness.runs.results import CellKey, read_results
from harness.runs.stored import read_samples


def by_problem(directory: Path) -> dict[tuple[CellKey, int], dict]:
    """The samples of a run directory by (cell, index) (harness/runs/stored.py reads and checks them)."""
    return {(CellKey.of(sample), sample["index"]): sample for sample in read_samples(directory)}


def same_output(a: dict, b: dict) -> bool:
    return a["output"].rstrip() == b["output"].rstrip()


def compare(first: dict, second: dict, examples: int = 5, notes: dict[str, str] | None = None) -> list[str]:
    """One line per series (problems in both, identical outputs, identical verdicts), each followed by its line of
    ``notes`` if it has one, then differing examples."""
    shared = [key for key in first if key in second]
    if not shared:
        return ["no problem is in both runs (other models, precisions, tasks or lengths)"]
    lines, differing = [], []
    for series in dict.fromkeys(key[0].series for key in shared):
        keys = [key for key in shared if key[0].series == series]
        other_problem = [key for key in keys if first[key]["expression"] != second[key]["expression"]]
        same = [key for key in keys if key not in other_problem]
        outputs = sum(same_output(first[key], second[key]) for key in same)
        verdicts = sum(bool(first[key]["correct"]) == bool(second[key]["correct"]) for key in same)
        line = f"{series}: {len(same)} problems in both, {outputs} identical outputs, {verdicts} identical verdicts"
        if other_problem:
            line += f" ({len(other_problem)} with another expression at the same index: another seed?)"
        lines.append(line)
        if notes and series in notes:
            lines.append(notes[series])
        differing += [key for key in same if not same_output(first[key], second[key])]
    for key in differing[:examples]:
        cell, index = key
        lines.append(
            f"  {cell.series} {cell.task_label} n={cell.length} #{index} {first[key]['expression']}: "
            f"{first[key]['output'].strip()[:60]!r} | {second[key]['output'].strip()[:60]!r}"
        )
    return lines


def series_machines(directory: Path) -> tuple[dict[str, set[str]], dict[str, dict], dict[str, set[str]]]:
    """(series -> machine ids of its rows, machine id -> description, series -> kernels of its rows) of a run
    directory; empty where it recorded none (runs made before machines were recorded)."""
    rows, _ = read_results(directory / "results.csv")
    machines: dict[str, dict] = {}
    if (directory / "run.json").is_file():
        machines = (
            read_json(directory / "run.json", f"{directory} is not a harness.eval run directory").get("machines") or {}
        )
    used: dict[str, set[str]] = {}
    kernels: dict[str, set[str]] = {}
    for row in rows:
        used.setdefault(row.key.series, set()).add(row.machine)
        kernels.setdefault(row.key.series, set()).add(row.kernel)
    return used, machines if isinstance(machines, dict) else {}, kernels


def machine_notes(first: Path, second: Path) -> dict[str, str]:
    """Per series, what differs between the machines and kernels the two runs computed it on (none when alike)."""
    (used_a, machines_a, kernels_a), (used_b, machines_b, kernels_b) = series_machines(first), series_machines(second)
    notes = {}
    for name in used_a.keys() & used_b.keys():
        found = []
        kernel_a, kernel_b = (", ".join(sorted(kernels.get(name, set()))) for kernels in (kernels_a, kernels_b))
        if kernel_a != kernel_b:
            found.append(f"kernel {kernel_a or 'not recorded'} vs {kernel_b or 'not recorded'}")
        ids_a, ids_b = used_a.get(name, set()), used_b.get(name, set())
        described_a = [machines_a[i] for i in sorted(ids_a) if i in machines_a]
        described_b = [machines_b[i] for i in sorted(ids_b) if i in machines_b]
        if not described_a or not described_b:
            which = {(False, True): "the first run", (True, False): "the second run"}.get(
                (bool(described_a), bool(described_b)), "either run"
            )
            found.append(f"machine not recorded in {which}")
        else:
            found += sorted({line for a in described_a for b in described_b for line in differences(a, b)})
        if found:
            notes[name] = f"  ran differently: {'; '.join(found)}"
    return notes


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.diff", description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=input_path, help="a run directory written by harness.eval")
    parser.add_argument("second", type=input_path, help="another one")
    args = parser.parse_args(argv)
    first, second = by_problem(args.first), by_problem(args.second)  # each checked, or one line saying why not
    try:
        notes = machine_notes(args.first, args.second)
    except OSError as err:  # it only reads: a file it cannot is the user's to open up
        raise UserError(f"cannot read {err.filename}: {err.strerror}; fix its permissions") from None
    for line in compare(first, second, notes=notes):
        print(line)
    return 0


if __name__ == "__main__":
    run(main)
