"""bench.decode's random-init models run through the transformers backend exactly as loaded ones do."""

import torch

from bench.decode import bench_decode, copy_rate, decode_markdown, random_llama
from harness.backends import Sampling
from harness.backends.hf import HFBackend
from harness.models import get_model, get_precision
from harness.questions.problems import Task, generate
from harness.questions.prompts import user_message


def test_a_model_built_in_memory_generates_what_the_same_weights_loaded_from_disk_do(tmp_path):
    model, tokenizer = random_llama("tiny", "cpu", "fp32")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    precision = get_precision(get_model("smollm2"), "fp32")
    loaded = HFBackend(str(tmp_path), precision, batch_size=4)
    in_memory = HFBackend.from_model(model, tokenizer, precision, batch_size=4)
    prompts = [in_memory.chat_prompt(user_message(p)) for p in generate(Task("add"), 10, 2, 6, seed=1)]
    for sampling in (Sampling.named("greedy"), Sampling.named("paper")):
        expected = [g.text for g in loaded.generate(prompts, 8, sampling, seed=list(range(6)))]
        assert [g.text for g in in_memory.generate(prompts, 8, sampling, seed=list(range(6)))] == expected
    assert in_memory.device == "cpu" and in_memory.footprint_mb == loaded.footprint_mb


def test_bf16_models_are_built_in_bf16_and_the_copy_rate_is_a_rate():
    model, _ = random_llama("tiny", "cpu", "bf16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert torch.get_default_dtype() == torch.float32, "the default dtype is restored"
    assert 1e8 < copy_rate("cpu", megabytes=16, seconds=0.1) < 1e13


def test_the_loop_section_times_both_loops_and_the_work_every_loop_shares():
    rows, budget = 8, 4
    result = bench_decode("tiny", "cpu", repeats=1, threads=1, rows=rows, budget=budget)
    for name in ("greedy", "paper"):
        timed = result[name]
        assert 0 < timed["numprec_tokens"] <= rows * budget and 0 < timed["transformers_tokens"] <= rows * budget
        assert timed["speedup"] == timed["numprec_tokens_per_s"] / timed["transformers_tokens_per_s"]
    assert result["vocabulary_seconds"] > 0
    text = "\n".join(decode_markdown("The decode loop's overhead", result))
    assert "no decode loop can be more than" in text and "| greedy |" in text and "| paper |" in text


def test_the_cell_bench_splits_a_harness_batch_into_prefill_and_decode_against_their_bounds():
    """One cell's batch (its shared few-shot prefix) as the harness runs it, on the CPU: a warm-up apart, the prefill
    against the FLOP bound, a decode step against the weight-read floor, the call against the bound that counts the
    shared prefix once."""
    from bench.decode import bench_cell, cell_markdown

    result = bench_cell("tiny", "cpu", repeats=1, threads=1, rows=8, budget=6)
    assert result["prefix_tokens"] > 100 and 0 < result["suffix_tokens"] < result["prefix_tokens"] * 8 / 4
    assert result["first_call_s"] > 0 and result["compile_s"] == 0, "the CPU path compiles nothing"
    for part, bound in (
        ("prefill_s", "prefill_bound_s"),
        ("decode_step_s", "decode_floor_s"),
        ("call_s", "call_bound_s"),
    ):
        assert 0 < result[bound] < result[part] * 5, (part, result)
    step = max(result["decode_floor_s"], result["decode_flop_bound_s"])
    assert result["call_bound_s"] == result["prefill_bound_s"] + 5 * step
    text = "\n".join(cell_markdown(result))
    assert "| prefill (budget 1) |" in text and "| a decode step |" in text and "of which compiling 0.0 s" in text
