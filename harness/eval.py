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
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from harness import awq_kernels
from harness.backends import Sampling, backend_for, check_thinking_switch, read_every, row_seeds
from harness.backends.api import Endpoint
from harness.backends.vllm import vllm_python
from harness.cli import ArgParser, input_path, int_list, name_list, output_dir, run, utf8
from harness.compare import wilson_interval
from harness.config import SETTINGS, RunSpec, add_setting_flags, build_spec, load_config
from harness.errors import UserError
from harness.evidence import sample_digest
from harness.machine import describe
from harness.models import EndpointSource, ModelSpec, PrecisionSpec, get_model, get_precision, held_out, tokenizer_model
from harness.parallel import Processes
from harness.problems import Task, generate
from harness.prompts import template_name, user_message
from harness.report import write_reports
from harness.results import CellResult, cell_key
from harness.rundir import RunDir
from harness.scoring import CONFLICT, is_correct, judge
from harness.trackers import WRITES, Trackers, add_report_to_flag, check_folders
from harness.weights import (
    check_adapter_dir,
    check_hardware,
    check_transformers_can_read,
    check_weights,
    resolve_weights,
    runtime_adapter,
    variant_weights,
)

# Reports (summary, plots, comparisons, anatomy) are made again at most this often while a run goes, and at its end:
# drawing them after every cell took 94% of a paper-grid run's time on the scripted backend, and rewrote its plots
# 160 times.
REPORT_EVERY = 60.0


@dataclass
class Variant:
    """One model at one precision: what a backend is loaded for."""

    model: ModelSpec
    precision: PrecisionSpec
    adapter: str | None
    backend: str = "hf"
    endpoint: Endpoint | None = None  # --backend api: where the model is served (checked by a preflight request)

    @property
    def label(self) -> str:
        return f"{self.model.name} {self.precision.name}" + (f" +adapter {self.adapter}" if self.adapter else "")


def precisions_for(model: ModelSpec, spec: RunSpec) -> list[str]:
    """--precision is strict; a config's precisions apply where the model takes them, else its default."""
    if spec.precisions:
        return spec.precisions
    taken = [name for name in spec.config_precisions or [] if name in model.precisions]
    return taken or [model.default_precision]


def series_of(spec: RunSpec) -> list[tuple[str, str]]:
    """(model, precision) of every series, in order: a config's variants, or each model at its precisions."""
    if spec.variants:
        return list(spec.variants)
    return [(name, precision) for name in spec.models for precision in precisions_for(get_model(name), spec)]


def plan_variants(spec: RunSpec) -> list[Variant]:
    """Check every model/precision the run names before any work starts: the names and settings first (cheap, in
    plan order), then the weights and checkpoints."""
    variants = []
    named = []
    for name, precision_name in series_of(spec):
        model = get_model(name)
        precision = get_precision(model, precision_name)
        named.append((model, precision, backend_for(spec.backend, precision)))
    if any(backend == "hf" for _, _, backend in named):
        read_every()  # the transformers backend's setting, said before any work when it is not one
    if any(precision.method == "awq" and backend == "hf" for _, precision, backend in named):
        awq_kernels.wanted_kernel()  # a kernel name of none: said before the checkpoint is looked at
    for model, precision, backend in named:
        if backend == "api":
            variants.append(plan_served(model, precision, spec))
            continue
        check_hardware(model, precision)
        if backend == "vllm":
            vllm_python()  # vLLM's environment missing: said before any work
        check_weights(model, spec.model_path, precision)
        if backend == "hf" and precision.prequantized:
            check_transformers_can_read(variant_weights(model, precision, spec.model_path, prepare=False))
        if model.needs_adapter and not spec.adapter:
            raise UserError(
                f"{model.name} evaluates a fine-tuned adapter; pass --adapter PATH (made by python -m finetune.train)"
            )
        if spec.adapter:
            if model.kind == "adapter":
                raise UserError(
                    f"{model.name} is {model.source.base} with its own adapter already; evaluate another "
                    f"adapter on the base: --model {model.source.base} --adapter {spec.adapter}"
                )
            local = model.kind != "hub" or spec.model_path
            check_adapter_dir(
                Path(spec.adapter), (lambda m=model: resolve_weights(m, spec.model_path)) if local else None
            )
        variants.append(Variant(model, precision, spec.adapter, backend))
    for name in dict.fromkeys(variant.model.name for variant in variants if variant.backend != "api"):
        check_thinking_before_loading(get_model(name), spec)
    return variants


