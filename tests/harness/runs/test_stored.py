"""A run is read only after it is checked (harness/runs/stored.py), by every command that reads runs (harness.view,
harness.report, harness.export, harness.tasks): damaged, edited and unfinished runs are refused in one line naming the
command that repairs them, or shown with what is missing named. On the scripted backend."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends.scripted import ScriptedBackend
from harness.eval import evaluate
from harness.runs.config import build_spec, load_config
from tests.harness.commands import command, copy, hashes, refused, without_permission_override
from tests.harness.helpers import ROOT, assert_user_error, command_env
from tests.harness.scripted import answer, run

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("readers")
    return {"fp32": run(base / "fp32", ["fp32"]), "bf16": run(base / "bf16", ["bf16"])}


def edited(source: Path, target: Path, edit) -> Path:
    copy(source, target)
    edit(target)
    return target


def rewrite_rows(directory: Path, change) -> None:
    with open(directory / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows = change(rows)
    with open(directory / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else [], lineterminator="\n")
        if rows:
            writer.writeheader()
            writer.writerows(rows)


def rewrite_record(directory: Path, change) -> None:
    record = json.loads((directory / "run.json").read_text())
    change(record)
    (directory / "run.json").write_text(json.dumps(record, indent=2))


def header_only(directory: Path) -> None:
    header = (directory / "results.csv").read_text().splitlines()[0]
    (directory / "results.csv").write_text(header + "\n")
    lines = (directory / "samples.jsonl").read_text().splitlines(keepends=True)
    (directory / "samples.jsonl").write_text("".join(lines[:4]))


def forged_seed(record: dict) -> None:
    entry = record["invocations"][0]
    entry["command"] = entry["command"] + " --seed 7"
    entry["spec"]["seed"] = 7


def samples_of_one_cell_gone(directory: Path) -> None:
    lines = (directory / "samples.jsonl").read_text().splitlines(keepends=True)
    (directory / "samples.jsonl").write_text("".join(line for line in lines if '"length": 3' not in line))


def unsigned_and_edited(record: dict) -> None:
    """The invocation digests removed, then a command edited: what a signature would have caught."""
    record.pop("invocation_digests", None)
    for entry in record["invocations"]:
        entry.pop("digest", None)
    forged_seed(record)


def one_entry_stripped(record: dict) -> None:
    """A second invocation (as a resume adds) stripped of its digest and edited, the run's flag removed: the other
    entry's digest makes the run signed, so the stripped one is tampering."""
    record.pop("invocation_digests", None)
    resumed = {key: value for key, value in record["invocations"][0].items() if key != "digest"}
    record["invocations"].append({**resumed, "command": resumed["command"] + " --batch-size 4"})


def rows_of_another_run_appended(source: Path):
    """Another run's rows and samples (bf16, which this run never planned) appended to it."""

    def append(directory: Path) -> None:
        with open(directory / "results.csv", "a") as handle:
            handle.write("".join((source / "results.csv").read_text().splitlines(keepends=True)[1:]))
        with open(directory / "samples.jsonl", "a") as handle:
            handle.write((source / "samples.jsonl").read_text())

    return append


DAMAGED = [
    ("header-only", header_only, "is unfinished: 3 of its 3 planned cells"),
    ("repeated-row", lambda d: rewrite_rows(d, lambda rows: rows + rows[:1]), "has two rows in results.csv"),
    ("nan-accuracy", lambda d: rewrite_rows(d, lambda rows: [{**rows[0], "accuracy": "nan"}, *rows[1:]]), "accuracy"),
    ("forged-command", lambda d: rewrite_record(d, forged_seed), "was edited by hand"),
    ("forged-identity-seed", lambda d: rewrite_record(d, lambda r: r["identity"].update(seed=7)), "edited by hand"),
    ("invocations-a-string", lambda d: rewrite_record(d, lambda r: r.update(invocations="a run")), "is damaged"),
    ("samples-missing", samples_of_one_cell_gone, "python -m harness.eval"),
    ("unsigned-and-edited", lambda d: rewrite_record(d, unsigned_and_edited), "is unsigned"),
    ("one-entry-stripped", lambda d: rewrite_record(d, one_entry_stripped), "no digest beside signed ones"),
    ("rows-no-command-planned", "bf16 rows", "no harness.eval command in its run.json planned"),
]


