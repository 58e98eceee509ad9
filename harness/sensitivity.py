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
import sys
import time
from argparse import ArgumentTypeError
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from harness.backends.hf import HFBackend
from harness.core.bounds import SAMPLES, SEED
from harness.core.cli import ArgParser, int_list, invocation, name_list, output_dir, run
from harness.core.errors import UserError
from harness.core.files import atomic_write_bytes, atomic_write_text, read_json
from harness.core.machine import describe
from harness.models import PrecisionSpec, get_model, get_precision
from harness.models.weights import variant_weights
from harness.questions.problems import HELD_OUT_COUNT, generate, heldout_problems, parse_task
from harness.recipes.bits import mean_bits, precision_bits
from harness.recipes.confirm import equal_bits_variants, paired_table, problems_needed
from harness.recipes.frontier import frontier_png, recipe_name
from harness.recipes.groups import GRANULARITIES, groups_of
from harness.recipes.mixer import Mixer
from harness.recipes.recipe_file import mix_recipe
from harness.recipes.search import Choice, choose, fewest, ranked
from harness.recipes.table import effects, fill_table, heatmap_png, jobs, jobs_left, read_table
from harness.recipes.teacher import score, teacher_batch
from harness.runs.compare import comparisons_csv, paired_difference_interval

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
    recipe = parser.add_mutually_exclusive_group()
    recipe.add_argument(
        "--budget-bits", type=float, help="also choose the groups to keep within this many bits a weight (a recipe)"
    )
    recipe.add_argument(
        "--margin", type=margin_arg, help="or the fewest bits whose exact match at the longest length stays within "
        "this difference of fp32's on the search problems (0.02: two points)",
    )  # fmt: skip
    parser.add_argument(
        "--rank", choices=list(RANKINGS), default="restore-one", help="the scoring a recipe ranks groups by: "
        "restore one's gain (default) or quantize one's cost (where the target is far off, restoring one group "
        "alone barely moves it)",
    )  # fmt: skip
    parser.add_argument(
        "--confirm-seed", type=SEED.arg, help="confirm the recipe on this seed's evaluation problems (paired vs fp32)"
    )
    parser.add_argument("--confirm-samples", type=SAMPLES.arg, default=200, help="problems a cell to confirm on")
    parser.add_argument("--out", type=output_dir, required=True, help="the directory of the table")
    return parser


# A ranking: the table's effect it orders groups by (harness.recipes.table.effects) and how a recipe's note says it.
RANKINGS = {"restore-one": ("gain", "restore-one gains"), "quantize-one": ("cost", "quantize-one costs")}


def margin_arg(text: str) -> float:
    """--margin: a difference in exact match between 0 and 1 (0.02 is two points)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1:
        raise ArgumentTypeError(f"a difference in exact match between 0 and 1 (0.02: two points), not {text}")
    return value


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
    if args.confirm_seed is not None and args.budget_bits is None and args.margin is None:
        raise UserError("--confirm-seed confirms a recipe: give --budget-bits B or --margin D as well")
    model = get_model(args.model)
    target, keep = get_precision(model, args.precision), get_precision(model, args.keep)
    check_precisions(model, target, keep)
    weights = {precision.name: variant_weights(model, precision) for precision in (target, keep)}
    checkpoints = {name: Path(path).name for name, path in weights.items()}
    key = search_key(args, model, target, keep, checkpoints)
    record = check_out(args.out, key)
    phases: dict[str, float] = dict(record.get("phases", {}))

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
    if args.budget_bits is not None and args.budget_bits < summary[target.name]:
        raise UserError(
            f"--budget-bits {args.budget_bits} is below what {target.name} itself takes ({summary[target.name]:.3f} "
            "bits a weight, every group at it); give a budget of at least that"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    own = {"written_by": "harness.sensitivity", **invocation("harness.sensitivity", args, argv), "search": key}
    atomic_write_text(args.out / RECORD, json.dumps({**record, **own}, indent=1) + "\n")  # first: the table's owner

    started = time.perf_counter()
    table = args.out / "table.csv"
    every = jobs(groups, mixer.layers)
    todo = jobs_left(every, table, len(set(batch.cells)))
    # numprec's own bar, shown while there is scoring to do, whatever TQDM_DISABLE the quiet libraries were given;
    # a resumed table's jobs start it counted as done
    progress = {"total": len(every), "initial": len(every) - len(todo), "disable": not todo}
    with tqdm(
        desc=f"scoring {len(groups)} groups two ways", unit="model", leave=False, file=sys.stderr, **progress
    ) as bar:
        fill_table(mixer, todo, batch, backend.pad_id, table, bar.update)
    phases["table"] = phases.get("table", 0.0) + time.perf_counter() - started

    started = time.perf_counter()
    rows = read_table(table)
    title = f"{model.name}: {target.name} with one group at {keep.name} ({', '.join(args.tasks)}; n {args.lengths})"
    atomic_write_bytes(args.out / "heatmap.png", heatmap_png(rows, title))
    phases["draw"] = time.perf_counter() - started
    own |= {"phases": phases, "bits": summary, "groups": len(groups), "problems": len(batch.rows)}
    own["machine"] = describe()
    own["recipes"] = record.get("recipes", {})  # the earlier recipes stay whatever this one's search comes to
    atomic_write_text(args.out / RECORD, json.dumps(own, indent=1) + "\n")
    say(rows, phases, summary, args.out)
    if args.budget_bits is not None or args.margin is not None:
        mix = Mix(model.name, target, keep, [layer for layer in quantized if layer in bits[keep.name]], shapes, bits)
        made = write_recipe(args, mix, mixer, groups, rows, batch)
        own["recipes"] = {**record.get("recipes", {}), made["name"]: made}
        if any(recipe.get("confirmed") for recipe in own["recipes"].values()):
            title = f"{model.name}: mixes of {target.name} and {keep.name}, confirmed against fp32"
            atomic_write_bytes(args.out / "frontier.png", frontier_png(own["recipes"], title))
        atomic_write_text(args.out / RECORD, json.dumps(own, indent=1) + "\n")
    return 0


@dataclass(frozen=True)
class Mix:
    """What a recipe mixes: the model, the two precisions, the layers the target quantizes, their shapes and each
    precision's stored bits a layer."""

    model: str
    target: PrecisionSpec
    keep: PrecisionSpec
    layers: list[str]
    shapes: dict
    bits: dict


