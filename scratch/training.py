"""Training runs of one shape together (a pack, scratch/pack.py) from step 0 or their checkpoints, evaluating and
checkpointing every eval_every steps, and each run's summary; the rates (MFU against the measured matmul rate, the
share of a step spent making data) and the compiled step's first calls timed apart."""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from harness.core.errors import UserError, one_line
from harness.core.files import atomic_write_bytes
from harness.core.machine import describe
from scratch.config import (
    RunConfig,
)
from scratch.data import Problems
from scratch.model import GPT, identity
from scratch.numerics import (
    TRAIN_PRECISIONS,
    FloatFormat,
    Rounding,
    autocast,
    resolve_device,
    round_weights,
    set_matmul_precision,
)
from scratch.pack import Pack

WARM_STEPS = 3  # a compiled step's first calls: compiling, then (CUDA) warming up and capturing its graphs


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


_MATMUL_RATES: dict[tuple, float] = {}  # the rates measured in this process, by what sets them


def matmul_rate(dtype: torch.dtype, device: torch.device, matmul_precision: str) -> float:
    """measure_matmul_flops once a process for each dtype, device, thread count and matmul precision in force: the
    MFU denominator every run of the process then shares. Measuring for each run took 0.5 CPU-s a run (35 runs
    in the scratch tests: 17.7 CPU-s) and gave the runs of one sweep denominators apart by the machine's noise."""
    key = (dtype, str(device), torch.get_num_threads(), matmul_precision)
    if key not in _MATMUL_RATES:
        _MATMUL_RATES[key] = measure_matmul_flops(dtype, device=device)
    return _MATMUL_RATES[key]


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
RESUME_KEYS = (
    *("op", "operands", "base", "length", "fixed_width", "precision", "depth", "n_embd", "n_head", "seed"),
    "batch_size",
)


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
    if configs[0].precision not in TRAIN_PRECISIONS:
        raise ValueError(f"unknown precision {configs[0].precision!r}; known: {', '.join(TRAIN_PRECISIONS)}")
    training = PackTraining(configs, outs, logs, device, checkpoints, saved)
    training.train(should_stop, on_eval)
    return training.summaries()


