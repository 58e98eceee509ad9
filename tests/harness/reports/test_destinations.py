"""Where the commands that read runs (harness.view, harness.report, harness.export, harness.tasks) write: never into
a run (its files hashed before and after), never over what they did not make (ownership by content: the whole command
line, its inputs' identities, every file's digest), no link followed, the --out check made again under the lock, and,
killed at any moment, either nothing or a finished result the same command completes. Each refusal is one line,
exit 2."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.reports.destinations import MANIFEST, STAGE_MARK, check_out_dir, digest, foreign_files
from harness.reports.promotion import JOURNAL, staged_dir
from tests.harness.commands import command, copy, hashes, refused, without_permission_override
from tests.harness.helpers import ROOT, assert_user_error, command_env, run_module
from tests.harness.scripted import run

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("outputs")
    return {"fp32": run(base / "fp32", ["fp32"]), "bf16": run(base / "bf16", ["bf16"])}


def tree(path) -> dict:
    """What is at ``path``, links named as links (their targets never read)."""
    return {
        str(p.relative_to(path)): (f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes() if p.is_file() else "/")
        for p in sorted(path.rglob("*"))
    }


def test_a_merged_run_is_replaced_only_by_report_and_the_previous_one_is_kept(runs, tmp_path, capsys):
    a, b = copy(runs["fp32"], tmp_path / "a"), copy(runs["bf16"], tmp_path / "b")
    merged = tmp_path / "mergedBA"
    assert command("harness.report", [b, a, "--out", merged], capsys)[0] == 0
    before = {path: hashes(path) for path in (a, b, merged)}
    refused("harness.export", [a, "--out", merged], capsys, "already holds a run harness.report made", "never replaces")
    refused("harness.tasks", ["--harness", "lm-eval", "--out", merged], capsys, "already holds a run")
    assert {path: hashes(path) for path in (a, b, merged)} == before
    code, _, said = command("harness.report", [a, b, "--out", merged], capsys)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("mergedBA.previous-")]
    assert code == 0 and len(aside) == 1 and f"moved the previous mergedBA aside to {aside[0].name}" in said, said
    assert "another command" in said, "the line says why it was replaced"
    assert hashes(aside[0]) == before[merged], "the previous merged run is kept whole"


def test_an_evaluation_run_holding_a_copied_manifest_is_never_replaced_by_report(runs, tmp_path, capsys):
    """A merged run's manifest copied into an evaluation run and edited to list its files: harness.report still
    refuses, because the run's own run.json says harness.eval made it."""
    a, b = copy(runs["fp32"], tmp_path / "a"), copy(runs["bf16"], tmp_path / "b")
    merged = tmp_path / "merged"
    assert command("harness.report", [a, b, "--out", merged], capsys)[0] == 0
    forged = json.loads((merged / MANIFEST).read_text())
    forged["files"] = {p.name: digest(p) for p in b.iterdir() if p.is_file()}
    (b / MANIFEST).write_text(json.dumps(forged))
    before = tree(b)
    refused("harness.report", [a, "--out", b], capsys, "already holds a run harness.eval made", "never replaces")
    assert tree(b) == before and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "merged"]


def test_a_run_holding_a_forged_manifest_is_never_replaced(runs, tmp_path, capsys):
    a, b = copy(runs["fp32"], tmp_path / "a"), copy(runs["bf16"], tmp_path / "b")
    files = {p.name: digest(p) for p in b.iterdir() if p.is_file()}
    forged = {"written_by": "harness.export", "command": f"python -m harness.export {a} --out {b}", "files": files}
    (b / MANIFEST).write_text(json.dumps(forged))
    before = hashes(b)
    refused("harness.export", [a, "--out", b], capsys, "already holds a run")
    refused("harness.tasks", ["--harness", "lm-eval", "--out", b], capsys, "already holds a run")
    refused("harness.report", [a, "--out", b], capsys, "already holds a run")
    assert hashes(b) == before


ODD = ["a FIFO", "a link to a FIFO", "a symlink loop", "a dangling parent link"]


def odd_path(case: str, base) -> tuple:
    """An --out of the odd kind named, and what the refusal says of it."""
    if case in ("a FIFO", "a link to a FIFO"):
        os.mkfifo(base / "pipe")
        if case == "a FIFO":
            return base / "pipe", "is a FIFO"
        (base / "to-pipe").symlink_to(base / "pipe")
        return base / "to-pipe", "is a FIFO"
    if case == "a symlink loop":
        (base / "loop").symlink_to(base / "loop")
        return base / "loop" / "out", "symlink loop"
    (base / "gone").symlink_to(base / "nowhere")
    return base / "gone" / "out", "dangling link"


