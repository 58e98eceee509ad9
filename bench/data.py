"""Part 3 of bench.run, data generation: problems a second of the harness's generator and scratch's batches against
the paper's algorithm written the plain way (one sample, one digit at a time)."""

from __future__ import annotations

import time

from bench.common import log, median
from harness.questions.problems import generate


def paper_algorithm_python(count: int, length: int, operands: int, base: int, seed: int) -> list[tuple[str, str]]:
    """The paper's generator (Alg. 1) written the plain way: one sample at a time, one digit at a time."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        numbers = []
        for _ in range(operands):
            digits = [rng.randrange(base) for _ in range(length)]
            while len(digits) > 1 and digits[0] == 0:  # strip leading zeros
                digits.pop(0)
            numbers.append(int("".join(map(str, digits)), base))
        total = sum(numbers)
        out.append((" + ".join(str(n) for n in numbers), str(total)))
    return out


def bench_data(repeats: int, count: int = 100_000) -> list[dict]:
    from harness.questions.problems import Task
    from scratch.data import Arithmetic, Problems

    cases = [("add", 2, 10, 10), ("iter_add", 3, 10, 10)]
    rows = []
    for name, operands, base, length in cases:
        task = Task(name, operands=operands)

        def numprec(task=task, base=base, length=length):
            generate(task, base, length, count, seed=0)

        scratch_problems = Problems(Arithmetic("add", base, length, operands, False), 0, 16)

        def scratch_batch(problems=scratch_problems):
            problems.train_batch(count)

        def plain(operands=operands, base=base, length=length):
            paper_algorithm_python(count, length, operands, base, 0)

        timings = {}
        for label, function in (("numprec", numprec), ("scratch", scratch_batch), ("python", plain)):
            seconds = []
            for _ in range(repeats):
                started = time.perf_counter()
                function()
                seconds.append(time.perf_counter() - started)
            timings[label] = count / median(seconds)
        rows.append(
            {
                "task": f"{name}:{operands} base {base} length {length}",
                "count": count,
                "numprec_problems_per_s": timings["numprec"],
                "scratch_problems_per_s": timings["scratch"],
                "python_problems_per_s": timings["python"],
                "numprec_vs_python": timings["numprec"] / timings["python"],
                "scratch_vs_python": timings["scratch"] / timings["python"],
            }
        )
        log(f"data {rows[-1]['task']}: numprec {timings['numprec']:,.0f}/s, python {timings['python']:,.0f}/s")
    return rows


def data_markdown(rows: list[dict]) -> list[str]:
    lines = [
        "## Data generation (problems/s)",
        "",
        "| task | numprec harness | scratch | per-sample Python | harness / Python | scratch / Python |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['numprec_problems_per_s']:,.0f} | {r['scratch_problems_per_s']:,.0f} | "
            f"{r['python_problems_per_s']:,.0f} | {r['numprec_vs_python']:.1f}x | {r['scratch_vs_python']:.1f}x |"
        )
    return [*lines, ""]
