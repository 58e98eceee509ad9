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
and other devices keep the library's own path. A format compiles once a process (about 1.5 s with inductor's
on-disk cache warm and its vector-ISA check remembered by harness/core/vec_isa.py, 5 s cold), for every input width
and row count: groups are taken as rows of one group each; it compiles once the eager values and those the current
forward brings (``expect``) pay for it. Layers that take one input (q, k and v; gate and up) quantize it once: the
next layer given the same tensor, its bits unchanged, in equal args, gets the same result (a copy of the input is
kept only after layers whose next layer took their input before: not after o_proj and down_proj). A decode step's
input runs the kernel on one thread (a second trace, the same kernel), where waking the second thread costs more than
its share of the work. A machine where compiling fails keeps the eager path and says so once.
"""

from __future__ import annotations

import sys
import types
import weakref
from collections.abc import Callable

import numpy
import torch

from harness.core import vec_isa

DYNAMIC = (True, "local")
# Per-group scales only: there the eager code's passes cost 3 to 12 times the compiled loop. Per-token formats (FP8,
# INT8) gain 1.3 to 2x, less than the compile costs a quick evaluation, and stay eager.
STRATEGIES = ("group", "tensor_group")
# Compiling costs 2.5 to 5 s a format, about what the eager code takes for 10^8 values: a process compiles once it has
# quantized that many eagerly (a small run never pays for a compile it would not earn back; the bits are the same).
COMPILE_AFTER = 100_000_000
KERNEL = f"compiled by inductor into one loop a call, after the first {COMPILE_AFTER:.0e} values eager"
# At most this many values a call run on one thread: the kernel's four parallel loops each end at a barrier, and at a
# decode step's size waking the second thread costs more than the arithmetic it takes (on 2 cores, idle: 229 -> 27 us
# a call at 1 row of 576, 260 -> 88 us at 40 rows, even at 256 rows; beside a busy core 4.9 ms -> 0.12 ms at 40 rows).
# Each group's values are reduced within one iteration of the loop, so the thread count changes no bit. The kernel is
# compiled with inductor's cpp.dynamic_threads (its OpenMP team sized at each call, not fixed when it is built), so one
# kernel serves both counts; dynamo still guards on the thread count, so the first one-thread call traces the function
# a second time and loads that kernel from inductor's cache (0.4 s measured here), instead of building a second one.
ONE_THREAD = 2**17

_compiled: dict[str, Callable] = {}  # by the format's args as JSON
_seen: dict[tuple[int, bool], tuple[object, Callable]] = {}  # by the args object, which is held to keep its id
_state: dict = {
    "installed": False,
    "failed": None,
    "library": None,
    "compile_after": COMPILE_AFTER,
    "eager": 0,
    "per_row": 0,  # values a forward quantizes a row (expect())
}
_last: list = []  # the last input quantized (layer, tensor, shape, a copy of its bytes, args, global scale), result
_shares: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # layer: whether the layer called next takes its input
_snapshots: list[torch.Tensor] = []  # the buffer the copies are made in, kept: a prefill's input is megabytes


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
        vec_isa.remember()  # inductor's check of the CPU's vector instructions, once a machine
        code = _quantize_dequantize.__code__.replace(co_name=f"quantize_dequantize_{len(_compiled)}")
        bound = (args, compute_dynamic_scales_and_zp, fake_quantize)  # defaults, not a partial: torch.compile
        # wraps a partial in one shared function, which would put every format under one code object again
        function = types.FunctionType(code, _quantize_dequantize.__globals__, code.co_name, bound)
        _compiled[key] = torch.compile(
            function,
            dynamic=False,
            options={
                "emulate_precision_casts": True,
                "cpp.dynamic_threads": True,  # one kernel for any thread count (ONE_THREAD)
                "guard_filter_fn": torch.compiler.keep_portable_guards_unsafe,
            },
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
    """``value`` quantized and dequantized as compressed-tensors' ``forward_quantize`` would, in one compiled pass.
    An input of a decode step's size runs on this thread alone (ONE_THREAD)."""
    width = value.shape[-1]
    if args.group_size and width % args.group_size == 0:
        width = args.group_size  # groups are independent runs of a row: one graph serves every input width
    rows = value.reshape(1, -1, width)
    torch._dynamo.decorators.mark_unbacked(rows, 1)  # any count, 1 included, without a graph of its own
    compiled = _compiled_for(args, global_scale)
    threads = torch.get_num_threads()
    if value.numel() > ONE_THREAD or threads == 1:
        return compiled(rows, global_scale).reshape(value.shape)
    torch.set_num_threads(1)  # the same kernel: its OpenMP regions take their size from this at each call
    try:
        return compiled(rows, global_scale).reshape(value.shape)
    finally:
        torch.set_num_threads(threads)


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
        if not applies(value, base_name, args):
            return library(module, value, base_name, args)
        global_scale = getattr(module, f"{base_name}_global_scale", None)
        reusable = not value.requires_grad  # a result shared by layers must not join two autograd graphs
        if reusable and _last:
            earlier = _last[0]
            if earlier[0] not in _shares:  # learned at the call after its first: does the next layer take its input
                _shares[earlier[0]] = earlier[1] is value
            if _same_input(earlier, value, args, global_scale):
                return _last[1]  # q, k and v (gate and up) quantize the same input in the same format
        result = None
        if _earned(value):
            try:
                result = quantize_dequantize(value, global_scale, args)
            except Exception as failure:  # no C++ compiler, or inductor refusing this machine: the eager path
                _state["failed"] = f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
                print(
                    f"numprec: activations quantized in eager torch (torch.compile failed here: {_state['failed']})",
                    file=sys.stderr,
                )
        if result is None:
            result = library(module, value, base_name, args)
        keep = reusable and _shares.get(module, True)  # o_proj's and down_proj's inputs go to no other layer
        _last[:] = [(module, value, value.shape, _snapshot(value), args, global_scale), result] if keep else []
        return result

    forward.forward_quantize = forward_quantize
    _state["installed"] = True


