"""Score a finished run directory again with the current rules of harness/scoring/, without generating anything.

    python -m harness.rescore reports/quantization-cpu

Every finished cell is checked against its evidence as harness.eval checks it on resume (harness/runs/evidence.py): each
stored output is read again (answer, rule, verdict) and each row recomputed from its samples; rows, comparisons,
anatomy and summary are rewritten, the command is added to run.json, and each verdict that changed is printed, so
a change of scoring rules is visible answer by answer. A cell whose samples are missing or damaged cannot be
re-scored: it is kept as it is, never deleted, and named with the command that would compute it again. The
directory is locked as harness.eval locks it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from harness.core.cli import ArgParser, command_line, input_path, run
from harness.core.errors import UserError
from harness.core.files import read_json
from harness.reports.summary import write_reports
from harness.runs.rundir import RunDir, eval_into, recorded_identity


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.rescore", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=input_path, help="a run directory written by harness.eval")
    args = parser.parse_args(argv)
    meta_path = args.run / "run.json"
    if not meta_path.is_file() or not (args.run / "results.csv").is_file():
        raise UserError(f"{args.run} is not a harness.eval run directory (no run.json and results.csv)")
    meta = read_json(meta_path, f"{meta_path} is not a harness.eval run record")
    identity = meta.get("identity") if isinstance(meta, dict) else None
    if not isinstance(identity, dict):
        raise UserError(f"{meta_path} has no identity; it was not written by harness.eval")
    command = command_line("harness.rescore", argv)
    run_dir = RunDir(args.run, recorded_identity(identity), command, {"rescore": True}, recompute=False)
    try:
        for repair in run_dir.repairs:
            print(f"rescored {args.run}: {repair}", file=sys.stderr)
        write_reports(run_dir.path, run_dir.rows, run_dir.commands(), run_dir.samples)
        evals = [command for command in run_dir.commands() if command.startswith("python -m harness.eval")]
    finally:
        run_dir.close()
    changes = [line for check in run_dir.checks for line in check.verdicts_changed]
    readings = sum(check.readings_changed for check in run_dir.checks)
    for line in changes:
        print(line)
    total = sum(check.row.n for check in run_dir.checks if check.status != "untrusted")
    print(
        f"rescored {total} answers in {args.run}: {len(changes)} verdict(s) changed, "
        f"{readings} answer(s) read differently"
    )
    if run_dir.untrusted:
        again = (
            eval_into(evals[-1], args.run) if evals else f"the harness.eval command that made it, with --out {args.run}"
        )
        print(
            f"not re-scored, kept as they were: {len(run_dir.untrusted)} cell(s) whose samples are missing or damaged "
            f"({'; '.join(run_dir.untrusted[:3])}{' ...' if len(run_dir.untrusted) > 3 else ''}); "
            f"compute them again with: {again}"
        )
    return 0


if __name__ == "__main__":
    run(main)
