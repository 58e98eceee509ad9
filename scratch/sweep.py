"""The paper's from-scratch precision sweep: task x base x n x precision x depth x seed.

    python -m scratch.sweep --config scratch/configs/cpu.yaml --out reports/scratch-cpu

Each cell trains one model (scratch.train). ``pack: N`` trains up to N cells of one shape (the seeds of a
cell) as one stacked model in one process (scratch/pack.py): on a GPU, small models only fill it together.
``launcher: local`` runs packs in worker processes: one per visible GPU (``device: auto`` or ``cuda``), or
``workers`` single-thread processes on the CPU (on a CPU, N one-thread processes beat one N-thread process);
``launcher: slurm`` runs each pack as one task of a Slurm job array through submitit, on the GPU it asks for.
Finished cells are rows of ``results.csv``; rerunning the command skips them, and an interrupted cell resumes
from its checkpoint (checkpoints are per cell, so a cell resumes in any pack). Each cell also evaluates its
trained model under the emulated float formats of ``eval_formats`` (rows with ``eval_format`` set), which
feeds the phase diagram.

Outputs: results.csv, accuracy_vs_length.png (the paper's Fig. 2-3: a line per precision, best of seeds
solid, mean dashed with the min-max band), phase_diagram.png (mantissa bits x n -> accuracy of the
fp32-trained models evaluated in each format), summary.md.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from harness.core.bounds import THREADS, Bound, unique
from harness.core.cli import ArgParser, command_line, input_path, output_dir, run
from harness.core.configfiles import Lengths, StrictModel, load_yaml_model
from harness.core.errors import UserError
from harness.core.files import atomic_write_bytes, atomic_write_text
from harness.core.lock import DirectoryLock
from scratch.config import RunConfig
from scratch.numerics import resolve_device
from scratch.rows import cell_rows, read_rows, row_key, task_name, write_rows
from scratch.training import pack_key

PACK = Bound(1, 64, "a pack's runs share one process and one GPU's memory")

# tokens_per_s, mfu, steps_per_s and wall_s are the process's: with runs_packed > 1, every packed run's together.


class TaskGrid(StrictModel):
    op: Literal["add", "mul"]
    base: int
    lengths: Lengths
    operands: int = 2
    fixed_width: bool = False


class SweepConfig(StrictModel):
    """Ranges of the per-cell settings are scratch.train's (RunConfig), applied to every cell on load."""

    tasks: Annotated[list[TaskGrid], Field(min_length=1)]
    precisions: Annotated[list[Literal["fp32", "bf16", "bf16-amp", "tf32"]], Field(min_length=1)] = ["fp32", "bf16"]
    depths: Annotated[list[int], Field(min_length=1)] = [3]
    seeds: Annotated[list[int], Field(min_length=1)] = [0, 1, 2]
    train: dict = {}  # scratch.config.RunConfig fields shared by every cell: n_embd, steps, batch_size, lr, ...
    workers: Annotated[int, THREADS.field] = 2  # on the CPU: single-thread processes, at most one per core
    pack: Annotated[int, PACK.field] = 1  # cells of one shape trained together in one process (1: one by one)
    device: str = "auto"  # every cell's: auto (CUDA when present), cpu, cuda, cuda:N
    launcher: Literal["local", "slurm"] = "local"
    slurm: dict = {}  # submitit parameters, e.g. {slurm_partition: gpu, timeout_min: 2880, gpus_per_node: 1}


PER_CELL = {"op", "operands", "base", "length", "fixed_width", "precision", "depth", "seed", "threads", "device"}


def load_sweep(path: Path) -> SweepConfig:
    if not path.is_file():
        raise UserError(f"no sweep config at {path}; see scratch/configs/cpu.yaml")
    config = load_yaml_model(path, SweepConfig)
    allowed = set(RunConfig.__dataclass_fields__) - PER_CELL
    unknown = set(config.train) - allowed
    if unknown:
        raise UserError(f"{path}: train.{sorted(unknown)[0]}: unknown setting; allowed: {', '.join(sorted(allowed))}")
    for name, values in [("precisions", config.precisions), ("depths", config.depths), ("seeds", config.seeds)]:
        unique(values, f"{path}: {name}")
    cell_names = [
        f"{g.op} of {g.operands} base {g.base}{' fixed-width' if g.fixed_width else ''} n={n}"
        for g in config.tasks
        for n in g.lengths
    ]
    unique(cell_names, f"{path}: tasks")
    try:
        cells(config)  # each cell's RunConfig validated as it is made
    except UserError as err:
        raise UserError(f"{path}: {err}") from None
    return config


