"""The cluster path on a real Slurm (the one-node cluster of scripts/slurm-local.sh): the from-scratch sweep as a job
array (equal to the local launcher's results; cancelled and run again, every run resumes; a task out of time
checkpoints on Slurm's warning signal, is requeued and finishes as an uninterrupted run does), fine-tuning by sbatch
(cancelled and resubmitted, it resumes), evaluation as srun tasks (equal to one process).

Marked ``slurm``: skipped where no Slurm runs, unless NUMPREC_REQUIRE_SLURM=1 (CI), which starts one or fails."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.harness.helpers import ROOT, command_env, run_module, start_module
from tests.needs import require
from tests.warm import ForkedCommand

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

SWEEP = """
tasks:
  - {{op: add, operands: 2, base: 2, lengths: [2, 3], fixed_width: true}}
precisions: [fp32]
depths: [1]
seeds: [0, 1]
train: {{n_embd: 32, n_head: 2, steps: {steps}, batch_size: 16, warmup_steps: 5, test_size: 64, eval_every: {every}}}
workers: 2
pack: 2
slurm: {slurm}
"""
TIMING = {"tokens_per_s", "mfu", "wall_s", "steps_per_s", "device_name"}


def slurm_up() -> bool:
    if not shutil.which("sinfo"):
        return False
    state = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    return state.returncode == 0 and any(s in state.stdout for s in ("idle", "mix", "alloc"))


def node_cpus() -> int:
    listed = subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True).stdout.split()
    return int(listed[0]) if listed else 0


@pytest.fixture(scope="session")
def cluster():
    if not slurm_up() and os.environ.get("NUMPREC_REQUIRE_SLURM") == "1":
        # started from here, where OMP_NUM_THREADS=1: the script counts the machine's CPUs regardless
        started = subprocess.run(
            ["bash", str(ROOT / "scripts" / "slurm-local.sh"), "start"], capture_output=True, text=True
        )
        up = started.returncode == 0 and slurm_up()
        require(up, "NUMPREC_REQUIRE_SLURM", f"no Slurm came up: {started.stderr[-1500:]}", "")
    require(slurm_up(), "NUMPREC_REQUIRE_SLURM", "no Slurm here", "bash scripts/slurm-local.sh start")
    # srun -n 2 and the two-worker sweeps wait for two CPUs: a one-CPU node would keep them queued until timeout
    restart = "bash scripts/slurm-local.sh stop; bash scripts/slurm-local.sh start"
    require(node_cpus() >= 2, "NUMPREC_REQUIRE_SLURM", f"Slurm's node has {node_cpus()} CPU, the tests need 2", restart)


def sweep(config: Path, out: Path, *extra: str, background: bool = False):
    args = ["--config", str(config), "--out", str(out), *extra]
    if background:
        return start_module("scratch.sweep", *args, stderr=subprocess.PIPE)
    return run_module("scratch.sweep", *args, timeout=600)


def results(out: Path) -> dict:
    with open(out / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    key = ("task", "length", "seed", "eval_format")
    return {tuple(r[k] for k in key): {k: v for k, v in r.items() if k not in TIMING} for r in rows}


def histories(out: Path) -> dict:
    """Each cell's evaluations (step, loss, accuracy), from the summaries the runs wrote."""
    found = {}
    for summary in sorted((out / "cells").glob("*/summary.json")):
        data = json.loads(summary.read_text())
        found[summary.parent.name] = [(h["step"], h["loss"], h["accuracy"]) for h in data["history"]]
    return found


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_sweep_on_slurm_equals_the_local_launchers(cluster, tmp_path):
    config = write(tmp_path / "sweep.yaml", SWEEP.format(steps=60, every=20, slurm=own_jobs()))
    local = sweep(config, tmp_path / "local", "--launcher", "local")
    assert local.returncode == 0, local.stderr[-2000:]
    slurm = sweep(config, tmp_path / "slurm", "--launcher", "slurm")
    assert slurm.returncode == 0, slurm.stderr[-2000:]
    assert "as tasks of a Slurm job array" in slurm.stderr
    assert len(results(tmp_path / "local")) == 4
    assert results(tmp_path / "slurm") == results(tmp_path / "local"), "every row, timing aside"
    assert histories(tmp_path / "slurm") == histories(tmp_path / "local"), "every loss and accuracy on the way"


