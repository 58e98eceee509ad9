"""An fp8 KV cache (``--kv-cache fp8``, ``NAME+kv-fp8``): the transformers backend's shared-prefix attention reads its
keys and values as vLLM's fp8 cache holds them, and answers what transformers' own attention answers with its keys
and values rounded the same way; the axis is recorded per row and refused where no engine of ours sets it."""

from __future__ import annotations

import csv

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from harness.backends import Sampling, kv_cache
from harness.backends.hf import HFBackend
from harness.models import get_model, get_precision
from harness.models.weights import resolve_weights
from harness.questions.answers import FIRST_LINE
from harness.questions.problems import Task
from tests.harness.helpers import assert_user_error, prompts_for, run_module

GREEDY_OPTIONS = {"do_sample": False, "top_k": None, "top_p": None, "temperature": None}


def reference_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' sdpa attention over keys and values rounded as an fp8 cache holds them."""
    return sdpa_attention_forward(
        module, query, kv_cache.as_fp8_cache(key), kv_cache.as_fp8_cache(value), attention_mask, **kwargs
    )


def test_rounding_saturates_and_is_idempotent():
    values = torch.tensor([1e-9, 0.3, -17.7, 447.0, 449.0, -1e6], dtype=torch.bfloat16)
    once = kv_cache.as_fp8_cache(values)
    assert torch.equal(kv_cache.as_fp8_cache(once), once)
    assert once.tolist()[3:] == [448.0, 448.0, -448.0] and once.dtype == torch.bfloat16


def test_the_cached_path_answers_as_transformers_attention_over_rounded_keys():
    """fp32 weights, fp8 keys and values: the shared-prefix path (prefix once, rows leaving the batch) generates
    what generate() with transformers' attention over the same rounded keys and values generates, and its logits are
    not fp32's (the rounding is in force). The fine-tuned model answers in a few tokens; base SmolLM2's prose meets
    near ties that the two paths' float sums break apart (seen: "code" against "formula")."""
    model = get_model("smollm2-arith")
    backend = HFBackend(resolve_weights(model), get_precision(model, "fp32+kv-fp8"), batch_size=8)
    assert backend.kv_cache == kv_cache.NOTE
    problems, prompts = prompts_for(backend, Task("add"), 2, 8, seed=5)
    budget = FIRST_LINE.budget(Task("add"), 10, 2, backend.count_tokens)
    cached = backend.generate(prompts, budget, Sampling.named("greedy"))
    AttentionInterface.register("numprec_test_fp8_kv", reference_attention)
    backend.model.set_attn_implementation("numprec_test_fp8_kv")
    try:
        for prompt, generation in zip(prompts, cached, strict=True):
            ids = backend.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
            with torch.inference_mode():
                plain = backend.model.generate(
                    ids, max_new_tokens=generation.tokens, pad_token_id=backend.pad_id, **GREEDY_OPTIONS
                )
            assert backend.tokenizer.decode(plain[0, ids.shape[1] :], skip_special_tokens=True) == generation.text
        with torch.inference_mode():
            rounded = backend.model(ids).logits
            backend.model.set_attn_implementation("sdpa")
            exact = backend.model(ids).logits
        assert not torch.equal(rounded, exact)
    finally:
        backend.model.set_attn_implementation("numprec_shared_prefix")


def test_rows_name_the_cache_and_llamacpp_refuses_it(tmp_path):
    out = tmp_path / "run"
    grid = ["--model", "smollm2", "--tasks", "add", "--lengths", "1", "--samples", "3"]
    result = run_module("harness.eval", *grid, "--precision", "fp32", "--kv-cache", "fp8", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "results.csv", newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["precision"], row["kv_cache"]) == ("fp32+kv-fp8", kv_cache.NOTE)
    refused = run_module("harness.eval", *grid, "--precision", "gguf-q4_0+kv-fp8", "--out", str(tmp_path / "gguf"))
    assert_user_error(refused, "llama.cpp", "KV cache")