@pytest.mark.parametrize("case", ODD)
def test_an_odd_out_is_one_line_for_every_writer(case, runs, tmp_path, capsys):
    """Looked at by kind before anything is opened: no writer hangs on a FIFO, loops, or retries without end."""
    base = tmp_path / "odd"
    base.mkdir()
    out, said = odd_path(case, base)
    before = tree(base)
    for module, argv in [
        ("harness.view", [runs["fp32"]]),
        ("harness.export", [runs["fp32"]]),
        ("harness.report", [runs["fp32"]]),
        ("harness.tasks", ["--harness", "lm-eval", "--lengths", "1", "--samples", "2"]),
    ]:
        refused(module, [*argv, "--out", out], capsys, said)
    assert tree(base) == before, "nothing made or moved"


@pytest.mark.parametrize("target", ["the input run", "a user directory"])
def test_a_staging_name_that_is_a_link_is_refused_and_nothing_behind_it_is_touched(target, runs, tmp_path, capsys):
    a = copy(runs["fp32"], tmp_path / "a")
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine\n")
    pointed = a if target == "the input run" else user
    before = {a: tree(a), user: tree(user)}
    for module, argv in [
        ("harness.export", [a]),
        ("harness.report", [a]),
        ("harness.tasks", ["--harness", "lm-eval", "--lengths", "1", "--samples", "2"]),
    ]:
        (tmp_path / ".e.numprec-partial").symlink_to(pointed)
        refused(module, [*argv, "--out", tmp_path / "e"], capsys, ".e.numprec-partial is a link", "move it away")
        (tmp_path / ".e.numprec-partial").unlink()
    assert {a: tree(a), user: tree(user)} == before and not (tmp_path / "e").exists()


def test_a_staging_directory_another_made_is_refused(runs, tmp_path, capsys):
    stage = tmp_path / ".e.numprec-partial"
    stage.mkdir()
    (stage / "precious.txt").write_text("not numprec's\n")
    refused("harness.export", [runs["fp32"], "--out", tmp_path / "e"], capsys, "is not a staging directory")
    assert tree(stage) == {"precious.txt": b"not numprec's\n"}


def test_an_out_that_is_a_link_to_an_empty_directory_is_refused(runs, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    link = tmp_path / "le"
    link.symlink_to(empty)
    for module, argv in [("harness.export", [runs["fp32"]]), ("harness.report", [runs["fp32"]])]:
        refused(module, [*argv, "--out", link], capsys, "is a link")
    assert link.is_symlink() and not os.listdir(empty)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "le"], "nothing left beside it"


def test_the_out_check_is_made_again_under_the_lock(runs, tmp_path, capsys):
    """A writer that passed its first check before another finished sees, once it holds the lock, what that one
    wrote: export's check passes on an absent --out, report then writes its merged run there, and export's staged
    write refuses before writing anything."""
    a, b = runs["fp32"], runs["bf16"]
    out = tmp_path / "w"
    export = {"command": f"python -m harness.export {a} --out {out}", "arguments": {}}
    check_out_dir(out, [a], "harness.export")  # passes: nothing there yet
    assert command("harness.report", [a, b, "--out", out], capsys)[0] == 0
    before = hashes(out)
    with pytest.raises(UserError, match="already holds a run"), staged_dir(out, [a], "harness.export", export):
        raise AssertionError("never reached: the check under the lock refuses")
    assert hashes(out) == before and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_stale_staging_that_cannot_be_cleared_is_one_line_naming_it(runs, tmp_path):
    stage = tmp_path / ".e.numprec-partial"
    (stage / "sub").mkdir(parents=True)
    (stage / ".numprec-stage").write_text("harness.export\n")
    (stage / "sub" / "left.parquet").write_text("half written\n")
    os.chmod(stage / "sub", 0o500)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "harness.export", str(runs["fp32"]), "--out", str(tmp_path / "e")],
            capture_output=True, text=True, cwd=ROOT, env=command_env(), timeout=120,
            preexec_fn=without_permission_override if os.geteuid() == 0 else None,
        )  # fmt: skip
        assert_user_error(result, f"cannot clear {stage}")
    finally:
        os.chmod(stage / "sub", 0o700)
    assert (stage / "sub" / "left.parquet").read_text() == "half written\n"


