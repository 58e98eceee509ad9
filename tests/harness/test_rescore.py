"""harness.rescore: stored outputs read again with the current rules; rows, reports and run.json follow."""

import json
from dataclasses import replace

import pytest

from harness.cli import run
from harness.problems import Task, generate
from harness.rescore import main
from harness.results import RunDir, read_results

from .test_results import IDENTITY, _row


def outputs(problem):
    """(output, what an older, lenient reader said) for each of the cell's four problems."""
    e, g = problem.expression, problem.answer
    return [(f"{e} = -{g}", True), (f"{e} = {g}", True), (f"{e} = {e}", True), (f"The answer is {g}.", False)]


def _old_run(out):
    """A cell scored by an older, lenient reader (samples from before digests: read as they are)."""
    run_dir = RunDir(out, {**IDENTITY, "samples": 4}, "python -m harness.eval (old scoring)", {})
    key = {"model": "smollm2", "precision": "fp32", "adapter": "", "task": "add", "operands": 2, "truncate": ""}
    problems = generate(Task("add"), 10, 2, 4, seed=0)
    samples = [
        {
            **key,
            "base": 10,
            "length": 2,
            "index": p.index,
            "expression": p.expression,
            "prompt": p.expression,
            "output": outputs(p)[p.index][0],
            "gold": p.answer,
            "extracted": "x",
            "rule": "lenient",
            "correct": outputs(p)[p.index][1],
        }
        for p in problems
    ]
    run_dir.add_cell(replace(_row(2, n=4), correct=3, accuracy=0.75), samples)
    run_dir.close()
    return problems


def test_rescoring_rereads_every_answer_and_rewrites_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    p = _old_run(out)
    with pytest.raises(SystemExit) as exit_info:
        run(main, [str(out)])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert "3 verdict(s) changed" in printed
    assert f"{p[0].expression} = {p[0].answer}: right -> wrong (none: signed" in printed
    assert f"{p[2].expression} = {p[2].answer}: right -> wrong (none: echo of the question" in printed
    assert f"{p[3].expression} = {p[3].answer}: wrong -> right (keyword" in printed
    (row,), _ = read_results(out / "results.csv")
    assert (row.correct, row.accuracy, row.no_answer) == (2, 0.5, 2)
    assert row.ci_low < 0.5 < row.ci_high
    stored = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["rule"] for s in stored] == ["none: signed", "equals", "none: echo of the question", "keyword"]
    assert [s["extracted"] for s in stored] == [None, p[1].answer, None, p[3].answer]
    commands = [entry["command"] for entry in json.loads((out / "run.json").read_text())["invocations"]]
    assert commands[-1] == f"python -m harness.rescore {out}"
    assert (out / "anatomy.csv").is_file() and (out / "error_anatomy.png").is_file()
    assert "harness.rescore" in (out / "summary.md").read_text()


@pytest.mark.parametrize("damage", ["deleted", "cut"])
def test_rescoring_never_deletes_a_row_it_cannot_rescore(tmp_path, capsys, damage):
    """Samples deleted or cut short: the cell cannot be re-scored, so its row stays as it was, is named, and the
    command that would compute it again is given; nothing else is lost."""
    out = tmp_path / "run"
    _old_run(out)
    rows_before = (out / "results.csv").read_text()
    samples = out / "samples.jsonl"
    if damage == "deleted":
        samples.unlink()
    else:
        samples.write_text("".join(samples.read_text().splitlines(keepends=True)[:2]))
    kept = samples.read_text() if samples.exists() else ""
    with pytest.raises(SystemExit) as exit_info:
        run(main, [str(out)])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert "not re-scored, kept as they were: 1 cell(s)" in printed
    assert "compute them again with: python -m harness.eval (old scoring)" in printed
    assert (out / "results.csv").read_text() == rows_before
    assert (samples.read_text() if samples.exists() else "") == kept


def test_rescoring_a_directory_that_is_no_run_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run(main, [str(tmp_path)])
    assert exit_info.value.code == 2
    assert "is not a harness.eval run directory" in capsys.readouterr().err
