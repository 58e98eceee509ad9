"""Evaluate models on the paper's arithmetic tasks at chosen precisions; write accuracy-vs-length tables.

    python -m harness.eval                       # the quick CPU grid on the embedded smollm2
    python -m harness.eval --model smollm2 --precision fp32,bf16 --tasks add --lengths 1,2 --samples 50
    python -m harness.eval --config paper --model llama-bf16   # the paper's grid, on a GPU node

Cells (model x precision x task x length) are the unit of work and of resume: rerunning the same
command into the same --out skips every finished cell.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace

from tqdm import tqdm

from harness.core.cli import ArgParser, input_path, int_list, name_list, output_dir, run, utf8
from harness.core.machine import describe
from harness.models import (
    tokenizer_model,
)
from harness.models.rounding import ROUNDINGS
from harness.models.weights import (
    model_location,
    resolve_weights,
    runtime_adapter,
)
from harness.reports.summary import write_reports
from harness.runs.cells import run_group
from harness.runs.config import SETTINGS, RunSpec, add_setting_flags, build_spec, load_config
from harness.runs.parallel import Processes
from harness.runs.plan import Variant, journal_path, overlap_notes, plan_groups, plan_variants, unfinished_cells
from harness.runs.rundir import RunDir
from harness.runs.trackers import WRITES, Trackers, add_report_to_flag, check_folders

# Reports (summary, plots, comparisons, anatomy) are made again at most this often while a run goes, and at its end:
# drawing them after every cell took 94% of a paper-grid run's time on the scripted backend, and rewrote its plots
# 160 times.
REPORT_EVERY = 60.0


def load_variant(variant: Variant, spec: RunSpec):
    """The variant's weights, loaded into its backend."""
    from harness.backends import load_backend

    if variant.backend == "api":  # the weights are the server's; here only the tokenizer that templates prompts
        owner = tokenizer_model(variant.model)
        local = owner is not None and (owner.kind != "hub" or spec.model_path)
        tokenizer = (spec.model_path or resolve_weights(owner)) if local else None  # --model-path: checked at plan
        return load_backend(
            "api",
            tokenizer,
            variant.precision,
            None,
            spec.batch_size,
            endpoint=variant.endpoint,
            journal=journal_path(spec),
        )
    return load_backend(
        variant.backend,
        variant.weights.ready(),
        variant.precision,
        variant.adapter or runtime_adapter(variant.model, variant.precision, spec.model_path),
        spec.batch_size,
        tensor_parallel_size=spec.tensor_parallel_size,
        batch_invariant=spec.batch_invariant,
        checkpoint=variant.weights.checkpoint,
    )


def evaluate(spec: RunSpec, command: str, load=load_variant) -> RunDir | None:
    """Run every unfinished cell; returns the run directory (None on the helper processes of a parallel run).
    ``load(variant, spec)`` gives a variant's backend: a test passes one that needs no model."""
    variants = plan_variants(spec)
    processes = Processes()
    out = spec.out or spec.default_out()
    # the series planned, as they are named in rows: a reader of the run tells a finished run from a stopped one
    planned = {**spec.describe(), "series": [[v.model.name, v.precision.name, v.adapter or ""] for v in variants]}
    run_dir = RunDir(out, spec.identity, command, planned) if processes.is_main else None
    for repair in run_dir.repairs if run_dir else []:
        print(f"repaired {out}: {repair}", file=sys.stderr)
    done = processes.share(run_dir.done if run_dir else None)
    todo = unfinished_cells(spec, variants, done)
    total_cells = len(spec.all_seeds) * len(variants) * sum(len(lengths) for _, lengths in spec.grid)
    if len(todo) < total_cells and processes.is_main:
        print(f"resuming in {out}: {total_cells - len(todo)} of {total_cells} cells already done", file=sys.stderr)
    if processes.is_main:
        for note in overlap_notes(variants, spec):
            print(note, file=sys.stderr)
    commands = run_dir.commands() if run_dir else []
    progress = tqdm(
        # an invariance check generates K problems of each cell again, on the main process
        total=len(todo) * spec.samples // processes.shard.world + len(todo) * min(spec.invariance_check, spec.samples),
        unit="problem",
        dynamic_ncols=True,
        file=sys.stderr,
        disable=not todo or not processes.is_main,
    )
    backend, loaded_for = None, None
    reported = time.monotonic()
    try:
        for group in plan_groups(todo, spec):
            variant = group[0][0]
            if loaded_for is not variant:
                record_pacing(run_dir, loaded_for, backend)
                backend = None  # free the previous model before loading the next
                progress.set_description(f"loading {variant.label}")
                backend = load(variant, spec)
                backend.set_thinking(spec.thinking)
                loaded_for = variant
                record_loaded_layers(run_dir, variant, backend)
                record_rounding(run_dir, variant)
                for repair in getattr(backend, "repairs", []):  # a served run's journal, checked as it loads
                    progress.write(f"repaired {out}: {repair}", file=sys.stderr)
            seeded = len(spec.all_seeds) > 1
            names = ", ".join(f"{t.label} n={n}" + (f" seed {s}" if seeded else "") for _, t, n, s in group)
            progress.set_description(f"{variant.label} {names}")
            cells = run_group(backend, group, spec, progress, processes)
            if cells is None or run_dir is None:
                continue
            machine = run_dir.record_machine(describe())  # after the first load: torch's kernels are known
            for row, samples in cells:
                row = replace(row, machine=machine)
                run_dir.add_cell(row, samples)
                progress.write(
                    f"{variant.label:>20} {row.key.task_label:>10} "
                    f"n={row.length:<3} {row.correct:>4}/{row.n:<4} = {row.accuracy:.3f} "
                    f"[{row.ci_low:.3f}, {row.ci_high:.3f}]  ({row.tokens_per_s:.0f} tok/s)"
                )
            if time.monotonic() - reported >= REPORT_EVERY:
                write_reports(run_dir.path, run_dir.rows, commands, run_dir.samples)
                reported = time.monotonic()
        if run_dir is not None:
            write_reports(run_dir.path, run_dir.rows, commands, run_dir.samples)
    finally:
        record_pacing(run_dir, loaded_for, backend)
        progress.close()
        if run_dir is not None:
            run_dir.close()
    return run_dir