def test_a_deeply_nested_manifest_is_none_of_ours_in_one_line(runs, tmp_path, capsys):
    out = tmp_path / "deep"
    out.mkdir()
    (out / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    before = tree(out)
    refused("harness.export", [runs["fp32"], "--out", out], capsys, "did not write", MANIFEST)
    assert tree(out) == before


def test_a_damaged_merged_run_names_its_repair_into_where_it_is_now(runs, tmp_path, capsys):
    merged = tmp_path / "merged"
    assert command("harness.report", [runs["fp32"], runs["bf16"], "--out", merged], capsys)[0] == 0
    moved = tmp_path / "moved"
    merged.rename(moved)
    lines = (moved / "results.csv").read_text().splitlines(keepends=True)
    (moved / "results.csv").write_text("".join(lines + lines[1:2]))  # a row twice
    line = refused("harness.export", [moved, "--out", tmp_path / "dataset"], capsys, "python -m harness.report")
    assert f"--out {moved}" in line and f"--out {merged}" not in line, line


def test_no_command_writes_into_a_run_it_reads_or_any_other(runs, tmp_path, capsys):
    a, b = copy(runs["fp32"], tmp_path / "a"), copy(runs["bf16"], tmp_path / "b")
    before = {a: hashes(a), b: hashes(b)}
    cases = [
        ("harness.view", [a, "--out", a / "results.csv"], "is inside the run"),
        ("harness.view", [a, "--out", a / "page.html"], "is inside the run"),
        ("harness.view", [a, "--out", b / "page.html"], "lies inside the run directory"),
        ("harness.export", [a, "--out", a], "is the run"),
        ("harness.export", [a, "--out", b], "already holds a run"),
        ("harness.export", [a, "--out", b / "dataset"], "lies inside the run directory"),
        ("harness.report", [a, b, "--out", a / "merged"], "is inside the run"),
        ("harness.report", [a, b, "--out", tmp_path], "holds the run"),
        ("harness.tasks", ["--harness", "lm-eval", "--out", a / "tasks"], "lies inside the run directory"),
    ]
    for module, argv, fragment in cases:
        refused(module, argv, capsys, fragment)
    assert {a: hashes(a), b: hashes(b)} == before, "every input run's files are as they were"


def test_files_the_command_did_not_write_are_never_replaced(runs, tmp_path, capsys):
    for name in ("README.md", "_numprec.yaml", "samples.jsonl"):
        out = tmp_path / f"out-{name}"
        out.mkdir()
        (out / name).write_text("the user's own\n")
        refused("harness.export", [runs["fp32"], "--out", out], capsys, f"({name})", "new or empty directory")
        refused("harness.tasks", ["--harness", "lm-eval", "--out", out], capsys, f"({name})")
        refused("harness.report", [runs["fp32"], runs["bf16"], "--out", out], capsys, name)
        assert (out / name).read_text() == "the user's own\n" and sorted(os.listdir(out)) == [name]
    page = tmp_path / "notes.html"
    page.write_text("<html>the user's notes</html>\n")
    refused("harness.view", [runs["fp32"], "--out", page], capsys, "was not written by python -m harness.view")
    assert page.read_text() == "<html>the user's notes</html>\n"
    parquet = tmp_path / "parquet-dir"
    (parquet / "results.parquet").mkdir(parents=True)
    refused("harness.export", [runs["fp32"], "--out", parquet], capsys, "results.parquet")


def test_the_same_command_again_replaces_its_own_output(runs, tmp_path, capsys):
    page = tmp_path / "page.html"
    for _ in range(2):
        code, err, _ = command("harness.view", [runs["fp32"], "--out", page], capsys)
        assert code == 0 and not err, err
    dataset = tmp_path / "dataset"
    for _ in range(2):
        code, err, _ = command("harness.export", [runs["fp32"], "--out", dataset], capsys)
        assert code == 0 and not err, err
    assert not foreign_files(dataset, "harness.export") and (dataset / MANIFEST).is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "nothing left beside --out"
    (dataset / "results.parquet").write_bytes(b"edited")  # changed since: no longer what export wrote
    refused("harness.export", [runs["fp32"], "--out", dataset], capsys, "results.parquet")


def test_a_rerun_of_tasks_with_other_tasks_leaves_only_its_tasks_and_keeps_the_earlier_aside(tmp_path, capsys):
    """The same module's own folder: another harness.tasks command (other tasks) replaces it, the earlier group moved
    aside whole and said so; the same command again moves nothing."""
    out = tmp_path / "tasks"
    grid = ["--harness", "lm-eval", "--out", out, "--lengths", "1", "--samples", "2"]
    assert command("harness.tasks", [*grid, "--tasks", "mul"], capsys)[0] == 0
    before = hashes(out)
    code, _, said = command("harness.tasks", [*grid, "--tasks", "add,mul"], capsys)
    (aside,) = [path for path in tmp_path.iterdir() if path.name.startswith("tasks.previous-")]
    assert code == 0 and f"moved the previous tasks aside to {aside.name}" in said, said
    assert hashes(aside) == before
    assert command("harness.tasks", [*grid, "--tasks", "mul"], capsys)[0] == 0
    assert sorted(path.name for path in (out / "data").iterdir()) == ["numprec_mul_n1.jsonl"]
    # the data file named where it is now, not where it was built
    assert f"test: {out.resolve() / 'data' / 'numprec_mul_n1.jsonl'}\n" in (out / "numprec_mul_n1.yaml").read_text()
    assert len([path for path in tmp_path.iterdir() if ".previous-" in path.name]) == 2


def test_harness_tasks_checks_the_tokenizer_before_writing(tmp_path, capsys):
    out = tmp_path / "tasks"
    refused(
        "harness.tasks", ["--harness", "lm-eval", "--out", out, "--model", "llama-served"], capsys, "names no tokenizer"
    )
    assert not out.exists() and not list(tmp_path.iterdir())


def comparable(directory: Path) -> dict[str, bytes]:
    """A report's or dataset's files, less what differs between two runs of one command (--out's name in the
    commands they quote, run.json's pid and start, the manifest's digests of it)."""
    found = {name: data.replace(str(directory).encode(), b"OUT") for name, data in _contents(directory).items()}
    return found


def _contents(directory: Path) -> dict[str, bytes]:
    found = {}
    for name, path in sorted((str(p.relative_to(directory)), p) for p in directory.rglob("*") if p.is_file()):
        if name == MANIFEST:
            continue
        if name == "run.json":
            record = json.loads(path.read_text())
            for entry in record["invocations"]:
                for key in ("pid", "started", "digest"):
                    entry.pop(key)
            found[name] = json.dumps(record, sort_keys=True).encode()
        elif name.endswith(".parquet"):
            import pyarrow.parquet as pq

            found[name] = json.dumps(pq.read_table(path).to_pylist(), sort_keys=True, default=str).encode()
        else:
            found[name] = path.read_bytes()
    return found


def finished_or_absent(out: Path, module: str) -> bool:
    """After a kill: no --out at all, or a finished one (its manifest lists exactly its files, unchanged), or one put
    in place whose staging mark the kill left, with the journal beside it that the same command completes
    (harness/reports/promotion.py: killed between renamed-into-place and mark-removed)."""
    if not out.exists():
        return True
    promoting = (out / STAGE_MARK).is_file() and (out.parent / f".{out.name}{JOURNAL}").is_file()
    return (out / MANIFEST).is_file() and (promoting or not foreign_files(out, module))


@pytest.mark.slow
@pytest.mark.parametrize("module", ["harness.report", "harness.export"])
def test_a_kill_at_any_moment_then_the_same_command_equals_a_clean_run(module, runs, tmp_path):
    inputs = [runs["fp32"], runs["bf16"]] if module == "harness.report" else [runs["fp32"]]
    clean = tmp_path / "clean"
    started = time.perf_counter()
    result = run_module(module, *map(str, inputs), "--out", str(clean))
    took = time.perf_counter() - started
    assert result.returncode == 0 and not result.stderr, result.stderr
    chance = random.Random(0)
    for attempt in range(2):
        out = tmp_path / f"killed-{attempt}"
        process = subprocess.Popen(
            [sys.executable, "-m", module, *map(str, inputs), "--out", str(out)],
            cwd=ROOT, env=command_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(chance.uniform(0.2, took))
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert finished_or_absent(out, module), sorted(os.listdir(out))
        again = run_module(module, *map(str, inputs), "--out", str(out))
        assert again.returncode == 0 and not again.stderr, again.stderr
        assert comparable(out) == comparable(clean)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [], "no stray files"
