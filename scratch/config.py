"""One from-scratch run's settings (RunConfig), validated as they are made, with the ranges every command shares
(LIMITS: the flags of scratch.train take their argparse types from the same Bounds)."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated

from pydantic import ConfigDict, ValidationError, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from harness.core.bounds import BATCH_SIZE, LEARNING_RATE, SEED, STEPS, THREADS, WEIGHT_DECAY, Bound, unique
from harness.core.errors import UserError
from harness.questions.problems import BASE, OPERANDS
from scratch.data import Arithmetic
from scratch.numerics import (
    FloatFormat,
    check_precision_device,
    resolve_device,
    training_dtype,
)
from scratch.pack import ATTENTION

COMPILE_MODES = ("auto", "on", "off")


MAX_PARAMETERS = 1_000_000_000


MAX_BATCH_TOKENS = 4_000_000  # the paper's step: 512 sequences of at most ~70 tokens, about 36,000


MAX_TEST_TOKENS = 200_000_000  # 1.6 GB of int64 tokens; the paper's test set: 50,000 sequences


# The paper's model is depth 3-5, hidden 256, 4 heads, batch 512, 100k steps, 50k test problems
# (appendix tab:model_config, tab:training_config); the upper ends leave wide room above that.
LIMITS = {
    "operands": OPERANDS,
    "base": BASE,
    "length": Bound(1, 256, "positions cover the whole sequence; the paper's longest operands have 64 digits"),
    "depth": Bound(1, 96, "the paper's models have 3 or 5 layers"),
    "n_embd": Bound(8, 8192, "the paper's models are 256 wide"),
    "n_head": Bound(1, 128, "the paper's models have 4 heads"),
    "steps": STEPS,
    "batch_size": BATCH_SIZE,
    "lr": LEARNING_RATE,
    "weight_decay": WEIGHT_DECAY,
    "warmup_steps": Bound(0, STEPS.high, "at most steps"),
    "seed": SEED,
    "test_size": Bound(1, 1_000_000, "the paper tests on 50,000 problems"),
    "eval_every": Bound(1, STEPS.high, "evaluations happen every eval_every steps"),
    "threads": THREADS,
}


def _in(name: str):
    """A field's range (LIMITS), as pydantic checks it."""
    return LIMITS[name].field


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class RunConfig:
    """One run's settings, validated as they are made (pydantic, with the ranges every command shares: the flags of
    scratch.train take their argparse types from the same Bounds); ``RunConfig.build`` turns what is wrong into one
    UserError line naming the setting (as written in a sweep config; the flag is --name with dashes)."""

    op: str = "add"
    operands: Annotated[int, _in("operands")] = 2
    base: Annotated[int, _in("base")] = 2
    length: Annotated[int, _in("length")] = 4
    fixed_width: bool = False
    precision: str = "fp32"
    depth: Annotated[int, _in("depth")] = 3
    n_embd: Annotated[int, _in("n_embd")] = 256
    n_head: Annotated[int, _in("n_head")] = 4
    steps: Annotated[int, _in("steps")] = 3000
    batch_size: Annotated[int, _in("batch_size")] = 512
    lr: Annotated[float, _in("lr")] = 1e-3
    weight_decay: Annotated[float, _in("weight_decay")] = 0.01
    warmup_steps: Annotated[int, _in("warmup_steps")] = 100
    seed: Annotated[int, _in("seed")] = 0
    test_size: Annotated[int, _in("test_size")] = 2000
    eval_every: Annotated[int, _in("eval_every")] = 500
    eval_formats: list[str] = field(default_factory=list)
    threads: Annotated[int, _in("threads")] = 1
    device: str = "auto"  # auto (CUDA when present), cpu, cuda, cuda:N
    compile: str = "auto"  # torch.compile the step (CUDA graphs on a GPU): auto (on CUDA), on, off
    attention: str = "auto"  # kernels tried in order: auto (flash, efficient, math), flash, efficient, cudnn, math

    def task(self) -> Arithmetic:
        return Arithmetic(self.op, self.base, self.length, self.operands, self.fixed_width)

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        """The settings together: heads that divide the width, a model and a step a machine holds, a schedule that
        peaks, a task, precision, device and formats that exist."""
        if self.n_embd % self.n_head or (self.n_embd // self.n_head) % 2:
            raise ValueError(f"n_head {self.n_head} must divide n_embd {self.n_embd} into even head sizes (RoPE)")
        parameters = 12 * self.depth * self.n_embd**2
        if parameters > MAX_PARAMETERS:
            raise ValueError(
                f"depth {self.depth} x n_embd {self.n_embd} is about {parameters / 1e9:.1f}B parameters; at most "
                f"{MAX_PARAMETERS / 1e9:.0f}B here (the paper's models have 2-4M; AdamW needs 16 bytes each)"
            )
        if self.warmup_steps > self.steps:
            raise ValueError(
                f"warmup_steps {self.warmup_steps} exceeds steps {self.steps}: the schedule would never peak"
            )
        if self.compile not in COMPILE_MODES:
            raise ValueError(f"compile {self.compile!r}: use one of {', '.join(COMPILE_MODES)}")
        if self.attention not in ATTENTION:
            raise ValueError(f"attention {self.attention!r}: use one of {', '.join(ATTENTION)}")
        seq_len = self.task().seq_len
        training_dtype(self.precision)
        check_precision_device(self.precision, resolve_device(self.device))  # checks only: no flag is set
        for name in unique(self.eval_formats, "eval_formats", error=ValueError):
            FloatFormat.parse(name)
        for name, tokens, limit, why in [
            ("batch_size", self.batch_size * seq_len, MAX_BATCH_TOKENS, "one step's activations outgrow a GPU"),
            ("test_size", self.test_size * seq_len, MAX_TEST_TOKENS, "the test set is held in memory at once"),
        ]:
            if tokens > limit:
                raise ValueError(
                    f"{name} {getattr(self, name):,} x {seq_len} tokens per sequence is {tokens:,} tokens; at most "
                    f"{limit:,} ({why})"
                )
        return self

    @classmethod
    def build(cls, **values) -> RunConfig:
        """A RunConfig, or one UserError line saying what is wrong, as "name what" (``steps must be at least 1``)."""
        try:
            return cls(**values)
        except ValidationError as err:
            raise UserError(_said(err)) from None


def _said(err: ValidationError) -> str:
    """pydantic's first complaint about a RunConfig in this module's words: the setting's name, then what is wrong."""
    first = err.errors()[0]
    name = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] in ("int_parsing", "int_type", "int_from_float"):
        message = f"must be an integer, got {first['input']!r}"
    elif first["type"] in ("float_parsing", "float_type"):
        message = f"must be a number, got {first['input']!r}"
    elif name.startswith("eval_formats"):
        name, message = "eval_formats", f"must be a list of formats like [e8m7, e5m10], got {first['input']!r}"
    elif first["type"] == "unexpected_keyword_argument":
        message = "is no setting of a run"
    return f"{name} {message}" if name else message