def test_a_cancelled_sweep_resumes_every_run_from_its_checkpoint(cluster, tmp_path):
    """scancel of the array mid-run: each running task stops at its next step with its runs' checkpoints written
    (submitit alone would ignore the SIGTERM and train on until Slurm's SIGKILL); the sweep says so in one line, exit
    2. The same command again submits the unfinished runs only, and each resumes from the step it stopped at."""
    name = job_name()
    config = write(tmp_path / "sweep.yaml", SWEEP.format(steps=2000, every=100, slurm=own_jobs(name)))
    out = tmp_path / "run"
    running = sweep(config, out, "--launcher", "slurm", background=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not list((out / "cells").glob("*/checkpoint.pt")):
        time.sleep(0.2)
    assert list((out / "cells").glob("*/checkpoint.pt")), "a run has a checkpoint before the cancel"
    subprocess.run(["scancel", "--name", name], check=True)
    _, err = running.communicate(timeout=120)
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("error")]
    assert running.returncode == 2 and len(lines) == 1 and "did not finish" in lines[0], err[-2000:]
    assert "cancelled (SIGTERM) at step" in lines[0], lines[0]
    stopped = {}  # cell -> the step its task stopped at (a pack still queued at the cancel never started)
    for log in (out / "cells").glob("*/train.log"):
        found = re.search(r"stopped at step (\d+)", log.read_text())
        if found:
            stopped[log.parent.name] = int(found.group(1))
    assert stopped and min(stopped.values()) > 0, stopped
    again = sweep(config, out, "--launcher", "slurm")
    assert again.returncode == 0, again.stderr[-2000:]
    done, todo = map(int, re.search(r"(\d+) of 4 cells done; running (\d+)", again.stderr).groups())
    assert (done, todo) == (0, 4), again.stderr[-2000:]
    for cell, step in stopped.items():
        assert f"resumed at step {step}\n" in (out / "cells" / cell / "train.log").read_text(), cell
    logs = [log.read_text() for log in (out / "cells").glob("*/train.log")]
    assert sum("resumed at step" in log for log in logs) == len(stopped), "a run never started starts afresh"
    assert len(results(out)) == 4


def job_name() -> str:
    """A job name of this test's own: other tests (tests/scratch/test_sweep.py) submit numprec-scratch arrays to the
    same cluster at the same time, and a scancel by name must not reach them."""
    return f"numprec-test-{uuid.uuid4().hex[:8]}"


def own_jobs(name: str | None = None) -> str:
    """The sweep's slurm settings, its jobs under ``name`` (a fresh job_name() if none)."""
    return f"{{timeout_min: 10, name: {name or job_name()}}}"


def lift_requeue_holds(until: subprocess.Popen | ForkedCommand) -> None:
    """Slurm holds a requeued job for ~2 minutes (reason BeginTime); let it start now, as an administrator would."""
    while until.poll() is None:
        held = subprocess.run(["squeue", "-h", "-r", "-o", "%i %r"], capture_output=True, text=True).stdout.split("\n")
        for line in held:
            if line.endswith("BeginTime"):
                subprocess.run(["scontrol", "update", f"JobId={line.split()[0]}", "StartTime=now"], capture_output=True)
        time.sleep(1)


