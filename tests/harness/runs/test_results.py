"""The run directory: one writer at a time, no leftovers from a killed write, nothing written into the checkout."""

import os
import shutil
import stat
import subprocess

import pytest

from harness.core.errors import UserError
from harness.questions.problems import Task, generate
from harness.runs.evidence import sample_digest
from harness.runs.rundir import RunDir
from tests.harness.helpers import ROOT, assert_user_error, run_module
from tests.harness.scripted import IDENTITY, a_row

SMALL = ["--precision", "fp32", "--tasks", "add", "--lengths", "1", "--samples", "2"]


@pytest.mark.slow
def test_a_second_writer_is_refused_while_the_first_holds_the_directory(tmp_path):
    out = tmp_path / "run"
    holder = RunDir(out, IDENTITY, "python -m harness.eval (holder)", {})
    try:
        result = run_module("harness.eval", *SMALL, "--out", str(out))
        assert_user_error(
            result, f"another process (pid {os.getpid()} on", "python -m harness.eval (holder)", "pass another --out"
        )
        assert not (out / "results.csv").exists()
    finally:
        holder.close()
    again = RunDir(out, IDENTITY, "python -m harness.eval (next)", {})  # released: the next writer gets in
    again.close()


@pytest.mark.slow
def test_two_runs_started_together_one_runs_one_is_refused_and_nothing_is_lost(tmp_path):
    """The issue's case: `--lengths 1,2` and `--lengths 3` launched into one --out. The first is paused once it
    holds the directory, so the second surely meets the lock (whatever the machine's speed)."""
    import json
    import signal
    import time

    from harness.runs.results import read_results
    from tests.harness.helpers import start_module

    out = tmp_path / "run"
    base = ["--precision", "fp32", "--tasks", "add", "--samples", "2", "--out", str(out)]
    first = start_module("harness.eval", *base, "--lengths", "1,2", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not _holds(out, first.pid):
            assert first.poll() is None and time.monotonic() < deadline, "the first run never took the directory"
            time.sleep(0.1)
        first.send_signal(signal.SIGSTOP)
        second = run_module("harness.eval", *base, "--lengths", "3")
        assert_user_error(second, f"another process (pid {first.pid} on", "--lengths 1,2", "pass another --out")
    finally:
        first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert sorted(row.length for row in read_results(out / "results.csv")[0]) == [1, 2]

    again = run_module("harness.eval", *base, "--lengths", "3")  # the directory is free now
    assert again.returncode == 0, again.stderr
    rows, damaged = read_results(out / "results.csv")
    assert sorted(row.length for row in rows) == [1, 2, 3] and not damaged, "every row once, none lost"
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted((s["length"], s["index"]) for s in samples) == [(n, i) for n in (1, 2, 3) for i in (0, 1)]


def _holds(out, pid: int) -> bool:
    """Whether process ``pid`` has taken the run directory (its entry is the last in run.json)."""
    import json

    try:
        return json.loads((out / "run.json").read_text())["invocations"][-1]["pid"] == pid
    except (OSError, ValueError, KeyError, IndexError):
        return False


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
@pytest.mark.slow
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


def _samples(length: int, n: int = 2) -> list[dict]:
    """The cell's real problems (add, base 10, seed 0): problem 0 answered right, the others unreadably."""
    key = {"model": "smollm2", "precision": "fp32", "adapter": "", "task": "add", "operands": 2, "truncate": ""}
    samples = []
    for problem in generate(Task("add"), 10, length, n, seed=0):
        right = problem.index == 0
        output = f"{problem.expression} = {problem.answer}" if right else "Let me think."
        sample = {
            **key,
            "base": 10,
            "length": length,
            "seed": 0,
            "index": problem.index,
            "expression": problem.expression,
            "prompt": f"<user>{problem.expression}</user>",
            "output": output,
            "extracted": problem.answer if right else None,
            "rule": "equals" if right else "none: no answer stated",
            "gold": problem.answer,
            "correct": right,
        }
        samples.append({**sample, "digest": sample_digest(sample)})
    return samples


def _finished_run(out, lengths=(1, 2, 3)):
    run_dir = RunDir(out, IDENTITY, "python -m harness.eval", {})
    for length in lengths:
        run_dir.add_cell(a_row(length), _samples(length))
    run_dir.close()
    return out


def _resume(out, identity=IDENTITY) -> RunDir:
    run_dir = RunDir(out, identity, "python -m harness.eval (again)", {})
    run_dir.close()
    return run_dir


def test_an_intact_directory_resumes_untouched(tmp_path):
    out = _finished_run(tmp_path / "run")
    before = {name: (out / name).read_bytes() for name in ("results.csv", "samples.jsonl")}
    resumed = _resume(out)
    assert resumed.repairs == [] and len(resumed.done) == 3
    assert {name: (out / name).read_bytes() for name in before} == before


@pytest.mark.parametrize(
    "damage,repair,redone",
    [
        (lambda out: (out / "samples.jsonl").unlink(), "2 of its 2 samples missing; it will be computed again", 3),
        (lambda out: _drop_lines(out / "samples.jsonl", [3]), "1 of its 2 samples missing; it will be computed", 1),
        (
            lambda out: _append(out / "samples.jsonl", "{not json\n"),
            "1 damaged line(s) (line 7: not a JSON sample) of samples.jsonl dropped",
            0,
        ),
        (lambda out: _truncate(out / "results.csv", 30), "1 damaged row(s) of results.csv", 1),
        (lambda out: _replace(out / "results.csv", ",0.5000,", ",half,"), "1 damaged row(s) of results.csv", 1),
    ],
)
def test_damaged_state_is_repaired_on_resume(tmp_path, damage, repair, redone):
    out = _finished_run(tmp_path / "run")
    damage(out)
    resumed = _resume(out)
    assert any(repair in note for note in resumed.repairs), resumed.repairs
    assert len(resumed.done) == 3 - redone, "a damaged cell counts as not finished, so it is computed again"
    again = _resume(out)  # the repair is written back: the next resume finds nothing to mend
    assert again.repairs == [] and again.done == resumed.done
    samples = (out / "samples.jsonl").read_text().splitlines() if (out / "samples.jsonl").exists() else []
    assert len(samples) == 2 * len(again.done)


def test_two_writers_duplicates_are_dropped(tmp_path):
    """What two unlocked writers once left: every sample twice, a row twice."""
    out = _finished_run(tmp_path / "run", lengths=(1,))
    _append(out / "samples.jsonl", (out / "samples.jsonl").read_text())
    lines = (out / "results.csv").read_text().splitlines(keepends=True)
    _append(out / "results.csv", lines[-1])
    resumed = _resume(out)
    assert any("repeated row" in note for note in resumed.repairs) and len(resumed.rows) == 1
    assert len((out / "samples.jsonl").read_text().splitlines()) == 2


def _edit_json_line(path, number, change):
    import json

    lines = path.read_text().splitlines(keepends=True)
    record = json.loads(lines[number])
    change(record)
    lines[number] = json.dumps(record) + "\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize(
    "edit,said,redone,correct",
    [
        # a score changed by hand: the row is recomputed from its samples
        (lambda out: _replace(out / "results.csv", ",2,1,0.5000,", ",2,2,1.0000,"), "correct 2 -> 1", 0, 1),
        # a verdict flipped by hand: the current scorer reads the output again
        (lambda out: _edit_json_line(out / "samples.jsonl", 1, lambda s: s.update(correct=True)), "1 verdict(s)", 0, 1),
        # an output rewritten by hand (to a right answer, verdict to match): its digest no longer matches
        (
            lambda out: _edit_json_line(
                out / "samples.jsonl", 1, lambda s: s.update(output=f"= {s['gold']}", correct=True, extracted=s["gold"])
            ),
            "sample 1 was edited (its digest differs)",
            1,
            None,
        ),
        # a sample moved to another cell: its own cell lacks it, and where it landed it is not that cell's problem
        (
            lambda out: _edit_json_line(out / "samples.jsonl", 1, lambda s: s.update(length=3)),
            ("1 of its 2 samples missing", "is not its problem"),
            2,
            None,
        ),
    ],
    ids=["score", "verdict", "output", "moved"],
)
def test_a_hand_edited_run_is_repaired_on_resume_and_says_so(tmp_path, edit, said, redone, correct):
    out = _finished_run(tmp_path / "run")
    edit(out)
    resumed = _resume(out)
    for words in [said] if isinstance(said, str) else said:
        assert any(words in note for note in resumed.repairs), resumed.repairs
    assert len(resumed.done) == 3 - redone
    if correct is not None:
        assert [row.correct for row in resumed.rows] == [correct] * 3
    again = _resume(out)
    assert again.repairs == [], "the repair is written back"


