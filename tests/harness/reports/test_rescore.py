"""harness.rescore: stored outputs read again with the current rules; rows, reports and run.json follow."""

import json
from dataclasses import replace

import pytest

from harness.core.cli import run
from harness.questions.problems import Task, generate
from harness.rescore import main
from harness.runs.results import read_results
from harness.runs.rundir import RunDir
from tests.harness.scripted import IDENTITY, a_row, pipeline_run


def outputs(problem):
    """(output, what an older, lenient reader said) for each of the cell's four problems."""
    e, g = problem.expression, problem.answer
    return [(f"{e} = -{g}", True), (f"{e} = {g}", True), (f"{e} = {e}", True), (f"The answer is {g}.", False)]


def _old_run(out):
    """A cell scored by an older, lenient reader (samples from before digests: read as they are)."""
    # made elsewhere (its --out names another place) and moved here
    run_dir = RunDir(out, {**IDENTITY, "samples": 4}, "python -m harness.eval --tasks add --out /elsewhere/run", {})
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
    run_dir.add_cell(replace(a_row(2, n=4), correct=3, accuracy=0.75), samples)
    run_dir.close()
    meta = json.loads((out / "run.json").read_text())
    del meta["sample_digests"]  # as run.json was written then
    (out / "run.json").write_text(json.dumps(meta))
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
    assert f"compute them again with: python -m harness.eval --tasks add --out {out}" in printed, "this directory"
    assert (out / "results.csv").read_text() == rows_before
    assert (samples.read_text() if samples.exists() else "") == kept


def test_rescoring_a_directory_that_is_no_run_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run(main, [str(tmp_path)])
    assert exit_info.value.code == 2
    assert "is not a harness.eval run directory" in capsys.readouterr().err


DAMAGE = {
    "cut mid-record": lambda line: line[:40] + b"\n",
    "garbage": lambda line: b"@@@ not a sample ###\n",
    "not UTF-8": lambda line: line.replace(b'"output": "', b'"output": "caf\xe9 '),
    "a number too large": lambda line: line.replace(b'"length": 1,', b'"length": 1e999,'),
    "nested past any record": lambda line: b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "no gold": lambda line: line.replace(b'"gold": ', b'"no_gold": '),
    "no expression": lambda line: line.replace(b'"expression": ', b'"no_expression": '),
    "base 0": lambda line: line.replace(b'"base": 10,', b'"base": 0,'),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_samples_line_is_said_and_kept_and_its_cell_named(tmp_path, capsys, damage):
    """Each damaged line of issue 28: rescore says it (one line on stderr), keeps its bytes and its cell's row as they
    were (it cannot recompute them), re-scores every other cell, and names the command that computes the damaged cell
    again in this directory."""

    out = tmp_path / "run"
    pipeline_run(out)
    samples = out / "samples.jsonl"
    lines = samples.read_bytes().splitlines(keepends=True)
    lines[5] = DAMAGE[damage](lines[5])
    samples.write_bytes(b"".join(lines))
    rows_before = len((out / "results.csv").read_text().splitlines())
    capsys.readouterr()  # the run's own progress
    with pytest.raises(SystemExit) as exit_info:
        run(main, [str(out)])
    assert exit_info.value.code == 0
    captured = capsys.readouterr()
    said = [line for line in captured.err.splitlines() if line.strip()]
    assert len(said) == 1 and "1 damaged line(s) (line " in said[0] and "kept as they were" in said[0], said
    assert lines[5] in samples.read_bytes().splitlines(keepends=True), "the damaged line's bytes are kept"
    assert len((out / "results.csv").read_text().splitlines()) == rows_before, "every row kept"
    assert "not re-scored, kept as they were: 1 cell(s)" in captured.out
    assert f"--out {out}" in captured.out.splitlines()[-1]


def test_a_5000_digit_answer_is_scored_in_eval_and_rescore(tmp_path, capsys):
    """A degenerate output of digits past Python's int-string limit (4,300) once ended harness.eval and rescore at
    that cell with a traceback; it is a wrong answer like any other."""
    from harness.backends.scripted import ScriptedBackend
    from harness.eval import evaluate
    from harness.runs.config import build_spec, load_config

    name, config = load_config("quick")
    out = tmp_path / "run"
    spec = build_spec(
        name, config, models=["smollm2"], precisions=["fp32"], tasks=["add"], lengths=[1], samples=4, out=out
    )

    def load(variant, spec):
        return ScriptedBackend(variant.precision, lambda message, rows: message.splitlines()[-1] + " = " + "7" * 5000)

    evaluate(spec, "python -m harness.eval (scripted)", load=load)
    sample = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
    assert sample["extracted"] == "7" * 5000 and sample["correct"] is False
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        run(main, [str(out)])
    assert exit_info.value.code == 0
    assert "rescored 4 answers" in capsys.readouterr().out
