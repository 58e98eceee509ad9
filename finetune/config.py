"""The fine-tuning config's schema (finetune/configs/*.yaml): the model (a registry name, a path or a tiny one),
data, LoRA, quantization and training settings, each read strictly and each bounded; load_config reads one file."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, model_validator

from finetune.data import SCALE, check_task
from harness.core.bounds import BATCH_SIZE, LEARNING_RATE, PROBABILITY, SEED, STEPS, WEIGHT_DECAY, Bound, unique
from harness.core.configfiles import StrictModel, load_yaml_model
from harness.core.errors import UserError, one_line
from harness.core.files import read_json

# transformers' SchedulerType values
Scheduler = Literal[
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
]

# A tiny model is for tests and smoke runs; real models come from the registry or model_path.
WIDTH = Annotated[int, Bound(1, 4096, "a tiny model; give a real one as model or model_path").field]


LAYERS = Annotated[int, Bound(1, 64, "a tiny model; give a real one as model or model_path").field]


class TinyModel(StrictModel):
    """A randomly initialised Llama with the model's tokenizer: for tests and smoke runs."""

    hidden_size: WIDTH = 64
    intermediate_size: WIDTH = 128
    num_hidden_layers: LAYERS = 2
    num_attention_heads: LAYERS = 4
    num_key_value_heads: LAYERS = 2

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyModel:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} must divide hidden_size {self.hidden_size}"
            )
        head = self.hidden_size // self.num_attention_heads
        if head % 2:  # rotary position embeddings turn pairs of a head's dimensions
            raise ValueError(
                f"hidden_size {self.hidden_size} / num_attention_heads {self.num_attention_heads} gives heads of "
                f"{head} dimensions; rotary position embeddings need an even number"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads {self.num_key_value_heads} must divide num_attention_heads "
                f"{self.num_attention_heads}"
            )
        return self


def _paper_lengths(lengths: list[int]) -> list[int]:
    from finetune.data import PAPER_COUNTS

    if not lengths or any(length not in PAPER_COUNTS for length in lengths) or len(set(lengths)) < len(lengths):
        raise ValueError(f"must list distinct lengths from the paper's {min(PAPER_COUNTS)}-{max(PAPER_COUNTS)}")
    return lengths


class DataConfig(StrictModel):
    seed: Annotated[int, SEED.field] = 0
    scale: Annotated[float, SCALE.field] = 1.0  # fraction of the paper's 60k samples per task
    path: str | None = None  # a dataset saved by python -m finetune.data (instead of building one)
    # The operand lengths trained on, each with the paper's count times scale (default: the paper's 1-9).
    lengths: Annotated[list[int], AfterValidator(_paper_lengths)] | None = None
    max_samples: Annotated[int, Bound(1, 10_000_000, "more than 100 epochs of the paper's data").field] | None = None


class LoraSettings(StrictModel):
    r: Annotated[int, Bound(1, 1024, "a LoRA rank past 1024 is no longer low-rank for any model here").field] = 8
    alpha: Annotated[float, Bound(above=0, high=4096, why="the update is scaled by alpha / r", kind=float).field] = 16
    dropout: Annotated[float, PROBABILITY.field] = 0.05
    target_modules: str | list[str] = "all-linear"


class QuantSettings(StrictModel):
    compute_dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    # FSDP shards the 4-bit weights as tensors of this dtype: it must match the FSDP mixed-precision dtype.
    storage_dtype: Literal["uint8", "float32", "bfloat16", "float16"] = "uint8"


class TrainSettings(StrictModel):
    learning_rate: Annotated[float, LEARNING_RATE.field] = 2e-4
    epochs: Annotated[float, Bound(above=0, high=1000, why="the paper trains 1 epoch", kind=float).field] = 1
    batch_size: Annotated[int, BATCH_SIZE.field] = 8
    grad_accum: Annotated[int, Bound(1, 4096, "the effective batch is batch_size x grad_accum").field] = 1
    weight_decay: Annotated[float, WEIGHT_DECAY.field] = 0.01
    warmup_ratio: Annotated[float, PROBABILITY.field] = 0.1
    scheduler: Scheduler = "cosine"
    adam_beta1: Annotated[float, PROBABILITY.field] = 0.9
    adam_beta2: Annotated[float, PROBABILITY.field] = 0.999
    # -1: train for `epochs`; 0 would be a run that trains nothing.
    max_steps: Annotated[int, STEPS.field] | Literal[-1] = -1
    dtype: Literal["float32", "bfloat16"] = "bfloat16"
    max_length: Annotated[int, Bound(16, 131_072, "longer than any context window here").field] = 1024
    logging_steps: Annotated[int, Bound(1).field] = 10
    save_steps: Annotated[int, Bound(1).field] = 500
    gradient_checkpointing: bool = False
    # The batch's common few-shot prefix computed once (finetune/prefix.py): the same loss, a fraction of the work.
    shared_prefix: bool = True
    # Keep each saved adapter under OUT/curve/ (checkpoints/ keeps the last two): the learning curve's points.
    curve: bool = False

    @model_validator(mode="after")
    def _prefix_needs_the_cache(self) -> TrainSettings:
        if self.shared_prefix and self.gradient_checkpointing:
            raise ValueError(
                "shared_prefix needs the prefix's KV cache, which gradient_checkpointing turns off; "
                "set shared_prefix: false (or gradient_checkpointing: false)"
            )
        return self


