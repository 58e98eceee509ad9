"""Runs made on the scripted backend, for the tests of everything above the backends: answers known in advance
(``answer``: fp32 right, bf16 wrong on about a third; ``script``: the pipeline's batch-dependent answers), a quick
add-only run (``run``), the pipeline's run over two tasks (``pipeline_run``), and one finished row (``a_row``)."""

from __future__ import annotations

import zlib

from harness.backends.scripted import ScriptedBackend
from harness.eval import evaluate
from harness.runs.compare import wilson_interval
from harness.runs.config import build_spec, load_config
from harness.runs.results import CellResult

IDENTITY = {"samples": 2, "decoding": "greedy", "prompt": "few-shot", "answer": "first-line"}  # a run's identity


def answer(precision: str):
    """fp32 answers right; bf16 gets about a third of the problems wrong (by the expression, so every run agrees)."""

    def script(message: str, rows: int) -> str:
        expression = message.strip().splitlines()[-1].strip()
        a, b = expression.split(" + ")
        value = int(a) + int(b)
        if precision == "bf16" and zlib.crc32(expression.encode()) % 3 == 0:
            value += 1
        return f"{expression} = {value}"

    return script


def run(out, precisions, seed=0):
    name, config = load_config("quick")
    spec = build_spec(
        name, config, models=["smollm2"], precisions=precisions, tasks=["add"], lengths=[1, 2, 3], samples=30, out=out,
        seed=seed,
    )  # fmt: skip

    def load(variant, spec):
        return ScriptedBackend(variant.precision, answer(variant.precision.name), spec.batch_size)

    evaluate(spec, "python -m harness.eval (scripted)", load=load)
    return out


def gold(expression: str) -> int:
    if " * " in expression:
        a, b = expression.split(" * ")
        return int(a) * int(b)
    return sum(int(part) for part in expression.split(" + "))


def script(precision: str):
    """fp32: right unless the sum is a multiple of 3 (then wrong by one), unreadable when it ends in 7.
    bf16: as fp32, but alone in a batch it gets the multiples of 3 right too (a batch-dependent answer)."""

    def answer(message: str, rows: int) -> str:
        expression = message.rstrip().splitlines()[-1]
        value = gold(expression)
        if value % 10 == 7:
            return "Let me think about it."
        if value % 3 == 0 and not (precision == "bf16" and rows == 1):
            return f"{expression} = {value + 1}"
        return f"{expression} = {value}"

    return answer


def pipeline_run(out, invariance_check=0, loads=None, samples=12, batch_size=None):
    name, config = load_config("quick")
    spec = build_spec(
        name,
        config,
        models=["smollm2"],
        precisions=["fp32", "bf16"],  # the scripted answers: a batch-invariant and a batch-dependent precision
        tasks=["add", "mul"],
        lengths=[1, 2],
        samples=samples,
        out=out,
        invariance_check=invariance_check,
        batch_size=batch_size,
    )

    def load(variant, spec):
        if loads is not None:
            loads.append(variant.precision.name)
        return ScriptedBackend(variant.precision, script(variant.precision.name), spec.batch_size)

    return evaluate(spec, "python -m harness.eval (scripted)", load=load)


def a_row(length: int, n: int = 2, seed: int = 0, decoding: str = "greedy") -> CellResult:
    low, high = wilson_interval(1, n)
    return CellResult(
        model="smollm2",
        precision="fp32",
        weight_dtype="float32",
        activation_dtype="float32",
        task="add",
        operands=2,
        base=10,
        length=length,
        n=n,
        correct=1,
        accuracy=1 / n,
        ci_low=low,
        ci_high=high,
        seed=seed,
        truncate="",
        decoding=decoding,
        method="cast",
        weight_bits=32,
        group_size="",
        footprint_mb=513.0,
        adapter="",
        backend="hf",
        no_answer=n - 1,
        gen_tokens=4,
        wall_s=1.0,
        tokens_per_s=4.0,
        kernel="torch.Linear",
    )
