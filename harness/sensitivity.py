"""Which layer groups cost the arithmetic at a target format: each group scored on the task's own problems.

    python -m harness.sensitivity --model smollm2-arith --precision nvfp4 --keep fp8-dynamic --out runs/sens-nvfp4
    python -m harness.sensitivity --precision mxfp4 --keep bf16 --groups block --tasks add,mul --lengths 2,3 --out D

Each group (a block's q/k/v, o, gate/up, down; or whole blocks) is scored two ways, restore one (everything at
TARGET, this group at KEEP) and quantize one (only this group at TARGET), by the teacher-forced log-probability of the
gold answer and its exact match (harness/recipes/). The problems come from the calibration stream of --seed, never
the evaluation's. Both precisions' checkpoints are the ones harness.eval loads (harness.quantize makes them).
Writes table.csv (appended as it goes: the same command resumes a killed one, and reuses a finished one), heatmap.png
and sensitivity.json (what the table was computed for, each phase's time, the layers' stored bits).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from harness.backends.hf import HFBackend
from harness.core.bounds import SAMPLES, SEED
from harness.core.cli import ArgParser, int_list, invocation, name_list, output_dir, run
from harness.core.errors import UserError
from harness.core.files import atomic_write_bytes, atomic_write_text, read_json
from harness.core.machine import describe
from harness.models import get_model, get_precision
from harness.models.weights import variant_weights
from harness.questions.problems import HELD_OUT_COUNT, heldout_problems, parse_task
from harness.recipes.bits import mean_bits, precision_bits
from harness.recipes.groups import GRANULARITIES, groups_of
from harness.recipes.mixer import Mixer
from harness.recipes.table import effects, fill_table, heatmap_png, jobs, read_table
from harness.recipes.teacher import teacher_batch

RECORD = "sensitivity.json"
RUNS_ON = ("cast", "compressed")  # what the transformers backend loads layer by layer


def parser() -> ArgParser:
    parser = ArgParser(prog="python -m harness.sensitivity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-arith", help="a registry model (default smollm2-arith)")
    parser.add_argument("--precision", required=True, help="the target format, e.g. nvfp4, mxfp4, w4a8")
    parser.add_argument("--keep", required=True, help="the higher precision a group keeps, e.g. fp8-dynamic, bf16")
    parser.add_argument("--tasks", type=name_list, default=["add"], help="tasks scored (default add)")
    parser.add_argument("--lengths", type=int_list, default=[3], help="operand lengths (default 3)")
    parser.add_argument("--samples", type=SAMPLES.arg, default=64, help="problems per task and length (default 64)")
    parser.add_argument("--seed", type=SEED.arg, default=0, help="the calibration problems' seed (default 0)")
    parser.add_argument("--groups", choices=GRANULARITIES, default="module", help="module groups or whole blocks")
    parser.add_argument("--out", type=output_dir, required=True, help="the directory of the table")
    return parser


def check_precisions(model, target, keep) -> None:
    """TARGET a compressed format, KEEP a higher precision the transformers backend runs layer by layer."""
    for role, precision in (("--precision", target), ("--keep", keep)):
        if precision.method not in RUNS_ON or precision.kv_cache != "auto":
            raise UserError(
                f"{role} {precision.name} is not a format harness.sensitivity mixes layer by layer: give a "
                "compressed-tensors format (nvfp4, mxfp4, fp8-dynamic, w8a8-int8, ...) or bf16 / fp32"
            )
    if target.method != "compressed":
        raise UserError(f"--precision {target.name} is not a quantized format; give the format to deploy (nvfp4, ...)")
    if keep.weight_bits <= target.weight_bits:
        raise UserError(
            f"--keep {keep.name} ({keep.weight_bits}-bit weights) is not higher than --precision {target.name} "
            f"({target.weight_bits}-bit): KEEP is what a group is restored to; give fp8-dynamic, bf16 or fp32"
        )


def search_key(args, model, target, keep, checkpoints: dict) -> dict:
    """What a table is computed for: another key is another table."""
    return {
        "model": model.name, "precision": target.name, "keep": keep.name, "tasks": args.tasks,
        "lengths": args.lengths, "samples": args.samples, "seed": args.seed, "groups": args.groups,
        "checkpoints": checkpoints,
    }  # fmt: skip


def check_out(out: Path, key: dict) -> dict:
    """--out new, empty, or a table of this same search (its record is returned, to resume or reuse)."""
    if not out.exists() or not any(out.iterdir()):
        return {}
    record = {}
    if (out / RECORD).is_file():
        record = read_json(out / RECORD, f"{out} is not a directory harness.sensitivity made")
    if record.get("written_by") != "harness.sensitivity":
        raise UserError(f"{out} holds files harness.sensitivity did not write; give --out a new or empty directory")
    if record.get("search") != key:
        differ = [name for name in key if record.get("search", {}).get(name) != key[name]]
        raise UserError(
            f"{out} holds the table of another search ({', '.join(differ)} differ); give --out another directory"
        )
    return record


def problems_of(args) -> list:
    """The calibration stream's problems of every task and length (never among the evaluation's first
    HELD_OUT_COUNT)."""
    found = []
    for label in args.tasks:
        task = parse_task(label)
        for length in args.lengths:
            drawn, _ = heldout_problems(task, 10, length, args.samples, args.seed, HELD_OUT_COUNT, "calibration")
            found += [(task.label, problem) for problem in drawn]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    model = get_model(args.model)
    target, keep = get_precision(model, args.precision), get_precision(model, args.keep)
    check_precisions(model, target, keep)
    weights = {precision.name: variant_weights(model, precision) for precision in (target, keep)}
    checkpoints = {name: Path(path).name for name, path in weights.items()}
    key = search_key(args, model, target, keep, checkpoints)
    record = check_out(args.out, key)
    args.out.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = dict(record.get("phases", {}))
    own = {"written_by": "harness.sensitivity", **invocation("harness.sensitivity", args, argv), "search": key}
    atomic_write_text(args.out / RECORD, json.dumps({**record, **own}, indent=1) + "\n")  # first: the table's owner

    started = time.perf_counter()
    loaded = {precision.name: HFBackend(weights[precision.name], precision) for precision in (target, keep)}
    mixer = Mixer(loaded[target.name].model, loaded[keep.name].model, target.name, keep.name)
    backend = loaded[target.name]
    groups = groups_of(mixer.model, args.groups, lm_head=bool(mixer.quantized(["lm_head"])))
    batch = teacher_batch(backend.tokenizer, backend.chat_prompt, problems_of(args))
    phases["load"] = time.perf_counter() - started

    shapes = {name: (layer.out_features, layer.in_features) for name, layer in mixer.own.items()}
    quantized = mixer.quantized(list(shapes))
    bits = {
        name: precision_bits(precision, Path(weights[name]) if precision.method != "cast" else None, shapes)
        for name, precision in ((target.name, target), (keep.name, keep))
    }
    summary = {name: round(mean_bits(found, shapes, [layer for layer in quantized if layer in found]), 4)
               for name, found in bits.items()}  # fmt: skip

    started = time.perf_counter()
    table = args.out / "table.csv"
    total = len(jobs(groups, mixer.layers))
    with tqdm(total=total, desc=f"scoring {len(groups)} groups two ways", unit="model", leave=False) as bar:
        fill_table(mixer, groups, batch, backend.pad_id, table, bar.update)
    phases["table"] = phases.get("table", 0.0) + time.perf_counter() - started

    started = time.perf_counter()
    rows = read_table(table)
    title = f"{model.name}: {target.name} with one group at {keep.name} ({', '.join(args.tasks)}; n {args.lengths})"
    atomic_write_bytes(args.out / "heatmap.png", heatmap_png(rows, title))
    phases["draw"] = time.perf_counter() - started
    own |= {"phases": phases, "bits": summary, "groups": len(groups), "problems": len(batch.rows)}
    own["machine"] = describe()
    atomic_write_text(args.out / RECORD, json.dumps(own, indent=1) + "\n")
    say(rows, phases, summary, args.out)
    return 0


def say(rows: list[dict], phases: dict, bits: dict, out: Path) -> None:
    """The groups that matter, named, and each phase's time."""
    found = effects(rows)
    ranked = sorted(found, key=lambda group: found[group]["gain"], reverse=True)
    uniform = []
    for scoring in ("uniform-target", "uniform-keep"):
        own = [row for row in rows if row["scoring"] == scoring]
        n = sum(row["n"] for row in own)
        exact, logprob = (sum(row[field] * row["n"] for row in own) / n for field in ("exact", "logprob"))
        uniform.append(f"{scoring} exact {exact:.3f}, answer log-prob {logprob:.2f}")
    print("; ".join(uniform))
    print("restoring one group buys most (answer log-prob, nats; exact match):")
    for group in ranked[:6]:
        print(f"  {group}: +{found[group]['gain']:.3f} ({found[group]['gain_exact']:+.3f})")
    costly = sorted(found, key=lambda group: found[group]["cost"], reverse=True)[:6]
    print("quantizing one group alone costs most: " + ", ".join(f"{g} {found[g]['cost']:.3f}" for g in costly))
    times = ", ".join(f"{phase} {seconds:.0f} s" for phase, seconds in phases.items())
    print(f"bits a weight (quantized layers): {bits}; {times}")
    print(f"wrote {out}/ (table.csv, heatmap.png, {RECORD})")


if __name__ == "__main__":
    run(main)
