"""Rounding methods and layer mixes on one frontier, decided head to head on fresh problems.

    python -m harness.frontier --model smollm2-arith --precision nvfp4 --methods rtn,gptq --keep fp8-dynamic \\
        --budgets 4.75,5,5.5,6 --samples 1000 --seed 1 --out runs/frontier-nvfp4

For each rounding method, harness.sensitivity's table and search on --search-seed's calibration problems: a recipe
at each budget, and the best rule within its bits. Every point is then a real checkpoint (harness.quantize: each made
once, reused while its recipe reads the same) evaluated by harness.eval on --seed's problems, the scorer users get:
fp32, uniform KEEP, each method at uniform TARGET, each budget's recipe and best rule. The points are paired problem
by problem, against fp32, the recipe against the best rule and each method against round to nearest, Holm over the
table (harness/recipes/frontier_table.py); the Pareto set is marked and the sample a 5-point difference needs is
said. Writes frontier.csv, comparisons.csv, frontier.png and frontier.json (each step's time) into --out, and each
step's own output under steps/; a killed run resumes: the same command reuses every finished step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from harness.backends.vllm import check_vllm_kernels
from harness.core.bounds import SAMPLES, SEED
from harness.core.cli import ArgParser, int_list, invocation, name_list, output_dir, run
from harness.core.errors import UserError
from harness.core.faults import fault_point
from harness.core.files import atomic_write_bytes, atomic_write_text, holds_only_temporaries_of, read_json
from harness.core.machine import describe
from harness.models import get_model, get_precision, named_rounding
from harness.models.checkpoints import PROVENANCE, read_checkpoint
from harness.models.mix import mix_precision
from harness.models.rounding import ROUNDINGS, split_rounding
from harness.models.weights import quantized_dir
from harness.questions.problems import parse_task
from harness.recipes.frontier import points_png
from harness.recipes.frontier_rows import COLUMNS, best_points, frontier_rows, say_best
from harness.recipes.frontier_table import (
    REFERENCE,
    FrontierPoint,
    paired_table,
    recipe_settings,
    resolution_line,
    sample_needed,
)
from harness.recipes.groups import GRANULARITIES
from harness.runs.compare import SIGNIFICANCE, answers_by_series, comparisons_csv
from harness.runs.results import csv_text
from harness.runs.stored import read_finished

RECORD = "frontier.json"


def budget_list(text: str) -> list[float]:
    """--budgets: bits a weight, comma-separated, each once, between 1 and 32."""
    try:
        found = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        found = []
    if not found or any(not 1 < value < 32 for value in found) or len(set(found)) != len(found):
        raise argparse.ArgumentTypeError(f"bits a weight between 1 and 32, comma-separated, each once, not {text!r}")
    return sorted(found)


def parser() -> ArgParser:
    parser = ArgParser(prog="python -m harness.frontier", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-arith", help="a registry model (default smollm2-arith)")
    parser.add_argument("--precision", required=True, help="the target format, e.g. nvfp4, mxfp4")
    parser.add_argument(
        "--methods", type=name_list, default=["rtn", "gptq"], help=f"rounding methods compared: {', '.join(ROUNDINGS)}"
        " where the format takes them (default rtn,gptq)",
    )  # fmt: skip
    parser.add_argument("--keep", required=True, help="the higher precision a mix keeps layers at, e.g. fp8-dynamic")
    parser.add_argument("--budgets", type=budget_list, required=True, help="bits a weight of the mixes, e.g. 5,5.5,6")
    parser.add_argument("--tasks", type=name_list, default=["add"], help="tasks (default add)")
    parser.add_argument("--lengths", type=int_list, default=[3], help="operand lengths (default 3)")
    parser.add_argument(
        "--groups", choices=GRANULARITIES, default="module", help="the search's groups: module (default) or block"
    )
    parser.add_argument("--search-samples", type=SAMPLES.arg, default=64, help="the search's problems a cell (64)")
    parser.add_argument("--search-seed", type=SEED.arg, default=0, help="the search's calibration seed (default 0)")
    parser.add_argument("--samples", type=SAMPLES.arg, default=1000, help="problems a cell evaluated (default 1000)")
    parser.add_argument("--seed", type=SEED.arg, default=1, help="the evaluation problems' seed (default 1)")
    parser.add_argument("--out", type=output_dir, required=True, help="the frontier's directory")
    return parser


def check_args(args) -> None:
    """What a frontier is asked for, checked before any step runs."""
    if args.seed == args.search_seed:
        raise UserError(
            f"--seed {args.seed} is --search-seed too: a frontier is decided on fresh problems of another seed than "
            "the search's; give another --seed"
        )
    model = get_model(args.model)
    target = get_precision(model, args.precision)
    if target.names_rounding:
        raise UserError(
            f"--precision {args.precision} names its rounding: give the format ({split_rounding(args.precision)[0]}) "
            "and the methods with --methods"
        )
    for method in args.methods:
        get_precision(model, named_rounding(args.precision, method))  # a method the format lacks: one line
    get_precision(model, args.keep)


def extends(before: dict, now: dict) -> bool:
    """Whether a frontier asked with ``now``'s arguments goes on from one made with ``before``'s: the same, or the
    same with more --methods (the methods it has keep their steps; the table is drawn again over all of them).

    >>> extends({"methods": ["rtn"], "seed": 1}, {"methods": ["rtn", "gptq"], "seed": 1})
    True
    >>> extends({"methods": ["rtn", "gptq"], "seed": 1}, {"methods": ["gptq"], "seed": 1})
    False
    """
    others = {key: value for key, value in before.items() if key != "methods"}
    same = others == {key: value for key, value in now.items() if key != "methods"}
    return same and set(before.get("methods") or []) <= set(now.get("methods") or [])


class Steps:
    """The frontier's steps, each a numprec command run as a child process: its output kept under steps/, its time
    recorded, a failure one line (the child's own last line) with the child's exit status."""

    def __init__(self, out: Path, record: dict, bar: tqdm) -> None:
        self.out, self.record, self.bar = out, record, bar
        self.ran: dict[str, float] = {}  # this run's steps and their seconds (record["runs"]: one entry a run)
        record["runs"] = [*record.get("runs", []), {"steps": self.ran}]
        out.mkdir(parents=True, exist_ok=True)
        self.save()  # first, before any step: a run killed in its first step leaves a directory its rerun owns
        (out / "steps").mkdir(exist_ok=True)

    def run(self, name: str, module: str, argv: list[str]) -> None:
        self.bar.set_postfix_str(name)
        fault_point("frontier-step")
        started = time.perf_counter()
        log = self.out / "steps" / f"{name.replace(' ', '-')}.log"
        with open(log, "w", encoding="utf-8") as handle:
            done = subprocess.run(
                [sys.executable, "-m", module, *argv], stdout=handle, stderr=subprocess.STDOUT, check=False,
                env={**os.environ, "TQDM_DISABLE": "1"},
            )  # fmt: skip
        if done.returncode:
            lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
            said = lines[-1].removeprefix("error: ") if lines else "no output"
            raise StepFailed(done.returncode, f"{name}: {said} (its output: {log})")
        self.ran[name] = round(time.perf_counter() - started, 1)
        self.save()

    def save(self) -> None:
        atomic_write_text(self.out / RECORD, json.dumps(self.record, indent=1) + "\n")


class StepFailed(Exception):
    """A step's child process failed: its exit status and its own last line."""

    def __init__(self, code: int, line: str) -> None:
        super().__init__(line)
        self.code = code


def search_points(args, steps: Steps) -> list[FrontierPoint]:
    """Each method's sensitivity search at every budget (one table a method, reused across budgets), and the points
    it gives: uniform TARGET, each budget's recipe and the best rule within its bits where the search chose another."""
    model = get_model(args.model)
    points = [FrontierPoint(REFERENCE, "", "reference", precision="fp32"), FrontierPoint(args.keep, "", "keep",
              precision=get_precision(model, args.keep).name)]  # fmt: skip
    common = ["--model", args.model, "--keep", args.keep, "--tasks", ",".join(args.tasks)]
    common += ["--lengths", ",".join(map(str, args.lengths)), "--samples", str(args.search_samples)]
    common += ["--seed", str(args.search_seed), "--groups", args.groups]
    for method in args.methods:
        target = get_precision(model, named_rounding(args.precision, method)).name
        where = args.out / "search" / method
        points.append(FrontierPoint(target, method, "uniform", precision=target))
        for budget in args.budgets:
            name = f"{budget:g}bits"
            recipes = _recipes(where)
            if name not in recipes:
                argv = [*common, "--precision", target, "--out", str(where), "--budget-bits", f"{budget:g}"]
                steps.run(f"search {target} {name}", "harness.sensitivity", argv)
                recipes = _recipes(where)
            made = recipes[name]
            points.append(FrontierPoint(f"{target} {name}", method, "search", budget, recipe=str(where / made["file"]),
                                        detail=made["source"], searched_bits=made["bits"]))  # fmt: skip
            rule = made.get("best_rule") or {}
            if rule.get("file"):
                points.append(FrontierPoint(f"{target} {name} rule", method, "rule", budget,
                                            recipe=str(where / rule["file"]), detail=rule["name"],
                                            searched_bits=rule["bits"]))  # fmt: skip
    return points


def _recipes(where: Path) -> dict:
    found = where / "sensitivity.json"
    return read_json(found, f"{found} is not harness.sensitivity's").get("recipes", {}) if found.is_file() else {}


def checkpoint_of(args, point: FrontierPoint, steps: Steps) -> Path | None:
    """The point's checkpoint, made now where it is not made yet (a recipe's: where its recipe reads otherwise);
    None for a precision harness.eval runs without one (fp32)."""
    model = get_model(args.model)
    if point.precision:
        precision = get_precision(model, point.precision)
        if not precision.prequantized:
            return None
        made = quantized_dir(model, precision)
        if not (made / PROVENANCE).is_file():
            steps.run(f"quantize {point.key}", "harness.quantize", ["--model", args.model, "--precision", point.key])
        return made
    made = args.out / "checkpoints" / point.key
    recipe = recipe_settings(Path(point.recipe).read_text(encoding="utf-8"))
    made_from = read_json(made / PROVENANCE, str(made)).get("recipe_file") if (made / PROVENANCE).is_file() else None
    if not isinstance(made_from, str) or recipe_settings(made_from) != recipe:  # made from other settings: again
        argv = ["--model", args.model, "--recipe", point.recipe, "--out", str(made)]
        steps.run(f"quantize {point.key}", "harness.quantize", argv)
    return made


def evaluate(args, point: FrontierPoint, checkpoint: Path | None, steps: Steps) -> Path:
    """The point evaluated on --seed's problems by harness.eval (its finished cells reused)."""
    where = args.out / "evals" / point.key
    argv = ["--model", args.model, "--tasks", ",".join(args.tasks), "--lengths", ",".join(map(str, args.lengths))]
    argv += ["--samples", str(args.samples), "--seed", str(args.seed), "--out", str(where)]
    argv += ["--model-path", str(checkpoint)] if point.recipe else ["--precision", point.key]
    if not evaluated(args, where):
        steps.run(f"evaluate {point.key}", "harness.eval", argv)
    return where


def evaluated(args, where: Path) -> bool:
    """Whether ``where`` is a finished run of every asked cell at --samples and --seed (its files checked against
    each other): its evaluation is not started again."""
    if not (where / "results.csv").is_file():
        return False
    try:
        rows = read_finished(where).rows
    except UserError:
        return False  # harness.eval repairs or finishes it, or says why it cannot
    done = {(row.key.task_label, row.length) for row in rows if row.n == args.samples and row.seed == args.seed}
    return {(parse_task(task).label, length) for task in args.tasks for length in args.lengths} <= done


def point_bits(args, point: FrontierPoint, checkpoint: Path | None) -> float:
    """Bits a weight of the quantized layers as the point's checkpoint stores them (harness/models/mix.py for a
    mix; the search's record for a uniform precision); a mix whose checkpoint disagrees with its recipe's bits is one
    line."""
    if checkpoint is None:
        return float(get_precision(get_model(args.model), point.key).weight_bits)
    found = read_checkpoint(checkpoint)
    if found.mix is not None:
        if point.searched_bits is not None and abs(found.mix.bits - point.searched_bits) > 0.01:
            raise UserError(
                f"{checkpoint} stores {found.mix.bits:.3f} bits a weight where its recipe's search computed "
                f"{point.searched_bits:.3f}: the recipe and the checkpoint disagree; move the checkpoint aside and "
                "run the same command again"
            )
        return found.mix.bits
    for method in args.methods:
        bits = read_json(args.out / "search" / method / "sensitivity.json", "a search record").get("bits", {})
        if point.key in bits:
            return float(bits[point.key])
    raise UserError(f"no search of {args.out} records the bits of {point.key}; run the same command again")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    check_args(args)
    record_path = args.out / RECORD
    record = read_json(record_path, f"{args.out} is not a frontier directory") if record_path.is_file() else {}
    own = invocation("harness.frontier", args, argv)
    if record and not extends(record.get("arguments") or {}, own["arguments"]):
        raise UserError(
            f"{args.out} holds a frontier of other arguments (only --methods may add methods to it); give --out "
            "another directory"
        )
    if not record and args.out.exists() and not holds_only_temporaries_of(record_path):
        raise UserError(f"{args.out} holds files harness.frontier did not write; give --out a new or empty directory")
    record = {**record, **own, "written_by": "harness.frontier", "machine": describe()}
    started = time.perf_counter()
    # numprec's own bar: on whatever TQDM_DISABLE the quiet libraries were given
    with tqdm(desc="frontier", unit="step", file=sys.stderr, leave=False, disable=False) as bar:
        steps = Steps(args.out, record, bar)
        try:
            points = search_points(args, steps)
            bar.reset(total=2 * len(points))
            found = {}
            for point in points:
                checkpoint = checkpoint_of(args, point, steps)
                bar.update()
                where = evaluate(args, point, checkpoint, steps)
                found[point.name] = (point, where, point_bits(args, point, checkpoint))
                bar.update()
        except StepFailed as failed:
            print(f"error: {failed}; the same command resumes", file=sys.stderr)
            return failed.code
    record["runs"][-1]["seconds"] = round(time.perf_counter() - started, 1)
    write_frontier(args, points, found, record)
    return 0


def write_frontier(args, points: list[FrontierPoint], found: dict, record: dict) -> None:
    """The paired table, the frontier's rows, its plot and record, and what it says."""
    answers, runs = {}, {}
    for name, (_, where, _) in found.items():
        runs[name] = read_finished(where)  # rows and samples checked against each other
        answers.update(answers_by_series(runs[name].samples, lambda sample, name=name: name, lambda s: s["task"]))
    table = paired_table(answers, points)
    bits = {name: found_bits for name, (_, _, found_bits) in found.items()}
    rows = frontier_rows(points, answers, bits)
    atomic_write_text(args.out / "comparisons.csv", comparisons_csv(table))
    atomic_write_text(args.out / "frontier.csv", rows_csv(rows))
    title = f"{args.model}: {args.precision} by {', '.join(args.methods)}, mixes with {args.keep}"
    atomic_write_bytes(args.out / "frontier.png", points_png(rows, title))
    needed = sample_needed(table, points)
    record["points"] = [dict(vars(point), key=point.key, bits=bits[point.name]) for point in points]
    record["seconds"] = work_seconds(args, points, runs)
    record["needed"] = [{"baseline": row.baseline, "variant": row.variant, "cell": f"{row.task} n={row.length}",
                         "n": row.n, "needed": count, "resolved": row.p_holm < SIGNIFICANCE}
                        for row, count in needed]  # fmt: skip
    atomic_write_text(args.out / RECORD, json.dumps(record, indent=1) + "\n")
    deploy = {row.point: deployment(args, found[row.point][0]) for _, row in best_points(rows, args.budgets)}
    say_best(rows, table, args.budgets, deploy)
    said = resolution_line(needed, args.samples, SIGNIFICANCE)
    if said:
        print(said)
    print(
        f"wrote {args.out}/ (frontier.csv, comparisons.csv, frontier.png, {RECORD}); this run "
        f"{record['runs'][-1]['seconds']:.0f} s"
    )


def deployment(args, point: FrontierPoint) -> str:
    """How a point is served: the harness.eval line that runs it on vLLM here (its loaded layers checked against
    its formats), or vLLM's own one line on why this machine cannot (no CPU kernel for NVFP4: a GPU)."""
    model = get_model(args.model)
    checkpoint = args.out / "checkpoints" / point.key
    mix = read_checkpoint(checkpoint).mix if point.recipe else None
    precision = mix_precision(model, mix, mix.label) if mix else get_precision(model, point.key)
    try:
        check_vllm_kernels(precision)
    except UserError as missing:
        return f"on vLLM: {missing}"
    where = f"--model-path {checkpoint}" if point.recipe else f"--precision {point.key}"
    return f"on vLLM: python -m harness.eval --backend vllm --model {args.model} {where}"


def work_seconds(args, points: list[FrontierPoint], runs: dict) -> dict:
    """What the frontier's work took, read from each step's own record (whatever run of the command did it): each
    method's search (its table and recipes), each checkpoint, each point's evaluation."""
    seconds: dict[str, dict[str, float]] = {"search": {}, "checkpoint": {}, "evaluation": {}}
    for method in args.methods:
        found = read_json(args.out / "search" / method / "sensitivity.json", "a search record")
        spent = sum(found.get("phases", {}).values())
        spent += sum(recipe.get("seconds", 0.0) for recipe in found.get("recipes", {}).values())
        seconds["search"][method] = round(spent, 1)
    model = get_model(args.model)
    for point in points:
        where = quantized_dir(model, get_precision(model, point.key)) if point.precision else (
            args.out / "checkpoints" / point.key)  # fmt: skip
        if (where / PROVENANCE).is_file():
            seconds["checkpoint"][point.name] = read_json(where / PROVENANCE, str(where)).get("seconds")
        seconds["evaluation"][point.name] = round(sum(row.wall_s for row in runs[point.name].rows), 1)
    return seconds


def rows_csv(rows: list) -> str:
    return csv_text(rows, COLUMNS, {"bits": 4, "accuracy": 4, "low": 4, "high": 4})


if __name__ == "__main__":
    run(main)
