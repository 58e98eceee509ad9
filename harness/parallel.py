"""Data-parallel evaluation under ``accelerate launch`` (or torchrun / mpirun): every process loads the
model, each generates its share of every cell's batches (``Shard``), and the main process gathers the
generations and alone writes the run directory. Batches, prefixes and seeds are those of a single process,
so the merged results.csv and samples.jsonl equal a single-process run's, row for row (timing columns aside).

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


class Processes:
    """This process's place among the evaluation processes; trivial when there is one."""

    def __init__(self) -> None:
        self.shard = SINGLE_PROCESS
        if launched_world_size() > 1:
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
