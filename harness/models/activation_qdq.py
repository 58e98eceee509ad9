"""A layer's input quantized and dequantized in one compiled pass on a CPU, bit for bit as compressed-tensors does it.

Where a scheme's activations take a scale per group found at run time (NVFP4: groups of 16 under a global scale;
MXFP4 and MXFP8: groups of 32 with power-of-two scales; FP8 blocks), compressed-tensors quantizes every linear layer's
input at every call in eager torch: the groups' minimum and maximum, the scales, a division, a clamp, the rounding and
a multiplication are each a pass over the whole activation (about fifteen for FP4), 1 to 3 times the matmul's own
time on 2 cores. The same library functions traced by ``torch.compile`` become one C++ loop nest (inductor): 7 to 12
times faster on the 135M model's shapes. What is compiled is compressed-tensors' own code
(``compute_dynamic_scales_and_zp``, then ``fake_quantize``), so the arithmetic is the library's; inductor is told to
keep the bfloat16 roundings the eager code makes (``emulate_precision_casts``), and the input's zeros are made +0.0
as the library's zero-point addition makes them. tests/harness/models/test_activation_qdq.py compares each format
with the eager library bit for bit.

``install()`` puts the compiled path where compressed-tensors' layer forward looks its quantizer up
(``compressed_tensors.quantization.lifecycle.forward.forward_quantize``); weights, static scales, per-token formats
and other devices keep the library's own path. A format compiles once a process (about 2.5 s with inductor's on-disk
cache warm, 5 s cold), for every input width and row count: groups are taken as rows of one group each. A machine
where compiling fails keeps the eager path and says so once.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable

import torch

DYNAMIC = (True, "local")
# Per-group scales only: there the eager code's passes cost 3 to 12 times the compiled loop. Per-token formats (FP8,
# INT8) gain 1.3 to 2x, less than the compile costs a quick evaluation, and stay eager.
STRATEGIES = ("group", "tensor_group")
# Compiling costs 2.5 to 5 s a format, about what the eager code takes for 10^8 values: a process compiles once it has
# quantized that many eagerly (a small run never pays for a compile it would not earn back; the bits are the same).
COMPILE_AFTER = 100_000_000
KERNEL = f"compiled by inductor into one loop a call, after the first {COMPILE_AFTER:.0e} values eager"

_compiled: dict[str, Callable] = {}  # by the format's args as JSON
_seen: dict[tuple[int, bool], tuple[object, Callable]] = {}  # by the args object, which is held to keep its id
_state: dict = {"installed": False, "failed": None, "library": None, "compile_after": COMPILE_AFTER, "eager": 0}


def _quantize_dequantize(
    value: torch.Tensor, global_scale: torch.Tensor | None, args=None, scales=None, fake=None
) -> torch.Tensor:
    """compressed-tensors' dynamic quantize-dequantize of ``value`` (a layer's input as [1, groups, group size]):
    ``scales`` is its compute_dynamic_scales_and_zp, ``fake`` its fake_quantize."""
    # The library adds its zero point (0) to the scaled input, which turns -0.0 into +0.0; inductor folds that
    # addition away, so the input's zeros are made +0.0 here, as the library's are.
    value = torch.where(value == 0, torch.zeros_like(value), value)
    scale, zero = scales(value=value, args=args, module=None, global_scale=global_scale)
    return fake(x=value, scale=scale, zero_point=zero, args=args, global_scale=global_scale)


def _compiled_for(args, global_scale: torch.Tensor | None) -> Callable:
    """The compiled quantize-dequantize for one format (one set of quantization args, with or without a global
    scale). Each gets a code object of its own, so that its guards can be the tensors' alone (guards on the args'
    every attribute cost 34 us a call): the args are this function's own, fixed when it is made."""
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp

    seen = (id(args), global_scale is not None)  # the args object a layer holds; kept alive in _seen below
    if seen in _seen:
        return _seen[seen][1]
    key = f"{args.model_dump_json()} global scale: {global_scale is not None}"
    if key not in _compiled:
        code = _quantize_dequantize.__code__.replace(co_name=f"quantize_dequantize_{len(_compiled)}")
        bound = (args, compute_dynamic_scales_and_zp, fake_quantize)  # defaults, not a partial: torch.compile
        # wraps a partial in one shared function, which would put every format under one code object again
        function = types.FunctionType(code, _quantize_dequantize.__globals__, code.co_name, bound)
        _compiled[key] = torch.compile(
            function,
            dynamic=False,
            options={"emulate_precision_casts": True, "guard_filter_fn": torch.compiler.keep_portable_guards_unsafe},
        )
    _seen[seen] = (args, _compiled[key])
    return _compiled[key]


