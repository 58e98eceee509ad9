"""Which layer groups cost the arithmetic at a target format: each group scored on the task's own problems.

    python -m harness.sensitivity --model smollm2-arith --precision nvfp4 --keep fp8-dynamic --out runs/sens-nvfp4
    python -m harness.sensitivity --precision mxfp4 --keep bf16 --groups block --tasks add,mul --lengths 2,3 --out D

Each group (a block's q/k/v, o, gate/up, down; or whole blocks) is scored two ways, restore one (everything at
TARGET, this group at KEEP) and quantize one (only this group at TARGET), by the teacher-forced log-probability of the
gold answer and its exact match (harness/recipes/). The problems come from the calibration stream of --seed, never
the evaluation's. Both precisions' checkpoints are the ones harness.eval loads (harness.quantize makes them).
Writes table.csv (appended as it goes: the same command resumes a killed one, and reuses a finished one), heatmap.png
and sensitivity.json (what the table was computed for, each phase's time, the layers' stored bits). A recipe's search
appends each mix it scores to mixes.jsonl, which another budget's search of the same table reads back.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from argparse import ArgumentTypeError
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from harness.backends.hf import HFBackend
from harness.core.bounds import SAMPLES, SEARCH_GROUPS, SEED
from harness.core.cli import ArgParser, int_list, invocation, name_list, output_dir, run
from harness.core.errors import UserError
from harness.core.files import atomic_write_bytes, atomic_write_text, holds_only_temporaries_of, read_json, replace_text
from harness.core.machine import describe
from harness.models import get_model, get_precision, named_rounding
from harness.models.checkpoints import checkpoint_digest
from harness.models.rounding import ROUNDINGS
from harness.models.weights import variant_weights
from harness.questions.problems import HELD_OUT_COUNT, generate, heldout_problems, parse_task
from harness.questions.prompts import user_message
from harness.recipes.bits import MixSpace, mean_bits, precision_bits
from harness.recipes.confirm import equal_bits_variants, margin_verdicts, paired_table, problems_needed
from harness.recipes.frontier import frontier_png, recipe_name
from harness.recipes.groups import GRANULARITIES, groups_of
from harness.recipes.margin import Margin
from harness.recipes.mix_scores import MixScores
from harness.recipes.mix_search import CANDIDATES, Found, MixSearch, no_mix_meets
from harness.recipes.mixer import Mixer
from harness.recipes.recipe_file import mix_recipe
from harness.recipes.rules import rules
from harness.recipes.table import effects, fill_table, heatmap_png, jobs, jobs_left, read_table
from harness.recipes.teacher import score, teacher_batch
from harness.runs.compare import comparisons_csv

RECORD = "sensitivity.json"
MIXES = "mixes.jsonl"  # the search's mixes scored whole, per problem (harness/recipes/mix_scores.py)
RUNS_ON = ("cast", "compressed")  # what the transformers backend loads layer by layer


def parser() -> ArgParser:
    parser = ArgParser(prog="python -m harness.sensitivity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-arith", help="a registry model (default smollm2-arith)")
    parser.add_argument("--precision", required=True, help="the target format, e.g. nvfp4, mxfp4, w4a8")
    parser.add_argument(
        "--rounding", choices=list(ROUNDINGS), metavar="METHOD", help=f"how the target's weights are rounded: "
        f"{', '.join(ROUNDINGS)} (default: the format's own; or --precision nvfp4+gptq)",
    )  # fmt: skip
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
        "--rank", choices=list(RANKINGS), default="restore-one", help="the scoring the search takes its candidate "
        "groups by: restore one's gain (default) or quantize one's cost (where the target is far off, restoring one "
        "group alone barely moves it)",
    )  # fmt: skip
    parser.add_argument(
        "--candidates", type=SEARCH_GROUPS.arg, default=CANDIDATES, help="the table's top groups each step of the "
        f"search tries beside the rules (default {CANDIDATES})",
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
        "checkpoints": checkpoints, "prompts": prompts_digest(problems_of(args)),
    }  # fmt: skip


def check_out(out: Path, key: dict) -> dict:
    """--out new, empty, or a table of this same search (its record is returned, to resume or reuse)."""
    if not out.exists() or holds_only_temporaries_of(out / RECORD):
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


def prompts_digest(problems: list) -> str:
    """A digest of the search's user messages and answers: problems or prompts changed since are another table."""
    text = json.dumps([(label, user_message(problem), problem.answer) for label, problem in problems])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
    target = get_precision(model, named_rounding(args.precision, args.rounding))
    keep = get_precision(model, args.keep)
    check_precisions(model, target, keep)
    weights = {precision.name: variant_weights(model, precision) for precision in (target, keep)}
    # a checkpoint by its contents: a table of a checkpoint since made again (other code, other calibration) is
    # another table, never reused as this one's
    checkpoints = {name: f"{Path(path).name} {checkpoint_digest(path)}" for name, path in weights.items()}
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
        layers = tuple(layer for layer in quantized if layer in bits[keep.name])
        members = {group.name: tuple(layer for layer in group.layers if layer in layers) for group in groups}
        space = MixSpace(target.name, keep.name, layers, shapes, bits, members)
        made = write_recipe(args, model.name, space, (target, keep), mixer, groups, rows, batch)
        own["recipes"] = {**record.get("recipes", {}), made["name"]: made}
        if any(recipe.get("confirmed") for recipe in own["recipes"].values()):
            title = f"{model.name}: mixes of {target.name} and {keep.name}, confirmed against fp32"
            atomic_write_bytes(args.out / "frontier.png", frontier_png(own["recipes"], title))
        atomic_write_text(args.out / RECORD, json.dumps(own, indent=1) + "\n")
    return 0