def cells(config: SweepConfig) -> list[RunConfig]:
    return [
        RunConfig.build(
            **config.train,
            op=grid.op,
            operands=grid.operands,
            base=grid.base,
            length=length,
            fixed_width=grid.fixed_width,
            precision=precision,
            depth=depth,
            seed=seed,
            threads=1,
            device=config.device,
        )
        for grid in config.tasks
        for length, precision, depth, seed in itertools.product(
            grid.lengths, config.precisions, config.depths, config.seeds
        )
    ]


def cell_id(c: RunConfig) -> str:
    width = "fixed" if c.fixed_width else "var"
    return f"{c.op}{c.operands}-b{c.base}-n{c.length}-{width}-{c.precision}-d{c.depth}-s{c.seed}"


def packs(todo: list[RunConfig], size: int) -> list[list[RunConfig]]:
    """Cells of one pack_key, in grid order, in packs of at most ``size``."""
    groups: dict[tuple, list[RunConfig]] = {}
    for cell in todo:
        groups.setdefault(pack_key(cell), []).append(cell)
    return [group[i : i + size] for group in groups.values() for i in range(0, len(group), size)]


def run_cells(run_configs: list[RunConfig], out: str, should_stop=None) -> list[list[dict]]:
    """One pack, in whatever process runs it: train (or resume), evaluate, return each cell's rows."""
    from scratch.training import run_pack

    directories = [Path(out) / "cells" / cell_id(c) for c in run_configs]
    started = time.perf_counter()
    with ExitStack() as stack:
        logs = []
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)
            log_file = stack.enter_context(open(directory / "train.log", "a"))
            logs.append(lambda line, log_file=log_file: print(line, file=log_file, flush=True))
        summaries = run_pack(run_configs, directories, logs, should_stop)
    wall = time.perf_counter() - started
    return [cell_rows(c, summary, wall) for c, summary in zip(run_configs, summaries, strict=True)]


class PackJob:
    """One pack as a task of a Slurm job array (submitit calls it on the node). Before a time limit or a preemption
    Slurm sends the task a warning signal (SIGUSR2, submitit's): the training then stops at its next step with every
    run's checkpoint written, and submitit's own handler checkpoints this call (``checkpoint``: the same pack again)
    and requeues the task, which resumes the runs from that step. A cancel (scancel: SIGTERM, which submitit would
    ignore until Slurm's SIGKILL) stops the training the same way, without a requeue, so nothing trained is lost
    and the task ends now; the sweep then reports it unfinished. submitit is needed on the nodes only."""

    def __call__(self, run_configs: list[RunConfig], out: str) -> list[list[dict]]:
        import signal

        from scratch.training import Preempted

        warning = _preemption_signal()
        submitit_handlers = {warning: signal.getsignal(warning), signal.SIGTERM: signal.getsignal(signal.SIGTERM)}
        received: list[int] = []
        for signum in submitit_handlers:
            signal.signal(signum, lambda signum, frame: received.append(signum))
        try:
            return run_cells(run_configs, out, should_stop=lambda: bool(received))
        except Preempted as stopped:
            for signum, handler in submitit_handlers.items():
                signal.signal(signum, handler)
            if received[0] != warning:
                raise Cancelled(f"cancelled (SIGTERM) at step {stopped.args[0]}; checkpoints written") from None
            if callable(submitit_handlers[warning]):
                # A requeue sends the job's processes SIGTERM, scontrol's own among them: ignored (inherited by the
                # child), its call finishes instead of dying half-way (seen on a loaded machine: the task failed).
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                submitit_handlers[warning](warning, None)  # checkpoint() and requeue, then exit
            raise

    def checkpoint(self, run_configs: list[RunConfig], out: str):
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, run_configs, out)