def _earned(value: torch.Tensor) -> bool:
    """Whether a compile is paid for: by the values quantized eagerly so far together with those this forward is
    about to quantize (``value``'s rows times the model's values a row, see expect()); counts ``value`` if not."""
    if _state["eager"] >= _state["compile_after"]:
        return True
    rows = value.numel() // value.shape[-1]
    if _state["eager"] + rows * _state["per_row"] >= _state["compile_after"]:
        _state["eager"] = _state["compile_after"]
        return True
    _state["eager"] += value.numel()
    return False


def _same_input(earlier: tuple, value: torch.Tensor, args, scale: torch.Tensor | None) -> bool:
    """Whether ``value`` is the input quantized last (``earlier``: its layer, that tensor, its shape, a copy of its
    bytes, its args and global scale), unchanged since (its copy compared: inference tensors keep no version counter),
    in equal args under an equal global scale: then the result is the last one, bit for bit (the quantization is a
    function of these)."""
    _, tensor, shape, snapshot, earlier_args, earlier_scale = earlier
    return (
        tensor is value
        and value.shape == shape
        and (earlier_args is args or earlier_args == args)
        and (
            earlier_scale is scale
            or (scale is not None and earlier_scale is not None and torch.equal(scale, earlier_scale))
        )
        and _same_bytes(snapshot, _bytes(value))
    )


def _bytes(value: torch.Tensor) -> torch.Tensor:
    return value.reshape(-1).view(torch.uint8)


def _snapshot(value: torch.Tensor) -> torch.Tensor:
    """A copy of ``value``'s bytes, in a buffer kept between calls: a fresh allocation of a prefill's 20 MB input
    costs 7 times the copy (its pages are mapped anew each time: 5.7 ms against 0.8 measured here). The buffer is an
    ordinary tensor, so that inference mode and plain no_grad can both write it."""
    data = _bytes(value)
    if not _snapshots or _snapshots[0].numel() < data.numel():
        with torch.inference_mode(False):
            _snapshots[:] = [torch.empty(data.numel(), dtype=torch.uint8)]
    return _snapshots[0][: data.numel()].copy_(data)


def _same_bytes(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Two CPU byte tensors hold the same bytes: numpy's comparison, eight bytes at a time where both align (torch.equal
    takes 26 us for a decode step's 40 x 576 and 1.1 ns a value at prefill, numpy 6 us and 0.2 ns; 8-byte words
    halve that again)."""
    if first.numel() != second.numel():
        return False
    aligned = first.numel() % 8 == 0 and first.storage_offset() % 8 == 0 and second.storage_offset() % 8 == 0
    word = torch.int64 if aligned else torch.uint8
    return bool(numpy.array_equal(first.view(word).numpy(), second.view(word).numpy()))


def expect(model: torch.nn.Module) -> None:
    """The values a forward of ``model`` quantizes a row (token): the input widths of its layers whose activations
    take scales at run time in a covered strategy (shared inputs counted in each layer, so an upper estimate by at
    most 1.6x on a Llama). A forward whose rows bring the compile's worth of values compiles at its first layer,
    instead of quantizing that much eagerly first: the work is known to be coming."""
    widths = 0
    for module in model.modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is not None and dynamic(scheme.input_activations) and hasattr(module, "in_features"):
            widths += module.in_features
    _state["per_row"] = widths


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