def write_recipe(args, model: str, space: MixSpace, precisions: tuple, mixer: Mixer, groups: list, rows: list, batch):
    """The best mix within --budget-bits, or the fewest bits within --margin of fp32, searched on the whole mix
    (harness/recipes/mix_search.py) on the search's problems, and the llm-compressor recipe that makes it
    (recipe-Bbits.yaml, recipe-margin-D.yaml)."""
    target, keep = precisions
    field, said = RANKINGS[args.rank]
    gains = {name: values[field] for name, values in effects(rows).items()}
    wanted = args.margin is not None or args.confirm_seed is not None
    reference = reference_model(model) if wanted else None  # fp32, loaded once for the search and confirmation
    started = time.perf_counter()
    with tqdm(desc="scoring mixes whole", unit="mix", leave=False, file=sys.stderr, disable=False) as bar:
        # the mixes scored are kept in --out: another budget's search, or this one after a kill, reads them back
        mixes = MixScores(mixer, batch, _pad(mixer), lambda: bar.update(), store=args.out / MIXES)
        search = MixSearch(space, mixes, rules(groups), gains, args.candidates)
        if args.margin is None:
            found = search.within(args.budget_bits)
            name, how = f"{args.budget_bits:g}bits", f"within {args.budget_bits:g} bits"
        else:
            found = margin_found(args, search, batch, reference)
            name, how = f"margin-{args.margin:g}", f"as the fewest bits within --margin {args.margin} of fp32"
    name = recipe_name(name, args.rank)
    kept = space.layers_of(found.kept)
    rule = f"; the best rule within its bits, {found.best_rule[0]}: exact {found.best_rule[2].exact:.3f}" if (
        found.best_rule) else "; no rule fits its bits"  # fmt: skip
    note = (
        f"numprec recipe: {model} at {target.name}, {len(found.kept)} groups ({len(kept)} of {len(space.layers)} "
        f"layers) at {keep.name}: {found.bits:.3f} bits a weight of the quantized layers\n"
        f"chosen by harness.sensitivity {how}, the mix scored whole ({found.scored} mixes; rules and the top "
        f"{args.candidates} groups by {said}) on seed {args.seed}'s calibration problems ({', '.join(args.tasks)}; "
        f"n {args.lengths}; {args.samples} a cell); found by the {found.source}\n"
        f"on those problems: exact {found.point.exact:.3f}, answer log-prob {found.point.logprob:.3f}{rule}; not yet "
        f"confirmed on fresh problems\nkept: {', '.join(found.kept) or 'none'}"
    )
    path = args.out / f"recipe-{name}.yaml"
    write_mix(path, space, precisions, mixer.layers, found.kept, note)
    print(f"recipe {how}: keep {named(list(found.kept), len(space.members))} at {keep.name} ({found.source})")
    print(f"  {found.bits:.3f} bits a weight; on the search problems exact {found.point.exact:.3f}, log-prob "
          f"{found.point.logprob:.3f} ({found.scored} mixes scored){rule}")  # fmt: skip
    print(f"wrote {path}")
    made = {"name": name, "kept": list(found.kept), "layers": len(kept), "bits": found.bits,
            "exact": found.point.exact, "logprob": found.point.logprob, "file": path.name, "source": found.source,
            "scored": found.scored, "computed": mixes.passes, "best_rule": best_rule_record(space, found),
            "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    if made["best_rule"] is not None and set(found.best_rule[1]) != set(found.kept):
        # the simple alternative a frontier pairs the recipe against, as a checkpoint of its own
        rule_name, groups, _ = found.best_rule
        rule_path = args.out / f"recipe-{name}-rule.yaml"
        rule_note = (
            f"numprec recipe: {model} at {target.name}, the rule {rule_name!r} at {keep.name}: "
            f"{space.bits(groups):.3f} bits a weight of the quantized layers\nthe best rule within "
            f"{found.bits:.3f} bits on seed {args.seed}'s calibration problems, beside recipe-{name}.yaml"
        )
        write_mix(rule_path, space, precisions, mixer.layers, groups, rule_note)
        made["best_rule"]["file"] = rule_path.name
    if args.confirm_seed is not None:
        made["confirmed"] = confirm_recipe(args, space, search, found, name, reference, effects(rows))
    return made


def write_mix(path: Path, space: MixSpace, precisions: tuple, every: Sequence[str], kept: Sequence[str], note: str):
    """The llm-compressor recipe keeping ``kept`` (groups) at KEEP, every other layer the target quantizes at TARGET,
    the rest of ``every`` layer left as the target leaves it; a differing earlier file moved aside."""
    target, keep = precisions
    held = space.layers_of(kept)
    ignore = [layer for layer in every if layer not in space.layers]
    target_layers = [layer for layer in space.layers if layer not in set(held)]
    moved(path, replace_text(path, mix_recipe(target, keep, target_layers, held, ignore, note)))


def moved(path: Path, aside: Path | None) -> None:
    """Say where the file a recipe of the same name wrote before went."""
    if aside is not None:
        print(f"moved the previous {path.name} aside to {aside.name}")


def best_rule_record(space: MixSpace, found: Found) -> dict | None:
    """The best rule within the recipe's bits, as sensitivity.json records it."""
    if found.best_rule is None:
        return None
    name, kept, point = found.best_rule
    return {"name": name, "kept": list(kept), "bits": space.bits(kept), "exact": point.exact, "logprob": point.logprob}


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


def margin_found(args, search: MixSearch, batch, fp32: HFBackend) -> Found:
    """The fewest bits within --margin of fp32's exact match (harness/recipes/margin.py) on the search problems. None
    meeting it is one line naming the closest found; the problems a confirmation needs are said."""
    margin = Margin(args.margin, score(fp32.model, batch, _pad(search.mixes.mixer)).exact, batch.cells)
    found = search.fewest(lambda scores: margin.meets(scores.exact), search.space.bits(search.space.members))
    if found is None:
        closest = search.closest(lambda scores: margin.shortfall(scores.exact))
        raise no_mix_meets(search.space, args.margin, margin.longest, args.samples, closest)
    discordance = margin.discordance(search.scores(found.kept).exact)
    needed = problems_needed(discordance, args.margin) if discordance else 0
    print(
        f"the fewest bits within {args.margin} of fp32 at n={margin.longest}: {found.bits:.3f} ({found.scored} mixes "
        f"scored); a {args.margin} margin needs about {needed} paired problems a cell to be tested at the "
        f"discordance seen ({discordance:.3f}): confirm with --confirm-seed S --confirm-samples {max(needed, 1)}"
    )
    return found


def reference_model(model_name: str) -> HFBackend:
    """fp32, what a recipe is measured against."""
    model = get_model(model_name)
    fp32 = get_precision(model, "fp32")
    return HFBackend(variant_weights(model, fp32), fp32)


def confirm_recipe(
    args, space: MixSpace, search: MixSearch, found: Found, name: str, reference, found_effects: dict
) -> dict:
    """The recipe, uniform TARGET and KEEP, the best rule within its bits, the table's choices by either ranking, the
    heuristic and a random choice at its bits, scored on --confirm-seed's evaluation problems and paired against fp32
    (``reference``), the recipe also against the best rule and its own ranking's table choice (confirm.py)."""
    problems = [
        (parse_task(label).label, problem)
        for label in args.tasks
        for length in args.lengths
        for problem in generate(parse_task(label), 10, length, args.confirm_samples, args.confirm_seed)
    ]
    batch = teacher_batch(reference.tokenizer, reference.chat_prompt, problems)
    budget = found.bits if args.margin is not None else args.budget_bits
    gains = {rank: {group: values[field] for group, values in found_effects.items()} for rank, (field, _) in
             RANKINGS.items()}  # fmt: skip
    kept_by, against = equal_bits_variants(space, found, gains, args.rank, budget, args.confirm_seed)
    correct = {"fp32": score(reference.model, batch, _pad(search.mixes.mixer)).exact}
    mixes = MixScores(search.mixes.mixer, batch, _pad(search.mixes.mixer))
    mixes.base(())  # uniform TARGET, recorded: a variant computes from the first block it keeps
    for variant, groups in kept_by.items():
        correct[variant] = mixes.of(space.layers_of(groups)).exact
    search.mixes.mixer.use(())
    table = paired_table(correct, batch.cells, "fp32", against)
    path = args.out / f"confirm-{name}.csv"
    moved(path, replace_text(path, comparisons_csv(table)))
    return say_confirmed(table, {variant: space.bits(groups) for variant, groups in kept_by.items()}, args)


def say_confirmed(table: list, bits: dict, args) -> dict:
    """The paired table (against fp32, and the recipe against the best rule and its ranking's table choice), and the
    problems a 2-point margin would need at the discordance seen."""
    print(f"confirmed on seed {args.confirm_seed}'s evaluation problems ({args.confirm_samples} a cell):")
    for row in table:
        print(
            f"  {row.variant:28} {bits.get(row.variant, 0):5.2f} bits  {row.task} n={row.length}: "
            f"{row.variant_accuracy:.3f} vs {row.baseline} {row.baseline_accuracy:.3f}, difference "
            f"{row.difference:+.3f} [{row.diff_low:+.3f}, {row.diff_high:+.3f}], Holm p {row.p_holm:.3g}"
        )
    recipe = next(row for row in table if row.variant.startswith("recipe") and row.baseline == "fp32")
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
            "rows": [{"variant": row.variant, "baseline": row.baseline, "bits": bits.get(row.variant),
                      "accuracy": row.variant_accuracy, "difference": row.difference, "low": row.diff_low,
                      "high": row.diff_high, "p_holm": row.p_holm} for row in table]}  # fmt: skip


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
