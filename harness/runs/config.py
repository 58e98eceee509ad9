"""Experiment grids (``eval_configs/*.yaml``) validated on load, merged with command-line flags."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, ValidationError

from harness.backends import BACKENDS
from harness.core.bounds import BATCH_SIZE, SAMPLES, SEED, TENSOR_PARALLEL, Bound, parse_int_list, unique
from harness.core.configfiles import Lengths, Names, StrictModel, load_yaml_model
from harness.core.errors import UserError
from harness.models import get_model, known_precision, precision_registry
from harness.questions.answers import FIRST_LINE, AnswerMode, FreeForm
from harness.questions.problems import BASE, Task, check_cell_bounds, parse_task
from harness.questions.prompts import PROMPT_STYLES, prompt_deviations

DEFAULT_RUNS = Path("runs") / "eval"  # relative to the working directory; runs/ is in .gitignore


def _seed_list(value: Any) -> Any:
    """Seeds as a list [0, 1, 2], or a string "0,1,2" / "0-2"."""
    return parse_int_list(value) if isinstance(value, str) else value


def _distinct_seeds(values: list[int] | None) -> list[int] | None:
    if values is None:
        return None
    for value in values:
        problem = SEED.problem(value)
        if problem:
            raise ValueError(f"seed {problem}")
    return unique(values, "the seeds", error=ValueError)


MAX_NEW_TOKENS = Bound(1, 131_072, "the longest context of the models in use")
# 0 is meaningful here: no check.
INVARIANCE = Bound(0, SAMPLES.high, "the check re-runs problems of a cell, which has at most this many")
CONCURRENCY = Bound(1, 1024, "more requests in flight than any server queues usefully")
API_TIMEOUT = Bound(above=0, high=3600, why="an hour per request: a server that slow is down", kind=float)
API_RETRIES = Bound(0, 20, "openai's backoff doubles to 8 s a retry: 20 is minutes of a dead server")


def _api_bases(value: str | None) -> str | None:
    if value is None:
        return None
    from harness.backends.api import parse_bases

    return ",".join(parse_bases(value))


def _known_precisions(names: list[str]) -> list[str]:
    """A misspelt name must not quietly drop out of the list (the model would run at another precision)."""
    for name in names:
        if not known_precision(name):
            raise ValueError(f"unknown precision '{name}'; known: {', '.join(precision_registry())}")
    return names


def _variant_pairs(names: list[str]) -> list[str]:
    for name in names:
        model, _, precision = name.partition(":")
        if not model or not precision:
            raise ValueError(f"'{name}' is not MODEL:PRECISION (e.g. smollm2-arith:fp32)")
        _known_precisions([precision])
    return names


class EvalConfig(StrictModel):
    """The keys an eval config may have."""

    models: Names = ["smollm2"]
    # Applied to each model that takes them; a model that takes none of them runs at its default precision.
    precisions: Annotated[Names, AfterValidator(_known_precisions)] | None = None
    # Or the series themselves, each "MODEL:PRECISION" (the first is every comparison's baseline): a contrast such
    # as a fine-tuned model at three precisions beside its base at one. --model / --precision replace it.
    variants: Annotated[Names, AfterValidator(_variant_pairs)] | None = None
    grid: Annotated[dict[str, Lengths], Field(min_length=1)]  # task -> lengths: a list or a range string "1-13"
    # The run's settings: each is also a flag of harness.eval (--batch-size for batch_size), parsed and checked by
    # this very field (add_setting_flags), so a flag and a config key cannot disagree.
    base: Annotated[int, BASE.field, Field(description="number base 2-36 (the paper's LLM grid is base 10)")] = 10
    samples: Annotated[int, SAMPLES.field, Field(description="problems per cell")] = 100
    decoding: Annotated[
        Literal["greedy", "paper"],
        Field(description="greedy, or the paper's sampling (top-k 50, top-p 0.95, temperature 0.1)"),
    ] = "greedy"
    seed: Annotated[int, SEED.field, Field(description="seed of every cell's problems and sampling")] = 0
    batch_size: Annotated[int, BATCH_SIZE.field, Field(description="rows decoded together")] = 256
    backend: Annotated[
        Literal[tuple(BACKENDS)] | None,  # the backends' records (harness/backends/__init__.py)
        Field(
            description="hf (transformers), llamacpp (GGUF), vllm (vLLM, from .venv-vllm) or api (a served model); "
            "default: what each precision needs"
        ),
    ] = None
    tensor_parallel_size: Annotated[
        int, TENSOR_PARALLEL.field, Field(description="GPUs per model for --backend vllm (default 1)")
    ] = 1
    seeds: Annotated[
        list[int] | None,
        BeforeValidator(_seed_list),
        AfterValidator(_distinct_seeds),
        Field(description="run the grid once per seed (each draws its own problems), e.g. 0,1,2; pooled over seeds"),
    ] = None
    prompt: Annotated[
        Literal[tuple(PROMPT_STYLES)],
        Field(description="few-shot (the paper's), zero-shot (an instruction) or cot (reason step by step first)"),
    ] = "few-shot"
    answer: Annotated[
        Literal["first-line", "free-form"],
        Field(
            description="first-line (the paper's: the first line is the answer) or free-form (to the end of the "
            "model's turn; a thinking block is kept but not read; the final answer read from what follows)"
        ),
    ] = "first-line"
    max_new_tokens: Annotated[
        int | None, MAX_NEW_TOKENS.field, Field(description="free-form: the token budget of every problem (512)")
    ] = None
    think_end: Annotated[str, Field(min_length=1, description="free-form: where a thinking block ends (</think>)")] = (
        FreeForm.think_end
    )
    thinking: Annotated[
        Literal["auto", "on", "off"],
        Field(description="the chat template's thinking switch (enable_thinking) where it has one: auto leaves it"),
    ] = "auto"
    invariance_check: Annotated[
        int,
        INVARIANCE.field,
        Field(description="generate each cell's first K problems again at batch size 1; count the answers that change"),
    ] = 0
    batch_invariant: Annotated[
        bool,
        Field(description="vllm: batch-invariant kernels (VLLM_BATCH_INVARIANT=1), recorded in the rows"),
    ] = False
    kv_cache: Annotated[
        Literal["auto", "fp8"],
        Field(
            description="the attention's keys and values: auto (the model's dtype) or fp8 (E4M3, scale 1 as vLLM "
            "keeps them; every precision's name gains +kv-fp8)"
        ),
    ] = "auto"
    # --backend api: a served model (harness/backends/api/)
    api_base: Annotated[
        str | None,
        AfterValidator(_api_bases),
        Field(description="the server's base URL(s), comma-separated replicas (http://host:port/v1)"),
    ] = None
    api_model: Annotated[str | None, Field(min_length=1, description="the model name the server serves it under")] = (
        None
    )
    api_endpoint: Annotated[
        Literal["completions", "chat"],
        Field(description="completions (this model's chat template applied here) or chat (the server's template)"),
    ] = "completions"
    concurrency: Annotated[int, CONCURRENCY.field, Field(description="requests in flight at once (--backend api)")] = 8
    api_timeout: Annotated[
        float, API_TIMEOUT.field, Field(description="seconds a request may take before it is retried")
    ] = 120.0
    api_retries: Annotated[
        int, API_RETRIES.field, Field(description="retries of a failed request, with exponential backoff")
    ] = 5
    api_accept_model: Annotated[
        str | None,
        Field(
            description="model id(s) the server may answer as besides --api-model (comma-separated; a reply from "
            "any other model is refused), recorded in run.json"
        ),
    ] = None
    api_allow_other_endpoint: Annotated[
        bool,
        Field(description="resume a served run against other endpoints than its journal's (rows name both)"),
    ] = False


# What a config names to evaluate; every other key of EvalConfig is a setting of the run, and a flag of harness.eval.
SERIES_KEYS = ("models", "precisions", "variants", "grid")
SETTINGS = tuple(name for name in EvalConfig.model_fields if name not in SERIES_KEYS)
API_SETTINGS = ("api_base", "api_model", "api_endpoint", "concurrency", "api_timeout", "api_retries")
API_SETTINGS += ("api_accept_model", "api_allow_other_endpoint")


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """A flag per setting of EvalConfig, parsed and validated by the field itself (no default: the config's)."""
    for name in SETTINGS:
        info = EvalConfig.model_fields[name]
        if info.annotation is bool:  # a switch: present means true
            parser.add_argument("--" + name.replace("_", "-"), action="store_const", const=True, help=info.description)
            continue
        annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=_flag_parser(TypeAdapter(annotation), name),
            choices=_literal_choices(info.annotation) or None,
            metavar="K" if name == "invariance_check" else None,
            help=info.description,
        )


