"""How the transformers backend loads a precision: from_pretrained's arguments per method (casts, bitsandbytes,
GPTQ/AWQ through gptqmodel, compressed-tensors' formats), a LoRA adapter merged or kept apart, the CPU's transposed
weight layout for fp32, and the name of the kernel that runs the linear layers, read off the loaded model."""

from __future__ import annotations

import os
import sys

import torch
from tqdm import tqdm

from harness.backends.widened_bf16 import WIDENED, WidenedBf16Linear
from harness.core.errors import UserError
from harness.models import PrecisionSpec, activation_qdq, awq_kernels, fp4
from harness.models.autoawq import require_gptqmodel
from harness.models.checkpoints import Checkpoint, quantization_config

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Kernels that compute in another dtype than the model's. gptqmodel's CPU AWQ kernel casts activations and scales
# to bfloat16 for aten's int4 matmul (_weight_int4pack_mm_for_cpu), so "awq-w4" on a CPU is W4A16 in bf16, not fp16
# (tests/harness/models/test_autoawq.py observes it).
KERNEL_ACTIVATION_DTYPE = {"gptqmodel.TorchAtenAwqLinear": "bfloat16"}


def query_projection(model: torch.nn.Module) -> torch.nn.Module | None:
    """The first attention layer's query projection, the decoder's linear layers' representative (inside a peft LoRA
    wrapper, the quantized layer it wraps); None for a model without one."""
    for name, module in model.named_modules():
        if name.endswith("self_attn.q_proj"):
            return getattr(module, "base_layer", module)
    return None


def linear_kernel(model: torch.nn.Module) -> str:
    """The module class that runs the decoder's linear layers, as the loaded model has it: torch.Linear for casts,
    bitsandbytes.Linear4bit, gptqmodel.TorchAtenAwqLinear (AWQ on CPU) or a CUDA kernel class on a GPU, with
    "+compressed-tensors" where compressed-tensors unpacks 4-bit weights for torch's own matmul."""
    module = query_projection(model)
    if module is None:
        return "unknown"
    kind = type(module)
    widened = isinstance(module, WidenedBf16Linear)
    label = "torch.Linear" if widened else f"{kind.__module__.split('.')[0]}.{kind.__name__}"
    label += "+compressed-tensors" if hasattr(module, "quantization_scheme") else ""
    return label + (f", {WIDENED}" if widened else "")


def store_linear_weights_transposed(model: torch.nn.Module) -> None:
    """Keep each Linear's weight as the transposed view of an [in, out] array: F.linear then hands the CPU
    GEMM a plain row-major right operand, 1.4-1.8x faster for the few-row products of decoding (measured here
    for 576 x 1536 at 8-29 rows; 1.4x for the 49152-row lm_head). Same values, same memory; ties survive.
    float32 only: a CPU without bf16 instructions (AVX2 alone) multiplies bfloat16 by such a view 10-30x slower
    than by the plain layout (measured here: 733 ms vs 23 s for the 140 x 576 x 49152 lm_head)."""
    done = set()
    for module in model.modules():
        weight = getattr(module, "weight", None)
        plain = type(module) is torch.nn.Linear and weight is not None and weight.dtype == torch.float32
        if plain and id(weight) not in done:
            weight.data = weight.data.t().contiguous().t()
            done.add(id(weight))


def load_kwargs(precision: PrecisionSpec, device: str, weights: str, checkpoint: Checkpoint | None = None) -> dict:
    """from_pretrained's arguments for ``precision``; a prequantized checkpoint's config as the plan read it
    (``checkpoint``), or read here where the caller loads a directory of its own."""
    if precision.method == "cast":
        return {"dtype": TORCH_DTYPES[precision.weight_dtype], "device_map": device}
    if precision.method == "bnb":
        try:
            import bitsandbytes  # noqa: F401
            from transformers import BitsAndBytesConfig
        except ImportError:
            raise UserError(
                f"precision {precision.name} needs bitsandbytes; run: pip install 'bitsandbytes>=0.47'"
            ) from None
        dtype = TORCH_DTYPES[precision.activation_dtype]
        if precision.weight_dtype == "int8":
            # LLM.int8's matmul casts its inputs to fp16 anyway; loading in fp16 makes that the recorded truth.
            return {"quantization_config": BitsAndBytesConfig(load_in_8bit=True), "dtype": dtype, "device_map": device}
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
        return {"quantization_config": quant, "device_map": device}
    if precision.method == "compressed":
        # compressed-tensors' formats in the checkpoint's bfloat16: transformers keeps the codes and scales, the
        # first forward dequantizes the weights exactly, and every call quantizes the activations the scheme names
        # (harness/backends/emulated.py says what ran).
        fp4.register()  # E2M1 rounding of activations in one pass on a CPU (NVFP4, MXFP4)
        activation_qdq.install()  # dynamic activation quantization compiled into one loop on a CPU
        return {"dtype": torch.bfloat16, "device_map": device}
    if precision.prequantized:
        # The checkpoint carries its quantization_config: compressed-tensors (llm-compressor's GPTQ) or an
        # AutoAWQ/GPTQ checkpoint, which transformers 5 reads through gptqmodel (the llama-int4 preset's path).
        stored = (checkpoint.quantization if checkpoint is not None else quantization_config(weights)) or {}
        if stored.get("quant_method") in ("awq", "gptq"):
            require_gptqmodel()
        kwargs = {"dtype": TORCH_DTYPES[precision.activation_dtype], "device_map": device}
        if stored.get("quant_method") == "awq":
            # gptqmodel's kernel, chosen and (where it must be) built before loading, each step said
            kernel = awq_kernels.choose(device)
            kernel, _ = awq_kernels.prepare(kernel, lambda line: tqdm.write(line, file=sys.stderr))
            if kernel.backend != "auto":
                from transformers import AwqConfig

                bits, group = stored.get("bits", 4), stored.get("group_size", 128)
                kwargs["quantization_config"] = AwqConfig(bits=bits, group_size=group, backend=kernel.backend)
        return kwargs
    raise UserError(f"precision {precision.name} (method {precision.method}) has no transformers loader")


def with_adapter(model, adapter: str, merge: bool):
    try:
        from peft import PeftModel
    except ImportError:
        raise UserError("--adapter needs peft; run: pip install 'peft>=0.17'") from None
    if not os.path.isfile(os.path.join(adapter, "adapter_config.json")):
        raise UserError(f"--adapter {adapter} is not a peft adapter directory (no adapter_config.json)")
    model = PeftModel.from_pretrained(model, adapter)
    return (model.merge_and_unload() if merge else model).eval()
