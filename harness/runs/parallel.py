"""Data-parallel evaluation under ``accelerate launch`` (or torchrun / mpirun / ``srun -n N``): every process loads
the model, each generates its share of every cell's batches (``Shard``), and the main process gathers the
generations and alone writes the run directory. Under srun (a Slurm job step of N tasks, with no other launcher's
variables) the ranks come from SLURM_PROCID / SLURM_STEP_NUM_TASKS and the processes meet on the step's first node.
Batches, prefixes and seeds are those of a single process, so the merged results.csv and samples.jsonl equal a
single-process run's, row for row (timing columns aside).

One process (plain ``python -m harness.eval``) never imports accelerate or torch.distributed.
"""

from __future__ import annotations

import os
import sys

from harness.backends import SINGLE_PROCESS, Generation, Shard

_LAUNCHER_WORLD = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


def launched_world_size() -> int:
    for name in _LAUNCHER_WORLD:
        if os.environ.get(name):
            return int(os.environ[name])
    return 1


def slurm_step_ranks() -> bool:
    """Under ``srun -n N`` (N > 1) with no other launcher: torch.distributed's variables from Slurm's, so that the
    tasks of the step meet (the first node of the step, a port of the job's). An sbatch script's own shell is no
    step of N tasks (SLURM_STEP_NUM_TASKS is srun's), so a plain command there stays one process."""
    tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS", "1") or 1)
    if tasks < 2 or launched_world_size() > 1 or "SLURM_PROCID" not in os.environ:
        return False
    first = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_NODELIST", "")
    host = "127.0.0.1"
    if first:
        import subprocess

        try:
            names = subprocess.run(["scontrol", "show", "hostnames", first], capture_output=True, text=True, timeout=30)
            host = names.stdout.split()[0] if names.returncode == 0 and names.stdout.split() else host
        except (OSError, subprocess.SubprocessError):
            pass
    job, step = int(os.environ.get("SLURM_JOB_ID", "0") or 0), int(os.environ.get("SLURM_STEP_ID", "0") or 0)
    os.environ.update(
        RANK=os.environ["SLURM_PROCID"],
        WORLD_SIZE=str(tasks),
        LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"),
        MASTER_ADDR=host,
        MASTER_PORT=os.environ.get("MASTER_PORT") or str(20000 + (job * 7 + step) % 20000),
    )
    return True


class Processes:
    """This process's place among the evaluation processes; trivial when there is one."""

    def __init__(self) -> None:
        self.shard = SINGLE_PROCESS
        if slurm_step_ranks() or launched_world_size() > 1:
            import torch
            from accelerate import PartialState

            # Sets up torch.distributed: nccl on GPUs; without CUDA gloo (cpu=True, else it falls back to one process).
            state = PartialState(cpu=not torch.cuda.is_available())
            self.shard = Shard(rank=state.process_index, world=state.num_processes)
        elif os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true" and os.environ.get("MASTER_ADDR"):
            print(
                "note: accelerate launch --cpu starts ONE process unless mpirun runs it (add --mpirun_hostfile FILE, "
                "with Open MPI installed); or use: accelerate launch --config_file finetune/accelerate/cpu_ddp.yaml "
                "--num_processes N -m harness.eval ...",
                file=sys.stderr,
            )

    @property
    def is_main(self) -> bool:
        return self.shard.rank == 0

    @property
    def parallel(self) -> bool:
        return self.shard.world > 1

    def gather(self, generations: list[Generation | None]) -> list[Generation] | None:
        """The cell's generations, complete, on the main process; None elsewhere."""
        if not self.parallel:
            return generations  # type: ignore[return-value]
        from accelerate.utils import gather_object

        mine = [(index, g) for index, g in enumerate(generations) if g is not None]
        merged: list[Generation | None] = [None] * len(generations)
        for index, generation in gather_object(mine):
            merged[index] = generation
        if any(g is None for g in merged):
            raise RuntimeError("a process returned no generation for some problems")
        return merged if self.is_main else None  # type: ignore[return-value]

    def share(self, value):
        """The main process's ``value``, on every process."""
        if not self.parallel:
            return value
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([value])[0]