def _literal_choices(annotation: Any) -> list[str]:
    """The strings of a Literal, also inside an Optional."""
    if get_origin(annotation) is Literal:
        return [value for value in get_args(annotation) if isinstance(value, str)]
    return [value for member in get_args(annotation) for value in _literal_choices(member)]


def _flag_parser(adapter: TypeAdapter, name: str):
    def parse(text: str):
        try:
            return adapter.validate_strings(text)
        except ValidationError as err:
            problem = err.errors()[0]
            message = problem["msg"].removeprefix("Value error, ")
            if problem["type"] in ("int_parsing", "int_from_float"):
                message = f"'{text}' is not an integer"
            elif problem["type"] == "string_too_short":
                message = "empty; give a value"
            elif problem["type"] == "literal_error":
                message = f"invalid choice: '{text}' ({problem['msg'].removeprefix('Input ')})"
            raise argparse.ArgumentTypeError(message) from None

    parse.__name__ = name
    return parse


@dataclass
class RunSpec:
    """Everything one invocation of harness.eval will do: what it evaluates, and its settings, EvalConfig's own
    values (with the flags applied), each readable as an attribute (``spec.samples``)."""

    config_name: str
    models: list[str]
    precisions: list[str] | None  # from --precision: every model must take every one of them
    grid: list[tuple[Task, list[int]]]
    settings: EvalConfig
    config_precisions: list[str] | None = None
    variants: list[tuple[str, str]] | None = None  # a config's MODEL:PRECISION series, when no flag replaces them
    model_path: str | None = None
    adapter: str | None = None
    out: Path | None = None

    def __getattr__(self, name: str) -> Any:
        settings = self.__dict__.get("settings")  # absent while a copy is being made
        if settings is not None and name in SETTINGS and name != "answer":  # answer is the mode; answer_name its name
            return getattr(settings, name)
        raise AttributeError(f"RunSpec has no attribute {name!r}")

    @property
    def answer_name(self) -> str:
        return self.settings.answer

    @property
    def answer(self) -> AnswerMode:
        """How a generation stops, how long it may run and what of it is scored (harness/questions/answers.py)."""
        if self.answer_name == "free-form":
            return FreeForm(self.max_new_tokens or FreeForm.max_new_tokens, self.think_end)
        return FIRST_LINE

    @property
    def all_seeds(self) -> list[int]:
        """The seeds the grid runs with: --seeds, else the one --seed."""
        return list(self.seeds) if self.seeds else [self.seed]

    @property
    def identity(self) -> dict:
        """The settings every row of a run directory shares (a run of several seeds holds a cell per seed)."""
        return {
            "samples": self.samples,
            "decoding": self.decoding,
            "prompt": self.prompt,
            "answer": self.answer.describe(),
        }

    def default_out(self) -> Path:
        """runs/eval/CONFIG-DECODING-nN-seedS: git-ignored, so a run never resumes into (or edits) the committed
        reference results under reports/, which are written with an explicit --out. Runs that ask otherwise than
        the paper (another prompt, free-form answers) and of several seeds say so in the name."""
        seeds = ",".join(map(str, self.all_seeds))
        name = f"{self.config_name}-{self.decoding}-n{self.samples}-seed{'s' if len(self.all_seeds) > 1 else ''}{seeds}"
        if self.prompt != "few-shot":
            name += f"-{self.prompt}"
        if self.answer_name != "first-line":
            name += f"-{self.answer_name}"
        if self.model_path:  # other weights under the same model name: never resume into the registry's cells
            name += "-" + Path(self.model_path).name
        return DEFAULT_RUNS / name

    def describe(self) -> dict:
        return {
            "config": self.config_name,
            "models": self.models,
            "precisions": self.precisions,
            "config_precisions": self.config_precisions,
            "variants": [":".join(pair) for pair in self.variants] if self.variants else None,
            "grid": {task.label: lengths for task, lengths in self.grid},
            **{name: getattr(self.settings, name) for name in SETTINGS},
            "model_path": self.model_path,
            "adapter": self.adapter,
            "answer_mode": self.answer.describe(),
            "prompt_deviations": [
                note for task, _ in self.grid for note in prompt_deviations(task, self.base, self.prompt)
            ],
        }


