"""The steps of scripts/gpu_acceptance.sh planned into the calls a lent GPU allows: at most 600 s a command, the
machine's start included, 15 minutes of device time in all (../shared/notes/gpu.md).

    python -m bench.plan --budget 560 awq decode tests fp8 sensitivity train

Steps run in order of value. The AWQ kernel's build runs in the background, niced, from the call's start, beside the
decode step; the tests step waits for it (it loads AWQ). Each step's limit is its time as measured on the last GPU
call, or estimated where it has not run there; a step whose limit does not fit what is left of the budget is skipped,
with its reason. Printed one step a line for the script (``run NAME LIMIT``, ``background NAME LIMIT``, ``wait NAME``,
``skip NAME REASON``); ``--calls`` prints instead the calls all the steps need, each with its command.

>>> for line in plan(["awq", "decode", "tests", "fp8", "sensitivity", "train"], 560):
...     print(line)
background awq 240
run decode 190
wait awq
run tests 150
run fp8 150
skip sensitivity needs 150 s, 20 s left
skip train needs 150 s, 20 s left
>>> calls(["awq", "decode", "tests", "fp8", "sensitivity", "train"], 560)
[['awq', 'decode', 'tests', 'fp8'], ['sensitivity', 'train']]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.core.cli import ArgParser, run

# name: (seconds, where the figure comes from, runs in the background). In order of value.
STEPS = {
    "awq": (240, "Marlin's build was still going after 150 s on the last call (2026-11-26)", True),
    "decode": (190, "39 s compiling, then about 2 s a call, on the last call", False),
    "tests": (150, "estimated: the CUDA tests of the backend, AWQ, scratch and the bench", False),
    "fp8": (150, "estimated: never run on a GPU; building the 8B model, three compiles of about 39 s", False),
    "sensitivity": (150, "estimated: never run on a GPU; two 8B models, 258 passes of 64 problems", False),
    "train": (150, "estimated: eight packs at 20-30 s of compiling each, written after every pack", False),
    "gptq": (240, "estimated: never run on a GPU; 8 blocks of the 8B built, saved, then GPTQ at NVFP4", False),
    "deploy": (150, "estimated: never run on a GPU; a small NVFP4+GPTQ checkpoint, then vLLM's start", False),
}
WAITS_FOR = {"tests": "awq"}  # the tests load AWQ checkpoints: the kernel built first


@dataclass(frozen=True)
class Line:
    action: str  # run, background, wait, skip
    name: str
    detail: str = ""

    def __str__(self) -> str:
        return " ".join(part for part in (self.action, self.name, self.detail) if part)


def plan(steps: Sequence[str], budget: int) -> list[Line]:
    """What one call of ``budget`` seconds runs of ``steps``, in order of value."""
    return schedule(steps, budget)[0]


def schedule(steps: Sequence[str], budget: int) -> tuple[list[Line], int]:
    """The plan of one call, and the seconds it takes (the background step's end included)."""
    wanted = [name for name in STEPS if name in steps]
    clock, lines, background = 0, [], {}
    for name in wanted:
        seconds, _, behind = STEPS[name]
        if behind:
            if seconds > budget:
                lines.append(Line("skip", name, f"needs {seconds} s, the call has {budget} s"))
                continue
            background[name] = seconds
            lines.append(Line("background", name, str(seconds)))
            continue
        waits = WAITS_FOR.get(name)
        start = max(clock, background.get(waits, 0)) if waits in background else clock
        if start + seconds > budget:
            lines.append(Line("skip", name, f"needs {seconds} s, {max(0, budget - start)} s left"))
            continue
        if waits in background and background[waits] > clock:
            lines.append(Line("wait", waits))
        lines.append(Line("run", name, str(seconds)))
        clock = start + seconds
    return lines, max([clock, *background.values()])


def calls(steps: Sequence[str], budget: int) -> list[list[str]]:
    """The calls that run every step of ``steps``: each call a plan of what the earlier calls left."""
    left, found = [name for name in STEPS if name in steps], []
    while left:
        ran = [line.name for line in plan(left, budget) if line.action in ("run", "background")]
        if not ran:
            raise SystemExit(f"no step of {', '.join(left)} fits a call of {budget} s")
        found.append(ran)
        left = [name for name in left if name not in ran]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m bench.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=560, help="seconds the call may take (default 560)")
    parser.add_argument("--calls", action="store_true", help="print the calls every step needs, not one plan")
    parser.add_argument("steps", nargs="+", choices=sorted(STEPS), help="the steps asked for")
    args = parser.parse_args(argv)
    if args.calls:
        for number, names in enumerate(calls(args.steps, args.budget), start=1):
            seconds = schedule(names, args.budget)[1]
            print(f"call {number}: bash scripts/gpu_acceptance.sh --budget {args.budget} {' '.join(names)}"
                  f"  (at most {seconds} s of steps)")  # fmt: skip
        return 0
    for line in plan(args.steps, args.budget):
        print(line)
    return 0


if __name__ == "__main__":
    run(main)