class FinetuneConfig(StrictModel):
    """``model`` and ``task`` have no default: an empty file must not start a 60,000-sample run."""

    model: str
    model_path: str | None = None
    tiny: TinyModel | None = None
    task: str | list[str]  # one task, or a mixture (the embedded model's add, iter_add:3 and mul)
    method: Literal["lora", "qlora"] = "lora"
    seed: Annotated[int, SEED.field] = 0
    data: DataConfig = DataConfig()
    lora: LoraSettings = LoraSettings()
    quant: QuantSettings = QuantSettings()
    train: TrainSettings = TrainSettings()


def load_config(path: Path) -> FinetuneConfig:
    """The config, checked whole before anything loads: its keys and ranges, model, task, weights and data."""
    if not path.is_file():
        raise UserError(f"no config file at {path}; see finetune/configs/ for examples")
    config = load_yaml_model(path, FinetuneConfig)
    from harness.models import get_model
    from harness.models.weights import plan_weights
    from harness.questions.problems import parse_task

    model = get_model(config.model)
    for task in task_list(config):
        check_task(parse_task(task))
    if not task_list(config):
        raise UserError(f"{path}: task names no task; give one (add) or a list ([add, iter_add:3, mul])")
    unique(task_list(config), "task")
    if config.model_path:
        plan_weights(model, None, config.model_path)
    rows = dataset_rows(config)
    check_schedule(config, path, rows)
    return config


def dataset_rows(config: FinetuneConfig) -> int:
    """How many examples the run trains on; a data.path is checked to be a saved dataset with the columns
    (prompt, completion) that training reads."""
    from finetune.data import sample_counts

    if not config.data.path:
        rows = sum(sample_counts(config.data.scale, config.data.lengths).values()) * len(task_list(config))
    else:
        where = Path(config.data.path)
        info = where / "dataset_info.json"
        if not info.is_file():
            raise UserError(f"data.path {where} is not a saved dataset; build one with python -m finetune.data")
        features = read_json(info, f"data.path {where} is not a saved dataset").get("features")
        missing = {"prompt", "completion"} - set(features if isinstance(features, dict) else ())
        if missing:
            raise UserError(
                f"data.path {where} has no {', '.join(sorted(missing))} column; build it with finetune.data"
            )
        import datasets

        try:
            rows = datasets.load_from_disk(str(where)).num_rows
        except Exception as err:  # noqa: BLE001 (a damaged arrow file fails in many ways)
            raise UserError(f"data.path {where} cannot be read ({one_line(err)}); build it again") from None
    return min(rows, config.data.max_samples or rows)


def check_schedule(config: FinetuneConfig, path: Path, rows: int) -> None:
    """Settings that are each in range but together train nothing, log nothing or save nothing."""
    settings = config.train
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_epoch = max(1, -(-rows // (settings.batch_size * settings.grad_accum * world)))
    steps = settings.max_steps if settings.max_steps > 0 else math.ceil(per_epoch * settings.epochs)
    for name in ("logging_steps", "save_steps"):
        value = getattr(settings, name)
        if value > steps:
            what = "log a loss" if name == "logging_steps" else "save a checkpoint (nothing to resume from)"
            raise UserError(
                f"{path}: train.{name} {value} is past the run's {steps} steps ({rows} examples), so it would never "
                f"{what}; use at most {steps}"
            )
    if settings.max_length < 512:  # the paper's prompts are ~150-250 tokens: a shorter limit may cut every answer
        shortest = shortest_example_tokens(config)
        if settings.max_length < shortest:
            raise UserError(
                f"{path}: train.max_length {settings.max_length} cuts every example (the shortest is {shortest} "
                f"tokens with its prompt), so nothing would be learned; use at least {shortest}"
            )


def shortest_example_tokens(config: FinetuneConfig) -> int:
    """Tokens of the shortest training example (a one-digit problem of each task, chat template included)."""
    from transformers import AutoTokenizer

    from finetune.data import to_example
    from harness.models import get_model
    from harness.models.weights import resolve_weights
    from harness.questions.problems import generate, parse_task

    tokenizer = AutoTokenizer.from_pretrained(resolve_weights(get_model(config.model), config.model_path))
    lengths = []
    for label in task_list(config):
        task = parse_task(label)
        length = -(-task.truncate // 2) if task.truncate else 1  # the shortest length the task allows
        example = to_example(generate(task, 10, length, 1)[0], task)
        ids = tokenizer.apply_chat_template(example["prompt"] + example["completion"], tokenize=True)
        lengths.append(len(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return min(lengths)


def task_list(config: FinetuneConfig) -> list[str]:
    return [config.task] if isinstance(config.task, str) else list(config.task)