def find_config(name_or_path: str) -> tuple[str, Path]:
    """'quick' -> eval_configs/quick.yaml; a path is taken as it is."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise UserError(f"no config file at {path}")
        return path.stem, path
    packaged = resources.files("eval_configs").joinpath(f"{name_or_path}.yaml")
    if not packaged.is_file():
        known = sorted(p.name[:-5] for p in resources.files("eval_configs").iterdir() if p.name.endswith(".yaml"))
        raise UserError(f"unknown config '{name_or_path}'; known: {', '.join(known)} (or a path to a YAML file)")
    return name_or_path, Path(str(packaged))


def load_config(name_or_path: str) -> tuple[str, EvalConfig]:
    name, path = find_config(name_or_path)
    return name, load_yaml_model(path, EvalConfig)


def check_backend_settings(spec: RunSpec, settings: dict[str, Any]) -> None:
    """The settings of one backend given to another, said in one line; a served model's run is put on the api
    backend."""
    served = [name for name in spec.models if get_model(name).kind == "endpoint"]
    if served and len(served) < len(spec.models):
        raise UserError(f"{served[0]} is a served model: evaluate served and local models in separate runs")
    if served and spec.backend not in (None, "api"):
        raise UserError(f"{served[0]} is a served model (--backend api), not one for --backend {spec.backend}")
    if served:
        spec.settings = spec.settings.model_copy(update={"backend": "api"})
    given = [name for name in API_SETTINGS if settings.get(name) is not None]
    given += [name for name in ("api_base", "api_model") if getattr(spec, name) and name not in given]
    if given and spec.backend != "api":
        flag = "--" + given[0].replace("_", "-")
        raise UserError(f"{flag} is a setting of served models; add --backend api (with --api-base URL)")
    if spec.backend == "api" and not spec.api_base and not served:
        raise UserError(
            "--backend api needs --api-base URL (the server's OpenAI-compatible base, e.g. http://host:8000/v1)"
        )
    if spec.batch_invariant and spec.backend != "vllm":
        raise UserError(
            "--batch-invariant sets vLLM's batch-invariant kernels: add --backend vllm (a served vLLM takes "
            "VLLM_BATCH_INVARIANT=1 when it starts)"
        )
    if spec.tensor_parallel_size > 1 and spec.backend != "vllm":
        raise UserError(
            "--tensor-parallel-size splits a model across GPUs under --backend vllm only; add it or drop it"
        )


def build_spec(
    config_name: str,
    config: EvalConfig,
    *,
    models: list[str] | None = None,
    precisions: list[str] | None = None,
    tasks: list[str] | None = None,
    lengths: list[int] | None = None,
    model_path: str | None = None,
    adapter: str | None = None,
    out: Path | None = None,
    **settings: Any,
) -> RunSpec:
    """Config values, overridden by whatever flags were given, checked as a whole."""
    grid_config = {parse_task(label).label: lengths for label, lengths in config.grid.items()}
    if len(grid_config) < len(config.grid):
        raise UserError(f"config {config_name}: the grid names one task twice ({', '.join(config.grid)})")
    if tasks is not None:
        grid: list[tuple[Task, list[int]]] = []
        for label in tasks:
            task = parse_task(label)
            task_lengths = lengths or grid_config.get(task.label)
            if task_lengths is None:
                raise UserError(f"config {config_name} has no lengths for task {task.label}; pass --lengths")
            grid.append((task, list(task_lengths)))
    else:
        grid = [(parse_task(label), list(lengths or task_lengths)) for label, task_lengths in grid_config.items()]
    unique([task.label for task, _ in grid], "--tasks")
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise TypeError(f"build_spec: unknown settings {sorted(unknown)}")
    merged = config.model_copy(update={name: value for name, value in settings.items() if value is not None})
    variants = None
    # A flag that names the models, their precisions, their weights or how they run replaces the config's
    # variants by its models (the quick config: smollm2)
    replaced = models or precisions or model_path or adapter or settings.get("backend") or settings.get("api_base")
    if config.variants and not replaced:
        variants = [tuple(name.split(":", 1)) for name in config.variants]
    spec = RunSpec(
        config_name=config_name,
        models=models or (list(dict.fromkeys(model for model, _ in variants)) if variants else config.models),
        precisions=precisions,
        config_precisions=config.precisions,
        variants=variants,
        grid=grid,
        model_path=model_path,
        adapter=adapter,
        out=out,
        settings=merged,
    )
    if settings.get("seed") is not None and settings.get("seeds") is not None:
        raise UserError("--seed and --seeds both given: --seeds 0,1,2 runs several, --seed 3 one; give one")
    # given at all, by a flag or the config, even at its default value: first-line answers have no budget or thinking
    free_form_only = [
        name
        for name in ("max_new_tokens", "think_end")
        if settings.get(name) is not None or name in config.model_fields_set
    ]
    if spec.answer_name != "free-form" and free_form_only:
        flag = "--" + free_form_only[0].replace("_", "-")
        raise UserError(f"{flag} sets the budget or thinking of free-form answers; add --answer free-form")
    for task, task_lengths in spec.grid:
        for length in task_lengths:
            check_cell_bounds(spec.base, length, task)
    check_backend_settings(spec, settings)
    if model_path and len(spec.models) > 1:
        raise UserError("--model-path replaces one model's weights; give a single --model with it")
    return spec
