"""A layer's input quantized and dequantized in one compiled pass on a CPU, bit for bit as compressed-tensors does it.

Where a scheme's activations take a scale per group found at run time (NVFP4: groups of 16 under a global scale;
MXFP4 and MXFP8: groups of 32 with power-of-two scales; FP8 blocks), compressed-tensors quantizes every linear layer's
input at every call in eager torch: the groups' minimum and maximum, the scales, a division, a clamp, the rounding and
a multiplication are each a pass over the whole activation (about fifteen for FP4), 1 to 3 times the matmul's own
time on 2 cores. The same library functions exported and compiled by inductor become one C++ loop nest: 7 to 12
times faster on the 135M model's shapes. What is compiled is compressed-tensors' own code
(``compute_dynamic_scales_and_zp``, then ``fake_quantize``), so the arithmetic is the library's; inductor is told to
keep the bfloat16 roundings the eager code makes (``emulate_precision_casts``), and the input's zeros are made +0.0
as the library's zero-point addition makes them. tests/harness/models/test_activation_qdq.py compares each format
with the eager library bit for bit.

``install()`` puts the compiled path where compressed-tensors' layer forward looks its quantizer up
(``compressed_tensors.quantization.lifecycle.forward.forward_quantize``); weights, static scales, per-token formats
and other devices keep the library's own path. The kernel is built ahead of time (harness/models/qdq_kernels.py)
once a machine and format, into numprec's cache, and loaded by each process in milliseconds, for every input width
and row count: groups are taken as rows of one group each. A process that finds none on disk builds it once the
eager values and those the current forward brings (``expect``) pay for it. Layers that take one input (q, k and v;
gate and up) quantize it once: the next layer given the same tensor, its bits unchanged, in equal args, gets the
same result (a copy of the input is kept only after layers whose next layer took their input before: not after
o_proj and down_proj). A decode step's input runs the kernel on one thread, where waking the second thread can cost
more than its share of the work. A machine where compiling fails keeps the eager path and says so once.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy
import torch
from tqdm import tqdm

from harness.core.errors import one_line
from harness.models import qdq_kernels
from harness.models.qdq_kernels import Kernel

DYNAMIC = (True, "local")
# Per-group scales only: there the eager code's passes cost 3 to 12 times the compiled loop. Per-token formats (FP8,
# INT8) gain 1.3 to 2x, less than building a kernel costs, and stay eager.
STRATEGIES = ("group", "tensor_group")
# Building a format's kernel costs 8 to 15 s on 2 cores, once a machine; 10^8 values quantized eagerly cost 2.5 to
# 5 s: a process without the kernel on disk builds it once it has quantized that many eagerly (a small run never
# waits for a build; the bits are the same). A kernel on disk is loaded at the first call (milliseconds).
COMPILE_AFTER = 100_000_000
KERNEL = (
    f"compiled ahead of time by AOTInductor into one loop a call, built once a machine after {COMPILE_AFTER:.0e} "
    "values eager"
)
# At most this many values a call run on one thread: the kernel's parallel loops each end at a barrier, and at a
# decode step's size waking the second thread can cost more than the arithmetic it takes (on 2 cores beside a busy
# core 4.9 ms -> 0.12 ms a call at 40 rows of 576). Each group's values are reduced within one iteration of the loop,
# so the thread count changes no bit; the kernel is built with inductor's cpp.dynamic_threads (its OpenMP team sized
# at each call), so one kernel serves both counts.
ONE_THREAD = 2**17

_kernels: dict[Path, Kernel | None] = {}  # by package: loaded, or None where none was on disk when looked for
_paths: dict[tuple, tuple[object, Path]] = {}  # by the args object (held, to keep its id), dtype, width, scale
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


def _bound(args) -> Callable:
    """The quantize-dequantize of one format: ``args`` and the library's two functions bound to it."""
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp

    return functools.partial(_quantize_dequantize, args=args, scales=compute_dynamic_scales_and_zp, fake=fake_quantize)