def record_pacing(run_dir: RunDir | None, variant: Variant | None, backend) -> None:
    """A served model's pacing (harness/backends/pacing.py), traced into run.json: where it settled and every
    change of the number of requests in flight."""
    pacing = getattr(backend, "pacing", None)
    if run_dir is None or variant is None or pacing is None or len(pacing.trace) < 1:
        return
    record = {"ceiling": pacing.ceiling, "settled": pacing.settled(), "trace": pacing.trace}
    run_dir.note(f"pacing {variant.label}", record)


def record_loaded_layers(run_dir: RunDir | None, variant: Variant, backend) -> None:
    """A mix's layers as its engine loaded them (layer -> the format or scheme the engine reports), checked against
    the checkpoint as it loaded, kept in run.json as the evidence of what each layer ran in."""
    layers = getattr(backend, "loaded_layers", None)
    if run_dir is not None and layers:
        run_dir.note(f"layers {variant.label}", dict(sorted(layers.items())))


def record_rounding(run_dir: RunDir | None, variant: Variant) -> None:
    """How a quantized variant's weights were rounded, into run.json: the method, and the settings the checkpoint's
    note records (harness.quantize's), else the ones numprec makes it with."""
    precision = variant.precision
    if run_dir is None or not precision.prequantized:
        return
    checkpoint = variant.weights.checkpoint if variant.weights else None
    recorded = checkpoint.provenance.get("rounding_settings") if checkpoint else None
    method = ROUNDINGS[precision.rounding]
    settings = recorded if isinstance(recorded, dict) else method.settings
    run_dir.note(f"rounding {variant.label}", {"method": method.name, "what": method.summary, "settings": settings})


def report_to_trackers(names: Sequence[str], run_dir: RunDir) -> None:
    """The run's results table, its paired table and per-cell accuracies to the trackers (one step per length)."""
    import csv

    comparisons = run_dir.path / "comparisons.csv"
    with open(comparisons, newline="", encoding="utf-8") as handle:
        paired = list(csv.DictReader(handle))
    trackers = Trackers(names, run_dir.path, run_dir.path.name, {"command": run_dir.commands()})
    try:
        for row in run_dir.rows:
            name = f"accuracy/{row.key.series}/{row.key.task_label}/seed{row.seed}"
            trackers.log({name: row.accuracy}, row.length)
        trackers.table("results", [asdict(row) for row in run_dir.rows])
        trackers.table("comparisons", paired)
    finally:
        trackers.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=name_list, help="model name(s) from harness/models.yaml, comma-separated")
    parser.add_argument(
        "--config", type=utf8, default="quick", help="eval_configs/NAME.yaml or a path (default: quick)"
    )
    parser.add_argument("--tasks", type=name_list, help="e.g. add,iter_add:3,mul (default: the config's grid)")
    parser.add_argument("--lengths", type=int_list, help="operand lengths for every task, e.g. 1,2,3 or 1-13")
    parser.add_argument("--precision", type=name_list, help="e.g. fp32,bf16 (default: each model's own)")
    parser.add_argument("--out", type=output_dir, help="run directory (default: runs/eval/CONFIG-DECODING-nN-seedS)")
    parser.add_argument(
        "--model-path",
        type=model_location,
        help="load the (single) model's weights from this directory (or a hub id in the local cache) instead",
    )
    parser.add_argument("--adapter", type=input_path, help="a peft LoRA/QLoRA adapter directory to apply to the model")
    add_setting_flags(parser)  # --samples, --seed, --decoding, --base, --batch-size, ...: the config's own fields
    add_report_to_flag(parser)
    args = parser.parse_args(argv)
    config_name, config = load_config(args.config)
    spec = build_spec(
        config_name,
        config,
        models=args.model,
        precisions=args.precision,
        tasks=args.tasks,
        lengths=args.lengths,
        model_path=str(args.model_path) if args.model_path else None,
        adapter=str(args.adapter) if args.adapter else None,
        out=args.out,
        **{name: getattr(args, name) for name in SETTINGS},
    )
    check_folders(args.report_to, spec.out or spec.default_out())
    command = "python -m harness.eval " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    started = time.perf_counter()
    run_dir = evaluate(spec, command.strip())
    if run_dir is None:  # a helper process of a data-parallel run: the main process reports
        return 0
    if args.report_to:
        report_to_trackers(args.report_to, run_dir)
    print((run_dir.path / "summary.md").read_text(encoding="utf-8").split("## Models")[0].rstrip())
    shown = ("results.csv", "pooled.csv", "samples.jsonl", "summary.md", "accuracy_vs_length.png", "lengths.png")
    shown += tuple(f"{name}/" for name in WRITES.values())
    written = ", ".join(name for name in shown if (run_dir.path / name.rstrip("/")).exists())
    print(f"\nwrote {run_dir.path}/ ({written}) in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    run(main)