def check_thinking_before_loading(owner: ModelSpec, spec: RunSpec) -> None:
    """--thinking against the chat template that will wrap the prompts (``owner``'s tokenizer), read before any
    model loads; a .gguf of the user's is checked when it loads."""
    if spec.thinking == "auto" or (spec.model_path or "").endswith(".gguf"):
        return
    from transformers import AutoTokenizer

    check_thinking_switch(AutoTokenizer.from_pretrained(resolve_weights(owner, spec.model_path)), spec.thinking)


def plan_served(model: ModelSpec, precision: PrecisionSpec, spec: RunSpec) -> Variant:
    """A model served elsewhere (--backend api): no weights here, no GPU needed here, the precision declared; the
    tokenizer is needed where the prompt is templated here (completions mode). The endpoint answers a preflight
    request now, before any file is written."""
    from harness.backends.api import Endpoint, Journal, check_resume, parse_bases, preflight

    if spec.adapter:
        raise UserError("with --backend api the server applies adapters (serve the model with it); drop --adapter")
    source = model.source if isinstance(model.source, EndpointSource) else None
    mode = source.mode if source else spec.api_endpoint
    local = tokenizer_model(model)
    if mode == "completions":
        if local is None or (local.kind == "hub" and not spec.model_path):
            raise UserError(
                f"--api-endpoint completions applies {model.name}'s chat template here, from its tokenizer; pass "
                "--model-path DIR with it, or use --api-endpoint chat (the server's template)"
            )
        check_weights(local, spec.model_path)
        check_thinking_before_loading(local, spec)
    endpoint = Endpoint(
        parse_bases(spec.api_base or (source.base if source else "")),
        spec.api_model or (source.model if source else model.name),
        mode,
        spec.concurrency,
        spec.api_timeout,
        spec.api_retries,
        tuple(name.strip() for name in (spec.api_accept_model or "").split(",") if name.strip()),
        spec.api_allow_other_endpoint,
    )
    preflight(endpoint)
    check_resume(Journal(journal_path(spec), repair=False), endpoint)  # before anything is written
    return Variant(model, precision, None, "api", endpoint)


def journal_path(spec: RunSpec) -> Path:
    """A served run's responses.jsonl, in its run directory."""
    return Path(spec.out or spec.default_out()) / "responses.jsonl"


@dataclass
class Cell:
    """One (variant, task, length, seed) cell's problems and prompts, generated together with its group."""

    variant: Variant
    task: Task
    length: int
    seed: int
    problems: list = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)


Todo = tuple[Variant, Task, int, int]  # a cell to compute: variant, task, length, seed


def plan_groups(todo: list[Todo], spec: RunSpec) -> list[list[Todo]]:
    """Consecutive cells of one variant and one prompt template, up to a batch of problems, are generated in
    one call: their rows share the prefix and decode side by side, so one cell's long-winded stragglers do not
    run alone (1.2x here on the quick grid). Results stay per cell and do not depend on the grouping."""
    groups: list[list[Todo]] = []
    for item in todo:
        variant, task = item[0], item[1]
        last = groups[-1] if groups else None
        joinable = (
            last is not None
            and last[0][0] is variant
            and template_name(last[0][1].name, spec.prompt) == template_name(task.name, spec.prompt)
            and spec.samples * (len(last) + 1) <= spec.batch_size
        )
        if joinable:
            last.append(item)
        else:
            groups.append([item])
    return groups


def run_group(backend, group: list[Todo], spec: RunSpec, progress, processes: Processes):
    """Generate a group of cells in one call, then score each: (row, samples) per cell. Under data parallelism only
    the main process gets the cells back (None elsewhere)."""
    cells, budgets, seeds = [], [], []
    for variant, task, length, seed in group:
        cell = Cell(variant, task, length, seed, generate(task, spec.base, length, spec.samples, seed))
        cell.prompts = [backend.chat_prompt(user_message(problem, spec.prompt)) for problem in cell.problems]
        cell_seed = zlib.crc32(f"{seed}|{task.label}|{spec.base}|{length}".encode())
        cells.append(cell)
        budgets += [spec.answer.budget(task, spec.base, length, backend.count_tokens)] * len(cell.problems)
        seeds += row_seeds(cell_seed, len(cell.problems))  # a cell's samples do not depend on its group
    started = time.perf_counter()
    mine = backend.generate(
        [prompt for cell in cells for prompt in cell.prompts],
        budgets,
        Sampling.named(spec.decoding),
        seed=seeds,
        on_batch=progress.update,
        shard=processes.shard,
        answer=spec.answer,
    )
    generations = processes.gather(mine)
    wall = time.perf_counter() - started
    if generations is None:
        return None
    total_tokens = max(1, sum(g.tokens for g in generations))
    rows_in_batch = batch_rows(len(generations), backend.batch_size)
    results, offset = [], 0
    for cell in cells:
        own = slice(offset, offset + len(cell.problems))
        offset += len(cell.problems)
        share = wall * sum(g.tokens for g in generations[own]) / total_tokens  # the group's time, split by tokens
        tokens_per_s = total_tokens / wall if wall > 0 else 0.0
        row, samples = score_cell(backend, cell, spec, generations[own], share, tokens_per_s)
        if spec.invariance_check:
            batched = (budgets[own], seeds[own], rows_in_batch[own])
            row = invariance_check(backend, cell, spec, samples, batched, row, progress)
        results.append((row, samples))
    return results