def write_recipe(args, mix: Mix, mixer: Mixer, groups: list, rows: list[dict], batch) -> dict:
    """The groups to keep within --budget-bits, or the fewest bits within --margin of fp32 (harness/recipes/search.py),
    the mix scored as a whole on the search's problems, and the llm-compressor recipe that makes it
    (recipe-Bbits.yaml, recipe-margin-D.yaml)."""
    members = {group.name: [layer for layer in group.layers if layer in mix.layers] for group in groups}
    found = effects(rows)
    field, said = RANKINGS[args.rank]
    gains = {name: values[field] for name, values in found.items()}
    target_bits, keep_bits = mix.bits[mix.target.name], mix.bits[mix.keep.name]
    wanted = args.margin is not None or args.confirm_seed is not None
    reference = reference_model(mix.model) if wanted else None  # fp32, loaded once for the search and confirmation
    if args.margin is None:
        choice = choose(members, gains, target_bits, keep_bits, mix.shapes, args.budget_bits)
        name, how = f"{args.budget_bits:g}bits", f"within {args.budget_bits:g} bits"
    else:
        order = ranked(members, gains, target_bits, keep_bits, mix.shapes)
        choice = margin_choice(args, mix, mixer, members, order, batch, reference)
        name, how = f"margin-{args.margin:g}", f"as the fewest bits within --margin {args.margin} of fp32"
    name = recipe_name(name, args.rank)
    kept = [layer for group in choice.kept for layer in members[group]]
    mixer.use(kept)
    scores = score(mixer.model, batch, _pad(mixer))
    mixer.use(())
    exact, logprob = scores.exact.double().mean().item(), scores.logprob.mean().item()
    note = (
        f"numprec recipe: {mix.model} at {mix.target.name}, {len(choice.kept)} groups ({len(kept)} of "
        f"{len(mix.layers)} layers) at {mix.keep.name}: {choice.bits:.3f} bits a weight of the quantized layers\n"
        f"chosen by harness.sensitivity {how} from {said} on seed "
        f"{args.seed}'s calibration problems ({', '.join(args.tasks)}; n {args.lengths}; {args.samples} a cell)\n"
        f"on those problems: exact {exact:.3f}, answer log-prob {logprob:.3f}; not yet confirmed on fresh problems\n"
        f"kept: {', '.join(choice.kept) or 'none'}"
    )
    ignore = [layer for layer in mixer.layers if layer not in mix.layers]
    target_layers = [layer for layer in mix.layers if layer not in set(kept)]
    text = mix_recipe(mix.target, mix.keep, target_layers, kept, ignore, note)
    path = args.out / f"recipe-{name}.yaml"
    atomic_write_text(path, text)
    print(f"recipe {how}: keep {named(choice.kept, len(members))} at {mix.keep.name}")
    print(f"  {choice.bits:.3f} bits a weight; on the search problems exact {exact:.3f}, log-prob {logprob:.3f}")
    print(f"wrote {path}")
    made = {"name": name, "kept": choice.kept, "layers": len(kept), "bits": choice.bits, "exact": exact,
            "logprob": logprob, "file": path.name}  # fmt: skip
    if args.confirm_seed is not None:
        made["confirmed"] = confirm_recipe(args, mix, mixer, members, found, (choice, name), reference)
    return made


