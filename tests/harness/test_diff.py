"""harness.diff: two run directories' outputs compared problem by problem."""

import json

from harness.diff import by_problem, compare, main


def write_run(directory, outputs, expressions=None):
    directory.mkdir()
    samples = []
    for index, output in enumerate(outputs):
        samples.append(
            {
                "model": "smollm2",
                "precision": "fp32",
                "adapter": "",
                "task": "add",
                "operands": 2,
                "truncate": "",
                "base": 10,
                "length": 1,
                "index": index,
                "expression": (expressions or {}).get(index, f"{index} + 1"),
                "prompt": (expressions or {}).get(index, f"{index} + 1"),
                "output": output,
                "extracted": None,
                "rule": "equals",
                "gold": str(index + 1),
                "correct": output.strip() == f"{index} + 1 = {index + 1}",
            }
        )
    (directory / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return directory


def test_outputs_verdicts_and_other_problems_are_counted(tmp_path):
    first = write_run(tmp_path / "a", ["0 + 1 = 1", "1 + 1 = 2", "2 + 1 = 3", "3 + 1 = 4"])
    second = write_run(tmp_path / "b", ["0 + 1 = 1", "1 + 1 = 2\n", "2 + 1 = 4", "9 + 9 = 18"], {3: "9 + 9"})
    lines = compare(by_problem(first), by_problem(second))
    assert lines[0] == (
        "smollm2 fp32: 3 problems in both, 2 identical outputs, 2 identical verdicts "
        "(1 with another expression at the same index: another seed?)"
    ), "a trailing newline (a server drops the stop string) is no difference"
    assert len(lines) == 2 and "#2 2 + 1" in lines[1] and "'2 + 1 = 4'" in lines[1]


def test_runs_of_other_cells_share_no_problem(capsys):
    assert main(["reports/base16-cpu", "reports/quick-greedy-n40-seed0"]) == 0
    assert capsys.readouterr().out.startswith("no problem is in both runs")