def _kernel(args, dtype: torch.dtype, width: int, global_scale: torch.Tensor | None, make: bool) -> Kernel | None:
    """The compiled quantize-dequantize for one format and input (its package loaded, from disk or built now where
    ``make``), or None where none is built and ``make`` is false."""
    scale = None if global_scale is None else (global_scale.dtype, tuple(global_scale.shape))
    seen = (id(args), dtype, width, scale)  # the args object a layer holds; kept alive in _paths below
    if seen not in _paths:
        _paths[seen] = (args, qdq_kernels.package_path(_quantize_dequantize, args, dtype, width, global_scale))
    path = _paths[seen][1]
    if path not in _kernels or (_kernels[path] is None and make):
        _kernels[path] = qdq_kernels.load(path)
        if _kernels[path] is None and make:
            _kernels[path] = qdq_kernels.build(_bound(args), dtype, width, global_scale, path)
    return _kernels[path]


def compiled(args) -> bool:
    """Whether a layer quantizing its input by ``args`` has run the compiled kernel in this process."""
    return any(key[0] == id(args) and _kernels.get(path) is not None for key, (_, path) in _paths.items())


def dynamic(args) -> bool:
    """Activation quantization args whose scales are found at every call, in a strategy the compiled path covers."""
    return args is not None and args.dynamic in DYNAMIC and args.strategy in STRATEGIES


def applies(value: torch.Tensor, base_name: str, args) -> bool:
    """The compiled path takes a CPU layer input whose scales are found at run time, in a strategy it covers, where
    no gradient is to flow through it (the kernel has no backward)."""
    return (
        base_name == "input"
        and not value.requires_grad
        and value.device.type == "cpu"
        and value.numel() > 0
        and dynamic(args)
        and _state["failed"] is None
    )


def quantize_dequantize(value: torch.Tensor, global_scale: torch.Tensor | None, args) -> torch.Tensor:
    """``value`` quantized and dequantized as compressed-tensors' ``forward_quantize`` would, in one compiled pass
    (its package built first where none is). An input of a decode step's size runs on this thread alone
    (ONE_THREAD)."""
    width = _width(value, args)
    return _run(_kernel(args, value.dtype, width, global_scale, make=True), value, global_scale, width)


def _width(value: torch.Tensor, args) -> int:
    """The kernel's row: one group where groups divide the input's width (so one kernel serves every width), else
    the whole width."""
    width = value.shape[-1]
    return args.group_size if args.group_size and width % args.group_size == 0 else width


def _run(kernel: Kernel, value: torch.Tensor, global_scale: torch.Tensor | None, width: int) -> torch.Tensor:
    rows = value.reshape(1, -1, width).contiguous()
    threads = torch.get_num_threads()
    if value.numel() > ONE_THREAD or threads == 1:
        return kernel(rows, global_scale).reshape(value.shape)
    torch.set_num_threads(1)  # the same kernel: its OpenMP regions take their size from this at each call
    try:
        return kernel(rows, global_scale).reshape(value.shape)
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
        if _last:
            earlier = _last[0]
            if earlier[0] not in _shares:  # learned at the call after its first: does the next layer take its input
                _shares[earlier[0]] = earlier[1] is value
            if _same_input(earlier, value, args, global_scale):
                return _last[1]  # q, k and v (gate and up) quantize the same input in the same format
        result = _compiled_result(value, global_scale, args)
        if result is None:
            result = library(module, value, base_name, args)
        keep = _shares.get(module, True)  # o_proj's and down_proj's inputs go to no other layer
        _last[:] = [(module, value, value.shape, _snapshot(value), args, global_scale), result] if keep else []
        return result

    forward.forward_quantize = forward_quantize
    _state["installed"] = True


def _compiled_result(value: torch.Tensor, global_scale: torch.Tensor | None, args) -> torch.Tensor | None:
    """``value`` through the compiled kernel where its package is on disk or the eager work so far pays for building
    it (_earned); None where the library's eager path is to run, or compiling fails here (said once)."""
    width = _width(value, args)
    try:
        kernel = _kernel(args, value.dtype, width, global_scale, make=False)
        if kernel is None and _earned(value):
            kernel = _kernel(args, value.dtype, width, global_scale, make=True)
        return None if kernel is None else _run(kernel, value, global_scale, width)
    except Exception as failure:  # no C++ compiler, or inductor refusing this machine: the eager path
        _state["failed"] = one_line(failure)
        line = f"numprec: activations quantized in eager torch (compiling failed: {_state['failed']})"
        tqdm.write(line, file=sys.stderr)
        return None


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
        return f"compressed-tensors' eager torch (compiling failed: {_state['failed']})"
    return KERNEL