def named(kept: list[str], groups: int) -> str:
    """The kept groups for a line: all of them by name up to a dozen, else the first dozen and how many.

    >>> named(["block 0 o"], 4), named([f"g{i}" for i in range(4)], 4), named([f"g{i}" for i in range(13)], 40)
    ('block 0 o', 'every group (4)', 'g0, g1, g2, g3, g4, g5, g6, g7, g8, g9, g10, g11 and 1 more (13 groups)')
    """
    if not kept:
        return "nothing"
    if len(kept) == groups:
        return f"every group ({groups})"
    if len(kept) <= 12:
        return ", ".join(kept)
    return f"{', '.join(kept[:12])} and {len(kept) - 12} more ({len(kept)} groups)"


def margin_choice(args, mix: Mix, mixer: Mixer, members: dict, order: list[str], batch, fp32: HFBackend) -> Choice:
    """The fewest bits whose exact match stays within --margin of fp32's in every cell of the longest length, on the
    search problems: the prefixes of the budget's order (and every group kept, last) bisected, each mix scored
    whole. None meeting it is one line naming the best found; the problems a confirmation needs are said."""
    longest = max(args.lengths)
    cells = [cell for cell in dict.fromkeys(batch.cells) if cell[1] == longest]
    rows_of = {cell: [index for index, found in enumerate(batch.cells) if found == cell] for cell in cells}
    reference = score(fp32.model, batch, _pad(mixer)).exact
    candidates = [order[:count] for count in range(len(order) + 1)]
    if set(order) != set(members):
        candidates.append(list(members))
    seen: dict[int, torch.Tensor] = {}

    def exact_of(index: int) -> torch.Tensor:
        if index not in seen:
            mixer.use([layer for group in candidates[index] for layer in members[group]])
            seen[index] = score(mixer.model, batch, _pad(mixer)).exact
            mixer.use(())
        return seen[index]

    def shortfall(hits: torch.Tensor) -> float:  # the most any longest cell falls below fp32's exact match
        return max(float(reference[rows].double().mean() - hits[rows].double().mean()) for rows in rows_of.values())

    index = fewest(range(len(candidates)), lambda index: shortfall(exact_of(index)) <= args.margin + 1e-12)
    bits = lambda names: bits_of(mix, members, names)  # noqa: E731
    if index is None:
        best = min(seen, key=lambda index: shortfall(seen[index]))
        raise UserError(
            f"no mix of {mix.target.name} and {mix.keep.name} keeps exact match at n={longest} within {args.margin} "
            f"of fp32 on the search's {args.samples} problems a cell: the best found ({len(candidates[best])} groups "
            f"kept, {bits(candidates[best]):.2f} bits) falls {shortfall(seen[best]):.3f} short; give a larger --margin "
            "or a higher --keep"
        )
    chosen = exact_of(index)
    rows = [row for cell_rows in rows_of.values() for row in cell_rows]
    discordance = float((chosen[rows] != reference[rows]).double().mean())
    needed = problems_needed(discordance, args.margin) if discordance else 0
    print(
        f"the fewest bits within {args.margin} of fp32 at n={longest}: {bits(candidates[index]):.3f} ({len(seen)} "
        f"mixes scored); a {args.margin} margin needs about {needed} paired problems a cell to be tested at the "
        f"discordance seen ({discordance:.3f}): confirm with --confirm-seed S --confirm-samples {max(needed, 1)}"
    )
    return Choice(candidates[index], bits(candidates[index]))


def bits_of(mix: Mix, members: dict, names: list[str]) -> float:
    """The bits a weight of the quantized layers with ``names``'s groups kept."""
    held = {layer for name in names for layer in members[name]}
    stored = {layer: mix.bits[(mix.keep if layer in held else mix.target).name][layer] for layer in mix.layers}
    return mean_bits(stored, mix.shapes, mix.layers)


def reference_model(model_name: str) -> HFBackend:
    """fp32, what a recipe is measured against."""
    model = get_model(model_name)
    fp32 = get_precision(model, "fp32")
    return HFBackend(variant_weights(model, fp32), fp32)


