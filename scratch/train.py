"""Train one small Transformer from scratch on one arithmetic task at one precision, then evaluate it.

    python -m scratch.train --op add --operands 3 --base 2 --length 4 --precision bf16 --steps 3000 \\
        --fixed-width --out runs/scratch/one

Paper settings (appendix tab:model_config, tab:training_config): depth 3 or 5, hidden 256, 4 heads, RoPE,
NewGELU; AdamW lr 1e-3, betas (0.9, 0.999), weight decay 0.01, cosine schedule with warmup; loss on the
answer tokens; batch 512 for 100k steps; 50k test samples. The defaults below are those, except steps,
test size and warmup, which a CPU cannot afford at the paper's values.

``--device auto|cpu|cuda|cuda:N`` (auto: CUDA when present) holds the model, optimizer and batches; digits are
drawn on the CPU, so a seed gives the same data on every device, and the rest of a batch is made on the device, 64
batches at a time (scratch/data.py). On CUDA, fp32 runs with TF32 off and ``tf32`` is a precision of its own; each
summary records the device and the matmul precision in force. On CUDA the step has no host synchronisation, AdamW
is fused, and forward and backward are compiled with CUDA graphs (``--compile auto|on|off``); a compiled step that
fails falls back to eager, a fused attention kernel that fails to the math kernel (``--attention``), each said.

``run_pack`` trains several runs of one shape (``pack_key``: the seeds of a cell) as one batched model
(scratch/pack.py); each run keeps its own weights, data, loss, optimizer state, checkpoint and summary. ``run`` is
a pack of one.

Accuracy is exact match under greedy decoding. It is computed in one teacher-forced pass: a sequence
counts when the argmax at every answer position (and at <eos>) is the right token, which is exactly when
greedy generation would reproduce the answer. Checkpoints (model, optimizer, schedule, data stream) are
written at every evaluation; rerunning the same command resumes from the last one.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, field
from pathlib import Path
from typing import Annotated

import torch
from pydantic import ConfigDict, ValidationError, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from harness.bounds import BATCH_SIZE, LEARNING_RATE, SEED, STEPS, THREADS, WEIGHT_DECAY, Bound, unique
from harness.cli import ArgParser, command_line, name_list, output_dir
from harness.cli import run as cli_run
from harness.errors import UserError, one_line
from harness.lock import DirectoryLock
from harness.machine import describe
from harness.problems import BASE, OPERANDS
from harness.trackers import Trackers, add_report_to_flag, check_folders
from scratch.data import Arithmetic, Problems
from scratch.model import GPT, identity
from scratch.numerics import (
    TRAIN_PRECISIONS,
    FloatFormat,
    Rounding,
    autocast,
    check_precision_device,
    resolve_device,
    round_weights,
    set_matmul_precision,
    training_dtype,
)
from scratch.pack import ATTENTION, Pack

COMPILE_MODES = ("auto", "on", "off")
WARM_STEPS = 3  # a compiled step's first calls: compiling, then (CUDA) warming up and capturing its graphs
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


def measure_matmul_flops(
    dtype: torch.dtype, size: int = 512, seconds: float = 0.5, device: torch.device | str = "cpu"
) -> float:
    """The device's matrix-multiply rate in this dtype (and, on CUDA, the float32 matmul mode in force; on the CPU,
    this thread count): the MFU denominator."""
    device = torch.device(device)
    if device.type == "cuda":
        size = max(size, 4096)  # a small product measures launch overhead on a GPU, not its rate
    a, b = torch.randn(size, size, dtype=dtype, device=device), torch.randn(size, size, dtype=dtype, device=device)
    a @ b
    synchronize(device)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        count += 1
        if device.type == "cuda" and count % 16 == 0:
            synchronize(device)
    synchronize(device)
    return 2 * size**3 * count / (time.perf_counter() - started)


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (a no-op on the CPU): what a timer must do before reading the clock."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def cosine_with_warmup(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


@torch.no_grad()
def exact_match(model: GPT, tokens: torch.Tensor, mask: torch.Tensor, precision: str, batch: int = 500) -> int:
    """How many sequences greedy decoding would answer exactly (all answer tokens and <eos> right)."""
    model.eval()
    correct = 0
    for start in range(0, tokens.shape[0], batch):
        x, m = tokens[start : start + batch], mask[start : start + batch]
        with autocast(precision, x.device.type):
            predicted = model(x[:, :-1]).argmax(-1)
        right = (predicted == x[:, 1:]) | ~m[:, 1:]
        correct += int(right.all(dim=1).sum())
    model.train()
    return correct


def evaluate_formats(model: GPT, tokens, mask, formats: list[str]) -> dict[str, int]:
    """Exact-match count of the trained model when weights and every activation are rounded to each format."""
    results = {}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    dtype = next(model.parameters()).dtype
    model.float()
    for name in formats:
        fmt = FloatFormat.parse(name)
        round_weights(model, fmt)
        model.rounding = Rounding(fmt)
        results[name] = exact_match(model, tokens, mask, "fp32")
        model.load_state_dict({k: v.float() for k, v in state.items()})
    model.rounding = identity
    model.to(dtype).load_state_dict(state)
    return results


def pack_key(config: RunConfig) -> tuple:
    """Runs with equal keys can be trained as one pack: the same model shape, precision, schedule and device
    (the seeds of a cell, or cells whose sequences have the same length and vocabulary)."""
    task = config.task()
    return (
        task.vocab_size,
        task.seq_len,
        *(getattr(config, name) for name in RunConfig.__dataclass_fields__ if name not in PER_RUN),
    )


PER_RUN = {"op", "operands", "base", "length", "fixed_width", "seed", "test_size", "eval_formats"}


def pack_batch(problems: Sequence[Problems], batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each run's next training batch, stacked: tokens and mask (runs, batch, sequence)."""
    batches = [p.train_batch(batch_size) for p in problems]
    return torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])


