"""A small Llama with the default model's tokenizer, for tests of what sits around a model (quantization formats,
kernels, fallbacks, process layouts), which it exercises in seconds: llm-compressor's GPTQ and AWQ take about a
minute each on the real 135M model on 2 cores (reports/embedded-precisions quantizes that one), and the real model
answers the base grid with prose up to each cell's token budget. Four layers (tests read layer 3), widths that
64-weight groups tile, as many key/value heads as heads (AWQ then balances v_proj against o_proj too)."""

from __future__ import annotations

from pathlib import Path

TINY_LLAMA = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}


def write_tiny_llama(out: Path) -> Path:
    """The small Llama as a checkpoint directory (bf16, random weights, seed 0), the tokenizer beside it."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from harness.models.weights import default_tokenizer_dir

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(default_tokenizer_dir())
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    config = LlamaConfig(vocab_size=len(tokenizer), **TINY_LLAMA, **ids)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def linear_bytes_per_weight(footprint_mb: float, vocab: int = 49152) -> float:
    """What the small Llama's linear layers (the ones GPTQ/AWQ quantize) take a weight in a loaded model of this
    footprint, its tied embedding counted in 16 bits: about 0.53 at 4 bits with scales and zero points, 2 in fp16."""
    hidden, inner, layers = (TINY_LLAMA[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers"))
    linear = layers * (4 * hidden * hidden + 3 * hidden * inner)
    return (footprint_mb * 2**20 - 2 * vocab * hidden) / linear