def dynamic(args) -> bool:
    """Activation quantization args whose scales are found at every call, in a strategy the compiled path covers."""
    return args is not None and args.dynamic in DYNAMIC and args.strategy in STRATEGIES


def applies(value: torch.Tensor, base_name: str, args) -> bool:
    """The compiled path takes a CPU layer input whose scales are found at run time, in a strategy it covers."""
    return (
        base_name == "input"
        and value.device.type == "cpu"
        and value.numel() > 0
        and dynamic(args)
        and _state["failed"] is None
    )


def quantize_dequantize(value: torch.Tensor, global_scale: torch.Tensor | None, args) -> torch.Tensor:
    """``value`` quantized and dequantized as compressed-tensors' ``forward_quantize`` would, in one compiled pass."""
    width = value.shape[-1]
    if args.group_size and width % args.group_size == 0:
        width = args.group_size  # groups are independent runs of a row: one graph serves every input width
    rows = value.reshape(1, -1, width)
    torch._dynamo.decorators.mark_unbacked(rows, 1)  # any count, 1 included, without a graph of its own
    return _compiled_for(args, global_scale)(rows, global_scale).reshape(value.shape)


def install(compile_after: int | None = None) -> None:
    """Route compressed-tensors' layer forward through the compiled path where it applies, once ``compile_after``
    values (COMPILE_AFTER unless given) have been quantized eagerly. Idempotent; a call that gives the threshold
    sets it."""
    if compile_after is not None:
        _state["compile_after"] = compile_after
    if _state["installed"]:
        return
    from compressed_tensors.quantization.lifecycle import forward

    library = _state["library"] = getattr(forward, "forward_quantize", None)
    if library is None:  # a compressed-tensors without this hook: its own path, and the kernel column says so
        return

    def forward_quantize(module, value, base_name, args):
        if applies(value, base_name, args) and _earned(value):
            try:
                return quantize_dequantize(value, getattr(module, f"{base_name}_global_scale", None), args)
            except Exception as failure:  # no C++ compiler, or inductor refusing this machine: the eager path
                _state["failed"] = f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
                print(
                    f"numprec: activations quantized in eager torch (torch.compile failed here: {_state['failed']})",
                    file=sys.stderr,
                )
        return library(module, value, base_name, args)

    forward.forward_quantize = forward_quantize
    _state["installed"] = True


def _earned(value: torch.Tensor) -> bool:
    """Whether the eager values quantized so far have paid for a compile; counts ``value`` if not."""
    if _state["eager"] >= _state["compile_after"]:
        return True
    _state["eager"] += value.numel()
    return False


def library_forward_quantize() -> Callable:
    """compressed-tensors' own forward_quantize, as it was before install()."""
    from compressed_tensors.quantization.lifecycle import forward

    return _state["library"] or forward.forward_quantize


def kernel(device: str) -> str:
    """How this process quantizes a layer's dynamic activations on ``device``, for the kernel column."""
    if device != "cpu" or not _state["installed"]:
        return "compressed-tensors' eager torch"
    if _state["failed"]:
        return f"compressed-tensors' eager torch (torch.compile failed: {_state['failed']})"
    return KERNEL
