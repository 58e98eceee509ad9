"""The run directory: one writer at a time, no leftovers from a killed write, nothing written into the checkout."""

import shutil
import subprocess

import pytest

from harness.results import RunDir

from .helpers import ROOT, assert_user_error, run_module

IDENTITY = {"samples": 2, "seed": 0, "decoding": "greedy"}
SMALL = ["--tasks", "add", "--lengths", "1", "--samples", "2"]


def test_a_second_writer_is_refused_while_the_first_holds_the_directory(tmp_path):
    out = tmp_path / "run"
    holder = RunDir(out, IDENTITY, "python -m harness.eval (holder)", {})
    try:
        result = run_module("harness.eval", *SMALL, "--out", str(out))
        assert_user_error(result, "another process is writing to", "pass another --out")
        assert not (out / "results.csv").exists()
    finally:
        holder.close()
    again = RunDir(out, IDENTITY, "python -m harness.eval (next)", {})  # released: the next writer gets in
    again.close()


def test_temporary_files_of_a_killed_write_are_removed_on_resume(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    strays = [out / ".summary.md.k3j2_x.tmp", out / ".results.csv.a8f1.tmp"]
    for stray in strays:
        stray.write_text("half a file")
    (out / "notes.txt").write_text("the user's own file")
    RunDir(out, IDENTITY, "python -m harness.eval", {}).close()
    assert not any(stray.exists() for stray in strays)
    assert (out / "notes.txt").read_text() == "the user's own file"


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs a git checkout")
def test_the_main_job_leaves_a_fresh_clone_clean(tmp_path):
    """README's main job, run from a fresh clone, computes (nothing to resume) and changes no tracked file:
    the default run directory is runs/eval/, which git ignores, not the committed reference results."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    # PYTHONSAFEPATH: the code under test (this checkout's), run with the clone as the working directory
    result = run_module("harness.eval", *SMALL, cwd=clone, env={"PYTHONSAFEPATH": "1"})
    assert result.returncode == 0, result.stderr
    assert "already done" not in result.stderr
    assert (clone / "runs" / "eval" / "quick-greedy-n2-seed0" / "results.csv").is_file()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True, check=True)
    assert status.stdout == "", status.stdout
