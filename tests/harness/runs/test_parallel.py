"""Data-parallel evaluation: two processes under accelerate write what one process writes. On tests/tiny.py's small
Llama: what is tested is the processes' split and merge (the real model answers this grid with prose up to the
token budget, ~30 s a process)."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from harness.runs.results import COLUMNS
from tests.harness.helpers import ROOT, command_env, free_port, run_module

# One xdist worker runs the modules of group "parallel": its launchers meet on fixed local ports.
pytestmark = pytest.mark.xdist_group("parallel")

TIMING = {"wall_s", "tokens_per_s"}  # the only columns two runs may differ in
GRID = ["--tasks", "add,mul", "--lengths", "1", "--samples", "8", "--batch-size", "4", "--precision", "fp32"]


def rows_without_timing(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(handle)]


ACCELERATE = str(Path(sys.executable).parent / "accelerate")
LAUNCHERS = {
    # accelerate's torchrun launcher: no MPI needed
    "torchrun": [ACCELERATE, "launch", "--config_file", "finetune/accelerate/cpu_ddp.yaml", "--num_processes", "2"],
    # accelerate's own --cpu launcher: more than one process only through mpirun
    "cpu-mpirun": [ACCELERATE, "launch", "--cpu", "--num_processes", "2", "--mpirun_hostfile", "HOSTFILE"],
}


@pytest.fixture(scope="module")
def single(tiny_llama, tmp_path_factory) -> Path:
    """The grid in one process: what each launcher's two processes must write."""
    out = tmp_path_factory.mktemp("single") / "run"
    result = run_module("harness.eval", *GRID, "--model-path", str(tiny_llama), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_two_processes_match_one_row_for_row(tmp_path, launcher, tiny_llama, single, request):
    if launcher == "cpu-mpirun":
        request.getfixturevalue("mpirun")  # skips without Open MPI, unless NUMPREC_REQUIRE_MPI=1
    parallel = tmp_path / "parallel"
    grid = [*GRID, "--model-path", str(tiny_llama)]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\n")
    launch = [str(hostfile) if part == "HOSTFILE" else part for part in LAUNCHERS[launcher]]
    # a port of its own: accelerate's default (29500) may be taken by a test in another xdist worker
    launch += ["--main_process_port", str(free_port())]
    # Open MPI refuses root unless told; CI containers run as root.
    env = {**command_env(), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    result = subprocess.run(
        [*launch, "-m", "harness.eval", *grid, "--out", str(parallel)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("wrote ") == 1, "only the main process reports"
    assert "starts ONE process" not in result.stderr, "two processes really ran"
    expected = rows_without_timing(single / "results.csv")
    assert len(expected) == 2 and set(expected[0]) == set(COLUMNS) - TIMING
    assert rows_without_timing(parallel / "results.csv") == expected
    assert (parallel / "samples.jsonl").read_bytes() == (single / "samples.jsonl").read_bytes()