def test_a_task_warned_of_its_time_limit_checkpoints_is_requeued_and_finishes_as_uninterrupted(cluster, tmp_path):
    """Slurm's warning before a time limit (submitit's USR2; ``slurm_signal_delay_s`` says how long before it) makes
    the training stop at its next step with its checkpoint written; submitit requeues the task, and the requeued
    task resumes from that step; the run's history and result equal an uninterrupted local run's. The warning is
    sent here with scancel --signal once the task trains: a one-minute limit with the warning at 5 s raced the
    node's Python start on a loaded machine (a signal before the handler ends the task)."""
    name = job_name()
    text = SWEEP.format(steps=2000, every=500, slurm=own_jobs(name))
    text = text.replace("lengths: [2, 3]", "lengths: [3]").replace("seeds: [0, 1]", "seeds: [0]")
    config = write(tmp_path / "sweep.yaml", text)
    out = tmp_path / "slurm"
    running = sweep(config, out, "--launcher", "slurm", background=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not list((out / "cells").glob("*/checkpoint.pt")):
        time.sleep(0.2)
    # Slurm refuses a signal while the job is changing state ("try again later"): send it until it is taken
    for _ in range(60):
        if subprocess.run(["scancel", "--signal=USR2", "--name", name], capture_output=True).returncode == 0:
            break
        time.sleep(0.5)
    lift_requeue_holds(running)
    _, err = running.communicate(timeout=60)
    assert running.returncode == 0, err[-2000:]
    (log,) = [cell / "train.log" for cell in (out / "cells").glob("*")]
    text_log = log.read_text()
    assert "stopped at step" in text_log, text_log[-2000:]
    step = text_log.split("stopped at step ")[1].split(" ")[0]
    assert f"resumed at step {step}" in text_log
    local = sweep(config, tmp_path / "local", "--launcher", "local")
    assert local.returncode == 0, local.stderr[-2000:]
    assert histories(out) == histories(tmp_path / "local")
    assert results(out) == results(tmp_path / "local")


FINETUNE = """
model: smollm2
tiny: {hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}
task: add
method: lora
seed: 0
data: {seed: 0, scale: 0.01, max_samples: 120}
lora: {r: 8, alpha: 16, dropout: 0.0}
train: {learning_rate: 2.0e-2, batch_size: 8, dtype: float32, max_length: 512, logging_steps: 1, save_steps: 5}
"""


def sbatch(config: Path, out: Path, log: Path) -> str:
    command = ["sbatch", "--parsable", f"--chdir={ROOT}", f"--output={log}"]
    command += [str(ROOT / "finetune" / "slurm" / "train.sbatch"), str(config), str(out)]
    return subprocess.run(command, capture_output=True, text=True, check=True, env=command_env()).stdout.strip()


def wait_for(job: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
            return
        time.sleep(1)
    raise TimeoutError(f"job {job} still queued after {seconds} s")


def test_finetune_by_sbatch_cancelled_and_resubmitted_resumes(cluster, tmp_path):
    """sbatch train.sbatch on a node without GPUs runs accelerate's CPU processes; scancel mid-run, the same sbatch
    again resumes from the last checkpoint, and the adapter equals an uninterrupted local run's (CPU training is
    deterministic here: same data order, same seeds, same operations)."""
    from safetensors.torch import load_file

    from finetune.train import last_checkpoint

    config = write(tmp_path / "tiny.yaml", FINETUNE)
    out = tmp_path / "sbatch"
    job = sbatch(config, out, tmp_path / "first.log")
    deadline = time.monotonic() + 240
    # a complete checkpoint: a directory alone may still be half written when the cancel lands (then no resume)
    while time.monotonic() < deadline and not last_checkpoint(out / "checkpoints"):
        time.sleep(0.5)
    subprocess.run(["scancel", job], check=True)
    wait_for(job)
    assert not (out / "adapter" / "train_summary.json").exists(), "cancelled before the end"
    second = sbatch(config, out, tmp_path / "second.log")
    wait_for(second)
    summary = json.loads((out / "adapter" / "train_summary.json").read_text())
    second_log = (tmp_path / "second.log").read_text(errors="replace")  # a progress bar may be cut mid-character
    assert summary["steps"] == 15 and summary["resumed_from"], second_log[-2000:]
    local = run_module("finetune.train", "--config", str(config), "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr[-2000:]
    ours, theirs = (load_file(str(d / "adapter" / "adapter_model.safetensors")) for d in (out, tmp_path / "local"))
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert (ours[name] - theirs[name]).abs().max() < 1e-5, name


def test_evaluation_as_srun_tasks_equals_one_process(cluster, tiny_llama, tmp_path):
    """srun -n 2 harness.eval (ranks from Slurm), and the same inside an sbatch script: one run directory, every
    output identical to one process's. On tests/tiny.py's small Llama: what is tested is the ranks' split and
    merge, and the real model spends ~30 s a process writing prose up to the token budget."""
    from harness.diff import by_problem, same_output

    args = ["--tasks", "add", "--lengths", "1,2", "--samples", "4", "--batch-size", "2", "--precision", "fp32"]
    args += ["--model-path", str(tiny_llama)]
    python = [sys.executable, "-m", "harness.eval", *args]
    one = run_module("harness.eval", *args, "--out", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run(
        ["srun", "-n", "2", "--cpus-per-task=1", *python, "--out", str(tmp_path / "srun")],
        cwd=ROOT,
        env=command_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert two.returncode == 0, two.stderr[-2000:]
    script = f"#!/bin/bash\nsrun {' '.join(python)} --out {tmp_path / 'batch'}\n"
    job = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--ntasks=2",
            "--cpus-per-task=1",
            f"--chdir={ROOT}",
            f"--output={tmp_path / 'batch.log'}",
        ],
        input=script,
        capture_output=True,
        text=True,
        check=True,
        env=command_env(),
    ).stdout.strip()
    wait_for(job)
    reference = by_problem(tmp_path / "one")
    for name in ("srun", "batch"):
        theirs = by_problem(tmp_path / name)
        assert theirs.keys() == reference.keys() and len(theirs) == 8, name
        assert all(same_output(theirs[key], reference[key]) for key in reference), name