# What a resumed checkpoint must share with the command: the task, the model's shape, the precision and the run.
RESUME_KEYS = ("op", "operands", "base", "length", "fixed_width", "precision", "depth", "n_embd", "n_head", "seed")
RESUME_KEYS += ("batch_size",)
# What a resumed run must also keep: settings that change the training from the step it resumes at (the schedule,
# the optimiser, the attention kernel's arithmetic; more steps only lengthen it). A summary describes the whole run.
TRAINING_KEYS = ("lr", "weight_decay", "warmup_steps", "attention")


def read_checkpoint(path: Path, config: RunConfig, device: torch.device | str = "cpu") -> dict | None:
    """The run's checkpoint (None where there is none yet), checked at the door: a readable scratch checkpoint of
    the same task, shape, precision and seed as ``config``; anything else is one line naming the file."""
    if not path.exists():
        return None
    why = None
    if not path.is_file():
        why = "is not a file"
    else:
        try:
            state = torch.load(path, weights_only=False, map_location=device)
        except Exception as err:  # noqa: BLE001 (empty, cut short, not a torch file: all one answer)
            why = f"cannot be read ({one_line(err)})"
        else:
            fields = ("model", "optimizer", "step", "history", "data_rng", "config")
            if not isinstance(state, dict) or not all(name in state for name in fields):
                why = "is not a scratch.train checkpoint"
            elif not isinstance(state["config"], dict):
                why = "has no run config"
    if why:
        raise UserError(f"{path} {why}; remove it to train from step 0, or pass another --out")
    theirs, ours = state["config"], asdict(config)
    differs = [
        f"{key} {theirs.get(key)!r} there vs {ours[key]!r} now" for key in RESUME_KEYS if theirs.get(key) != ours[key]
    ]
    if differs:
        raise UserError(f"{path} is another run's checkpoint ({', '.join(differs)}); pass another --out to keep both")
    changed = [
        f"{key} {theirs[key]!r} there vs {ours[key]!r} now"
        for key in TRAINING_KEYS
        if key in theirs and theirs[key] != ours[key]
    ]
    if changed:
        raise UserError(
            f"{path} was trained with other settings ({', '.join(changed)}), which would change the run from step "
            f"{state['step']} on; resume with its settings, or pass another --out"
        )
    return state


def run(
    config: RunConfig,
    out: Path | None = None,
    log: Callable[[str], object] = print,
    on_eval: Callable[[int, int, dict], object] | None = None,
) -> dict:
    """Train (or resume) one run; return its summary. ``out`` holds the checkpoint and the log."""
    return run_pack([config], [out], [log], on_eval=on_eval)[0]


class Preempted(Exception):
    """``run_pack`` stopped at a step boundary because ``should_stop`` said so; every run's checkpoint is written."""