@pytest.mark.parametrize("name,damage,fragment", DAMAGED, ids=[case[0] for case in DAMAGED])
def test_a_damaged_run_is_refused_by_every_reader_in_one_line(name, damage, fragment, runs, tmp_path, capsys):
    damage = rows_of_another_run_appended(runs["bf16"]) if damage == "bf16 rows" else damage
    damaged = edited(runs["fp32"], tmp_path / "damaged", damage)
    before = hashes(damaged)
    for module, argv in [
        ("harness.export", [damaged, "--out", tmp_path / "dataset"]),
        ("harness.report", [damaged, runs["bf16"], "--out", tmp_path / "merged"]),
    ]:
        line = refused(module, argv, capsys, fragment)
        assert "Traceback" not in line
    if name != "header-only":  # the viewer shows an unfinished run (below); the rest it refuses too
        refused("harness.view", [damaged, "--out", tmp_path / "page.html"], capsys, fragment)
    assert hashes(damaged) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged"], "nothing written"


def test_whole_samples_that_disagree_with_their_rows_name_rescore_which_repairs_them(runs, tmp_path, capsys):
    damaged = edited(runs["fp32"], tmp_path / "run", lambda d: rewrite_rows(d, lambda r: r + r[:1]))
    line = refused("harness.export", [damaged, "--out", tmp_path / "d"], capsys, "python -m harness.rescore")
    assert command("harness.rescore", [damaged], capsys)[0] == 0, line
    assert command("harness.export", [damaged, "--out", tmp_path / "d"], capsys)[0] == 0


def test_missing_samples_name_the_eval_command_which_recomputes_them(runs, tmp_path, capsys):
    damaged = edited(runs["fp32"], tmp_path / "run", samples_of_one_cell_gone)
    line = refused("harness.export", [damaged, "--out", tmp_path / "d"], capsys, "python -m harness.eval")
    assert "(scripted)" in line and f"--out {damaged}" in line


def stopped_after_one_cell(out: Path) -> Path:
    """harness.eval interrupted (Ctrl-C) after the first of two cells: each cell its own batch."""
    name, config = load_config("quick")
    spec = build_spec(
        name, config, models=["smollm2"], precisions=["fp32"], tasks=["add"], lengths=[1, 2], samples=30, out=out,
        batch_size=30,
    )  # fmt: skip
    cells = []

    def script(message: str, rows: int) -> str:
        cells.append(rows)
        if len(cells) > 30:
            raise KeyboardInterrupt
        return answer("fp32")(message, rows)

    def load(variant, spec):
        return ScriptedBackend(variant.precision, script, spec.batch_size)

    with pytest.raises(KeyboardInterrupt):
        evaluate(spec, "python -m harness.eval (scripted)", load=load)
    return out


def test_an_unfinished_run_is_refused_for_export_and_merge_and_shown_with_its_missing_cells(tmp_path, capsys):
    stopped = stopped_after_one_cell(tmp_path / "stopped")
    capsys.readouterr()  # its progress lines
    assert len((stopped / "results.csv").read_text().splitlines()) == 2, "one cell of two"
    for module, argv in [
        ("harness.export", [stopped, "--out", tmp_path / "dataset"]),
        ("harness.report", [stopped, "--out", tmp_path / "merged"]),
    ]:
        refused(module, argv, capsys, "is unfinished: 1 of its 2 planned cells", "smollm2 fp32 add n=2 seed 0")
    code, err, out = command("harness.view", [stopped, "--out", tmp_path / "page.html"], capsys)
    assert code == 0 and len(err) == 1 and err[0].startswith("note: ") and "add n=2" in err[0], err
    page = (tmp_path / "page.html").read_text()
    assert "is unfinished: 1 of its 2 planned cells" in page and "1 cells, 30 samples" in out


def test_an_unreadable_run_is_one_line(runs, tmp_path):
    locked = copy(runs["fp32"], tmp_path / "locked")
    os.chmod(locked, 0)
    try:
        for module, last in [
            ("harness.view", ["--out", str(tmp_path / "page.html")]),
            ("harness.diff", [str(runs["bf16"])]),
        ]:
            result = subprocess.run(
                [sys.executable, "-m", module, str(locked), *last],
                capture_output=True, text=True, cwd=ROOT, env=command_env(), timeout=120,
                preexec_fn=without_permission_override if os.geteuid() == 0 else None,
            )  # fmt: skip
            assert_user_error(result, "Permission denied")
    finally:
        os.chmod(locked, 0o700)