def batch_rows(count: int, batch_size: int) -> list[int]:
    """For each of ``count`` prompts generated in one call, the rows of the batch it was generated in (the batches
    of ChatBackend.generate: consecutive, ``batch_size`` rows, the last one shorter)."""
    return [min(batch_size, count - index // batch_size * batch_size) for index in range(count)]


def invariance_check(
    backend, cell: Cell, spec: RunSpec, samples: list[dict], batched: tuple, row: CellResult, progress
) -> CellResult:
    """Generate the cell's first K problems again in a batch of another size (same budgets and seeds) and count the
    outputs and verdicts that differ from the batched run's ``samples``, scored by the same rule.

    A problem generated in a batch of several rows is generated again alone; one that was generated alone (a
    ``--batch-size 1`` run, or the last row of a group) is generated again in a batch of two, beside the cell's
    next problem (or a copy of itself in a one-problem cell): the check never compares a batch size with itself.
    ``flip_batch`` records the re-run's batch sizes."""
    budgets, seeds, rows_in_batch = batched
    k = min(spec.invariance_check, len(cell.problems))
    outputs = verdicts = 0
    sizes = set()
    for index in range(k):
        rows = [index] if rows_in_batch[index] > 1 else [index, (index + 1) % len(cell.problems)]
        sizes.add(len(rows))
        again = backend.generate(
            [cell.prompts[i] for i in rows],
            [budgets[i] for i in rows],
            Sampling.named(spec.decoding),
            seed=[seeds[i] for i in rows],
            batch_size=len(rows),
            answer=spec.answer,
        )[0]
        problem, before = cell.problems[index], samples[index]
        progress.update(1)
        outputs += again.text != before["output"]
        answer = judge(again.text, spec.base, problem.expression, spec.answer, not again.finished).answer
        verdicts += is_correct(answer, problem.answer, spec.base) != before["correct"]
    flip_batch = ",".join(str(size) for size in sorted(sizes))
    return replace(row, flip_k=k, flip_outputs=outputs, flip_verdicts=verdicts, flip_batch=flip_batch)


def score_cell(backend, cell: Cell, spec: RunSpec, generations, wall: float, tokens_per_s: float):
    variant, task, length, problems, prompts = cell.variant, cell.task, cell.length, cell.problems, cell.prompts
    key = {
        "model": variant.model.name,
        "precision": variant.precision.name,
        "adapter": variant.adapter or "",
        "task": task.name,
        "operands": task.operands,
        "truncate": task.truncate or "",
        "base": spec.base,
        "length": length,
    }
    samples, correct, no_answer, conflicts = [], 0, 0, 0
    for problem, prompt, generation in zip(problems, prompts, generations, strict=True):
        truncated = not generation.finished
        extraction = judge(generation.text, spec.base, problem.expression, spec.answer, truncated)
        answer = extraction.answer
        hit = is_correct(answer, problem.answer, spec.base)
        correct += hit
        no_answer += answer is None
        conflicts += extraction.rule == CONFLICT
        thinking = spec.answer.split(generation.text)[0]
        samples.append(
            {
                **key,
                "seed": cell.seed,
                "index": problem.index,
                "expression": problem.expression,
                "prompt": prompt,
                "output": generation.text,
                "extracted": answer,
                "rule": extraction.rule,
                "gold": problem.answer,
                "correct": hit,
                "tokens": generation.tokens,
                "thinking_tokens": min(generation.tokens, backend.count_tokens(thinking)) if thinking else 0,
                "truncated": truncated,
            }
        )
        samples[-1]["digest"] = sample_digest(samples[-1])
    low, high = wilson_interval(correct, len(problems))
    tokens = sum(g.tokens for g in generations)
    precision = variant.precision
    row = CellResult(
        model=variant.model.name,
        precision=precision.name,
        weight_dtype=precision.weight_dtype,
        activation_dtype=backend.activation_dtype,
        task=task.name,
        operands=task.operands,
        base=spec.base,
        length=length,
        n=len(problems),
        correct=correct,
        accuracy=correct / len(problems),
        ci_low=low,
        ci_high=high,
        seed=cell.seed,
        truncate=task.truncate or "",
        decoding=spec.decoding,
        method=precision.method,
        weight_bits=precision.weight_bits,
        group_size=precision.group_size or "",
        footprint_mb=backend.footprint_mb,
        adapter=variant.adapter or "",
        backend=backend.name,
        no_answer=no_answer,
        conflicts=conflicts,
        gen_tokens=tokens,
        wall_s=wall,
        tokens_per_s=tokens_per_s,
        kernel=backend.kernel,
        matmul_precision=backend.matmul_precision,
        prompt_style=spec.prompt,
        answer_mode=spec.answer.describe(),
        **length_fields(samples),
        **served_fields(backend, Sampling.named(spec.decoding), generations),
    )
    return row, samples


def length_fields(samples: list[dict]) -> dict:
    """A row's lengths: generated tokens per problem (mean, median, 90th percentile, most), thinking and answer tokens,
    and how many generations the budget cut."""
    import numpy as np

    tokens = np.array([sample["tokens"] for sample in samples], dtype=float)
    thinking = np.array([sample["thinking_tokens"] for sample in samples], dtype=float)
    return {
        "tokens_mean": float(tokens.mean()),
        "tokens_median": float(np.median(tokens)),
        "tokens_p90": float(np.percentile(tokens, 90)),
        "tokens_max": int(tokens.max()),
        "thinking_tokens_mean": float(thinking.mean()),
        "answer_tokens_mean": float((tokens - thinking).mean()),
        "truncated": sum(sample["truncated"] for sample in samples),
    }


def served_fields(backend, sampling: Sampling, generations) -> dict:
    """What a row records about where its outputs came from: loaded here, or a served model's declared precision,
    the endpoint(s) and model id(s) that answered the cell's requests, request mode, request parameters, the server's
    prompt-token count and how many replies ran past their budget or first line and were cut."""
    if backend.name != "api":
        return {"precision_source": "loaded", "decoding_params": sampling_params(sampling)}
    return {
        "precision_source": "declared",
        "endpoint": ",".join(sorted({g.endpoint for g in generations})),
        "served_model": ",".join(sorted({g.model for g in generations})),
        "request_mode": backend.endpoint.mode,
        "decoding_params": backend.decoding_note(sampling),
        "prompt_tokens": sum(g.prompt_tokens for g in generations),
        "cut_replies": sum(g.cut for g in generations),
    }


def sampling_params(sampling: Sampling) -> str:
    if not sampling.do_sample:
        return "greedy (argmax)"
    return f"temperature {sampling.temperature}, top_p {sampling.top_p}, top_k {sampling.top_k}, seed per problem"


def load_variant(variant: Variant, spec: RunSpec):
    """The variant's weights, loaded into its backend."""
    from harness.backends import load_backend

    if variant.backend == "api":  # the weights are the server's; here only the tokenizer that templates prompts
        owner = tokenizer_model(variant.model)
        local = owner is not None and (owner.kind != "hub" or spec.model_path)
        tokenizer = resolve_weights(owner, spec.model_path) if local else None
        return load_backend(
            "api",
            tokenizer,
            variant.precision,
            None,
            spec.batch_size,
            endpoint=variant.endpoint,
            journal=journal_path(spec),
        )
    weights = variant_weights(variant.model, variant.precision, spec.model_path)
    return load_backend(
        variant.backend,
        weights,
        variant.precision,
        variant.adapter or runtime_adapter(variant.model, variant.precision, spec.model_path),
        spec.batch_size,
        tensor_parallel_size=spec.tensor_parallel_size,
        batch_invariant=spec.batch_invariant,
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
    todo = [
        (variant, task, length, seed)
        for seed in spec.all_seeds
        for variant in variants
        for task, lengths in spec.grid
        for length in lengths
        if cell_key(
            variant.model.name,
            variant.precision.name,
            variant.adapter,
            task.name,
            task.operands,
            task.truncate,
            spec.base,
            length,
            seed,
        )
        not in done
    ]
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


def overlap_notes(variants, spec) -> list[str]:
    """A line per fine-tuned model whose cells here may hold problems it trained on (summary.md says it again)."""
    notes = []
    for name in dict.fromkeys(variant.model.name for variant in variants):
        kept = held_out(name)
        seeds = [
            seed
            for seed in spec.all_seeds
            if kept and any(kept.overlap(seed, n, spec.samples) for _, lengths in spec.grid for n in lengths)
        ]
        if seeds:
            notes.append(
                f"note: {name}'s fine-tuning kept out only the first {kept.count} problems per cell of seed "
                f"{kept.seed}; its cells at seed {', '.join(map(str, seeds))} may hold problems it trained on"
            )
    return notes


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
        "--model-path", type=input_path, help="load the (single) model's weights from this directory instead"
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
