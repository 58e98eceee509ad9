"""harness.rescore: stored outputs read again with the current rules; rows, reports and run.json follow."""

import json
from dataclasses import replace

import pytest

from harness.cli import run
from harness.rescore import main
from harness.results import RunDir, read_results

from .test_results import IDENTITY, _row

OUTPUTS = [  # (expression, gold, output, what an older, lenient reader said)
    ("12 + 3", "15", "12 + 3 = -15", True),
    ("12 + 3", "15", "12 + 3 = 15", True),
    ("5 + 0", "5", "5 + 0 = 5 + 0", True),
    ("7 + 1", "8", "The answer is 8.", False),
]


def test_rescoring_rereads_every_answer_and_rewrites_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    run_dir = RunDir(out, {**IDENTITY, "samples": 4}, "python -m harness.eval (old scoring)", {})
    key = {"model": "smollm2", "precision": "fp32", "adapter": "", "task": "add", "operands": 2, "truncate": ""}
    samples = [
        {
            **key,
            "base": 10,
            "length": 2,
            "index": i,
            "expression": e,
            "output": o,
            "gold": g,
            "extracted": "x",
            "correct": old,
        }
        for i, (e, g, o, old) in enumerate(OUTPUTS)
    ]
    run_dir.add_cell(replace(_row(2, n=4), correct=3, accuracy=0.75), samples)
    run_dir.close()

    with pytest.raises(SystemExit) as exit_info:
        run(main, [str(out)])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert "3 verdict(s) changed" in printed
    assert "12 + 3 = 15: right -> wrong (none: signed" in printed
    assert "5 + 0 = 5: right -> wrong (none: echo of the question" in printed
    assert "7 + 1 = 8: wrong -> right (keyword" in printed
    (row,), _ = read_results(out / "results.csv")
    assert (row.correct, row.accuracy, row.no_answer) == (2, 0.5, 2)
    assert row.ci_low < 0.5 < row.ci_high
    stored = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["rule"] for s in stored] == ["none: signed", "equals", "none: echo of the question", "keyword"]
    assert [s["extracted"] for s in stored] == [None, "15", None, "8"]
    commands = [entry["command"] for entry in json.loads((out / "run.json").read_text())["invocations"]]
    assert commands[-1] == f"python -m harness.rescore {out}"
    assert (out / "anatomy.csv").is_file() and (out / "error_anatomy.png").is_file()
    assert "harness.rescore" in (out / "summary.md").read_text()


def test_rescoring_a_directory_that_is_no_run_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run(main, [str(tmp_path)])
    assert exit_info.value.code == 2
    assert "is not a harness.eval run directory" in capsys.readouterr().err
