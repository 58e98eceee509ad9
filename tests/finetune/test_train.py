"""A real training run: a tiny Llama with the default model's tokenizer, LoRA and QLoRA, loss must fall;
the saved adapter must load into the harness and be named in its results."""

import csv
import json

import pytest

from tests.console import assert_numprec_console
from tests.harness.helpers import run_module

TINY = """
model: smollm2
tiny: {{hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}}
task: add
method: {method}
seed: 0
data: {{seed: 0, scale: 0.002, max_samples: 48}}
lora: {{r: 8, alpha: 16, dropout: 0.0}}
quant: {{compute_dtype: float32}}
train: {{learning_rate: 2.0e-2, batch_size: 8, dtype: float32, max_length: 512, logging_steps: 1, save_steps: 3}}
"""


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_training_lowers_the_loss_and_the_harness_evaluates_the_adapter(tmp_path, method):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY.format(method=method))
    out = tmp_path / "run"
    tracked = ["--report-to", "tensorboard"] if method == "lora" else []
    result = run_module("finetune.train", "--config", str(config), "--out", str(out), *tracked)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_numprec_console(result)
    adapter = out / "adapter"
    summary = json.loads((adapter / "train_summary.json").read_text())
    assert summary["steps"] == 6
    if tracked:  # the loss curve read back from TensorBoard's event file, as its viewer reads it
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        (events,) = (out / "tensorboard").glob("events.out.tfevents.*")
        curve = EventAccumulator(str(events)).Reload()
        loss = [(event.step, event.value) for event in curve.Scalars("loss")]
        assert [step for step, _ in loss] == [1, 2, 3, 4, 5, 6]
        assert [value for _, value in loss] == pytest.approx(summary["losses"], rel=1e-6)
        assert "learning_rate" in curve.Tags()["scalars"] and "config/text_summary" in curve.Tags()["tensors"]
    assert summary["last_loss"] < summary["first_loss"] - 0.05, summary["losses"]
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 8
    assert (adapter / "train_config.yaml").read_text() == config.read_text(), "the adapter sits beside its config"

    if method == "qlora":
        return  # evaluating an adapter on an nf4 base is the quantization work's (issue 3) precision nf4
    evaluation = run_module(
        "harness.eval",
        "--model",
        "smollm2",
        "--model-path",
        str(out / "base"),
        "--adapter",
        str(adapter),
        "--precision",
        "fp32",
        "--tasks",
        "add",
        "--lengths",
        "1",
        "--samples",
        "4",
        "--out",
        str(tmp_path / "eval"),
    )
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    with open(tmp_path / "eval" / "results.csv", newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["adapter"] == str(adapter) and row["n"] == "4"


def test_resume_continues_from_the_last_checkpoint(tmp_path):
    """Also trains from a dataset saved by the finetune.data command (data.path)."""
    built = run_module("finetune.data", "--tasks", "add", "--scale", "0.002", "--out", str(tmp_path / "data"))
    assert built.returncode == 0, built.stderr[-2000:]
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["tasks"]["add"]["rows"] == 6 * 10 + 3 * 20
    config = tmp_path / "tiny.yaml"
    text = TINY.format(method="lora").replace(
        "data: {seed: 0, scale: 0.002,", f"data: {{path: {tmp_path / 'data' / 'add'},"
    )
    assert "path:" in text
    config.write_text(text)
    out = tmp_path / "run"
    assert run_module("finetune.train", "--config", str(config), "--out", str(out)).returncode == 0
    again = run_module("finetune.train", "--config", str(config), "--out", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads((out / "adapter" / "train_summary.json").read_text())
    assert summary["resumed_from"] and summary["resumed_from"].endswith("checkpoint-6")
