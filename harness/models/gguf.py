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

from harness.core.errors import UserError
from harness.core.quiet import silence_llama_cpp

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


def gguf_file_type(path: Path) -> str:
    """The quantization a GGUF file declares (general.file_type, as llama.cpp names it: q4_1, q8_0, f32, ...), read
    from its header; a file that is no GGUF is one line."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
        field = reader.fields.get(gguf.Keys.General.FILE_TYPE)
        if field is not None:
            return gguf.LlamaFileType(int(field.contents())).name.removeprefix("MOSTLY_").lower()
        kinds = [t.tensor_type.name for t in reader.tensors if len(t.shape) == 2]
        return max(set(kinds), key=kinds.count).lower() if kinds else "unknown"
    except Exception as err:  # noqa: BLE001 (a foreign or cut file fails in many ways)
        raise UserError(f"{path} is not a readable GGUF file ({type(err).__name__}); replace it") from None


def check_gguf_type(path: Path, weight_dtype: str) -> None:
    """A GGUF file evaluated under a precision label must hold that quantization: a Q4_1 file is never a row that
    says q8_0."""
    found = gguf_file_type(path)
    if found != weight_dtype:
        raise UserError(
            f"{path} holds {found} weights, not {weight_dtype}; evaluate it with --precision gguf-{found} "
            "(or give the file of the precision you name)"
        )


def requantize(source: Path, target: Path, weight_dtype: str) -> None:
    llama_cpp = import_llama_cpp()
    silence_llama_cpp(llama_cpp)  # llama.cpp lists every tensor it quantizes
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


# transformers' Llama linear layers -> llama.cpp's tensor names (blk.N.<name>.weight)
GGUF_LINEAR_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def llama_cpp_rows(weight, heads: int):
    """The row order llama.cpp's converter gives q_proj / k_proj weights (its LlamaModel.permute): within each
    head, the two rotary halves interleaved. transformers' GGUF loader undoes it; a weight written back redoes it."""
    rows, cols = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def write_merged_gguf(source: Path, base_dir: str, merged_dir: str, target: Path) -> None:
    """An F32 GGUF of a fine-tuned model: ``source``'s metadata (tokenizer, chat template, hyperparameters) and
    tensors, each dequantized, plus the change the merged checkpoint made to it (merged minus base, both the
    transformers checkpoints converted from ``source``). A base tensor that does not match its dequantized GGUF
    twin stops the conversion: the name or row mapping would be wrong."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    reader = gguf.GGUFReader(source)
    base, merged = (
        load_file(str(Path(base_dir) / "model.safetensors")),
        load_file(str(Path(merged_dir) / "model.safetensors")),
    )
    heads = {
        "attn_q": int(reader.fields["llama.attention.head_count"].contents()),
        "attn_k": int(reader.fields["llama.attention.head_count_kv"].contents()),
    }
    changes = {}
    for name, merged_weight in merged.items():
        parts = name.split(".")  # model.layers.N.self_attn.q_proj.weight
        if parts[:2] != ["model", "layers"] or ".".join(parts[3:5]) not in GGUF_LINEAR_NAMES:
            if not np.array_equal(merged_weight, base[name]):
                raise RuntimeError(f"the merged model changed {name}, which has no GGUF counterpart here")
            continue
        short = GGUF_LINEAR_NAMES[".".join(parts[3:5])]
        reorder = (lambda w, h=heads[short]: llama_cpp_rows(w, h)) if short in heads else (lambda w: w)
        changes[f"blk.{parts[2]}.{short}.weight"] = (reorder(base[name]), reorder(merged_weight - base[name]))
    writer = gguf.GGUFWriter(target, str(reader.fields["general.architecture"].contents()))
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value = int(gguf.LlamaFileType.ALL_F32) if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
        kind = field.types[0]
        writer.add_key_value(
            field.name, value, kind, sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        )
    for tensor in reader.tensors:
        weight = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        if tensor.name in changes:
            expected, change = changes.pop(tensor.name)
            if not np.array_equal(weight, expected):
                raise RuntimeError(f"{tensor.name} of {source.name} is not the base checkpoint's weight")
            weight = weight + change
        writer.add_tensor(tensor.name, weight, raw_dtype=gguf.GGMLQuantizationType.F32)
    if changes:
        raise RuntimeError(f"{source.name} has no tensor {sorted(changes)[0]}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