def test_rows_made_with_other_settings_are_refused_even_without_run_json(tmp_path):
    out = _finished_run(tmp_path / "run")
    (out / "run.json").unlink()
    with pytest.raises(UserError, match="samples 2 there vs 4 now"):
        _resume(out, {**IDENTITY, "samples": 4})


def test_a_damaged_run_record_is_one_line(tmp_path):
    out = _finished_run(tmp_path / "run")
    (out / "run.json").write_text("[]")
    with pytest.raises(UserError, match="run.json is damaged"):
        _resume(out)


def test_a_directory_with_no_finished_cell_takes_a_corrected_command(tmp_path):
    out = tmp_path / "run"
    RunDir(out, IDENTITY, "python -m harness.eval --seed 0 (crashed before any cell)", {}).close()
    resumed = _resume(out, {**IDENTITY, "seed": 1})
    assert resumed.done == set()


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_output_files_follow_the_umask(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        out = _finished_run(tmp_path / "run", lengths=(1,))
    finally:
        os.umask(previous)
    for name in ("results.csv", "samples.jsonl", "run.json"):
        assert stat.S_IMODE((out / name).stat().st_mode) == mode, name


def _drop_lines(path, numbers):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for number, line in enumerate(lines) if number not in numbers))


def _append(path, text):
    with open(path, "a") as handle:
        handle.write(text)