def run_pack(
    configs: Sequence[RunConfig],
    outs: Sequence[Path | None],
    logs: Sequence[Callable[[str], object]],
    should_stop: Callable[[], bool] | None = None,
    on_eval: Callable[[int, int, dict], object] | None = None,
) -> list[dict]:
    """Train (or resume) runs of one pack_key together; return their summaries, in order. Each ``out`` holds
    its run's checkpoint and summary (and ``logs`` has a log per run), so a run resumes alone or in any pack.
    ``should_stop`` (a preemption's signal) is asked after every step: when it says so, each run's checkpoint is
    written at that step and Preempted is raised, so a requeued job goes on from there, not from the last evaluation."""
    if len({pack_key(config) for config in configs}) != 1:
        raise ValueError("a pack needs runs of one shape, precision, schedule and device (pack_key)")
    for out in outs:
        if out:
            out.mkdir(parents=True, exist_ok=True)
    checkpoints = [out / "checkpoint.pt" if out else None for out in outs]
    device = resolve_device(configs[0].device)
    saved = [read_checkpoint(c, config, device) if c else None for c, config in zip(checkpoints, configs, strict=True)]
    starts = [state["step"] if state else 0 for state in saved]
    if len(set(starts)) > 1:  # interrupted while writing the pack's checkpoints: runs at one step train together
        summaries: dict[int, dict] = {}
        for start in sorted(set(starts)):
            members = [i for i, s in enumerate(starts) if s == start]
            done = run_pack(
                [configs[i] for i in members],
                [outs[i] for i in members],
                [logs[i] for i in members],
                should_stop,
                None if on_eval is None else lambda r, step, record, m=members: on_eval(m[r], step, record),
            )
            summaries.update(zip(members, done, strict=True))
        return [summaries[i] for i in range(len(configs))]
    config = configs[0]
    if config.precision not in TRAIN_PRECISIONS:
        raise ValueError(f"unknown precision {config.precision!r}; known: {', '.join(TRAIN_PRECISIONS)}")
    torch.set_num_threads(config.threads)
    matmul_precision = set_matmul_precision(config.precision, device)
    pack = Pack(configs, device, say=lambda line: [log(line) for log in logs])
    # Problems are drawn on the CPU (the same stream on every device); answers and tokens are made on the device.
    problems = [Problems(c.task(), c.seed, c.test_size, device) for c in configs]
    tests = [p.test_set() for p in problems]
    step, histories = 0, [[] for _ in configs]
    train_seconds, tokens_seen = 0.0, 0  # the timed steps': compiling and capturing graphs are timed apart
    session_seconds, data_seconds = 0.0, 0.0  # this process's, for the share of a step spent making data
    compile_seconds, warming = 0.0, WARM_STEPS if pack.compiled else 0
    if saved[0]:
        for r, state in enumerate(saved):
            pack.load(r, state["model"])
            problems[r].restore(state["data_rng"].cpu(), state.get("data_used", 0))
            histories[r] = state["history"]
        pack.load_optimizer([state["optimizer"] for state in saved])
        step = saved[0]["step"]
        train_seconds, tokens_seen = saved[0]["train_seconds"], saved[0]["tokens_seen"]
        for log in logs:
            log(f"resumed at step {step}")
    gemm_dtype = torch.float32 if config.precision in ("fp32", "tf32") else torch.bfloat16
    gemm = measure_matmul_flops(gemm_dtype, device=device)
    flops_per_token = pack.models[0].flops_per_token(configs[0].task().seq_len)
    eval_batch = 500 if device.type == "cpu" else 8192
    packed = f"  ({len(configs)} runs packed)" if len(configs) > 1 else ""
    interval_started = time.perf_counter()

    def save(seconds: float) -> None:
        """Every run's checkpoint at this step (each file replaced whole)."""
        for r, (run_config, out) in enumerate(zip(configs, outs, strict=True)):
            if not out:
                continue
            data_rng, data_used = problems[r].data_state()
            state = {
                "model": pack.model(r).state_dict(),
                "optimizer": pack.optimizer_state(r),
                "step": step,
                "history": histories[r],
                "data_rng": data_rng,
                "data_used": data_used,
                "config": asdict(run_config),
                "train_seconds": seconds,
                "tokens_seen": tokens_seen,
            }
            torch.save(state, checkpoints[r].with_suffix(".tmp"))
            os.replace(checkpoints[r].with_suffix(".tmp"), checkpoints[r])

    while step < config.steps:
        lr = config.lr * cosine_with_warmup(step, config.warmup_steps, config.steps)
        if warming:  # the compiled step's first calls compile it and capture its graphs: timed apart
            synchronize(device)
            warm_started = time.perf_counter()
        data_started = time.perf_counter()
        tokens, mask = pack_batch(problems, config.batch_size)
        data_seconds += time.perf_counter() - data_started
        losses = pack.step(tokens, mask, lr)
        step += 1
        if warming:
            synchronize(device)
            compile_seconds += time.perf_counter() - warm_started
            warming = warming - 1 if pack.compiled else 0
            interval_started = time.perf_counter()
            if not warming and pack.compiled:
                for log in logs:
                    log(f"compiled the training step in {compile_seconds:.1f} s (its first {WARM_STEPS} steps)")
        else:
            tokens_seen += tokens.numel()
        if step % config.eval_every == 0 or step == config.steps:
            losses = losses.tolist()  # the host waits for the GPU here, so the interval's time is real
            elapsed = time.perf_counter() - interval_started
            train_seconds += elapsed
            session_seconds += elapsed
            tokens_per_s = tokens_seen / train_seconds if train_seconds else 0.0
            for r in range(len(configs)):
                model = pack.model(r)
                accuracy = exact_match(model, *tests[r], config.precision, eval_batch) / len(tests[r][0])
                histories[r].append(
                    {"step": step, "loss": losses[r], "accuracy": accuracy, "tokens_per_s": tokens_per_s}
                )
                if on_eval is not None:  # the trackers (--report-to)
                    on_eval(r, step, {"loss": losses[r], "accuracy": accuracy, "learning_rate": lr})
                logs[r](
                    f"step {step:>6}  loss {losses[r]:.4f}  test accuracy {accuracy:.4f}  {tokens_per_s:,.0f} tok/s  "
                    f"MFU {tokens_per_s * flops_per_token / gemm:.1%}{packed}"
                )
            save(train_seconds)
            interval_started = time.perf_counter()
        elif should_stop is not None and should_stop():
            save(train_seconds + time.perf_counter() - interval_started)
            for log in logs:
                log(f"stopped at step {step} (a signal): checkpoint written")
            raise Preempted(step)
    tokens_per_s = tokens_seen / train_seconds if train_seconds else 0.0
    machine = describe()
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else machine["cpu"]
    summaries = []
    for r, (run_config, out) in enumerate(zip(configs, outs, strict=True)):
        model, (test_tokens, test_mask) = pack.model(r), tests[r]
        correct = exact_match(model, test_tokens, test_mask, config.precision, eval_batch)
        summary = {
            "config": asdict(run_config),
            "steps": step,
            "n_test": len(test_tokens),
            "correct": correct,
            "accuracy": correct / len(test_tokens),
            "disjoint_test": problems[r].disjoint,
            "whole_space_test": problems[r].whole_space,
            "device": str(device),
            "device_name": device_name,
            "machine": machine,
            "matmul_precision": matmul_precision,
            **pack.described(),  # compiled or eager (and why), which attention kernels
            "compile_seconds": compile_seconds,  # this process's first compiled steps, apart from the rate below
            "runs_packed": len(configs),
            # Throughput is the process's: every packed run's tokens in the pack's time.
            "tokens_per_s": tokens_per_s,
            "steps_per_s": tokens_per_s / (len(configs) * config.batch_size * config.task().seq_len),
            "mfu": tokens_per_s * flops_per_token / gemm,
            "gemm_flops": gemm,
            "data_host_share": data_seconds / session_seconds if session_seconds else 0.0,
            "train_seconds": train_seconds,
            "history": histories[r],
            "formats": evaluate_formats(model, test_tokens, test_mask, run_config.eval_formats),
        }
        if out:
            (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        summaries.append(summary)
    return summaries


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m scratch.train", description=__doc__.split("\n\n")[0])
    for name, value in asdict(RunConfig()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, action="store_true")
        elif isinstance(value, list):
            parser.add_argument(flag, type=name_list, default=value)
        else:
            parser.add_argument(flag, type=LIMITS[name].arg if name in LIMITS else type(value), default=value)
    parser.add_argument("--out", type=output_dir, default=None, help="run directory: checkpoint.pt, summary.json")
    add_report_to_flag(parser)
    args = vars(parser.parse_args(argv))
    args.pop("verbose")  # read by harness/quiet.py before the imports
    out, report_to = args.pop("out"), args.pop("report_to")
    if report_to and not out:
        raise UserError("--report-to writes under the run directory; give --out DIR")
    config = RunConfig.build(**args)
    if out:
        read_checkpoint(out / "checkpoint.pt", config)  # a checkpoint of another run is refused before any work
    check_folders(report_to, out or Path("."))
    lock = DirectoryLock(out, command_line("scratch.train", argv)) if out else None
    trackers = Trackers(report_to, out, out.name, asdict(config)) if report_to else None
    try:
        summary = run(config, out, on_eval=trackers and (lambda r, step, record: trackers.log(record, step)))
    finally:
        if trackers:
            trackers.close()
        if lock:
            lock.release()
    print(json.dumps({k: v for k, v in summary.items() if k not in ("history", "config")}, indent=2))
    return 0


if __name__ == "__main__":
    cli_run(main)
