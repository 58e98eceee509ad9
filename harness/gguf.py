"""GGUF variants of a model shipped as a GGUF file: the shipped file itself, and files requantized from it
with llama.cpp's own quantizer (``llama_model_quantize``), cached beside the converted checkpoint.

The embedded SmolLM2 ships as Q4_1. Q8_0 and Q4_0 are made from it (allow_requantize): Q8_0 from Q4_1 holds
the same 4-bit values at 8 bits, so it measures the engine and the block format, not a better original.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from harness.cli import UserError

GGUF_VERSION = "v1"  # bump when the way variants are made changes


def shipped_type(file_name: str) -> str:
    """'SmolLM2-135M-Instruct.Q4_1.gguf' -> 'q4_1'."""
    return Path(file_name).stem.rsplit(".", 1)[-1].lower()


def gguf_variant(source: Path, folder: Path, name: str, weight_dtype: str, tokenizer: Callable[[], str]) -> Path:
    """``folder/NAME.WEIGHT_DTYPE.gguf``: the shipped ``source`` file (linked) or a requantization of it, made once;
    the tokenizer files from the directory ``tokenizer()`` returns sit in the same folder."""
    target = folder / f"{name}.{weight_dtype}.gguf"
    if target.is_file() and (folder / "tokenizer_config.json").is_file():
        return target
    from filelock import FileLock

    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not (folder / "tokenizer_config.json").is_file():
            # The same tokenizer and chat template as the transformers path (converted from this very file).
            from transformers import AutoTokenizer

            AutoTokenizer.from_pretrained(tokenizer()).save_pretrained(folder)
        if not target.is_file():
            staging = target.with_name(target.name + ".partial")
            if weight_dtype == shipped_type(source.name):
                os.symlink(source, staging)
            else:
                print(f"requantizing {source.name} to {weight_dtype} (once, seconds)", file=sys.stderr)
                requantize(source, staging, weight_dtype)
            os.replace(staging, target)
    return target


def requantize(source: Path, target: Path, weight_dtype: str) -> None:
    llama_cpp = import_llama_cpp()
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{weight_dtype.upper()}", None)
    if ftype is None:
        raise UserError(f"llama.cpp has no quantization type {weight_dtype}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = 2
    if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params) != 0:
        raise RuntimeError(f"llama.cpp could not requantize {source} to {weight_dtype}")


def import_llama_cpp():
    try:
        import llama_cpp
    except ImportError:
        raise UserError(
            "GGUF precisions run on llama.cpp; run: pip install 'llama-cpp-python==0.3.36' (compiles, ~5-10 min)"
        ) from None
    return llama_cpp
