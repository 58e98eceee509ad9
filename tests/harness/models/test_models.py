"""The registries and the weights behind them, on the real default model."""

import json
from pathlib import Path

import pytest

from harness.backends import Sampling
from harness.backends.hf import HFBackend
from harness.core.errors import UserError
from harness.models import get_model, get_precision, model_registry, precision_registry
from harness.models.weights import resolve_weights
from harness.questions.problems import Task, generate
from harness.questions.prompts import user_message


def test_every_preset_names_known_precisions():
    precisions = precision_registry()
    for model in model_registry().values():
        assert model.default_precision in model.precisions
        assert set(model.precisions) <= set(precisions), model.name
        assert model.requires in ("cpu", "gpu")


def test_precision_a_model_does_not_take_is_refused():
    with pytest.raises(UserError, match="llama-int4 does not run at fp32"):
        get_precision(get_model("llama-int4"), "fp32")


def test_converted_default_model_is_plain_float32():
    """The GGUF conversion must not leave a 'gguf' quantization_config behind: it blocks training and bnb."""
    weights = Path(resolve_weights(get_model("smollm2")))
    config = json.loads((weights / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["num_hidden_layers"] == 30 and config["hidden_size"] == 576 and config["vocab_size"] == 49152
    assert (weights / "model.safetensors").stat().st_size > 400e6, "dequantized float32 weights"


def test_nf4_loads_real_4bit_weights_and_generates(smollm2_fp32):
    model = get_model("smollm2")
    nf4 = HFBackend(resolve_weights(model), get_precision(model, "nf4"), batch_size=4)
    linear_types = {type(m).__name__ for m in nf4.model.modules()}
    assert "Linear4bit" in linear_types, "bitsandbytes replaced the linear layers"
    assert nf4.footprint_mb < 0.45 * smollm2_fp32.footprint_mb
    problems = generate(Task("add"), 10, 1, 4, seed=0)
    outputs = nf4.generate([nf4.chat_prompt(user_message(p)) for p in problems], 24, Sampling.named("greedy"))
    assert len(outputs) == 4 and all(o.tokens >= 1 for o in outputs)
