"""The models people evaluate now (issue 32), on the scripted backend: free-form answers with thinking blocks, read
by their final-answer formats and cut by their budget; several seeds, per seed and pooled; a resume mid-seed."""

from __future__ import annotations

import json
import re

import pytest

from harness.backends.scripted import ScriptedBackend
from harness.eval import evaluate
from harness.rescore import main as rescore
from harness.runs.config import build_spec, load_config
from tests.harness.helpers import csv_rows


def gold(expression: str) -> int:
    if " * " in expression:
        a, b = expression.split(" * ")
        return int(a) * int(b)
    return sum(int(part) for part in expression.split(" + "))


FORMATS = [
    # (what the reasoning model writes after its thinking, right?) for a problem whose answer is v
    lambda e, v: f"The final answer is {v}.",
    lambda e, v: f"Final Answer: The final answer is ${v}$. I hope it is correct.",
    lambda e, v: f"So the total is\n\\boxed{{{v}}}",
    lambda e, v: json.dumps({"reasoning": "added the digits", "answer": v}),
    lambda e, v: f"Working: first the units.\n{e} = {v}",
]


def thinking_script(message: str, rows: int) -> str:
    """A reasoning model: a thinking block (which states a wrong total on the way: never read), then one of the
    formats; every seventh problem thinks past any budget (truncated)."""
    expression = re.search(r"base 10: (.+)$", message.splitlines()[0])[1]
    value = gold(expression)
    number = sum(map(ord, expression))
    if number % 7 == 0:
        return "<think>" + " hmm" * 400
    thinking = f"<think>\nLet me see: {expression} = {value + 1}? No, carry again.\n</think>\n"
    return thinking + FORMATS[number % len(FORMATS)](expression, value)


def run(out, script=thinking_script, seeds=None, samples=10, interrupt_after=None, tasks=("add", "mul"), **settings):
    """The scripted run of every test here; ``script`` answers every series, or is a mapping precision -> script."""
    name, config = load_config("quick")
    spec = build_spec(
        name,
        config,
        models=["smollm2"],
        precisions=["fp32", "bf16"],
        tasks=list(tasks),
        lengths=[1, 2],
        samples=samples,
        out=out,
        seeds=seeds,
        **({"prompt": "cot", "answer": "free-form", "max_new_tokens": 200} | settings),
    )
    calls = [0]

    def load(variant, spec):
        own = script[variant.precision.name] if isinstance(script, dict) else script

        def counted(message: str, rows: int) -> str:
            calls[0] += 1
            if interrupt_after is not None and calls[0] > interrupt_after:
                raise KeyboardInterrupt
            return own(message, rows)

        return ScriptedBackend(variant.precision, counted, spec.batch_size)

    return evaluate(spec, "python -m harness.eval (scripted)", load=load)


def test_free_form_answers_are_read_after_the_thinking_in_every_format(tmp_path):
    out = tmp_path / "run"
    run(out)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 80
    for sample in samples:
        number = sum(map(ord, sample["expression"]))
        if number % 7 == 0:
            assert sample["truncated"] and sample["rule"].startswith("none: truncated") and not sample["correct"]
            assert sample["tokens"] == 200 and sample["thinking_tokens"] == 200
        else:
            assert not sample["truncated"] and sample["correct"], sample["output"]
            assert sample["rule"] in ("final", "boxed", "json", "equals"), sample["rule"]
            assert sample["thinking_tokens"] > 0 and sample["tokens"] > sample["thinking_tokens"]
            assert "</think>" in sample["output"], "the thinking is kept in the sample"
    rows = csv_rows(out / "results.csv")
    assert {row["answer_mode"] for row in rows} == {"free-form:200:</think>"} and {r["prompt_style"] for r in rows} == {
        "cot"
    }
    for row in rows:
        own = [
            s
            for s in samples
            if (s["precision"], s["task"], str(s["length"])) == (row["precision"], row["task"], row["length"])
        ]
        assert int(row["truncated"]) == sum(s["truncated"] for s in own)
        assert float(row["tokens_mean"]) == pytest.approx(sum(s["tokens"] for s in own) / len(own), abs=1e-3)
    summary = (out / "summary.md").read_text()
    assert "## Generated tokens" in summary and "Paired lengths against smollm2 fp32" in summary
    assert "answers read free-form:200:</think>" in summary and (out / "lengths.png").stat().st_size > 1000
    assert {r["rule"] for r in samples if not r["truncated"]} >= {"final", "boxed", "json", "equals"}


def test_the_paired_lengths_say_which_series_thinks_longer(tmp_path):
    """bf16 thinks twice as long on the same problems: its paired length difference is positive and significant."""

    def longer(message: str, rows: int) -> str:
        return thinking_script(message, rows).replace("Let me see:", "Let me see: " + "and then " * 10)

    out = tmp_path / "run"
    run(out, {"fp32": thinking_script, "bf16": longer}, samples=30, tasks=["add"], max_new_tokens=2000)
    (row,) = csv_rows(out / "lengths.csv")
    assert row["baseline"] == "smollm2 fp32" and row["variant"] == "smollm2 bf16"
    assert float(row["difference"]) > 15 and float(row["p_holm"]) < 0.05, row


