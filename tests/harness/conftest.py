import pytest

from .helpers import run_module


@pytest.fixture(scope="session")
def smollm2_fp32():
    """The real embedded default model, loaded once for the whole session (fp32, transformers backend)."""
    from harness.backends.hf import HFBackend
    from harness.models import get_model, get_precision
    from harness.weights import resolve_weights

    model = get_model("smollm2")
    return HFBackend(resolve_weights(model), get_precision(model, "fp32"), batch_size=16)


# A small Llama with the default model's tokenizer: llm-compressor's GPTQ and AWQ take about a minute each on the
# real 135M model on 2 cores (reports/embedded-precisions quantizes it); the tests check the pipeline (formats,
# kernels, recorded precision, errors), which this model exercises in seconds. Four layers (tests read layer 3),
# widths that 64-weight groups tile, as many key/value heads as heads (AWQ then balances v_proj against o_proj too).
TINY_LLAMA = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """The small Llama as a checkpoint directory (bf16, random weights, seed 0), tokenizer beside it."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from harness.models import get_model
    from harness.weights import resolve_weights

    torch.manual_seed(0)
    source = resolve_weights(get_model("smollm2"))
    tokenizer = AutoTokenizer.from_pretrained(source)
    config = LlamaConfig(vocab_size=len(tokenizer), **TINY_LLAMA, **special_token_ids(tokenizer))
    out = tmp_path_factory.mktemp("tiny-llama") / "tiny-llama"
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def special_token_ids(tokenizer) -> dict:
    return {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}


def linear_bytes_per_weight(footprint_mb: float, vocab: int = 49152) -> float:
    """What the small Llama's linear layers (the ones GPTQ/AWQ quantize) take a weight in a loaded model of this
    footprint, its tied embedding counted in 16 bits: about 0.53 at 4 bits with scales and zero points, 2 in fp16."""
    hidden, inner, layers = (TINY_LLAMA[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers"))
    linear = layers * (4 * hidden * hidden + 3 * hidden * inner)
    return (footprint_mb * 2**20 - 2 * vocab * hidden) / linear


def quantized_checkpoint(tmp_path_factory, model_path, method: str, samples: int):
    """Made as a user makes one: python -m harness.quantize (llm-compressor in its own environment)."""
    out = tmp_path_factory.mktemp(method) / f"tiny-{method}"
    result = run_module(
        "harness.quantize",
        "--model",
        "smollm2",
        "--model-path",
        str(model_path),
        "--method",
        method,
        "--samples",
        str(samples),
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def gptq_checkpoint(tmp_path_factory, tiny_llama):
    """A real GPTQ W4A16 g64 checkpoint of the small Llama (8 calibration problems, compressed-tensors)."""
    return quantized_checkpoint(tmp_path_factory, tiny_llama, "gptq", 8)


@pytest.fixture(scope="session")
def awq_checkpoint(tmp_path_factory, tiny_llama):
    """A real AWQ W4A16 g64 checkpoint of the small Llama: llm-compressor's AWQ (4 calibration problems), rewritten
    in AutoAWQ format by harness.quantize."""
    return quantized_checkpoint(tmp_path_factory, tiny_llama, "awq", 4)