class PackTraining:
    """One pack's training state, from step 0 or its runs' checkpoints (all at one step): the pack, each run's data
    stream, test set and history, and the clocks (timed steps, this process's steps, data making, compiling)."""

    def __init__(self, configs, outs, logs, device: torch.device, checkpoints: list, saved: list[dict | None]):
        self.configs, self.outs, self.logs, self.device = list(configs), list(outs), list(logs), device
        self.config = config = configs[0]
        self.checkpoints = checkpoints  # each run's checkpoint.pt, None for a run without an out
        torch.set_num_threads(config.threads)
        self.matmul_precision = set_matmul_precision(config.precision, device)
        self.pack = Pack(configs, device, say=lambda line: [log(line) for log in logs])
        # Problems are drawn on the CPU (the same stream on every device); answers and tokens are made on the device.
        self.problems = [Problems(c.task(), c.seed, c.test_size, device) for c in configs]
        self.tests = [p.test_set() for p in self.problems]
        self.step, self.histories = 0, [[] for _ in configs]
        self.train_seconds, self.tokens_seen = 0.0, 0  # the timed steps': compiling and capturing graphs apart
        self.session_seconds, self.data_seconds = 0.0, 0.0  # this process's, for the share spent making data
        self.compile_seconds, self.warming = 0.0, WARM_STEPS if self.pack.compiled else 0
        if saved[0]:
            self.resume(saved)
        gemm_dtype = torch.float32 if config.precision in ("fp32", "tf32") else torch.bfloat16
        self.gemm = matmul_rate(gemm_dtype, device, self.matmul_precision)
        self.flops_per_token = self.pack.models[0].flops_per_token(config.task().seq_len)
        self.eval_batch = 500 if device.type == "cpu" else 8192
        self.packed = f"  ({len(configs)} runs packed)" if len(configs) > 1 else ""

    def resume(self, saved: list[dict]) -> None:
        for r, state in enumerate(saved):
            self.pack.load(r, state["model"])
            self.problems[r].restore(state["data_rng"].cpu(), state.get("data_used", 0))
            self.histories[r] = state["history"]
        self.pack.load_optimizer([state["optimizer"] for state in saved])
        self.step = saved[0]["step"]
        self.train_seconds, self.tokens_seen = saved[0]["train_seconds"], saved[0]["tokens_seen"]
        for log in self.logs:
            log(f"resumed at step {self.step}")

    def save(self, seconds: float) -> None:
        """Every run's checkpoint at this step, each file replaced whole (written beside it, synced, renamed)."""
        for r, (run_config, checkpoint) in enumerate(zip(self.configs, self.checkpoints, strict=True)):
            if checkpoint is None:
                continue
            data_rng, data_used = self.problems[r].data_state()
            state = {
                "model": self.pack.model(r).state_dict(),
                "optimizer": self.pack.optimizer_state(r),
                "step": self.step,
                "history": self.histories[r],
                "data_rng": data_rng,
                "data_used": data_used,
                "config": asdict(run_config),
                "train_seconds": seconds,
                "tokens_seen": self.tokens_seen,
            }
            buffer = io.BytesIO()
            torch.save(state, buffer)
            atomic_write_bytes(checkpoint, buffer.getvalue())

    def train(self, should_stop, on_eval) -> None:
        """Steps until the configured count: evaluating and checkpointing every eval_every steps, and at a
        preemption's signal checkpointing and raising Preempted."""
        config, device = self.config, self.device
        interval_started = time.perf_counter()
        while self.step < config.steps:
            lr = config.lr * cosine_with_warmup(self.step, config.warmup_steps, config.steps)
            if self.warming:  # the compiled step's first calls compile it and capture its graphs: timed apart
                synchronize(device)
                warm_started = time.perf_counter()
            data_started = time.perf_counter()
            tokens, mask = pack_batch(self.problems, config.batch_size)
            self.data_seconds += time.perf_counter() - data_started
            losses = self.pack.step(tokens, mask, lr)
            self.step += 1
            if self.warming:
                synchronize(device)
                self.compile_seconds += time.perf_counter() - warm_started
                self.warming = self.warming - 1 if self.pack.compiled else 0
                interval_started = time.perf_counter()
                if not self.warming and self.pack.compiled:
                    for log in self.logs:
                        log(
                            f"compiled the training step in {self.compile_seconds:.1f} s (its first {WARM_STEPS} steps)"
                        )
            else:
                self.tokens_seen += tokens.numel()
            if self.step % config.eval_every == 0 or self.step == config.steps:
                self.evaluate(losses.tolist(), lr, interval_started, on_eval)  # the host waits for the device here
                self.save(self.train_seconds)
                interval_started = time.perf_counter()
            elif should_stop is not None and should_stop():
                self.save(self.train_seconds + time.perf_counter() - interval_started)
                for log in self.logs:
                    log(f"stopped at step {self.step} (a signal): checkpoint written")
                raise Preempted(self.step)

    def evaluate(self, losses: list[float], lr: float, interval_started: float, on_eval) -> None:
        """The interval's time counted (the losses were read, so the device is done), each run's test accuracy
        recorded, told to the trackers and logged."""
        elapsed = time.perf_counter() - interval_started
        self.train_seconds += elapsed
        self.session_seconds += elapsed
        tokens_per_s = self.tokens_seen / self.train_seconds if self.train_seconds else 0.0
        for r in range(len(self.configs)):
            correct = exact_match(self.pack.model(r), *self.tests[r], self.config.precision, self.eval_batch)
            accuracy = correct / len(self.tests[r][0])
            record = {"step": self.step, "loss": losses[r], "accuracy": accuracy, "tokens_per_s": tokens_per_s}
            self.histories[r].append(record)
            if on_eval is not None:  # the trackers (--report-to)
                on_eval(r, self.step, {"loss": losses[r], "accuracy": accuracy, "learning_rate": lr})
            self.logs[r](
                f"step {self.step:>6}  loss {losses[r]:.4f}  test accuracy {accuracy:.4f}  {tokens_per_s:,.0f} tok/s  "
                f"MFU {tokens_per_s * self.flops_per_token / self.gemm:.1%}{self.packed}"
            )

    def summaries(self) -> list[dict]:
        """Each run's summary (written to its summary.json where it has an ``out``), in order."""
        config, device = self.config, self.device
        tokens_per_s = self.tokens_seen / self.train_seconds if self.train_seconds else 0.0
        machine = describe()
        device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else machine["cpu"]
        summaries = []
        for r, (run_config, out) in enumerate(zip(self.configs, self.outs, strict=True)):
            model, (test_tokens, test_mask) = self.pack.model(r), self.tests[r]
            correct = exact_match(model, test_tokens, test_mask, config.precision, self.eval_batch)
            summary = {
                "config": asdict(run_config),
                "steps": self.step,
                "n_test": len(test_tokens),
                "correct": correct,
                "accuracy": correct / len(test_tokens),
                "disjoint_test": self.problems[r].disjoint,
                "whole_space_test": self.problems[r].whole_space,
                "device": str(device),
                "device_name": device_name,
                "machine": machine,
                "matmul_precision": self.matmul_precision,
                **self.pack.described(),  # compiled or eager (and why), which attention kernels
                "compile_seconds": self.compile_seconds,  # this process's first compiled steps, apart from the rate
                "runs_packed": len(self.configs),
                # Throughput is the process's: every packed run's tokens in the pack's time.
                "tokens_per_s": tokens_per_s,
                "steps_per_s": tokens_per_s / (len(self.configs) * config.batch_size * config.task().seq_len),
                "mfu": tokens_per_s * self.flops_per_token / self.gemm,
                "gemm_flops": self.gemm,
                "data_host_share": self.data_seconds / self.session_seconds if self.session_seconds else 0.0,
                "train_seconds": self.train_seconds,
                "history": self.histories[r],
                "formats": evaluate_formats(model, test_tokens, test_mask, run_config.eval_formats),
            }
            if out:
                atomic_write_bytes(out / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())
            summaries.append(summary)
        return summaries