def finished_tasks(jobs, poll: float = 1.0, grace: float = 10.0):
    """(job, True) for each array task as its result appears, (job, False) for one that left Slurm's queue without
    one (cancelled, killed). From squeue and the result files alone: sacct, which submitit would ask, needs
    accounting, which a small cluster (scripts/slurm-local.sh) does without. A requeued task stays in the queue."""
    import subprocess

    pending, gone_since = list(jobs), {}
    array = pending[0].job_id.split("_")[0] if pending else ""
    while pending:
        listed = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", array], capture_output=True, text=True)
        queued = set(listed.stdout.split()) if listed.returncode == 0 else None
        if queued is not None:  # submitit names a one-task array's task N; squeue lists it as N_0
            queued |= {name.split("_")[0] for name in queued}
        for job in list(pending):
            if queued is not None and job.job_id in queued:
                gone_since.pop(job.job_id, None)  # listed again (a requeued task): its grace starts afresh
            if job.paths.result_pickle.exists():
                pending.remove(job)
                yield job, True
            elif (
                queued is not None
                and job.job_id not in queued
                # out of the queue: its result file may still be on its way (a shared file system); then it ended
                and time.monotonic() - gone_since.setdefault(job.job_id, time.monotonic()) > grace
            ):
                pending.remove(job)
                yield job, False
        if pending:
            time.sleep(poll)


def task_error(message: str) -> str:
    """A failed task's own last line (the exception), out of submitit's message around its traceback."""
    parts = message.split("----------------------")
    lines = (parts[1] if len(parts) > 2 else message).strip().splitlines() or [""]
    return lines[-1].removeprefix("scratch.sweep.")[:120]


class Cancelled(Exception):
    """A task stopped by a cancel, with every run's checkpoint written: the job's error, which the sweep reports."""


def _preemption_signal():
    """The signal submitit has Slurm send before a time limit (USR2 unless SUBMITIT_PREEMPT_SIGNAL says)."""
    import os
    import signal

    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2").removeprefix("SIG"))


def cell_key(c: RunConfig) -> tuple:
    return tuple(
        str(v) for v in (task_name(c), c.operands, c.base, c.length, c.fixed_width, c.precision, c.depth, c.seed)
    )


