"""harness.diff: two run directories' outputs compared problem by problem."""

import csv
import json

from harness.diff import by_problem, compare, main
from tests.harness.scripted import pipeline_run


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


def test_runs_on_other_machines_say_what_differed(tmp_path, capsys):
    """The nf4 case of issue 28: the same run on a CPU with AVX-512 and one without. The diff names the instructions
    and the library versions that differ beside each series' counts; runs on one machine get no such line."""
    from harness.core.machine import describe

    first, second = tmp_path / "avx512", tmp_path / "avx2"
    pipeline_run(first)
    pipeline_run(second)
    here = describe()
    machine = next(iter(json.loads((first / "run.json").read_text())["machines"]))
    with open(first / "results.csv", newline="") as handle:
        assert {row["machine"] for row in csv.DictReader(handle)} == {machine}, "every row names its machine"
    assert main([str(first), str(second)]) == 0
    assert "ran differently" not in capsys.readouterr().out, "one machine, one set of libraries"

    meta = json.loads((second / "run.json").read_text())
    other = {
        **here,
        "cpu_flags": [flag for flag in here["cpu_flags"] if not flag.startswith("avx512")] + ["avx2"],
        "libraries": {**here["libraries"], "bitsandbytes": "0.49.0"},
    }
    if "avx512f" not in here["cpu_flags"]:
        other["cpu_flags"] = [*dict.fromkeys(here["cpu_flags"] + ["avx512f", "avx512_bf16"])]
    meta["machines"] = {machine: other}
    (second / "run.json").write_text(json.dumps(meta))
    assert main([str(first), str(second)]) == 0
    out = capsys.readouterr().out.splitlines()
    notes = [line for line in out if line.startswith("  ran differently: CPU instructions: ")]
    assert len(notes) == 2 and all("bitsandbytes" in line and "vs 0.49.0" in line for line in notes), out
    assert out[1] == notes[0] and out[0].startswith("smollm2 fp32: "), "beside the series' counts"