def test_several_seeds_give_rows_per_seed_pooled_rows_and_pooled_comparisons(tmp_path):
    out = tmp_path / "run"
    run(out, seeds=[0, 1, 2])
    rows = csv_rows(out / "results.csv")
    assert len(rows) == 3 * 8 and {row["seed"] for row in rows} == {"0", "1", "2"}
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    by_seed = {
        seed: [s["expression"] for s in samples if s["seed"] == seed and s["precision"] == "fp32"] for seed in (0, 1, 2)
    }
    assert by_seed[0] != by_seed[1] != by_seed[2], "each seed draws its own problems"
    pooled = csv_rows(out / "pooled.csv")
    assert len(pooled) == 8
    for line in pooled:
        own = [
            r
            for r in rows
            if (f"smollm2 {r['precision']}", r["task"], r["length"]) == (line["series"], line["task"], line["length"])
        ]
        assert int(line["n"]) == 30 and int(line["correct"]) == sum(int(r["correct"]) for r in own)
        accuracies = [int(r["correct"]) / 10 for r in own]
        assert float(line["seed_lowest"]) == pytest.approx(min(accuracies)) and line["seeds"] == "0,1,2"
    comparisons = [c for c in csv_rows(out / "comparisons.csv") if c["length"] != "all"]
    assert {int(c["n"]) for c in comparisons} == {30}, "pairs pooled over the three seeds"
    assert "seeds 0, 1, 2 (pooled: counts summed)" in (out / "summary.md").read_text()


def test_a_run_of_several_seeds_resumes_mid_seed(tmp_path):
    """Stopped in the middle of seed 1: the finished cells stay, the rest are computed, and the run equals one that
    never stopped (timing aside)."""
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    run(whole, seeds=[0, 1, 2], samples=4)
    with pytest.raises(KeyboardInterrupt):
        run(
            stopped, seeds=[0, 1, 2], samples=4, interrupt_after=4 * 8 + 16 + 3
        )  # seed 0, then seed 1 at fp32, then stopped
    partial = csv_rows(stopped / "results.csv")
    assert {row["seed"] for row in partial} == {"0", "1"} and len(partial) == 12
    run(stopped, seeds=[0, 1, 2], samples=4)
    keep = ("precision", "task", "length", "seed", "n", "correct")
    key = lambda rows: sorted(tuple(r[k] for k in keep) for r in rows)  # noqa: E731
    assert key(csv_rows(stopped / "results.csv")) == key(csv_rows(whole / "results.csv"))
    assert sorted((stopped / "samples.jsonl").read_text().splitlines()) == sorted(
        (whole / "samples.jsonl").read_text().splitlines()
    )


QWEN3_STYLE = (
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def test_the_thinking_switch_sets_the_templates_enable_thinking_and_is_refused_where_there_is_none():
    """SmolLM2's real tokenizer: its own template has no switch (--thinking on is refused in one line); given a
    template with Qwen3's switch, off writes the empty thinking block into the prompt and auto leaves it out."""
    from transformers import AutoTokenizer

    from harness.backends import ChatBackend
    from harness.core.errors import UserError
    from harness.models import get_model
    from harness.models.weights import resolve_weights

    backend = ChatBackend()
    backend.tokenizer = AutoTokenizer.from_pretrained(resolve_weights(get_model("smollm2")))
    with pytest.raises(UserError, match="no thinking switch; drop --thinking"):
        backend.set_thinking("on")
    backend.set_thinking("auto")
    plain = backend.chat_prompt("7 + 8")
    backend.tokenizer.chat_template = QWEN3_STYLE
    prompts = {}
    for thinking in ("auto", "on", "off"):
        backend.set_thinking(thinking)
        prompts[thinking] = backend.chat_prompt("7 + 8")
    assert prompts["off"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), prompts["off"]
    assert prompts["auto"] == prompts["on"] and "<think>" not in prompts["on"]
    assert "<think>" not in plain


def test_a_truncated_product_stated_whole_is_read_as_its_last_digits_and_a_rescore_agrees(tmp_path, capsys):
    """mul:trunc=2 asks for the last 2 digits: a model that states the whole product answers with its last 2 digits
    (issue 55), in the run and in a rescore (which reads the task from the row); a wrong last digit stays wrong."""

    def whole_product(message: str, rows: int) -> str:
        expression = re.search(r"base 10: (.+)$", message.splitlines()[0])[1]
        value = gold(expression)
        stated = value if sum(map(ord, expression)) % 3 else value + 1  # every third problem off by one
        return f"<think>multiply</think>\n{expression} = {stated}, so the last 2 digits are {stated % 100:02d}."

    out = tmp_path / "run"
    run(out, script=whole_product, tasks=("mul:trunc=2",), samples=12)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 48 and {sample["task"] for sample in samples} == {"mul"}
    for sample in samples:
        right = sum(map(ord, sample["expression"])) % 3 != 0
        assert sample["correct"] == right and len(sample["gold"]) == 2, sample
        assert sample["extracted"] == (sample["gold"] if right else f"{(int(sample['gold']) + 1) % 100:02d}")
    assert 0 < sum(sample["correct"] for sample in samples) < 48
    capsys.readouterr()
    assert rescore([str(out)]) == 0
    assert "0 verdict(s) changed, 0 answer(s) read differently" in capsys.readouterr().out
