"""One report of several finished runs.

    python -m harness.report runs/bf16 runs/awq-int4 runs/served --out reports/merged

merges runs made anywhere (other machines, jobs, backends) into DIR with a run's files (results.csv, samples.jsonl,
run.json naming its sources, and the reports harness/reports/summary.py makes: the paired table across the runs),
after checking from their samples that they asked the same problems with the same prompts (harness/runs/merge.py); DIR
can be viewed, exported and merged again like a run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from harness.core.cli import ArgParser, input_path, invocation, output_dir, run
from harness.core.files import atomic_write_text
from harness.reports.promotion import prepare_out_dir, staged_dir
from harness.reports.summary import write_reports
from harness.runs.evidence import invocation_digest
from harness.runs.merge import merge
from harness.runs.results import results_csv_text, slim
from harness.runs.rundir import sample_line, where_and_when
from harness.runs.stored import StoredRun, read_finished

# A merged run's record says when and where it was merged, and its summary the command line as typed: the same
# command (by meaning) on the same runs that differs only there is the same report
VOLATILE = ("run.json", "summary.md")


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=input_path, help="finished run directories (harness.eval's)")
    parser.add_argument("--out", type=output_dir, required=True, help="a new directory for the merged report")
    args = parser.parse_args(argv)
    invoked = invocation("harness.report", args, argv)
    prepare_out_dir(args.out, args.runs, "harness.report")
    rows, samples, record = merge([read_finished(path) for path in args.runs])
    own = {"command": invoked["command"], "spec": {"runs": [str(path) for path in args.runs]}, **where_and_when()}
    own["digest"] = invocation_digest(own)
    merged = StoredRun(args.out, rows, samples, {**record, "invocations": [own], "invocation_digests": True})
    with staged_dir(args.out, args.runs, "harness.report", invoked, volatile=VOLATILE) as stage:
        atomic_write_text(stage / "results.csv", results_csv_text(rows))
        atomic_write_text(stage / "samples.jsonl", "".join(sample_line(sample) for sample in samples))
        atomic_write_text(stage / "run.json", json.dumps(merged.record, indent=2) + "\n")
        write_reports(stage, rows, merged.commands, [slim(sample) for sample in samples])
    series = len({row.key.series for row in rows})
    print(f"wrote {args.out}/ ({len(rows)} rows of {series} series from {len(args.runs)} runs; summary.md)")
    return 0


if __name__ == "__main__":
    run(main)
