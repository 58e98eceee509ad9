"""A run's results and samples as a dataset: Parquet files that ``datasets.load_dataset("parquet", ...)`` reads, with
a dataset card, ready for the Hub.

    python -m harness.export reports/quick-greedy-n40-seed0 --out exports/quick
    hf upload USER/numprec-quick exports/quick --repo-type dataset     # to publish it (not run by numprec)

DIR gets results.parquet (a row per cell, results.csv's columns), samples.parquet (a row per problem: prompt,
output, extracted answer, the rule that read it, gold, verdict) and README.md, whose card names the two configs, the
commands that made the run and the paper it follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from harness.core.cli import ArgParser, input_path, invocation, output_dir, run
from harness.core.files import atomic_write_text
from harness.reports.promotion import prepare_out_dir, staged_dir
from harness.runs.stored import StoredRun, read_finished

CARD = """---
configs:
- config_name: results
  data_files: results.parquet
- config_name: samples
  data_files: samples.parquet
tags:
- numprec
- arithmetic
- quantization
---

# {name}

Exact-match arithmetic results written by [numprec](https://github.com/) from the run directory `{name}`: a row per
cell (model, precision, task, operand length, seed) in `results`, a row per problem in `samples`. The tasks, prompts
and scoring follow Feng, Yang et al., "How Numerical Precision Affects Arithmetical Reasoning Capabilities of LLMs".

- series: {series}
- tasks: {tasks}
- cells: {cells}, problems: {problems}

```python
import datasets
results = datasets.load_dataset("parquet", data_files="{{DIR}}/results.parquet", split="train")
```

Made by:

{commands}
"""


def sample_record(sample: dict) -> dict:
    """A sample with one type per field (truncate is text: "" or the digits kept), every optional field present."""
    return {
        **sample,
        "truncate": str(sample.get("truncate") or ""),
        "extracted": sample.get("extracted"),
        "seed": int(sample.get("seed", 0)),
        "tokens": int(sample.get("tokens", 0)),
        "thinking_tokens": int(sample.get("thinking_tokens", 0)),
        "truncated": bool(sample.get("truncated", False)),
        "digest": sample.get("digest", ""),
    }


def uniform(records: list[dict]) -> list[dict]:
    """Records whose every column has one type: a column mixing types (an int or "" where not recorded) as text."""
    names = records[0] if records else {}
    mixed = {name for name in names if len({type(r[name]) for r in records if r.get(name) is not None}) > 1}
    return [{k: ("" if v is None else str(v)) if k in mixed else v for k, v in record.items()} for record in records]


def export(finished: StoredRun, out: Path) -> list[Path]:
    """Write the run as Parquet plus its card into ``out``; return the files written."""
    import datasets

    rows = [{**asdict(row), "truncate": str(row.truncate or "")} for row in finished.rows]
    written = []
    for name, records in (("results", rows), ("samples", [sample_record(s) for s in finished.samples])):
        path = out / f"{name}.parquet"
        datasets.Dataset.from_list(uniform(records)).to_parquet(str(path))
        written.append(path)
    card = CARD.format(
        name=finished.path.name,
        series=", ".join(dict.fromkeys(row.key.series for row in finished.rows)),
        tasks=", ".join(dict.fromkeys(row.key.task_label for row in finished.rows)),
        cells=len(finished.rows),
        problems=len(finished.samples),
        commands="\n".join(f"    {command}" for command in finished.commands) or "    (no run.json)",
    )
    atomic_write_text(out / "README.md", card)
    return [*written, out / "README.md"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=input_path, help="a run directory written by harness.eval (or harness.report)")
    parser.add_argument("--out", type=output_dir, required=True, help="the dataset directory to write")
    args = parser.parse_args(argv)
    invoked = invocation("harness.export", args, argv)
    prepare_out_dir(args.out, [args.run], "harness.export")
    finished = read_finished(args.run)
    with staged_dir(args.out, [args.run], "harness.export", invoked) as stage:
        written = export(finished, stage)
    print(f"wrote {args.out}/ ({', '.join(path.name for path in written)})")
    return 0


if __name__ == "__main__":
    run(main)
