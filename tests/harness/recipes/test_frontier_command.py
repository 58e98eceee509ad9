"""harness.frontier end to end on the small Llama standing in for smollm2-arith (its fp32 weights, and its NVFP4 and
FP8 checkpoints made by harness.quantize, placed where the commands find smollm2-arith's): the search writes a recipe
and its best rule, each point becomes a real checkpoint evaluated by harness.eval, and the paired table, rows, plot
and record come out consistent with the evaluations' own files; the same command again redoes nothing; bad input is
one line."""

from __future__ import annotations

import csv
import json
import shutil
import signal

import pytest

from harness.core.faults import KILL_AT
from harness.models import get_model, precision_registry
from harness.models.weights import adapter_tag, cache_root, quantized_dir
from harness.runs.results import read_samples_file
from tests.console import foreign_lines
from tests.harness.commands import command, refused
from tests.harness.helpers import needs_quantize_env, run_module

pytestmark = [needs_quantize_env, pytest.mark.xdist_group("formats"), pytest.mark.slow]


@pytest.fixture(scope="module")
def cache(checkpoints, tiny_llama, tmp_path_factory, monkeypatch_module):
    """A numprec cache whose smollm2-arith is the small Llama: its merged weights, its NVFP4 and FP8 checkpoints."""
    root = tmp_path_factory.mktemp("frontier-cache")
    monkeypatch_module.setenv("NUMPREC_CACHE", str(root))
    model = get_model("smollm2-arith")
    shutil.copytree(tiny_llama, cache_root() / "models" / f"{model.name}{adapter_tag(model)}")
    for name in ("nvfp4", "fp8-dynamic"):
        shutil.copytree(checkpoints[name], quantized_dir(model, precision_registry()[name]))
    return root


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def frontier(out, **changed) -> list[str]:
    flags = {"precision": "nvfp4", "methods": "rtn", "keep": "fp8-dynamic", "budgets": "5.5", "groups": "block",
             "search-samples": "3", "lengths": "1", "samples": "6", "out": str(out), **changed}  # fmt: skip
    return [part for flag, value in flags.items() for part in (f"--{flag}", value)]


def test_the_frontier_pairs_real_checkpoints_and_a_second_run_redoes_nothing(cache, tmp_path, capsys):
    """Killed as its first step starts, then run again: it resumes (the directory is its own), finishes, and a
    third run redoes nothing."""
    out = tmp_path / "front"
    killed = run_module("harness.frontier", *frontier(out), env={KILL_AT: "frontier-step"}, timeout=300)
    assert killed.returncode == -signal.SIGKILL, f"the kill did not fire: {killed.returncode} {killed.stderr}"
    assert not (out / "steps").exists() or not any((out / "steps").iterdir()), "killed before its first step ran"
    code, err, said = command("harness.frontier", frontier(out), capsys)
    assert code == 0, err
    assert not foreign_lines("\n".join(err)), err
    assert any(line.startswith("frontier:") and "evaluate" in line for line in err), "its steps show progress"
    record = json.loads((out / "frontier.json").read_text())
    points = {point["name"]: point for point in record["points"]}
    assert {"fp32", "fp8-dynamic", "nvfp4", "nvfp4 5.5bits"} <= set(points)
    recipe = json.loads((out / "search" / "rtn" / "sensitivity.json").read_text())["recipes"]["5.5bits"]
    assert points["nvfp4 5.5bits"]["bits"] == pytest.approx(recipe["bits"], abs=0.01), "the checkpoint's own bits"
    assert points["nvfp4"]["bits"] < points["nvfp4 5.5bits"]["bits"] <= 5.5 < points["fp8-dynamic"]["bits"]
    if recipe["best_rule"] and recipe["best_rule"].get("file"):
        assert points["nvfp4 5.5bits rule"]["detail"] == recipe["best_rule"]["name"]
    with open(out / "frontier.csv", newline="") as handle:
        rows = {row["point"]: row for row in csv.DictReader(handle)}
    assert set(rows) == set(points)
    for name, point in points.items():
        samples = read_samples_file(out / "evals" / point["key"] / "samples.jsonl").samples
        assert int(rows[name]["n"]) == len(samples) == 6
        assert int(rows[name]["correct"]) == sum(sample["correct"] for sample in samples), name
    with open(out / "comparisons.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    against = {row["variant"] for row in table if row["baseline"] == "fp32"}
    assert against == set(points) - {"fp32"} and {int(row["family"]) for row in table} == {len(table)}
    assert (out / "frontier.png").read_bytes()[:4] == b"\x89PNG" and "best within 5.5 bits" in said
    (best,) = [line for line in said.splitlines() if "best within 5.5 bits" in line]
    assert "on vLLM: " in best, "how the recommended point deploys (NVFP4 here: vLLM's CPU build has no kernel)"

    made = {path: path.stat().st_mtime_ns for path in (out / "checkpoints").iterdir()}

    code, err, said = command("harness.frontier", frontier(out), capsys)
    assert code == 0 and not foreign_lines("\n".join(err)), err
    again = json.loads((out / "frontier.json").read_text())
    killed_run, first, second = (run["steps"] for run in again["runs"])
    assert killed_run == {}, "the killed run finished no step"
    assert any(step.startswith("search") for step in first) and any(step.startswith("quantize") for step in first)
    assert any(step.startswith("evaluate") for step in first) and second == {}, "every step reused, none run again"
    assert {path: path.stat().st_mtime_ns for path in (out / "checkpoints").iterdir()} == made, "nothing made again"


@pytest.mark.parametrize(
    ("changed", "fragment"),
    [
        ({"seed": "0"}, "a frontier is decided on fresh problems of another seed"),
        ({"budgets": "5,x"}, "bits a weight between 1 and 32"),
        ({"budgets": "5,5"}, "each once"),
        ({"methods": "rtn,spinquant"}, "spinquant"),
        ({"precision": "nvfp4+gptq"}, "give the format (nvfp4) and the methods with --methods"),
    ],
)
def test_bad_input_is_one_line(changed, fragment, cache, tmp_path, capsys):
    refused("harness.frontier", frontier(tmp_path / "front", **changed), capsys, fragment)
    assert not (tmp_path / "front").exists(), "nothing written"
