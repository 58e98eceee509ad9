"""Everything above the backends (planning, scoring, results, resume, comparisons, flips, reports) on a scripted
backend: answers are known in advance, so every count is asserted exactly, in milliseconds."""

import json

from tests.harness.helpers import csv_rows
from tests.harness.scripted import gold, pipeline_run


def test_every_count_is_what_the_script_answered(tmp_path):
    out = tmp_path / "run"
    pipeline_run(out, invariance_check=5)
    rows = csv_rows(out / "results.csv")
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and len(samples) == 96
    for row in rows:
        own = [
            s
            for s in samples
            if (s["precision"], s["task"], str(s["length"])) == (row["precision"], row["task"], row["length"])
        ]
        values = [gold(s["expression"]) for s in own]
        assert int(row["no_answer"]) == sum(v % 10 == 7 for v in values)
        assert int(row["correct"]) == sum(v % 10 != 7 and v % 3 != 0 for v in values), "batched: multiples of 3 wrong"
        first = values[:5]
        if row["precision"] == "fp32":
            assert (row["flip_k"], row["flip_outputs"], row["flip_verdicts"]) == ("5", "0", "0")
        else:
            flips = sum(v % 3 == 0 and v % 10 != 7 for v in first)
            assert (row["flip_k"], row["flip_outputs"], row["flip_verdicts"]) == ("5", str(flips), str(flips))
    rules = {s["rule"] for s in samples}
    assert rules == {"equals", "none: no answer stated"}
    comparisons = csv_rows(out / "comparisons.csv")
    assert {(c["baseline"], c["variant"]) for c in comparisons} == {("smollm2 fp32", "smollm2 bf16")}
    assert all(c["only_baseline"] == c["only_variant"] == "0" and c["p_value"] == "1.0" for c in comparisons)
    summary = (out / "summary.md").read_text()
    assert "| smollm2 bf16 | bfloat16 | none (scripted) | 20 | 1 |" in summary, "flips per series"


def test_the_invariance_check_compares_two_batch_sizes_even_at_batch_size_1(tmp_path):
    """At --batch-size 1 every problem was generated alone; re-running it alone would compare a batch size with
    itself and find nothing. The check re-runs such problems in a batch of two, where the scripted bf16 gets the
    multiples of 3 wrong again: every one is caught, in cells of 12 problems and in cells of one."""
    for samples in (12, 1):
        out = tmp_path / f"run-{samples}"
        pipeline_run(out, invariance_check=5, samples=samples, batch_size=1)
        samples_by_cell = {}
        for sample in map(json.loads, (out / "samples.jsonl").read_text().splitlines()):
            key = (sample["precision"], sample["task"], str(sample["length"]))
            samples_by_cell.setdefault(key, []).append(gold(sample["expression"]))
        for row in csv_rows(out / "results.csv"):
            first = samples_by_cell[(row["precision"], row["task"], row["length"])][:5]
            flips = sum(v % 3 == 0 and v % 10 != 7 for v in first) if row["precision"] == "bf16" else 0
            assert row["flip_batch"] == "2", "generated alone, so checked in a batch of two"
            expected = (str(len(first)), str(flips), str(flips))
            assert (row["flip_k"], row["flip_outputs"], row["flip_verdicts"]) == expected
        caught = sum(int(r["flip_verdicts"]) for r in csv_rows(out / "results.csv"))
        assert caught > 0 or samples == 1, "the 12-problem cells hold multiples of 3 among their first 5"


def test_a_finished_run_loads_no_model_on_resume(tmp_path):
    out = tmp_path / "run"
    first, again = [], []
    pipeline_run(out, loads=first)
    before = (out / "results.csv").read_text()
    pipeline_run(out, loads=again)
    assert first == ["fp32", "bf16"] and again == [], "every cell was done: nothing to load"
    assert (out / "results.csv").read_text() == before