def confirm_recipe(args, mix: Mix, mixer: Mixer, members: dict, found: dict, recipe: tuple, reference) -> dict:
    """The recipe (its Choice and name), uniform TARGET and KEEP, and the heuristic, random and quantize-one choices
    at its bits, scored on --confirm-seed's evaluation problems and paired against fp32 (``reference``; see
    harness/recipes/confirm.py)."""
    choice, name = recipe
    problems = [
        (parse_task(label).label, problem)
        for label in args.tasks
        for length in args.lengths
        for problem in generate(parse_task(label), 10, length, args.confirm_samples, args.confirm_seed)
    ]
    batch = teacher_batch(reference.tokenizer, reference.chat_prompt, problems)
    target_bits, keep_bits = mix.bits[mix.target.name], mix.bits[mix.keep.name]
    budget = choice.bits if args.margin is not None else args.budget_bits
    bits = lambda names: bits_of(mix, members, names)  # noqa: E731
    other = next(rank for rank in RANKINGS if rank != args.rank)
    scores = {group: values[RANKINGS[other][0]] for group, values in found.items()}
    others = equal_bits_variants(
        members, (other, scores), bits, budget, len(mixer.model.model.layers), args.confirm_seed,
        lambda gains: choose(members, gains, target_bits, keep_bits, mix.shapes, budget),
    )  # fmt: skip
    kept_by = {f"{mix.target.name}": [], f"recipe {choice.bits:.2f} bits": choice.kept, **others,
               f"{mix.keep.name}": list(members)}  # fmt: skip
    correct = {"fp32": score(reference.model, batch, _pad(mixer)).exact}
    for variant, names in kept_by.items():
        mixer.use([layer for group in names for layer in members[group]])
        correct[variant] = score(mixer.model, batch, _pad(mixer)).exact
    mixer.use(())
    table = paired_table(correct, batch.cells, "fp32")
    atomic_write_text(args.out / f"confirm-{name}.csv", comparisons_csv(table))
    return say_confirmed(table, {variant: bits(names) for variant, names in kept_by.items()}, args)


def say_confirmed(table: list, bits: dict, args) -> dict:
    """The paired table against fp32, and the problems a 2-point margin would need at the discordance seen."""
    print(f"confirmed on seed {args.confirm_seed}'s evaluation problems ({args.confirm_samples} a cell), against fp32:")
    for row in table:
        print(
            f"  {row.variant:28} {bits.get(row.variant, 0):5.2f} bits  {row.task} n={row.length}: "
            f"{row.variant_accuracy:.3f} vs {row.baseline_accuracy:.3f}, difference {row.difference:+.3f} "
            f"[{row.diff_low:+.3f}, {row.diff_high:+.3f}], Holm p {row.p_holm:.3g}"
        )
    recipe = next(row for row in table if row.variant.startswith("recipe"))
    discordance = (recipe.only_baseline + recipe.only_variant) / max(1, recipe.n)
    needed = problems_needed(discordance, 0.02) if discordance else 0
    print(
        f"  a 2-point margin against fp32 needs about {needed} paired problems a cell at the discordance seen here "
        f"({discordance:.3f}); this sample has {recipe.n}: {'testable' if recipe.n >= needed else 'not testable'}"
    )
    verdicts = margin_verdicts(table, args.margin, max(args.lengths)) if args.margin is not None else []
    for verdict in verdicts:
        print(
            f"  margin {args.margin} at {verdict['cell']}: {verdict['verdict']} (one-sided 95% bound "
            f"{verdict['bound']:+.3f}; {verdict['needed']} problems test it, this sample has {verdict['n']})"
        )
    return {"seed": args.confirm_seed, "samples": args.confirm_samples, "needed_for_2_points": needed,
            "margin": verdicts,
            "rows": [{"variant": row.variant, "bits": bits.get(row.variant), "accuracy": row.variant_accuracy,
                      "difference": row.difference, "low": row.diff_low, "high": row.diff_high,
                      "p_holm": row.p_holm} for row in table]}  # fmt: skip


def margin_verdicts(table: list, margin: float, longest: int) -> list[dict]:
    """Whether the recipe stays within ``margin`` of fp32 in each cell of the longest length: held where the
    one-sided 95% paired bound (Newcombe's interval at 90%) is above -margin and the sample can test the margin at
    the discordance it shows; never called held where it cannot."""
    found = []
    for row in table:
        if not row.variant.startswith("recipe") or int(row.length) != longest:
            continue
        bound = paired_difference_interval(row.both_correct, row.only_baseline, row.only_variant, row.neither, 0.90)[0]
        discordance = (row.only_baseline + row.only_variant) / max(1, row.n)
        needed = problems_needed(discordance, margin) if discordance else 0
        verdict = "not testable" if row.n < needed else "held" if bound >= -margin else "not held"
        found.append({"cell": f"{row.task} n={row.length}", "verdict": verdict, "bound": bound, "needed": needed,
                      "n": row.n})  # fmt: skip
    return found


def _pad(mixer: Mixer) -> int:
    config = mixer.model.config
    return config.pad_token_id if config.pad_token_id is not None else config.eos_token_id


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
