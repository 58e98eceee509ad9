"""The paper's problems for one cell as JSON lines, drawn as harness.eval draws them (harness/questions/problems.py,
where their users import the generator from; its public names are here too).

    python -m harness.problems --task iter_add:3 --length 5 --base 10 --count 1000 --seed 0 --out problems.jsonl
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.core.bounds import SEED
from harness.core.cli import ArgParser, output_file, run
from harness.core.files import writing_out
from harness.questions.problems import *  # noqa: F403  (the generator's public names, as documented)
from harness.questions.problems import BASE, COUNT, LENGTH, generate, parse_task, write_jsonl


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.problems", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--task", required=True, type=parse_task, help="add, iter_add:K, mul or mul:trunc=L (as harness.eval takes)"
    )
    parser.add_argument("--length", type=LENGTH.arg, required=True, help="digits per operand (at most)")
    parser.add_argument("--base", type=BASE.arg, default=10)
    parser.add_argument("--count", type=COUNT.arg, default=1000)
    parser.add_argument("--seed", type=SEED.arg, default=0)
    parser.add_argument("--out", type=output_file, required=True, help="JSON-lines file to write")
    args = parser.parse_args(argv)
    task = args.task
    problems = generate(task, args.base, args.length, args.count, args.seed)
    with writing_out(args.out):
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(problems, args.out)
    print(f"wrote {len(problems)} {task.label} problems (base {args.base}, length {args.length}) to {args.out}")
    return 0


if __name__ == "__main__":
    run(main)
