"""A run's plan: the variants it loads (model, precision, adapter, backend, endpoint), checked before any
work, and its cells grouped for generation (consecutive cells of one variant and prompt template, up to a batch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.backends import backend_for, bf16_gemm, check_thinking_switch, read_every
from harness.backends.api import Endpoint
from harness.backends.vllm import check_vllm_kernels, vllm_python
from harness.core.errors import UserError
from harness.models import (
    KV_FP8,
    EndpointSource,
    ModelSpec,
    PrecisionSpec,
    awq_kernels,
    get_model,
    get_precision,
    held_out,
    tokenizer_model,
    with_kv_cache,
)
from harness.models.checkpoints import Checkpoint, check_transformers_can_read, read_checkpoint
from harness.models.mix import mix_precision
from harness.models.weights import Weights, check_adapter_dir, check_hardware, plan_weights, resolve_weights
from harness.questions.problems import Task
from harness.questions.prompts import template_name
from harness.runs.config import RunSpec
from harness.runs.results import cell_key


@dataclass
class Variant:
    """One model at one precision: what a backend is loaded for."""

    model: ModelSpec
    precision: PrecisionSpec
    adapter: str | None
    backend: str = "hf"
    endpoint: Endpoint | None = None  # --backend api: where the model is served (checked by a preflight request)
    weights: Weights | None = field(default=None, compare=False)  # what it loads (None: served elsewhere)

    @property
    def label(self) -> str:
        return f"{self.model.name} {self.precision.name}" + (f" +adapter {self.adapter}" if self.adapter else "")


def precisions_for(model: ModelSpec, spec: RunSpec, checkpoint: Checkpoint | None) -> list[str]:
    """--precision is strict; a --model-path checkpoint whose quantization_config declares a registry precision runs at
    it, and a mix at its own label (and at no --precision); a config's precisions apply where the model takes them,
    else its default."""
    mix = checkpoint.mix if checkpoint else None
    if mix and spec.precisions:
        raise UserError(
            f"--model-path {checkpoint.path} is a mix ({mix.describe()}): each layer runs in its own format; "
            f"drop --precision (its rows are labelled {mix.label})"
        )
    if spec.precisions:
        return spec.precisions
    if checkpoint and checkpoint.precision:
        return [checkpoint.precision]
    taken = [name for name in spec.config_precisions or [] if name in model.precisions]
    return taken or [model.default_precision]


def series_of(spec: RunSpec, checkpoint: Checkpoint | None) -> list[tuple[str, str]]:
    """(model, precision) of every series, in order: a config's variants, or each model at its precisions; with
    --kv-cache fp8, each precision with an fp8 KV cache."""
    if spec.variants:
        series = list(spec.variants)
    else:
        series = [
            (name, precision) for name in spec.models for precision in precisions_for(get_model(name), spec, checkpoint)
        ]
    return [(name, with_kv_cache(precision, spec.kv_cache)) for name, precision in series]


def plan_variants(spec: RunSpec) -> list[Variant]:
    """Check every model/precision the run names before any work starts: the names and settings first (cheap, in
    plan order), then the weights and checkpoints."""
    variants = []
    named = []
    checkpoint = read_model_path(spec.model_path)
    mix = checkpoint.mix if checkpoint else None
    for name, precision_name in series_of(spec, checkpoint):
        model = get_model(name)
        if mix and precision_name.removesuffix(KV_FP8) == mix.label:
            precision = mix_precision(model, mix, precision_name)
        else:
            precision = get_precision(model, precision_name)
        named.append((model, precision, backend_for(spec.backend, precision)))
    if any(backend == "hf" for _, _, backend in named):
        read_every()  # the transformers backend's settings, said before any work when one is not one
        bf16_gemm()
    if any(precision.method == "awq" and backend == "hf" for _, precision, backend in named):
        awq_kernels.wanted_kernel()  # a kernel name of none: said before the checkpoint is looked at
    for model, precision, backend in named:
        if backend == "api":
            variants.append(plan_served(model, precision, spec, checkpoint))
            continue
        check_hardware(model, precision)
        if backend == "vllm":
            vllm_python()  # vLLM's environment missing: said before any work
            check_vllm_kernels(precision)
        weights = plan_weights(model, precision, spec.model_path, checkpoint)
        if backend == "hf" and precision.prequantized and weights.checkpoint is not None:
            check_transformers_can_read(weights.checkpoint)
        if model.needs_adapter and not spec.adapter:
            raise UserError(
                f"{model.name} evaluates a fine-tuned adapter; pass --adapter PATH (made by python -m finetune.train)"
            )
        if spec.adapter:
            check_own_adapter(model, spec, checkpoint)
        variants.append(Variant(model, precision, spec.adapter, backend, weights=weights))
    for name in dict.fromkeys(variant.model.name for variant in variants if variant.backend != "api"):
        check_thinking_before_loading(get_model(name), spec)
    return variants


def read_model_path(model_path: str | None) -> Checkpoint | None:
    """--model-path's directory, read once for every variant of the run (None: no --model-path, or no model
    directory there, which the variants' checks then say)."""
    if not model_path or not (Path(model_path) / "config.json").is_file():
        return None
    return read_checkpoint(model_path)


def check_own_adapter(model: ModelSpec, spec: RunSpec, checkpoint: Checkpoint | None) -> None:
    """--adapter on ``model``: an adapter directory that fits the model's layers, on a model that has none of its
    own."""
    if model.kind == "adapter":
        raise UserError(
            f"{model.name} is {model.source.base} with its own adapter already; evaluate another "
            f"adapter on the base: --model {model.source.base} --adapter {spec.adapter}"
        )
    if checkpoint is not None:
        base = lambda: checkpoint  # noqa: E731  (the directory as read)
    elif spec.model_path or model.kind != "hub":
        base = lambda: read_checkpoint(spec.model_path or resolve_weights(model))  # noqa: E731
    else:
        base = None  # a hub model's layers are known when it loads
    check_adapter_dir(Path(spec.adapter), base)


def check_thinking_before_loading(owner: ModelSpec, spec: RunSpec) -> None:
    """--thinking against the chat template that will wrap the prompts (``owner``'s tokenizer), read before any
    model loads; a .gguf of the user's is checked when it loads."""
    if spec.thinking == "auto" or (spec.model_path or "").endswith(".gguf"):
        return
    from transformers import AutoTokenizer

    # --model-path was checked with the variants
    check_thinking_switch(AutoTokenizer.from_pretrained(spec.model_path or resolve_weights(owner)), spec.thinking)


def plan_served(model: ModelSpec, precision: PrecisionSpec, spec: RunSpec, checkpoint: Checkpoint | None) -> Variant:
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
        plan_weights(local, None, spec.model_path, checkpoint)
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


def unfinished_cells(spec: RunSpec, variants: list[Variant], done) -> list[Todo]:
    """The grid's cells, seed by seed and variant by variant, less those ``done`` holds (a resumed run's)."""
    return [
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
