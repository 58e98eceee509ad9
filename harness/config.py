"""Experiment grids (``eval_configs/*.yaml``) validated on load, merged with command-line flags."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from harness.cli import UserError, int_list
from harness.problems import Task, check_cell, parse_task

DEFAULT_RUNS = Path("runs") / "eval"  # relative to the working directory; runs/ is in .gitignore


class StrictModel(BaseModel):
    """A config section: unknown keys are an error, so a typo cannot pass silently."""

    model_config = ConfigDict(extra="forbid")


M = TypeVar("M", bound=StrictModel)


def load_yaml_model(path: Path, model: type[M]) -> M:
    """Read a YAML file into ``model``; any problem is one UserError line naming the file and the key."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', err)})") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        keys = ", ".join(list(model.model_fields)[:3])
        raise UserError(f"{path}: expected a mapping of keys ({keys}, ...), got {type(raw).__name__}")
    try:
        return model(**raw)
    except ValidationError as err:
        first = err.errors()[0]
        location = ".".join(str(part) for part in first["loc"]) or "(top level)"
        top_level_typo = first["type"] == "extra_forbidden" and len(first["loc"]) == 1
        hint = f" (allowed keys: {', '.join(model.model_fields)})" if top_level_typo else ""
        raise UserError(f"{path}: {location}: {first['msg']}{hint}") from None


class EvalConfig(StrictModel):
    """The keys an eval config may have."""

    models: list[str] = ["smollm2"]
    # Applied to each model that takes them; a model that takes none of them runs at its default precision.
    precisions: list[str] | None = None
    grid: dict[str, list[int] | str | int]  # task -> lengths, as a list or a range string "1-13"
    base: int = 10
    samples: int = 100
    decoding: Literal["greedy", "paper"] = "greedy"
    seed: int = 0
    batch_size: int = 256
    backend: Literal["hf", "llamacpp", "vllm"] | None = None  # None: what each precision needs, else hf
    tensor_parallel_size: int = 1  # vllm only


@dataclass
class RunSpec:
    """Everything one invocation of harness.eval will do."""

    config_name: str
    models: list[str]
    precisions: list[str] | None  # from --precision: every model must take every one of them
    grid: list[tuple[Task, list[int]]]
    base: int
    samples: int
    decoding: str
    seed: int
    batch_size: int
    backend: str | None
    config_precisions: list[str] | None = None
    model_path: str | None = None
    adapter: str | None = None
    out: Path | None = None
    tensor_parallel_size: int = 1
    extra: dict = field(default_factory=dict)

    @property
    def identity(self) -> dict:
        """The settings every row of a run directory shares."""
        return {"samples": self.samples, "seed": self.seed, "decoding": self.decoding}

    def default_out(self) -> Path:
        """runs/eval/CONFIG-DECODING-nN-seedS: git-ignored, so a run never resumes into (or edits) the committed
        reference results under reports/, which are written with an explicit --out."""
        name = f"{self.config_name}-{self.decoding}-n{self.samples}-seed{self.seed}"
        if self.model_path:  # other weights under the same model name: never resume into the registry's cells
            name += "-" + Path(self.model_path).name
        return DEFAULT_RUNS / name

    def describe(self) -> dict:
        return {
            "config": self.config_name,
            "models": self.models,
            "precisions": self.precisions,
            "config_precisions": self.config_precisions,
            "grid": {task.label: lengths for task, lengths in self.grid},
            "base": self.base,
            "samples": self.samples,
            "decoding": self.decoding,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "backend": self.backend,
            "tensor_parallel_size": self.tensor_parallel_size,
            "model_path": self.model_path,
            "adapter": self.adapter,
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


def _lengths(value: list[int] | str | int) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        return int_list(value)
    return list(value)


def build_spec(
    config_name: str,
    config: EvalConfig,
    *,
    models=None,
    precisions=None,
    tasks=None,
    lengths=None,
    samples=None,
    seed=None,
    decoding=None,
    base=None,
    batch_size=None,
    model_path=None,
    adapter=None,
    out=None,
    backend=None,
    tensor_parallel_size=None,
) -> RunSpec:
    """Config values, overridden by whatever flags were given, checked as a whole."""
    grid_config = {label: _lengths(value) for label, value in config.grid.items()}
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
    if not grid:
        raise UserError(f"config {config_name} names no tasks; add a grid or pass --tasks")
    spec = RunSpec(
        config_name=config_name,
        models=models or config.models,
        precisions=precisions,
        config_precisions=config.precisions,
        grid=grid,
        base=base if base is not None else config.base,
        samples=samples if samples is not None else config.samples,
        decoding=decoding or config.decoding,
        seed=seed if seed is not None else config.seed,
        batch_size=batch_size or config.batch_size,
        backend=backend or config.backend,
        model_path=model_path,
        adapter=adapter,
        out=out,
        tensor_parallel_size=tensor_parallel_size or config.tensor_parallel_size,
    )
    for _, task_lengths in spec.grid:
        for length in task_lengths:
            check_cell(spec.base, length)
    if spec.samples < 1:
        raise UserError(f"samples must be at least 1, got {spec.samples}")
    if spec.batch_size < 1:
        raise UserError(f"batch size must be at least 1, got {spec.batch_size}")
    if spec.decoding not in ("greedy", "paper"):
        raise UserError(f"unknown decoding '{spec.decoding}'; known: greedy, paper")
    if spec.tensor_parallel_size < 1:
        raise UserError(f"tensor parallel size must be at least 1, got {spec.tensor_parallel_size}")
    if model_path and len(spec.models) > 1:
        raise UserError("--model-path replaces one model's weights; give a single --model with it")
    return spec
