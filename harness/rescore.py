"""Score a finished run directory again with the current rules of harness/scoring.py, without generating anything.

    python -m harness.rescore reports/quantization-cpu

Every stored output is read again (answer, rule, verdict); rows, comparisons, anatomy and summary are rewritten
from the new verdicts, the command is added to run.json, and each verdict that changed is printed, so a change of
scoring rules is visible answer by answer. The directory is locked and checked as harness.eval does.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace

from harness.cli import ArgParser, UserError, input_path, run
from harness.report import read_samples, write_reports
from harness.results import CellKey, RunDir, atomic_write_text, results_csv_text
from harness.scoring import extract, is_correct, wilson_interval


def rescore(run_dir: RunDir) -> tuple[list[str], list[dict]]:
    """Re-read every sample of ``run_dir``; rewrite samples and rows; return one line per changed verdict, and the
    rescored samples."""
    samples = read_samples(run_dir.samples_path)
    changes, tallies = [], {}
    for sample in samples:
        base = int(sample["base"])
        extraction = extract(sample["output"], base, sample["expression"])
        verdict = is_correct(extraction.answer, sample["gold"], base)
        if verdict != bool(sample["correct"]):
            before = "right" if sample["correct"] else "wrong"
            changes.append(
                f"{sample['model']} {sample['precision']} {sample['expression']} = {sample['gold']}: {before} -> "
                f"{'right' if verdict else 'wrong'} ({extraction.rule}; output {sample['output'].strip()[:60]!r})"
            )
        sample.update(extracted=extraction.answer, rule=extraction.rule, correct=verdict)
        tally = tallies.setdefault(CellKey.of(sample), [0, 0])
        tally[0] += verdict
        tally[1] += extraction.answer is None
    rows = []
    for row in run_dir.rows:
        correct, no_answer = tallies.get(row.key, (0, 0))
        low, high = wilson_interval(correct, row.n)
        rows.append(
            replace(row, correct=correct, accuracy=correct / row.n, ci_low=low, ci_high=high, no_answer=no_answer)
        )
    text = "".join(json.dumps(sample, ensure_ascii=False) + "\n" for sample in samples)
    atomic_write_text(run_dir.samples_path, text)  # samples first: a row always has its samples
    atomic_write_text(run_dir.results_path, results_csv_text(rows))
    run_dir.rows = rows
    return changes, samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.rescore", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=input_path, help="a run directory written by harness.eval")
    args = parser.parse_args(argv)
    meta_path = args.run / "run.json"
    if not meta_path.is_file() or not (args.run / "results.csv").is_file():
        raise UserError(f"{args.run} is not a harness.eval run directory (no run.json and results.csv)")
    identity = json.loads(meta_path.read_text(encoding="utf-8")).get("identity")
    if not isinstance(identity, dict):
        raise UserError(f"{meta_path} has no identity; it was not written by harness.eval")
    command = "python -m harness.rescore " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    run_dir = RunDir(args.run, identity, command, {"rescore": True})
    try:
        for repair in run_dir.repairs:
            print(f"repaired {args.run}: {repair}", file=sys.stderr)
        changes, samples = rescore(run_dir)
        write_reports(run_dir.path, run_dir.rows, run_dir.commands(), samples)
    finally:
        run_dir.close()
    for line in changes:
        print(line)
    total = sum(row.n for row in run_dir.rows)
    print(f"rescored {total} answers in {args.run}: {len(changes)} verdict(s) changed")
    return 0


if __name__ == "__main__":
    run(main)
