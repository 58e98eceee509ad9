"""bench.run as a user runs it, on small sizes: real engines, real model, real files."""

import json

from tests.console import assert_numprec_console
from tests.harness.helpers import run_module


def test_eval_section_compares_the_same_prompts_across_engines(tmp_path):
    engines = ["--engines", "numprec,lm-eval,llamacpp"]  # vLLM's engine has tests of its own (tests/harness/backends)
    sized = ["--problems", "7", "--repeats", "1"]
    result = run_module("bench.run", "--out", str(tmp_path), "--only", "eval", *sized, *engines)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_numprec_console(result)
    evaluation = json.loads((tmp_path / "results.json").read_text())["eval"]
    assert evaluation["problems"] == 7 and evaluation["identical_outputs_of"] == 7
    # greedy fp32 through transformers twice (ours and lm-eval's generate()): the answer lines agree
    assert evaluation["identical_outputs"] >= 6, evaluation["differing_examples"]
    assert "vllm" not in evaluation, "an engine left out of --engines is not run"
    for engine in ("numprec", "lm-eval", "llamacpp"):
        assert evaluation[engine]["seconds"] > 0 and evaluation[engine]["peak_rss_mb"] > 100
    assert evaluation["speedup_vs_lm_eval"] == evaluation["lm-eval"]["seconds"] / evaluation["numprec"]["seconds"]
    # The fraction divides FLOPs by a GEMM rate measured at another moment: on a shared machine it is a
    # measurement, not a bound a test can hold it to; its parts must be consistent.
    bound = evaluation["flops_needed"] / evaluation["gemm_fp32_flops"]
    assert evaluation["flop_bound_seconds"] == bound > 0
    assert evaluation["fraction_of_flop_bound"] == bound / evaluation["numprec"]["seconds"]
    markdown = (tmp_path / "results.md").read_text()
    assert "speedup_vs_lm_eval" in markdown and "identical_outputs: " in markdown


def test_data_section_measures_every_generator(tmp_path):
    result = run_module("bench.run", "--out", str(tmp_path), "--only", "data", "--repeats", "1")
    assert result.returncode == 0, result.stderr
    assert_numprec_console(result)
    rows = json.loads((tmp_path / "results.json").read_text())["data"]
    assert [row["task"] for row in rows] == ["add:2 base 10 length 10", "iter_add:3 base 10 length 10"]
    for row in rows:
        assert row["numprec_problems_per_s"] > 0 and row["python_problems_per_s"] > 0


def test_a_run_directory_is_written_about_once():
    """Samples and rows are appended, reports drawn at most once a minute: finishing a run writes about its files'
    size (rewriting samples.jsonl after every cell wrote 80x it at the paper grid's shape)."""
    from bench.rundir import bench_rundir

    result = bench_rundir(series=2, samples=50)
    assert result["cells"] == 64 and result["samples_bytes"] < result["final_bytes"]
    assert result["bytes_written"] >= result["final_bytes"]
    assert result["written_over_final"] < 1.2, result


def test_scoring_section_judges_ten_thousand_outputs_of_each_mode():
    from bench.scoring import bench_scoring, scoring_markdown

    rows = {row["mode"]: row for row in bench_scoring(repeats=1)}
    assert set(rows) == {"first-line", "free-form"}
    assert all(row["outputs"] == 10_000 and row["seconds"] > 0 and row["distinct"] > 100 for row in rows.values())
    assert "| free-form | 540 |" in "\n".join(scoring_markdown(list(rows.values())))