def worker_devices(config: SweepConfig) -> list[str]:
    """A worker per visible GPU (device auto or cuda), the one GPU named (cuda:N), or ``workers`` CPU workers."""
    import torch

    device = resolve_device(config.device)
    if device.type == "cpu":
        return ["cpu"] * config.workers
    if config.device in ("auto", "cuda"):
        return [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    return [str(device)]


def check_slurm() -> None:
    """launcher: slurm submits with sbatch and follows the tasks with squeue: both must be here, before any work."""
    import shutil

    missing = [program for program in ("sbatch", "squeue") if shutil.which(program) is None]
    if missing:
        raise UserError(
            f"launcher: slurm needs a Slurm cluster, and this machine has no {' or '.join(missing)}; use launcher: "
            "local (or --launcher local), or start a one-node cluster with bash scripts/slurm-local.sh start"
        )


def execute(config: SweepConfig, work: list[list[RunConfig]], devices: list[str], out: Path, on_rows) -> None:
    """Run every pack of ``work`` (locally, one at a time per worker of ``devices``); ``on_rows`` gets each finished
    cell's rows."""
    work = list(work)
    if not work:
        return
    if config.launcher == "slurm":
        try:
            import submitit
        except ImportError:
            raise UserError("launcher: slurm needs submitit; run: pip install submitit") from None
        executor = submitit.AutoExecutor(folder=str(out / "slurm" / "%j"), cluster="slurm")
        executor.update_parameters(**{"name": "numprec-scratch", "cpus_per_task": 1, "timeout_min": 60, **config.slurm})
        jobs = executor.map_array(PackJob(), work, [str(out)] * len(work))
        print(f"submitted {len(jobs)} array task(s): job {jobs[0].job_id.split('_')[0]}", file=sys.stderr)
        unfinished = []
        for job, ended in finished_tasks(jobs):
            if not ended:
                unfinished.append(f"task {job.job_id} left the queue with no result (cancelled or killed)")
                continue
            try:
                results = job.result()
            except (submitit.core.utils.UncompletedJobError, submitit.core.utils.FailedJobError) as err:
                unfinished.append(f"task {job.job_id}: {task_error(str(err))}")
                continue
            for rows in results:
                on_rows(rows)
        if unfinished:
            raise UserError(
                f"{len(unfinished)} of {len(jobs)} Slurm task(s) did not finish ({'; '.join(unfinished[:3])}); the "
                "finished cells are saved and the others resume from their checkpoints: rerun the same command"
            )
        return
    free = list(devices)
    with ProcessPoolExecutor(max_workers=len(free), mp_context=get_context("spawn")) as pool:
        running: dict = {}
        while work or running:
            while work and free:  # each worker's device takes one pack at a time
                device = free.pop()
                pack = [replace(cell, device=device) for cell in work.pop(0)]
                running[pool.submit(run_cells, pack, str(out))] = device
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                free.append(running.pop(future))
                for rows in future.result():
                    on_rows(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m scratch.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=input_path, required=True)
    parser.add_argument("--out", type=output_dir, required=True)
    parser.add_argument(
        "--launcher", choices=("local", "slurm"), help="overrides the config's launcher: (local: this machine)"
    )
    args = parser.parse_args(argv)
    config = load_sweep(args.config)
    if args.launcher:
        config = config.model_copy(update={"launcher": args.launcher})
    if config.launcher == "slurm":
        check_slurm()
    lock = DirectoryLock(args.out, command_line("scratch.sweep", argv))
    try:
        return sweep(args, config)
    finally:
        lock.release()


def sweep(args, config: SweepConfig) -> int:
    """Run the grid's unfinished cells into args.out (held by main's lock)."""
    results = args.out / "results.csv"
    rows, damaged = read_rows(results)
    if damaged:  # a cell's row can be made again: its run resumes from its checkpoint, or trains again
        print(
            f"repaired {args.out}: {len(damaged)} damaged row(s) of results.csv left out; their cells run again",
            file=sys.stderr,
        )
    done = {row_key(row) for row in rows}
    grid = cells(config)
    todo = [c for c in grid if cell_key(c) not in done]
    total = len(grid)
    work = packs(todo, config.pack)
    devices = [] if config.launcher == "slurm" else worker_devices(config)
    where = f"on {len(devices)} worker(s) ({', '.join(sorted(set(devices)))})"
    if config.launcher == "slurm":
        where = "as tasks of a Slurm job array"
    print(
        f"{total - len(todo)} of {total} cells done; running {len(todo)} in {len(work)} "
        f"pack(s) of at most {config.pack} {where}",
        file=sys.stderr,
    )
    (args.out / "sweep_config.yaml").write_text(args.config.read_text())
    from tqdm import tqdm

    progress = tqdm(total=len(todo), unit="cell", file=sys.stderr, disable=not todo)

    def record(new_rows: list[dict]) -> None:
        rows.extend(new_rows)
        write_rows(results, rows)
        write_plots(args.out, rows)
        native = new_rows[0]
        progress.update(1)
        progress.write(
            f"{native['task']} b{native['base']} n={native['length']} {native['precision']:>8} "
            f"d{native['depth']} s{native['seed']}: {native['accuracy']:.3f} "
            f"({native['tokens_per_s']:.0f} tok/s, {native['wall_s']:.0f} s)"
        )

    try:
        execute(config, work, devices, args.out, record)
    finally:
        progress.close()
    write_plots(args.out, rows)
    print(f"wrote {results} ({len(rows)} rows), accuracy_vs_length.png, phase_diagram.png, summary.md")
    return 0


def write_plots(out: Path, rows: list[dict]) -> None:
    from scratch.plots import accuracy_figure, phase_figure, summary_markdown

    atomic_write_bytes(out / "accuracy_vs_length.png", accuracy_figure(rows))
    atomic_write_bytes(out / "phase_diagram.png", phase_figure(rows))
    atomic_write_text(out / "summary.md", summary_markdown(rows))


if __name__ == "__main__":
    run(main)