def _truncate(path, characters):
    path.write_text(path.read_text()[:-characters])


def _replace(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.slow
def test_a_deleted_samples_file_is_computed_again_not_reported_done(tmp_path):
    out = tmp_path / "run"
    assert run_module("harness.eval", *SMALL, "--out", str(out)).returncode == 0
    first = (out / "samples.jsonl").read_text()
    (out / "samples.jsonl").unlink()
    again = run_module("harness.eval", *SMALL, "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "2 of its 2 samples missing; it will be computed again" in again.stderr
    assert "already done" not in again.stderr
    assert (out / "samples.jsonl").read_text() == first, "the same seed gives the same samples back"


def test_a_slow_int4_series_on_a_gpu_is_flagged_check_the_kernel():
    """summary.md flags a 4-bit series below 0.8x its bf16 series' tokens/s, on a GPU only (the rows of a committed
    run, given a GPU machine and the rates a wrong and a right kernel give)."""
    from dataclasses import replace

    from harness.reports.summary import summary_markdown
    from harness.runs.results import read_results
    from tests.harness.helpers import ROOT

    rows, _ = read_results(ROOT / "reports" / "quantization-cpu" / "results.csv")
    base = [replace(r, machine="gpu1", tokens_per_s=1000.0) for r in rows if r.precision == "fp32"]
    bf16 = [replace(r, precision="bf16", weight_dtype="bfloat16") for r in base]
    awq = [
        replace(r, precision="awq-w4", method="awq", kernel="gptqmodel.AwqTorchLinear", tokens_per_s=600.0)
        for r in base
    ]
    flagged = summary_markdown(bf16 + awq, ["python -m harness.eval"], gpu_machines=frozenset({"gpu1"}))
    assert "**check the kernel**: smollm2 awq-w4 ran at 0.60x the tokens/s of smollm2 bf16" in flagged
    assert "gptqmodel.AwqTorchLinear" in flagged
    fast = [replace(r, tokens_per_s=950.0) for r in awq]
    assert "check the kernel" not in summary_markdown(bf16 + fast, [], gpu_machines=frozenset({"gpu1"}))
    assert "check the kernel" not in summary_markdown(bf16 + awq, [], gpu_machines=frozenset()), "a CPU run: not"
