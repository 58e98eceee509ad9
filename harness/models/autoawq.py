"""AutoAWQ ("GEMM") checkpoints: the format of the paper's int4 model (hugging-quants' Llama-3.1-8B-Instruct
AWQ INT4, the ``llama-int4`` preset), which transformers 5 loads through gptqmodel's AWQ kernels.

llm-compressor writes its AWQ result as compressed-tensors. ``to_autoawq`` rewrites the very same 4-bit
codes, zero points and scales in AutoAWQ's layout, so that a checkpoint of the default model takes the
preset's own loading path on any machine:

    compressed-tensors (per Linear)                AutoAWQ GEMM (per Linear)
    weight_packed      int32 [out, in/8], q-8      qweight  int32 [in, out/8], codes q in [0, 15], AWQ order
    weight_zero_point  int32 [out/8, in/g], z-8    qzeros   int32 [in/g, out/8]
    weight_scale       [out, in/g]                 scales   float16 [in/g, out]
    weight = (q - z) * scale in both.

Unpacking and packing are the libraries' own (compressed-tensors ``unpack_from_int32``, gptqmodel
``pack_awq``); only the transposes and the +8 offset (signed vs unsigned codes) are written here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from harness.core.errors import UserError
from harness.core.files import follow_umask, move_aside

GPTQMODEL_HINT = "pip install -e '.[awq]' (gptqmodel 7.6.0; bash scripts/setup.sh installs it)"


def require_gptqmodel() -> None:
    """AutoAWQ checkpoints are packed and read by gptqmodel: say so before any work starts."""
    import importlib.util

    if importlib.util.find_spec("gptqmodel") is None:
        raise UserError(f"AWQ checkpoints in AutoAWQ format need gptqmodel; run: {GPTQMODEL_HINT}")


def autoawq_config(bits: int, group_size: int) -> dict:
    """The quantization_config AutoAWQ writes (as in the llama-int4 preset's checkpoint)."""
    return {
        "quant_method": "awq",
        "bits": bits,
        "group_size": group_size,
        "zero_point": True,
        "version": "gemm",
        "modules_to_not_convert": None,
    }


def _weight_args(config: dict) -> dict:
    quantization = config.get("quantization_config") or {}
    if quantization.get("quant_method") != "compressed-tensors" or quantization.get("format") != "pack-quantized":
        raise UserError("to_autoawq reads a pack-quantized compressed-tensors checkpoint (harness.quantize's output)")
    groups = list((quantization.get("config_groups") or {}).values())
    if len(groups) != 1 or not groups[0].get("weights"):
        raise UserError("to_autoawq converts checkpoints with one weight quantization scheme")
    args = groups[0]["weights"]
    if args.get("strategy") != "group" or args.get("num_bits") != 4 or args.get("type") != "int":
        raise UserError(f"AutoAWQ GEMM holds int4 with groups; this checkpoint has {args}")
    return args


def to_autoawq(source: Path, out: Path) -> dict:
    """Write ``out``: the checkpoint at ``source`` (compressed-tensors, int4, grouped) in AutoAWQ GEMM format.

    Returns what the conversion saw: layers converted, and the largest relative change of a scale when cast
    to float16 (AutoAWQ's scale dtype; 0 when the scales were float16 or representable in it).
    """
    import torch
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
    from gptqmodel.quantization.awq.utils.packing_utils import pack_awq
    from safetensors.torch import load_file, save_file

    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    args = _weight_args(config)
    bits, group_size = args["num_bits"], args["group_size"]
    offset = 1 << (bits - 1)  # compressed-tensors stores signed codes, AutoAWQ unsigned ones
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(source.glob("*.safetensors")):
        state.update(load_file(shard))
    converted, scale_change = {}, 0.0
    layers = sorted(name[: -len(".weight_packed")] for name in state if name.endswith(".weight_packed"))
    for layer in layers:
        shape = torch.Size(state.pop(f"{layer}.weight_shape").tolist())
        codes = unpack_from_int32(state.pop(f"{layer}.weight_packed"), bits, shape).to(torch.int32) + offset
        scale = state.pop(f"{layer}.weight_scale")
        packed_zero = state.pop(f"{layer}.weight_zero_point", None)
        if args.get("symmetric", True) or packed_zero is None:
            zeros = torch.full(scale.shape, offset, dtype=torch.int32)  # symmetric: the zero point is the middle code
        else:
            zeros = unpack_from_int32(packed_zero, bits, scale.shape, packed_dim=0).to(torch.int32) + offset
        qweight, qzeros = pack_awq(codes.t().contiguous(), zeros.t().contiguous(), bits)
        scales = scale.t().contiguous().to(torch.float16)
        change = ((scales.float() - scale.t().float()).abs() / scale.t().float().abs().clamp(min=1e-30)).max()
        scale_change = max(scale_change, float(change))
        converted[f"{layer}.qweight"] = qweight
        converted[f"{layer}.qzeros"] = qzeros
        converted[f"{layer}.scales"] = scales
    if not layers:
        raise UserError(f"{source} holds no packed int4 weights to convert")
    # What is left (embeddings, norms, an untied head) stays as it was; AutoAWQ models run in float16.
    for name, tensor in state.items():
        converted[name] = tensor.to(torch.float16) if tensor.is_floating_point() else tensor
    config["quantization_config"] = autoawq_config(bits, group_size)
    config["dtype"] = "float16"

    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for item in source.iterdir():  # tokenizer, generation config, numprec_quantize.json
            shards = item.suffix == ".safetensors" or item.name.endswith(".safetensors.index.json")
            if item.is_file() and not shards and item.name != "config.json":
                shutil.copy2(item, staging / item.name)
        save_file(converted, staging / "model.safetensors", metadata={"format": "pt"})
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        info = {"format": "autoawq-gemm", "layers": len(layers), "max_scale_change_fp16": scale_change}
        provenance = staging / "numprec_quantize.json"
        recorded = json.loads(provenance.read_text(encoding="utf-8")) if provenance.is_file() else {}
        recorded.update(info)
        provenance.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
        follow_umask(staging)
        if out.exists():  # an earlier checkpoint: kept aside, not deleted
            print(f"moved the previous {out.name} aside to {move_aside(out).name}")
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return info
